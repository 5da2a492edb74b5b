"""Blocked Cholesky factorisation of the augmented mixed-model system at one ``θ`` (and ``ρ``).

For fixed ``θ`` let ``L_θ`` be the Cholesky factor of the augmented system

.. math::

    \\begin{pmatrix} \\Lambda'Z'WZ\\Lambda + I & \\Lambda'Z'WX & \\Lambda'Z'Wy\\\\
    X'WZ\\Lambda & X'WX & X'Wy\\\\ y'WZ\\Lambda & y'WX & y'Wy\\end{pmatrix}
    = \\begin{pmatrix} L_Z & & \\\\ L_{XZ} & R_X & \\\\ c_u' & c_\\beta' & r_\\theta
    \\end{pmatrix}\\begin{pmatrix} L_Z & & \\\\ L_{XZ} & R_X & \\\\ c_u' & c_\\beta' &
    r_\\theta\\end{pmatrix}'.

``r_θ²`` is the penalised weighted residual sum of squares at the conditional estimates, and
the profiled deviances are (``n`` rows, ``p`` fixed effects)

.. math::

    -2\\ell_{ML}(\\theta) = \\log|L_Z|^2 + n\\left(1 + \\log\\frac{2\\pi r_\\theta^2}{n}\\right)
    - \\sum_i \\log W_{ii},

    -2\\ell_{REML}(\\theta) = \\log|L_Z|^2 + \\log|R_X|^2 + (n-p)\\left(1 +
    \\log\\frac{2\\pi r_\\theta^2}{n-p}\\right) - \\sum_i \\log W_{ii}.

The factor is blocked as the cross-products (:mod:`scoremix.lme.crossprod`): term 1 gives
``n_1`` diagonal ``p_1 × p_1`` blocks ``L_11`` (a batched Cholesky), the rest rows
``[Z_2 … Z_K X y]`` give ``L_r1 = Λ_r' A_r1 blockdiag(T_1 L_l^{-T})`` and the dense Cholesky
``L_rr`` of the Schur complement ``Λ_r'(A_rr − A_r1 D A_r1')Λ_r + I_q``.  A sparse ``A_r1``
(:meth:`~scoremix.lme.crossprod.CrossProducts.ar1_sparse`) forms the downdate sparsely, with
the pair structure of :mod:`scoremix.lme.pairs` for scalar terms.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from scoremix.lme.crossprod import CrossProducts
from scoremix.lme.pairs import PairStructure
from scoremix.lme.relcov import rest_scale, scale_rest_rows, scale_rest_sym, theta_to_T

__all__ = ["Factorization", "factorize", "combine_dispersion", "batched_cholesky_inverse",
           "inverse_upper", "last_factor"]


@dataclass
class Factorization:
    """The blocked Cholesky factor of the augmented system at one ``θ`` (and ``ρ``).

    ``L11`` are the ``n_1`` diagonal ``p_1 × p_1`` blocks of term 1, ``L11inv`` their
    inverses, ``Lr1 = C L_11^{-T}`` the rows ``[Z_2 … X y]`` below them (``None`` when
    :func:`factorize` was called with ``need_lr1=False`` on the sparse path) and ``Lrr`` the
    dense Cholesky factor of the Schur complement of the rest block.
    """

    T: list[np.ndarray]
    L11: np.ndarray
    L11inv: np.ndarray
    Lr1: np.ndarray
    Lrr: np.ndarray
    q_rest: int
    p: int
    n: int
    ldW: float
    #: the supernodal factor ``(Lp, symbolic)`` of :mod:`scoremix.lme.sparse_chol` (in its
    #: permuted order) when :func:`factorize` used it; ``Lrr`` is then ``None``
    sparse: tuple | None = None

    def _rest_diag(self) -> np.ndarray:
        # the sparse factor permutes the Z rows only: X and y keep their positions
        return np.diagonal(self.Lrr if self.sparse is None else self.sparse[0])

    @property
    def ldL2(self) -> float:
        """``log|L_Z|²``."""
        d1 = np.diagonal(self.L11, axis1=1, axis2=2)
        dr = self._rest_diag()[: self.q_rest]
        return float(2 * np.log(d1).sum() + 2 * np.log(dr).sum())

    @property
    def ldRX2(self) -> float:
        """``log|R_X|²``."""
        d = self._rest_diag()[self.q_rest: self.q_rest + self.p]
        return float(2 * np.log(d).sum())

    @property
    def pwrss(self) -> float:
        """``r_θ²``: penalised weighted residual sum of squares."""
        return float(self._rest_diag()[-1] ** 2)

    def rest_modes(self, mz: int) -> np.ndarray:
        """The conditional modes of the first ``mz`` rest rows (original order): ``x`` with
        ``L'x = c``, ``L`` the factor's leading ``mz`` rows and ``c`` its ``y`` row there."""
        if self.sparse is None:
            return _solve_lower_t(self.Lrr, mz)
        from scoremix.lme import sparse_chol
        Lp, sym = self.sparse
        xp = sparse_chol.solve_lt(Lp, sym, Lp[-1, :mz], mz)
        out = np.empty(mz)
        out[sym.perm[:mz]] = xp
        return out

    def rest_inverse(self, md: int) -> np.ndarray:
        """``(L L')^{-1}`` of the factor's leading ``md`` rest rows (``md ≥ q_rest``), in
        the original order: a dense array with (at least) its upper triangle filled, or,
        from the sparse factor, a :class:`~scoremix.lme.sparse_chol.SelectedInverse` (read
        ``Z[i, j]`` with index arrays, ``.diagonal()``, ``.quad_trace(K)``) that is exact on
        the pattern of ``L`` — which holds every within-level block and every pair of rows
        coupled by ``A_rr`` or ``A_r1 A_r1'`` — and meaningless elsewhere."""
        if self.sparse is None:
            return inverse_upper(self.Lrr[:md, :md])
        from scoremix.lme import sparse_chol
        Lp, sym = self.sparse
        return sparse_chol.selected_inverse(Lp, sym, md)

    def deviance(self, reml: bool) -> float:
        """Profiled deviance (ML) or REML criterion, see the module docstring."""
        n, p = self.n, self.p
        r2 = self.pwrss
        if r2 <= 0:
            return np.inf
        if reml:
            nmp = n - p
            return self.ldL2 + self.ldRX2 + nmp * (1 + np.log(2 * np.pi * r2 / nmp)) - self.ldW
        return self.ldL2 + n * (1 + np.log(2 * np.pi * r2 / n)) - self.ldW


def batched_cholesky_inverse(S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower Cholesky factors ``L_l`` (``S_l = L_l L_l'``) of a stack ``S`` of ``n × p × p``
    symmetric positive-definite matrices and their inverses ``L_l^{-1}``.

    ``p = 2`` (the most common vector-valued random term) uses the closed form
    ``L = [[a, 0], [b, c]]``, ``a = √s_11``, ``b = s_21/a``, ``c = √(s_22 − b²)``,
    ``L^{-1} = [[1/a, 0], [−b/(ac), 1/c]]`` (the arithmetic of LAPACK's ``dpotrf``, without
    the per-call overhead); other sizes use numpy's batched Cholesky and inverse.

    Raises
    ------
    numpy.linalg.LinAlgError
        when some ``S_l`` is not positive definite.
    """
    if S.shape[-1] != 2:
        L = np.linalg.cholesky(S)
        return L, np.linalg.inv(L)
    s11, s21, s22 = S[:, 0, 0], S[:, 1, 0], S[:, 1, 1]
    if not np.all(s11 > 0):
        raise np.linalg.LinAlgError("Matrix is not positive definite")
    a = np.sqrt(s11)
    b = s21 / a
    c2 = s22 - b * b
    if not np.all(c2 > 0):
        raise np.linalg.LinAlgError("Matrix is not positive definite")
    c = np.sqrt(c2)
    L = np.zeros_like(S)
    L[:, 0, 0] = a
    L[:, 1, 0] = b
    L[:, 1, 1] = c
    Li = np.zeros_like(S)
    Li[:, 0, 0] = 1.0 / a
    Li[:, 1, 0] = -b / (a * c)
    Li[:, 1, 1] = 1.0 / c
    return L, Li


def combine_dispersion(cp: CrossProducts, rho: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    if cp.n_disp == 1:
        if rho is not None and len(rho) not in (0, 1):
            raise ValueError("relative variances given for a homoscedastic model")
        return cp.A11[0], cp.Ar1[0], cp.Arr[0], cp.sum_log_w
    if rho is None or len(rho) != cp.n_disp:
        raise ValueError(f"the model has {cp.n_disp} dispersion levels; give that many relative variances")
    inv = 1.0 / np.asarray(rho, float)
    A11 = np.tensordot(inv, cp.A11, axes=1)
    Ar1 = np.tensordot(inv, cp.Ar1, axes=1)
    Arr = np.tensordot(inv, cp.Arr, axes=1)
    ldW = cp.sum_log_w - float(np.dot(cp.n_by, np.log(rho)))
    return A11, Ar1, Arr, ldW



def _downdate_sparse(cp: CrossProducts, rho: np.ndarray | None, T1: np.ndarray,
                     A11: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``Ar1 · blockdiag(T_1 (T_1'A11_l T_1 + I)^{-1} T_1') · Ar1'`` (dense ``m × m``) with the
    cached sparse ``Ar1``, plus ``L11`` and its inverse; ``None`` when the dense path is
    used."""
    mats = cp.ar1_sparse()
    if mats is None:
        return None
    import scipy.sparse as sp
    if cp.n_disp == 1:
        A = mats[0]
    else:
        inv = 1.0 / np.asarray(rho, float)
        A = mats[0] * inv[0]
        for d in range(1, cp.n_disp):
            A = A + mats[d] * inv[d]
        A = A.tocsr()
    p1, n1 = cp.term_p[0], cp.term_nlev[0]
    if p1 == 1:
        t = T1[0, 0]
        dd = A11[:, 0, 0] * t * t + 1.0
        L11 = np.sqrt(dd)[:, None, None]
        L11inv = 1.0 / L11
        B = A.multiply((t * t / dd)[None, :]).tocsr()
    else:
        L11, L11inv = batched_cholesky_inverse((T1.T @ A11 @ T1) + np.eye(p1))
        F = np.einsum("ab,lcb->lac", T1, L11inv)  # T_1 L_l^{-T}
        blocks = np.einsum("lab,lcb->lac", F, F)   # T_1 S11_l^{-1} T_1'
        M = sp.bsr_matrix((blocks, np.arange(n1), np.arange(n1 + 1)), shape=(n1 * p1, n1 * p1))
        B = (A @ M).tocsr()
    G = (B @ A.T.tocsr()).toarray()
    return G, L11, L11inv


def factorize(theta: np.ndarray, cp: CrossProducts, rho: np.ndarray | None = None,
              need_lr1: bool = True, sparse_ok: bool = False) -> Factorization:
    """Blocked Cholesky factorisation of the augmented system at ``θ`` (and relative
    residual variances ``ρ`` for a dispersion model).

    Parameters
    ----------
    need_lr1:
        also form the dense off-diagonal block ``Lr1`` (needed for the conditional
        estimates; the criterion only needs ``L11`` and ``Lrr``).  With a sparse ``Ar1``
        (see :meth:`CrossProducts.ar1_sparse`) and ``need_lr1=False``, ``Lr1`` is ``None``.
    sparse_ok:
        with ``need_lr1=False``, factor the rest block by the supernodal sparse Cholesky of
        :mod:`scoremix.lme.sparse_chol` when :func:`rest_symbolic` finds it cheaper (then
        ``Lrr`` is ``None`` and ``sparse`` holds the factor; read it through
        :attr:`Factorization.ldL2`, :meth:`~Factorization.rest_modes` and
        :meth:`~Factorization.rest_inverse`).

    Raises
    ------
    numpy.linalg.LinAlgError
        when the rest block is not positive definite (e.g. a perfect fit).
    """
    theta = np.atleast_1d(np.asarray(theta, dtype=float))
    T = theta_to_T(theta, cp.term_p)
    p1, n1 = cp.term_p[0], cp.term_nlev[0]
    T1 = T[0]
    qr = cp.q_rest
    if sparse_ok and not need_lr1:
        sym = rest_symbolic(cp)
        if sym is not None:
            # the factor at the last θ is kept: the estimates at the optimum re-use the
            # optimiser's last evaluation there (see :func:`last_factor`)
            key = (theta.tobytes(), None if rho is None else np.asarray(rho, float).tobytes())
            f = _factorize_supernodal(T, cp, rho, sym)
            sym.extra["last_factor"] = (key, f)
            return f
    ps = cp.pair_structure()
    if ps is not None:
        return _factorize_pairs(theta, T, cp, ps, rho, need_lr1)
    if cp.n_disp == 1 or cp.ar1_sparse() is None:
        A11, Ar1, Arr, ldW = combine_dispersion(cp, rho)
    else:  # combine A11, Arr densely; Ar1 is combined sparsely
        A11, Arr, ldW = _combine_small(cp, rho)
        Ar1 = None
    sparse_out = _downdate_sparse(cp, rho, T1, A11)
    if sparse_out is not None:
        # Schur complement: Λr'(Arr − Ar1 D Ar1')Λr + I, with the sparse downdate
        G, L11, L11inv = sparse_out
        G *= -1.0
        G += Arr
        S = scale_rest_sym(G, T, cp.term_p, cp.term_nlev)
        Lrr = _cholesky_rest(S, qr)
        Lr1 = None
        if need_lr1:
            if Ar1 is None:
                Ar1 = combine_dispersion(cp, rho)[1]
            Lr1 = scale_rest_rows(_lr1_dense(Ar1, T1, L11, L11inv, n1, p1), T, cp.term_p, cp.term_nlev)
        return Factorization(T=T, L11=L11, L11inv=L11inv, Lr1=Lr1, Lrr=Lrr, q_rest=qr, p=cp.p,
                             n=cp.n, ldW=ldW)
    # term 1: T1' A11_l T1 + I, batched
    if p1 == 1:
        t = T1[0, 0]
        d = A11[:, 0, 0] * t * t + 1.0
        L11 = np.sqrt(d)[:, None, None]
        L11inv = 1.0 / L11
    else:
        L11, L11inv = batched_cholesky_inverse((T1.T @ A11 @ T1) + np.eye(p1))
    Lr1 = scale_rest_rows(_lr1_dense(Ar1, T1, L11, L11inv, n1, p1), T, cp.term_p, cp.term_nlev)
    S = _scale_both(Arr, T, cp)
    S -= Lr1 @ Lr1.T
    Lrr = _cholesky_rest(S, qr)
    return Factorization(T=T, L11=L11, L11inv=L11inv, Lr1=Lr1, Lrr=Lrr, q_rest=qr, p=cp.p,
                         n=cp.n, ldW=ldW)



def last_factor(theta: np.ndarray, cp: CrossProducts,
                rho: np.ndarray | None = None) -> "Factorization | None":
    """The supernodal factor of the last :func:`factorize` call on ``cp`` (with
    ``sparse_ok=True, need_lr1=False``) when it was at exactly this ``θ`` (and ``ρ``), else
    ``None``."""
    sym = cp._rest_sym
    if not sym:
        return None
    hit = sym.extra.get("last_factor")
    theta = np.atleast_1d(np.asarray(theta, dtype=float))
    key = (theta.tobytes(), None if rho is None else np.asarray(rho, float).tobytes())
    return hit[1] if hit is not None and hit[0] == key else None


def rest_symbolic(cp: CrossProducts):
    """The cached :class:`~scoremix.lme.sparse_chol.RestSymbolic` of ``cp``'s rest block, or
    ``None`` when the dense factor is used: numba missing, a dense ``A_r1`` (no
    :meth:`~CrossProducts.ar1_sparse`), ``q_2+…+q_K`` outside
    ``[sparse_chol.MIN_SIZE, sparse_chol.MAX_SIZE]`` or a sparse factor that would need more
    than ``sparse_chol.MAX_FLOP_SHARE`` of the dense factor's flops.

    The pattern of the ``Z`` rows of the Schur complement is that of ``A_rr`` (every
    dispersion level) and of ``A_r1 A_r1'``, closed over the levels of each vector-valued
    term as ``Λ_k = I ⊗ T_k`` mixes a level's columns (``T_k`` lower triangular: column
    ``a`` of a level collects the columns ``a' ≥ a``), plus every within-level block; the
    analysis runs once per cross-products."""
    cached = cp._rest_sym
    if cached is not None:
        return cached or None
    from scoremix.lme import sparse_chol
    qr = cp.q_rest
    sym = None
    if (sparse_chol.AVAILABLE and sparse_chol.MIN_SIZE <= qr <= sparse_chol.MAX_SIZE
            and cp.ar1_sparse() is not None):
        # (one compiled pass: sparse_chol.rest_pattern)
        pat = sparse_chol.rest_pattern(cp.Arr, cp.ar1_sparse(), qr, cp.term_p, cp.term_nlev)
        cand = sparse_chol.analyse(pat, cp.Arr.shape[1])
        if cand.flops <= sparse_chol.MAX_FLOP_SHARE * cand.dense_flops():
            sym = cand
    cp._rest_sym = sym if sym is not None else False
    return sym


def _factorize_supernodal(T: list[np.ndarray], cp: CrossProducts, rho: np.ndarray | None,
                          sym) -> Factorization:
    """:func:`factorize` with the rest block's supernodal sparse factor: the downdate
    ``A_r1 D A_r1'`` (a compiled loop over the columns of the sparse ``A_r1`` for a scalar
    term 1, else the sparse product of :func:`_downdate_sparse`), the scaling by ``Λ_r``
    and the permutation in one pass (:func:`~scoremix.lme.sparse_chol.assemble`), then the
    numeric factorisation."""
    from scoremix.lme import sparse_chol
    p1 = cp.term_p[0]
    T1 = T[0]
    if cp.n_disp == 1:
        if rho is not None and len(rho) not in (0, 1):
            raise ValueError("relative variances given for a homoscedastic model")
        A11, Arr, ldW = cp.A11[0], cp.Arr[0], cp.sum_log_w
    else:
        A11, Arr, ldW = _combine_small(cp, rho)
    if p1 == 1 and cp.n_disp == 1:
        t = T1[0, 0]
        dd = A11[:, 0, 0] * t * t + 1.0
        L11 = np.sqrt(dd)[:, None, None]
        L11inv = 1.0 / L11
        asm = sym.extra.get("assembler")
        if asm is None:
            import scipy.sparse as sp
            Ac = sp.csc_matrix(cp.ar1_sparse()[0])
            Ac.sort_indices()
            asm = sym.extra["assembler"] = sparse_chol.PatternAssembler(
                Ac, Arr, sym, cp.term_p, cp.term_nlev)
        # the gradient's trace weights (t·S11_l^{-1})², computed as deviance._grad_vector
        # computes them, formed in the same pass over A_r1's row pairs
        s11 = L11inv[:, 0, 0] * L11inv[:, 0, 0]
        Lp = asm(t * t / dd, T, c2=(t * s11) ** 2)
    else:
        W, L11, L11inv = _downdate_sparse(cp, rho, T1, A11)
        W *= -1.0
        W += Arr
        Lp = sparse_chol.assemble(W, sym, T, cp.term_p, cp.term_nlev)
    Lp = sparse_chol.factor_numeric(Lp, sym, assembled=True)
    return Factorization(T=T, L11=L11, L11inv=L11inv, Lr1=None, Lrr=None, q_rest=cp.q_rest,
                         p=cp.p, n=cp.n, ldW=ldW, sparse=(Lp, sym))


def _factorize_pairs(theta: np.ndarray, T: list[np.ndarray], cp: CrossProducts,
                     ps: PairStructure, rho: np.ndarray | None, need_lr1: bool) -> Factorization:
    """:func:`factorize` for scalar random terms with a sparse ``Ar1``: the downdate
    ``Ar1 diag(θ_1²/l_j²) Ar1'`` is the pair mat-vec ``P c`` (see :class:`PairStructure`)
    scattered into the lower triangle, ``Λ_rest`` a diagonal scaling, and the Schur
    complement factored in place by LAPACK ``dpotrf``."""
    A11, Ar1, Arr, ldW = combine_dispersion(cp, rho)
    qr = cp.q_rest
    t = T[0][0, 0]
    dd = A11[:, 0, 0] * t * t + 1.0
    L11 = np.sqrt(dd)[:, None, None]
    L11inv = 1.0 / L11
    lam = rest_scale(theta, cp.term_nlev, cp.Arr.shape[1])
    S = Arr.copy()
    S.flat[ps.flat] -= ps.P @ (t * t / dd)
    S *= lam[:, None]
    S *= lam[None, :]
    S.flat[:qr * (S.shape[1] + 1):S.shape[1] + 1] += 1.0
    # S is C-ordered: its transpose is Fortran-ordered with S's lower triangle as its upper
    U, info = sla.lapack.dpotrf(S.T, lower=0, overwrite_a=1, clean=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"Schur complement not positive definite (dpotrf info={info})")
    Lrr = U.T
    Lr1 = None
    if need_lr1:
        Lr1 = _lr1_dense(Ar1, T[0], L11, L11inv, cp.term_nlev[0], 1) * lam[:, None]
    return Factorization(T=T, L11=L11, L11inv=L11inv, Lr1=Lr1, Lrr=Lrr, q_rest=qr, p=cp.p,
                         n=cp.n, ldW=ldW)


def _lr1_dense(Ar1: np.ndarray, T1: np.ndarray, L11: np.ndarray, L11inv: np.ndarray,
               n1: int, p1: int) -> np.ndarray:
    """``Ar1 · blockdiag(T_1 L_l^{-T})`` (before ``Λ_rest'`` is applied to its rows)."""
    if p1 == 1:
        return Ar1 * (T1[0, 0] / L11[:, 0, 0])[None, :]
    C = Ar1.reshape(Ar1.shape[0], n1, p1) @ T1                     # (m, n1, p1)
    return (C[:, :, None, :] @ L11inv.transpose(0, 2, 1)).reshape(Ar1.shape[0], n1 * p1)


def _combine_small(cp: CrossProducts, rho: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, float]:
    if rho is None or len(rho) != cp.n_disp:
        raise ValueError(f"the model has {cp.n_disp} dispersion levels; give that many relative variances")
    inv = 1.0 / np.asarray(rho, float)
    A11 = np.tensordot(inv, cp.A11, axes=1)
    Arr = np.tensordot(inv, cp.Arr, axes=1)
    ldW = cp.sum_log_w - float(np.dot(cp.n_by, np.log(rho)))
    return A11, Arr, ldW


def _scale_both(M: np.ndarray, T: list[np.ndarray], cp: CrossProducts) -> np.ndarray:
    """``Λ_rest' M Λ_rest`` for a symmetric rest block ``M``."""
    return scale_rest_rows(scale_rest_rows(M, T, cp.term_p, cp.term_nlev).T, T, cp.term_p,
                           cp.term_nlev).T


def _cholesky_rest(S: np.ndarray, qr: int) -> np.ndarray:
    """Lower Cholesky factor of ``S + diag(I_qr, 0)``, computed in place (LAPACK ``dpotrf``)
    on the C-ordered ``S`` (its transpose is Fortran-ordered with the lower triangle as the
    upper one)."""
    m = S.shape[0]
    S.flat[:qr * (m + 1):m + 1] += 1.0
    U, info = sla.lapack.dpotrf(S.T, lower=0, overwrite_a=1, clean=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"Schur complement not positive definite (dpotrf info={info})")
    return U.T


def _solve_lower_t(Lrr: np.ndarray, mz: int) -> np.ndarray:
    """The conditional modes of the rest rows: ``x`` with ``L'x = c``, ``L = Lrr[:mz, :mz]``
    and ``c = Lrr[-1, :mz]`` (the ``y`` row of the factor), by LAPACK ``dtrtrs``: the
    C-ordered ``L`` is read as the Fortran-ordered upper-triangular ``L'``."""
    if mz == 0:
        return np.zeros(0)
    m = Lrr.shape[0]
    r = Lrr[-1, -1]
    if mz == m - 1 and r != 0.0 and Lrr.T.flags.f_contiguous:
        # with the whole factor (no copy): L_full' w = r e_m has w = (−x, 1)
        rhs = np.zeros(m)
        rhs[-1] = r
        w, info = sla.lapack.dtrtrs(Lrr.T, rhs, lower=0)
        if info != 0:
            raise np.linalg.LinAlgError(f"dtrtrs failed (info={info})")
        return -w[:mz]
    U = np.asfortranarray(Lrr[:mz, :mz].T)
    x, info = sla.lapack.dtrtrs(U, Lrr[-1, :mz], lower=0)
    if info != 0:
        raise np.linalg.LinAlgError(f"dtrtrs failed (info={info})")
    return x


def inverse_upper(L: np.ndarray) -> np.ndarray:
    """``(L L')^{-1}`` of a lower-triangular ``L`` by LAPACK ``dpotri``, returned with only
    its upper triangle (``[i, j]``, ``i ≤ j``) filled: the C-ordered ``L`` is read as the
    Fortran-ordered upper-triangular factor ``L'``.  Costs two dense Cholesky
    factorisations (``dtrtri`` and ``dlauum``), a third of ``L^{-1}`` followed by a product."""
    if L.shape[0] == 0:
        return np.zeros((0, 0))
    Zu, info = sla.lapack.dpotri(np.array(L.T, order="F"), lower=0, overwrite_c=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"dpotri failed (info={info})")
    return Zu
