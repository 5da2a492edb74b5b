"""lme4's design checks evaluated from summed moments instead of rows.

* rank (``chkRank.drop.cols``): column ``j`` of ``X`` is kept iff its residual after
  projecting on the kept columns before it satisfies ``‖(I−P_K)x_j‖ ≥ tol‖x_j‖``; from the
  Gram matrix ``G = X'X`` that residual is the Schur complement
  ``G_jj − G_jK G_KK^{-1} G_Kj``.  As in the in-memory check, a well-conditioned scaled
  Gram matrix (Cholesky pivots² > 1e-8) keeps every column at once.
* scale (``checkScaleX``): the SDs ``s_j = sqrt((Σx² − (Σx)²/n)/(n−1))`` of the columns that
  are not all 0/1 must lie in ``[1/1000, 1000]`` with ratios in the same range.
* grouping (``checkNlevels``, ``check.nobs.vs.nRE``): every grouping factor has > 1 and
  < n levels, and n > q_k for every term.
"""

from __future__ import annotations

import numpy as np

from scoremix.lme.errors import GroupingError
from scoremix.lme.model_frame import RANK_TOL, check_nobs_vs_random_effects, gram_clearly_full_rank

__all__ = ["keep_columns_from_gram", "badly_scaled_from_moments", "check_groupings"]


def keep_columns_from_gram(G: np.ndarray, tol: float = RANK_TOL) -> np.ndarray:
    """Indices of the columns lme4 keeps, from ``G = X'X`` (see the module docstring)."""
    p = G.shape[0]
    if p == 0:
        return np.arange(0)
    if gram_clearly_full_rank(G):
        return np.arange(p)
    d = np.diag(G).copy()
    keep: list[int] = []
    for j in range(p):
        if not d[j] > 0 or not np.isfinite(d[j]):
            continue
        if keep:
            K = np.asarray(keep)
            g = G[K, j]
            res2 = d[j] - g @ np.linalg.solve(G[np.ix_(K, K)], g)
        else:
            res2 = d[j]
        if res2 >= (tol ** 2) * d[j]:
            keep.append(j)
    return np.asarray(keep, dtype=np.int64)


def badly_scaled_from_moments(n: int, xsum: np.ndarray, xsq: np.ndarray, x01: np.ndarray,
                              tol: float = 1e3) -> bool:
    """lme4's ``checkScaleX`` from column sums, sums of squares and the 0/1 flags."""
    cont = ~np.asarray(x01, bool)
    if not cont.any() or n < 2:
        return bool(cont.any() and n < 2)
    var = (xsq[cont] - xsum[cont] ** 2 / n) / (n - 1)
    sd = np.sqrt(np.maximum(var, 0.0))
    with np.errstate(divide="ignore"):
        logsd = np.log(sd)
    if np.any(~np.isfinite(logsd)):
        return True
    lim = np.log(tol)
    return bool(np.any(np.abs(logsd) > lim) or (logsd.max() - logsd.min()) > lim)


def check_groupings(n: int, terms: list[tuple[str, str, int, int]]) -> None:
    """Raise :class:`GroupingError` as lme4 does; ``terms``: ``(label, factor, n_levels, p)``."""
    flist: dict[str, int] = {}
    for _, f, nl, _ in terms:
        flist.setdefault(f, nl)
    few = [f for f, k in flist.items() if k < 2]
    if few:
        raise GroupingError(f"grouping factors must have > 1 sampled level (problems: {', '.join(few)})")
    check_nobs_vs_random_effects(flist, [(label, nl * p) for label, _, nl, p in terms], n)
