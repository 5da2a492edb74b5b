r"""Shapes between "one transform" and "one per stratum": per-level distributions shrunk toward a
shared shape, with the amount of pooling estimated from the data (:func:`fit_pooled_shapes`).

Within a class :math:`c` with strata (factor levels) :math:`\ell`, let :math:`F_\ell` be the
empirical distribution of level :math:`\ell`'s scores and :math:`G_\ell` its *shared-shape*
prediction: one increasing transform :math:`h_c` for the whole class and on its scale level
:math:`\ell` Gaussian with its own mean :math:`m_\ell` and SD :math:`s_\ell`; :math:`h_c` is
set by marginal matching, :math:`h_c(v)=\mathcal G_c^{-1}(\#\{S\le v\}/(n_c+1))` with
:math:`\mathcal G_c=\sum_\ell (n_\ell/n_c)\,\Phi((z-m_\ell)/s_\ell)` (three rounds from the
rank-based normal scores, re-estimating :math:`m_\ell, s_\ell`), and

.. math::

    G_\ell(v) = \Phi\big((h_c(v)-m_\ell)/s_\ell\big).

The pooled distribution of the level is the convex combination

.. math::

    \tilde F_\ell = w_\ell F_\ell + (1-w_\ell)\,G_\ell,\qquad w_\ell = \frac{n_\ell}{n_\ell+\kappa},

(the posterior mean of :math:`F_\ell` under a Dirichlet-process prior centred at
:math:`G_\ell` with concentration :math:`\kappa`; Ferguson 1973): :math:`\kappa=0` gives one
free transform per stratum, :math:`\kappa\to\infty` one shared shape with level locations and
scales, and levels with few trials are pulled further than levels with many.

:math:`\kappa` is chosen by speaker-grouped cross-validation of a proper scoring rule, the
threshold-weighted CRPS (Gneiting & Ranjan 2011) of every held-out trial,
:math:`\int(\tilde F_\ell(u)-1\{x\le u\})^2\,dF_c(u)`, with the weight measure the class's
pooled score distribution (so the score is invariant to increasing re-scalings of the scores),
approximated on ``n_grid`` quantiles of the class's scores.  For every fold the CRPS is a
quadratic in :math:`w_\ell`, so the whole :math:`\kappa` grid costs one pass over the data.

The fitted model is the location-scale transformation mixed model of
:mod:`scoremix.locscale.fit` with the stratum transforms matched to :math:`\tilde F_\ell`
instead of :math:`F_\ell` (its cumulative proportions at the level's distinct scores).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy.special import ndtr, ndtri

__all__ = ["KAPPA_GRID", "ShapePooling", "shape_pooling", "pooled_cdf", "fit_pooled_shapes"]

#: the κ values compared (0: one transform per stratum; inf: the shared shape)
KAPPA_GRID = (0.0, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0, np.inf)


@dataclass
class ShapePooling:
    """The chosen pooling: ``kappa``; ``weights`` per stratum (:math:`w_\\ell`, 1 for a class
    with one stratum); ``table``: CV CRPS per κ (lower is better, ``delta`` from the best)."""

    kappa: float
    weights: dict
    table: pd.DataFrame


def _class_transform(scores: np.ndarray, level: np.ndarray, n_iter: int = 3, n_grid: int = 2000) -> Any:
    """:math:`h_c` (module docstring) as a function of a score, and every level's mean and SD
    on its scale."""
    v, cnt = np.unique(scores, return_counts=True)
    n = scores.size
    p = np.cumsum(cnt) / (n + 1.0)
    p0 = np.r_[0.5 / (n + 1.0), p]          # below the smallest score

    def at(knots: np.ndarray, x: np.ndarray) -> np.ndarray:
        k = np.searchsorted(v, x, side="right")   # cells: below v_0 → 0, v_k ≤ x < v_{k+1} → k + 1
        return knots[k]

    knots = ndtri(p0)
    levels = pd.unique(level)
    for _ in range(n_iter):
        z = at(knots, scores)
        ms = [(float(np.mean(z[level == lv])), max(float(np.std(z[level == lv])), 1e-3) if np.sum(level == lv) > 1
               else 1.0) for lv in levels]
        w = np.array([np.mean(level == lv) for lv in levels])
        m = np.array([a for a, _ in ms])
        sd = np.array([b for _, b in ms])
        grid = np.linspace(float(np.min(m - 8 * sd)), float(np.max(m + 8 * sd)), n_grid)
        G = (ndtr((grid[:, None] - m[None]) / sd[None]) * w[None]).sum(axis=1)
        ok = np.r_[True, np.diff(G) > 0]
        knots = np.interp(p0, G[ok], grid[ok])
    z = at(knots, scores)
    stats = {lv: (float(np.mean(z[level == lv])), max(float(np.std(z[level == lv])), 1e-3)
                  if np.sum(level == lv) > 1 else 1.0) for lv in levels}
    return (lambda x: at(knots, np.asarray(x, np.float64))), stats


def _level_parts(scores: np.ndarray, level: np.ndarray, grid: np.ndarray
                 ) -> dict[Any, tuple[np.ndarray, np.ndarray, int]]:
    """For every level: its empirical CDF and its shared-shape CDF on ``grid``, and its size."""
    h, stats = _class_transform(scores, level)
    hg = h(grid)
    out = {}
    for lv in pd.unique(level):
        x = np.sort(scores[level == lv])
        F = np.searchsorted(x, grid, side="right") / x.size
        m, s = stats[lv]
        out[lv] = (F, ndtr((hg - m) / s), x.size)
    return out


def _weights(n: float, kappa: float) -> float:
    if kappa == 0:
        return 1.0
    if not np.isfinite(kappa):
        return 0.0
    return n / (n + kappa)


def shape_pooling(scores: np.ndarray, level: np.ndarray, cls: np.ndarray, speaker: np.ndarray, *,
                  n_folds: int = 4, seed: int = 0, n_grid: int = 200,
                  kappas: Sequence[float] = KAPPA_GRID) -> ShapePooling:
    """Choose :math:`\\kappa` by speaker-grouped CV of the threshold-weighted CRPS (module
    docstring); ``level`` holds each trial's stratum, ``cls`` its class."""
    scores = np.asarray(scores, np.float64)
    level = np.asarray(level, dtype=object)
    speakers = np.unique(np.asarray(speaker).astype(str))
    rng = np.random.default_rng(seed)
    fold_of = dict(zip(speakers, rng.permutation(np.arange(speakers.size) % max(2, n_folds))))
    fold = np.array([fold_of[s] for s in np.asarray(speaker).astype(str)])
    kap = np.asarray(kappas, np.float64)
    crps = np.zeros(kap.size)
    weights: dict = {}
    for c in np.unique(cls):
        in_c = cls == c
        levels = pd.unique(level[in_c])
        if len(levels) < 2:
            weights.update({lv: 1.0 for lv in levels})
            continue
        grid = np.quantile(scores[in_c], (np.arange(n_grid) + 0.5) / n_grid)
        for k in np.unique(fold):
            tr, te = in_c & (fold != k), in_c & (fold == k)
            if not te.any() or not tr.any():
                continue
            parts = _level_parts(scores[tr], level[tr], grid)
            for lv in pd.unique(level[te]):
                xt = scores[te & (level == lv)]
                ind = (xt[:, None] <= grid[None, :]).astype(np.float64)
                if lv not in parts:              # a level none of the training speakers has: shared shape
                    continue
                F, G, n = parts[lv]
                # sum_t mean_u (G - I_t + w (F - G))^2 = a + 2 b w + c w^2
                D = G[None, :] - ind
                a = float(np.mean(D ** 2, axis=1).sum())
                b = float(np.mean(D * (F - G)[None, :], axis=1).sum())
                cc = float(np.mean((F - G) ** 2) * xt.size)
                w = np.array([_weights(n, kk) for kk in kap])
                crps += a + 2 * b * w + cc * w ** 2
    best = int(np.argmin(crps))
    kappa = float(kap[best])
    for c in np.unique(cls):
        in_c = cls == c
        for lv in pd.unique(level[in_c]):
            if lv not in weights:
                weights[lv] = _weights(int(np.sum(in_c & (level == lv))), kappa)
    table = pd.DataFrame({"kappa": kap, "cv_crps": crps, "delta": crps - crps[best], "chosen": np.arange(kap.size) == best})
    return ShapePooling(kappa=kappa, weights=weights, table=table)


def pooled_cdf(scores: np.ndarray, level: np.ndarray, cls: np.ndarray, pooling: ShapePooling, lv: Any,
               at: np.ndarray) -> np.ndarray:
    """:math:`\\tilde F_\\ell` of level ``lv`` at the scores ``at`` (all trials of its class
    define :math:`h_c`)."""
    c = cls[level == lv][0]
    in_c = cls == c
    parts = _level_parts(scores[in_c], level[in_c], np.asarray(at, np.float64))
    F, G, _ = parts[lv]
    w = pooling.weights[lv]
    return w * F + (1 - w) * G


def fit_pooled_shapes(trials: pd.DataFrame, spec: Any, *, kappa: float | None = None, n_folds: int = 4,
                      seed: int = 0, n_pass: int = 3, n_nodes: int = 9) -> Any:
    """Fit :func:`scoremix.locscale.fit_locscale` with each stratum's transform matched to its
    pooled distribution :math:`\\tilde F_\\ell` (module docstring); ``kappa=None`` chooses it by
    cross-validation.  The fit carries ``shape_pooling`` (:class:`ShapePooling`)."""
    from scoremix.locscale.fit import LocScaleData, fit_locscale

    data = LocScaleData(trials, spec)
    cells = data.cells
    level = data.strata.to_numpy(dtype=object)
    cls = data.y
    spk = trials[spec.speaker].astype(str).to_numpy()
    if kappa is None:
        pool = shape_pooling(data.score, level, cls, spk, n_folds=n_folds, seed=seed)
    else:
        weights = {lv: _weights(int(np.sum(level == lv)), float(kappa)) if np.unique(level[cls == cls[level == lv][0]]).size > 1
                   else 1.0 for lv in pd.unique(level)}
        pool = ShapePooling(kappa=float(kappa), weights=weights, table=pd.DataFrame())
    for s, lv in enumerate(cells.levels):
        if pool.weights.get(lv, 1.0) >= 1.0 or cells.values[s].size < 2:
            continue
        p = pooled_cdf(data.score, level, cls, pool, lv, cells.values[s])
        p = np.maximum.accumulate(np.clip(p, 1e-12, 1.0))
        p[-1] = 1.0
        bump = np.r_[False, np.diff(p) <= 0]
        if bump.any():                       # strictly increasing cumulative proportions
            p = np.minimum(p + np.cumsum(bump) * 1e-12, 1.0)
            p[:-1] = np.minimum(p[:-1], 1.0 - 1e-12)
        cells.cum[s] = p
    fit = fit_locscale(data, spec, n_pass=n_pass, n_nodes=n_nodes)
    fit.shape_pooling = pool
    return fit
