r"""The Bayesian decision model: posterior subgroup FNR, FPR, DCF and SVEva ratios.

The model is the frequentist one of :mod:`scoremix.fairness.decision_model` — at threshold
:math:`\tau` the error indicator of trial :math:`i` follows

.. math::

    \operatorname{logit} P(e_i = 1) = \beta_{c(i), g(i)} + b_{k(i), c(i)}
        + \sum_f a^{(f)}_{f(i)},\qquad
    (b_{k,\mathrm{neg}}, b_{k,\mathrm{pos}}) \sim N(0, \Sigma_s),\quad
    a^{(f)}_l \sim N(0, \sigma_f^2),

— fitted by :func:`scoremix.bayes.bayes_glmer` (NUTS on per-cell counts, LKJ(2) prior on
the speaker correlation, the default priors of :mod:`scoremix.bayes.glmer`).  For every
posterior draw :math:`d` the subgroup rates are those of a *new* speaker of the subgroup,
over the subgroup's mix of factor levels:

.. math::

    \mathrm{FNR}_g^{(d)} = \sum_l w^+_{g,l} \int \operatorname{logit}^{-1}
        (\beta^{(d)}_{+,g} + a^{(d)}_l + \sigma^{(d)}_+ z)\,\phi(z)\,dz

(21-point Gauss–Hermite), likewise :math:`\mathrm{FPR}_g^{(d)}`, the DCF
:math:`c_{miss}\pi\,\mathrm{FNR} + c_{fa}(1-\pi)\,\mathrm{FPR}` and the ratios to the
overall rates.  Reported: the posterior mean and the equal-tailed ``level`` interval of each
measure — the uncertainty of :math:`\Sigma_s` and :math:`\sigma_f` included, which the
frequentist model's Laplace draws at fixed :math:`\theta` leave out — beside the empirical
value and its speaker-bootstrap interval (computed as the frequentist model does).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix.bayes.conventions import UNSET

__all__ = ["bayes_decision_model", "new_speaker_rates", "BayesDecisionModelResult"]


def new_speaker_rates(eta: np.ndarray, sd: np.ndarray, n: np.ndarray, is_pos: np.ndarray, gidx: np.ndarray,
                      n_groups: int, a: float, b: float, n_quad: int = 21) -> dict[str, np.ndarray]:
    r"""The six measures per subgroup and draw from the cells' linear predictors.

    ``eta`` ``(C, S)``: cell linear predictor without the speaker effect; ``sd`` ``(C, S)``
    (or ``(C, 1)``): SD of the speaker effect of the cell's class; ``n`` trials per cell;
    ``is_pos``, ``gidx``: the cell's class and subgroup.  Returns the dict of
    :data:`scoremix.fairness.decision_model.MEASURES` (arrays ``(G, S)``) plus ``"_all"``.
    """
    from scoremix.fairness.decision_model import _measures

    z, w = np.polynomial.hermite_e.hermegauss(n_quad)
    w = w / w.sum()
    mu = np.zeros(np.broadcast_shapes(eta.shape, sd.shape))
    for zk, wk in zip(z, w):
        mu += wk / (1.0 + np.exp(-(eta + sd * zk)))
    e = mu * n[:, None]
    G = n_groups
    fn = np.stack([e[(gidx == k) & is_pos].sum(0) for k in range(G)])
    fa = np.stack([e[(gidx == k) & ~is_pos].sum(0) for k in range(G)])
    npos = np.array([n[(gidx == k) & is_pos].sum() for k in range(G)])[:, None]
    nneg = np.array([n[(gidx == k) & ~is_pos].sum() for k in range(G)])[:, None]
    return _measures(fn, npos, fa, nneg, e[is_pos].sum(0), n[is_pos].sum(), e[~is_pos].sum(0), n[~is_pos].sum(),
                     a, b)


class BayesDecisionModelResult:
    """``table``: per subgroup, for every measure ``m``: ``m_model`` (posterior mean),
    ``m_model_lo``/``m_model_hi`` (equal-tailed ``level`` interval), ``m_freq`` (the
    frequentist model's plug-in value), ``m_emp``, ``m_emp_lo``, ``m_emp_hi``; ``draws``:
    the measures per posterior draw (long table); ``overall``, ``threshold``, ``fit`` (the
    :class:`~scoremix.bayes.glmer_result.BayesGlmerResult`), ``frequentist`` (the
    :class:`~scoremix.fairness.decision_model.DecisionModelResult` that supplied the
    threshold and the empirical columns)."""

    def __init__(self, table: pd.DataFrame, draws: pd.DataFrame, overall: dict, threshold: float, fit: Any,
                 frequentist: Any, settings: dict) -> None:
        self.table = table
        self.draws = draws
        self.overall = overall
        self.threshold = threshold
        self.fit = fit
        self.frequentist = frequentist
        self.settings = settings

    def inside(self) -> pd.DataFrame:
        """Whether each posterior mean lies inside the empirical interval."""
        from scoremix.fairness.decision_model import MEASURES

        return pd.DataFrame({m: (self.table[f"{m}_model"] >= self.table[f"{m}_emp_lo"])
                             & (self.table[f"{m}_model"] <= self.table[f"{m}_emp_hi"]) for m in MEASURES})

    def __repr__(self) -> str:
        return (f"BayesDecisionModelResult(threshold={self.threshold:.4g}, subgroups={list(self.table.index)}, "
                f"{self.fit.diagnostics!r})")


def bayes_decision_model(trials: pd.DataFrame, threshold: float | str = "min_dcf", groups: Sequence[str] = (), *,
                         score: str = "score", label: str = "label", speaker: str = "speaker",
                         positive: Any = None, factors: Sequence[str] = (), p_target: float = 0.05,
                         c_miss: float = 1.0, c_fa: float = 1.0, level: float = 0.95, n_boot: int = 1000,
                         seed: int | np.random.Generator | None = 0, draws: int = 1000, tune: int = 1000,
                         chains: int = 4, priors: dict | None = None, sampler: str = "auto",
                         progress: bool = UNSET, cores: int | None = None, max_draws: int | None = None,
                         target_accept: float = 0.9) -> BayesDecisionModelResult:
    """Bayesian binomial GLMM of misses and false alarms at ``threshold`` (module docstring).

    Arguments as :func:`scoremix.decision_model` (``threshold``, ``groups``, ``score``,
    ``label``, ``speaker``, ``positive``, ``factors``, the cost, ``level``, ``n_boot``,
    ``seed``) plus the sampler's (``draws``, ``tune``, ``chains``, ``priors``, ``sampler``,
    ``progress``, ``cores``, ``target_accept``); ``max_draws`` thins the posterior used for
    the measures.

    Returns
    -------
    BayesDecisionModelResult
    """
    import warnings

    from scoremix.bayes.conventions import resolve_seed, seed_int
    from scoremix.bayes.glmer import bayes_glmer
    from scoremix.fairness.decision_model import MEASURES, decision_model

    seed = resolve_seed(seed, UNSET, "bayes_decision_model")
    s0 = seed_int(seed)
    freq = decision_model(trials, threshold, groups, score=score, label=label, speaker=speaker, positive=positive,
                          factors=factors, p_target=p_target, c_miss=c_miss, c_fa=c_fa, level=level, n_sim=200,
                          n_boot=n_boot, seed=s0)
    formula = freq.settings["formula"]
    frame = freq.fit.spec.data.copy()          # the GLMM's model frame (response renamed)
    if "err" not in frame.columns:
        from scoremix.glmm.response import Y_COL

        frame["err"] = frame[Y_COL]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        fit = bayes_glmer(formula, frame, "binomial", priors=priors, draws=draws, tune=tune, chains=chains,
                          sampler=sampler, seed=s0, progress=progress, cores=cores, target_accept=target_accept,
                          level=level)
    a, b = c_miss * p_target, c_fa * (1 - p_target)
    nf = len(list(factors))
    keys = ["cell"] + [f"f{j}" for j in range(nf)]
    cells = frame.groupby(keys, observed=True).size().rename("n").reset_index()
    cells["cls"] = cells["cell"].astype(str).str.split("|").str[0]
    cells["grp"] = cells["cell"].astype(str).str.split("|", n=1).str[1]
    cells["spk"] = "\x00new speaker"
    cells["isneg"] = (cells["cls"] == "neg").astype(float)
    cells["ispos"] = 1.0 - cells["isneg"]
    levels = list(freq.table.index)
    gidx = np.array([levels.index(g) for g in cells["grp"]])
    is_pos = (cells["cls"] == "pos").to_numpy()
    n = cells["n"].to_numpy(float)
    S = fit._n_draws()
    idx = np.arange(S) if max_draws is None or max_draws >= S else np.linspace(0, S - 1, max_draws).round().astype(int)
    X, off, design = fit._new_design(cells)
    spk_term = fit.spec.terms[0]
    eta = off[:, None] + X @ fit._beta_draws()[idx].T
    for t, (codes, Z) in list(zip(fit.spec.terms, design))[1:]:
        bk = fit._flat(f"b_{t.group}")[idx]
        codes = np.asarray(codes)
        ok = codes >= 0
        eff = np.einsum("sip,ip->is", bk[:, np.where(ok, codes, 0), :], np.asarray(Z, float))
        eta += np.where(ok[:, None], eff, 0.0)
    sd_neg = fit._flat(f"sd_{spk_term.group}__{spk_term.term_names[0]}")[idx]
    sd_pos = fit._flat(f"sd_{spk_term.group}__{spk_term.term_names[1]}")[idx]
    sd = np.where(is_pos[:, None], sd_pos[None, :], sd_neg[None, :])
    post = new_speaker_rates(eta, sd, n, is_pos, gidx, len(levels), a, b)
    qlo, qhi = (1 - level) / 2, (1 + level) / 2
    table = freq.table.copy()
    long = []
    for m in MEASURES:
        table[f"{m}_freq"] = table[f"{m}_model"]
        v = post[m]
        table[f"{m}_model"] = np.nanmean(v, axis=1)
        table[f"{m}_model_lo"] = np.nanquantile(v, qlo, axis=1)
        table[f"{m}_model_hi"] = np.nanquantile(v, qhi, axis=1)
        long.append(pd.DataFrame({"subgroup": np.repeat(levels, idx.size), "draw": np.tile(idx, len(levels)),
                                  "measure": m, "value": v.ravel()}))
    fnr_all, fpr_all, dcf_all = post["_all"]
    overall = dict(freq.overall)
    for nm, v in (("fnr", fnr_all), ("fpr", fpr_all), ("dcf", dcf_all)):
        overall[f"{nm}_freq"] = overall[f"{nm}_model"]
        overall[f"{nm}_model"] = float(np.mean(v))
        overall[f"{nm}_model_lo"], overall[f"{nm}_model_hi"] = (float(x) for x in np.quantile(v, [qlo, qhi]))
    settings = dict(freq.settings, draws=draws, tune=tune, chains=chains, sampler=fit.sampler)
    return BayesDecisionModelResult(table, pd.concat(long, ignore_index=True), overall, freq.threshold, fit, freq,
                                    settings)
