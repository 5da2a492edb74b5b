"""Model-based SVEva measures from Gaussian mixtures (fitted LMMs or posterior draws).

Each population ``p`` (overall, or subgroup ``g``) has class-conditional score
distributions that are mixtures of normal components ``N(μ_m, σ_m²)`` with weights
``w_{pm}``:

.. math::

    P^p_{fa}(\\tau) = \\frac{\\sum_{m: y_m=0} w_{pm}\\,\\Phi\\big((\\mu_m-\\tau)/\\sigma_m\\big)}
                           {\\sum_{m: y_m=0} w_{pm}},\\qquad
    P^p_{miss}(\\tau) = \\frac{\\sum_{m: y_m=1} w_{pm}\\,\\Phi\\big((\\tau-\\mu_m)/\\sigma_m\\big)}
                             {\\sum_{m: y_m=1} w_{pm}},

and ``C^p(τ) = c_miss·π·P_miss + c_fa·(1-π)·P_fa``.  ``τ*`` and each ``minDCF_g`` are
found by a grid search followed by golden-section refinement; the EER solves
``P_miss(τ) = P_fa(τ)`` by bisection.  The SVEva ratios then follow as for the
empirical measures (:mod:`scoremix.fairness.sveva`).

* :func:`model_subgroup_dcf`: components are the trials of a fitted LMM, with means
  ``x_iᵀβ̂ + z_iᵀb̂`` (conditional on the speakers' random effects) or ``x_iᵀβ̂`` plus
  the non-marginalised random effects, with the marginalised random-intercept variances
  added to ``σ²_class`` (new speakers).
* :func:`posterior_subgroup_measures`: one normal per subgroup and class per posterior
  draw (plain arrays), giving posterior medians, credible intervals, ``P(ratio_overall > 1)``
  and the Fairness-Index distribution.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy.special import ndtr

from scoremix.fairness.engine import MEASURES, CostSpec, quiet_runtime_warnings
from scoremix.fairness.subgroups import SubgroupError, binary_labels, define_subgroups

__all__ = ["gaussian_mixture_measures", "model_subgroup_dcf", "posterior_subgroup_measures",
           "summarise_draws", "ModelSubgroupDCFResult", "PosteriorFairness"]

_GOLD = (np.sqrt(5.0) - 1.0) / 2.0


class _Mixture:
    """Rates of ``P`` populations for ``D`` draws at thresholds ``tau`` ``(P, D)``."""

    def __init__(self, mu: np.ndarray, sd: np.ndarray, is_pos: np.ndarray, weights: np.ndarray) -> None:
        self.mu = np.atleast_2d(np.asarray(mu, float))
        self.sd = np.atleast_2d(np.asarray(sd, float))
        if self.mu.shape != self.sd.shape:
            raise ValueError(f"mu {self.mu.shape} and sd {self.sd.shape} must have the same shape")
        if np.any(self.sd <= 0):
            raise ValueError("all component standard deviations must be positive")
        self.is_pos = np.asarray(is_pos, bool)
        W = np.asarray(weights, float)
        wp = W * self.is_pos[None, :]
        wn = W * (~self.is_pos)[None, :]
        with np.errstate(invalid="ignore", divide="ignore"):
            self.wp = wp / wp.sum(axis=1, keepdims=True)
            self.wn = wn / wn.sum(axis=1, keepdims=True)
        self.P = W.shape[0]
        # components used by each population, per class (sparse use keeps it fast)
        self._pos_idx = np.flatnonzero(self.is_pos)
        self._neg_idx = np.flatnonzero(~self.is_pos)

    def rates(self, tau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``tau``: ``(P, D, T)`` → ``p_miss, p_fa`` of the same shape."""
        pm = np.zeros(tau.shape)
        pf = np.zeros(tau.shape)
        # (D, m, 1) vs (P, D, T): loop over components in blocks to bound memory
        for idx, out, pos in ((self._pos_idx, pm, True), (self._neg_idx, pf, False)):
            w = (self.wp if pos else self.wn)[:, idx]  # (P, k)
            for start in range(0, idx.size, 256):
                sl = idx[start:start + 256]
                mu = self.mu[:, sl]  # (D, k)
                sd = self.sd[:, sl]
                z = (tau[:, :, None, :] - mu[None, :, :, None]) / sd[None, :, :, None]  # (P, D, k, T)
                phi = ndtr(z) if pos else ndtr(-z)
                out += np.einsum("pk,pdkt->pdt", np.nan_to_num(w[:, start:start + 256]), phi)
        bad_p = ~np.isfinite(self.wp.sum(axis=1))
        bad_n = ~np.isfinite(self.wn.sum(axis=1))
        pm[bad_p] = np.nan
        pf[bad_n] = np.nan
        return pm, pf

    def grid(self, n: int) -> np.ndarray:
        lo = np.min(self.mu - 8 * self.sd, axis=1)
        hi = np.max(self.mu + 8 * self.sd, axis=1)
        t = np.linspace(0.0, 1.0, n)
        return lo[:, None] + (hi - lo)[:, None] * t[None, :]  # (D, T)


def _minimise(mix: _Mixture, cost: CostSpec, n_grid: int, n_iter: int = 60) -> tuple[np.ndarray, np.ndarray]:
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


def _eer(mix: _Mixture, n_iter: int = 80) -> np.ndarray:
    lo = np.min(mix.mu - 10 * mix.sd, axis=1)[None, :].repeat(mix.P, 0)
    hi = np.max(mix.mu + 10 * mix.sd, axis=1)[None, :].repeat(mix.P, 0)
    for _ in range(n_iter):
        mid = 0.5 * (lo + hi)
        pm, pf = mix.rates(mid[..., None])
        up = (pm - pf)[..., 0] < 0  # p_miss increases with tau
        lo, hi = np.where(up, mid, lo), np.where(up, hi, mid)
    pm, pf = mix.rates((0.5 * (lo + hi))[..., None])
    return (0.5 * (pm + pf))[..., 0]


def gaussian_mixture_measures(mu: np.ndarray, sd: np.ndarray, is_pos: np.ndarray, weights: np.ndarray,
                              p_target: float = 0.05, c_miss: float = 1.0, c_fa: float = 1.0,
                              normalize: bool = False, n_grid: int = 512) -> dict[str, np.ndarray]:
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
    p_target, c_miss, c_fa, normalize:
        detection-cost parameters.
    n_grid:
        grid size of the threshold search before refinement.

    Returns
    -------
    dict with ``all_min_dcf, all_threshold, all_fpr, all_fnr, all_eer, fairness_index``
    ``(D,)`` and the per-subgroup measures ``(G, D)`` named as in the empirical table.
    """
    cost = CostSpec(p_target=p_target, c_miss=c_miss, c_fa=c_fa, normalize=normalize)
    a, b = cost.weights
    mix = _Mixture(mu, sd, is_pos, weights)
    D = mix.mu.shape[0]
    # chunk over draws to bound memory
    per = max(1, int(4e6 // max(1, mix.mu.shape[1] * n_grid * mix.P)))
    parts = []
    for s0 in range(0, D, per):
        sub = _Mixture(mix.mu[s0:s0 + per], mix.sd[s0:s0 + per], is_pos, weights)
        mins, taus = _minimise(sub, cost, n_grid)
        eer = _eer(sub)
        t_star = taus[0]
        pm, pf = sub.rates(np.broadcast_to(t_star[None, :, None], (sub.P, t_star.size, 1)))
        pm, pf = pm[..., 0], pf[..., 0]
        parts.append((mins, taus, eer, pm, pf))
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
class ModelSubgroupDCFResult:
    """Model-based SVEva table (same columns as the empirical one, minus counts of errors).

    ``table``: grouping attributes, ``subgroup, n_speakers, n_pos, n_neg`` and the
    measures; ``min_dcf``, ``threshold`` (model ``τ*``), ``fairness_index``;
    ``conditional``: whether the speakers' random effects were conditioned on.
    """

    table: pd.DataFrame
    min_dcf: float
    threshold: float
    fairness_index: float
    overall: dict[str, float]
    conditional: bool


def _intercept_variance(fit: Any, group: str) -> float:
    vc = fit.varcorr
    rows = vc[(vc["grp"] == group) & (vc["var2"].isna())]
    if rows.empty:
        raise SubgroupError(f"random-effects group {group!r} not in the fit (groups: {sorted(set(vc['grp']))})")
    bad = rows[rows["var1"] != "(Intercept)"]
    if len(bad):
        raise SubgroupError(f"group {group!r} has random slopes {list(bad['var1'])}; only random intercepts "
                            "can be marginalised")
    return float(rows["vcov"].sum())


def model_subgroup_dcf(fit: Any, trials: pd.DataFrame, groups: Sequence[str], *, label: str = "label",
                       speaker: str = "speaker", positive: Any = None, p_target: float = 0.05,
                       c_miss: float = 1.0, c_fa: float = 1.0, normalize: bool = False,
                       conditional: bool = True, marginalize: Sequence[str] | None = None,
                       membership: str = "enrol", test_speaker: str | None = None,
                       test_groups: Sequence[str] | None = None, speaker_table: pd.DataFrame | None = None,
                       n_grid: int = 512, min_speakers: int = 5, min_errors: int = 30, **posterior_kw: Any) -> "ModelSubgroupDCFResult | PosteriorFairness":
    """SVEva measures implied by a fitted linear mixed model (an ``LmerResult``).

    Each subgroup's class-conditional score distribution is the mixture over its trials
    ``i`` of ``N(m_i, v_{y_i})``: with ``conditional=True``, ``m_i = x_iᵀβ̂ + z_iᵀb̂``
    (conditional modes of all random effects) and ``v_y = σ_y²``; with
    ``conditional=False``, the random intercepts of the ``marginalize`` groups (default:
    the ``speaker`` column) are removed from ``m_i`` and their variances added,
    ``v_y = σ_y² + Σ σ²_group`` (new speakers).  ``σ_y`` is ``fit.sigma_by`` of the
    trial's dispersion level when the fit has a class-specific residual variance, else
    ``fit.sigma``.

    Parameters
    ----------
    fit:
        fitted model with ``predict(newdata, re_form=None)``, ``sigma``, ``sigma_by``,
        ``varcorr`` and ``ranef`` (see :mod:`scoremix.lme`).
    trials:
        the trials to evaluate (usually the fitted data).
    groups, label, speaker, positive, membership, test_speaker, test_groups, speaker_table:
        as in :func:`scoremix.fairness.subgroup_dcf`.
    conditional, marginalize:
        conditional on the fitted speakers, or marginal over new levels of ``marginalize``.
    min_speakers, min_errors:
        reliability rule: ``reliable`` is False when a subgroup has fewer speakers, one
        class only, or fewer expected errors ``n_pos·fnr + n_neg·fpr`` at ``τ*`` than
        ``min_errors`` (Doddington's rule of 30).

    Returns
    -------
    ModelSubgroupDCFResult
        or, when ``fit`` is a posterior (``BayesLmerResult``), the
        :class:`PosteriorFairness` of :func:`scoremix.fairness.posterior_subgroup_dcf`
        (``conditional`` maps to ``random="conditional"/"marginal"``; extra keyword
        arguments such as ``max_draws``, ``ci``, ``split_by`` are passed on).
    """
    from scoremix.fairness.posterior import is_bayes_fit, posterior_subgroup_dcf

    if is_bayes_fit(fit):
        if marginalize is not None:
            raise SubgroupError("marginalize= applies to LmerResult fits; a posterior fit marginalises all "
                                "random effects with conditional=False")
        return posterior_subgroup_dcf(fit, trials, groups, label=label, speaker=speaker, positive=positive,
                                      p_target=p_target, c_miss=c_miss, c_fa=c_fa, normalize=normalize,
                                      random="conditional" if conditional else "marginal",
                                      membership=membership, test_speaker=test_speaker,
                                      test_groups=test_groups, speaker_table=speaker_table,
                                      min_speakers=min_speakers, min_errors=min_errors, **posterior_kw)
    if posterior_kw:
        raise TypeError(f"unexpected keyword arguments for an LmerResult fit: {sorted(posterior_kw)}")
    y = binary_labels(trials[label], positive=positive).astype(bool)
    sg = define_subgroups(trials, groups, membership=membership, speaker=speaker, test_speaker=test_speaker,
                          test_groups=test_groups, speaker_table=speaker_table)
    mean = np.asarray(fit.predict(trials, allow_new_levels=True), dtype=float)
    sigma_by = getattr(fit, "sigma_by", None)
    if sigma_by is not None:
        spec = getattr(fit, "spec", None)
        form = getattr(spec, "dispersion_formula", None) or getattr(fit, "dispersion", None)
        if not form:
            raise SubgroupError("fit has sigma_by but no dispersion formula to map trials to levels")
        col = str(form).replace("~", "").strip()
        if col not in trials.columns:
            raise SubgroupError(f"dispersion column {col!r} not in the trial table")
        lv = trials[col].astype(str)
        unknown = ~lv.isin([str(k) for k in sigma_by.index])
        if unknown.any():
            raise SubgroupError(f"dispersion level {lv[unknown].iloc[0]!r} (column {col!r}) not in the fit")
        var = np.asarray(sigma_by.rename(index=str).reindex(lv).to_numpy(), dtype=float) ** 2
    else:
        var = np.full(len(trials), float(fit.sigma) ** 2)
    if not conditional:
        marg = list(marginalize) if marginalize is not None else [speaker]
        ranef = fit.ranef
        for grp in marg:
            if grp not in ranef:
                raise SubgroupError(f"random-effects group {grp!r} not in the fit (groups: {sorted(ranef)})")
            var = var + _intercept_variance(fit, grp)
            re = ranef[grp]["(Intercept)"]
            re.index = re.index.astype(str)
            mean = mean - re.reindex(trials[grp].astype(str)).fillna(0.0).to_numpy()
    sd = np.sqrt(var)
    # components: unique (mean, sd, class); weights = trial counts per population
    ucomp, key = np.unique(np.c_[mean, sd, y.astype(float)], axis=0, return_inverse=True)
    key = key.ravel()
    m = ucomp.shape[0]
    G = sg.n_groups
    W = np.zeros((1 + G, m))
    np.add.at(W[0], key, 1.0)
    np.add.at(W, (1 + sg.mem_group, key[sg.mem_trial]), 1.0)
    res = gaussian_mixture_measures(ucomp[:, 0][None, :], ucomp[:, 1][None, :], ucomp[:, 2] > 0.5, W, p_target=p_target, c_miss=c_miss, c_fa=c_fa,
                                    normalize=normalize, n_grid=n_grid)
    tab = sg.cells.copy()
    tab["n_speakers"] = sg.n_speakers
    tab["n_pos"] = np.bincount(sg.mem_group[y[sg.mem_trial]], minlength=G)
    tab["n_neg"] = np.bincount(sg.mem_group[~y[sg.mem_trial]], minlength=G)
    for k in MEASURES:
        tab[k] = res[k][:, 0]
    tab["n_errors_expected"] = tab["n_pos"] * tab["fnr"] + tab["n_neg"] * tab["fpr"]
    tab["reliable"] = ((tab["n_speakers"] >= min_speakers) & (tab["n_errors_expected"] >= min_errors)
                       & (tab["n_pos"] > 0) & (tab["n_neg"] > 0))
    overall = {k: float(res[f"all_{k}"][0]) for k in ("min_dcf", "threshold", "fpr", "fnr", "eer")}
    return ModelSubgroupDCFResult(table=tab, min_dcf=overall["min_dcf"], threshold=overall["threshold"],
                                  fairness_index=float(res["fairness_index"][0]), overall=overall,
                                  conditional=conditional)


@dataclass
class PosteriorFairness:
    """Posterior summaries of the SVEva measures.

    ``table``: per subgroup ``<measure>`` (posterior median), ``<measure>_lo/_hi``
    (equal-tailed credible interval) and ``p_ratio_overall_gt_1``;
    ``fairness_index``: posterior median, ``fairness_index_ci``; ``draws``: per-draw arrays
    (``(G, D)`` per subgroup measure, ``(D,)`` for ``all_*`` and ``fairness_index``);
    ``overall``: posterior medians of the overall ``min_dcf, threshold, fpr, fnr, eer``.
    """

    table: pd.DataFrame
    fairness_index: float
    fairness_index_ci: tuple[float, float]
    draws: dict[str, np.ndarray]
    overall: dict[str, float] = field(default_factory=dict)

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


def posterior_subgroup_measures(mu_neg: np.ndarray, sd_neg: np.ndarray, mu_pos: np.ndarray, sd_pos: np.ndarray,
                                n_neg: np.ndarray | None = None, n_pos: np.ndarray | None = None,
                                names: Sequence[str] | None = None, p_target: float = 0.05,
                                c_miss: float = 1.0, c_fa: float = 1.0, normalize: bool = False,
                                ci: float = 0.95, n_grid: int = 256) -> PosteriorFairness:
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
    ci:
        credible level of the equal-tailed intervals.

    Returns
    -------
    PosteriorFairness
    """
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
