r"""Goodness of fit: the empirical error rate and its interval beside the model's.

A model-based error rate is only as good as the model's fit to the tails of the score
distributions.  Every table of model-based EER or DCF therefore carries the empirical value
and a *speaker-cluster bootstrap* interval of it (speakers resampled with replacement; all
trials of a drawn speaker enter with its multiplicity — the dependence structure of the
trials); tables of a point fit also carry an interval of the model value: a parametric
bootstrap (:mod:`scoremix.predictive.param_boot`) or the speaker re-weighting of
:func:`model_eer_interval` (``model_eer(..., model_interval=)``).

Disagreement rule.  For row ``r`` with model value :math:`m_r`, empirical value
:math:`e_r` and ``R`` rows in the table, the model is flagged when

.. math::

    \frac{|\operatorname{logit} m_r - \operatorname{logit} e_r|}{s_r} > \Phi^{-1}\!\left(1 - \frac{0.05}{2R}\right),
    \qquad s_r = \max\big(\operatorname{sd}_b \operatorname{logit} e_r^{(b)},\; (N_r\,\bar e_r(1-\bar e_r))^{-1/2}\big),

i.e. a two-sided 5 % test per table (Bonferroni over its rows) on the logit scale, with the
bootstrap standard error of the empirical logit-EER, floored at the binomial standard error
of a rate estimated from ``N_r = min(n_pos, n_neg)`` trials (so perfectly separated cells do
not flag tiny model rates); rates are clipped to ``[0.5/N_r, 1 − 0.5/N_r]``.  The sampling
error of the model value itself is ignored, which makes the rule conservative in the right
direction only when the model is estimated from many more trials than the cell holds
(true for the per-cell tables it guards).  A flagged table raises :class:`ModelFitWarning`
naming the rows and pointing at ``transform="monotone"`` (a Gaussian fit) or at a missing
term (a transformation fit, or a breakdown by a column the model has no term for).
"""

from __future__ import annotations

import re
import warnings
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy.special import ndtri

__all__ = ["ModelFitWarning", "empirical_eer_interval", "model_eer_interval", "order_preserving_finite", "flag_disagreement", "missing_terms",
           "subgroup_term_note", "warn_if_misfit", "cluster_codes_for"]


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
    out["lo"], out["hi"] = lo, hi
    n_min = min(int(yy.sum()), int((~yy).sum()))
    ec = np.clip(e, 0.5 / n_min, 1 - 0.5 / n_min)
    out["se_logit"] = float(np.std(np.log(ec / (1 - ec)), ddof=1))
    return out


def model_eer_interval(pred: Any, mask: Any, clusters: Any = None, n_boot: int = 200, level: float = 0.95,
                       seed: int | np.random.Generator | None = 0) -> tuple[float, float]:
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
    estimated from all cells.  ``(nan, nan)`` for a posterior fit (use its credible interval),
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
    sel, comp_local = np.unique(comp, return_inverse=True)
    S = sparse.csr_matrix((np.ones(idx.size), (comp_local, cl)), shape=(sel.size, C))
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    M = draw_cluster_weights(np.zeros(C, np.int64), n_boot, rng)
    e = np.empty(n_boot)
    for b0 in range(0, n_boot, 100):
        W = np.asarray(S @ M[:, b0:b0 + 100]).T  # (B_chunk, components)
        mix = MixtureRates(pred.mean[:, sel], pred.sd[:, sel], pred.positive[sel], W, axis=pred.axis,
                           stratum=pred.stratum[sel])  # a stratified transform: its common threshold axis
        e[b0:b0 + W.shape[0]] = batch_eer(mix)[:, 0]
    point = float(pred.eer(np.asarray(mask, bool))[0])
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


def _hint(fit: Any, by: Sequence[str]) -> str:
    miss = missing_terms(fit, by) if by else []
    if getattr(fit, "transform", None) is None:
        h = ("the Gaussian model does not fit the tails of the score distributions: refit with "
             "lmer(..., transform=\"monotone\")")
        if miss:
            h += f" and/or add a term for {miss}"
        return h
    if miss:
        return f"the model has no term for {miss}: add one (e.g. 'label:{miss[0]}')"
    return ("the transformation model still misses structure here: add the missing term (a class-specific "
            "effect of the breakdown column, or a random term for its levels)")


def warn_if_misfit(fit: Any, table: pd.DataFrame, what: str = "EER", model_col: str = "eer_model",
                   emp_col: str = "eer_empirical", by: Sequence[str] = (), stacklevel: int = 3) -> np.ndarray:
    """Flag the rows of ``table`` (needs ``model_col``, ``emp_col``, ``<emp_col>_lo/_hi``,
    ``se_logit``, ``n_pos``, ``n_neg``) and raise one :class:`ModelFitWarning` naming them.

    Returns the boolean flags (also useful as a ``fit_ok`` column: ``~flags``).
    """
    se = table["se_logit"] if "se_logit" in table.columns else np.full(len(table), np.nan)
    n_min = np.minimum(table["n_pos"].to_numpy(float), table["n_neg"].to_numpy(float))
    flags = flag_disagreement(table[model_col], table[emp_col], se, n_min)
    if flags.any():
        bad = table[flags]
        lo, hi = f"{emp_col}_lo", f"{emp_col}_hi"
        k = int(np.argmax(np.abs(np.log(np.clip(bad[model_col].to_numpy(float), 1e-12, 1))
                                 - np.log(np.clip(bad[emp_col].to_numpy(float), 1e-12, 1)))))
        row = bad.iloc[k]
        name = row.name if not isinstance(row.name, tuple) else "/".join(map(str, row.name))
        if table.index.name in ("overall", "cell") and len(table) == 1:
            name = "overall"  # the one row of an overall table, not its index value 0
        interval = (f" [{100 * row[lo]:.3g}, {100 * row[hi]:.3g}]"
                    if lo in bad.columns and np.isfinite(row[lo]) else "")
        warnings.warn(
            f"model-based {what} disagrees with the empirical {what} beyond sampling error in "
            f"{int(flags.sum())} of {len(table)} row(s) (worst: {name}: model {100 * row[model_col]:.3g} % vs "
            f"empirical {100 * row[emp_col]:.3g} %{interval}); {_hint(fit, by)}",
            ModelFitWarning, stacklevel=stacklevel)
    return flags
