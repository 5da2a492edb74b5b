"""The empirical SVEva measures beside model-based ones (goodness of fit of subgroup tables).

Shared by :func:`scoremix.fairness.model_subgroup_dcf` and
:func:`scoremix.fairness.posterior_subgroup_dcf`; the disagreement rule is the one of
:mod:`scoremix.predictive.gof`, applied to each subgroup's EER with the standard error of its
empirical logit-EER over the speaker-bootstrap replicates of
:func:`scoremix.fairness.subgroup_dcf`.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix.fairness.subgroups import SubgroupError
from scoremix.predictive.gof import order_preserving_finite, warn_if_misfit

__all__ = ["EMPIRICAL_MEASURES", "empirical_beside"]


#: measures whose empirical value (and interval) is shown beside the model's
EMPIRICAL_MEASURES = ("min_dcf", "eer", "ratio_overall", "fpr", "fnr")


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
                     n_boot: int, random_state: Any, check_fit: bool, **sveva_kw: Any) -> dict[str, float]:
    """Add the empirical SVEva measures (with speaker-bootstrap intervals) beside the model
    columns of ``tab`` (in place); warn (:class:`~scoremix.predictive.gof.ModelFitWarning`)
    when a subgroup's model EER disagrees with its empirical EER beyond sampling error.

    Returns the empirical overall measures (empty when the trials carry no scores).
    """
    from scoremix.fairness.sveva import subgroup_dcf

    col = _score_column(fit, trials, score)
    if col is None:
        return {}
    emp = subgroup_dcf(trials.assign(**{col: order_preserving_finite(trials[col])}), groups, score=col,
                       n_boot=n_boot, seed=random_state, progress=False, **sveva_kw)
    et = emp.table
    if list(et["subgroup"].astype(str)) != list(tab["subgroup"].astype(str)):  # pragma: no cover - same cells
        raise SubgroupError("empirical and model subgroup tables disagree on the subgroups")
    for m in EMPIRICAL_MEASURES:
        tab[f"{m}_empirical"] = et[m].to_numpy()
        if n_boot > 0:
            tab[f"{m}_empirical_lo"] = et[f"{m}_lo"].to_numpy()
            tab[f"{m}_empirical_hi"] = et[f"{m}_hi"].to_numpy()
    if n_boot > 0 and check_fit and emp.replicates is not None and "eer" in emp.replicates:
        r = np.asarray(emp.replicates["eer"], dtype=float)
        n_min = np.maximum(np.minimum(tab["n_pos"].to_numpy(float), tab["n_neg"].to_numpy(float)), 1.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            rc = np.clip(r, 0.5 / n_min[:, None], 1 - 0.5 / n_min[:, None])
            se = np.nanstd(np.log(rc / (1 - rc)), axis=1, ddof=1)
        chk = pd.DataFrame({"eer_model": tab["eer"].to_numpy(), "eer_empirical": tab["eer_empirical"].to_numpy(),
                            "eer_empirical_lo": tab["eer_empirical_lo"].to_numpy(),
                            "eer_empirical_hi": tab["eer_empirical_hi"].to_numpy(), "se_logit": se,
                            "n_pos": tab["n_pos"].to_numpy(), "n_neg": tab["n_neg"].to_numpy()},
                           index=tab["subgroup"].astype(str))
        tab["fit_ok"] = ~warn_if_misfit(fit, chk, what="subgroup EER", by=list(groups), stacklevel=4)
    return dict(emp.overall)


