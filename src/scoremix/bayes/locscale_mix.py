r"""Posterior error rates of a location-scale fit with a failure mixture and/or per-speaker
shape pooling (what :func:`scoremix.score_model` may choose besides the specification).

A :class:`~scoremix.locscale.LocScaleFit` chosen by ``score_model`` can carry two further
parts (:meth:`~scoremix.locscale.LocScaleFit.trial_components`):

* a **failure mixture** (:mod:`scoremix.locscale.failure`): a row of cell :math:`j`
  (speaker × core stratum) carries weight :math:`w_{1t}=(1-\hat\pi_j)n_j/(n_j-k_j)` on its
  core latent Gaussian (0 for a failure row) and :math:`\hat\pi_j` on the failure
  distribution :math:`G` (N(0, 1) in its failure stratum, whose transform is the ML one);
* a **per-speaker shape pooling** (:mod:`scoremix.locscale.speaker_pool`): weight
  :math:`\omega_{ic}=n_{ic}/(n_{ic}+\kappa_c)` on a point mass at the row's own score and
  :math:`1-\omega_{ic}` on the rest.

The Bayesian fit samples the core model only (the failure rows are left out of its likelihood,
as in the ML fit).  For every posterior draw :math:`d` the row's core Gaussian is the draw's
:math:`N(\mu_{d,s}+b_{d,ic}+u_{d,is},\ (\sigma_{d,s}e^{g_{d,ic}})^2)`; the weights
:math:`w_{1t}`, :math:`\hat\pi_j`, :math:`\omega_{ic}` (i.e. :math:`\kappa_c`), the failure
distributions :math:`G` and the point masses are **fixed at the frequentist fit's values**
(they do not vary over draws).  So a population's rates in draw :math:`d` are

.. math::

    \mathrm{FNR}_d(\tau) = \frac{\sum_t w_{1t}\,\Phi\big((h^-_{s(t)}(\tau)-m_{dt})/s_{dt}\big)
      + \sum_{t,k} w_{2tk}\,F_{tk}(\tau)}{\sum_t w_{1t} + \sum_{t,k} w_{2tk}}\quad(\text{positives}),

likewise :math:`\mathrm{FPR}_d`; the draw part and the fixed part are computed separately
(the fixed part once) and added.  EER and minimum DCF are those of the population's model
ROC at everyone's observed scores (thinned to ``max_thresholds``) together with all of the
population's own (the thresholds at which its empirical rates change), so that with
:math:`\kappa_c = 0` a speaker's posterior EER equals its empirical EER in every draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["further_components", "MixturePopulations", "mixture_populations", "mixture_eer_draws",
           "mixture_dcf_draws", "component_notes"]


def further_components(fit: Any) -> Any:
    """``fit.trial_components()`` of the fitted rows when the fit has a failure mixture or a
    speaker shape pooling, else ``None``."""
    pool = getattr(fit, "speaker_pooling", None)
    if getattr(fit, "failure", None) is None and (pool is None or not pool.used):
        return None
    return fit.trial_components(None)


def component_notes(fit: Any) -> list[str]:
    """Notes naming the further parts a Bayesian fit carries fixed at their ML values."""
    out = []
    if getattr(fit, "failure", None) is not None:
        sh = fit.failure["shares"]
        conc = ", ".join(f"{'positive' if c else 'negative'} {v:g}" for c, v in sorted(sh.concentration.items()))
        out.append("failure mixture carried with its shares, cuts and failure distributions fixed at the frequentist "
                   f"fit (concentration {conc}); the failure trials are left out of the sampled likelihood "
                   "(score_model(failure_quantile=None) turns the part off)")
    pool = getattr(fit, "speaker_pooling", None)
    if pool is not None and pool.used:
        k = ", ".join(f"{'positive' if c else 'negative'} {v:g}" for c, v in sorted(pool.kappa.items()))
        out.append(f"speaker shape pooling carried with kappa fixed at the frequentist choice ({k}): every draw's "
                   "model distribution of a speaker is blended with the speaker's own scores, weight n/(n + kappa) "
                   "(score_model(speaker_pooling=None) turns it off)")
    return out


class _Comps:
    """What :func:`scoremix.predictive.attainable.score_rates` reads: components' latent
    mean/SD ``(D, m)``, class, stratum code and the threshold axis."""

    def __init__(self, mean: np.ndarray, sd: np.ndarray, positive: np.ndarray, stratum: np.ndarray, axis: Any):
        self.mean, self.sd = mean, sd
        self.positive = np.asarray(positive, bool)
        self.stratum = np.asarray(stratum, np.int64)
        self.axis = axis
        self.n_draws = int(mean.shape[0])


class MixturePopulations:
    """The draw part, the fixed part and the populations of a mixture fit's trials.

    ``draw``/``fixed``: component sets (``(D', C)`` cells / ``(1, m)`` fixed Gaussians);
    ``Wd``/``Wf``: ``(1 + G, ·)`` weights of every population on them; ``rows``: per
    population the boolean row mask (of the kept rows); ``score``, ``y``: the kept rows'."""

    def __init__(self, draw: _Comps, fixed: _Comps, Wd: np.ndarray, Wf: np.ndarray, rows: list, labels: list,
                 score: np.ndarray, y: np.ndarray, draws: np.ndarray) -> None:
        self.draw, self.fixed, self.Wd, self.Wf = draw, fixed, Wd, Wf
        self.rows, self.labels, self.score, self.y, self.draws = rows, labels, score, y, draws

    def rates(self, k: int, tau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(FNR, FPR)`` ``(D', T)`` of population ``k`` at score thresholds ``tau``."""
        from scoremix.predictive.attainable import score_rates

        out = []
        parts = []
        for comps, W in ((self.draw, self.Wd[k]), (self.fixed, self.Wf[k])):
            if not (W > 0).any():
                parts.append(None)
                continue
            idx = np.flatnonzero(W > 0)
            sub = _Comps(comps.mean[:, idx], comps.sd[:, idx], comps.positive[idx], comps.stratum[idx], comps.axis)
            pm, pf = score_rates(sub, W[idx][None, :], tau)
            parts.append((pm[0], pf[0], W[idx][sub.positive].sum(), W[idx][~sub.positive].sum()))
        D = self.draw.n_draws
        for j in (0, 1):   # 0: FNR (positives), 1: FPR (negatives)
            num = np.zeros((D, tau.size))
            den = 0.0
            for p in parts:
                if p is None or p[2 + j] <= 0:
                    continue
                num = num + p[j] * p[2 + j]
                den += p[2 + j]
            out.append(num / den if den > 0 else np.full((D, tau.size), np.nan))
        return out[0], out[1]


def mixture_populations(result: Any, by: str | Sequence[str] | None, max_draws: int | None) -> MixturePopulations:
    """Build :class:`MixturePopulations` of a :class:`~scoremix.bayes.locscale.BayesLocScaleResult`
    whose fit has further components (module docstring); ``by`` columns must exist."""
    from scoremix.predictive.axis import threshold_axis
    from scoremix.predictive.layer import unique_rows

    fit, cells, d = result.fit, result.cells, result.draws
    data = fit._data
    mix = further_components(fit)
    n = data.score.size
    w1, m2, s2, st2, w2 = mix
    w1 = np.asarray(w1, float)
    m2 = np.asarray(m2, float).reshape(n, -1)
    s2 = np.asarray(s2, float).reshape(n, -1)
    st2 = np.asarray(st2, dtype=object).reshape(n, -1)
    w2 = np.asarray(w2, float).reshape(n, -1)
    tc = result.maps["trial_cell"]
    fail = np.asarray(data.failure, bool)
    keep = (tc >= 0) | fail
    frame = data.frame.loc[keep]
    y = np.asarray(data.y)[keep]
    score = np.asarray(data.score)[keep]
    tck, w1k, m2k, s2k, st2k, w2k = tc[keep], w1[keep], m2[keep], s2[keep], st2[keep], w2[keep]
    failk = fail[keep]
    nk = y.size
    D = d["mu"].shape[0]
    idx = np.arange(D) if max_draws is None or max_draws >= D else \
        np.unique(np.round(np.linspace(0, D - 1, int(max_draws))).astype(np.int64))
    axis = threshold_axis(fit.transform)

    def codes(labels: np.ndarray) -> np.ndarray:
        return (np.zeros(labels.size, np.int64) if axis.identity
                else np.asarray(axis.codes(np.asarray(labels, dtype=object), labels.size), np.int64))

    # the draw part: one component per cell of the sampled model
    s, un = cells.stratum, cells.unit
    Cn = s.size
    mean = d["mu"][idx][:, s] + d["b"][idx][:, un] + d["u"][idx][:, np.arange(Cn)]
    sd = np.exp(d["lam"][idx][:, s] + d["g"][idx][:, un])
    draw = _Comps(mean, sd, cells.stratum_class[s] == 1, codes(np.asarray(cells.strata_levels, dtype=object)[s]), axis)
    # the fixed part: failure rows' own Gaussian (weight w1: 1 in an all-failure cell, else 0)
    # and every further component (failure distribution G, point masses)
    fstrata = fit.strata.to_numpy(dtype=object)[keep]
    own = failk & (tck < 0)
    ent_row = [np.flatnonzero(own)]
    ent_mean = [np.asarray(fit.trial_mean, float)[keep][own]]
    ent_sd = [np.asarray(fit.trial_sd, float)[keep][own]]
    ent_st = [fstrata[own]]
    ent_w = [w1k[own]]
    K = m2k.shape[1]
    for j in range(K):
        r = np.flatnonzero(w2k[:, j] > 0)
        ent_row.append(r)
        ent_mean.append(m2k[r, j])
        ent_sd.append(s2k[r, j])
        ent_st.append(st2k[r, j])
        ent_w.append(w2k[r, j])
    er = np.concatenate(ent_row)
    em, es = np.concatenate(ent_mean), np.concatenate(ent_sd)
    ec = codes(np.concatenate(ent_st)) if er.size else np.zeros(0, np.int64)
    ew = np.concatenate(ent_w)
    if er.size:
        key = np.c_[em, es, y[er].astype(float), ec.astype(float)]
        ukey, comp = unique_rows(key)
        comp = np.asarray(comp).ravel().astype(np.int64)
    else:
        ukey, comp = np.zeros((0, 4)), np.zeros(0, np.int64)
    fixed = _Comps(ukey[:, 0][None, :], ukey[:, 1][None, :], ukey[:, 2] > 0.5, ukey[:, 3].astype(np.int64), axis)
    # populations
    cols = [by] if isinstance(by, str) else list(by or [])   # checked by the caller (BayesLocScaleError)
    masks = [np.ones(nk, bool)]
    labels = ["all"]
    if cols:
        lev = frame[cols].astype(str).agg("|".join, axis=1).to_numpy() if len(cols) > 1 else \
            frame[cols[0]].astype(str).to_numpy()
        glevels, gcode = np.unique(lev, return_inverse=True)
        for g in range(glevels.size):
            m = gcode == g
            for cls in (y == 1, y == 0):
                if not (m & cls).any():      # a level of one class (an attack): against all trials of the other
                    m = m | cls
            masks.append(m)
        labels += [str(v) for v in glevels]
    drawrow = tck >= 0
    Wd = np.zeros((len(masks), Cn))
    Wf = np.zeros((len(masks), ukey.shape[0]))
    for k, m in enumerate(masks):
        r = m & drawrow
        Wd[k] = np.bincount(tck[r], weights=w1k[r], minlength=Cn)
        if er.size:
            e = m[er]
            Wf[k] = np.bincount(comp[e], weights=ew[e], minlength=ukey.shape[0])
    return MixturePopulations(draw, fixed, Wd, Wf, masks, labels, score, y, idx)


def _thresholds(mp: MixturePopulations, k: int, max_thresholds: int | None) -> np.ndarray:
    """Everyone's observed scores (thinned to ``max_thresholds``) and all of population
    ``k``'s own (the thresholds at which its empirical rates change)."""
    from scoremix.predictive.attainable import attainable_scores

    tau = attainable_scores(mp.score, max_thresholds)
    if k == 0:
        return tau
    own = mp.score[mp.rows[k]]
    return np.union1d(tau, np.unique(own[~np.isnan(own)]))


def _empirical(mp: MixturePopulations, k: int) -> float:
    from scoremix.metrics import eer as empirical_eer

    yy, ss = mp.y[mp.rows[k]], mp.score[mp.rows[k]]
    return float(empirical_eer(ss, yy)) if 0 < yy.sum() < yy.size else np.nan


def mixture_eer_draws(result: Any, by: str | Sequence[str] | None, max_draws: int | None,
                      max_thresholds: int | None) -> tuple[list, np.ndarray, list]:
    """``(labels, E, rows)`` of :meth:`~scoremix.bayes.locscale.BayesLocScaleResult.eer_draws`
    for a fit with further components: ROCCH EER (percent) of every population's model ROC at
    everyone's observed scores (thinned) and all of its own, per draw."""
    from scoremix.predictive.attainable import _eer_rows

    mp = mixture_populations(result, by, max_draws)
    E = np.full((len(mp.labels), mp.draws.size), np.nan)
    info = []
    for k in range(len(mp.labels)):
        tau = _thresholds(mp, k, max_thresholds)
        pm, pf = mp.rates(k, tau)
        E[k] = _eer_rows(pm, pf, tau)[0]
        info.append((int(mp.rows[k].sum()), 100 * _empirical(mp, k)))
    return mp.labels, 100 * E, info


def mixture_dcf_draws(result: Any, by: str | Sequence[str] | None, *, p_target: float, c_miss: float, c_fa: float,
                      max_draws: int | None, max_thresholds: int | None
                      ) -> tuple[list, np.ndarray, np.ndarray, list]:
    """``(labels, M, at, members)`` in percent: posterior minimum DCF of every population over its own
    observed scores (and reject-all), and every ``by`` level's DCF at everyone's minimising
    threshold of the same draw; ``members``: per population ``(y, score)`` of its rows."""
    mp = mixture_populations(result, by, max_draws)
    a, b = c_miss * p_target, c_fa * (1 - p_target)
    D = mp.draws.size
    P = len(mp.labels)
    M = np.full((P, D), np.nan)
    tau0 = _thresholds(mp, 0, max_thresholds)
    pm0, pf0 = mp.rates(0, tau0)
    cost0 = np.concatenate([a * pm0 + b * pf0, np.full((D, 1), a)], axis=1)
    k0 = np.argmin(np.where(np.isnan(cost0), np.inf, cost0), axis=1)
    M[0] = cost0[np.arange(D), k0]
    tstar = np.append(tau0, np.inf)[k0]
    at = np.full((max(P - 1, 0), D), np.nan)
    ut, inv = np.unique(tstar, return_inverse=True)
    fin = np.isfinite(ut)
    for k in range(1, P):
        tau = _thresholds(mp, k, max_thresholds)
        pm, pf = mp.rates(k, tau)
        c = np.concatenate([a * pm + b * pf, np.full((D, 1), a)], axis=1)
        M[k] = np.nanmin(c, axis=1)
        va = np.full((D, ut.size), a)           # reject all: FNR 1, FPR 0
        if fin.any():
            pmt, pft = mp.rates(k, ut[fin])
            va[:, fin] = a * pmt + b * pft
        at[k - 1] = va[np.arange(D), inv]
    members = [(mp.y[m], mp.score[m]) for m in mp.rows]
    return mp.labels, 100 * M, 100 * at, members
