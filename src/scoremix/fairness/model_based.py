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

from scoremix._deprecate import renamed_kwargs
from scoremix.fairness.engine import MEASURES
from scoremix.fairness.model_fit import empirical_beside
from scoremix.fairness.model_measures import (PosteriorFairness, gaussian_mixture_measures,
                                              posterior_subgroup_measures, summarise_draws)
from scoremix.fairness.posterior import posterior_subgroup_dcf
from scoremix.fairness.subgroups import SubgroupError, define_subgroups
from scoremix.predictive.attainable import attainable_measures, check_thresholds
from scoremix.predictive.gof import subgroup_term_note
from scoremix.predictive.layer import fit_class_defaults, is_bayes_fit, predictive

__all__ = ["gaussian_mixture_measures", "model_subgroup_dcf", "posterior_subgroup_measures",
           "summarise_draws", "ModelSubgroupDCFResult", "PosteriorFairness"]


@dataclass
class ModelSubgroupDCFResult:
    """Model-based SVEva table (same columns as the empirical one, minus counts of errors).

    ``table``: grouping attributes, ``subgroup, n_speakers, n_pos, n_neg`` and the
    measures, and beside them the empirical ``<measure>_empirical`` with its
    speaker-bootstrap interval ``<measure>_empirical_lo/_hi`` for ``min_dcf, eer,
    ratio_overall, fpr, fnr`` (when the trials carry scores) and ``fit_ok``; ``min_dcf``,
    ``threshold`` (model ``τ*``, on the score scale), ``fairness_index``; ``conditional``:
    whether the speakers' random effects were conditioned on; ``overall_empirical``: the
    empirical overall measures; ``notes``: caveats shown next to the table (e.g. the
    model has no term for a grouping column).
    """

    table: pd.DataFrame
    min_dcf: float
    threshold: float
    fairness_index: float
    overall: dict[str, float]
    conditional: bool
    overall_empirical: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: with ``negative_by``: the overall model measures per negative level (``"(all)"``: everyone)
    by_negative: dict[str, dict[str, float]] = field(default_factory=dict)


@renamed_kwargs(groups="by", random_state="seed")
def model_subgroup_dcf(fit: Any, trials: pd.DataFrame, by: Sequence[str], *, label: str = "label",
                       speaker: str = "speaker", positive: Any = None, p_target: float = 0.05,
                       c_miss: float = 1.0, c_fa: float = 1.0, normalize: bool = False,
                       conditional: bool = True, marginalize: Sequence[str] | None = None,
                       membership: str = "enrol", test_speaker: str | None = None,
                       test_groups: Sequence[str] | None = None, speaker_table: pd.DataFrame | None = None,
                       n_grid: int = 512, min_speakers: int = 5, min_errors: int = 30, score: str | None = None,
                       n_boot: int = 200, seed: Any = 0, check_fit: bool = True,
                       thresholds: str = "attainable", negative_by: str | None = None,
                       **posterior_kw: Any) -> "ModelSubgroupDCFResult | PosteriorFairness":
    """SVEva measures implied by a fitted linear mixed model (an ``LmerResult``).

    Each subgroup's class-conditional (latent) score distribution is the mixture over its
    trials ``i`` of ``N(m_i, v_i)`` from :func:`scoremix.predictive.predictive`: with
    ``conditional=True``, ``m_i = x_iᵀβ̂ + z_iᵀb̂`` (conditional modes of all random
    effects) and ``v_i = σ_{c(i)}²``; with ``conditional=False``, the random effects of the
    ``marginalize`` grouping factors (default: the ``speaker`` column) are removed from
    ``m_i`` and their variances ``z_iᵀΣ_k z_i`` added (new speakers).  ``σ_{c(i)}`` is
    ``fit.sigma_by`` of the trial's dispersion level, else ``fit.sigma``.  For a
    transformation fit the measures are computed on the latent scale (they are invariant
    to the increasing transform) and thresholds are reported on the score scale.

    The table shows the empirical measures of the same trials beside the model's
    (``<measure>_empirical`` with speaker-bootstrap intervals ``_lo/_hi``) and ``fit_ok``;
    a :class:`~scoremix.predictive.gof.ModelFitWarning` names subgroups whose model EER
    disagrees with the empirical EER beyond sampling error.  When the model has no term
    for a grouping column, ``notes`` says that it cannot express a subgroup's
    class-specific shift.

    Parameters
    ----------
    fit:
        fitted model with ``predict(newdata, re_form=None)``, ``sigma``, ``sigma_by``,
        ``varcorr`` and ``ranef`` (see :mod:`scoremix.lme`).
    trials:
        the trials to evaluate (usually the fitted data).
    by, label, speaker, positive, membership, test_speaker, test_groups, speaker_table:
        as in :func:`scoremix.fairness.subgroup_dcf`.
    conditional, marginalize:
        conditional on the fitted speakers, or marginal over new levels of ``marginalize``.
    min_speakers, min_errors:
        reliability rule: ``reliable`` is False when a subgroup has fewer speakers, one
        class only, or fewer expected errors ``n_pos·fnr + n_neg·fpr`` at ``τ*`` than
        ``min_errors`` (Doddington's rule of 30).
    score:
        score column of ``trials`` for the empirical columns (default: the model's response
        column, else ``"score"``; none found: no empirical columns).
    n_boot, seed, check_fit:
        speaker-bootstrap replicates of the empirical intervals (0: none and no check),
        seed, and whether to warn on disagreement.
    thresholds:
        ``"attainable"`` (default): every model measure at the thresholds a detector can set,
        the observed distinct scores of ``trials`` (tie cells as steps; EER = ROCCH EER, minimum
        DCF over those thresholds; :mod:`scoremix.predictive.attainable`), so a model that
        reproduces the data gives the empirical table exactly.  ``"latent"``: the smooth
        minimum / root over every latent threshold (grid search + refinement, ``n_grid``).
    negative_by:
        a column of ``trials`` (e.g. ``"attack"``): the table gets one extra block of rows per
        level of this column, all positives of the subgroup against that level's negatives
        (the per-attack EER of anti-spoofing papers); the cell's ``negative`` column names
        the level (``"(all)"`` for the ordinary rows).

    Returns
    -------
    ModelSubgroupDCFResult
        or, when ``fit`` is a posterior (``BayesLmerResult``), the
        :class:`PosteriorFairness` of :func:`scoremix.fairness.posterior_subgroup_dcf`
        (``conditional`` maps to ``random="conditional"/"marginal"``; extra keyword
        arguments such as ``max_draws``, ``ci``, ``split_by`` are passed on).
    """
    groups = by  # the body's name for by= (renamed API argument)
    random_state = seed  # the body's name for seed= (renamed API argument)
    if is_bayes_fit(fit):
        if negative_by is not None:
            raise SubgroupError("negative_by is for point fits (LmerResult); for a posterior fit pass the "
                                "trials of one negative level at a time")
        if marginalize is not None:
            raise SubgroupError("marginalize= applies to LmerResult fits; a posterior fit marginalises all "
                                "random effects with conditional=False")
        return posterior_subgroup_dcf(fit, trials, groups, label=label, speaker=speaker, positive=positive,
                                      p_target=p_target, c_miss=c_miss, c_fa=c_fa, normalize=normalize,
                                      random="conditional" if conditional else "marginal",
                                      membership=membership, test_speaker=test_speaker,
                                      test_groups=test_groups, speaker_table=speaker_table,
                                      min_speakers=min_speakers, min_errors=min_errors, score=score,
                                      n_boot=n_boot, seed=random_state, check_fit=check_fit,
                                      **posterior_kw)
    if posterior_kw:
        raise TypeError(f"unexpected keyword arguments for an LmerResult fit: {sorted(posterior_kw)}")
    label, positive = fit_class_defaults(fit, label, positive)   # s7heldout: a score_model fit's own columns
    spec_ = getattr(fit, "locscale_spec", None)
    if spec_ is not None and speaker == "speaker" and speaker not in trials.columns:
        speaker = spec_.speaker
    if negative_by is not None:
        return _by_negative_level(fit, trials, groups, negative_by, dict(
            label=label, speaker=speaker, positive=positive, p_target=p_target, c_miss=c_miss, c_fa=c_fa,
            normalize=normalize, conditional=conditional, marginalize=marginalize, membership=membership,
            test_speaker=test_speaker, test_groups=test_groups, speaker_table=speaker_table, n_grid=n_grid,
            min_speakers=min_speakers, min_errors=min_errors, score=score, n_boot=n_boot,
            random_state=random_state, check_fit=check_fit, thresholds=thresholds))
    if label not in trials.columns:
        raise SubgroupError(f"class column {label!r} not in the trial table")
    sg = define_subgroups(trials, groups, membership=membership, speaker=speaker, test_speaker=test_speaker,
                          test_groups=test_groups, speaker_table=speaker_table)
    marg = None if conditional else (list(marginalize) if marginalize is not None else [speaker])
    try:
        pred = predictive(fit, trials, label=label, positive=positive, conditional=conditional, marginal_over=marg)
    except ValueError as exc:
        raise SubgroupError(str(exc)) from exc
    y = pred.y.astype(bool)
    G = sg.n_groups
    W = pred.population_weights(sg.mem_trial, sg.mem_group, G)
    extra_notes = []
    if check_thresholds(thresholds) == "attainable" and np.isnan(pred.score).all():
        thresholds = "latent"   # trials without scores: no observed threshold exists
        extra_notes.append("the trials carry no scores, so the model measures use latent thresholds "
                           "(thresholds='latent'): no detector threshold to evaluate them at")
    if thresholds == "attainable":
        members = [np.arange(len(pred.y))] + [sg.mem_trial[sg.mem_group == g] for g in range(G)]
        res = attainable_measures(pred, W, p_target=p_target, c_miss=c_miss, c_fa=c_fa, normalize=normalize,
                                  members=members)
    else:
        res = gaussian_mixture_measures(pred.mean, pred.sd, pred.positive, W, p_target=p_target, c_miss=c_miss,
                                        c_fa=c_fa, normalize=normalize, n_grid=n_grid,
                                        axis=pred.axis, stratum=pred.stratum)
        res["all_threshold"] = pred.to_score(res["all_threshold"])
        res["threshold_own"] = pred.to_score(res["threshold_own"])
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
    emp_overall = empirical_beside(fit, tab, trials, groups, score, n_boot, random_state, check_fit,
                                   thresholds=thresholds, negative_by=_negative_level_of(trials), label=label,
                                   speaker=speaker, positive=positive, p_target=p_target, c_miss=c_miss,
                                   c_fa=c_fa, normalize=normalize, membership=membership,
                                   test_speaker=test_speaker, test_groups=test_groups,
                                   speaker_table=speaker_table, min_speakers=min_speakers)
    note = subgroup_term_note(fit, list(groups))
    return ModelSubgroupDCFResult(table=tab, min_dcf=overall["min_dcf"], threshold=overall["threshold"],
                                  fairness_index=float(res["fairness_index"][0]), overall=overall,
                                  conditional=conditional, overall_empirical=emp_overall,
                                  notes=([note] if note else []) + extra_notes)


_NEG_ATTR = "scoremix_negative_by"


def _negative_level_of(trials: pd.DataFrame) -> str | None:
    return trials.attrs.get(_NEG_ATTR)


def _by_negative_level(fit: Any, trials: pd.DataFrame, groups: Sequence[str], negative_by: str,
                       kw: dict[str, Any]) -> ModelSubgroupDCFResult:
    """``model_subgroup_dcf(..., negative_by=col)``: the ordinary table (``negative = "(all)"``)
    followed by one table per level ``L`` of ``col`` among the negatives, computed on the trials
    ``positives ∪ {negatives with col == L}`` (its own τ*, minimum DCF, EER and checks)."""
    from scoremix.trials import label_to_binary

    if negative_by not in trials.columns:
        raise SubgroupError(f"negative_by column {negative_by!r} not in the trial table")
    label = kw["label"]
    if label not in trials.columns:
        raise SubgroupError(f"class column {label!r} not in the trial table")
    try:
        y = np.asarray(label_to_binary(trials[label], positive=kw["positive"]), dtype=bool)
    except (ValueError, TypeError) as exc:
        raise SubgroupError(f"class column {label!r}: {exc}") from exc
    levels = sorted(pd.unique(trials.loc[~y, negative_by]), key=str)
    base = model_subgroup_dcf(fit, trials, groups, **kw)
    parts = [base.table.assign(negative="(all)")]
    overall = {"(all)": base.overall}
    for lv in levels:
        sub = trials[y | (trials[negative_by] == lv).to_numpy()].copy()
        sub.attrs[_NEG_ATTR] = negative_by
        r = model_subgroup_dcf(fit, sub, groups, **kw)
        parts.append(r.table.assign(negative=lv))
        overall[str(lv)] = r.overall
    tab = pd.concat(parts, ignore_index=True)
    tab.insert(0, "negative", tab.pop("negative"))
    return ModelSubgroupDCFResult(table=tab, min_dcf=base.min_dcf, threshold=base.threshold,
                                  fairness_index=base.fairness_index, overall=base.overall,
                                  conditional=base.conditional, overall_empirical=base.overall_empirical,
                                  notes=base.notes + [f"rows with negative = L: all positives against the negatives "
                                                      f"with {negative_by} == L (own τ*)"],
                                  by_negative=overall)
