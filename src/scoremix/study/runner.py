"""Run a study: load the data, fit the models and run the analyses (joblib or Dask), write
one file per analysis, the lme4 re-fit script and the HTML report.

Output folder layout (every table is also described in ``manifest.json``):

===========================  =============================================================
``study.json``               the resolved configuration, scoremix version, systems
``data_summary.csv``         per system × subgroup: trials, classes, speakers, reliability flag
``metrics.csv``              empirical EER/minDCF per system (and per ``by`` cell)
``fixed_effects.csv``        model, system, backend, term, estimate, se, lo95, hi95
                             (Bayesian: mean, sd, HDI)
``variance_components.csv``  model, system, grp, var1, var2, vcov, sdcor
``random_effects.csv``       model, system, group, term, level, estimate, condsd
``model_eer.csv``            model, system, by, cell, n_neg, n_pos, eer_model, eer_empirical
``models/<m>__<sys>.json``   ``LmerResult.to_dict()`` (schema ``scoremix.lmer/1``)
``models/<m>__<sys>.nc``     posterior draws of a Bayesian model (netCDF, ArviZ)
``bayes_vs_freq.csv``        side-by-side estimates of Bayesian and frequentist fits
``fairness.csv``             SVEva table per system with bootstrap intervals
``fairness_summary.json``    overall minDCF, τ*, Fairness Index (+ interval) per system
``fairness_model.csv``       model-based / posterior subgroup measures
``breakdown.csv``            per attribute value breakdown
``compare.csv``              paired two-system comparison; ``compare_summary.json``
``nuisance.csv``             nuisance LLR model per system
``emmeans.csv``              ``[analyses.contrasts]``: marginal means; ``contrasts.csv``
``model_checks.csv``         model checks of every fit (study.postfit)
``model_selection*.csv``     ``auto = true`` models: candidates tried/chosen, cells fitted freely
``validation*.csv``          ``auto = true`` models: out-of-sample model vs counting vs shrinkage
``recovered_vs_true.csv``    simulated data only: estimates next to the truth
``trials.csv, truth.json``   simulated data only: the table and the true parameters
``data_for_r.csv.gz``        the columns the R script needs; ``refit_lme4.R``
``report.html``              self-contained report (images embedded)
===========================  =============================================================
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from scoremix.jsonable import to_jsonable
from scoremix.metrics import ScoreDirectionWarning, auc
from scoremix.study import tasks as T
from scoremix.study.config import StudyConfig, load_study
from scoremix.study.data import ALL_SYSTEMS, StudyData, apply_filters, load_study_data
from scoremix.study.outdir import check_output_dir, discard, list_files, publish, staging_dir
from scoremix.study.parallel import Task, TaskFailure, boot_chunks, chunk_seeds, run_tasks, task_seed
from scoremix.study.results import FILE_DESCRIPTIONS, StudyResult, recovered_vs_true
from scoremix.study.validate import check_columns, check_formulas
from scoremix.study.warnlog import StudyWarning, emit, recording, summarise

__all__ = ["StudyResult", "run_study", "FILE_DESCRIPTIONS"]

def _data_summary(cfg: StudyConfig, data: StudyData) -> pd.DataFrame:
    from scoremix.fairness.reliability import flag_rows

    d = cfg.data
    rows = []
    groupings: list[list[str]] = [[]] + [[g] for g in d.subgroups]
    if len(d.subgroups) > 1:
        groupings.append(list(d.subgroups))
    for system in data.systems:
        df = data.subset(system)
        for cols in groupings:
            parts = [((), df)] if not cols else df.groupby(cols, observed=True, sort=True)
            for key, g in parts:
                key = key if isinstance(key, tuple) else (key,)
                n_pos = int(g["y"].sum())
                n_neg = int(len(g) - n_pos)
                n_spk = int(g[d.speaker].nunique()) if d.speaker in g.columns else np.nan
                # the one reliability rule of every subgroup table (scoremix.fairness.reliability);
                # no speaker column: speakers are unknown, so only the class counts are checked
                ok, note = flag_rows(np.array([n_spk if d.speaker in g.columns else 10 ** 9]), None,
                                     np.array([n_pos]), np.array([n_neg]), min_speakers=d.min_speakers,
                                     min_class_trials=d.min_class_trials)
                rows.append({"system": system, "attribute": "×".join(cols) or "all",
                             "value": "×".join(map(str, key)) or "all", "n_trials": int(len(g)), "n_pos": n_pos,
                             "n_neg": n_neg, "n_speakers": n_spk, "reliable": bool(ok[0]), "flags": note[0]})
    return pd.DataFrame(rows)


def _build_tasks(cfg: StudyConfig, data: StudyData) -> list[Task]:
    seed = cfg.study.seed
    an = cfg.analyses
    speaker = cfg.data.speaker
    out: list[Task] = []
    def rows(df: pd.DataFrame, filters: Mapping[str, Any], name: str) -> pd.DataFrame:
        return apply_filters(df, filters, f"analyses.{name}.filters").reset_index(drop=True) if filters else df

    for system in data.systems:
        df = data.subset(system)
        if an.metrics is not None:
            out.append(Task(f"metrics/{system}", T.metrics_task, (system, rows(df, an.metrics.filters, "metrics"),
                                                                 an.metrics)))
        if an.fairness is not None:
            k = f"fairness/{system}"
            fdf = rows(df, an.fairness.filters, "fairness")
            counts = boot_chunks(an.fairness.n_boot, an.fairness.boot_chunk)
            if len(counts) <= 1:
                out.append(Task(k, T.fairness_task, (system, fdf, an.fairness, speaker, task_seed(seed, k),
                                                     cfg.data.min_speakers)))
            else:
                out.append(Task(k, T.fairness_point_task, (system, fdf, an.fairness, speaker, cfg.data.min_speakers)))
                for j, (sd, n) in enumerate(zip(chunk_seeds(seed, k, len(counts)), counts)):
                    out.append(Task(f"{BOOT_PREFIX}{k}/{j}", T.fairness_boot_task, (fdf, an.fairness, speaker, sd, n)))
            if an.fairness.panel and an.fairness.test_speaker is None and an.fairness.membership == "enrol":
                k = f"fairness_panel/{system}"  # s5deteval
                out.append(Task(k, T.fairness_panel_task, (system, fdf, an.fairness, speaker, task_seed(seed, k),
                                                           cfg.data.min_speakers)))
        if an.breakdown is not None:
            k = f"breakdown/{system}"
            sp = speaker if speaker in df.columns else None
            out.append(Task(k, T.breakdown_task, (system, rows(df, an.breakdown.filters, "breakdown"), an.breakdown,
                                                  sp, task_seed(seed, k))))
        if an.nuisance is not None:
            k = f"nuisance/{system}"
            out.append(Task(k, T.nuisance_task, (system, df, an.nuisance, task_seed(seed, k))))
    for m in cfg.models:
        for system in (data.systems if m.per_system else [ALL_SYSTEMS]):
            df = data.subset(system) if m.per_system else data.table
            if m.filters:
                df = apply_filters(df, m.filters, f"models[{m.name}].filters").reset_index(drop=True)
            k = f"model/{m.name}/{system}"
            meer = an.model_eer if (an.model_eer is not None and (m.name in an.model_eer.models
                                                                  or m.backend == "bayes")) else None
            out.append(Task(k, T.model_task, (m, system, df, task_seed(seed, k), meer, an.fairness, speaker,
                                              (an.contrasts, an.checks))))  # s5postfit
    if an.compare is not None:
        k = "compare"
        cargs = (data.table, cfg.data.system, an.compare, speaker, an.fairness)
        counts = boot_chunks(an.compare.n_boot, an.compare.boot_chunk)
        if len(counts) <= 1:
            out.append(Task(k, T.compare_task, (*cargs, task_seed(seed, k))))
        else:
            out.append(Task(k, T.compare_point_task, cargs))
            for j, (sd, n) in enumerate(zip(chunk_seeds(seed, k, len(counts)), counts)):
                out.append(Task(f"{BOOT_PREFIX}{k}/{j}", T.compare_boot_task, (*cargs, sd, n)))
    if an.systems is not None:  # s4deteval
        k = "systems"
        out.append(Task(k, T.systems_task, (data.table, cfg.data.system, an.systems, speaker, task_seed(seed, k))))
    if an.tandem is not None:  # s5deteval
        k = "tandem"
        out.append(Task(k, T.tandem_task, (data.table, cfg.data.system, an.tandem, speaker, task_seed(seed, k))))
    return out


#: key prefix of bootstrap-chunk tasks: ``boot:<task key>/<chunk index>``
BOOT_PREFIX = "boot:"


def _combine_chunks(tasks: list[Task], results: list[Any]) -> tuple[list[Task], list[Any]]:
    """Join bootstrap-chunk results to their point task (in chunk order, whatever order the
    chunks ran in) and return the tasks and results with one combined entry per analysis."""
    chunks: dict[str, list[tuple[int, int, Any]]] = {}
    for t, r in zip(tasks, results):
        if t.key.startswith(BOOT_PREFIX):
            parent, j = t.key[len(BOOT_PREFIX):].rsplit("/", 1)
            sd = t.args[-2]
            chunks.setdefault(parent, []).append((int(j), sd, r))
    out_t, out_r = [], []
    for t, r in zip(tasks, results):
        if t.key.startswith(BOOT_PREFIX):
            continue
        if t.key in chunks and not isinstance(r, TaskFailure):
            parts = sorted(chunks[t.key], key=lambda c: c[0])
            reps, seeds = [p[2] for p in parts], [p[1] for p in parts]
            failed = [x for x in reps if isinstance(x, TaskFailure)]
            if failed:
                r = TaskFailure(t.key, f"bootstrap chunk failed: {failed[0].error}")
            elif t.fn is T.fairness_point_task:
                r = T.fairness_combine(t.args[0], r, reps, t.args[2], seeds)
            elif t.fn is T.compare_point_task:
                r = T.compare_combine(r, reps, t.args[2])
            else:  # pragma: no cover - only the two analyses above are chunked
                raise RuntimeError(f"bootstrap chunks for task {t.key!r} that cannot combine them")
        out_t.append(t)
        out_r.append(r)
    return out_t, out_r


def _write_csv(res: StudyResult, name: str, df: pd.DataFrame | None) -> None:
    if df is None or len(df) == 0:
        return
    path = res.out_dir / name
    df.to_csv(path, index=False)
    res.files[name] = path


def _write_json(res: StudyResult, name: str, obj: Any) -> None:
    path = res.out_dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_jsonable(obj), indent=2), encoding="utf-8")
    res.files[name] = path


def _concat(frames: Sequence[pd.DataFrame | None]) -> pd.DataFrame | None:
    frames = [f for f in frames if f is not None and len(f)]
    return pd.concat(frames, ignore_index=True) if frames else None


def _with(df: pd.DataFrame | None, **cols: Any) -> pd.DataFrame | None:
    if df is None:
        return None
    df = df.copy()
    for i, (k, v) in enumerate(cols.items()):
        df.insert(i, k, v)
    return df


def _failure(res: StudyResult, step: str, system: str | None, error: str, **extra: Any) -> None:
    """Record a failed model, analysis or report step (one line each on stderr; exit status 1)."""
    where = f"{step} on {system}" if system and system != ALL_SYSTEMS else step
    res.failed.append({"step": step, "system": system, "error": error, **extra})
    res.messages.append(f"{where} failed: {error}")


def _collect(res: StudyResult, tasks: list[Task], results: list[Any]) -> None:
    for t, r in zip(tasks, results):
        kind = t.key.split("/")[0]
        if isinstance(r, TaskFailure):
            parts = t.key.split("/")
            if kind == "model":
                m = t.args[0]
                _failure(res, f"model {m.name}", t.args[1], r.error, model=m.name, backend=m.backend,
                         nobs=int(len(t.args[2])))
            else:
                _failure(res, f"analysis {kind}", parts[1] if len(parts) > 1 else None, r.error)
        elif kind == "metrics":
            res.metrics[t.args[0]] = r
        elif kind == "fairness":
            res.fairness[t.args[0]] = r
        elif kind == "breakdown":
            res.breakdown = _concat([res.breakdown, r])
        elif kind == "nuisance":
            res.nuisance = _concat([res.nuisance, r["table"]])
        elif kind == "model":
            if "error" in r:
                _failure(res, f"model {r['model']}", r["system"], r["error"], model=r["model"],
                         backend=r["backend"], nobs=r["nobs"])
            else:
                res.models.append(r)
        elif kind == "compare":
            res.compare = r
        elif kind == "systems":  # s4deteval
            res.systems = r
        elif kind == "tandem":  # s5deteval
            res.tandem = r
        elif kind == "fairness_panel":  # s5deteval
            res.fairness_panel[r["system"]] = r


def _write_outputs(res: StudyResult) -> None:
    out = res.out_dir
    _write_csv(res, "data_summary.csv", res.data_summary)
    _write_csv(res, "metrics.csv", _concat([m["table"] for m in res.metrics.values()]))
    fe, vc, re_, me, bf, fm = [], [], [], [], [], []
    (out / "models").mkdir(exist_ok=True)
    for m in res.models:
        key = f"{m['model']}__{m['system']}"
        ids = dict(model=m["model"], system=m["system"], backend=m["backend"])
        fe.append(_with(m.get("fixef"), **ids))
        vc.append(_with(m.get("varcorr"), **ids))
        re_.append(_with(m.get("ranef"), **ids))
        me.append(_with(m.get("model_eer"), **ids))
        bf.append(_with(m.get("compare"), **ids))
        fm.append(_with(m.get("fairness"), model=m["model"], system=m["system"]))
        if "json" in m:
            _write_json(res, f"models/{key}.json", m["json"])
        if "idata" in m:
            path = out / "models" / f"{key}.nc"
            m["idata"].to_netcdf(str(path))
            res.files[f"models/{key}.nc"] = path
    _write_csv(res, "fixed_effects.csv", _concat(fe))
    vcc = _concat(vc)
    _write_csv(res, "variance_components.csv", vcc)
    _write_csv(res, "random_effects.csv", _concat(re_))
    _write_csv(res, "model_eer.csv", _concat(me))
    _write_csv(res, "bayes_vs_freq.csv", _concat(bf))
    _write_csv(res, "fairness_model.csv", _concat(fm))
    if res.fairness:
        _write_csv(res, "fairness.csv", _concat([f["table"] for f in res.fairness.values()]))
        _write_json(res, "fairness_summary.json", {s: f["summary"] for s, f in res.fairness.items()})
    _write_csv(res, "breakdown.csv", res.breakdown)
    if res.compare is not None:
        _write_csv(res, "compare.csv", res.compare["table"])
        _write_json(res, "compare_summary.json", {"systems": res.compare["systems"],
                                                  "fairness_index": res.compare["fairness_index"],
                                                  "n_boot": res.compare.get("n_boot", 0),
                                                  "boot_chunks": res.compare.get("boot_chunks", 0)})
    _write_csv(res, "systems_compare.csv", res.systems)  # s4deteval
    _write_csv(res, "tandem.csv", res.tandem)  # s5deteval
    if res.fairness_panel:  # s5deteval
        _write_csv(res, "fairness_panel.csv", _concat([p.get("table") for p in res.fairness_panel.values()]))
        _write_csv(res, "fairness_panel_groups.csv", _concat([p.get("groups") for p in res.fairness_panel.values()]))
    _write_csv(res, "nuisance.csv", res.nuisance)
    from scoremix.study.postfit import write_postfit  # s5postfit
    write_postfit(res, _write_csv)
    _write_auto_outputs(res)  # s5trust-auto


def _write_auto_outputs(res: StudyResult) -> None:  # s5trust-auto
    """Tables of the ``auto = true`` models: the specification search (``model_selection.csv``,
    ``model_selection_cells.csv``) and the out-of-sample check (``validation.csv``,
    ``validation_groups.csv``)."""
    auto = [m for m in res.models if m.get("auto")]
    for key, name in (("selection", "model_selection.csv"), ("selection_cells", "model_selection_cells.csv"),
                      ("validation", "validation.csv"), ("validation_groups", "validation_groups.csv")):
        _write_csv(res, name, _concat([_with(m.get(key), model=m["model"], system=m["system"]) for m in auto]))


def _write_r(res: StudyResult) -> None:
    from scoremix.study.rscript import R_DATA_FILE, r_data_columns, render_refit_script, write_r_data

    freq = [m for m in res.config.models if m.backend != "bayes" and not m.auto]  # auto: no lme4 formula
    if not freq:
        return
    table = res.data.table
    cols = r_data_columns(freq, list(table.columns), res.data.system_column)
    levels = write_r_data(table, cols, res.out_dir / R_DATA_FILE)
    res.files[R_DATA_FILE] = res.out_dir / R_DATA_FILE
    text = render_refit_script(res.config.study.name, freq, res.data.systems, res.data.system_column, levels)
    path = res.out_dir / "refit_lme4.R"
    path.write_text(text, encoding="utf-8")
    res.files["refit_lme4.R"] = path


def run_study(study: StudyConfig | str | Path, out_dir: str | Path | None = None, jobs: int = 1,
              dask: str | None = None, progress: bool = True,
              overrides: Mapping[str, Any] | Sequence[str] | None = None, report: bool = True,
              log: Any = None, overwrite: bool = False,
              extra_outputs: Callable[[StudyResult], Mapping[str, tuple[Any, str]]] | None = None) -> StudyResult:
    """Run a study end to end and write its outputs.

    The outputs are written into a fresh staging folder beside ``out_dir`` and moved into
    place only when complete (:mod:`scoremix.study.outdir`): the folder holds one complete run
    or nothing new.  Every formula is parsed before the data are loaded and every column a
    model or analysis names is checked before any task runs.  A model, analysis or report step
    that fails does not stop the others: it is listed in :attr:`StudyResult.failed`, printed as
    one line on stderr (whatever ``progress``) and shown in the report.

    Parameters
    ----------
    study:
        a :class:`~scoremix.study.config.StudyConfig` or the path of a study TOML file.
    out_dir:
        output folder (default: ``[study].output``, else ``<name>-results`` in the current folder).
    jobs:
        worker processes for the independent tasks (systems × models × analyses); results do not
        depend on it (every task is seeded from the study seed and its own key).
    dask:
        ``"local"`` or a scheduler address to run the tasks on Dask instead of joblib.
    progress:
        progress bars and stage messages (on stderr).
    overrides:
        dotted-key overrides when ``study`` is a path (see :func:`~scoremix.study.config.apply_overrides`).
    report:
        write ``report.html``.
    log:
        callable receiving progress messages and failure lines (default: progress messages to
        stderr when ``progress``, failure lines to stderr always).
    overwrite:
        replace an existing non-empty ``out_dir`` (otherwise it is refused with
        :class:`~scoremix.study.outdir.StudyOutputError` before any work).
    extra_outputs:
        called with the result before the manifest is written; returns ``{file name: (object,
        description)}`` of further JSON files to write into the run (the demo's ``metrics.json``).

    Returns
    -------
    StudyResult
    """
    import sys

    cfg = load_study(study, overrides) if isinstance(study, (str, Path)) else study
    if log is None:
        def log(msg: str) -> None:
            if progress:
                print(msg, file=sys.stderr)

        def log_failure(msg: str) -> None:
            print(msg, file=sys.stderr)
    else:
        log_failure = log
    out = Path(out_dir) if out_dir is not None else (cfg.study.output or Path(f"{cfg.study.name}-results"))
    check_output_dir(out, overwrite)
    check_formulas(cfg)
    t0 = time.perf_counter()
    log(f"[scoremix study] {cfg.study.name}: loading data")
    # every warning of the run is recorded with its source and emitted once at the end, outside
    # the recorder (scoremix.study.warnlog); the workers' warnings come back with their results
    recorded: list[StudyWarning] = []
    try:
        with recording("data", recorded):
            data = load_study_data(cfg.data, seed=cfg.study.seed)
            check_columns(cfg, data)
            _check_directions(cfg, data)
        stage = staging_dir(out)
        try:
            with recording("study", recorded):
                res = _run(cfg, data, stage, jobs, dask, progress, report, log, t0, extra_outputs, recorded)
            publish(stage, out, overwrite)
        except BaseException:
            discard(stage)
            raise
    finally:
        emitted = emit(recorded)
    res.warnings = [w.as_dict() for w in emitted]
    res.out_dir = out
    res.files = {name: out / p.relative_to(stage) for name, p in res.files.items()}
    for msg in res.messages:
        log_failure(f"scoremix study: error: {msg}")
    log(f"[scoremix study] done in {res.timings['total']:.1f} s; outputs in {out}")
    return res


def _check_directions(cfg: StudyConfig, data: StudyData) -> None:
    """:class:`~scoremix.metrics.ScoreDirectionWarning` for every system whose positive trials
    score lower than its negative ones (AUC < 0.5), naming the ``[data] negate`` fix."""
    import warnings

    for system in data.systems:
        df = data.subset(system)
        y = df["y"].to_numpy()
        if y.min() == y.max():
            continue
        a = auc(df["score"].to_numpy(float), y)
        if a < 0.5:
            where = f"system {system!r}" if data.system_column else "the study's data"
            fix = (f'[data] negate = {{ {data.system_column} = ["{system}"] }}' if data.system_column
                   else '[data] negate (or a negated score column)')
            warnings.warn(f"{where}: scores look reversed: the positive class scores lower than the negative "
                          f"class (AUC = {a:.3f} < 0.5) but accept = score >= threshold assumes higher = "
                          f"positive; if lower means positive, add {fix} to the study", ScoreDirectionWarning,
                          stacklevel=3)


def _run_all(cfg: StudyConfig, tasks: list[Task], jobs: int, dask: str | None, progress: bool,
             log: Any, recorded: list | None = None) -> list[Any]:
    """Run every task; with ``dask`` and parquet ``[data] files`` the models are fitted over the
    partitions on the cluster (:mod:`scoremix.study.dask_fit`), the other tasks run on it as
    independent tasks."""
    if not dask or not any(t.fn.__name__ == "model_task" for t in tasks):
        return run_tasks(tasks, jobs=jobs, dask=dask, progress=progress, capture_errors=True,
                         ignore_warnings=(ScoreDirectionWarning,), warnings_into=recorded)
    from scoremix.study.dask_fit import run_dask_fits, split_dask_fits

    on_dask, rest = split_dask_fits(cfg, tasks, log)
    results: list[Any] = [None] * len(tasks)
    if rest:
        for i, r in zip(rest, run_tasks([tasks[i] for i in rest], jobs=jobs, dask=dask, progress=progress,
                                        capture_errors=True, ignore_warnings=(ScoreDirectionWarning,),
                                        warnings_into=recorded)):
            results[i] = r
    if on_dask:
        log(f"[scoremix study] fitting {len(on_dask)} model(s) over the partitions of the parquet data "
            f"(dask {dask})")
        for i, r in zip(on_dask, run_dask_fits(cfg, [tasks[i] for i in on_dask], dask, progress, log)):
            results[i] = r
    return results


def _run(cfg: StudyConfig, data: StudyData, out: Path, jobs: int, dask: str | None, progress: bool, report: bool,
         log: Any, t0: float, extra_outputs: Any, recorded: list | None = None) -> StudyResult:
    """Everything after loading the data, written into ``out`` (the staging folder)."""
    res = StudyResult(config=cfg, data=data, out_dir=out)
    res.timings["load"] = time.perf_counter() - t0
    log(f"[scoremix study] {len(data.table)} trials, systems: {', '.join(data.systems)}")
    from scoremix._version import __version__

    _write_json(res, "study.json", {"scoremix_version": __version__, "systems": data.systems,
                                    "n_trials": int(len(data.table)), "config": cfg.to_dict()})
    if data.simulation is not None:
        data.simulation.table.to_csv(out / "trials.csv", index=False)
        res.files["trials.csv"] = out / "trials.csv"
        _write_json(res, "truth.json", data.simulation.truth)
    res.data_summary = _data_summary(cfg, data)
    tasks = _build_tasks(cfg, data)
    log(f"[scoremix study] running {len(tasks)} tasks "
        f"({'dask ' + dask if dask else f'{jobs} job(s)'})")
    t1 = time.perf_counter()
    # the score direction is checked once per system (check_direction above); per-cell metrics of
    # weak cells would repeat it by the hundred
    results = _run_all(cfg, tasks, jobs, dask, progress, log, recorded)
    tasks, results = _combine_chunks(tasks, results)
    res.timings["tasks"] = time.perf_counter() - t1
    _collect(res, tasks, results)
    if data.simulation is not None:
        res.recovered = recovered_vs_true(res)
        _write_csv(res, "recovered_vs_true.csv", res.recovered)
    _write_outputs(res)
    _write_r(res)
    if extra_outputs is not None:
        for name, (obj, desc) in extra_outputs(res).items():
            _write_json(res, name, obj)
            res.descriptions[name] = desc
    if report:
        from scoremix.study.report import write_report

        t2 = time.perf_counter()
        res.warnings = [w.as_dict() for w in summarise(recorded or [])]
        try:
            with recording("report", recorded if recorded is not None else []):
                res.files["report.html"] = write_report(res, out / "report.html")
        except OSError:
            raise  # a full disk or unwritable folder: the run is incomplete, never published (old result kept)
        except Exception as exc:  # noqa: BLE001 - reported by name, exit status 1
            _failure(res, "report", None, f"{type(exc).__name__}: {' '.join(str(exc).split())}")
            (out / "report.html").unlink(missing_ok=True)
        res.timings["report"] = time.perf_counter() - t2
    res.timings["total"] = time.perf_counter() - t0
    if recorded:
        _write_json(res, "warnings.json", [w.as_dict() for w in summarise(recorded)])
    names = {p.relative_to(out).as_posix(): name for name, p in res.files.items()}
    manifest = {}
    for rel in list_files(out) + ["manifest.json"]:
        name = names.get(rel, rel)
        desc = res.descriptions.get(name) or FILE_DESCRIPTIONS.get(
            name, "model fit" if name.startswith("models/") else "")
        manifest[name] = {"path": rel, "description": desc}
        res.files[name] = out / rel
    _write_json(res, "manifest.json", manifest)
    return res
