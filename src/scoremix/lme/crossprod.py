"""Weighted cross-products of ``[Z X y]`` and the profiled deviance of a linear mixed model.

The model (lme4's formulation, Bates et al. 2015, *J. Stat. Softw.* 67(1)) is

.. math::

    y = X\\beta + Z b + \\varepsilon,\\quad b = \\Lambda_\\theta u,\\quad
    u \\sim N(0, \\sigma^2 I_q),\\quad \\varepsilon \\sim N(0, \\sigma^2 W^{-1}),

with ``W = diag(w_i / ρ_{d(i)})``: prior weights ``w`` and, for a class-specific residual
variance, a relative variance ``ρ_d`` per dispersion level (``ρ_0 = 1``).

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

The cross-products are formed once (:func:`crossproducts`), blocked per random term as in
MixedModels.jl: term 1 (the one with most levels) is kept as ``n_1`` diagonal ``p_1 × p_1``
blocks, everything else (``Z_2 … Z_K``, ``X``, ``y``) as one dense "rest" block whose size does
not grow with the number of rows.  Each θ evaluation then costs a batched ``p_1 × p_1``
Cholesky plus one dense Cholesky of the rest block.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import scipy.linalg as sla

from scoremix.lme.spec import ModelSpec

__all__ = [
    "CrossProducts",
    "crossproducts",
    "theta_to_T",
    "Factorization",
    "factorize",
    "profiled_deviance",
    "ConditionalEstimates",
    "conditional_estimates",
    "conditional_variances",
    "has_analytic_gradient",
    "profiled_deviance_grad",
]

_DENSE_BINCOUNT_LIMIT = 50_000_000
_SPARSE_MIN_SIZE = 200_000
_SPARSE_MAX_DENSITY = 0.10


@dataclass
class CrossProducts:
    """Weighted cross-products of ``[Z X y]``, blocked per random term and per dispersion level.

    Rows of the "rest" block are ordered ``[Z_2 … Z_K, X, y]``; within a term the random
    effects are ordered level-major (level ``l``, term column ``a`` at ``l·p_k + a``), as
    lme4 orders ``b``.  Index ``d`` runs over dispersion levels (one level, ``d = 0``, for a
    homoscedastic model); the weights of level ``d`` are the prior weights of its rows, so the
    cross-products for relative variances ``ρ`` are ``Σ_d A_d / ρ_d``.

    Attributes
    ----------
    n, p:
        rows and fixed effects.
    term_p, term_nlev:
        ``p_k`` and ``n_k`` for every random term (lme4 order, term 1 first).
    A11:
        ``(D, n_1, p_1, p_1)``: the diagonal blocks of ``Z_1'W_dZ_1``.
    Ar1:
        ``(D, m, q_1)``: ``[Z_2 … Z_K X y]' W_d Z_1`` with ``m = q_2+…+q_K+p+1``.
    Arr:
        ``(D, m, m)``: ``[Z_2 … Z_K X y]' W_d [Z_2 … Z_K X y]``.
    n_by:
        ``(D,)`` rows per dispersion level.
    sum_log_w:
        ``Σ_i log w_i`` of the prior weights (0 without weights).
    """

    n: int
    p: int
    term_p: list[int]
    term_nlev: list[int]
    A11: np.ndarray
    Ar1: np.ndarray
    Arr: np.ndarray
    n_by: np.ndarray
    sum_log_w: float
    # ingredients kept (by reference) to recompute the response parts for a new y
    _codes: list[np.ndarray] = field(default_factory=list, repr=False)
    _tX: list[np.ndarray] = field(default_factory=list, repr=False)
    _X: np.ndarray | None = field(default=None, repr=False)
    _wd: list[np.ndarray] = field(default_factory=list, repr=False)
    #: use the sparse Schur-complement path (``None`` = decide from the density of ``Ar1``)
    sparse_ar1: bool | None = field(default=None, repr=False)
    _ar1_sp: list | None = field(default=None, repr=False)
    _pairs: "_PairStructure | None | bool" = field(default=None, repr=False)

    def pair_structure(self) -> "_PairStructure | None":
        """Cached :class:`_PairStructure` of the sparse ``Ar1`` for scalar-term,
        homoscedastic models on the sparse path (``None`` otherwise)."""
        if self._pairs is None:
            ok = (self.n_disp == 1 and all(p == 1 for p in self.term_p)
                  and self.ar1_sparse() is not None)
            self._pairs = _PairStructure.build(self.ar1_sparse()[0]) if ok else False
            if self._pairs is None:
                self._pairs = False
        return self._pairs or None

    def ar1_sparse(self) -> list | None:
        """Cached CSR copies of ``Ar1[d]`` (one per dispersion level), or ``None`` when the
        dense path is cheaper.

        ``Ar1`` stays a dense array (its meaning is unchanged); this is a view built once per
        :class:`CrossProducts`.  The sparse path is used (``sparse_ar1=None``) when ``Ar1`` has
        at least ``2·10⁵`` entries of which at most 10 % are non-zero, e.g. two large partially
        crossed factors such as InstEval's students × lecturers.  There the downdate
        ``Ar1·D·Ar1'`` costs ``Σ_j nnz_j²`` (``nnz_j``: non-zeros of column ``j``) instead
        of the ``m²·q_1`` of a dense product.
        """
        use = self.sparse_ar1
        if use is None:
            size = self.Ar1[0].size
            use = size >= _SPARSE_MIN_SIZE and (
                np.count_nonzero(self.Ar1) <= _SPARSE_MAX_DENSITY * self.Ar1.size)
            self.sparse_ar1 = bool(use)
        if not use:
            return None
        if self._ar1_sp is None:
            import scipy.sparse as sp
            self._ar1_sp = [sp.csr_matrix(a) for a in self.Ar1]
        return self._ar1_sp

    @property
    def n_disp(self) -> int:
        """Number of dispersion levels ``D``."""
        return int(self.A11.shape[0])

    @property
    def q_rest(self) -> int:
        """``q_2 + … + q_K``: random effects outside term 1."""
        return int(sum(p * n for p, n in zip(self.term_p[1:], self.term_nlev[1:])))

    @property
    def q(self) -> int:
        return int(sum(p * n for p, n in zip(self.term_p, self.term_nlev)))

    def with_response(self, y: np.ndarray) -> "CrossProducts":
        """A copy whose ``y`` parts (``Z'Wy``, ``X'Wy``, ``y'Wy``) are recomputed for a new
        response of the same design (used by the parametric bootstrap)."""
        y = np.asarray(y, dtype=float)
        if y.shape != (self.n,):
            raise ValueError(f"new response has shape {y.shape}, expected ({self.n},)")
        out = CrossProducts(self.n, self.p, self.term_p, self.term_nlev, self.A11,
                            self.Ar1.copy(), self.Arr.copy(), self.n_by, self.sum_log_w,
                            self._codes, self._tX, self._X, self._wd, self.sparse_ar1)
        for d, wd in enumerate(self._wd):
            cols = _all_rest(self._codes, self._tX, self.term_nlev, self._X, y)
            yrow_1 = _cross_term1(self._codes[0], self._tX[0], self.term_nlev[0], cols[-1:], wd)
            out.Ar1[d, -1, :] = yrow_1[0]
            yrow = _rest_cross(cols, cols[-1:], wd)[:, 0]
            out.Arr[d, :, -1] = yrow
            out.Arr[d, -1, :] = yrow
        return out

    def fix_coefficient(self, j: int, value: float) -> "CrossProducts":
        """Cross-products of the model with ``β_j`` fixed at ``value``: column ``j`` of ``X``
        is removed and ``value·x_j`` subtracted from ``y`` (an offset), computed from the
        stored cross-products by linear algebra."""
        m = self.Arr.shape[1]
        jr = self.q_rest + j
        keep = [i for i in range(m) if i != jr]
        # transform: new rest columns = old rest columns except x_j; new y = y - value * x_j
        Tm = np.zeros((m, m - 1))
        for newi, oldi in enumerate(keep):
            Tm[oldi, newi] = 1.0
        Tm[jr, -1] = -value
        Ar1 = np.einsum("im,dij->dmj", Tm, self.Ar1)
        Arr = np.einsum("im,dij,jn->dmn", Tm, self.Arr, Tm)
        return CrossProducts(self.n, self.p - 1, self.term_p, self.term_nlev, self.A11, Ar1,
                             Arr, self.n_by, self.sum_log_w, sparse_ar1=self.sparse_ar1)


_PAIR_MAX_NNZ = 30_000_000


@dataclass
class _PairStructure:
    """Sparsity "pair structure" of ``A D A'`` for a sparse ``m × q_1`` matrix ``A`` and a
    diagonal ``D = diag(c)``.

    The lower triangle of ``A D A'`` is ``(A D A')_{ij} = Σ_s A_{is} A_{js} c_s`` (``i ≥ j``);
    with ``P_{(ij), s} = A_{is} A_{js}`` (one row per structurally non-zero pair) all its
    entries are the sparse mat-vec ``P c``.  ``rows``/``cols`` give the pairs, ``flat`` their
    positions ``i·m + j`` in a C-ordered ``m × m`` array.
    """

    P: object
    rows: np.ndarray
    cols: np.ndarray
    flat: np.ndarray
    m: int

    @classmethod
    def build(cls, A) -> "_PairStructure | None":
        import scipy.sparse as sp
        m, q1 = A.shape
        Ac = sp.csc_matrix(A)
        Ac.sort_indices()
        counts = np.diff(Ac.indptr)
        if int(np.sum(counts * (counts + 1) // 2)) > _PAIR_MAX_NNZ:
            return None
        I, J, V, S = [], [], [], []
        for k in np.unique(counts):
            if k == 0:
                continue
            colsk = np.flatnonzero(counts == k)
            pos = Ac.indptr[colsk][:, None] + np.arange(k)[None, :]
            r = Ac.indices[pos]
            v = Ac.data[pos]
            ti, tj = np.tril_indices(k)   # rows sorted ascending: r[:, ti] >= r[:, tj]
            I.append(r[:, ti].ravel())
            J.append(r[:, tj].ravel())
            V.append((v[:, ti] * v[:, tj]).ravel())
            S.append(np.repeat(colsk, ti.size))
        if not I:
            return None
        I = np.concatenate(I).astype(np.int64)
        J = np.concatenate(J).astype(np.int64)
        keys = I * m + J
        flat, inv = np.unique(keys, return_inverse=True)
        P = sp.csr_matrix((np.concatenate(V), (inv.ravel(), np.concatenate(S))),
                          shape=(flat.size, q1))
        return cls(P=P, rows=flat // m, cols=flat % m, flat=flat, m=m)


def _weights_by_level(spec: ModelSpec, weights: np.ndarray | None) -> tuple[list[np.ndarray], np.ndarray]:
    w = np.ones(spec.n) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != (spec.n,):
        raise ValueError(f"weights have shape {w.shape}, expected ({spec.n},)")
    if np.any(~np.isfinite(w)) or np.any(w <= 0):
        bad = int(np.flatnonzero(~np.isfinite(w) | (w <= 0))[0])
        raise ValueError(f"weights must be finite and positive; row {bad} has weight {w[bad]!r}")
    if spec.dispersion_codes is None:
        return [w], np.array([spec.n])
    codes = np.asarray(spec.dispersion_codes, dtype=np.int64)
    nd = len(spec.dispersion_levels or []) or int(codes.max()) + 1
    out = [np.where(codes == d, w, 0.0) for d in range(nd)]
    n_by = np.bincount(codes, minlength=nd)
    for d in range(nd):
        if n_by[d] == 0:
            lev = spec.dispersion_levels[d] if spec.dispersion_levels else d
            raise ValueError(f"dispersion level {lev!r} has no rows")
    return out, n_by


def _term_columns(codes: np.ndarray, Xk: np.ndarray, n_levels: int) -> list[tuple]:
    """Column descriptions ``("z", codes, x_a, n_levels, a, p)`` of one random term: column
    ``a`` of ``Z_k`` is the indicator of the row's level times ``x_a`` (``None`` for an
    intercept column of ones).  Dense columns of ``X`` and ``y`` are ``("d", vector)``."""
    out = []
    for a in range(Xk.shape[1]):
        x = Xk[:, a]
        out.append(("z", codes, None if _is_ones(x) else x, n_levels, a, Xk.shape[1]))
    return out


def _is_ones(x: np.ndarray) -> bool:
    return bool(x.size and x[0] == 1.0 and np.all(x == 1.0))


def _all_rest(spec_codes, spec_tX, spec_nlev, X, y) -> list[tuple]:
    cols: list[tuple] = []
    for k in range(1, len(spec_codes)):
        cols.extend(_term_columns(spec_codes[k], spec_tX[k], spec_nlev[k]))
    for j in range(X.shape[1]):
        cols.append(("d", X[:, j]))
    cols.append(("d", y))
    return cols


def _mul(*arrays: np.ndarray | None) -> np.ndarray | None:
    """Elementwise product of the arrays that are not ``None`` (``None`` = all ones)."""
    out = None
    for a in arrays:
        if a is not None:
            out = a if out is None else out * a
    return out


def _bincount(idx: np.ndarray, weights: np.ndarray | None, size: int) -> np.ndarray:
    return np.bincount(idx, weights=weights, minlength=size).astype(float, copy=False)


def _cross_block(ca: tuple, cb: tuple, w: np.ndarray | None) -> np.ndarray:
    """``colᵃ' W colᵇ`` for two (possibly indicator-expanded) columns (``w=None``: unit
    weights)."""
    if ca[0] == "d" and cb[0] == "d":
        return np.array([[np.dot(ca[1] if w is None else ca[1] * w, cb[1])]])
    if ca[0] == "z" and cb[0] == "d":
        return _bincount(ca[1], _mul(w, ca[2], cb[1]), ca[3])[:, None]
    if ca[0] == "d" and cb[0] == "z":
        return _bincount(cb[1], _mul(w, cb[2], ca[1]), cb[3])[None, :]
    na, nb = ca[3], cb[3]
    prod = _mul(w, ca[2], cb[2])
    if ca[1] is cb[1]:
        return np.diag(_bincount(ca[1], prod, na))
    if na * nb <= _DENSE_BINCOUNT_LIMIT:
        return _bincount(ca[1] * nb + cb[1], prod, na * nb).reshape(na, nb)
    import scipy.sparse as sp  # very large crossed factors: sum duplicates sparsely
    vals = np.ones(ca[1].shape[0]) if prod is None else prod
    return sp.coo_matrix((vals, (ca[1], cb[1])), shape=(na, nb)).toarray()


def _place(cols: list[tuple]) -> list[np.ndarray]:
    """Row indices of each column description inside the stacked rest block (level-major
    within a term)."""
    out = []
    offset = 0
    i = 0
    while i < len(cols):
        c = cols[i]
        if c[0] == "z":
            pk, nl = c[5], c[3]
            for a in range(pk):
                out.append(offset + np.arange(nl) * pk + a)
            offset += pk * nl
            i += pk
        else:
            out.append(np.array([offset]))
            offset += 1
            i += 1
    return out


def _rest_cross(cols: list[tuple], other: list[tuple], w: np.ndarray) -> np.ndarray:
    """``[cols]' W [other]`` for dense ("d") columns ``other``: shape ``(m, len(other))``."""
    rows = _place(cols)
    m = sum(len(r) for r in rows)
    out = np.zeros((m, len(other)))
    for ia, ca in enumerate(cols):
        for ib, cb in enumerate(other):
            out[rows[ia], ib] = _cross_block(ca, cb, w)[:, 0]
    return out


def _cross_term1(codes1: np.ndarray, X1: np.ndarray, n1: int, cols: list[tuple],
                 w: np.ndarray) -> np.ndarray:
    """``[cols]' W Z_1``: shape ``(m, n_1·p_1)``, columns level-major."""
    rows = _place(cols)
    m = sum(len(r) for r in rows)
    p1 = X1.shape[1]
    out = np.zeros((m, n1 * p1))
    t1 = _term_columns(codes1, X1, n1)
    for ia, ca in enumerate(cols):
        for a, cb in enumerate(t1):
            blk = _cross_block(ca, cb, w)  # (len(rows[ia]), n1)
            out[np.ix_(rows[ia], np.arange(n1) * p1 + a)] = blk
    return out


def crossproducts(spec: ModelSpec, weights: np.ndarray | None = None) -> CrossProducts:
    """Form the weighted cross-products of ``[Z X y]`` once.

    Parameters
    ----------
    spec:
        the model; its random terms must already be in lme4's order (term 1 = most levels).
    weights:
        prior weights ``w_i > 0``; defaults to ``spec.weights`` (all ones when ``None``).

    Returns
    -------
    CrossProducts
        one set of blocks per dispersion level (see the class docstring).

    Notes
    -----
    Everything is computed with ``np.bincount`` over integer codes and a few dense
    ``X'WX`` products; no per-row Python loop.
    """
    if not spec.terms:
        raise ValueError("the model has no random-effects terms; use an ordinary linear model")
    if weights is None:
        weights = spec.weights
    wd, n_by = _weights_by_level(spec, weights)
    sum_log_w = 0.0 if weights is None else float(np.sum(np.log(np.asarray(weights, float))))
    codes = [np.asarray(t.codes, dtype=np.int64) for t in spec.terms]
    tX = [np.asarray(t.X, dtype=float) for t in spec.terms]
    nlev = [t.n_levels for t in spec.terms]
    for t, c in zip(spec.terms, codes):
        if c.shape != (spec.n,):
            raise ValueError(f"term ({t.group}) has {c.shape[0]} codes for {spec.n} rows")
        if c.size and (c.min() < 0 or c.max() >= t.n_levels):
            raise ValueError(f"term ({t.group}) has codes outside 0..{t.n_levels - 1}")
    X = np.asarray(spec.X, dtype=float)
    y = np.asarray(spec.y, dtype=float)
    p1, n1 = tX[0].shape[1], nlev[0]
    cols = _all_rest(codes, tX, nlev, X, y)
    A11, Ar1, Arr = [], [], []
    unit = weights is None and len(wd) == 1
    t1cols = _term_columns(codes[0], tX[0], n1)
    for w in wd:
        wu = None if unit else w
        blk = np.empty((n1, p1, p1))
        for a in range(p1):
            for b in range(a, p1):
                v = _bincount(codes[0], _mul(wu, t1cols[a][2], t1cols[b][2]), n1)
                blk[:, a, b] = v
                blk[:, b, a] = v
        A11.append(blk)
        Ar1.append(_cross_term1(codes[0], tX[0], n1, cols, wu))
        Arr.append(_rest_cross_fast(cols, X, y, wu))
    return CrossProducts(
        n=spec.n, p=spec.p, term_p=[t.p for t in spec.terms], term_nlev=nlev,
        A11=np.stack(A11), Ar1=np.stack(Ar1), Arr=np.stack(Arr), n_by=np.asarray(n_by),
        sum_log_w=sum_log_w, _codes=codes, _tX=tX, _X=X, _wd=wd,
    )


def _rest_cross_fast(cols: list[tuple], X: np.ndarray, y: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    """``[Z_2 … Z_K X y]' W [Z_2 … Z_K X y]``: bincounts for the Z parts, BLAS for ``X, y``."""
    rows = _place(cols)
    m = sum(len(r) for r in rows)
    out = np.zeros((m, m))
    nz = sum(1 for c in cols if c[0] == "z")
    qz = sum(len(r) for r in rows[:nz])
    for ia in range(nz):
        for ib in range(ia, len(cols)):
            blk = _cross_block(cols[ia], cols[ib], w)
            out[np.ix_(rows[ia], rows[ib])] = blk
            out[np.ix_(rows[ib], rows[ia])] = blk.T
    Xw = X if w is None else X * w[:, None]
    wy = y if w is None else y * w
    p = X.shape[1]
    out[qz:qz + p, qz:qz + p] = Xw.T @ X
    xy = X.T @ wy
    out[qz:qz + p, -1] = xy
    out[-1, qz:qz + p] = xy
    out[-1, -1] = np.dot(wy, y)
    return out


def theta_to_T(theta: np.ndarray, term_p: Sequence[int]) -> list[np.ndarray]:
    """Split ``θ`` into the lower-triangular relative factors ``T_k`` (column-major lower
    triangle per term, lme4's order)."""
    theta = np.atleast_1d(np.asarray(theta, dtype=float))
    out = []
    pos = 0
    for p in term_p:
        T = np.zeros((p, p))
        for j in range(p):
            for i in range(j, p):
                T[i, j] = theta[pos]
                pos += 1
        out.append(T)
    if pos != len(theta):
        raise ValueError(f"theta has {len(theta)} elements, the terms need {pos}")
    return out


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

    @property
    def ldL2(self) -> float:
        """``log|L_Z|²``."""
        d1 = np.einsum("lii->li", self.L11)
        dr = np.diag(self.Lrr)[: self.q_rest]
        return float(2 * np.sum(np.log(d1)) + 2 * np.sum(np.log(dr)))

    @property
    def ldRX2(self) -> float:
        """``log|R_X|²``."""
        d = np.diag(self.Lrr)[self.q_rest: self.q_rest + self.p]
        return float(2 * np.sum(np.log(d)))

    @property
    def pwrss(self) -> float:
        """``r_θ²``: penalised weighted residual sum of squares."""
        return float(self.Lrr[-1, -1] ** 2)

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


def _combine(cp: CrossProducts, rho: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
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


def _scale_rows(M: np.ndarray, T: list[np.ndarray], cp: CrossProducts) -> np.ndarray:
    """Apply ``Λ_rest'`` to the rows of the ``[Z_2 … Z_K]`` part of ``M`` (in place copy)."""
    M = M.copy()
    pos = 0
    for k in range(1, len(cp.term_p)):
        pk, nk = cp.term_p[k], cp.term_nlev[k]
        sl = slice(pos, pos + pk * nk)
        if pk == 1:
            M[sl] *= T[k][0, 0]
        else:
            blk = M[sl].reshape(nk, pk, -1)
            M[sl] = np.einsum("ba,lbc->lac", T[k], blk).reshape(pk * nk, -1)
        pos += pk * nk
    return M


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
        S11 = np.einsum("ba,lbc,cd->lad", T1, A11, T1) + np.eye(p1)
        L11 = np.linalg.cholesky(S11)
        L11inv = np.linalg.inv(L11)
        F = np.einsum("ab,lcb->lac", T1, L11inv)  # T_1 L_l^{-T}
        blocks = np.einsum("lab,lcb->lac", F, F)   # T_1 S11_l^{-1} T_1'
        M = sp.bsr_matrix((blocks, np.arange(n1), np.arange(n1 + 1)), shape=(n1 * p1, n1 * p1))
        B = (A @ M).tocsr()
    G = (B @ A.T.tocsr()).toarray()
    return G, L11, L11inv


def factorize(theta: np.ndarray, cp: CrossProducts, rho: np.ndarray | None = None,
              need_lr1: bool = True) -> Factorization:
    """Blocked Cholesky factorisation of the augmented system at ``θ`` (and relative
    residual variances ``ρ`` for a dispersion model).

    Parameters
    ----------
    need_lr1:
        also form the dense off-diagonal block ``Lr1`` (needed for the conditional
        estimates; the criterion only needs ``L11`` and ``Lrr``).  With a sparse ``Ar1``
        (see :meth:`CrossProducts.ar1_sparse`) and ``need_lr1=False``, ``Lr1`` is ``None``.

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
    ps = cp.pair_structure()
    if ps is not None:
        return _factorize_pairs(theta, T, cp, ps, rho, need_lr1)
    if cp.n_disp == 1 or cp.ar1_sparse() is None:
        A11, Ar1, Arr, ldW = _combine(cp, rho)
    else:  # combine A11, Arr densely; Ar1 is combined sparsely
        A11, Arr, ldW = _combine_small(cp, rho)
        Ar1 = None
    sparse_out = _downdate_sparse(cp, rho, T1, A11)
    if sparse_out is not None:
        # Schur complement: Λr'(Arr − Ar1 D Ar1')Λr + I, with the sparse downdate
        G, L11, L11inv = sparse_out
        S = _scale_rows(_scale_rows(Arr - G, T, cp).T, T, cp).T
        S[np.arange(qr), np.arange(qr)] += 1.0
        Lrr = np.linalg.cholesky(S)
        Lr1 = None
        if need_lr1:
            if Ar1 is None:
                Ar1 = _combine(cp, rho)[1]
            Lr1 = _scale_rows(_lr1_dense(Ar1, T1, L11, L11inv, n1, p1), T, cp)
        return Factorization(T=T, L11=L11, L11inv=L11inv, Lr1=Lr1, Lrr=Lrr, q_rest=qr, p=cp.p,
                             n=cp.n, ldW=ldW)
    # term 1: T1' A11_l T1 + I, batched
    if p1 == 1:
        t = T1[0, 0]
        d = A11[:, 0, 0] * t * t + 1.0
        L11 = np.sqrt(d)[:, None, None]
        L11inv = 1.0 / L11
    else:
        S11 = np.einsum("ba,lbc,cd->lad", T1, A11, T1) + np.eye(p1)
        L11 = np.linalg.cholesky(S11)
        L11inv = np.linalg.inv(L11)
    Lr1 = _scale_rows(_lr1_dense(Ar1, T1, L11, L11inv, n1, p1), T, cp)
    S = _scale_rows(_scale_rows(Arr, T, cp).T, T, cp).T
    S[np.arange(qr), np.arange(qr)] += 1.0
    S -= Lr1 @ Lr1.T
    Lrr = np.linalg.cholesky(S)
    return Factorization(T=T, L11=L11, L11inv=L11inv, Lr1=Lr1, Lrr=Lrr, q_rest=qr, p=cp.p,
                         n=cp.n, ldW=ldW)


def _rest_scale(theta: np.ndarray, cp: CrossProducts) -> np.ndarray:
    """``diag(Λ_rest, I_{p+1})`` as a vector (scalar random terms only)."""
    m = cp.Arr.shape[1]
    lam = np.ones(m)
    pos = 0
    for k in range(1, len(cp.term_p)):
        lam[pos: pos + cp.term_nlev[k]] = theta[k]
        pos += cp.term_nlev[k]
    return lam


def _factorize_pairs(theta: np.ndarray, T: list[np.ndarray], cp: CrossProducts,
                     ps: _PairStructure, rho: np.ndarray | None, need_lr1: bool) -> Factorization:
    """:func:`factorize` for scalar random terms with a sparse ``Ar1``: the downdate
    ``Ar1 diag(θ_1²/l_j²) Ar1'`` is the pair mat-vec ``P c`` (see :class:`_PairStructure`)
    scattered into the lower triangle, ``Λ_rest`` a diagonal scaling, and the Schur
    complement factored in place by LAPACK ``dpotrf``."""
    A11, Ar1, Arr, ldW = _combine(cp, rho)
    qr = cp.q_rest
    t = T[0][0, 0]
    dd = A11[:, 0, 0] * t * t + 1.0
    L11 = np.sqrt(dd)[:, None, None]
    L11inv = 1.0 / L11
    lam = _rest_scale(theta, cp)
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
    C = np.einsum("mlb,bd->mld", Ar1.reshape(Ar1.shape[0], n1, p1), T1)
    return np.einsum("mla,lba->mlb", C, L11inv).reshape(Ar1.shape[0], n1 * p1)


def _combine_small(cp: CrossProducts, rho: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, float]:
    if rho is None or len(rho) != cp.n_disp:
        raise ValueError(f"the model has {cp.n_disp} dispersion levels; give that many relative variances")
    inv = 1.0 / np.asarray(rho, float)
    A11 = np.tensordot(inv, cp.A11, axes=1)
    Arr = np.tensordot(inv, cp.Arr, axes=1)
    ldW = cp.sum_log_w - float(np.dot(cp.n_by, np.log(rho)))
    return A11, Arr, ldW


def profiled_deviance(theta: np.ndarray, cp: CrossProducts, reml: bool,
                      rho: np.ndarray | None = None) -> float:
    """Profiled deviance ``-2ℓ_ML(θ)`` or REML criterion ``-2ℓ_REML(θ)`` (σ² and β profiled
    out), see the module docstring for the formulas.

    Parameters
    ----------
    theta:
        relative covariance parameters in lme4's order.
    cp:
        cross-products from :func:`crossproducts`.
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
        return factorize(theta, cp, rho, need_lr1=False).deviance(reml)
    except np.linalg.LinAlgError:
        return np.inf


@dataclass
class ConditionalEstimates:
    """Conditional estimates of ``(β, b)`` given ``θ`` (and ``ρ``), and their distribution.

    With a flat prior on ``β``, ``(u, β) | θ, σ, y ~ N(v, σ² (L L')^{-1})`` where ``L`` is
    the factor of the augmented system without the ``y`` row and ``v`` solves
    ``L' v = (c_u, c_β)``; ``b = Λ_θ u``.

    Attributes
    ----------
    beta:
        ``(p,)`` conditional estimate of ``β`` (the GLS estimate given θ).
    u:
        ``(q,)`` spherical random effects (level-major within term, terms in order).
    b:
        list of ``(n_k, p_k)`` arrays: random effects per term.
    pwrss, ldL2, ldRX2:
        as in :class:`Factorization`.
    factor:
        the :class:`Factorization`.
    """

    beta: np.ndarray
    u: np.ndarray
    b: list[np.ndarray]
    pwrss: float
    ldL2: float
    ldRX2: float
    factor: Factorization

    def _solve_upper(self, z: np.ndarray) -> np.ndarray:
        """Solve ``L' x = z`` for ``(q + p, k)`` right-hand sides."""
        f = self.factor
        q1 = f.L11.shape[0] * f.L11.shape[1]
        Lrrz = f.Lrr[:-1, :-1]
        Lr1z = f.Lr1[:-1]
        x_rest = sla.solve_triangular(Lrrz, z[q1:], trans="T", lower=True)
        rhs = z[:q1] - Lr1z.T @ x_rest
        n1, p1 = f.L11.shape[0], f.L11.shape[1]
        x1 = np.einsum("lba,lbk->lak", f.L11inv, rhs.reshape(n1, p1, -1)).reshape(q1, -1)
        return np.vstack([x1, x_rest])

    def sample(self, sigma: float, size: int, rng: np.random.Generator | int | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Draw ``(β, u)`` from their conditional distribution given ``θ`` and ``σ``.

        Returns
        -------
        beta:
            ``(size, p)``.
        u:
            ``(size, q)`` spherical random effects; ``b = Λ_θ u`` (see :meth:`u_to_b`).
        """
        rng = np.random.default_rng(rng)
        f = self.factor
        q = f.L11.shape[0] * f.L11.shape[1] + f.q_rest
        z = rng.standard_normal((q + f.p, size))
        x = self._solve_upper(z) * sigma
        draws = x + np.concatenate([self.u, self.beta])[:, None]
        return draws[q:].T.copy(), draws[:q].T.copy()

    def u_to_b(self, u: np.ndarray, term_nlev: Sequence[int]) -> list[np.ndarray]:
        """Map spherical ``u`` (``(q,)``) to the list of ``(n_k, p_k)`` random effects."""
        return _u_to_b(u, self.factor.T, term_nlev)

    def covariance(self, sigma: float) -> np.ndarray:
        """Dense ``Cov((u, β) | θ, σ, y) = σ² (L L')^{-1}`` (only for small ``q``)."""
        f = self.factor
        q = f.L11.shape[0] * f.L11.shape[1] + f.q_rest
        Linv_t = self._solve_upper(np.eye(q + f.p))
        return sigma ** 2 * Linv_t @ Linv_t.T


def _u_to_b(u: np.ndarray, T: list[np.ndarray], term_nlev: Sequence[int]) -> list[np.ndarray]:
    out = []
    pos = 0
    for Tk, nk in zip(T, term_nlev):
        pk = Tk.shape[0]
        uk = u[pos: pos + pk * nk].reshape(nk, pk)
        out.append(uk @ Tk.T)
        pos += pk * nk
    return out


def conditional_estimates(theta: np.ndarray, cp: CrossProducts,
                          rho: np.ndarray | None = None) -> ConditionalEstimates:
    """Conditional estimates ``β̂(θ)``, ``û(θ)``, ``b̂ = Λ_θ û`` and the factor needed to
    draw ``(β, b) | θ, σ, y`` (see :class:`ConditionalEstimates`)."""
    f = factorize(theta, cp, rho)
    q1 = f.L11.shape[0] * f.L11.shape[1]
    c = np.concatenate([f.Lr1[-1], f.Lrr[-1, :-1]])
    ce = ConditionalEstimates(beta=np.zeros(cp.p), u=np.zeros(q1 + f.q_rest), b=[],
                              pwrss=f.pwrss, ldL2=f.ldL2, ldRX2=f.ldRX2, factor=f)
    v = ce._solve_upper(c[:, None])[:, 0]
    q = q1 + f.q_rest
    ce.u = v[:q]
    ce.beta = v[q:]
    ce.b = _u_to_b(ce.u, f.T, cp.term_nlev)
    return ce


def conditional_variances(ce: ConditionalEstimates, term_nlev: Sequence[int], sigma: float
                          ) -> list[np.ndarray]:
    """lme4's conditional covariances of the random effects (``ranef(condVar=TRUE)``):
    ``σ² Λ_k [ (L_Z L_Z')^{-1} ]_{kk} Λ_k'`` per level (β treated as known).

    Returns
    -------
    list of ``(n_k, p_k, p_k)`` arrays, one per term.
    """
    f = ce.factor
    n1, p1 = f.L11.shape[0], f.L11.shape[1]
    qr = f.q_rest
    Lzz = f.Lrr[:qr, :qr]
    Lz1 = f.Lr1[:qr]
    # term 1 blocks: L11inv' L11inv + G' G, G = Lzz^{-1} (Lz1 L11^{-1})
    V1 = np.einsum("lba,lbc->lac", f.L11inv, f.L11inv)
    if qr:
        H = np.einsum("mlb,lbc->mlc", Lz1.reshape(qr, n1, p1), f.L11inv).reshape(qr, n1 * p1)
        G = sla.solve_triangular(Lzz, H, lower=True).reshape(qr, n1, p1)
        V1 = V1 + np.einsum("mla,mlc->lac", G, G)
    out = [V1]
    if qr:
        Linv = sla.solve_triangular(Lzz, np.eye(qr), lower=True)
        pos = 0
        for k in range(1, len(f.T)):
            pk, nk = f.T[k].shape[0], term_nlev[k]
            cols = Linv[:, pos: pos + pk * nk].reshape(qr, nk, pk)
            out.append(np.einsum("mla,mlc->lac", cols, cols))
            pos += pk * nk
    res = []
    for Vk, Tk in zip(out, f.T):
        res.append(sigma ** 2 * np.einsum("ab,lbc,dc->lad", Tk, Vk, Tk))
    return res


def has_analytic_gradient(cp: CrossProducts) -> bool:
    """Whether :func:`profiled_deviance_grad` applies: every random term is scalar
    (``p_k = 1``) and the residual variance is homoscedastic."""
    return cp.n_disp == 1 and all(p == 1 for p in cp.term_p)


def profiled_deviance_grad(theta: np.ndarray, cp: CrossProducts, reml: bool
                           ) -> tuple[float, np.ndarray]:
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
    theta = np.atleast_1d(np.asarray(theta, dtype=float))
    if not has_analytic_gradient(cp):
        raise ValueError("the analytic gradient needs scalar random terms and no dispersion model")
    if np.any(theta <= 0):
        raise ValueError("the analytic gradient needs every θ_k > 0")
    f = factorize(theta, cp, need_lr1=False)
    crit = f.deviance(reml)
    n1, qr, p = cp.term_nlev[0], cp.q_rest, cp.p
    l = f.L11[:, 0, 0]
    t1 = theta[0]
    Ar1 = cp.Ar1[0]
    m = Ar1.shape[0]
    lam = np.ones(m)
    pos = 0
    for k in range(1, len(cp.term_p)):
        lam[pos: pos + cp.term_nlev[k]] = theta[k]
        pos += cp.term_nlev[k]
    mz = qr + p  # rows of the factor without the y row
    R = f.Lrr[:mz, :mz]
    # conditional modes: solve L' v = c (c = the y row of the factor)
    c_rest = f.Lrr[-1, :mz]
    x_rest = sla.solve_triangular(R, c_rest, trans="T", lower=True)
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
            # Lrr[:md,:md]' is upper triangular; dpotri gives the upper triangle of S⁻¹
            Sinv, info = sla.lapack.dpotri(np.array(f.Lrr[:md, :md].T, order="F"), lower=0,
                                           overwrite_c=1)
            if info != 0:
                raise np.linalg.LinAlgError("dpotri failed")
            dS = np.diag(Sinv).copy()
            tr[0] += float(np.dot(Sinv[ci, ri], Kv))
        else:
            sparse = cp.ar1_sparse()
            if sparse is not None:
                A = sparse[0]
                K = (A.multiply(w4[None, :]).tocsr() @ A.T.tocsr()).toarray()[:md, :md]
            else:
                K = (Ar1[:md] * w4[None, :]) @ Ar1[:md].T
            K *= lam[:md, None] * lam[None, :md]
            Rm = np.ascontiguousarray(f.Lrr[:md, :md])
            Sinv, info = sla.lapack.dpotri(Rm, lower=1)
            if info != 0:
                raise np.linalg.LinAlgError("dpotri failed")
            Sinv = np.tril(Sinv)
            dS = np.diag(Sinv).copy()
            Sinv = Sinv + Sinv.T - np.diag(dS)
            tr[0] += float(np.sum(Sinv * K))
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
