r"""Model checks of a posterior fit (``bayes_lmer``): posterior predictive check and
sampler diagnostics in one object, the Bayesian counterpart of
:func:`scoremix.check_model`.

**Posterior predictive check** (Gelman, Meng & Stern 1996; the numbers behind
:meth:`BayesLmerResult.ppc`'s plot).  For ``n_draws`` evenly spaced draws per chain a
replicate :math:`y^{rep}` of every score is drawn given the draw's parameters and random
effects (:func:`scoremix.bayes.pointwise.posterior_predictive_dataset`).  For each test
statistic :math:`T` — mean, SD, skewness, 1 % and 99 % quantiles, minimum, maximum of the
scores — the posterior predictive p-value is

.. math::  p_T = \Pr\{T(y^{rep}) \ge T(y) \mid y\} \approx \frac1D\sum_d 1[T(y^{rep}_d) \ge T(y)],

flagged when outside :math:`[\alpha/2, 1-\alpha/2]` (two-sided; :math:`p_T` is not uniform
under the model, it concentrates near 1/2, so a flag is a clear misfit).  Skewness and tail
quantiles are what a Gaussian score model most often misses (use ``transform="monotone"``
or a ``dispersion=`` model).  A transformation fit's replicates would be latent: its check
holds the diagnostics only, with a note.

**Sampler diagnostics** (Vehtari et al. 2021; :mod:`scoremix.bayes.diagnostics`): the
largest rank-normalised split R-hat (≤ 1.01), the smallest bulk and tail ESS (≥ 400),
divergent transitions and maximum-tree-depth hits (0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

__all__ = ["BayesModelCheck", "bayes_check", "PPC_STATISTICS"]


def _stats(Y: np.ndarray) -> dict[str, np.ndarray]:
    """Test statistics over the last axis of ``Y``."""
    return {"mean": Y.mean(-1), "sd": Y.std(-1, ddof=1), "skewness": stats.skew(Y, axis=-1),
            "q01": np.quantile(Y, 0.01, axis=-1), "q99": np.quantile(Y, 0.99, axis=-1),
            "min": Y.min(-1), "max": Y.max(-1)}


PPC_STATISTICS = ("mean", "sd", "skewness", "q01", "q99", "min", "max")


@dataclass
class BayesModelCheck:
    """Result of :func:`bayes_check`.

    ``ppc``: one row per statistic (``statistic``, ``observed``, ``rep_mean``, ``rep_sd``,
    ``ppp``, ``ok``; empty for transformation fits); ``diagnostics``: one row per sampler
    check (``check``, ``value``, ``threshold``, ``ok``); ``advice``: what to do about each
    failed check; :attr:`table` both in the study's ``model_checks.csv`` layout."""

    ppc: pd.DataFrame
    diagnostics: pd.DataFrame
    advice: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    alpha: float = 0.05
    _y: Any = None
    _yrep: Any = None
    _rhat: Any = None

    @property
    def table(self) -> pd.DataFrame:
        """``check``, ``statistic``, ``p.value``, ``ok``: the diagnostics (statistic = the
        value, no p-value) then the posterior predictive p-values."""
        rows = [{"check": r.check, "statistic": float(r.value), "p.value": float("nan"), "ok": bool(r.ok)}
                for r in self.diagnostics.itertuples()]
        rows += [{"check": f"posterior predictive {r.statistic}", "statistic": float(r.observed),
                  "p.value": float(r.ppp), "ok": bool(r.ok)} for r in self.ppc.itertuples()]
        return pd.DataFrame(rows, columns=["check", "statistic", "p.value", "ok"])

    def __repr__(self) -> str:
        lines = ["BayesModelCheck:"]
        lines += [f"  {r.check}: {r.value:.4g} ({'ok' if r.ok else 'FAILED'})" for r in self.diagnostics.itertuples()]
        lines += [f"  ppc {r.statistic}: observed {r.observed:.4g}, p = {r.ppp:.3f}" for r in self.ppc.itertuples()]
        lines += [f"  advice: {a}" for a in self.advice]
        return "\n".join(lines)

    def plot(self, fig=None):
        """Observed score density against replicates' (50 of them), and R-hat per parameter."""
        import matplotlib.pyplot as plt
        if fig is None:
            fig = plt.figure(figsize=(11, 4))
        ax = fig.subplots(1, 2)
        if self._yrep is not None:
            y = np.asarray(self._y)
            lo, hi = np.quantile(np.concatenate([y, self._yrep[:5].ravel()]), [0.001, 0.999])
            bins = np.linspace(lo, hi, 60)
            for yr in self._yrep[:50]:
                h, _ = np.histogram(yr, bins=bins, density=True)
                ax[0].step(bins[:-1], h, where="post", color="C0", alpha=0.15, lw=0.8)
            h, _ = np.histogram(y, bins=bins, density=True)
            ax[0].step(bins[:-1], h, where="post", color="k", lw=1.5, label="observed")
            ax[0].legend()
            ax[0].set(title="Posterior predictive check", xlabel="score", ylabel="density")
        else:
            ax[0].set_axis_off()
        if self._rhat is not None and len(self._rhat):
            r = self._rhat
            ax[1].barh(range(len(r)), r.to_numpy(), color=np.where(r.to_numpy() > 1.01, "C3", "C0"))
            ax[1].set_yticks(range(len(r)), r.index, fontsize=7)
            ax[1].axvline(1.01, color="r", lw=0.8, ls="--")
            ax[1].set(title="R-hat per parameter", xlabel="R-hat", xlim=(min(0.99, r.min()), max(1.03, r.max())))
        else:
            ax[1].set_axis_off()
        fig.tight_layout()
        return fig


def bayes_check(fit: Any, *, n_draws: int = 100, seed: int | np.random.Generator | None = 0,
                alpha: float = 0.05, max_memory: Any = None) -> BayesModelCheck:
    """Posterior predictive p-values and sampler diagnostics of ``fit`` (module docstring).

    The replicates are computed here and not added to ``fit.idata``."""
    from scoremix.bayes.diagnostics import ESS_MIN, RHAT_MAX
    dg = fit.diagnostics
    tab = dg.table
    drows = [("R-hat (max)", dg.max_rhat, RHAT_MAX, not dg.max_rhat > RHAT_MAX),
             ("bulk ESS (min)", dg.min_ess_bulk, ESS_MIN, not dg.min_ess_bulk < ESS_MIN),
             ("tail ESS (min)", dg.min_ess_tail, ESS_MIN, not dg.min_ess_tail < ESS_MIN),
             ("divergent transitions", float(dg.n_divergent), 0.0, dg.n_divergent == 0),
             ("max tree depth hits", float(dg.n_max_treedepth), 0.0, dg.n_max_treedepth == 0)]
    diag = pd.DataFrame(drows, columns=["check", "value", "threshold", "ok"])
    advice = list(dg.problems)
    notes: list[str] = []
    ppc = pd.DataFrame(columns=["statistic", "observed", "rep_mean", "rep_sd", "ppp", "ok"])
    y = yrep = None
    if getattr(fit, "transform", None) is not None:
        notes.append("posterior predictive check not available for a transformation fit "
                     "(its replicates would be latent); diagnostics only")
    else:
        from scoremix.bayes.conventions import seed_int
        from scoremix.bayes.pointwise import posterior_predictive_dataset
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(
            None if seed is None else seed_int(seed))
        ds = posterior_predictive_dataset(fit.spec, fit.idata.posterior, rng, n_draws=n_draws,
                                          max_memory=max_memory)
        yrep = np.asarray(ds[fit.spec.response].values, float).reshape(-1, fit.spec.n)
        y = np.asarray(fit.spec.y, float)       # the replicates' scale (offset removed)
        to, tr = _stats(y), _stats(yrep)
        rows = []
        for k in PPC_STATISTICS:
            p = float(np.mean(tr[k] >= to[k]))
            ok = alpha / 2 <= p <= 1 - alpha / 2
            rows.append((k, float(to[k]), float(np.mean(tr[k])), float(np.std(tr[k], ddof=1)), p, ok))
            if not ok:
                side = "larger" if p < 0.5 else "smaller"
                advice.append(f"posterior predictive {k}: the observed value is {side} than the replicates' "
                              f"(p = {p:.3f}); the score distribution is misfitted — consider "
                              "transform='monotone' or a dispersion= model")
        ppc = pd.DataFrame(rows, columns=["statistic", "observed", "rep_mean", "rep_sd", "ppp", "ok"])
    rhat = tab["r_hat"] if "r_hat" in tab.columns else None
    return BayesModelCheck(ppc, diag, advice, notes, alpha, y, yrep, rhat)
