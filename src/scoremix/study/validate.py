"""Checks of a study that run before any work starts.

:func:`check_formulas` parses every model formula (and dispersion formula) right after the
study file is read, so a typo fails in a second rather than after the data are loaded, and
:func:`check_columns` checks, once the trial table is loaded and before any task runs, that
every column a model or analysis names exists, and that ``[analyses.compare]`` trial ids
identify one trial per system.  Both raise
:class:`~scoremix.study.config.StudyConfigError` naming the key (``models[0].formula: …``),
which the command line reports with exit status 2 (bad input).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from scoremix.study.config import StudyConfig, StudyConfigError
from scoremix.study.data import StudyData

__all__ = ["check_formulas", "check_columns", "model_columns"]


def _parse(formula: str, key: str, source: Any) -> Any:
    from scoremix.lme.errors import FormulaError
    from scoremix.lme.formula import parse_formula

    try:
        return parse_formula(formula)
    except FormulaError as exc:
        raise StudyConfigError(key, " ".join(str(exc).split()), source) from None


def model_columns(cfg: StudyConfig) -> dict[str, list[str]]:
    """The table columns each model's formula (and dispersion formula) uses, by config key."""
    out: dict[str, list[str]] = {}
    for i, m in enumerate(cfg.models):
        if m.auto:  # s5trust-auto: score_model's columns (no formula)
            out[f"models[{i}]"] = [cfg.data.speaker, *m.factors, *m.covariates]
            continue
        cols = list(_parse(m.formula, f"models[{i}].formula", cfg.source).columns)
        if m.dispersion and "|" in m.dispersion:  # s6bayes-check: never a failure at fit time
            raise StudyConfigError(f"models[{i}].dispersion", f"random effects in a dispersion formula "
                                   f"({m.dispersion!r}) are not available in a study model; use a model with "
                                   "auto = true (score_model's location-scale specification, speaker log-SD "
                                   "effects per class) or scoremix.bayes_locscale in the API", cfg.source)
        if m.dispersion:
            # a one-sided formula: parse it with a placeholder response
            disp = _parse(f"dispersion_response {m.dispersion}", f"models[{i}].dispersion", cfg.source)
            cols += [c for c in disp.columns if c != "dispersion_response" and c not in cols]
        out[f"models[{i}]"] = cols
    return out


def check_formulas(cfg: StudyConfig) -> None:
    """Parse every model formula; raises :class:`StudyConfigError` at the first bad one."""
    model_columns(cfg)


def _need(have: set[str], cols: list[str], key: str, source: Any, what: str = "column") -> None:
    missing = [c for c in cols if c not in have]
    if missing:
        raise StudyConfigError(key, f"{what}(s) {', '.join(map(repr, missing))} not in the trial table "
                                    f"(columns: {', '.join(sorted(have))})", source)


def check_columns(cfg: StudyConfig, data: StudyData) -> None:
    """Every column named by a model or an analysis exists in the loaded table; compare trial ids
    are unique within each compared system."""
    src = cfg.source
    table = data.table
    have = set(map(str, table.columns))
    for key, cols in model_columns(cfg).items():
        _need(have, cols, f"{key}.formula", src)
    for i, m in enumerate(cfg.models):
        _need(have, list(m.filters), f"models[{i}].filters", src, "filter column")
    an = cfg.analyses
    if an.metrics is not None:
        for cols in an.metrics.by:
            _need(have, cols, "analyses.metrics.by", src)
        _need(have, list(an.metrics.filters), "analyses.metrics.filters", src, "filter column")
    if an.model_eer is not None:
        _need(have, an.model_eer.by, "analyses.model_eer.by", src)
        _need(have, list(an.model_eer.filters), "analyses.model_eer.filters", src, "filter column")
    if an.fairness is not None:
        _need(have, an.fairness.groups, "analyses.fairness.groups", src)
        _need(have, list(an.fairness.filters), "analyses.fairness.filters", src, "filter column")
    if an.breakdown is not None:
        for cols in an.breakdown.by:
            _need(have, cols, "analyses.breakdown.by", src)
        _need(have, list(an.breakdown.filters), "analyses.breakdown.filters", src, "filter column")
    if an.nuisance is not None:
        _need(have, [an.nuisance.feature], "analyses.nuisance.feature", src)
        _need(have, list(an.nuisance.train) + list(an.nuisance.test), "analyses.nuisance", src, "filter column")
    if an.compare is not None:
        _check_compare(cfg, data)


def _check_compare(cfg: StudyConfig, data: StudyData) -> None:
    c = cfg.analyses.compare
    src = cfg.source
    have = set(map(str, data.table.columns))
    _need(have, c.groups, "analyses.compare.groups", src)
    if data.system_column is None:
        raise StudyConfigError("analyses.compare", "needs a system column ([data] system = ...)", src)
    missing = [s for s in c.systems if s not in data.systems]
    if missing:
        raise StudyConfigError("analyses.compare.systems", f"system(s) {missing} not in the data "
                                                           f"(systems: {', '.join(data.systems)})", src)
    if c.trial_id is None:
        return
    _need(have, [c.trial_id], "analyses.compare.trial_id", src)
    for system in c.systems:
        ids = data.subset(system)[c.trial_id]
        dup = ids[ids.duplicated(keep=False)]
        if len(dup):
            first = dup.iloc[0]
            rows = [int(i) for i in dup.index[dup == first][:3]]
            n = int(pd.unique(dup).size)
            raise StudyConfigError(
                "analyses.compare.trial_id",
                f"trial id {first!r} occurs {int((ids == first).sum())} times in system {system!r} "
                f"(table rows {rows}; {n} duplicated id(s) in all): a paired comparison needs one trial "
                f"per id and system", src)
