"""The study report (``report.html``), built with :mod:`scoremix.report_html`.

Sections, each present when its analysis ran: overview; data summary with reliability flags;
empirical error rates (with EER heat maps for two-way grids); one section per model (fixed
effects table and forest plot — frequentist and Bayesian side by side when both exist —,
variance components, caterpillar plots of the random effects); model vs empirical EER;
fairness (table with intervals, Fairness Index, forest plot, DET per subgroup, score
distributions, model-based measures); two-system comparison (ratio scatter); breakdowns;
nuisance LLR model; recovered vs true parameters for simulated data; how to re-fit in lme4.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scoremix import report_html as rh
from scoremix.study.figures import (MAX_CATERPILLAR_LEVELS, agg_pyplot, caterpillar_figure, forest_figure,
                                    png_of)
from scoremix.study.data import ALL_SYSTEMS
from scoremix.study.results import StudyResult, recovered_vs_true

__all__ = ["build_sections", "write_report", "levels_with_data", "recovered_vs_true", "forest_figure",
           "caterpillar_figure", "MAX_CATERPILLAR_LEVELS"]

#: Caterpillar plots show at most this many systems per model (the CSV holds all).
MAX_CATERPILLAR_SYSTEMS = 3


def _eer_scatter(me: pd.DataFrame) -> Any:
    plt = agg_pyplot()
    fig, ax = plt.subplots(figsize=(5, 5))
    for (model, by), g in me.groupby(["model", "by"], sort=False):
        ax.plot(100 * g["eer_empirical"], 100 * g["eer_model"], "o", ms=4, label=f"{model} / {by}")
    lim = [0, max(1.0, 100 * float(np.nanmax(me[["eer_model", "eer_empirical"]].to_numpy(float))) * 1.05)]
    ax.plot(lim, lim, color="grey", lw=0.7)
    ax.set_xlim(lim)
    ax.set_ylim(lim)
    ax.set_xlabel("empirical EER (%)")
    ax.set_ylabel("model EER (%)")
    ax.set_title("Model-based vs empirical EER")
    ax.legend(fontsize=6)
    return fig


def _true_eer_table(res: StudyResult) -> pd.DataFrame | None:
    sim = res.data.simulation
    if sim is None or "subgroup" not in sim.table.columns:
        return None
    from scoremix.metrics import eer

    t = res.data.table
    meth = _eer_definition(res)
    emp = f"empirical EER % ({meth})"
    rows = [{"subgroup": "all", "n_trials": len(t), "true EER %": 100 * sim.true_eer(),
             emp: 100 * float(eer(t["score"].to_numpy(float), t["y"].to_numpy(), method=meth))}]
    for g in sorted(map(str, pd.unique(t["subgroup"].astype(str)))):
        sel = (t["subgroup"].astype(str) == g).to_numpy()
        yy = t["y"].to_numpy()[sel]
        if yy.min() == yy.max() or min(yy.sum(), (1 - yy).sum()) < 20:
            continue
        rows.append({"subgroup": g, "n_trials": int(sel.sum()), "true EER %": 100 * sim.true_eer(subgroup=g),
                     emp: 100 * float(eer(t["score"].to_numpy(float)[sel], yy, method=meth))})
    tab = pd.DataFrame(rows)
    me = _concat_model_eer(res)
    if me is not None:
        for model, g in me.groupby("model", sort=False):
            look = {("all" if r["by"] == "overall" else str(r["cell"])): r["eer_model"] for _, r in g.iterrows()
                    if r["by"] in ("overall", "subgroup")}
            tab[f"model EER % ({model})"] = [100 * look.get(s, math.nan) for s in tab["subgroup"]]
    return tab


def _concat_model_eer(res: StudyResult) -> pd.DataFrame | None:
    frames = []
    for m in res.models:
        if m.get("model_eer") is not None:
            f = m["model_eer"].copy()
            f.insert(0, "system", m["system"])
            f.insert(0, "model", m["model"])
            frames.append(f)
    return pd.concat(frames, ignore_index=True) if frames else None


# ---------------------------------------------------------------------------------------
# sections
# ---------------------------------------------------------------------------------------

def _overview(res: StudyResult) -> rh.Section:
    cfg = res.config
    blocks: list[rh.Block] = []
    if cfg.study.description:
        blocks.append(rh.Paragraph(cfg.study.description))
    # file names only: the report is shared, and absolute paths say where it was made, not what it shows
    src = ("simulated (" + cfg.data.simulate.kind + ")" if cfg.data.simulate
           else ", ".join(p.name for p in cfg.data.files))
    blocks.append(rh.Paragraph(
        f"Data: {src}; {len(res.data.table)} trials after filters; systems: {', '.join(res.data.systems)}. "
        f"Score column '{cfg.data.score}' (higher = more positive; accept = score >= threshold), label "
        f"'{cfg.data.label}'. Seed {cfg.study.seed}. Analyses: {', '.join(cfg.analyses.enabled()) or 'none'}; "
        f"models: {', '.join(m.name + ' [' + m.backend + ']' for m in cfg.models) or 'none'}."))
    if res.failed:
        blocks.append(rh.Table(pd.DataFrame(res.failed).reindex(columns=["step", "system", "error"]),
                               caption="Steps that failed (the rest of the study ran)"))
    files = pd.DataFrame({"file": list(res.files), "path": [_relative(p, res.out_dir) for p in res.files.values()]})
    blocks.append(rh.Table(files, caption="Files written by this study (see manifest.json)"))
    return rh.Section("Overview", blocks)


def _relative(path: Path, folder: Path) -> str:
    """``path`` relative to the output folder (the report moves with its folder)."""
    try:
        return path.relative_to(folder).as_posix()
    except ValueError:
        return path.name


def _data_section(res: StudyResult) -> rh.Section:
    ds = res.data_summary
    blocks: list[rh.Block] = [rh.Paragraph(
        f"Trial counts per system and subgroup. A row is flagged unreliable when the coverage of 95 % "
        f"intervals measured by simulation at its number of speakers is below 0.90, when it has fewer than "
        f"{res.config.data.min_speakers} speakers or fewer than {res.config.data.min_class_trials} trials of a "
        "class (the rule of scoremix.fairness.reliability, also used by the fairness table): measures of such "
        "cells should not be ranked.")]
    if ds is not None:
        blocks.append(rh.Table(ds, caption="Data summary"))
        bad = ds[~ds["reliable"]]
        if len(bad):
            blocks.append(rh.Paragraph(f"{len(bad)} cell(s) flagged: " + "; ".join(
                f"{r.system}/{r.value} ({r.flags})" for r in bad.head(20).itertuples())))
    return rh.Section("Data summary", blocks)


def _metric_columns(tab: pd.DataFrame, cfg: Any) -> tuple[pd.DataFrame, list[str]]:
    """Metrics table with units and the EER definition in its headers: EER in %, minDCF as
    unnormalised and normalised fractions, intervals beside their values when present."""
    show = tab.copy()
    e = f"EER % ({cfg.eer_method})"
    show[e] = 100 * show["eer"]
    for end in ("lo", "hi"):
        if f"eer_{end}" in show.columns:
            show[f"{e} {end}"] = 100 * show[f"eer_{end}"]
    norm = min(cfg.c_miss * cfg.p_target, cfg.c_fa * (1 - cfg.p_target))
    unnorm = "minDCF (unnormalised)"
    if cfg.normalize:
        show["minDCF (normalised)"] = show["min_dcf"]
        show[unnorm] = show["min_dcf"] * norm
    else:
        show[unnorm] = show["min_dcf"]
        show["minDCF (normalised)"] = show["min_dcf"] / norm
    own = "minDCF (normalised)" if cfg.normalize else unnorm
    for end in ("lo", "hi"):
        if f"min_dcf_{end}" in show.columns:
            show[f"{own} {end}"] = show[f"min_dcf_{end}"]
    show = show.rename(columns={"min_dcf_threshold": "minDCF threshold"})
    act = "actDCF (normalised)" if cfg.normalize else "actDCF (unnormalised)"
    for src, dst in (("act_dcf", act), ("cllr", "Cllr (bits)")):
        for end in ("", "_lo", "_hi"):
            if f"{src}{end}" in show.columns:
                show[dst + end.replace("_", " ")] = show[f"{src}{end}"]
    want = ["system", "by", "cell", "n_trials", "n_pos", "n_neg", e, f"{e} lo", f"{e} hi", unnorm]
    want += [f"{unnorm} lo", f"{unnorm} hi", "minDCF (normalised)", "minDCF (normalised) lo",
             "minDCF (normalised) hi", "minDCF threshold", act, f"{act} lo", f"{act} hi", "Cllr (bits)",
             "Cllr (bits) lo", "Cllr (bits) hi"]
    return show, [c for c in want if c in show.columns]


def _metrics_section(res: StudyResult) -> rh.Section | None:
    if not res.metrics:
        return None
    tab = pd.concat([m["table"] for m in res.metrics.values()], ignore_index=True)
    cfg = res.config.analyses.metrics
    show, cols = _metric_columns(tab, cfg)
    iv = (f" Intervals: {100 * cfg.ci:g} % speaker-cluster bootstrap (studentised on the log scale, minima over "
          f"thresholds with their optimism corrected; the expanded percentile interval for EER definitions other "
          f"than rocch; docs/intervals.md; "
          f"{cfg.n_boot} replicates, seed "
          f"{cfg.seed}); a zero-width interval is left blank." if getattr(cfg, "n_boot", 0) else
          " No intervals (set analyses.metrics.n_boot for speaker-cluster bootstrap intervals).")
    blocks: list[rh.Block] = [
        rh.Paragraph(f"EER by the {cfg.eer_method} definition, in % (every EER header of this report names its "
                     "definition: the model comparison and the subgroup tables use the ROCCH EER, their "
                     "engines' definition); "
                     f"minDCF with p_target={cfg.p_target}, c_miss={cfg.c_miss}, c_fa={cfg.c_fa}, as a fraction, "
                     "unnormalised and normalised (divided by min(c_miss·p, c_fa·(1−p)))"
                     + ("; actDCF at the Bayes threshold of the LLRs and Cllr in bits." if getattr(cfg, "llr", False)
                        else ".") + iv
                     + (f" Rows: {cfg.filters}." if cfg.filters else "")
                     + (f" Cells of {cfg.negatives_by}: all positive trials vs the negatives of the cell."
                        if cfg.negatives_by else "")),
        rh.Table(show[show["by"] == "overall"][cols], caption="Overall, per system"),
    ]
    by_rows = show[show["by"] != "overall"]
    if len(by_rows):
        if len(by_rows) <= 400:
            blocks.append(rh.Table(by_rows[cols], caption="Per cell"))
        else:
            blocks.append(rh.Paragraph(f"{len(by_rows)} per-cell rows: see metrics.csv."))
    for m in res.metrics.values():
        for png in m.get("heatmaps", []):
            blocks.append(rh.Figure(png, caption="EER heat map over a two-way grid (blank: cell lacks a class)",
                                    alt="EER heat map"))
    return rh.Section("Empirical error rates", blocks)


def _model_sections(res: StudyResult) -> list[rh.Section]:
    out = []
    by_model: dict[str, list[dict[str, Any]]] = {}
    for m in res.models:
        by_model.setdefault(m["model"], []).append(m)
    for cfg in res.config.models:
        fits = by_model.get(cfg.name, [])
        if not fits:
            continue
        if cfg.auto:  # s5trust-auto
            from scoremix.study.auto_report import auto_model_section

            out.append(auto_model_section(res, cfg, fits))
            continue
        blocks: list[rh.Block] = [rh.Paragraph(
            f"Formula: {cfg.formula}; backend {cfg.backend}; estimated by {estimation_method(cfg)}"
            + (f"; residual variance by {cfg.dispersion}" if cfg.dispersion else "")
            + ("; transformation model: h(score) = Xβ + Zb + ε with h increasing and estimated "
               "(transform = \"monotone\"; effects on the latent scale)" if cfg.transform else "")
            + (f"; subset {cfg.filters}" if cfg.filters else "") + f"; {len(fits)} fit(s).")]
        fe_rows, series_rows, vc_rows = [], [], []
        for f in fits:
            fe = f["fixef"].copy()
            fe.insert(0, "system", f["system"])
            fe_rows.append(fe)
            if cfg.backend != "bayes":
                series_rows.append(pd.DataFrame({"series": f"{f['system']} ({cfg.backend})", "term": fe["term"],
                                                 "estimate": fe["estimate"], "lo": fe["lo95"], "hi": fe["hi95"]}))
            else:
                comp = f.get("compare")
                hdi = [c for c in fe.columns if c.startswith("hdi")]
                series_rows.append(pd.DataFrame({"series": f"{f['system']} (Bayes)", "term": fe["term"],
                                                 "estimate": fe["mean"], "lo": fe[hdi[0]], "hi": fe[hdi[1]]}))
                if comp is not None:
                    c = comp[comp["parameter"].isin(fe["term"])]
                    series_rows.append(pd.DataFrame({
                        "series": f"{f['system']} ({cfg.compare_with})", "term": c["parameter"],
                        "estimate": c["estimate"], "lo": c["estimate"] - 1.96 * c["se"],
                        "hi": c["estimate"] + 1.96 * c["se"]}))
            vc = f["varcorr"].copy()
            vc = vc.astype(object).where(vc.notna(), "")  # empty cells (var2 of a variance), not "None"
            vc.insert(0, "system", f["system"])
            vc_rows.append(vc)
        fe_all = pd.concat(fe_rows, ignore_index=True)
        blocks.append(rh.Table(fe_all, caption="Fixed effects" + (" (posterior mean, SD, 95 % HDI)"
                                                                   if cfg.backend == "bayes" else
                                                                   " (estimate, SE, Wald 95 % interval)")))
        series = pd.concat(series_rows, ignore_index=True)
        if len(series["series"].unique()) <= 12:
            blocks.append(rh.Figure(png_of(forest_figure(series, f"Fixed effects of {cfg.name}")),
                                    caption="Forest plot of the fixed effects"
                                    + (" — Bayesian (posterior mean, 95 % HDI) and frequentist (estimate ± 1.96 SE) "
                                       "side by side" if cfg.backend == "bayes" else ""), alt="forest plot"))
        for f in fits:
            if f.get("compare") is not None:
                blocks.append(rh.Table(f["compare"], caption=f"{f['system']}: Bayesian vs {cfg.compare_with} "
                                                             "(z = (posterior mean − estimate)/posterior SD)"))
        blocks.append(rh.Table(pd.concat(vc_rows, ignore_index=True), caption="Variance components"))
        r2 = [{"system": f["system"], **f["r2"]} for f in fits if f.get("r2")]
        if r2:
            blocks.append(rh.Table(pd.DataFrame(r2), caption="R² (Nakagawa–Schielzeth: marginal, conditional)"))
        for f in fits[:MAX_CATERPILLAR_SYSTEMS]:
            re_ = f.get("ranef")
            if re_ is None or not len(re_):
                continue
            for (grp, term), g in re_.groupby(["group", "term"], sort=False):
                g = levels_with_data(res, f["system"], grp, term, g)
                if len(g) < 2:
                    continue
                blocks.append(rh.Figure(png_of(caterpillar_figure(g, f"{f['system']}: {grp} — {term}")),
                                        caption=f"Caterpillar plot of the {grp} effects ({term})",
                                        alt="caterpillar plot"))
        if len(fits) > MAX_CATERPILLAR_SYSTEMS:
            blocks.append(rh.Paragraph(f"Caterpillar plots shown for the first {MAX_CATERPILLAR_SYSTEMS} systems; "
                                       "random_effects.csv holds all."))
        out.append(rh.Section(f"Model {cfg.name}", blocks))
    return out


def _auto_validation(res: StudyResult, m: dict[str, Any] | None = None) -> list[rh.Block]:  # s5trust-auto
    """The out-of-sample validation of the ``auto = true`` models (all, or ``m``'s) beside a
    model-based table."""
    if m is not None and not m.get("auto"):
        return []
    from scoremix.study.auto_report import validation_blocks

    return validation_blocks(res, model=None if m is None else m["model"], system=None if m is None else m["system"])


def estimation_method(cfg: Any) -> str:
    """How a model of the study is estimated, in words (a transformation model is fitted by
    maximum likelihood — Laplace over the random effects — whatever ``REML`` says)."""
    if cfg.backend == "bayes":
        return "posterior sampling (NUTS; posterior means and HDIs)"
    if cfg.transform:
        return "maximum likelihood (Laplace approximation over the random effects; REML does not apply to a " \
               "transformation model)"
    return "REML" if cfg.REML else "maximum likelihood (ML)"


_DUMMY = re.compile(r'^dummy\((\w+),\s*"([^"]*)"\)$')


def levels_with_data(res: StudyResult, system: str, group: str, term: str, effects: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``effects`` (one per level of ``group``) whose level has data for ``term``.

    A ``dummy(col, "v")`` term is 0 on every row of a level without ``col == v`` (the
    ``bonafide`` "attack" under ``dummy(label, "spoof")``): its conditional mode is 0 by
    construction, and plotting it suggests an effect that the data say nothing about.
    """
    m = _DUMMY.match(term)
    table = res.data.table if system == ALL_SYSTEMS else res.data.subset(system)
    if m is None or group not in table.columns or m.group(1) not in table.columns:
        return effects
    col, value = m.groups()
    rows = table[table[col].astype(str) == value]
    keep = set(rows[group].astype(str))
    return effects[effects["level"].astype(str).isin(keep)]


def _model_eer_section(res: StudyResult) -> rh.Section | None:
    me = _concat_model_eer(res)
    if me is None:
        return None
    show = me.copy()
    # every EER header names its definition: the empirical EER here is always the ROCCH EER; the model's
    # EER is that of continuous class distributions, where every definition agrees
    names = {"eer_model": "EER % (model)", "eer_model_lo": "EER % (model) lo", "eer_model_hi": "EER % (model) hi",
             "eer_model_sd": "EER % (model) sd", "eer_empirical": "EER % (rocch) empirical",
             "eer_empirical_lo": "EER % (rocch) empirical lo", "eer_empirical_hi": "EER % (rocch) empirical hi"}
    for c, new in names.items():
        if c in show.columns:
            show[new] = 100 * show.pop(c)
    show = show.rename(columns={"eer_model_interval": "model interval method"})
    show = show.drop(columns=[c for c in ("term_note",) if c in show.columns])
    blocks: list[rh.Block] = [rh.Paragraph(
        "Model-based EER: each class's score distribution is the mixture of the fitted per-trial Gaussians "
        "N(x_iβ + z_ib, σ²); for a single Gaussian per class EER = Φ(−(μ₁ − μ₀)/(σ₀ + σ₁)). Bayesian rows give "
        "the posterior mean and SD."
        + (f" Evaluated on the rows {res.config.analyses.model_eer.filters} (the models are fitted to all "
           "their rows)." if res.config.analyses.model_eer is not None and res.config.analyses.model_eer.filters
           else "")), rh.Table(show, caption="Model vs empirical EER in % with 95 % intervals (empirical: ROCCH EER, "
                                               "speaker bootstrap; model: the method in eer_model_interval — "
                                               "'parametric': refits to data simulated from the model with new "
                                               "speakers, 'speakers': its per-trial Gaussians re-weighted by "
                                               "resampled speakers; see docs/intervals.md)")]
    blocks += goodness_of_fit_notes(me)
    blocks += _auto_validation(res)  # s5trust-auto
    if "eer_empirical" in me.columns and me["eer_empirical"].notna().any():
        blocks.append(rh.Figure(png_of(_eer_scatter(me.dropna(subset=["eer_empirical"]))),
                                caption="Model vs empirical EER (diagonal: equal)", alt="EER scatter"))
    return rh.Section("Model-based vs empirical EER", blocks)


_FAIR_COLS = ["system", "subgroup", "n_speakers", "n_pos", "n_neg", "dcf_at_overall", "min_dcf", "ratio_overall",
              "ratio_overall_lo", "ratio_overall_hi", "ratio_own", "ratio_own_lo", "ratio_own_hi", "fpr_ratio",
              "fnr_ratio", "EER % (rocch)", "EER % (rocch) lo", "EER % (rocch) hi", "reliable", "note"]


def _eer_definition(res: StudyResult) -> str:
    """The report's one EER definition: the metrics analysis's method (rocch without one)."""
    m = res.config.analyses.metrics
    return m.eer_method if m is not None else "rocch"


def _fair_eer_percent(tab: pd.DataFrame, definition: str) -> pd.DataFrame:
    """Subgroup EERs (always ROCCH in the fairness engine) in % under a header naming the
    definition; dropped when the report's EER definition is another one."""
    tab = tab.copy()
    if definition == "rocch":
        for src, dst in (("eer", "EER % (rocch)"), ("eer_lo", "EER % (rocch) lo"), ("eer_hi", "EER % (rocch) hi")):
            if src in tab.columns:
                tab[dst] = 100 * tab[src]
    return tab


def _reliability_sentence() -> str:
    from scoremix.fairness.reliability import MIN_COVERAGE, MIN_ERRORS

    return (f"A row is reliable when the coverage of 95 % intervals measured by simulation at its number of "
            f"speakers is at least {MIN_COVERAGE:.2f} and it has at least {MIN_ERRORS} errors at τ* "
            "(the same rule as the data summary; the note says which condition failed).")


def goodness_of_fit_notes(tab: pd.DataFrame) -> list[rh.Block]:
    """Paragraphs beside a model-based table: rows whose model value disagrees with the
    empirical one beyond sampling error (``fit_ok`` False; rule of
    :mod:`scoremix.predictive.gof`) and notes on subgroup columns without a model term."""
    out: list[rh.Block] = []
    if "fit_ok" in tab.columns and (~tab["fit_ok"].astype(bool)).any():
        bad = tab[~tab["fit_ok"].astype(bool)]
        ids = [c for c in ("model", "system", "by", "cell", "subgroup") if c in bad.columns]
        names = ["/".join(str(r[c]) for c in ids) for _, r in bad.head(8).iterrows()]
        gauss = "transform" in bad.columns and (bad["transform"] == "none").any()
        out.append(rh.Paragraph(
            f"Warning (ModelFitWarning): in {len(bad)} of {len(tab)} rows the model-based value lies outside the "
            f"sampling error of the empirical one ({', '.join(names)}{', …' if len(bad) > 8 else ''}). "
            + ("The Gaussian model does not fit the tails of these score distributions: fit the model with "
               "transform = \"monotone\" (a transformation mixed model)." if gauss else
               "The model lacks a term that these rows need (a class-specific effect of the breakdown column, or a "
               "random term for its levels).")))
    if "term_note" in tab.columns:
        for note in sorted({n for n in tab["term_note"].dropna().astype(str) if n}):
            out.append(rh.Paragraph(f"Note: {note}."))
    return out


def det_overlay_section(res: StudyResult) -> rh.Section | None:
    """Model-implied (dashed) vs empirical DET curves per model and system."""
    figs = [m for m in res.models if m.get("det_png")]
    if not figs:
        return None
    blocks: list[rh.Block] = [rh.Paragraph(
        "Model-implied DET curves (dashed: the mixture over trials of the fitted per-trial distributions, on the "
        "model's latent scale for transform = \"monotone\") against the empirical DET curve (solid). Where they "
        "part, the model's error rates at those operating points are not to be trusted.")]
    for m in figs:
        blocks.append(rh.Figure(m["det_png"], caption=f"{m['model']} ({m.get('transform', 'none')} transform) on "
                                                     f"{m['system']}: model vs empirical DET", alt="DET overlay"))
        blocks += _auto_validation(res, m)  # s5trust-auto
    return rh.Section("Model vs empirical DET curves", blocks)


def _fairness_section(res: StudyResult) -> rh.Section | None:
    if not res.fairness:
        return None
    cfg = res.config.analyses.fairness
    summ = pd.DataFrame([f["summary"] for f in res.fairness.values()])
    blocks: list[rh.Block] = [
        rh.Paragraph(
            f"SVEva Fair measures by {' × '.join(cfg.groups)}: C_det(τ) = c_miss·p·P_miss(τ) + c_fa·(1−p)·P_fa(τ) "
            f"with p = {cfg.p_target}; τ* = the overall minimiser; ratio_overall = C_det^g(τ*)/C_det(τ*) (> 1: "
            f"worse off); ratio_own = minDCF^g / C_det^g(τ*) (< 1: an own threshold helps); Fairness Index = sum "
            f"of ratio_overall over subgroups above 1, shown with the number of subgroups it sums over and the "
            f"share of subgroups whose ratio interval lies above 1. Intervals: {cfg.n_boot} speaker-cluster "
            f"bootstrap replicates, {100 * cfg.ci:g} % {cfg.interval} intervals ("
            + ("log-scale speaker-studentised, threshold re-chosen in every replicate"
               if cfg.interval == "studentized" else "percentile levels expanded with Student's t for few speakers, "
               "bias-shifted for minDCF")
            + "; see docs/intervals.md; none when n_boot = 0); a zero-width interval is left blank and "
            f"its row flagged. " + _reliability_sentence() + " Costs and rates are fractions; "
            + ("EER is left out here: this report's EER definition is " + _eer_definition(res) + "."
               if _eer_definition(res) != "rocch" else "EER % (rocch) is the ROC-convex-hull EER in %.")
            + (f" Rows: {cfg.filters} (model-based measures are evaluated on the same rows)." if cfg.filters
               else "")),
        rh.Table(summ, caption="Overall minDCF, τ* and Fairness Index (with interval) per system"),
    ]
    for system, f in res.fairness.items():
        tab = _fair_eer_percent(f["table"], _eer_definition(res))
        blocks.append(rh.Table(tab[[c for c in _FAIR_COLS if c in tab.columns]],
                               caption=f"{system}: subgroup measures"))
        for key, cap in (("forest_png", "ratio_overall with intervals"), ("det_png", "DET per subgroup"),
                         ("scores_png", "score distributions per subgroup and class")):
            if f.get(key):
                blocks.append(rh.Figure(f[key], caption=f"{system}: {cap}", alt=f"{system} {key[:-4]}"))
    fm = [m for m in res.models if m.get("fairness") is not None]
    for m in fm:
        t = m["fairness"]
        cols = [c for c in ["source", "subgroup", "n_pos", "n_neg", "dcf_at_overall", "min_dcf", "ratio_overall",
                            "ratio_overall_lo", "ratio_overall_hi", "ratio_own", "eer", "eer_lo", "eer_hi",
                            "p_ratio_overall_gt_1"] if c in t.columns]
        cols += [c for c in t.columns if c.endswith("_empirical") or c.endswith("_empirical_lo")
                 or c.endswith("_empirical_hi") or c == "fit_ok"]
        blocks.append(rh.Table(t[cols], caption=f"Model-based measures from {m['model']} ({m['system']}); "
                                                f"Fairness Index {t.attrs.get('fairness_index', float('nan')):.4g}; "
                                                "empirical values with speaker-bootstrap intervals beside them"))
        blocks += goodness_of_fit_notes(t.assign(model=m["model"], system=m["system"]))
        blocks += _auto_validation(res, m)  # s5trust-auto
        if m.get("det_by_png"):
            blocks.append(rh.Figure(m["det_by_png"], caption=f"{m['model']} on {m['system']}: model (dashed) vs "
                                                             "empirical DET per subgroup", alt="subgroup DET overlay"))
    blocks += _fairness_panel_blocks(res)  # s5deteval
    return rh.Section("Subgroup fairness", blocks)


def _iv_text(v: Any, lo: Any, hi: Any) -> str:
    """``v [lo, hi]`` (4 significant digits; the value alone without an interval)."""
    f = rh.format_interval_end
    return f"{f(v)} [{f(lo)}, {f(hi)}]" if np.isfinite(lo) or np.isfinite(hi) else f(v)


def _fairness_panel_blocks(res: StudyResult) -> list[rh.Block]:  # s5deteval
    panels = getattr(res, "fairness_panel", None) or {}
    if not panels:
        return []
    cfg = res.config.analyses.fairness
    blocks: list[rh.Block] = [rh.Paragraph(
        "Demographic-fairness panel (docs/detection-evaluation.md): rates per subgroup at thresholds set on the "
        "overall rates — the overall EER and the thresholds where the overall FPR first drops to "
        f"{', '.join(f'{x:g}' for x in cfg.panel_fpr)} (fairness over a range of operating points). For the "
        "per-subgroup FMR (negatives accepted) and FNMR (positives rejected): Max/GeoMean = max_g x_g / "
        "(Π_g x_g)^(1/G) (NIST FRTE); max/min = max_g x_g / min_g x_g; Gini A(x) = G/(G−1)·Σ_iΣ_j|x_i − x_j| / "
        "(2G²x̄); GARBE = α·A(FMR) + (1−α)·A(FNMR) (Howard et al. 2022; 0 = equitable); FDR = 1 − [α·max|ΔFMR| + "
        "(1−α)·max|ΔFNMR|] (de Freitas Pereira & Marcel 2022; 1 = fair); α = 0.5"
        + ("; calibration: per-subgroup actDCF at the Bayes threshold and Cllr, and their max − min"
           if cfg.panel_llr else "")
        + (f". Intervals: {100 * cfg.ci:g} % percentile speaker-bootstrap intervals ({cfg.n_boot} replicates, "
           "speakers resampled within subgroups, the threshold re-set on every replicate's overall rates)."
           if cfg.n_boot else ". No intervals (n_boot = 0)."))]
    for system, p in panels.items():
        if p.get("note"):
            blocks.append(rh.Paragraph(f"{system}: {p['note']}."))
        if p.get("table") is None:
            continue
        t = p["table"]
        t = t.assign(cell=[_iv_text(v, lo, hi) for v, lo, hi in zip(t["value"], t["lo"], t["hi"])])
        ops = list(dict.fromkeys(t["operating_point"]))
        wide = t.pivot(index="measure", columns="operating_point", values="cell")
        wide = wide[[o for o in ops if o in wide.columns]]
        # "EER" in a report header always names its definition; this column is a threshold, not an EER
        wide = wide.rename(columns={"overall EER": "at the overall equal-error threshold"})
        order = list(dict.fromkeys(t["measure"]))
        wide = wide.reindex(order).rename_axis(columns=None).reset_index()
        blocks.append(rh.Table(wide, caption=f"{system}: fairness panel per operating point (value [interval])"))
        g = p["groups"]
        g = g[g["operating_point"].isin(["overall EER", "calibration"])]
        meas = [c for c in ("fmr", "fnmr", "act_dcf", "cllr") if c in g.columns]
        show = g[["operating_point", "group"]].copy()
        for c in meas:
            nan = np.full(len(g), np.nan)
            lo_, hi_ = (g[f"{c}_{e}"].to_numpy(float) if f"{c}_{e}" in g.columns else nan for e in ("lo", "hi"))
            show[c] = [_iv_text(v, lo, hi) for v, lo, hi in zip(g[c], lo_, hi_)]
        show["n_speakers"] = g["n_speakers"].to_numpy()
        blocks.append(rh.Table(show, caption=f"{system}: per-subgroup rates at the overall EER threshold"
                                             + (" and calibration (actDCF, Cllr)" if cfg.panel_llr else "")))
        if p.get("sweep_png"):
            blocks.append(rh.Figure(p["sweep_png"], caption=f"{system}: panel measures over the overall-FPR operating "
                                                            "points (band: interval; square: overall EER)",
                                    alt=f"{system} fairness sweep"))
        if p.get("ape_png"):
            blocks.append(rh.Figure(p["ape_png"], caption=f"{system}: Bayes error rate per subgroup (solid: actual "
                                                          "LLRs, dashed: PAV minimum; the gap is the calibration loss)",
                                    alt=f"{system} per-group APE"))
    return blocks


def _compare_section(res: StudyResult) -> rh.Section | None:
    c = res.compare
    if c is None:
        return None
    fi = pd.DataFrame([{"system": k, **v} for k, v in c["fairness_index"].items()])
    blocks: list[rh.Block] = [
        rh.Paragraph(f"Paired comparison of {c['systems'][0]} and {c['systems'][1]} on the same trials: the "
                     "bootstrap draws the same speakers for both systems, so the interval of a difference "
                     "accounts for their correlation."),
        rh.Table(fi, caption="Fairness Index per system and the difference (second − first)"),
        rh.Table(c["table"], caption="Per-subgroup measures and differences"),
    ]
    if c.get("scatter_png"):
        blocks.append(rh.Figure(c["scatter_png"], caption="ratio_overall of the two systems (diagonal: equal)",
                                alt="ratio scatter"))
    return rh.Section("Two-system comparison", blocks)


def _systems_section(res: StudyResult) -> rh.Section | None:  # s4deteval
    df = getattr(res, "systems", None)
    if df is None or not len(df):
        return None
    n_pairs = int(df.groupby("metric").size().iloc[0])
    sc = getattr(res.config.analyses, "systems", None)
    adjust = getattr(sc, "adjust", "holm")
    level = getattr(sc, "ci", 0.95)
    n_sig = int((df["p_adjusted"] < 1 - level).sum())
    n_raw = int((df["p_value"] < 1 - level).sum())
    text = (f"Every pair of systems on the same trials ({n_pairs} pairs per metric): difference a − b and ratio "
            "with paired speaker-bootstrap intervals (DeLong for AUC). Multiplicity: p_adjusted is "
            f"{adjust}-adjusted within each metric over its {n_pairs} pairs (family-wise error rate "
            f"{1 - level:g}); {n_sig} of {len(df)} comparisons differ at p_adjusted < {1 - level:g} "
            f"({n_raw} at the unadjusted p). The intervals are per comparison (not simultaneous).")
    return rh.Section("Pairwise system comparison", [rh.Paragraph(text),
                                                     rh.Table(df.drop(columns=["ratio_lo", "ratio_hi"]),
                                                              caption="all pairs of systems")])


#: tandem metrics of the report, with their display names (s5deteval)
TANDEM_DISPLAY = {"min_tdcf_2019": "min t-DCF (2019)", "min_tdcf_2021": "min t-DCF (2021)", "teer": "t-EER",
                  "min_adcf": "min a-DCF", "sasv_eer": "SASV-EER", "sv_eer": "SV-EER", "spf_eer": "SPF-EER"}


def _tandem_section(res: StudyResult) -> rh.Section | None:  # s5deteval
    df = getattr(res, "tandem", None)
    if df is None or not len(df):
        return None
    cfg = res.config.analyses.tandem
    show = pd.DataFrame({"system": df["system"]})
    if "group" in df.columns:
        show["group"] = df["group"]
    for k, name in TANDEM_DISPLAY.items():
        if f"{k}_lo" in df.columns:
            show[name] = [f"{v:.4f} [{lo:.4f}, {hi:.4f}]" for v, lo, hi in zip(df[k], df[f"{k}_lo"], df[f"{k}_hi"])]
        else:
            show[name] = [f"{v:.4f}" for v in df[k]]
    show["ASV threshold"] = df["asv_threshold"]
    iv = (f"{cfg.ci:.0%} speaker-bootstrap intervals ({cfg.n_boot} replicates; CM trials by speaker, ASV trials "
          f"by {cfg.asv_speaker})" if cfg.n_boot else "no intervals (n_boot = 0)")
    text = (f"The CM systems in tandem with the ASV scores of {cfg.asv_file.name}, joined on {cfg.join!r}. "
            "min t-DCF: normalised minimum tandem detection cost with the ASV threshold at its EER as the "
            "official ASVspoof 2019 script places it (2019 cost model, Kinnunen et al. 2018; 2021 revision, "
            "Kinnunen et al. 2020); t-EER: the tandem EER (Kinnunen et al. 2023); min a-DCF: the "
            "architecture-agnostic DCF of the cascade score (Shim et al. 2024, ASVspoof 5 costs); SASV-EER, "
            "SV-EER, SPF-EER: EERs of the cascade score for targets against all, nontarget and spoof trials "
            f"(SASV 2022). Values with {iv}. Lower is better for all.")
    blocks: list[rh.Block] = [rh.Paragraph(text), rh.Table(show, caption="tandem metrics per CM system")]
    if cfg.n_boot and "min_tdcf_2019_lo" in df.columns:
        from scoremix.study.figures import forest_figure, png_of

        fe = pd.DataFrame({"series": df["group"].astype(str) if "group" in df.columns else "all",
                           "term": df["system"].astype(str), "estimate": df["min_tdcf_2019"],
                           "lo": df["min_tdcf_2019_lo"], "hi": df["min_tdcf_2019_hi"]})
        png = png_of(forest_figure(fe, "min t-DCF (2019) per CM system", ref=0.0,
                                   xlabel=f"min t-DCF ({cfg.ci:.0%} interval)"))
        blocks.append(rh.Figure(png, caption="min t-DCF (2019 cost model) per CM system with its interval",
                                alt="tandem forest plot"))
    return rh.Section("Tandem ASV + CM evaluation", blocks)


def _simple_section(title: str, df: pd.DataFrame | None, text: str) -> rh.Section | None:
    if df is None or not len(df):
        return None
    return rh.Section(title, [rh.Paragraph(text), rh.Table(df)])


def _truth_section(res: StudyResult) -> rh.Section | None:
    if res.recovered is None and res.data.simulation is None:
        return None
    sim_table = res.data.simulation.table
    few = ""
    if "attack" in sim_table.columns:  # countermeasure data: attacks are the grouping factor with few levels
        n_attacks = int(sim_table.loc[sim_table["y"] == 0, "attack"].nunique())
        few = f" ({n_attacks} attacks)"
    blocks: list[rh.Block] = [rh.Paragraph(
        "The data are simulated, so the truth is known: the tables set the fitted parameters next to the values "
        f"that generated the data (model: {res.data.simulation.truth.get('formula', '')}). z = (estimate − "
        "true)/SE; |z| > 3 would point at a problem. For standard deviations, 'true' is the population value "
        "the effects were drawn from and 'realised' the SD of the effects (or residuals) actually drawn for the "
        f"levels in the data: with few levels{few} the two can differ a lot, and a fit can only recover "
        "the realised one. Subgroup shifts built into the data move the intercept and class effect of a model "
        "that does not include them.")]
    if res.recovered is not None:
        blocks.append(rh.Table(res.recovered, caption="Recovered vs true parameters"))
    te = _true_eer_table(res)
    if te is not None:
        blocks.append(rh.Table(te, caption="True EER (expected rates of the data-generating process), empirical "
                                           "EER and model EER per subgroup"))
    return rh.Section("Recovered vs true (simulation)", blocks)


def _reproduce_section(res: StudyResult) -> rh.Section:
    text = ("Every frequentist model can be re-fitted in R with lme4 (glmmTMB for dispersion models): "
            "Rscript refit_lme4.R <this folder>  → lme4_refit.json, to compare with fixed_effects.csv. "
            if "refit_lme4.R" in res.files else "")
    timing = ", ".join(f"{k} {v:.1f} s" for k, v in res.timings.items())
    return rh.Section("Reproduce", [rh.Paragraph(text + f"Timings: {timing}.")])


def build_sections(res: StudyResult) -> list[rh.Section]:
    """All report sections of a study, in order (missing analyses are skipped)."""
    secs: list[rh.Section | None] = [_overview(res), _data_section(res), _metrics_section(res)]
    secs += _model_sections(res)
    from scoremix.study.postfit import postfit_sections  # s5postfit: contrasts, model checks
    secs += postfit_sections(res)
    secs += [_model_eer_section(res), det_overlay_section(res), _fairness_section(res), _compare_section(res),
             _systems_section(res), _tandem_section(res),
             _simple_section("Breakdowns", res.breakdown,
                             "Per attribute value: shares of data and of errors (fn_share/fp_share vs the "
                             "value's class shares), precision, log-loss, EER and minDCF."),
             _simple_section("Nuisance LLR", res.nuisance,
                             "ℓ = log p(w | positive GMM) − log p(w | negative GMM); model ℓ = μ + d·y + ε with "
                             "EER_N = Φ(−d/(2σ)); 50 % means the feature carries no class information."),
             _truth_section(res), _warnings_section(res), _reproduce_section(res)]
    return [s for s in secs if s is not None]


def _warnings_section(res: StudyResult) -> rh.Section | None:
    """Every distinct warning of the run, with the system or model it came from."""
    if not res.warnings:
        return None
    tab = pd.DataFrame(res.warnings, columns=["where", "category", "message"])
    return rh.Section("Warnings", [
        rh.Paragraph("Each distinct warning raised while the study ran (in this process or a worker), once, with "
                     "the model, analysis and system it came from (also in warnings.json)."),
        rh.Table(tab)])


def write_report(res: StudyResult, path: str | Path) -> Path:
    """Write the self-contained ``report.html`` of a study."""
    cfg = res.config
    sections = build_sections(res)
    res.section_titles = [s.title for s in sections]
    return rh.write_html(path, cfg.study.title, sections,
                         subtitle=f"scoremix study '{cfg.study.name}' — {len(res.data.table)} trials, "
                                  f"systems: {', '.join(res.data.systems)}")
