"""The profiled REML/ML criterion of a linear mixed model and its gradient over ``θ``.

``d(θ) = -2ℓ(θ)`` with ``β`` and ``σ²`` profiled out (formulas in :mod:`scoremix.lme.factor`),
evaluated from the blocked factor of :func:`~scoremix.lme.factor.factorize`.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla

from scoremix.lme.crossprod import CrossProducts
from scoremix.lme.factor import _solve_lower_t, factorize, inverse_upper
from scoremix.lme.relcov import lambda_rest, rest_scale, theta_to_T

__all__ = ["profiled_deviance", "has_analytic_gradient", "profiled_deviance_grad"]


def profiled_deviance(theta: np.ndarray, cp: CrossProducts, reml: bool,
                      rho: np.ndarray | None = None) -> float:
    """Profiled deviance ``-2ℓ_ML(θ)`` or REML criterion ``-2ℓ_REML(θ)`` (σ² and β profiled
    out), see :mod:`scoremix.lme.factor` for the formulas.

    Parameters
    ----------
    theta:
        relative covariance parameters in lme4's order.
    cp:
        cross-products from :func:`~scoremix.lme.crossprod.crossproducts`.
    reml:
        REML criterion (``True``) or ML deviance (``False``).
    rho:
        relative residual variances per dispersion level (``ρ_0 = 1``); ``None`` for a
        homoscedastic model.

    Returns
    -------
    float
        the criterion; ``inf`` where the system is numerically singular.
    """
    try:
        return factorize(theta, cp, rho, need_lr1=False, sparse_ok=True).deviance(reml)
    except np.linalg.LinAlgError:
        return np.inf


def has_analytic_gradient(cp: CrossProducts) -> bool:
    """Whether :func:`profiled_deviance_grad` applies: the residual variance is homoscedastic
    (any random terms, scalar or vector-valued)."""
    return cp.n_disp == 1


def profiled_deviance_grad(theta: np.ndarray, cp: CrossProducts, reml: bool,
                           singular: str = "raise") -> tuple[float, np.ndarray]:
    """Profiled criterion ``d(θ)`` and its analytic gradient ``∂d/∂θ``.

    Let ``M = G'CG + J`` be the augmented system without the ``y`` row (``C`` the
    cross-products of ``[Z X]``, ``G = diag(Λ_θ, I_p)``, ``J = diag(I_q, 0)``; for the ML
    deviance only its ``Z`` part ``A = Λ'Z'WZΛ + I``), so that ``d = log|M| + ν log r²_θ +
    const`` with ``ν = n − p`` (REML) or ``n`` (ML).  For ``θ_i = (T_k)_{ab}`` (``a ≥ b``)
    and ``T_k`` invertible, ``∂Λ/∂θ_i = Λ F_i`` with ``F_i = I_{n_k} ⊗ T_k^{-1} e_a e_b'``
    (zero outside term ``k``), hence ``∂M = F_i'(M − J) + (M − J)F_i`` and

    .. math::

        \\frac{\\partial d}{\\partial (T_k)_{ab}} =
        2\\left[(n_k I - S_k)\\,T_k^{-1}\\right]_{ba}
        - \\frac{2\\nu}{r^2_\\theta}\\left[T_k^{-\\top} \\hat U_k'\\hat U_k\\right]_{ab},

    where ``S_k = Σ_l [M^{-1}]_{ll}`` is the sum of the ``p_k × p_k`` diagonal blocks of
    ``M^{-1}`` belonging to term ``k`` and ``Û_k`` the ``n_k × p_k`` conditional modes ``û``
    of the term.  The ``r²`` part is the envelope theorem with the normal equations
    ``Λ'Z'W r = û`` (``∂r² = −2 r'WZ(∂Λ)û = −2 û'F_i û``).  For scalar terms this is
    ``2/θ_k (q_k − tr_k(M^{-1}) − ν‖û_k‖²/r²)``.

    The diagonal blocks come from the blocked factor (:mod:`scoremix.lme.factor`): with the
    Schur complement ``S = L_rr L_rr'`` of the rest rows, ``[M^{-1}]_{rest} = S^{-1} =
    L_rr^{-T} L_rr^{-1}`` (one triangular inverse, LAPACK ``dtrtri``) and, for term 1,
    ``Σ_l L_l^{-T}L_l^{-1} + Σ_l ‖L_rr^{-1} K_l‖²`` with
    ``K_l = Λ_r' A_{r1,l} T_1 (T_1'A_{11,l}T_1 + I)^{-1}`` (sparse when ``A_r1`` is, so
    ``L_rr^{-1} K`` costs ``nnz(K)`` times the size of the rest block).

    The formula needs ``T_k`` invertible only for the components of term ``k`` itself.  With
    ``singular="partial"`` a term with a diagonal ``θ ≤ 0`` does not stop the others: a
    scalar term at ``θ_k = 0`` gets its exact derivative 0 (the criterion is even in a
    scalar ``θ_k``), the components of a singular vector-valued term are ``NaN`` (for the
    caller to difference numerically).

    Raises
    ------
    ValueError
        for a dispersion model (see :func:`has_analytic_gradient`) or, with
        ``singular="raise"`` (default), when a diagonal element of some ``T_k`` is ``≤ 0``
        (``T_k`` singular).
    """
    theta = np.atleast_1d(np.asarray(theta, dtype=float))
    if not has_analytic_gradient(cp):
        raise ValueError("the analytic gradient needs a homoscedastic model (no dispersion levels)")
    if singular not in ("raise", "partial"):
        raise ValueError(f"singular must be 'raise' or 'partial', not {singular!r}")
    T = theta_to_T(theta, cp.term_p)
    ok = [bool(np.all(np.diag(Tk) > 0)) for Tk in T]
    if singular == "raise":
        for k, Tk in enumerate(T):
            if not ok[k]:
                raise ValueError(f"the analytic gradient needs every diagonal θ > 0 (term {k + 1} "
                                 f"has {np.diag(Tk).tolist()})")
    if all(ok) and all(p == 1 for p in cp.term_p):
        return _grad_scalar(theta, cp, reml)
    return _grad_vector(theta, T, cp, reml, ok)


def _lower_inverse(L: np.ndarray) -> np.ndarray:
    """``L^{-1}`` of a lower-triangular ``L`` (LAPACK ``dtrtri``; C-ordered ``L`` is read as
    the Fortran-ordered upper-triangular ``L'``, whose inverse is ``L^{-T}``)."""
    if L.shape[0] == 0:
        return np.zeros((0, 0))
    Ui, info = sla.lapack.dtrtri(np.asfortranarray(L.T), lower=0)
    if info != 0:
        raise np.linalg.LinAlgError(f"dtrtri failed (info={info})")
    return Ui.T


def _grad_vector(theta: np.ndarray, T: list[np.ndarray], cp: CrossProducts, reml: bool,
                 ok: list[bool] | None = None) -> tuple[float, np.ndarray]:
    """:func:`profiled_deviance_grad` for any random terms (see there for the formulas)."""
    sparse = cp.ar1_sparse()
    f = factorize(theta, cp, need_lr1=sparse is None, sparse_ok=True)
    crit = f.deviance(reml)
    n1, p1 = cp.term_nlev[0], cp.term_p[0]
    q1 = n1 * p1
    qr, p = cp.q_rest, cp.p
    mz = qr + p
    md = mz if reml else qr
    m = cp.Arr.shape[1]
    r2 = f.pwrss
    nu = (cp.n - p) if reml else cp.n
    # conditional modes û: L'v = c (c = the y row of the factor)
    x_rest = f.rest_modes(mz)
    L11invT = f.L11inv.transpose(0, 2, 1)
    S11inv = L11invT @ f.L11inv                                    # (T1'A11_l T1 + I)^{-1}
    if sparse is None:
        Lr1 = f.Lr1
        rhs = (Lr1[-1] - Lr1[:mz].T @ x_rest).reshape(n1, p1)
        u1 = (L11invT @ rhs[:, :, None])[:, :, 0]
    else:
        A = sparse[0]
        z = np.zeros(m)
        z[:mz] = -lambda_rest(x_rest, T, cp.term_p, cp.term_nlev)
        z[-1] = 1.0
        a = (A.T @ z).reshape(n1, p1) @ T[0]                         # T1' (Ar1_l' z)
        u1 = np.einsum("lab,lb->la", S11inv, a)
    Ssum = [S11inv.sum(axis=0)]
    pos = 0
    U = [u1]
    if sparse is None:
        # S = L L' (first md rows); diagonal blocks of S^{-1} = L^{-T}L^{-1} from L^{-1}
        Linv = _lower_inverse(f.Lrr[:md, :md])
        if md:
            K3 = Lr1[:md].reshape(md, n1, 1, p1) @ f.L11inv             # K_l, level by level
            W = (Linv @ K3.reshape(md, q1)).reshape(md * n1, p1)        # L^{-1} K_l, stacked
            Ssum[0] = Ssum[0] + W.T @ W

        def block_sums(lo: int, pk: int, nk: int) -> np.ndarray:
            Sk = np.zeros((pk, pk))
            end = lo + nk * pk
            for aa in range(pk):
                for bb in range(aa, pk):
                    Sk[aa, bb] = Sk[bb, aa] = float(np.sum(Linv[:, lo + aa:end:pk]
                                                           * Linv[:, lo + bb:end:pk]))
            return Sk
    else:
        # Z = S^{-1} (upper triangle, LAPACK dpotri on the factor's first md rows):
        # Σ_l K_l' Z K_l = Σ_ij Z_ij (K_a K_b')_ij over the sparse K_a K_b'
        Zu = f.rest_inverse(md) if md else np.zeros((0, 0))
        if md:
            import scipy.sparse as sp
            acc = np.empty((p1, p1))
            asm = f.sparse[1].extra.get("assembler") if f.sparse is not None else None
            if asm is None or p1 != 1:
                Lam = _lambda_rest_sparse(T, cp, md)
                D = sp.bsr_matrix((np.einsum("ab,lbc->lac", T[0], S11inv), np.arange(n1),
                                   np.arange(n1 + 1)), shape=(q1, q1))
                K = (Lam.T @ A[:md] @ D).tocsc()                        # md × q1, sparse
            if asm is not None and p1 == 1:
                # K K' = Λ_r' A diag(θ_1²/l_j⁴) A' Λ_r: the adjoint of the factor's assembly
                acc[0, 0] = asm.trace_downdate(Zu, (T[0][0, 0] * S11inv[:, 0, 0]) ** 2, T)
            elif hasattr(Zu, "quad_trace"):
                # selected inverse: Σ_s k_s' Z k_s column by column (compiled), the
                # cross terms by polarisation
                Kc = [K[:, aa::p1].tocsc() for aa in range(p1)]
                for aa in range(p1):
                    acc[aa, aa] = Zu.quad_trace(Kc[aa])
                for aa in range(p1):
                    for bb in range(aa + 1, p1):
                        acc[aa, bb] = acc[bb, aa] = 0.5 * (Zu.quad_trace(Kc[aa] + Kc[bb])
                                                           - acc[aa, aa] - acc[bb, bb])
            else:
                for aa in range(p1):
                    Ka = K[:, aa::p1].tocsr()
                    for bb in range(aa, p1):
                        C = (Ka @ K[:, bb::p1].T.tocsc()).tocoo()
                        lo, hi = np.minimum(C.row, C.col), np.maximum(C.row, C.col)
                        acc[aa, bb] = acc[bb, aa] = float(np.dot(Zu[lo, hi], C.data))
            Ssum[0] = Ssum[0] + acc

        def block_sums(lo: int, pk: int, nk: int) -> np.ndarray:
            Sk = np.zeros((pk, pk))
            r = lo + np.arange(nk) * pk
            for aa in range(pk):
                for bb in range(aa, pk):
                    Sk[aa, bb] = Sk[bb, aa] = float(np.sum(Zu[r + aa, r + bb]))
            return Sk
    for k in range(1, len(cp.term_p)):
        pk, nk = cp.term_p[k], cp.term_nlev[k]
        Ssum.append(block_sums(pos, pk, nk) if md else np.zeros((pk, pk)))
        U.append(x_rest[pos: pos + nk * pk].reshape(nk, pk))
        pos += nk * pk
    g = []
    for k, Tk in enumerate(T):
        pk, nk = Tk.shape[0], cp.term_nlev[k]
        if ok is not None and not ok[k]:
            # singular T_k: exact 0 for a scalar term at θ_k = 0 (even in θ_k), else unknown
            g.extend([0.0 if pk == 1 and Tk[0, 0] == 0.0 else np.nan] * (pk * (pk + 1) // 2))
            continue
        Tinv = 1.0 / Tk if pk == 1 else _lower_inverse(Tk)
        Gld = 2.0 * (nk * np.eye(pk) - Ssum[k]) @ Tinv             # entry (b, a)
        Gr = (2.0 * nu / r2) * (Tinv.T @ (U[k].T @ U[k]))            # entry (a, b)
        for j in range(pk):
            for i in range(j, pk):
                g.append(Gld[j, i] - Gr[i, j])
    return crit, np.asarray(g)


def _lambda_rest_sparse(T: list[np.ndarray], cp: CrossProducts, md: int):
    """``Λ_rest`` restricted to the first ``md`` rest rows, as a sparse ``md × md`` matrix."""
    import scipy.sparse as sp
    blocks = []
    for k in range(1, len(cp.term_p)):
        blocks.append(sp.kron(sp.identity(cp.term_nlev[k], format="csr"), sp.csr_matrix(T[k])))
    extra = md - cp.q_rest
    if extra:
        blocks.append(sp.identity(extra, format="csr"))
    return sp.block_diag(blocks, format="csr") if blocks else sp.csr_matrix((0, 0))


def _grad_scalar(theta: np.ndarray, cp: CrossProducts, reml: bool) -> tuple[float, np.ndarray]:
    """Profiled criterion and its analytic gradient for models with scalar random terms.

    With ``Λ = ⊕_k θ_k I_{q_k}`` and ``θ_k > 0`` the criterion's derivatives are

    .. math::

        \\frac{\\partial d}{\\partial\\theta_k} = \\frac{2}{\\theta_k}\\left(q_k -
        \\operatorname{tr}_k(\\mathcal A^{-1}) - \\nu\\,\\frac{\\lVert\\hat u_k\\rVert^2}
        {r^2_\\theta}\\right),

    where ``tr_k`` is the trace of the term-``k`` diagonal block of the inverse of
    ``𝒜 = Λ'Z'WZΛ + I`` (ML, ``ν = n``) or of the augmented ``[[𝒜, Λ'Z'WX], [X'WZΛ,
    X'WX]]`` (REML, ``ν = n − p``), and ``û_k`` the conditional modes of term ``k``.  (The
    log-determinant part follows from ``∂𝒜/∂θ_k = θ_k^{-1}(E_k(𝒜 − J) + (𝒜 − J)E_k)``; the
    ``r²`` part from the envelope theorem and the normal equations
    ``Λ'Z'W r = û``.)  The traces use ``diag(L⁻ᵀL⁻¹)`` of the blocked factor: for term 1,
    ``Σ_j l_j^{-2} + tr(S^{-1} L_{r1} D^{-2} L_{r1}')``, for the other terms the diagonal of
    ``S^{-1}``, ``S`` the rest block's Schur complement.

    Raises
    ------
    ValueError
        when the model is not covered (see :func:`has_analytic_gradient`) or a ``θ_k ≤ 0``.
    """
    f = factorize(theta, cp, need_lr1=False, sparse_ok=True)
    crit = f.deviance(reml)
    n1, qr, p = cp.term_nlev[0], cp.q_rest, cp.p
    l = f.L11[:, 0, 0]
    t1 = theta[0]
    Ar1 = cp.Ar1[0]
    m = Ar1.shape[0]
    lam = rest_scale(theta, cp.term_nlev, m)
    mz = qr + p  # rows of the factor without the y row
    # conditional modes: solve L' v = c (c = the y row of the factor)
    x_rest = f.rest_modes(mz)
    c1 = Ar1[-1] * (t1 / l)
    Bt_x = (t1 / l) * (Ar1[:mz].T @ (lam[:mz] * x_rest))
    u1 = (c1 - Bt_x) / l
    r2 = f.pwrss
    # traces of the inverse
    md = mz if reml else qr
    w4 = t1 * t1 / l ** 4
    ps = cp.pair_structure()
    tr = np.empty(len(cp.term_p))
    tr[0] = float(np.sum(1.0 / l ** 2))
    if md:
        if ps is not None:
            # tr(S⁻¹K) over the structurally non-zero pairs of K (lower triangle, i ≥ j, i < md)
            Kv = ps.P @ w4
            sel = ps.rows < md
            ri, ci = ps.rows[sel], ps.cols[sel]
            Kv = Kv[sel] * lam[ri] * lam[ci]
            Kv[ri != ci] *= 2.0
            # the upper triangle of S⁻¹ (dense: LAPACK dpotri; sparse factor: the selected
            # inverse, exact on these pairs, which lie in the pattern of L)
            Sinv = f.rest_inverse(md)
            dS = Sinv.diagonal()[:md].copy()
            tr[0] += float(np.dot(Sinv[ci, ri], Kv))
        elif f.sparse is not None:
            # selected inverse (full, symmetric on the pattern of L ⊇ the pattern of K)
            # tr(S⁻¹K) = Σ_j k_j' S⁻¹ k_j over the columns of Λ_r A_r1 diag(θ_1/l_j²)
            Sinv = f.rest_inverse(md)
            dS = Sinv.diagonal()[:md].copy()
            A = cp.ar1_sparse()[0]
            B = A[:md].multiply(lam[:md, None]).multiply(np.sqrt(w4)[None, :])
            tr[0] += Sinv.quad_trace(B)
        else:
            # S⁻¹ = L⁻ᵀL⁻¹: diag(S⁻¹) are the column sums of (L⁻¹)², and with
            # K = B B' (B = Λ_r Ar1 diag(θ_1/l_j²)), tr(S⁻¹K) = ‖L⁻¹B‖_F²
            Linv = _lower_inverse(f.Lrr[:md, :md])
            dS = np.einsum("ij,ij->j", Linv, Linv)
            sparse = cp.ar1_sparse()
            if sparse is not None:
                A = sparse[0]
                K = (A.multiply(w4[None, :]).tocsr() @ A.T.tocsr()).toarray()[:md, :md]
                K *= lam[:md, None] * lam[None, :md]
                tr[0] += float(np.sum((Linv.T @ Linv) * K))
            else:
                W = Linv @ (Ar1[:md] * (t1 / l ** 2)[None, :] * lam[:md, None])
                tr[0] += float(np.einsum("ij,ij->", W, W))
        pos = 0
        for k in range(1, len(cp.term_p)):
            tr[k] = float(np.sum(dS[pos: pos + cp.term_nlev[k]]))
            pos += cp.term_nlev[k]
    nu = (cp.n - p) if reml else cp.n
    usq = np.empty(len(cp.term_p))
    usq[0] = float(u1 @ u1)
    pos = 0
    for k in range(1, len(cp.term_p)):
        uk = x_rest[pos: pos + cp.term_nlev[k]]
        usq[k] = float(uk @ uk)
        pos += cp.term_nlev[k]
    q = np.asarray(cp.term_nlev, float)
    g = 2.0 / theta * (q - tr - nu * usq / r2)
    return crit, g
