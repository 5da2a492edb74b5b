"""Weighted cross-products of ``[Z X y]`` of a linear mixed model, formed once.

The model (lme4's formulation, Bates et al. 2015, *J. Stat. Softw.* 67(1)) is

.. math::

    y = X\\beta + Z b + \\varepsilon,\\quad b = \\Lambda_\\theta u,\\quad
    u \\sim N(0, \\sigma^2 I_q),\\quad \\varepsilon \\sim N(0, \\sigma^2 W^{-1}),

with ``W = diag(w_i / ρ_{d(i)})``: prior weights ``w`` and, for a class-specific residual
variance, a relative variance ``ρ_d`` per dispersion level (``ρ_0 = 1``).

Everything the engine needs from the rows is ``[Z X y]' W_d [Z X y]`` per dispersion level
``d``, blocked per random term as in MixedModels.jl: term 1 (the one with most levels) is kept
as ``n_1`` diagonal ``p_1 × p_1`` blocks, everything else (``Z_2 … Z_K``, ``X``, ``y``) as one
dense "rest" block whose size does not grow with the number of rows.  The factorisation at
each ``θ`` is :mod:`scoremix.lme.factor`, the criterion :mod:`scoremix.lme.deviance`.

Cross-products are sums over rows, so the cross-products of row partitions (with the same
levels and dispersion levels) add up: :func:`sum_crossproducts`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from scoremix.lme.pairs import PairStructure
from scoremix.lme.spec import ModelSpec

__all__ = ["CrossProducts", "crossproducts", "sum_crossproducts"]

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
    _pairs: "PairStructure | None | bool" = field(default=None, repr=False)
    #: cached symbolic analysis of the sparse rest factor (``False``: dense), see
    #: :func:`scoremix.lme.factor.rest_symbolic`
    _rest_sym: object = field(default=None, repr=False)

    def pair_structure(self) -> "PairStructure | None":
        """Cached :class:`PairStructure` of the sparse ``Ar1`` for scalar-term,
        homoscedastic models on the sparse path (``None`` otherwise)."""
        if self._pairs is None:
            ok = (self.n_disp == 1 and all(p == 1 for p in self.term_p)
                  and self.ar1_sparse() is not None)
            self._pairs = PairStructure.build(self.ar1_sparse()[0]) if ok else False
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
            self._ar1_sp = [_dense_to_csr(a) for a in self.Ar1]
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
        if not self._codes:
            raise ValueError("these cross-products keep no rows (e.g. a sum of partitions); "
                             "form them with crossproducts(spec) to change the response")
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
    pairs = None
    for ia, ca in enumerate(cols):
        for a, cb in enumerate(t1):
            if ca[0] == "z" and ca[3] * n1 >= _TRIPLET_MIN:
                # two large crossed factors: sum over the distinct (level, level) pairs
                # of the rows only, and write those (no dense n_a × n_1 temporary)
                if pairs is None or pairs[0] is not ca[1]:
                    key = ca[1] * n1 + codes1
                    uniq, inv = np.unique(key, return_inverse=True)
                    pairs = (ca[1], uniq // n1, uniq % n1, inv)
                _, la, l1, inv = pairs
                v = _bincount(inv, _mul(w, ca[2], cb[2]), la.size)
                out[rows[ia][la], l1 * p1 + a] = v
                continue
            blk = _cross_block(ca, cb, w)  # (len(rows[ia]), n1)
            out[np.ix_(rows[ia], np.arange(n1) * p1 + a)] = blk
    return out


#: ``[Z_k]' W Z_1`` is summed over the distinct level pairs of the rows (``np.unique``)
#: instead of a dense ``bincount`` when ``n_k · n_1`` is at least this
_TRIPLET_MIN = 1_000_000


def _dense_to_csr(a: np.ndarray):
    """``scipy.sparse.csr_matrix(a)`` of a C-ordered 2-d array (canonical: sorted indices,
    no duplicates) from one ``flatnonzero`` pass instead of scipy's COO route."""
    import scipy.sparse as sp
    a = np.ascontiguousarray(a)
    nr, nc = a.shape
    idx = np.flatnonzero(a)
    rows, cols = np.divmod(idx, nc)
    indptr = np.zeros(nr + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=nr), out=indptr[1:])
    itype = np.int32 if max(idx.size, nc) < 2 ** 31 else np.int64
    return sp.csr_matrix((a.ravel()[idx], cols.astype(itype), indptr.astype(itype)),
                         shape=(nr, nc))


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
        A11=_stack(A11), Ar1=_stack(Ar1), Arr=_stack(Arr), n_by=np.asarray(n_by),
        sum_log_w=sum_log_w, _codes=codes, _tX=tX, _X=X, _wd=wd,
    )


def _stack(blocks: list[np.ndarray]) -> np.ndarray:
    """``np.stack(blocks)``; one block (a homoscedastic model) as a view with a leading axis
    of 1 instead of a copy (InstEval's dense ``A_r1`` and ``A_rr`` are 54 and 41 MB)."""
    return blocks[0][None] if len(blocks) == 1 else np.stack(blocks)


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


def sum_crossproducts(parts: Sequence[CrossProducts]) -> CrossProducts:
    """Cross-products of the union of disjoint row partitions: the blockwise sum.

    ``[Z X y]' W_d [Z X y] = Σ_r [Z_r X_r y_r]' W_{d,r} [Z_r X_r y_r]`` over partitions
    ``r``, so ``A11``, ``Ar1``, ``Arr``, the row counts per dispersion level and
    ``Σ log w_i`` add up.  Every part must come from
    :func:`crossproducts` of a spec with the *same* random terms (same levels in the same
    order, e.g. built with the full data's levels), the same fixed-effect columns and the same
    dispersion levels; a partition may lack rows of a level (its blocks are then zero).
    The sum keeps no rows, so :meth:`CrossProducts.with_response` is not available on it;
    fit it with ``scoremix.lme.native.fit(spec, cp=sum_crossproducts(parts))``.

    Raises
    ------
    ValueError
        when there are no parts or their shapes differ (naming the first mismatch).
    """
    parts = list(parts)
    if not parts:
        raise ValueError("sum_crossproducts needs at least one CrossProducts")
    first = parts[0]
    for i, c in enumerate(parts[1:], start=1):
        for name in ("p", "term_p", "term_nlev"):
            if getattr(c, name) != getattr(first, name):
                raise ValueError(f"part {i} has {name}={getattr(c, name)!r}, part 0 has "
                                 f"{getattr(first, name)!r}")
        for name in ("A11", "Ar1", "Arr"):
            if getattr(c, name).shape != getattr(first, name).shape:
                raise ValueError(f"part {i} has {name} of shape {getattr(c, name).shape}, "
                                 f"part 0 has {getattr(first, name).shape}")
    n_by = np.sum([c.n_by for c in parts], axis=0)
    return CrossProducts(
        n=int(sum(c.n for c in parts)), p=first.p, term_p=list(first.term_p),
        term_nlev=list(first.term_nlev),
        A11=np.sum([c.A11 for c in parts], axis=0), Ar1=np.sum([c.Ar1 for c in parts], axis=0),
        Arr=np.sum([c.Arr for c in parts], axis=0), n_by=n_by,
        sum_log_w=float(sum(c.sum_log_w for c in parts)))
