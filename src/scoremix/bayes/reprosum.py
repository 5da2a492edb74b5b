r"""Reproducible (order-independent) sums for the Bayesian sufficient statistics.

NUTS is chaotic: cross-products that differ in the last bit (a different summation order,
e.g. rows summed partition by partition on Dask instead of in one pass) send the chains
elsewhere after a few hundred iterations.  So that the same rows always give the same
posterior for the same seed, however they are split, every sum the sampler sees is computed
with *pre-rounding* (Demmel & Nguyen's reproducible summation): with a bound
:math:`M \ge \max_i |v_i|` and :math:`N` rows, fold :math:`k` uses the scale
:math:`\sigma_k = 1.5\cdot 2^{E_k}`,

.. math::

    E_1 = \lceil\log_2(N M)\rceil + 1,\qquad E_{k+1} = E_k - 53 + \lceil\log_2 N\rceil + 1,

    q^{(k)}_i = \mathrm{fl}(\sigma_k + r^{(k)}_i) - \sigma_k,\qquad r^{(k+1)}_i = r^{(k)}_i - q^{(k)}_i,
    \qquad r^{(1)}_i = v_i .

Both operations are exact; every :math:`q^{(k)}_i` is a multiple of :math:`2^{E_k-52}` and
:math:`\sum_i |q^{(k)}_i| < 2^{E_k+1}`, so the fold sums :math:`S_k = \sum_i q^{(k)}_i` are
computed *exactly* in float64 in any order and by any grouping (per partition, then merged).
The result :math:`(S_1 + S_2) + S_3` is therefore a function of the multiset of summands only;
its error is below :math:`N M\, 2^{-50 - 2(52 - \lceil\log_2 N\rceil)}`, better than a
plain running sum.  ``N`` and ``M`` must be the global ones (maxima are exact, so every
partition agrees on them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["K_FOLDS", "fold_scales", "fold_sums", "unfold", "RowBounds", "row_bounds",
           "FoldedStats", "folded_stats", "spec_folded_stats", "spec_moments"]

K_FOLDS = 3


def fold_scales(n: int, bound: float, k: int = K_FOLDS) -> np.ndarray:
    """The ``k`` scales ``σ_j = 1.5·2^{E_j}`` for ``n`` summands of magnitude ``≤ bound``."""
    n = max(int(n), 1)
    bound = float(bound)
    if not np.isfinite(bound):
        raise ValueError(f"reproducible sums need finite values, got a bound of {bound!r}")
    if bound <= 0:
        bound = 1.0
    ln = math.ceil(math.log2(n)) if n > 1 else 0
    e = math.ceil(math.log2(n * bound)) + 1
    out = []
    for _ in range(k):
        out.append(math.ldexp(1.5, e))
        e = e - 53 + ln + 1
    return np.asarray(out)


def fold_sums(idx: np.ndarray | None, v: np.ndarray, size: int, scales: np.ndarray) -> np.ndarray:
    """Exact fold sums ``(size, K)`` of ``v`` grouped by ``idx`` (``None``: one group)."""
    r = np.asarray(v, dtype=np.float64)
    out = np.empty((size, len(scales)))
    for j, s in enumerate(scales):
        q = (s + r) - s
        r = r - q
        if idx is None:
            out[0, j] = float(np.sum(q)) if q.size else 0.0   # exact: any order
        else:
            out[:, j] = np.bincount(idx, weights=q, minlength=size)
    return out


def unfold(F: np.ndarray) -> np.ndarray:
    """``(S_1 + S_2) + S_3`` along the last axis, in that fixed order."""
    out = F[..., 0].copy()
    for j in range(1, F.shape[-1]):
        out = out + F[..., j]
    return out


@dataclass
class RowBounds:
    """Maxima (exact, so mergeable by ``max``): ``|v|`` of every design column or response
    (``col``), of the weights (``w``) and of ``log w`` (``logw``)."""

    col: float = 0.0
    w: float = 1.0
    logw: float = 0.0

    def merge(self, other: "RowBounds") -> "RowBounds":
        return RowBounds(max(self.col, other.col), max(self.w, other.w), max(self.logw, other.logw))


def row_bounds(y: np.ndarray, X: np.ndarray, design: list[tuple[np.ndarray, np.ndarray]],
               w: np.ndarray | None) -> RowBounds:
    """:class:`RowBounds` of some rows (indicators count as 1)."""
    vals = [1.0]
    for a in [y, X] + [Xk for _, Xk in design]:
        a = np.asarray(a, dtype=np.float64)
        if a.size:
            vals.append(float(np.max(np.abs(a))))
    wb, lb = 1.0, 0.0
    if w is not None and np.asarray(w).size:
        w = np.asarray(w, dtype=np.float64)
        wb = float(np.max(np.abs(w)))
        lb = float(np.max(np.abs(np.log(w))))
    return RowBounds(max(vals), wb, lb)


@dataclass
class FoldedStats:
    """Fold sums (last axis ``K``) of the blocked cross-products and of the moments the
    default priors read; ``+`` adds them exactly (see the module docstring).

    ``D`` ``(L, n1, p1, p1, K)``, ``B`` ``(L, n1, p1, m, K)``, ``A`` ``(L, m, m, K)``,
    ``n_by`` ``(L,)`` (integers), ``logw`` ``(K,)``, ``ysum``/``ysq`` ``(K,)``,
    ``xsum``/``xsq`` ``(p, K)``, ``term_sq``: per term ``(p_k, K)``.
    """

    D: np.ndarray
    B: np.ndarray
    A: np.ndarray
    n_by: np.ndarray
    logw: np.ndarray
    ysum: np.ndarray
    ysq: np.ndarray
    xsum: np.ndarray
    xsq: np.ndarray
    term_sq: list[np.ndarray] = field(default_factory=list)

    def __add__(self, o: "FoldedStats") -> "FoldedStats":
        return FoldedStats(self.D + o.D, self.B + o.B, self.A + o.A, self.n_by + o.n_by,
                           self.logw + o.logw, self.ysum + o.ysum, self.ysq + o.ysq,
                           self.xsum + o.xsum, self.xsq + o.xsq,
                           [a + b for a, b in zip(self.term_sq, o.term_sq)])

    @property
    def n(self) -> int:
        return int(np.sum(self.n_by))

    def moments(self) -> dict:
        """``ybar``, ``y_sd``, ``x_sd``, ``term_rms`` (see :func:`scoremix.bayes.priors.data_moments`)."""
        n = self.n
        ys, yq = float(unfold(self.ysum)[()]), float(unfold(self.ysq)[()])
        ybar = ys / n
        y_sd = math.sqrt(max(yq - n * ybar * ybar, 0.0) / (n - 1)) if n > 1 else 1.0
        xs, xq = unfold(self.xsum), unfold(self.xsq)
        x_sd = (np.sqrt(np.maximum(xq - xs * xs / n, 0.0) / (n - 1)) if n > 1
                else np.zeros(xs.shape[0]))
        term_rms = [np.sqrt(unfold(t) / n) for t in self.term_sq]
        return dict(ybar=ybar, y_sd=y_sd, x_sd=x_sd, term_rms=term_rms)


def _rest_columns(design: list[tuple[np.ndarray, np.ndarray]], n_levels: list[int],
                  X: np.ndarray, y: np.ndarray) -> list[tuple]:
    """Rest columns ``r = [Z_2 … Z_K, X, y]``: ``("z", codes, x_a, n_lev, a, p, start, term)``
    and ``("d", vector, position)``."""
    cols: list[tuple] = []
    start = 0
    for k in range(1, len(design)):
        codes, Xk = design[k]
        p = Xk.shape[1]
        for a in range(p):
            cols.append(("z", codes, Xk[:, a], n_levels[k], a, p, start, k))
        start += p * n_levels[k]
    for j in range(X.shape[1]):
        cols.append(("d", X[:, j], start + j))
    cols.append(("d", y, start + X.shape[1]))
    return cols


def folded_stats(y: np.ndarray, X: np.ndarray, design: list[tuple[np.ndarray, np.ndarray]],
                 n_levels: list[int], w: np.ndarray | None, dcodes: np.ndarray | None,
                 n_disp: int, n_total: int, bounds: RowBounds) -> FoldedStats:
    """:class:`FoldedStats` of some rows, with the scales of ``n_total`` rows and ``bounds``.

    ``design`` holds ``(codes, X_k)`` per random term (term 1 first, codes ``0 … n_k-1``).
    """
    y = np.asarray(y, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    n = y.shape[0]
    K = K_FOLDS
    sc_cross = fold_scales(n_total, bounds.w * bounds.col ** 2)
    codes1, X1 = design[0]
    n1, p1 = n_levels[0], X1.shape[1]
    cols = _rest_columns(design, n_levels, X, y)
    m = cols[-1][2] + 1
    D = np.zeros((n_disp, n1, p1, p1, K))
    B = np.zeros((n_disp, n1, p1, m, K))
    A = np.zeros((n_disp, m, m, K))
    n_by = np.zeros(n_disp, dtype=np.int64)
    dc = np.zeros(n, dtype=np.int64) if dcodes is None else np.asarray(dcodes, dtype=np.int64)
    for lvl in range(n_disp):
        rows = np.flatnonzero(dc == lvl)
        n_by[lvl] = rows.size
        if rows.size == 0:
            continue
        wl = None if w is None else np.asarray(w, dtype=np.float64)[rows]

        def wt(v: np.ndarray) -> np.ndarray:
            return v if wl is None else wl * v

        c1 = np.asarray(codes1, dtype=np.int64)[rows]
        x1 = np.asarray(X1, dtype=np.float64)[rows]
        rc = []
        for c in cols:
            if c[0] == "z":
                rc.append(("z", np.asarray(c[1], dtype=np.int64)[rows], np.asarray(c[2], float)[rows])
                          + c[3:])
            else:
                rc.append(("d", np.asarray(c[1], float)[rows], c[2]))
        for a in range(p1):
            for b in range(a, p1):
                F = fold_sums(c1, wt(x1[:, a] * x1[:, b]), n1, sc_cross)
                D[lvl, :, a, b] = F
                D[lvl, :, b, a] = F
            for c in rc:
                if c[0] == "z":
                    _, ck, xk, nl, ak, pk, st, _ = c
                    F = fold_sums(c1 * nl + ck, wt(x1[:, a] * xk), n1 * nl, sc_cross)
                    Bla = B[lvl][:, a]          # view (n1, m, K)
                    Bla[:, st + np.arange(nl) * pk + ak] = F.reshape(n1, nl, K)
                else:
                    B[lvl, :, a, c[2]] = fold_sums(c1, wt(x1[:, a] * c[1]), n1, sc_cross)
        for i, ca in enumerate(rc):
            for cb in rc[i:]:
                _cross(A[lvl], ca, cb, wt, sc_cross)
    logw, ysum, ysq, xsum, xsq, term_sq = _moment_folds(y, X, design, w, n_total, bounds)
    return FoldedStats(D, B, A, n_by, logw, ysum, ysq, xsum, xsq, term_sq)


def spec_folded_stats(spec) -> FoldedStats:
    """:func:`folded_stats` of an in-memory :class:`~scoremix.lme.spec.ModelSpec`."""
    y = np.asarray(spec.y, dtype=np.float64)
    X = np.asarray(spec.X, dtype=np.float64)
    design = [(np.asarray(t.codes, dtype=np.int64), np.asarray(t.X, dtype=np.float64))
              for t in spec.terms]
    w = None if spec.weights is None else np.asarray(spec.weights, dtype=np.float64)
    n_disp = 1 if spec.dispersion_codes is None else len(spec.dispersion_levels)
    return folded_stats(y, X, design, [t.n_levels for t in spec.terms], w, spec.dispersion_codes,
                        n_disp, spec.n, row_bounds(y, X, design, w))


def _moment_folds(y: np.ndarray, X: np.ndarray, design: list[tuple[np.ndarray, np.ndarray]],
                  w: np.ndarray | None, n_total: int, bounds: RowBounds) -> tuple:
    """Fold sums of ``log w``, ``y``, ``y²``, every ``X`` column and its square, and the
    squares of every random-term column."""
    K = K_FOLDS
    sc_lin = fold_scales(n_total, bounds.col)
    sc_sq = fold_scales(n_total, bounds.col ** 2)
    sc_logw = fold_scales(n_total, bounds.logw)

    def tot(v: np.ndarray, sc: np.ndarray) -> np.ndarray:
        return fold_sums(None, v, 1, sc)[0]

    logw = np.zeros(K) if w is None else tot(np.log(np.asarray(w, float)), sc_logw)
    p = X.shape[1]
    xsum = np.stack([tot(X[:, j], sc_lin) for j in range(p)]) if p else np.zeros((0, K))
    xsq = np.stack([tot(X[:, j] * X[:, j], sc_sq) for j in range(p)]) if p else np.zeros((0, K))
    term_sq = [np.stack([tot(Xk[:, a] * Xk[:, a], sc_sq) for a in range(Xk.shape[1])])
               for _, Xk in design]
    return logw, tot(y, sc_lin), tot(y * y, sc_sq), xsum, xsq, term_sq


def spec_moments(spec) -> dict:
    """:meth:`FoldedStats.moments` of an in-memory spec, without the cross-products."""
    y = np.asarray(spec.y, dtype=np.float64)
    X = np.asarray(spec.X, dtype=np.float64)
    design = [(np.asarray(t.codes), np.asarray(t.X, dtype=np.float64)) for t in spec.terms]
    w = None if spec.weights is None else np.asarray(spec.weights, dtype=np.float64)
    parts = _moment_folds(y, X, design, w, spec.n, row_bounds(y, X, design, w))
    empty = np.zeros((0, 0, 0, 0, K_FOLDS))
    fs = FoldedStats(empty, empty, empty, np.array([spec.n]), *parts)
    return fs.moments()


def _cross(A: np.ndarray, ca: tuple, cb: tuple, wt, sc: np.ndarray) -> None:
    """Add the block ``colᵃ' W colᵇ`` (and its mirror) into ``A`` ``(m, m, K)``."""
    K = len(sc)
    if ca[0] == "d" and cb[0] == "d":
        F = fold_sums(None, wt(ca[1] * cb[1]), 1, sc)[0]
        A[ca[2], cb[2]] = F
        A[cb[2], ca[2]] = F
        return
    if ca[0] == "d":
        ca, cb = cb, ca
    _, ck, xk, nl, ak, pk, st, term = ca
    ia = st + np.arange(nl) * pk + ak
    if cb[0] == "d":
        F = fold_sums(ck, wt(xk * cb[1]), nl, sc)
        A[ia, cb[2]] = F
        A[cb[2], ia] = F
        return
    _, ck2, xk2, nl2, ak2, pk2, st2, term2 = cb
    ib = st2 + np.arange(nl2) * pk2 + ak2
    if term == term2:   # same grouping factor: one level per row, diagonal in the level
        F = fold_sums(ck, wt(xk * xk2), nl, sc)
        A[ia, ib] = F
        A[ib, ia] = F
        return
    F = fold_sums(ck * nl2 + ck2, wt(xk * xk2), nl * nl2, sc).reshape(nl, nl2, K)
    A[np.ix_(ia, ib)] = F
    A[np.ix_(ib, ia)] = F.transpose(1, 0, 2)
