r"""Model-based SVEva measures of Gaussian-mixture populations (point fits and posterior draws).

Each population ``p`` (overall, or subgroup ``g``) has class-conditional (latent) score
distributions that are mixtures of normal components ``N(μ_m, σ_m²)`` with weights
``w_{pm}`` (rates from :class:`scoremix.predictive.mixture.MixtureRates`):

.. math::

    P^p_{fa}(\tau) = \frac{\sum_{m: y_m=0} w_{pm}\,\Phi\big((\mu_m-\tau)/\sigma_m\big)}
                           {\sum_{m: y_m=0} w_{pm}},\qquad
    P^p_{miss}(\tau) = \frac{\sum_{m: y_m=1} w_{pm}\,\Phi\big((\tau-\mu_m)/\sigma_m\big)}
                             {\sum_{m: y_m=1} w_{pm}},

and ``C^p(τ) = c_miss·π·P_miss + c_fa·(1-π)·P_fa``.  ``τ*`` and each ``minDCF_g`` are
found by a grid search followed by golden-section refinement; the EER solves
``P_miss(τ) = P_fa(τ)`` by bisection.  The SVEva ratios then follow as for the
empirical measures (:mod:`scoremix.fairness.sveva`).  Thresholds here are on the model's
(latent) scale — for a stratified transform, points of the common threshold axis
(:mod:`scoremix.predictive.axis`), where component ``m`` is evaluated at its stratum's latent
threshold; callers map them to the score scale
(:meth:`scoremix.predictive.Predictive.to_score`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix._deprecate import renamed_kwargs
from scoremix.fairness.engine import MEASURES, CostSpec, quiet_runtime_warnings
from scoremix.predictive.mixture import MixtureRates, batch_eer

__all__ = ["gaussian_mixture_measures", "posterior_subgroup_measures", "summarise_draws", "PosteriorFairness"]

_GOLD = (np.sqrt(5.0) - 1.0) / 2.0


def _minimise(mix: MixtureRates, cost: CostSpec, n_grid: int, n_iter: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """Per population and draw: ``(min cost, argmin τ)``, both ``(P, D)``."""
    a, b = cost.weights
    grid = mix.grid(n_grid)  # (D, T)
    tau = np.broadcast_to(grid[None], (mix.P,) + grid.shape)
    pm, pf = mix.rates(tau)
    c = a * pm + b * pf
    k = np.argmin(np.where(np.isnan(c), np.inf, c), axis=2)  # (P, D)
    T = grid.shape[1]
    step = grid[:, 1] - grid[:, 0]
    lo = np.take_along_axis(tau, np.clip(k - 1, 0, T - 1)[..., None], 2)[..., 0]
    hi = np.take_along_axis(tau, np.clip(k + 1, 0, T - 1)[..., None], 2)[..., 0]
    hi = np.where(k == T - 1, hi + step[None, :] * 1e6, hi)  # reject-all direction

    def f(t: np.ndarray) -> np.ndarray:
        pm_, pf_ = mix.rates(t[..., None])
        return (a * pm_ + b * pf_)[..., 0]

    x1 = hi - _GOLD * (hi - lo)
    x2 = lo + _GOLD * (hi - lo)
    f1, f2 = f(x1), f(x2)
    for _ in range(n_iter):
        left = f1 <= f2
        lo, hi = np.where(left, lo, x1), np.where(left, x2, hi)
        nx1 = np.where(left, hi - _GOLD * (hi - lo), x2)
        nx2 = np.where(left, x1, lo + _GOLD * (hi - lo))
        fn = f(np.where(left, nx1, nx2))
        f1, f2 = np.where(left, fn, f2), np.where(left, f1, fn)
        x1, x2 = nx1, nx2
    t_best = np.where(f1 <= f2, x1, x2)
    c_best = np.minimum(f1, f2)
    c_grid = np.take_along_axis(c, k[..., None], 2)[..., 0]
    better = c_grid < c_best
    t_grid = np.take_along_axis(tau, k[..., None], 2)[..., 0]
    return np.where(better, c_grid, c_best), np.where(better, t_grid, t_best)



def gaussian_mixture_measures(mu: np.ndarray, sd: np.ndarray, is_pos: np.ndarray, weights: np.ndarray,
                              p_target: float = 0.05, c_miss: float = 1.0, c_fa: float = 1.0,
                              normalize: bool = False, n_grid: int = 512, axis: Any = None,
                              stratum: np.ndarray | None = None, progress: bool = False,
                              desc: str = "posterior draws") -> dict[str, np.ndarray]:
    """All SVEva measures when each population's class scores are normal mixtures.

    Parameters
    ----------
    mu, sd:
        ``(D, m)`` component means and SDs for ``D`` draws (``D = 1`` for a point fit).
    is_pos:
        ``(m,)`` class of each component.
    weights:
        ``(1 + G, m)`` non-negative component weights; row 0 is the overall population,
        rows ``1..G`` the subgroups (normalised within class and row).
    progress, desc:
        a tqdm bar over the draws (computed in memory-bounded chunks), labelled ``desc``.
    p_target, c_miss, c_fa, normalize:
        detection-cost parameters.
    n_grid:
        grid size of the threshold search before refinement.
    axis, stratum:
        the threshold axis of the fit and the stratum of every component
        (:attr:`scoremix.predictive.Predictive.axis` / ``.stratum``): with a stratified
        transform the thresholds searched are points of the common axis, one score threshold
        for all strata.  ``None``: the latent scale.

    Returns
    -------
    dict with ``all_min_dcf, all_threshold, all_fpr, all_fnr, all_eer, fairness_index``
    ``(D,)`` and the per-subgroup measures ``(G, D)`` named as in the empirical table.
    """
    cost = CostSpec(p_target=p_target, c_miss=c_miss, c_fa=c_fa, normalize=normalize)
    a, b = cost.weights
    mix = MixtureRates(mu, sd, is_pos, weights, axis=axis, stratum=stratum)
    D = mix.mu.shape[0]
    # chunk over draws to bound memory
    per = max(1, int(4e6 // max(1, mix.mu.shape[1] * n_grid * mix.P)))
    parts = []
    from tqdm.auto import tqdm

    bar = tqdm(total=D, desc=desc, unit="draw", disable=not progress, leave=False)
    for s0 in range(0, D, per):
        sub = mix.subset_draws(slice(s0, s0 + per))
        mins, taus = _minimise(sub, cost, n_grid)
        eer = batch_eer(sub)
        t_star = taus[0]
        pm, pf = sub.rates(np.broadcast_to(t_star[None, :, None], (sub.P, t_star.size, 1)))
        pm, pf = pm[..., 0], pf[..., 0]
        parts.append((mins, taus, eer, pm, pf))
        bar.update(sub.mu.shape[0])
    bar.close()
    mins, taus, eer, pm, pf = (np.concatenate([p[i] for p in parts], axis=1) for i in range(5))
    with np.errstate(invalid="ignore", divide="ignore"):
        dcf_at = a * pm + b * pf
        out = {"all_min_dcf": mins[0], "all_threshold": taus[0], "all_fpr": pf[0], "all_fnr": pm[0],
               "all_eer": eer[0], "dcf_at_overall": dcf_at[1:], "min_dcf": mins[1:], "threshold_own": taus[1:],
               "ratio_overall": dcf_at[1:] / mins[0][None, :], "ratio_own": mins[1:] / dcf_at[1:],
               "fpr": pf[1:], "fnr": pm[1:], "fpr_ratio": pf[1:] / pf[0][None, :],
               "fnr_ratio": pm[1:] / pm[0][None, :], "eer": eer[1:]}
    r = out["ratio_overall"]
    out["fairness_index"] = np.where(r > 1, r, 0.0).sum(axis=0)
    return out



@dataclass
class PosteriorFairness:
    """Posterior summaries of the SVEva measures.

    ``table``: per subgroup ``<measure>`` (posterior median), ``<measure>_lo/_hi``
    (equal-tailed credible interval) and ``p_ratio_overall_gt_1``;
    ``fairness_index``: posterior median, ``fairness_index_ci``; ``draws``: per-draw arrays
    (``(G, D)`` per subgroup measure, ``(D,)`` for ``all_*`` and ``fairness_index``);
    ``overall``: posterior medians of the overall ``min_dcf, threshold, fpr, fnr, eer``;
    ``overall_empirical``: the empirical overall measures (when computed); ``notes``: caveats
    shown next to the table.
    """

    table: pd.DataFrame
    fairness_index: float
    fairness_index_ci: tuple[float, float]
    draws: dict[str, np.ndarray]
    overall: dict[str, float] = field(default_factory=dict)
    overall_empirical: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def min_dcf(self) -> float:
        """Posterior median of the overall minimum DCF."""
        return self.overall.get("min_dcf", float("nan"))

    @property
    def threshold(self) -> float:
        """Posterior median of the overall minimiser ``τ*``."""
        return self.overall.get("threshold", float("nan"))

    def plot_forest(self, measure: str = "ratio_overall", **kwargs: Any):
        """Forest plot of posterior medians with credible intervals (:func:`scoremix.fairness.plots.plot_forest`)."""
        from scoremix.fairness.plots import plot_forest

        return plot_forest(self.table, measure=measure, **kwargs)

    def p_fairness_index_gt(self, value: float) -> float:
        """Posterior probability ``P(FI > value)``."""
        return float(np.mean(self.draws["fairness_index"] > value))



@renamed_kwargs(ci="level")
def posterior_subgroup_measures(mu_neg: np.ndarray, sd_neg: np.ndarray, mu_pos: np.ndarray, sd_pos: np.ndarray,
                                n_neg: np.ndarray | None = None, n_pos: np.ndarray | None = None,
                                names: Sequence[str] | None = None, *, p_target: float = 0.05,
                                c_miss: float = 1.0, c_fa: float = 1.0, normalize: bool = False,
                                level: float = 0.95, n_grid: int = 256) -> PosteriorFairness:
    """SVEva measures per posterior draw from per-subgroup class-conditional normals.

    For draw ``d`` subgroup ``g`` has negative scores ``N(mu_neg[d,g], sd_neg[d,g]²)``
    and positive scores ``N(mu_pos[d,g], sd_pos[d,g]²)``; the overall population is the
    mixture with weights ``n_neg`` / ``n_pos`` (trial counts; default equal).

    Parameters
    ----------
    mu_neg, sd_neg, mu_pos, sd_pos:
        ``(D, G)`` arrays (a ``(G,)`` array is one draw).
    n_neg, n_pos:
        ``(G,)`` class counts per subgroup (mixture weights of the overall population).
    names:
        subgroup names (default ``g0, g1, …``).
    level:
        credible level of the equal-tailed intervals.

    Returns
    -------
    PosteriorFairness
    """
    ci = level  # the body's name for level= (renamed API argument)
    arrs = [np.atleast_2d(np.asarray(x, float)) for x in (mu_neg, sd_neg, mu_pos, sd_pos)]
    if len({a.shape for a in arrs}) != 1:
        raise ValueError(f"mu_neg, sd_neg, mu_pos, sd_pos must share one shape, got {[a.shape for a in arrs]}")
    D, G = arrs[0].shape
    n_neg = np.ones(G) if n_neg is None else np.asarray(n_neg, float)
    n_pos = np.ones(G) if n_pos is None else np.asarray(n_pos, float)
    mu = np.concatenate([arrs[0], arrs[2]], axis=1)
    sd = np.concatenate([arrs[1], arrs[3]], axis=1)
    is_pos = np.r_[np.zeros(G, bool), np.ones(G, bool)]
    W = np.zeros((1 + G, 2 * G))
    W[0] = np.r_[n_neg, n_pos]
    W[1 + np.arange(G), np.arange(G)] = 1.0
    W[1 + np.arange(G), G + np.arange(G)] = 1.0
    res = gaussian_mixture_measures(mu, sd, is_pos, W, p_target=p_target, c_miss=c_miss, c_fa=c_fa,
                                    normalize=normalize, n_grid=n_grid)
    tab = pd.DataFrame({"subgroup": list(names) if names is not None else [f"g{k}" for k in range(G)]})
    return summarise_draws(res, tab, ci)



def summarise_draws(res: dict[str, np.ndarray], tab: pd.DataFrame, ci: float) -> PosteriorFairness:
    """Posterior summaries of per-draw measures (output of :func:`gaussian_mixture_measures`).

    Adds to ``tab`` (one row per subgroup) the posterior median ``<measure>``, the
    equal-tailed ``ci`` credible interval ``<measure>_lo/_hi`` and
    ``p_ratio_overall_gt_1 = (1/D) Σ_d 1[ratio_overall_d > 1]``; draws with NaN measures
    (e.g. a subgroup without one class) give NaN summaries.
    """
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci must be in (0, 1), got {ci}")
    q = (1 - ci) / 2
    tab = tab.copy()
    with quiet_runtime_warnings():
        for k in MEASURES:
            x = res[k]
            tab[k] = np.nanmedian(x, axis=1)
            tab[f"{k}_lo"] = np.nanquantile(x, q, axis=1)
            tab[f"{k}_hi"] = np.nanquantile(x, 1 - q, axis=1)
    r = res["ratio_overall"]
    tab["p_ratio_overall_gt_1"] = np.where(np.isnan(r).all(axis=1), np.nan, np.mean(r > 1, axis=1))
    fi = res["fairness_index"]
    overall = {k: float(np.median(res[f"all_{k}"])) for k in ("min_dcf", "threshold", "fpr", "fnr", "eer")}
    return PosteriorFairness(table=tab, fairness_index=float(np.median(fi)),
                             fairness_index_ci=(float(np.quantile(fi, q)), float(np.quantile(fi, 1 - q))),
                             draws=res, overall=overall)
