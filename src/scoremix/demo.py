r"""``scoremix demo``: a complete study on simulated data with known truth.

:func:`run_demo` runs the embedded study :data:`DEMO_STUDY_TOML` through the same runner as
``scoremix study`` (:func:`scoremix.study.run_study`): countermeasure-style trials are simulated
from the crossed model

.. math::

    s_i = \mu + d\,y_i + \beta_x x_i + b_{speaker(i)} + c_{attack(i)}(1 - y_i)
          + \delta_{g(i), y_i} + \varepsilon_i

(:func:`scoremix.simulate.simulate_trials`, with two subgroups given a known disadvantage
:data:`DEMO_SUBGROUP_SHIFT`), the mixed models are fitted, model-based and empirical EERs
compared, subgroup fairness measured with speaker-bootstrap intervals, and the report shows the
recovered parameters next to the true ones.  No R and no shared data are needed.

Empirical measures (accept = score >= threshold):
:math:`P_{miss}(\tau) = \#\{pos: s < \tau\}/N_{pos}`,
:math:`P_{fa}(\tau) = \#\{neg: s \ge \tau\}/N_{neg}`, EER where they cross (ROC convex
hull), :math:`\mathrm{minDCF} = \min_\tau c_{miss} p_t P_{miss}(\tau) + c_{fa}(1-p_t)P_{fa}(\tau)`.
The "true" values are the same measures of the expected rates of the data-generating process
given the realised random effects (:meth:`scoremix.simulate.Simulation.true_rates`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scoremix.jsonable import to_jsonable

__all__ = ["DEMO_STUDY_TOML", "DEMO_SUBGROUP_SHIFT", "DEMO_P_TARGET", "demo_study", "run_demo", "to_jsonable"]

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


#: The embedded study of ``scoremix demo`` (a study TOML; ``{seed}``, ``{n_trials}``, ``{n_boot}``, ``{n_refits}``
#: filled in).
DEMO_STUDY_TOML = """
[study]
name = "scoremix-demo"
title = "scoremix demo: simulated countermeasure with known truth"
description = "Simulated countermeasure trials from a crossed mixed model with known parameters; india_f bona fide scores are lowered by 1 (more misses) and uk_f spoof scores raised by 0.75 (more false acceptances). The study fits the mixed models, compares model-based and empirical EERs, measures subgroup fairness with speaker-bootstrap intervals and sets the recovered parameters next to the truth."
seed = {seed}

[data]
speaker = "speaker"
subgroups = ["subgroup"]

[data.simulate]
kind = "cm"
n_trials = {n_trials}
subgroup_shift = {{ india_f = [0.0, -1.0], uk_f = [0.75, 0.0] }}

[[models]]
name = "crossed"
formula = 'score ~ y + x + (1 | speaker) + (0 + dummy(label, "spoof") | attack)'

[[models]]
name = "crossed_disp"
formula = 'score ~ y + x + (1 | speaker) + (0 + dummy(label, "spoof") | attack)'
dispersion = "~ label"

[analyses.metrics]
by = ["sex", ["sex", "nationality"]]

[analyses.model_eer]
models = ["crossed", "crossed_disp"]
by = ["subgroup"]
n_boot = {n_boot}
n_refits = {n_refits}

[analyses.fairness]
groups = ["subgroup"]
n_boot = {n_boot}
models = ["crossed"]

[analyses.breakdown]
by = ["sex", "nationality", ["sex", "nationality"]]

[analyses.nuisance]
feature = "x"
"""

#: Extra ``[[models]]`` entry added by ``scoremix demo --bayes`` (``draws`` draws and tuning steps, 2 chains;
#: the default 1000 passes the convergence check of :mod:`scoremix.bayes.diagnostics`).
DEMO_BAYES_TOML = """
[[models]]
name = "crossed_bayes"
formula = 'score ~ y + x + (1 | speaker) + (0 + dummy(label, "spoof") | attack)'
backend = "bayes"
draws = {draws}
tune = {draws}
chains = 2
"""


def demo_study(seed: int = 0, n_trials: int = 20000, n_boot: int = 200, bayes: bool = False,
               bayes_draws: int = 1000) -> Any:
    """The demo's :class:`~scoremix.study.config.StudyConfig` (see :data:`DEMO_STUDY_TOML`)."""
    import tomllib

    from scoremix.study.config import parse_study

    # the parametric model-EER interval refits the model: a quarter of the replicates (at least 20)
    text = DEMO_STUDY_TOML.format(seed=seed, n_trials=n_trials, n_boot=n_boot, n_refits=max(20, n_boot // 4))
    raw = tomllib.loads(text)
    if bayes:
        extra = tomllib.loads(DEMO_BAYES_TOML.format(draws=bayes_draws))["models"]
        raw["models"].extend(extra)
    return parse_study(raw, base_dir=".", source="<scoremix demo>")


def _demo_metrics(res: Any) -> dict[str, Any]:
    """The overall empirical EER/minDCF of the demo next to their true values, and per subgroup."""
    sim = res.data.simulation
    table = res.data.table
    scores, y = table["score"].to_numpy(float), table["y"].to_numpy()
    emp = _empirical(scores, y)
    true_md = sim.true_min_dcf(p_target=DEMO_P_TARGET, c_miss=DEMO_C_MISS, c_fa=DEMO_C_FA)
    metrics: dict[str, Any] = {"overall": {
        **emp, "true_eer": sim.true_eer(), "true_min_dcf": true_md.value, "true_min_dcf_threshold": true_md.threshold,
        "p_target": DEMO_P_TARGET, "c_miss": DEMO_C_MISS, "c_fa": DEMO_C_FA, "n_trials": int(len(y)),
        "n_positive": int(y.sum()), "n_negative": int((y == 0).sum())}}
    subgroups: dict[str, Any] = {}
    groups = table["subgroup"].astype(str).to_numpy()
    for g in sorted(set(groups)):
        sel = groups == g
        yy = y[sel]
        row: dict[str, Any] = {"trials": int(sel.sum()), "bonafide": int(yy.sum()), "spoof": int((yy == 0).sum())}
        if min(row["bonafide"], row["spoof"]) >= MIN_CLASS_TRIALS:
            e = _empirical(scores[sel], yy)
            row.update(eer=e["eer"], true_eer=sim.true_eer(subgroup=g), min_dcf=e["min_dcf"])
        subgroups[g] = row
    metrics["subgroups"] = subgroups
    if res.recovered is not None:
        metrics["recovered_vs_true"] = res.recovered.to_dict(orient="records")
    return metrics


def run_demo(out_dir: str | Path, seed: int = 0, n_trials: int = 20000, progress: bool = True,
             n_boot: int = 200, bayes: bool = False, bayes_draws: int = 1000, jobs: int = 1,
             dask: str | None = None, overwrite: bool = False) -> dict[str, Any]:
    """Run the demo study (:func:`demo_study`) through the study runner.

    Writes everything :func:`scoremix.study.run_study` writes (``trials.csv``, ``truth.json``,
    ``fixed_effects.csv``, ``fairness.csv``, ``recovered_vs_true.csv``, ``report.html``, …) plus
    ``metrics.json`` (listed in the manifest like every other file): the overall empirical
    EER/minDCF next to their true values (expected rates of the data-generating process), and
    per subgroup.

    Parameters
    ----------
    out_dir:
        output folder (created if needed).
    seed, n_trials:
        simulation seed and size (1000 speakers, 13 attacks).
    progress:
        progress bars and stage messages.
    n_boot:
        speaker-bootstrap replicates of the fairness table and of the empirical EER interval; a
        quarter of it (at least 20) is the number of parametric-bootstrap refits of the model EER
        interval (model-vs-empirical table; each refit costs about one fit).
    bayes, bayes_draws:
        also fit the crossed model with PyMC (``bayes_draws`` draws and tuning steps, 2 chains).
    jobs, dask:
        parallel execution of the study tasks (see :func:`scoremix.study.run_study`).
    overwrite:
        replace an existing non-empty ``out_dir`` (otherwise it is refused).

    Returns
    -------
    dict
        ``{"out_dir": Path, "files": {name: Path}, "metrics": dict, "sections": [titles],
        "messages": [str], "study": StudyResult}``.
    """
    from scoremix.study import run_study

    out = Path(out_dir)
    cfg = demo_study(seed=seed, n_trials=n_trials, n_boot=n_boot, bayes=bayes, bayes_draws=bayes_draws)
    metrics: dict[str, Any] = {}

    def demo_metrics(res: Any) -> dict[str, tuple[Any, str]]:
        metrics.update(_demo_metrics(res))
        return {"metrics.json": (metrics, "demo measures vs truth")}

    res = run_study(cfg, out_dir=out, jobs=jobs, dask=dask, progress=progress, overwrite=overwrite,
                    extra_outputs=demo_metrics)
    files = dict(res.files)
    messages = []
    rec = res.recovered
    if rec is not None:
        crossed = rec[rec["model"] == "crossed"]
        for r in crossed.itertuples():
            realised = "" if not np.isfinite(r.realised) else f"   realised {r.realised:8.4f}"
            interval = ("" if not np.isfinite(r.se) else
                        f"   (95% CI {r.estimate - 1.96 * r.se:.4f} to {r.estimate + 1.96 * r.se:.4f})")
            messages.append(f"{r.parameter:<28} true {r.true:8.4f}{realised or ' ' * 20}   "
                            f"estimated {r.estimate:8.4f}{interval}")
    return {"out_dir": out, "files": files, "metrics": metrics,
            "sections": list(res.section_titles), "messages": messages, "study": res}
