"""``scoremix demo``: simulate a detector with known truth, evaluate it, write a report.

:func:`run_demo` simulates countermeasure-style trials (:func:`scoremix.simulate.simulate_trials`,
with two subgroups given a known disadvantage), writes ``trials.csv`` and ``truth.json``, then
runs the report *sections* in :data:`SECTIONS` in order.  Each section is a callable
``section(ctx: DemoContext) -> report_html.Section | None``: it reads the simulation from
``ctx``, may add JSON-serialisable results to ``ctx.metrics`` (written to
``metrics.json``) and returns the part of ``report.html`` it wants shown.  New sections
(e.g. a mixed-model fit with recovered vs true parameters) are added by appending a
callable to :data:`SECTIONS` or passing ``sections=`` to :func:`run_demo`.

Empirical measures (accept = score >= threshold):
:math:`P_{miss}(\\tau) = \\#\\{pos: s < \\tau\\}/N_{pos}`,
:math:`P_{fa}(\\tau) = \\#\\{neg: s \\ge \\tau\\}/N_{neg}`, EER where they cross (ROC convex
hull), :math:`\\mathrm{minDCF} = \\min_\\tau c_{miss} p_t P_{miss}(\\tau) + c_{fa}(1-p_t)P_{fa}(\\tau)`.
The "true" values are the same measures of the expected rates of the data-generating process
given the realised random effects (:meth:`scoremix.simulate.Simulation.true_rates`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scoremix import report_html as rh
from scoremix.simulate import Simulation, simulate_trials

__all__ = [
    "DemoContext", "SectionFn", "SECTIONS", "DEMO_SUBGROUP_SHIFT", "DEMO_P_TARGET",
    "run_demo", "to_jsonable",
    "section_data", "section_overall", "section_det", "section_histogram", "section_subgroups",
]

#: Known subgroup effects built into the demo data: ``(spoof shift, bona fide shift)``.
#: ``india_f`` bona fide scores are lowered (more misses), ``uk_f`` spoof scores raised
#: (more false acceptances).
DEMO_SUBGROUP_SHIFT: dict[str, tuple[float, float]] = {"india_f": (0.0, -1.0), "uk_f": (0.75, 0.0)}

#: Detection-cost parameters of the demo (prior of the positive class, unit costs).
DEMO_P_TARGET: float = 0.05
DEMO_C_MISS: float = 1.0
DEMO_C_FA: float = 1.0

#: Subgroups with fewer trials of either class than this get NaN measures in the table.
MIN_CLASS_TRIALS: int = 20


@dataclass
class DemoContext:
    """State shared by the demo sections.

    Attributes
    ----------
    out_dir: folder receiving every output.
    seed, n_trials: the demo's arguments.
    sim: the :class:`~scoremix.simulate.Simulation` (``sim.table``, ``sim.truth``).
    metrics: JSON-serialisable results; sections add keys; written to ``metrics.json``.
    files: name → path of every file written (sections may add their own).
    progress: whether long steps may show progress bars.
    messages: lines printed by the CLI after the run (sections may append).
    """

    out_dir: Path
    seed: int
    n_trials: int
    sim: Simulation
    metrics: dict[str, Any] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)
    progress: bool = True
    messages: list[str] = field(default_factory=list)

    @property
    def table(self) -> pd.DataFrame:
        return self.sim.table

    @property
    def truth(self) -> dict[str, Any]:
        return self.sim.truth


SectionFn = Callable[[DemoContext], "rh.Section | None"]


def to_jsonable(obj: Any) -> Any:
    """Convert numpy/pandas values (Series → dict, DataFrame → {row: {col: v}}) for ``json``.

    Non-finite floats become ``None`` (JSON has no NaN/inf).
    """
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, pd.Series):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, pd.DataFrame):
        return {str(i): {str(c): to_jsonable(v) for c, v in row.items()}
                for i, row in obj.to_dict(orient="index").items()}
    if isinstance(obj, np.ndarray):
        return [to_jsonable(v) for v in obj.tolist()]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return v if math.isfinite(v) else None
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj


def _metrics_module() -> Any:
    from scoremix import metrics  # late import: sibling module

    return metrics


def _empirical(scores: np.ndarray, y: np.ndarray) -> dict[str, float]:
    m = _metrics_module()
    md = m.min_dcf(scores, y, p_target=DEMO_P_TARGET, c_miss=DEMO_C_MISS, c_fa=DEMO_C_FA)
    return {
        "eer": float(m.eer(scores, y, method="rocch")),
        "min_dcf": float(md.value),
        "min_dcf_threshold": float(md.threshold),
    }


# ---------------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------------

def section_data(ctx: DemoContext) -> rh.Section:
    """The simulated design and the true parameters vs the empirical class summaries."""
    t = ctx.truth
    table = ctx.table
    params = pd.DataFrame({
        "parameter": ["mu", "d", "beta_x", "sd_speaker", "sd_attack", "sigma"],
        "meaning": ["mean spoof score", "bona fide − spoof", "slope of nuisance x",
                    "SD of speaker intercepts", "SD of attack intercepts (spoof only)",
                    "residual SD"],
        "true value": [t["mu"], t["d"], t["beta_x"], t["sd_speaker"], t["sd_attack"], t["sigma"]],
    })
    emp = table.groupby("label", observed=True)["score"].agg(["size", "mean", "std"])
    classes = pd.DataFrame({
        "class": ["spoof", "bonafide"],
        "trials": [int(emp.loc[c, "size"]) for c in ("spoof", "bonafide")],
        "true mean": [t["class_mean"][c] for c in ("spoof", "bonafide")],
        "empirical mean": [float(emp.loc[c, "mean"]) for c in ("spoof", "bonafide")],
        "true SD": [t["class_sd"][c] for c in ("spoof", "bonafide")],
        "empirical SD": [float(emp.loc[c, "std"]) for c in ("spoof", "bonafide")],
    })
    shifts = t["subgroup_shift"].reset_index()
    shifts = shifts[(shifts["spoof"] != 0) | (shifts["bonafide"] != 0)]
    ctx.metrics["class_summary"] = classes.set_index("class").to_dict(orient="index")
    return rh.Section("Simulated trials", [
        rh.Paragraph(
            f"{len(table)} countermeasure trials (seed {ctx.seed}) from "
            f"score = mu + d·y + beta_x·x + b_speaker + c_attack·(1−y) + shift_subgroup,class + ε "
            f"({t['n_speakers']} speakers, {t['n_attacks']} attacks). True class means/SDs are "
            "conditional on the realised speaker and attack effects."),
        rh.Table(params, caption="True model parameters"),
        rh.Table(classes, caption="Class score summaries: truth vs data"),
        rh.Table(shifts, caption="Known subgroup shifts built into the data"),
    ])


def section_overall(ctx: DemoContext) -> rh.Section:
    """Overall empirical EER and minDCF next to their true (expected-rate) values."""
    scores = ctx.table["score"].to_numpy()
    y = ctx.table["y"].to_numpy()
    emp = _empirical(scores, y)
    true_eer = ctx.sim.true_eer()
    true_md = ctx.sim.true_min_dcf(p_target=DEMO_P_TARGET, c_miss=DEMO_C_MISS, c_fa=DEMO_C_FA)
    overall = {**emp, "true_eer": true_eer, "true_min_dcf": true_md.value,
               "true_min_dcf_threshold": true_md.threshold,
               "p_target": DEMO_P_TARGET, "c_miss": DEMO_C_MISS, "c_fa": DEMO_C_FA,
               "n_trials": int(len(y)), "n_positive": int(y.sum()), "n_negative": int((y == 0).sum())}
    ctx.metrics["overall"] = overall
    tab = pd.DataFrame({
        "measure": ["EER (%)", f"minDCF (p_target={DEMO_P_TARGET}, unnormalised)", "minDCF threshold"],
        "empirical": [100 * emp["eer"], emp["min_dcf"], emp["min_dcf_threshold"]],
        "true": [100 * true_eer, true_md.value, true_md.threshold],
    })
    return rh.Section("Overall error rates", [
        rh.Table(tab, caption="Empirical measures (ROC-convex-hull EER; accept = score >= threshold) "
                              "vs the truth of the simulation"),
    ])


def _det_axes(ax: Any, m: Any, p_min: float = 5e-4, p_max: float = 0.7) -> None:
    ticks = m.det_axis_ticks(1e-3, 0.5)
    ax.set_xticks(ticks.positions, ticks.labels)
    ax.set_yticks(ticks.positions, ticks.labels)
    lim = (float(m.probit(p_min)), float(m.probit(p_max)))
    ax.set_xlim(*lim)
    ax.set_ylim(*lim)
    ax.set_xlabel("false acceptance rate P_fa (%)")
    ax.set_ylabel("miss rate P_miss (%)")
    ax.grid(True, alpha=0.3)


def _pp(m: Any, p: Any) -> np.ndarray:
    """Probit for plotting (0 and 1 clipped so that the end points stay drawable)."""
    return m.probit(p, eps=1e-6)


def section_det(ctx: DemoContext) -> rh.Section:
    """DET curves (probit axes): overall empirical and true, and the shifted subgroups."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = _metrics_module()
    table = ctx.table
    fig, ax = plt.subplots(figsize=(6, 6))
    det = m.det_curve(table["score"].to_numpy(), table["y"].to_numpy())
    ax.plot(_pp(m, det.p_fa), _pp(m, det.p_miss), color="k", lw=2, label="overall (empirical)")
    grid = np.linspace(float(table["score"].min()) - 1, float(table["score"].max()) + 1, 400)
    pm, pf = ctx.sim.true_rates(grid)
    ax.plot(_pp(m, pf), _pp(m, pm), color="k", ls="--", lw=1, label="overall (true)")
    overall = ctx.metrics.get("overall")
    scores, y = table["score"].to_numpy(), table["y"].to_numpy()
    groups = table["subgroup"].astype(str).to_numpy()
    if overall is not None:
        r = m.rates_at(scores, y, overall["min_dcf_threshold"])
        ax.plot(_pp(m, r.p_fa), _pp(m, r.p_miss), "ko", label="overall minDCF threshold τ*")
    for g in DEMO_SUBGROUP_SHIFT:
        sel = groups == g
        ys = y[sel]
        if ys.size == 0 or ys.min() == ys.max():
            continue
        dg = m.det_curve(scores[sel], ys)
        line, = ax.plot(_pp(m, dg.p_fa), _pp(m, dg.p_miss), lw=1.5, label=f"{g} (empirical)")
        if overall is not None:
            r = m.rates_at(scores[sel], ys, overall["min_dcf_threshold"])
            ax.plot(_pp(m, r.p_fa), _pp(m, r.p_miss), "o", color=line.get_color())
    _det_axes(ax, m)
    ax.plot(ax.get_xlim(), ax.get_ylim(), color="grey", lw=0.5)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title("DET curves")
    png = rh.figure_to_png(fig)
    plt.close(fig)
    return rh.Section("DET curve", [rh.Figure(
        png, caption="DET curves on probit axes; dashed: expected rates of the data-generating process; "
                     "diagonal: P_miss = P_fa.", alt="DET curve")])


def section_histogram(ctx: DemoContext) -> rh.Section:
    """Score histograms per class with the overall minDCF threshold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = ctx.table
    fig, ax = plt.subplots(figsize=(7, 4))
    bins = np.histogram_bin_edges(table["score"].to_numpy(), bins=80)
    for label, color in (("spoof", "tab:red"), ("bonafide", "tab:blue")):
        s = table.loc[table["label"] == label, "score"].to_numpy()
        ax.hist(s, bins=bins, density=True, alpha=0.5, color=color, label=f"{label} (n={s.size})")
    overall = ctx.metrics.get("overall")
    if overall is not None:
        ax.axvline(overall["min_dcf_threshold"], color="k", ls="--", lw=1, label="minDCF threshold τ*")
    ax.set_xlabel("score")
    ax.set_ylabel("density")
    ax.legend(fontsize=8)
    ax.set_title("Score distributions by class")
    png = rh.figure_to_png(fig)
    plt.close(fig)
    return rh.Section("Score distributions", [rh.Figure(png, caption="Normalised histograms per class.",
                                                        alt="score histogram")])


def section_subgroups(ctx: DemoContext) -> rh.Section:
    """Per-subgroup EER/minDCF (empirical and true) and the cost at the overall threshold."""
    m = _metrics_module()
    table = ctx.table
    scores = table["score"].to_numpy()
    y = table["y"].to_numpy()
    groups = table["subgroup"].astype(str).to_numpy()
    spk_per_group = ctx.sim.speakers.groupby("subgroup")["speaker"].size()
    overall = ctx.metrics.get("overall") or _empirical(scores, y)
    tau = overall["min_dcf_threshold"]
    rows = []
    names = sorted(set(groups))
    iterator: Sequence[str] = names
    if ctx.progress:
        from tqdm.auto import tqdm

        iterator = tqdm(names, desc="subgroups", leave=False)
    for g in iterator:
        sel = groups == g
        s, yy = scores[sel], y[sel]
        n_pos, n_neg = int(yy.sum()), int((yy == 0).sum())
        row: dict[str, Any] = {"subgroup": g, "speakers": int(spk_per_group.get(g, 0)),
                               "trials": int(sel.sum()), "bonafide": n_pos, "spoof": n_neg}
        if min(n_pos, n_neg) >= MIN_CLASS_TRIALS:
            emp = _empirical(s, yy)
            row.update({
                "EER %": 100 * emp["eer"],
                "true EER %": 100 * ctx.sim.true_eer(subgroup=g),
                "minDCF": emp["min_dcf"],
                "true minDCF": ctx.sim.true_min_dcf(p_target=DEMO_P_TARGET, c_miss=DEMO_C_MISS,
                                                    c_fa=DEMO_C_FA, subgroup=g).value,
                "DCF at τ*": float(m.dcf(s, yy, tau, p_target=DEMO_P_TARGET, c_miss=DEMO_C_MISS,
                                         c_fa=DEMO_C_FA)),
            })
        else:
            row.update({"EER %": np.nan, "true EER %": np.nan, "minDCF": np.nan, "true minDCF": np.nan,
                        "DCF at τ*": np.nan})
        rows.append(row)
    df = pd.DataFrame(rows)
    ctx.metrics["subgroups"] = to_jsonable(df.set_index("subgroup"))
    return rh.Section("Subgroups (nationality × sex)", [
        rh.Paragraph(f"Measures are NaN where a subgroup has fewer than {MIN_CLASS_TRIALS} trials of a "
                     "class. 'DCF at τ*' uses the overall minDCF threshold. Subgroups with known shifts: "
                     + ", ".join(f"{g} (spoof {a:+g}, bona fide {b:+g})"
                                 for g, (a, b) in DEMO_SUBGROUP_SHIFT.items()) + "."),
        rh.Table(df, caption="Per-subgroup error rates, empirical vs true"),
    ])


#: The demo's sections, run in order. Append a callable ``(ctx) -> Section | None`` to extend.
SECTIONS: list[SectionFn] = [section_data, section_overall, section_det, section_histogram, section_subgroups]


def run_demo(out_dir: str | Path, seed: int = 0, n_trials: int = 20000, progress: bool = True,
             sections: Sequence[SectionFn] | None = None) -> dict[str, Any]:
    """Simulate, evaluate and report.

    Writes ``out_dir/trials.csv`` (the simulated table), ``truth.json`` (true parameters and
    realised effects), ``metrics.json`` (what the sections computed) and ``report.html``
    (self-contained: tables and base64-embedded PNG figures).

    Parameters
    ----------
    out_dir:
        Output folder (created if needed; existing files of the same names are replaced).
    seed:
        Seed of the simulation.
    n_trials:
        Number of simulated trials (1000 speakers, 13 attacks).
    progress:
        Show tqdm progress bars.
    sections:
        Sections to run instead of :data:`SECTIONS`.

    Returns
    -------
    dict
        ``{"out_dir": Path, "files": {name: Path}, "metrics": dict, "sections": [titles],
        "messages": [str]}``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sim = simulate_trials(n_trials=n_trials, subgroup_shift=DEMO_SUBGROUP_SHIFT, seed=seed)
    ctx = DemoContext(out_dir=out, seed=seed, n_trials=n_trials, sim=sim, progress=progress)

    trials_path = out / "trials.csv"
    sim.table.to_csv(trials_path, index=False)
    ctx.files["trials"] = trials_path
    truth_path = out / "truth.json"
    truth_path.write_text(json.dumps(to_jsonable(sim.truth), indent=2), encoding="utf-8")
    ctx.files["truth"] = truth_path

    todo = list(SECTIONS if sections is None else sections)
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(todo, desc="demo sections")
    else:
        bar = todo
    report_sections: list[rh.Section] = []
    for fn in bar:
        sec = fn(ctx)
        if sec is not None:
            report_sections.append(sec)

    metrics_path = out / "metrics.json"
    metrics_path.write_text(json.dumps(to_jsonable(ctx.metrics), indent=2), encoding="utf-8")
    ctx.files["metrics"] = metrics_path
    report_path = rh.write_html(
        out / "report.html", "scoremix demo: simulated detector with known truth", report_sections,
        subtitle=f"seed {seed}, {n_trials} trials; files: trials.csv, truth.json, metrics.json",
    )
    ctx.files["report"] = report_path
    return {"out_dir": out, "files": dict(ctx.files), "metrics": ctx.metrics,
            "sections": [s.title for s in report_sections], "messages": list(ctx.messages)}
