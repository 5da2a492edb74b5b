"""The empirical SVEva measures beside model-based ones (goodness of fit of subgroup tables).

Shared by :func:`scoremix.fairness.model_subgroup_dcf` and
:func:`scoremix.fairness.posterior_subgroup_dcf`; every measure is checked against
its printed empirical interval (the rule of :mod:`scoremix.predictive.gof`).
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix.fairness.subgroups import SubgroupError

from scoremix.predictive.gof import (ModelFitWarning, misfit_hint, order_preserving_finite, outside_interval,
                                     score_shape_facts, widen_to_binomial)

__all__ = ["EMPIRICAL_MEASURES", "empirical_beside"]


#: measures whose empirical value (and interval) is shown beside the model's, each checked
#: (``fit_ok_<measure>``); ``threshold_own`` (a score, not a rate, whose bootstrap distribution is
#: multimodal where the cost is flat) is shown but not checked
EMPIRICAL_MEASURES = ("min_dcf", "eer", "ratio_overall", "fpr", "fnr", "dcf_at_overall", "ratio_own", "fpr_ratio",
                      "fnr_ratio")
SHOWN_ONLY = ("threshold_own",)


def _score_column(fit: Any, trials: pd.DataFrame, score: str | None) -> str | None:
    if score is not None:
        if score not in trials.columns:
            raise SubgroupError(f"score column {score!r} not in the trial table")
        return score
    resp = getattr(getattr(fit, "spec", None), "response", None)
    for c in (resp, "score"):
        if c is not None and c in trials.columns and pd.api.types.is_numeric_dtype(trials[c]):
            return c
    return None


def empirical_beside(fit: Any, tab: pd.DataFrame, trials: pd.DataFrame, groups: Sequence[str], score: str | None,
                     n_boot: int, random_state: Any, check_fit: bool, thresholds: str = "attainable",
                     negative_by: str | None = None, progress: bool = False, **sveva_kw: Any) -> dict[str, float]:
    """Add the empirical SVEva measures (with speaker-bootstrap intervals) beside the model
    columns of ``tab`` (in place) and check every one of them: ``fit_ok_<measure>`` is False
    exactly when the model value lies outside the printed interval
    (:func:`~scoremix.predictive.gof.outside_interval`), ``fit_ok`` is their conjunction and
    ``fit_hint`` names the likely cause (:func:`~scoremix.predictive.gof.misfit_hint`); one
    :class:`~scoremix.predictive.gof.ModelFitWarning` names the worst cell.

    Returns the empirical overall measures (empty when the trials carry no scores).
    """
    from scoremix.fairness.sveva import subgroup_dcf

    col = _score_column(fit, trials, score)
    if col is None:
        return {}
    emp = subgroup_dcf(trials.assign(**{col: order_preserving_finite(trials[col])}), groups, score=col,
                       n_boot=n_boot, seed=random_state, progress=progress, **sveva_kw)
    et = emp.table
    if list(et["subgroup"].astype(str)) != list(tab["subgroup"].astype(str)):  # pragma: no cover - same cells
        raise SubgroupError("empirical and model subgroup tables disagree on the subgroups")
    for m in EMPIRICAL_MEASURES + SHOWN_ONLY:
        tab[f"{m}_empirical"] = et[m].to_numpy()
        if n_boot > 0:
            tab[f"{m}_empirical_lo"] = et[f"{m}_lo"].to_numpy()
            tab[f"{m}_empirical_hi"] = et[f"{m}_hi"].to_numpy()
    if n_boot > 0:   # rates: the printed interval is at least the binomial one of the error count
        level = float(sveva_kw.get("ci", 0.95))
        n_pos, n_neg = tab["n_pos"].to_numpy(float), tab["n_neg"].to_numpy(float)
        for m, n in (("eer", np.minimum(n_pos, n_neg)), ("fpr", n_neg), ("fnr", n_pos)):
            lo, hi = widen_to_binomial(tab[f"{m}_empirical"], tab[f"{m}_empirical_lo"], tab[f"{m}_empirical_hi"], n,
                                       level)
            tab[f"{m}_empirical_lo"], tab[f"{m}_empirical_hi"] = lo, hi
    if n_boot > 0 and check_fit:
        flags = {m: outside_interval(tab[m], tab[f"{m}_empirical_lo"], tab[f"{m}_empirical_hi"])
                 & np.isfinite(tab[f"{m}_empirical"].to_numpy(float))   # an undefined ratio (0/0) is not checked
                 for m in EMPIRICAL_MEASURES}
        any_flag = np.zeros(len(tab), bool)
        for m, f in flags.items():
            tab[f"fit_ok_{m}"] = ~f
            any_flag |= f
        label = sveva_kw.get("label", "label")
        pos = sveva_kw.get("positive")
        hints = []
        for i in range(len(tab)):
            bad = [m for m in EMPIRICAL_MEASURES if flags[m][i]]
            if not bad:
                hints.append("")
                continue
            hints.append(misfit_hint(fit, list(groups), bad, facts=_cell_facts(trials, tab, i, groups, col, label,
                                                                               pos),
                                     thresholds=thresholds, negative_by=negative_by))
        tab["fit_ok"] = ~any_flag
        tab["fit_hint"] = hints
        if any_flag.any():
            n_bad = int(sum(f.sum() for f in flags.values()))
            worst_m, worst_i, worst_z = None, -1, -1.0
            for m, f in flags.items():
                for i in np.flatnonzero(f):
                    lo, hi = tab[f"{m}_empirical_lo"].iloc[i], tab[f"{m}_empirical_hi"].iloc[i]
                    z = abs(tab[m].iloc[i] - 0.5 * (lo + hi)) / max(hi - lo, 1e-12)
                    if z > worst_z:
                        worst_m, worst_i, worst_z = m, int(i), z
            r = tab.iloc[worst_i]
            warnings.warn(
                f"model-based SVEva measures lie outside the empirical intervals in {n_bad} of "
                f"{len(tab) * len(EMPIRICAL_MEASURES)} (subgroup, measure) cell(s) "
                f"(worst: {r['subgroup']} {worst_m}: model {r[worst_m]:.4g} vs empirical "
                f"{r[f'{worst_m}_empirical']:.4g} [{r[f'{worst_m}_empirical_lo']:.4g}, "
                f"{r[f'{worst_m}_empirical_hi']:.4g}]); likely cause: {hints[worst_i]}",
                ModelFitWarning, stacklevel=4)
    return dict(emp.overall)


def _cell_facts(trials: pd.DataFrame, tab: pd.DataFrame, i: int, groups: Sequence[str], col: str, label: str,
                positive: Any) -> dict[str, Any]:
    """:func:`~scoremix.predictive.gof.score_shape_facts` of row ``i``'s trials (by its group
    values; no facts when a cell cannot be matched)."""
    from scoremix.trials import label_to_binary

    sel = np.ones(len(trials), bool)
    for g in groups:
        if g not in trials.columns:
            return {}
        sel &= (trials[g].astype(str) == str(tab[g].iloc[i])).to_numpy()
    if not sel.any() or label not in trials.columns:
        return {}
    try:
        y = np.asarray(label_to_binary(trials.loc[sel, label], positive=positive), dtype=bool)
    except (ValueError, TypeError):
        return {}
    return score_shape_facts(pd.to_numeric(trials.loc[sel, col], errors="coerce").to_numpy(float), y)
