"""Write ``refit_lme4.R``: an R script that re-fits every frequentist model of a study in lme4.

The study writes the columns the models use to ``data_for_r.csv.gz``; the script reads it,
restores every factor's level order (so that R's treatment contrasts pick the same reference
levels as scoremix), applies each model's system/filters subset and fits
``lme4::lmer(formula, REML = ...)`` — or ``glmmTMB(formula, dispformula = ...)`` for models with a
class-specific residual variance — and writes ``lme4_refit.json``:
``{"<model>__<system>": {"fixef": {...}, "se": {...}, "varcorr": [...], "sigma": s,
"loglik": l, "reml_criterion": r}}``.  Run it as ``Rscript refit_lme4.R [OUTPUT_DIR]``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from scoremix.study.config import ModelConfig

__all__ = ["formula_columns", "r_data_columns", "write_r_data", "render_refit_script", "R_DATA_FILE", "R_OUT_FILE"]

R_DATA_FILE = "data_for_r.csv.gz"
R_OUT_FILE = "lme4_refit.json"


def formula_columns(formula: str, columns: Sequence[str]) -> list[str]:
    """Columns of ``columns`` named as identifiers in ``formula`` (in table order)."""
    idents = set(re.findall(r"[A-Za-z_.][A-Za-z0-9_.]*", formula))
    return [c for c in columns if c in idents]


def r_data_columns(models: Sequence[ModelConfig], columns: Sequence[str], system: str | None) -> list[str]:
    """Every column the R script needs: formula, dispersion and filter columns and the system."""
    need: set[str] = set()
    for m in models:
        need |= set(formula_columns(m.formula, columns))
        if m.dispersion:
            need |= set(formula_columns(m.dispersion, columns))
        need |= set(m.filters)
    if system:
        need.add(system)
    return [c for c in columns if c in need]


def _r_str(v: Any) -> str:
    return json.dumps(str(v))


def _levels(series: pd.Series) -> list[str] | None:
    if isinstance(series.dtype, pd.CategoricalDtype):
        return [str(c) for c in series.cat.categories]
    if pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series):
        return None
    return sorted(map(str, pd.unique(series.dropna())))


def write_r_data(table: pd.DataFrame, columns: Sequence[str], path: str | Path) -> dict[str, list[str]]:
    """Write the R data file; returns ``{column: level order}`` of its factor columns."""
    sub = table[list(columns)]
    sub.to_csv(path, index=False, compression="gzip")
    return {c: lv for c in columns if (lv := _levels(table[c])) is not None}


def render_refit_script(study_name: str, models: Sequence[ModelConfig], systems: Sequence[str],
                        system_col: str | None, levels: dict[str, list[str]]) -> str:
    """The text of ``refit_lme4.R`` (frequentist models only; Bayesian ones are skipped)."""
    lines = [
        f"# Re-fit the frequentist models of the scoremix study {study_name!r} with lme4 (glmmTMB for",
        "# dispersion models). Written by scoremix; run:  Rscript refit_lme4.R [STUDY_OUTPUT_DIR]",
        "suppressMessages({library(lme4); library(jsonlite)})",
        "args <- commandArgs(trailingOnly = TRUE)",
        "here <- if (length(args) >= 1) args[1] else dirname(sub('^--file=', '', grep('^--file=', "
        "commandArgs(FALSE), value = TRUE)[1]))",
        f"d <- read.csv(file.path(here, {_r_str(R_DATA_FILE)}), stringsAsFactors = FALSE, check.names = FALSE)",
    ]
    for col, lv in levels.items():
        lines.append(f"d[[{_r_str(col)}]] <- factor(as.character(d[[{_r_str(col)}]]), "
                     f"levels = c({', '.join(_r_str(x) for x in lv)}))")
    lines += [
        "ctrl <- lmerControl(optCtrl = list(ftol_abs = 1e-12, xtol_abs = 1e-10))",
        "out <- list()",
        "fit_one <- function(key, formula, reml, disp, rows) {",
        "  dd <- droplevels(d[rows, , drop = FALSE])",
        "  if (is.null(disp)) {",
        "    m <- lmer(as.formula(formula), data = dd, REML = reml, control = ctrl)",
        "    vc <- as.data.frame(VarCorr(m))",
        "    crit <- if (reml) as.numeric(REMLcrit(m)) else NA",
        "    res <- list(backend = 'lme4', fixef = as.list(fixef(m)), se = as.list(sqrt(diag(as.matrix(vcov(m))))),",
        "                varcorr = vc, sigma = sigma(m), loglik = as.numeric(logLik(m)), reml_criterion = crit,",
        "                nobs = nobs(m))",
        "  } else {",
        "    suppressMessages(library(glmmTMB))",
        "    m <- glmmTMB(as.formula(formula), dispformula = as.formula(disp), data = dd, REML = reml)",
        "    fe <- fixef(m)$cond",
        "    res <- list(backend = 'glmmTMB', fixef = as.list(fe), se = as.list(sqrt(diag(vcov(m)$cond))),",
        "                sigma = sigma(m), loglik = as.numeric(logLik(m)), nobs = nobs(m))",
        "  }",
        "  cat(key, ': fitted', nrow(dd), 'rows\\n')",
        "  res",
        "}",
    ]
    for m in models:
        if m.backend == "bayes":
            continue
        for system in (systems if m.per_system else ["all"]):
            conds = []
            if m.per_system and system_col:
                conds.append(f"as.character(d[[{_r_str(system_col)}]]) == {_r_str(system)}")
            for col, vals in m.filters.items():
                conds.append(f"as.character(d[[{_r_str(col)}]]) %in% c({', '.join(_r_str(v) for v in vals)})")
            rows = " & ".join(conds) if conds else "rep(TRUE, nrow(d))"
            disp = _r_str(m.dispersion) if m.dispersion else "NULL"
            key = f"{m.name}__{system}"
            lines.append(f"out[[{_r_str(key)}]] <- fit_one({_r_str(key)}, {_r_str(m.formula)}, "
                         f"{'TRUE' if m.REML else 'FALSE'}, {disp}, {rows})")
    lines += [
        f"writeLines(toJSON(out, auto_unbox = TRUE, digits = NA, null = 'null', na = 'null'), "
        f"file.path(here, {_r_str(R_OUT_FILE)}))",
        f"cat('wrote', file.path(here, {_r_str(R_OUT_FILE)}), '\\n')",
    ]
    return "\n".join(lines) + "\n"
