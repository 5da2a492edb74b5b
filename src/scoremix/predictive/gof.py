r"""Goodness of fit: the empirical error rate and its interval beside the model's.

A model-based error rate is only as good as the model's fit to the tails of the score
distributions.  Every table of model-based EER or DCF therefore carries the empirical value
and a *speaker-cluster bootstrap* interval of it (speakers resampled with replacement; all
trials of a drawn speaker enter with its multiplicity — the dependence structure of the
trials); tables of a point fit also carry an interval of the model value: a parametric
bootstrap (:mod:`scoremix.predictive.param_boot`) or the speaker re-weighting of
:func:`model_eer_interval` (``model_eer(..., model_interval=)``).

Disagreement rule.  A model value is flagged (``fit_ok = False``) exactly when it lies
outside the empirical interval printed beside it (for rates — EER, FPR, FNR — the bootstrap
interval widened to at least the Clopper–Pearson interval of the error count,
:func:`widen_to_binomial`, so a cell with no errors is not "[0, 0]") (:func:`outside_interval`): the flag and the
printed interval never disagree.  The interval is the speaker-cluster bootstrap interval of
the empirical value at ``level`` (95 % by default), so a model that is right in every cell is
flagged in about 5 % of the cells (measured on data simulated from fitted LA models in
``benchmarks/model_fit_flags.py``).  A flagged table raises one :class:`ModelFitWarning`
naming the worst row and the likely cause (:func:`misfit_hint`): a missing location term, a
dispersion or shape that differs by level, a class that is a point mass, or a definition
issue (tied scores evaluated at latent thresholds).  Each table also gets a ``fit_hint``
column (empty where ``fit_ok``).

(:func:`flag_disagreement`, the earlier Bonferroni z-rule on the logit scale, is kept for
callers that have no interval.)
"""

from __future__ import annotations

import re
import warnings
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy.special import ndtri

__all__ = ["ModelFitWarning", "empirical_eer_interval", "model_eer_interval", "order_preserving_finite", "flag_disagreement", "missing_terms",
           "subgroup_term_note", "warn_if_misfit", "cluster_codes_for", "outside_interval", "misfit_hint",
           "score_shape_facts", "binomial_floor", "widen_to_binomial"]


class ModelFitWarning(UserWarning):
    """A model-based error rate disagrees with the empirical one beyond sampling error."""


def cluster_codes_for(frame: pd.DataFrame, speaker: str | None) -> np.ndarray | None:
    """Integer cluster codes from column ``speaker`` of ``frame`` (``None``: trials are
    their own clusters)."""
    if speaker is None:
        return None
    if speaker not in frame.columns:
        raise KeyError(f"cluster column {speaker!r} not in the table (columns: {list(frame.columns)})")
    return pd.factorize(frame[speaker].astype(str), sort=True)[0].astype(np.int64)


def order_preserving_finite(scores: Any) -> np.ndarray:
    """Scores with ``±inf`` replaced by finite values beyond every finite score (``+inf`` →
    max + 1, ``-inf`` → min − 1; ties stay ties).  Empirical error rates depend on the
    scores only through their order, so they are unchanged — this lets the empirical side of a
    transformation model's table use saturated scores (probabilities of 0 or 1 as logits)."""
    s = np.asarray(scores, dtype=np.float64).copy()
    fin = np.isfinite(s)
    if fin.all():
        return s
    lo, hi = (float(s[fin].min()), float(s[fin].max())) if fin.any() else (0.0, 0.0)
    s[np.isposinf(s)] = hi + 1.0
    s[np.isneginf(s)] = lo - 1.0
    return s


def binomial_floor(value: Any, n: Any, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    r"""Clopper–Pearson interval of a rate ``value`` counted on ``n`` trials (``k = round(value·n)``
    errors): :math:`[B^{-1}(lpha/2; k, n-k+1),\ B^{-1}(1-lpha/2; k+1, n-k)]`, 0 / 1 at
    ``k = 0`` / ``k = n``.  Model tables print the empirical interval widened to at least this
    (a speaker bootstrap of a cell with no or few errors collapses to ``[0, 0]``, which no
    rate can be checked against; the exact binomial interval of the count is the least a
    rate estimated from ``n`` trials is uncertain by)."""
    from scipy.stats import beta

    v = np.asarray(value, dtype=np.float64)
    nn = np.maximum(np.asarray(n, dtype=np.float64), 1.0)
    k = np.clip(np.round(v * nn), 0, nn)
    a = (1.0 - level) / 2.0
    with np.errstate(invalid="ignore"):
        lo = np.where(k > 0, beta.ppf(a, np.maximum(k, 1e-12), nn - k + 1), 0.0)
        hi = np.where(k < nn, beta.ppf(1 - a, k + 1, np.maximum(nn - k, 1e-12)), 1.0)
    bad = ~np.isfinite(v)
    return np.where(bad, np.nan, lo), np.where(bad, np.nan, hi)


def widen_to_binomial(value: Any, lo: Any, hi: Any, n: Any, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """``[min(lo, CP_lo), max(hi, CP_hi)]`` (:func:`binomial_floor`); NaN ends stay NaN."""
    blo, bhi = binomial_floor(value, n, level)
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    return (np.where(np.isfinite(lo) & np.isfinite(blo), np.minimum(lo, blo), lo),
            np.where(np.isfinite(hi) & np.isfinite(bhi), np.maximum(hi, bhi), hi))


def empirical_eer_interval(scores: Any, y: Any, clusters: Any = None, n_boot: int = 200, level: float = 0.95,
                           seed: int | np.random.Generator | None = 0) -> dict[str, float]:
    """Empirical ROCCH EER with a cluster-bootstrap interval: the studentised interval of
    :func:`scoremix.resampling.overall.studentized_overall_interval` (the method of ``sm.eer(...,
    n_boot=)``), or where that is undefined the expanded percentile interval of
    :func:`scoremix.resampling.intervals.measure_intervals` (small-sample ``t`` levels for the
    ``n`` clusters).

    Parameters
    ----------
    scores, y:
        scores and 0/1 labels.
    clusters:
        ``(n,)`` cluster (speaker) codes; ``None`` resamples trials.
    n_boot, level, seed:
        replicates (0: no interval), interval level, random seed.

    Returns
    -------
    dict with ``eer``, ``lo``, ``hi`` and ``se_logit`` (bootstrap SD of the logit EER;
    NaN without replicates).
    """
    from scoremix.resampling.bootstrap import draw_cluster_weights
    from scoremix.metrics import eer
    from scoremix.resampling.metric_intervals import WeightedReplicates

    s = order_preserving_finite(scores)
    yy = np.asarray(y).astype(bool)
    out = {"eer": float("nan"), "lo": float("nan"), "hi": float("nan"), "se_logit": float("nan")}
    if not yy.any() or yy.all():
        return out
    out["eer"] = float(eer(s, yy))
    if n_boot <= 0:
        return out
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    cl = np.arange(s.size) if clusters is None else np.asarray(clusters, dtype=np.int64)
    _, cl = np.unique(cl, return_inverse=True)
    C = int(cl.max()) + 1
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    M = np.concatenate([draw_cluster_weights(np.zeros(C, np.int64), min(50, n_boot - b0), rng)
                        for b0 in range(0, n_boot, 50)], axis=1)
    w = WeightedReplicates("eer", s, yy, cl, C)
    e_all = w(M)
    e = e_all[np.isfinite(e_all)]
    if e.size < 2:
        return out
    from scoremix.resampling.overall import studentized_overall_interval
    from scoremix.resampling.intervals import measure_intervals

    lo, hi = studentized_overall_interval("eer", s, yy, cl, C, M, e_all, level, population=w.population)
    if np.isnan(lo) or np.isnan(hi):
        elo, ehi = measure_intervals({"eer": e[None, :]}, {"eer": np.array([out["eer"]])}, np.array([C], float),
                                     level, ["eer"], "expanded")["eer"]
        lo, hi = float(elo[0]), float(ehi[0])
    n_min = min(int(yy.sum()), int((~yy).sum()))
    lo, hi = widen_to_binomial(out["eer"], lo, hi, n_min, level)
    out["lo"], out["hi"] = float(lo), float(hi)
    ec = np.clip(e, 0.5 / n_min, 1 - 0.5 / n_min)
    out["se_logit"] = float(np.std(np.log(ec / (1 - ec)), ddof=1))
    return out


def model_eer_interval(pred: Any, mask: Any, clusters: Any = None, n_boot: int = 200, level: float = 0.95,
                       seed: int | np.random.Generator | None = 0, thresholds: str = "latent",
                       max_thresholds: int = 2000) -> tuple[float, float]:
    r"""Speaker-cluster bootstrap interval of a point fit's model EER for the trials in ``mask``
    (``model_eer(..., model_interval="speakers")``; the default for transformation fits).

    The model EER of a cell is the EER of its two class mixtures of per-trial Gaussians
    (:meth:`~scoremix.predictive.layer.Predictive.eer`); component ``c`` has weight
    :math:`w_c = \sum_{i \in 	ext{cell}} [c(i) = c]`.  A replicate draws the cell's speakers
    (``clusters``; ``None``: trials) with replacement and re-weights every trial by its
    speaker's multiplicity :math:`m_{s(i)}`, :math:`w^*_c = \sum_i m_{s(i)} [c(i) = c]`, and
    recomputes the mixture EER (:func:`~scoremix.predictive.mixture.batch_eer`).  The interval
    is the expanded percentile interval of :func:`scoremix.resampling.intervals.measure_intervals`
    (small-sample ``t`` levels for the cell's ``n`` speakers), the method of every empirical
    interval.  It measures how much the model EER depends on *which* speakers the cell has —
    with ``conditional=True`` their fitted effects, the dominant uncertainty of a small
    cell — and not the estimation error of the fixed effects and variances, which are
    estimated from all cells, so it is *not* an interval for the model value's estimation
    error (on LA it is about 7× narrower than the spread of speaker-bootstrap refits); tables
    show it in their own columns ``eer_model_reweight_lo/_hi``.  ``thresholds="attainable"``:
    each replicate's EER is the ROCCH EER at (up to ``max_thresholds``) observed scores
    (:mod:`scoremix.predictive.attainable`).  ``(nan, nan)`` for a posterior fit (use its credible interval),
    without replicates, or when a class is missing.
    """
    from scipy import sparse

    from scoremix.resampling.bootstrap import draw_cluster_weights
    from scoremix.resampling.intervals import measure_intervals
    from scoremix.predictive.mixture import MixtureRates, batch_eer

    nan = (float("nan"), float("nan"))
    if n_boot <= 0 or pred.n_draws != 1:
        return nan
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    idx = np.flatnonzero(np.asarray(mask, bool))
    comp = pred.component[idx]
    if not (pred.positive[comp].any() and (~pred.positive[comp]).any()):
        return nan
    cl = np.arange(idx.size) if clusters is None else np.asarray(clusters)[idx]
    _, cl = np.unique(cl, return_inverse=True)
    C = int(cl.max()) + 1
    wts = np.ones(idx.size) if pred.weight is None else pred.weight[idx]
    if pred.component2 is not None:   # per-trial mixtures (a failure mixture): both components
        c2, w2 = pred.component2[idx], pred.weight2[idx]
        K = 1 if c2.ndim == 1 else c2.shape[1]
        comp = np.r_[comp, c2.reshape(idx.size, K).T.ravel()]
        cl, wts = np.r_[cl, np.tile(cl, K)], np.r_[wts, w2.reshape(idx.size, K).T.ravel()]
    sel, comp_local = np.unique(comp, return_inverse=True)
    S = sparse.csr_matrix((wts, (comp_local, cl)), shape=(sel.size, C))
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    M = draw_cluster_weights(np.zeros(C, np.int64), n_boot, rng)
    e = np.empty(n_boot)
    for b0 in range(0, n_boot, 100):
        W = np.asarray(S @ M[:, b0:b0 + 100]).T  # (B_chunk, components)
        if thresholds == "attainable":
            from scoremix.predictive.attainable import attainable_eer
            Wf = np.zeros((W.shape[0], pred.n_components))
            Wf[:, sel] = W
            e[b0:b0 + W.shape[0]] = attainable_eer(pred, Wf, max_thresholds)[0][:, 0]   # s7heldout: as the point value
            continue
        mix = MixtureRates(pred.mean[:, sel], pred.sd[:, sel], pred.positive[sel], W, axis=pred.axis,
                           stratum=pred.stratum[sel])  # a stratified transform: its common threshold axis
        e[b0:b0 + W.shape[0]] = batch_eer(mix)[:, 0]
    point = float(pred.eer(np.asarray(mask, bool), thresholds=thresholds)[0])
    lo, hi = measure_intervals({"eer": e[None, :]}, {"eer": np.array([point])}, np.array([C], float), level,
                               ["eer"], "expanded")["eer"]
    return float(lo[0]), float(hi[0])


def flag_disagreement(model: Any, empirical: Any, se_logit: Any, n_min: Any, alpha: float = 0.05) -> np.ndarray:
    """Rows where the model rate disagrees with the empirical one (module docstring rule)."""
    m = np.asarray(model, dtype=np.float64)
    e = np.asarray(empirical, dtype=np.float64)
    se = np.asarray(se_logit, dtype=np.float64)
    n = np.maximum(np.asarray(n_min, dtype=np.float64), 1.0)
    ok = np.isfinite(m) & np.isfinite(e) & (n > 0)
    R = max(int(ok.sum()), 1)
    crit = float(ndtri(1 - alpha / (2 * R)))
    with np.errstate(invalid="ignore", divide="ignore"):
        mc = np.clip(m, 0.5 / n, 1 - 0.5 / n)
        ecl = np.clip(e, 0.5 / n, 1 - 0.5 / n)
        floor = 1.0 / np.sqrt(n * ecl * (1 - ecl))
        s = np.where(np.isfinite(se), np.maximum(se, floor), floor)
        z = np.abs(np.log(mc / (1 - mc)) - np.log(ecl / (1 - ecl))) / s
    return ok & (z > crit)


def _formula_text(fit: Any) -> str:
    spec = getattr(fit, "spec", None)
    parts = [str(getattr(fit, "formula", "") or getattr(spec, "formula", "") or ""),
             str(getattr(fit, "dispersion", "") or getattr(spec, "dispersion_formula", "") or "")]
    return " ".join(parts)


def missing_terms(fit: Any, columns: Sequence[str]) -> list[str]:
    """The ``columns`` that no term of the fit's formula (or dispersion formula) mentions.

    A model without a term for a subgroup column gives every subgroup the same class
    distributions up to the other effects, so it cannot express a subgroup's
    class-specific shift; its subgroup measures only reflect how the subgroups differ in
    the other covariates (speakers, attacks, …).
    """
    text = _formula_text(fit)
    if not text.strip():
        return []
    return [c for c in columns if not re.search(rf"(?<![\w.]){re.escape(str(c))}(?![\w.])", text)]


def subgroup_term_note(fit: Any, columns: Sequence[str]) -> str | None:
    """The note shown beside a model-based subgroup table when the model has no term for
    some of its grouping columns (``None`` when it has all of them)."""
    miss = missing_terms(fit, columns)
    if not miss:
        return None
    return (f"the model has no term for {miss}: it cannot express a subgroup's class-specific shift, so "
            f"its per-subgroup values only reflect the subgroups' other covariates; add e.g. "
            f"'label:{miss[0]}' (fixed) or '(0 + dummy(label, ...) | {miss[0]})' to the formula")


def outside_interval(model: Any, lo: Any, hi: Any) -> np.ndarray:
    """``True`` where ``model`` lies outside ``[lo, hi]`` (both finite; a relative slack of 1e-9
    absorbs rounding of equal values).  NaN model values or intervals are never flagged."""
    m = np.asarray(model, dtype=np.float64)
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        tol = 1e-9 * np.maximum(1.0, np.abs(m))
        out = (m < lo - tol) | (m > hi + tol)
    return np.asarray(out & np.isfinite(m) & np.isfinite(lo) & np.isfinite(hi), dtype=bool)


def score_shape_facts(scores: Any, y: Any) -> dict[str, Any]:
    """Facts about a cell's scores that a hint can name: ``tied`` (fewer distinct scores than
    trials in a class, by more than 5 %), ``point_mass`` (a class whose scores are all equal)."""
    s = np.asarray(scores, dtype=np.float64)
    yy = np.asarray(y).astype(bool)
    facts = {"tied": False, "point_mass": []}
    for cls, name in ((True, "positive"), (False, "negative")):
        v = s[yy == cls]
        v = v[~np.isnan(v)]
        if v.size == 0:
            continue
        k = np.unique(v).size
        if k == 1 and v.size > 1:
            facts["point_mass"].append(name)
        if k < 0.95 * v.size:
            facts["tied"] = True
    return facts


def misfit_hint(fit: Any, by: Sequence[str] = (), measures: Sequence[str] = ("eer",), *,
                facts: dict[str, Any] | None = None, thresholds: str = "attainable",
                negative_by: str | None = None) -> str:
    """The likely cause of a flagged model value, in words.

    In order: a class of the cell that is a point mass (all scores equal) for a model that
    cannot put a point mass there (definition: the model spreads it); tied scores evaluated at
    latent thresholds (a definition issue: ``thresholds="attainable"``); a Gaussian fit (the
    shape of the tails: ``transform="monotone"``); a breakdown column the formula has no term
    for (a missing location term); only tail measures flagged (minimum DCF, rates at ``τ*``:
    the shape differs by level — stratify the transform); else the dispersion (or shape)
    differs by level.
    """
    facts = facts or {}
    cols = list(by) + ([negative_by] if negative_by else [])
    miss = missing_terms(fit, cols) if cols else []
    stratified = getattr(getattr(fit, "transform", None), "levels", None) is not None
    if facts.get("point_mass") and not stratified:
        return (f"definition: the {' and '.join(facts['point_mass'])} scores of this cell are all equal (a point "
                "mass), which a Gaussian or shared-transform model spreads out; stratify the transform "
                "(transform=\"monotone-by-class\", control=dict(strata=...)) so the stratum is a point mass")
    if facts.get("tied") and thresholds == "latent":
        return ("definition: tied scores evaluated at latent thresholds (inside tie cells, where no detector "
                "threshold can fall); use thresholds=\"attainable\"")
    if miss and getattr(fit, "locscale_spec", None) is not None:  # s5trust-auto: a score_model fit
        return (f"missing location term: the score model has no term for {miss}; pass covariates=['{miss[0]}'] "
                f"(a per-class location term) or factors=['{miss[0]}'] (a transform per level) to score_model")
    if miss:
        h = (f"missing location term: the model has no term for {miss}; add one (e.g. 'label:{miss[0]}' or "
             f"'(0 + label | {miss[0]})')")
        if getattr(fit, "transform", None) is None:
            h += "; the Gaussian model may also miss the tails (transform=\"monotone\")"
        return h
    if getattr(fit, "transform", None) is None:
        return ("shape: the Gaussian model misses the tails of the score distributions; refit with "
                "transform=\"monotone\"")
    tails = {"min_dcf", "fpr", "fnr", "fpr_ratio", "fnr_ratio", "dcf_at_overall", "ratio_overall", "ratio_own"}
    if not cols:
        return ("pooled shape: the mixture of the model's per-trial distributions misses the pooled scores; a "
                "location, dispersion or shape term is missing for some factor (check the per-attack rows, "
                "model_eer(..., negative_by='attack'), and per-subgroup rows, by=)")
    col = cols[0]
    if measures and set(measures) <= tails:
        return (f"shape differing by level: the tails (measures {sorted(set(measures))}) disagree while the EER "
                f"fits; stratify the transform by {col!r} (transform=\"monotone-by-class\", control=dict(strata=...))")
    return (f"dispersion differing by level: the spread of the scores differs by level of {col!r}; add "
            f"dispersion='~ label*{col}' (or a per-level dispersion effect), or stratify the transform by it")


def _hint(fit: Any, by: Sequence[str]) -> str:
    return misfit_hint(fit, by)


def warn_if_misfit(fit: Any, table: pd.DataFrame, what: str = "EER", model_col: str = "eer_model",
                   emp_col: str = "eer_empirical", by: Sequence[str] = (), stacklevel: int = 3,
                   hints: Sequence[str] | None = None, warn: bool = True) -> np.ndarray:
    """Flag the rows of ``table`` whose ``model_col`` lies outside the printed empirical
    interval ``<emp_col>_lo/_hi`` (:func:`outside_interval`; rows without an interval fall back
    to :func:`flag_disagreement`, which needs ``se_logit``, ``n_pos``, ``n_neg``) and raise one
    :class:`ModelFitWarning` naming the worst (``hints``: one per row, else :func:`misfit_hint`).

    Returns the boolean flags (``fit_ok`` is ``~flags``).
    """
    lo, hi = f"{emp_col}_lo", f"{emp_col}_hi"
    if lo in table.columns and hi in table.columns:
        flags = outside_interval(table[model_col], table[lo], table[hi])
        no_iv = ~(np.isfinite(table[lo].to_numpy(float)) & np.isfinite(table[hi].to_numpy(float)))
    else:
        flags = np.zeros(len(table), bool)
        no_iv = np.ones(len(table), bool)
    if no_iv.any() and {"n_pos", "n_neg"} <= set(table.columns) and "se_logit" in table.columns:
        n_min = np.minimum(table["n_pos"].to_numpy(float), table["n_neg"].to_numpy(float))
        fb = flag_disagreement(table[model_col], table[emp_col], table["se_logit"], n_min)
        flags = flags | (no_iv & fb & np.isfinite(table["se_logit"].to_numpy(float)))
    if flags.any() and warn:
        bad = table[flags]
        k = int(np.argmax(np.abs(np.log(np.clip(bad[model_col].to_numpy(float), 1e-12, None))
                                 - np.log(np.clip(bad[emp_col].to_numpy(float), 1e-12, None)))))
        row = bad.iloc[k]
        name = row.name if not isinstance(row.name, tuple) else "/".join(map(str, row.name))
        if table.index.name in ("overall", "cell") and len(table) == 1:
            name = "overall"  # the one row of an overall table, not its index value 0
        interval = (f" [{100 * row[lo]:.3g}, {100 * row[hi]:.3g}]"
                    if lo in bad.columns and np.isfinite(row[lo]) else "")
        hint = (list(np.asarray(hints, dtype=object)[flags])[k] if hints is not None else _hint(fit, by))
        warnings.warn(
            f"model-based {what} lies outside the empirical {what}'s interval in "
            f"{int(flags.sum())} of {len(table)} row(s) (worst: {name}: model {100 * row[model_col]:.3g} % vs "
            f"empirical {100 * row[emp_col]:.3g} %{interval}); likely cause: {hint}",
            ModelFitWarning, stacklevel=stacklevel)
    return flags
