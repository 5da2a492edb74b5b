"""What a study computed: :class:`StudyResult` (filled by the runner from the task results,
read by the report), the descriptions of its output files, and the derived
recovered-vs-true table of simulated data.

Data flow of the study package: ``config → data → tasks → results → report`` (the runner
drives them; none of them imports the runner).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scoremix.study.config import StudyConfig
from scoremix.study.data import StudyData

__all__ = ["StudyResult", "FILE_DESCRIPTIONS", "recovered_vs_true"]

FILE_DESCRIPTIONS: dict[str, str] = {
    "study.json": "resolved study configuration",
    "data_summary.csv": "trials, classes and speakers per system and subgroup, with reliability flags",
    "metrics.csv": "empirical EER and minDCF per system and cell",
    "fixed_effects.csv": "fixed effects of every model fit",
    "variance_components.csv": "variance components of every model fit",
    "random_effects.csv": "conditional modes (posterior means) of the random effects",
    "model_eer.csv": "model-based vs empirical EER",
    "bayes_vs_freq.csv": "Bayesian vs frequentist estimates side by side",
    "fairness.csv": "SVEva subgroup measures with bootstrap intervals",
    "fairness_summary.json": "overall minDCF, threshold and Fairness Index per system",
    "fairness_model.csv": "model-based and posterior subgroup measures",
    "breakdown.csv": "breakdown per attribute value",
    "compare.csv": "paired two-system comparison per subgroup",
    "compare_summary.json": "Fairness Index of both systems and their difference",
    "systems_compare.csv": "all pairs of systems: metric differences and ratios, intervals, Holm-adjusted p-values",
    "fairness_panel.csv": "fairness panel per system: Max/GeoMean, max/min, Gini, GARBE, FDR (and calibration spread) "
                          "at the overall EER and over overall-FPR operating points, with intervals",
    "fairness_panel_groups.csv": "per-group FMR, FNMR (and actDCF, Cllr) at each panel operating point, with intervals",
    "tandem.csv": "CM systems in tandem with the ASV: min t-DCF (2019, 2021), t-EER, a-DCF, SASV/SV/SPF-EER with intervals",
    "nuisance.csv": "nuisance LLR two-Gaussian model",
    "recovered_vs_true.csv": "estimated vs true parameters of the simulation",
    "trials.csv": "the simulated trial table",
    "truth.json": "true parameters and realised effects of the simulation",
    "data_for_r.csv.gz": "data for the lme4 re-fit script",
    "refit_lme4.R": "R script re-fitting the frequentist models with lme4",
    "report.html": "self-contained HTML report",
    "manifest.json": "every output file with its description",
    "warnings.json": "every distinct warning of the run, with the system or model it came from",
    # s5trust-auto
    "model_selection.csv": "auto models: every candidate specification with its speaker-grouped CV log-likelihood",
    "model_selection_cells.csv": "auto models: strata fitted freely and components predicted with partial pooling",
    "validation.csv": "auto models: out-of-sample MAE of model, counting and best shrunken counting per grouping",
    "validation_groups.csv": "auto models: held-out, model and counting EER/minDCF of every validated group",
}


@dataclass
class StudyResult:
    """Everything a study computed, plus the files it wrote.

    ``failed`` lists the model fits, analyses and report steps that raised, each as
    ``{"step": "model crossed" | "analysis fairness" | "report", "system", "error"}`` (model
    fits add ``model``, ``backend``, ``nobs``); ``messages`` holds one line per failure.
    """

    config: StudyConfig
    data: StudyData
    out_dir: Path
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    models: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    fairness: dict[str, dict[str, Any]] = field(default_factory=dict)
    breakdown: pd.DataFrame | None = None
    compare: dict[str, Any] | None = None
    systems: pd.DataFrame | None = None  # s4deteval: [analyses.systems]
    tandem: pd.DataFrame | None = None  # s5deteval: [analyses.tandem]
    fairness_panel: dict[str, dict[str, Any]] = field(default_factory=dict)  # s5deteval: panel per system
    nuisance: pd.DataFrame | None = None
    data_summary: pd.DataFrame | None = None
    recovered: pd.DataFrame | None = None
    files: dict[str, Path] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    descriptions: dict[str, str] = field(default_factory=dict)
    section_titles: list[str] = field(default_factory=list)
    #: distinct warnings of the run: ``{"where", "category", "message"}`` (scoremix.study.warnlog)
    warnings: list[dict[str, str]] = field(default_factory=list)


# ---------------------------------------------------------------------------------------
# recovered vs true
# ---------------------------------------------------------------------------------------

_FIXEF_TRUTH = {"(Intercept)": "mu", "y": "d", "x": "beta_x", "same_sex": "beta_same_sex",
                "same_nationality": "beta_same_nationality"}
_GROUP_TRUTH = {"speaker": "sd_speaker", "enrol_speaker": "sd_speaker", "attack": "sd_attack"}


def _realised_sd(sim: Any, key: str, grp: str) -> float:
    r"""SD of the effects (or residuals) the simulation actually drew, over the levels in the data.

    Random-effect SDs: the sample SD (``ddof=1``) of the realised effects of the levels of
    ``grp`` present in the table (attacks: on spoof trials).  Residual SD (countermeasure
    simulations with one residual SD for both classes): the SD of the realised noise
    :math:`\varepsilon_i = s_i - E[s_i \mid \text{effects}] - \beta_{x,y_i} x_i`.  NaN where
    the truth does not determine it.
    """
    truth, table = sim.truth, sim.table
    if key in ("sd_speaker", "sd_attack"):
        eff = truth.get("speaker_effects" if key == "sd_speaker" else "attack_effects")
        if eff is None:
            return math.nan
        eff = pd.Series(eff) if not isinstance(eff, pd.Series) else eff
        eff.index = eff.index.astype(str)
        if grp in table.columns:
            rows = table if key == "sd_speaker" else table[table["y"] == 0]
            present = set(rows[grp].astype(str))
            eff = eff[eff.index.isin(present)]
        vals = eff.to_numpy(float)
        return float(np.std(vals, ddof=1)) if len(vals) > 1 else math.nan
    if (key == "sigma" and truth.get("model") == "cm" and truth.get("sigma") == truth.get("sigma_pos")
            and {"x", "y", "score"} <= set(table.columns) and getattr(sim, "cond_mean", None) is not None):
        y = table["y"].to_numpy()
        slope = np.where(y == 1, truth["beta_x_pos"], truth["beta_x_neg"])
        eps = table["score"].to_numpy(float) - np.asarray(sim.cond_mean, float) - slope * table["x"].to_numpy(float)
        return float(np.std(eps, ddof=1))
    return math.nan


def recovered_vs_true(res: StudyResult) -> pd.DataFrame | None:
    """Estimates of every model next to the simulation's true parameters.

    Fixed effects are matched by name (``(Intercept)`` ↔ ``mu``, ``y`` ↔ ``d``, ``x`` ↔
    ``beta_x``, ``same_sex``, ``same_nationality``), SDs of the random intercepts by grouping
    factor (``speaker``/``enrol_speaker`` ↔ ``sd_speaker``, ``attack`` ↔ ``sd_attack``) and the
    residual SD to ``sigma``.  Columns: ``model, backend, parameter, true, estimate, se``
    (``se`` = standard error, or posterior SD for Bayesian fits), ``realised`` (for SDs: the SD of
    the effects — or residuals — the simulation actually drew, see :func:`_realised_sd`; with 13
    attacks the realised SD can be far from the population value, and that is what a fit can
    recover) and ``z = (estimate − true)/se``.
    """
    sim = res.data.simulation
    if sim is None:
        return None
    truth = sim.truth
    rows = []
    for m in res.models:
        if m.get("auto"):  # s5trust-auto: latent-scale stratum parameters have no simulation truth
            continue
        fe = m.get("fixef")
        if fe is not None:
            est_col = "estimate" if "estimate" in fe.columns else "mean"
            se_col = "se" if "se" in fe.columns else "sd"
            for _, r in fe.iterrows():
                key = _FIXEF_TRUTH.get(str(r["term"]))
                if key is not None and truth.get(key) is not None:
                    rows.append({"model": m["model"], "backend": m["backend"], "parameter": f"{key} [{r['term']}]",
                                 "true": float(truth[key]), "estimate": float(r[est_col]), "se": float(r[se_col])})
        vc = m.get("varcorr")
        if vc is not None:
            for _, r in vc.iterrows():
                if r["grp"] == "Residual":
                    key = "sigma"
                elif (r["var2"] is None or (isinstance(r["var2"], float) and math.isnan(r["var2"]))):
                    key = _GROUP_TRUTH.get(str(r["grp"]))
                else:
                    key = None
                if key is not None and truth.get(key) is not None:
                    realised = _realised_sd(sim, key, str(r["grp"]))
                    rows.append({"model": m["model"], "backend": m["backend"],
                                 "parameter": f"{key} [SD of {r['grp']}]" if key != "sigma" else "sigma [residual SD]",
                                 "true": float(truth[key]), "estimate": float(r["sdcor"]), "se": math.nan,
                                 "realised": realised})
    if not rows:
        return None
    df = pd.DataFrame(rows)
    if "realised" not in df.columns:
        df["realised"] = math.nan
    df["z"] = (df["estimate"] - df["true"]) / df["se"]
    return df
