r"""Stratum transforms and interval-censored latent values of a location-scale score model.

Every trial belongs to one *stratum* ``s`` (its class and the levels of the stratifying
factors, e.g. bona fide / spoof × attack).  Each stratum has its own increasing map
:math:`h_s` from scores to the latent Gaussian scale, estimated non-parametrically from its
distinct scores :math:`v_{s,1} < \dots < v_{s,K}` and their cumulative proportions
:math:`p_{s,k} = \#\{S \le v_{s,k}\}/n_s`: a score :math:`v_{s,k}` means the latent value lies
in the cell :math:`(\alpha_{s,k-1}, \alpha_{s,k}]` (:math:`\alpha_{s,0}=-\infty`,
:math:`\alpha_{s,K}=+\infty`).  The edges are set by *marginal matching*

.. math::

    \alpha_{s,k} = G_s^{-1}(p_{s,k}),\qquad
    G_s(z) = \frac1{n_s}\sum_{i\in s}\Phi\Big(\frac{z-m_i}{\sigma_i}\Big),

so that the model's distribution of stratum ``s`` (the mixture of its trials' fitted latent
Gaussians) reproduces the stratum's empirical distribution at every fitted score; the first
pass uses :math:`G_s=\Phi` (rank-based normal scores).  A stratum with one distinct score
(e.g. a saturated attack, all at the clipping value) has no edge: it is a point mass on the
score scale and carries no information on the latent scale.

Latent values.  A trial in cell :math:`(\alpha_{k-1},\alpha_k]` enters the Gaussian model
through the first two moments of its latent value given the cell (the E-step of EM for
interval-censored Gaussian data): the truncated moments under its current predictive
:math:`N(m_i,\sigma_i^2)` for wide cells (ties, saturation, the two open end cells) and the
midpoint with the uniform within-cell variance :math:`w^2/12` for narrow ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import log_ndtr, ndtr, ndtri

from scoremix.transform.monotone import MonotoneTransform
from scoremix.transform.strata import StratifiedTransform

__all__ = ["StrataCells", "strata_cells", "normal_score_edges", "matched_edges", "cell_moments",
           "truncated_moments", "stratified_transform"]

_NARROW = 0.05


@dataclass
class StrataCells:
    """The cell structure of every stratum: for trial ``i`` its stratum ``stratum[i]`` and
    cell ``k[i]`` (0-based index of its distinct score within the stratum).

    Attributes
    ----------
    levels: stratum labels (``S``).
    values: per stratum, the sorted distinct scores (``K_s``).
    cum: per stratum, the cumulative proportions :math:`p_{s,k}` (``K_s``; the last is 1).
    stratum, k: ``(n,)`` integer codes.
    """

    levels: list
    values: list
    cum: list
    stratum: np.ndarray
    k: np.ndarray

    @property
    def n_strata(self) -> int:
        return len(self.levels)


def strata_cells(scores: np.ndarray, strata: np.ndarray) -> StrataCells:
    """Distinct scores and cumulative proportions of every stratum (``strata``: labels)."""
    codes, levels = pd.factorize(pd.Series(strata, dtype=object), sort=True)
    scores = np.asarray(scores, dtype=np.float64)
    k = np.empty(scores.size, np.int64)
    values, cum = [], []
    for s in range(len(levels)):
        idx = np.flatnonzero(codes == s)
        v, inv, cnt = np.unique(scores[idx], return_inverse=True, return_counts=True)
        k[idx] = inv
        values.append(v)
        cum.append(np.cumsum(cnt) / idx.size)
    return StrataCells(list(levels), values, cum, codes.astype(np.int64), k)


def normal_score_edges(cells: StrataCells) -> list[np.ndarray]:
    """First-pass edges :math:`\\alpha_{s,k}=\\Phi^{-1}(p_{s,k})`, ``k = 1..K_s-1``."""
    return [ndtri(c[:-1]) for c in cells.cum]


def matched_edges(cells: StrataCells, mean: np.ndarray, sd: np.ndarray, n_grid: int = 1500) -> list[np.ndarray]:
    """Edges by marginal matching (module docstring) for per-trial latent moments
    ``mean``/``sd``: :math:`G_s` on a grid, inverted by interpolation in probit space and
    polished by two Newton steps."""
    out = []
    for s in range(cells.n_strata):
        p = cells.cum[s][:-1]
        if p.size == 0:
            out.append(p.copy())
            continue
        idx = cells.stratum == s
        key, cnt = np.unique(np.c_[mean[idx], sd[idx]], axis=0, return_counts=True)
        m, sg, w = key[:, 0], key[:, 1], cnt / cnt.sum()
        lo, hi = float(np.min(m - 9 * sg)), float(np.max(m + 9 * sg))
        z = np.linspace(lo, hi, n_grid)
        G = (ndtr((z[:, None] - m[None]) / sg[None]) * w[None]).sum(axis=1)
        q = ndtri(np.clip(G, 1e-300, 1 - 1e-16))
        ok = np.isfinite(q) & np.r_[True, np.diff(q) > 0]
        a = np.interp(ndtri(p), q[ok], z[ok])
        for _ in range(2):
            Ga = (ndtr((a[:, None] - m[None]) / sg[None]) * w[None]).sum(axis=1)
            ga = (np.exp(-0.5 * ((a[:, None] - m[None]) / sg[None]) ** 2) / (np.sqrt(2 * np.pi) * sg[None])
                  * w[None]).sum(axis=1)
            step = np.where(ga > 1e-12, (Ga - p) / np.maximum(ga, 1e-300), 0.0)
            a = a - np.clip(step, -0.5, 0.5)
        a = np.maximum.accumulate(a)
        bump = np.r_[False, np.diff(a) <= 0]
        if bump.any():   # keep the edges strictly increasing
            a = a + np.cumsum(bump) * 1e-9
        out.append(a)
    return out


def truncated_moments(lo: np.ndarray, hi: np.ndarray, m: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""Mean and second moment of :math:`N(m, s^2)` truncated to :math:`(lo, hi]`.

    Stable in the tails: the interval is reflected so that it lies mostly above ``m`` is
    avoided; ratios :math:`\phi/\Delta\Phi` are formed in log space."""
    a = (lo - m) / s
    b = (hi - m) / s
    flip = (a + b) > 0                      # work on the side where Φ differences are not 1 - 1
    a2 = np.where(flip, -b, a)
    b2 = np.where(flip, -a, b)
    la, lb = log_ndtr(a2), log_ndtr(b2)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        logZ = lb + np.log1p(-np.exp(np.minimum(la - lb, 0.0)))
        pa = np.where(np.isfinite(a2), np.exp(-0.5 * a2 ** 2 - 0.5 * np.log(2 * np.pi) - logZ), 0.0)
        pb = np.where(np.isfinite(b2), np.exp(-0.5 * b2 ** 2 - 0.5 * np.log(2 * np.pi) - logZ), 0.0)
        e1 = pa - pb
        aa = np.where(np.isfinite(a2), a2 * pa, 0.0)
        bb = np.where(np.isfinite(b2), b2 * pb, 0.0)
        e2 = 1.0 + aa - bb
    bad = ~np.isfinite(logZ) | ~np.isfinite(e1) | ~np.isfinite(e2)
    if bad.any():   # interval with no mass under N(m, s): its nearest finite end
        near = np.where(np.isfinite(a2), a2, b2)
        e1 = np.where(bad, near, e1)
        e2 = np.where(bad, near ** 2, e2)
    e1 = np.where(flip, -e1, e1)
    mean = m + s * e1
    second = m ** 2 + 2 * m * s * e1 + s ** 2 * e2
    second = np.maximum(second, mean ** 2)
    return mean, second


def cell_moments(cells: StrataCells, edges: list[np.ndarray], mean: np.ndarray, sd: np.ndarray,
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per trial ``E[z]``, ``E[z²]`` given its cell and whether it is informative (its
    stratum has at least two distinct scores)."""
    n = cells.stratum.size
    lo = np.empty(n)
    hi = np.empty(n)
    info = np.ones(n, bool)
    for s in range(cells.n_strata):
        idx = np.flatnonzero(cells.stratum == s)
        ext = np.concatenate([[-np.inf], edges[s], [np.inf]])
        kk = cells.k[idx]
        lo[idx], hi[idx] = ext[kk], ext[kk + 1]
        if edges[s].size == 0:
            info[idx] = False
    width = hi - lo
    narrow = np.isfinite(width) & (width < _NARROW)
    ez = np.zeros(n)
    ez2 = np.zeros(n)
    ez[narrow] = 0.5 * (lo[narrow] + hi[narrow])
    ez2[narrow] = ez[narrow] ** 2 + width[narrow] ** 2 / 12.0
    wide = ~narrow & info
    if wide.any():
        e1, e2 = truncated_moments(lo[wide], hi[wide], mean[wide], sd[wide])
        ez[wide], ez2[wide] = e1, e2
    return ez, ez2, info


def stratified_transform(cells: StrataCells, edges: list[np.ndarray], column: str) -> StratifiedTransform:
    """The fitted :class:`~scoremix.transform.StratifiedTransform` (one
    :class:`~scoremix.transform.MonotoneTransform` per stratum, edges :math:`\\alpha_{s,k}`)."""
    parts = [MonotoneTransform(v, a, info={"kind": "marginal-matched"}) for v, a in zip(cells.values, edges)]
    return StratifiedTransform(column, cells.levels, parts)
