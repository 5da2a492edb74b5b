"""The ``scoremix`` command line (``scoremix = scoremix.cli:main``; also ``python -m scoremix.cli``).

Subcommands:

``scoremix eer FILE --score COL --label COL [--positive V] [--method rocch] [--n-boot B --speaker COL] [--llr]``
    EER (%), minDCF and its threshold of a trial table (CSV/TSV/.gz/parquet).
``scoremix study STUDY.toml [--out DIR] [--jobs N] [--dask ADDRESS|local] [--set KEY=VALUE]``
    Run a study file (data, models, analyses) → one CSV/JSON per analysis, model JSON,
    posterior netCDF, ``refit_lme4.R`` and ``report.html`` in ``DIR``.
``scoremix demo [--out DIR] [--seed S] [--n-trials N] [--bayes]``
    The embedded study on simulated data with known truth (no R, no shared data).
``scoremix fit FILE --formula F [--backend B] [--ml] [--dispersion ~label] [--json OUT]``
    Fit one linear mixed model; print lme4's summary, optionally write the result JSON.
``scoremix fairness FILE --groups COL [COL …] [--speaker COL] [--n-boot B] [--csv OUT]``
    SVEva subgroup DCF table with speaker-bootstrap intervals.
``scoremix tandem ASV_FILE CM_FILE --join utt [--system COL] [--n-boot B --asv-speaker COL --cm-speaker COL]``
    Tandem ASV + CM metrics (min t-DCF 2019/2021, t-EER, a-DCF, SASV EERs) per CM system.
``scoremix compare FILE --system COL --trial COL [--speaker COL] [--metrics eer min_dcf auc] [--n-boot B]``
    Pairwise comparison of systems (paired bootstrap, DeLong for AUC, Holm).
``scoremix simulate --out FILE [--kind cm|sv] [--n-trials N] [--seed S] [--truth JSON]``
    Write a simulated trial table (and optionally its truth).

Errors in the input (missing file or column, bad labels, non-finite scores, …) print one
line ``scoremix <command>: error: <file>: <message>`` on stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from pathlib import Path

from scoremix._version import __version__

__all__ = ["main", "build_parser", "EXIT_INPUT_ERROR", "EXIT_ANALYSIS_FAILED"]

#: Exit status for invalid input (same as argparse's usage errors).
EXIT_INPUT_ERROR = 2
#: Exit status when a model fit, an analysis or the report of a study failed (the rest ran).
EXIT_ANALYSIS_FAILED = 1

EER_METHODS = ("rocch", "interp", "asvspoof", "voxceleb")


def _one_line(exc: BaseException) -> str:
    msg = str(exc) or type(exc).__name__
    if isinstance(exc, KeyError) and msg.startswith("'") and msg.endswith("'"):
        msg = msg[1:-1]
    return " ".join(msg.split())


def _fail(command: str, where: str | None, exc: BaseException) -> int:
    prefix = f"scoremix {command}: error: "
    msg = _one_line(exc)
    if where and not msg.startswith(f"{where}: "):  # messages that name their file already
        prefix += f"{where}: "
    print(prefix + msg, file=sys.stderr)
    return EXIT_INPUT_ERROR


@contextmanager
def _direction_warnings(command: str, where: str | None, hint: str) -> Iterator[None]:
    """Print each distinct :class:`~scoremix.metrics.ScoreDirectionWarning` raised inside as one
    line ``scoremix <command>: warning: <where>: <message> <hint>`` on stderr; other warnings pass
    through unchanged."""
    import warnings

    from scoremix.metrics import ScoreDirectionWarning

    # Record inside, re-emit outside: re-emitting while the recorder is active appends to the list
    # being iterated, which loops forever (and grows memory) as soon as any warning is raised.
    recorded: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ScoreDirectionWarning)
            try:
                yield
            finally:
                recorded = list(caught)
    finally:
        _emit_once(recorded, command, where, hint)


def _emit_once(recorded: list, command: str, where: str | None, hint: str) -> None:
    """Emit recorded warnings once each (by category and text), outside any recorder."""
    import warnings

    from scoremix.metrics import ScoreDirectionWarning

    seen: set[tuple[str, str]] = set()
    for w in recorded:
        text = " ".join(str(w.message).split())
        key = (w.category.__name__, text)
        if key in seen:
            continue
        seen.add(key)
        if issubclass(w.category, ScoreDirectionWarning):
            prefix = f"{where}: " if where else ""
            print(f"scoremix {command}: warning: {prefix}ScoreDirectionWarning: {text}{hint}", file=sys.stderr)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


@contextmanager
def _study_warnings(command: str) -> Iterator[None]:
    """Print every warning raised inside as one line ``scoremix <command>: warning: <where>: <text>
    [<Category>]`` on stderr, once each, after recording stops.  ``run_study`` has already
    recorded its warnings with their source (system, model) and emitted each once
    (:mod:`scoremix.study.warnlog`); this only formats them for the terminal."""
    import warnings

    recorded: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            try:
                yield
            finally:
                recorded = list(caught)
    finally:
        seen: set[str] = set()
        for w in recorded:
            line = f"scoremix {command}: warning: {' '.join(str(w.message).split())} [{w.category.__name__}]"
            if line not in seen:
                seen.add(line)
                print(line, file=sys.stderr)


# ---------------------------------------------------------------------------------------
# eer
# ---------------------------------------------------------------------------------------

def _cmd_eer(args: argparse.Namespace) -> int:
    from scoremix import metrics
    from scoremix.trials import load_trials

    path = Path(args.file)
    if not path.exists():
        return _fail("eer", str(path), FileNotFoundError("no such file"))
    higher = not args.lower_is_positive
    try:
        trials = load_trials(path, score=args.score, label=args.label, positive=args.positive)
        scores = trials["score"].to_numpy()
        y = trials["y"].to_numpy()
        boot: dict = {}
        if args.n_boot:
            spk = None
            if args.speaker is not None:
                if args.speaker not in trials.columns:
                    raise KeyError(f"speaker column {args.speaker!r} not in {path} (columns: {list(trials.columns)})")
                spk = trials[args.speaker].to_numpy()
            boot = dict(n_boot=args.n_boot, speaker=spk, seed=args.seed, level=args.ci)
        hint = "" if args.lower_is_positive else " (command line: --lower-is-positive)"
        with _direction_warnings("eer", str(path), hint):
            eer = metrics.eer(scores, y, method=args.method, higher_is_positive=higher, **boot)
            md = metrics.min_dcf(scores, y, p_target=args.p_target, c_miss=args.c_miss, c_fa=args.c_fa,
                                 normalize=args.normalize, higher_is_positive=higher, **boot)
            if args.llr:
                if not higher:
                    raise ValueError("--llr: log-likelihood ratios are higher for the positive class; "
                                     "drop --lower-is-positive")
                ad = metrics.act_dcf(scores, y, p_target=args.p_target, c_miss=args.c_miss, c_fa=args.c_fa,
                                     normalize=args.normalize, **boot)
                cl = metrics.cllr(scores, y, **boot)
    except (ValueError, KeyError, OSError) as exc:
        return _fail("eer", str(path), exc)
    n_pos = int(y.sum())
    result = {
        "file": str(path), "n_trials": int(y.size), "n_positive": n_pos, "n_negative": int(y.size - n_pos),
        "eer": float(eer), "eer_method": args.method,
        "min_dcf": float(md.value), "min_dcf_threshold": float(md.threshold),
        "p_miss": float(md.p_miss), "p_fa": float(md.p_fa),
        "p_target": args.p_target, "c_miss": args.c_miss, "c_fa": args.c_fa, "normalized": args.normalize,
        "min_dcf_normalized": float(md.normalized), "min_dcf_unnormalized": float(md.unnormalized),
        "higher_is_positive": higher,
    }
    if args.llr:
        result.update({"act_dcf": float(ad), "cllr": float(cl)})
        if args.n_boot:
            result.update({"act_dcf_lo": ad.lo, "act_dcf_hi": ad.hi, "cllr_lo": cl.lo, "cllr_hi": cl.hi})
    if args.n_boot:
        result.update({"eer_lo": eer.lo, "eer_hi": eer.hi, "min_dcf_lo": md.lo, "min_dcf_hi": md.hi,
                       "n_boot": args.n_boot, "ci": args.ci, "seed": args.seed, "cluster": args.speaker or "trial",
                       "interval": getattr(eer, "interval", "expanded")})
    if args.json:
        print(json.dumps(result, indent=2))
        return 0

    from scoremix.report_html import format_interval_end

    def iv(lo: float, hi: float, scale: float = 1.0, fmt: str = ".4f") -> str:
        if not args.n_boot:
            return ""
        if not hi > lo:  # a zero-width interval is no interval
            return " [interval degenerate]"
        return f" [{format_interval_end(scale * lo, fmt)}, {format_interval_end(scale * hi, fmt)}]"

    norm = "normalised" if args.normalize else "unnormalised"
    other = "unnormalised" if args.normalize else "normalised"
    print(f"{path}: {y.size} trials ({n_pos} positive, {y.size - n_pos} negative)")
    if args.n_boot:
        print(f"intervals: {100 * args.ci:g} % {getattr(eer, 'interval', 'expanded')} (EER; minDCF, actDCF and Cllr "
              f"studentized), {args.n_boot} speaker-cluster bootstrap replicates "
              f"(cluster: {args.speaker or 'each trial'}), seed {args.seed}")
    print(f"EER ({args.method}): {100 * float(eer):.4f} %{iv(getattr(eer, 'lo', 0), getattr(eer, 'hi', 0), 100)}")
    print(f"minDCF (p_target={args.p_target:g}, c_miss={args.c_miss:g}, c_fa={args.c_fa:g}, {norm}): "
          f"{md.value:.6f}{iv(md.lo, md.hi, 1.0, '.6f')}; {other}: "
          f"{(md.unnormalized if args.normalize else md.normalized):.6f}")
    print(f"minDCF threshold: {md.threshold:.6g} (accept = score {'>=' if higher else '<='} threshold; "
          f"P_miss {100 * md.p_miss:.4f} %, P_fa {100 * md.p_fa:.4f} %)")
    if args.llr:
        print(f"actDCF ({norm}, Bayes threshold {metrics.bayes_threshold(args.p_target, args.c_miss, args.c_fa):.4g}): "
              f"{float(ad):.6f}{iv(getattr(ad, 'lo', 0), getattr(ad, 'hi', 0), 1.0, '.6f')}")
        print(f"Cllr: {float(cl):.4f} bits{iv(getattr(cl, 'lo', 0), getattr(cl, 'hi', 0))}")
    return 0


# ---------------------------------------------------------------------------------------
# demo
# ---------------------------------------------------------------------------------------

def _cmd_demo(args: argparse.Namespace) -> int:
    from scoremix.demo import run_demo
    from scoremix.simulate import SimulationError
    from scoremix.study import DaskUnavailableError, StudyConfigError, StudyDataError
    from scoremix.study.outdir import StudyOutputError
    from scoremix.study.parallel import WorkerDiedError

    try:
        with _study_warnings("demo"):
            res = run_demo(args.out, seed=args.seed, n_trials=args.n_trials, progress=not args.no_progress,
                           n_boot=args.n_boot, bayes=args.bayes, bayes_draws=args.bayes_draws, jobs=args.jobs,
                           dask=args.dask, overwrite=args.overwrite)
    except (SimulationError, StudyDataError, DaskUnavailableError) as exc:
        return _fail("demo", None, exc)
    except (StudyOutputError, StudyConfigError) as exc:
        return _fail("demo", None, exc)
    except WorkerDiedError as exc:
        print(f"scoremix demo: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_ANALYSIS_FAILED
    except OSError as exc:
        return _fail("demo", str(args.out), exc)
    ov = res["metrics"].get("overall", {})
    print(f"scoremix demo: simulated {args.n_trials} countermeasure trials (seed {args.seed}) from a crossed "
          f"mixed model with known parameters, fitted the models, compared model-based and empirical EER and "
          f"measured subgroup fairness with {args.n_boot} speaker-bootstrap replicates "
          f"({len(res['sections'])} report sections).")
    if ov:
        print(f"  overall EER    {100 * ov['eer']:.3f} % (true {100 * ov['true_eer']:.3f} %: expected rates of the "
              f"data-generating process given the drawn effects)")
        print(f"  overall minDCF {ov['min_dcf']:.5f} (true {ov['true_min_dcf']:.5f}, p_target={ov['p_target']:g})")
    if res["messages"]:
        print("  recovered vs true (model 'crossed'; for SDs, 'realised' is the SD of the effects or residuals "
              "actually drawn, which is what the fit can recover):")
        for line in res["messages"]:
            print(f"    {line}")
    print(f"Outputs in {res['out_dir']}:")
    _print_files(res["files"])
    if res["files"].get("report.html") is not None:
        print(f"Open {res['files']['report.html']} in a browser.")
    return EXIT_ANALYSIS_FAILED if res["study"].failed else 0


def _print_files(files: dict) -> None:
    from scoremix.study.results import FILE_DESCRIPTIONS

    for name, path in files.items():
        desc = FILE_DESCRIPTIONS.get(name, "model fit" if name.startswith("models/") else
                                     "demo measures vs truth" if name == "metrics.json" else "")
        print(f"  {desc:<55} {path}")


# ---------------------------------------------------------------------------------------
# study
# ---------------------------------------------------------------------------------------

def _cmd_study(args: argparse.Namespace) -> int:
    from scoremix.lme.errors import LmeError
    from scoremix.fairness import SubgroupError
    from scoremix.study import DaskUnavailableError, StudyConfigError, StudyDataError, load_study, run_study
    from scoremix.study.outdir import StudyOutputError
    from scoremix.study.parallel import WorkerDiedError

    path = Path(args.study)
    if not path.exists():
        return _fail("study", str(path), FileNotFoundError("no such study file"))
    try:
        cfg = load_study(path, overrides=args.set)
    except StudyConfigError as exc:
        print(f"scoremix study: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    try:
        with _study_warnings("study"):
            res = run_study(cfg, out_dir=args.out, jobs=args.jobs, dask=args.dask, progress=not args.no_progress,
                            report=not args.no_report, overwrite=args.overwrite)
    except (StudyDataError, DaskUnavailableError, StudyOutputError) as exc:
        return _fail("study", None, exc)
    except StudyConfigError as exc:
        print(f"scoremix study: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    except WorkerDiedError as exc:
        print(f"scoremix study: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_ANALYSIS_FAILED
    except (LmeError, SubgroupError, KeyError, ValueError) as exc:
        return _fail("study", str(path), exc)
    except OSError as exc:
        kept = (f" (nothing was written: {args.out} holds what it held before)" if args.out and args.overwrite
                else " (nothing was written)")
        return _fail("study", str(args.out or ""), OSError(f"{_one_line(exc)}{kept}"))
    print(f"scoremix study {cfg.study.name}: {len(res.data.table)} trials, systems {', '.join(res.data.systems)}, "
          f"{len(res.models)} model fit(s), analyses: {', '.join(cfg.analyses.enabled()) or 'none'} "
          f"({res.timings.get('total', 0):.1f} s).")
    print(f"Outputs in {res.out_dir}:")
    _print_files(res.files)
    if res.failed:
        # each failure was printed on stderr by run_study, one line each
        print(f"scoremix study: {len(res.failed)} step(s) failed (listed above and in report.html)", file=sys.stderr)
        return EXIT_ANALYSIS_FAILED
    return 0


# ---------------------------------------------------------------------------------------
# fit
# ---------------------------------------------------------------------------------------

def _check_response(df: "pd.DataFrame", formula: str, text_file: bool = True) -> None:
    """Raise ``ValueError`` naming the column and the first rows (0-based data row and, for a text
    table, its file line counting the header as line 1) where the formula's response is not a
    finite number."""
    import numpy as np
    import pandas as pd

    response = formula.split("~", 1)[0].strip()
    if "~" not in formula or response not in df.columns:
        return  # lmer reports a malformed formula or a missing column itself
    col = df[response]
    values = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        rows = ", ".join(f"row {i} ({f'line {i + 2}: ' if text_file else ''}{col.iloc[i]!r})" for i in bad[:3])
        more = f" and {bad.size - 3} more" if bad.size > 3 else ""
        raise ValueError(f"response column '{response}' has {bad.size} value(s) that are not finite numbers: "
                         f"{rows}{more}")


def _cmd_fit(args: argparse.Namespace) -> int:
    from scoremix.lme.api import lmer
    from scoremix.lme.errors import LmeError
    from scoremix.trials import load_trials

    path = Path(args.file)
    if not path.exists():
        return _fail("fit", str(path), FileNotFoundError("no such file"))
    out = Path(args.json) if args.json else None
    if out is not None:
        # before the fit: a results file that cannot be written fails now, not after the summary
        try:
            _check_writable(out)
        except OSError as exc:
            return _fail("fit", str(out), exc)
    try:
        if args.score is not None or args.label is not None:
            df = load_trials(path, score=args.score or "score", label=args.label or "label", positive=args.positive)
        else:
            from scoremix.study.data import read_data_file

            df = read_data_file(Path(path))
        _check_response(df, args.formula, text_file=path.suffix not in (".parquet", ".pq"))
        tkw: dict = {"transform": args.transform} if args.transform else {}
        if args.strata is not None:
            if args.transform != "monotone-by-class":
                raise ValueError("--strata applies only with --transform monotone-by-class")
            tkw["control"] = {"strata": args.strata}
        fit = lmer(args.formula, df, REML=not args.ml, backend=args.backend, dispersion=args.dispersion, **tkw)
        eer_tab = _model_eer_lines(fit, df, args) if args.model_eer is not None else None
    except (LmeError, ValueError, KeyError, OSError, ImportError) as exc:
        return _fail("fit", str(path), exc)
    print(fit.summary())
    if eer_tab is not None:
        print(eer_tab)
    if out is not None:
        from scoremix.atomic import write_text

        try:
            write_text(out, fit.to_json(indent=2))  # atomic: the old file stays until the new one is complete
        except OSError as exc:
            return _fail("fit", str(out), exc)
        print(f"wrote {out}")
    return 0


def _check_writable(path: Path) -> None:
    """Raise ``OSError`` (with a readable message) when ``path`` cannot be created or replaced."""
    import tempfile

    if path.is_dir():
        raise IsADirectoryError(f"is a folder; give a file name such as {path / 'fit.json'}")
    for parent in [path.parent, *path.parent.parents]:
        if parent.exists() and not parent.is_dir():
            raise NotADirectoryError(f"cannot write there: {parent} is a file, not a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".scoremix-write-test-"):
            pass
    except OSError as exc:
        raise OSError(f"cannot write into folder {path.parent}: {exc.strerror or exc}") from None


def _model_eer_lines(fit: Any, df: "pd.DataFrame", args: argparse.Namespace) -> str:
    """``fit --model-eer [BY ...]``: model vs empirical EER (both with intervals,
    fit_ok) overall and per ``BY`` column (:func:`scoremix.model_eer.model_eer_tables`);
    disagreements also warn (ModelFitWarning)."""
    import numpy as np
    import pandas as pd

    from scoremix.model_eer import model_eer_tables

    label = "label" if "label" in df.columns else args.label
    speaker = args.speaker if args.speaker in df.columns else None
    parts, notes = [], []
    cols = [None, *args.model_eer]
    bys = [col if col else pd.Series(np.zeros(len(fit.spec.data), int), index=fit.spec.data.index, name="cell")
           for col in cols]
    # one set of parametric-bootstrap refits (the model interval) shared by every table
    tables = model_eer_tables(fit, bys, label=label, positive=args.positive, data=df, speaker=speaker)
    for col, tab in zip(cols, tables):
        tab.index = pd.Index(["all"] if col is None else [str(v) for v in tab.index], name="cell")
        tab.insert(0, "by", col or "overall")
        parts.append(tab.reset_index())
        if tab.attrs.get("note"):
            notes.append(f"note: {tab.attrs['note']}")
    out = pd.concat(parts, ignore_index=True)[["by", "cell"] + [c for c in parts[0].columns if c not in ("by", "cell")]]
    for c in ("eer_model", "eer_model_lo", "eer_model_hi", "eer_empirical", "eer_empirical_lo", "eer_empirical_hi"):
        if c in out.columns:
            out[c] = (100 * out[c]).round(4)
    return ("\nModel-based vs empirical EER (%; empirical: ROCCH with a speaker-bootstrap 95 % interval; model: "
            "95 % interval made by the method in eer_model_interval, see docs/intervals.md; "
            "fit_ok = no disagreement beyond sampling error):\n" + out.to_string(index=False)
            + "".join("\n" + n for n in notes))


# ---------------------------------------------------------------------------------------
# fairness
# ---------------------------------------------------------------------------------------

def _cmd_fairness(args: argparse.Namespace) -> int:
    import warnings

    from scoremix.fairness import SubgroupError, subgroup_dcf
    from scoremix.metrics import ScoreDirectionWarning, check_direction
    from scoremix.trials import load_trials

    path = Path(args.file)
    if not path.exists():
        return _fail("fairness", str(path), FileNotFoundError("no such file"))
    try:
        df = load_trials(path, score=args.score, label=args.label, positive=args.positive)
        with _direction_warnings("fairness", str(path), " (negate the score column of the file)"):
            check_direction(df["score"].to_numpy(float), df["y"].to_numpy())
        with warnings.catch_warnings():  # checked once above, not again per subgroup
            warnings.simplefilter("ignore", ScoreDirectionWarning)
            two_way = {} if args.test_speaker is None else {"test_speaker": args.test_speaker, "resample": "two-way"}
            res = subgroup_dcf(df, args.groups, score="score", label="y", speaker=args.speaker,
                               p_target=args.p_target, c_miss=args.c_miss, c_fa=args.c_fa, normalize=args.normalize,
                               n_boot=args.n_boot, level=args.ci, seed=args.seed, progress=not args.no_progress,
                               **two_way)
    except (SubgroupError, ValueError, KeyError, OSError) as exc:
        return _fail("fairness", str(path), exc)
    import pandas as pd

    cols = [c for c in ["subgroup", "n_speakers", "n_pos", "n_neg", "dcf_at_overall", "min_dcf", "ratio_overall",
                        "ratio_overall_lo", "ratio_overall_hi", "ratio_own", "fpr_ratio", "fnr_ratio", "reliable",
                        "note"]
            if c in res.table.columns]
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.max_rows", 500):
        from scoremix.report_html import format_interval_end, is_interval_end

        ends = {c: format_interval_end for c in cols if is_interval_end(c)}
        print(res.table[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}", formatters=ends))
    lo, hi = res.fairness_index_ci
    fi_ci = "" if args.n_boot == 0 else (f" [{format_interval_end(lo)}, {format_interval_end(hi)}]" if hi > lo
                                         else " [interval degenerate]")
    share = "" if args.n_boot == 0 else f"; ratio interval above 1 in {100 * res.share_above_one:.0f} % of them"
    print(f"overall minDCF {res.min_dcf:.6g} at threshold {res.threshold:.6g}; Fairness Index "
          f"{res.fairness_index:.4g}{fi_ci} over {res.n_subgroups} subgroups{share}")
    if args.n_boot:
        print(f"intervals: {100 * args.ci:g} % {res.settings.get('interval', 'expanded')}, {args.n_boot} "
              f"{'speaker-cluster' if args.test_speaker is None else 'two-way (enrolment x test speaker)'} "
              f"bootstrap replicates; reliable = measured coverage >= 0.90 "
              f"(docs/intervals.md)")
    if args.csv:
        from scoremix.atomic import atomic_open

        out = Path(args.csv)
        try:
            with atomic_open(out, "w", encoding="utf-8") as fh:
                res.table.to_csv(fh, index=False)
        except OSError as exc:
            return _fail("fairness", str(out), exc)
        print(f"wrote {out}")
    return 0


# ---------------------------------------------------------------------------------------
# simulate
# ---------------------------------------------------------------------------------------

def _cmd_simulate(args: argparse.Namespace) -> int:
    from scoremix.jsonable import to_jsonable
    from scoremix.simulate import SimulationError, simulate_sv_trials, simulate_trials

    try:
        if args.kind == "cm":
            sim = simulate_trials(n_trials=args.n_trials, seed=args.seed)
        else:
            sim = simulate_sv_trials(n_trials=args.n_trials, seed=args.seed)
    except SimulationError as exc:
        return _fail("simulate", None, exc)
    from scoremix.atomic import table_format, write_table, write_text

    out = Path(args.out)
    try:
        table_format(out)  # an unknown suffix is refused before anything is written
    except ValueError as exc:
        return _fail("simulate", None, exc)
    try:
        # atomic: on a full disk neither file is left partial (the truth is removed again if the
        # table cannot be written)
        truth = Path(args.truth) if args.truth else None
        had_truth = truth is not None and truth.exists()
        if truth is not None:
            write_text(truth, json.dumps(to_jsonable(sim.truth), indent=2))
        try:
            write_table(sim.table, out)
        except BaseException:
            if truth is not None and not had_truth:
                truth.unlink(missing_ok=True)
            raise
    except (OSError, ImportError) as exc:
        return _fail("simulate", str(out), exc)
    print(f"wrote {len(sim.table)} {args.kind} trials to {out}" + (f", truth to {args.truth}" if args.truth else ""))
    return 0


# ---------------------------------------------------------------------------------------
# parser
# ---------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------
# tandem (s4deteval)
# ---------------------------------------------------------------------------------------

def _cmd_tandem(args: argparse.Namespace) -> int:
    from scoremix.tandem.table import tandem_table
    from scoremix.trials import read_table

    where = f"{args.asv_file}, {args.cm_file}"
    try:
        asv = read_table(args.asv_file)
        cm = read_table(args.cm_file)
        for w in args.where or []:
            col, _, val = w.partition("=")
            if not _ or col not in asv.columns:
                raise KeyError(f"--where {w!r}: expected COL=VALUE with COL a column of {args.asv_file}")
            asv = asv[asv[col].astype(str) == val].reset_index(drop=True)
        table = tandem_table(asv, cm, join=args.join, asv_score=args.asv_score, asv_key=args.asv_key,
                             cm_score=args.cm_score, cm_key=args.cm_key, system=args.system,
                             asv_speaker=args.asv_speaker, cm_speaker=args.cm_speaker,
                             lower_is_bonafide=args.lower_is_bonafide or (), n_boot=args.n_boot, seed=args.seed,
                             level=args.level)
    except (ValueError, KeyError, OSError) as exc:
        return _fail("tandem", where, exc)
    return _show_table("tandem", table, args, width=200)


def _show_table(command: str, table: Any, args: argparse.Namespace, *, width: int,
                hidden: Sequence[str] = ()) -> int:
    """The result table of a command: written to ``--csv`` atomically (the old file stays until
    the new one is complete), then printed as JSON records (``--json``) or as text without the
    ``hidden`` columns."""
    if args.csv:
        from scoremix.atomic import atomic_open

        try:
            with atomic_open(Path(args.csv), "w", encoding="utf-8") as fh:
                table.to_csv(fh, index=False)
        except OSError as exc:
            return _fail(command, str(args.csv), exc)
    if args.json:
        print(table.to_json(orient="records", indent=2, double_precision=15))
        return 0
    import pandas as pd

    with pd.option_context("display.width", width, "display.max_columns", 40):
        print(table.drop(columns=list(hidden)).round(5).to_string(index=False))
    return 0


def _add_tandem_parser(sub: Any) -> None:
    p = sub.add_parser("tandem", help="min t-DCF, t-EER, a-DCF and SASV EERs of an ASV and CM score table",
                       description="Tandem (ASV + countermeasure) metrics: min t-DCF (ASVspoof 2019 and 2021 "
                                   "cost models, ASV at its EER threshold), concurrent t-EER, a-DCF and "
                                   "SASV/SV/SPF EERs of the cascade, one row per CM system.")
    p.add_argument("asv_file", metavar="ASV_FILE", help="ASV trial table (score, target/nontarget/spoof key)")
    p.add_argument("cm_file", metavar="CM_FILE", help="CM trial table (score, bonafide/spoof key; long: --system)")
    p.add_argument("--join", default="utt", metavar="COL", help="utterance id column in both tables (default utt)")
    p.add_argument("--asv-score", default="score", metavar="COL")
    p.add_argument("--asv-key", default="trial_type", metavar="COL")
    p.add_argument("--cm-score", default="score", metavar="COL")
    p.add_argument("--cm-key", default="label", metavar="COL")
    p.add_argument("--system", default=None, metavar="COL", help="CM system column of a long table")
    p.add_argument("--where", action="append", metavar="COL=VALUE", help="keep ASV rows with COL == VALUE")
    p.add_argument("--lower-is-bonafide", action="append", metavar="SYSTEM",
                   help="a system whose CM scores are lower for bona fide (repeatable)")
    p.add_argument("--asv-speaker", default=None, metavar="COL", help="claimed-speaker column (bootstrap)")
    p.add_argument("--cm-speaker", default=None, metavar="COL", help="speaker column of the CM table (bootstrap)")
    p.add_argument("--n-boot", type=int, default=0, help="speaker-cluster bootstrap replicates (default 0)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--level", type=float, default=0.95)
    p.add_argument("--csv", default=None, metavar="OUT", help="also write the table as CSV")
    p.add_argument("--json", action="store_true", help="print JSON records")
    p.set_defaults(func=_cmd_tandem)



# ---------------------------------------------------------------------------------------
# compare (s4deteval)
# ---------------------------------------------------------------------------------------

def _cmd_compare(args: argparse.Namespace) -> int:
    from scoremix.compare_systems import compare_systems
    from scoremix.trials import read_table

    where = str(args.file)
    try:
        df = read_table(args.file)
        for name in args.lower_is_positive or []:
            if name not in set(df[args.system].astype(str)):
                raise KeyError(f"--lower-is-positive {name!r}: no such system in column {args.system!r}")
            m = df[args.system].astype(str) == name
            df.loc[m, args.score] = -df.loc[m, args.score]
        table = compare_systems(df, systems=args.systems, metrics=args.metrics, test=args.test, speaker=args.speaker,
                                test_speaker=args.test_speaker, score=args.score, label=args.label, system=args.system,
                                trial=args.trial, positive=args.positive, p_target=args.p_target, c_miss=args.c_miss,
                                c_fa=args.c_fa, n_boot=args.n_boot, seed=args.seed, level=args.level)
    except (ValueError, KeyError, OSError) as exc:
        return _fail("compare", where, exc)
    rc = _show_table("compare", table, args, width=220, hidden=("ratio_lo", "ratio_hi"))
    if rc == 0 and not args.json:
        print(f"p_adjusted: Holm within each metric over {table.groupby('metric').size().iloc[0]} pairs")
    return rc


def _add_compare_parser(sub: Any) -> None:
    p = sub.add_parser("compare", help="pairwise comparison of systems that score the same trials",
                       description="Differences and ratios of EER, minDCF, actDCF, Cllr and AUC between every pair "
                                   "of systems of a long table (one row per trial and system): paired "
                                   "speaker-cluster bootstrap, DeLong for AUC, Holm-adjusted p-values.")
    p.add_argument("file", metavar="FILE", help="long trial table")
    p.add_argument("--system", default="system", metavar="COL")
    p.add_argument("--systems", nargs="+", default=None, metavar="NAME", help="systems to compare (default: all)")
    p.add_argument("--score", default="score", metavar="COL")
    p.add_argument("--label", default="label", metavar="COL")
    p.add_argument("--positive", default=None, metavar="V")
    p.add_argument("--trial", default=None, metavar="COL", help="trial id column pairing the systems' rows")
    p.add_argument("--speaker", default=None, metavar="COL", help="speaker (cluster) column")
    p.add_argument("--test-speaker", default=None, metavar="COL", help="test-speaker column (two-way bootstrap)")
    p.add_argument("--metrics", nargs="+", default=["eer", "min_dcf", "auc"],
                   choices=["eer", "min_dcf", "act_dcf", "cllr", "auc"])
    p.add_argument("--test", default="auto", choices=["auto", "bootstrap", "delong"])
    p.add_argument("--lower-is-positive", action="append", metavar="SYSTEM",
                   help="a system whose scores are lower for the positive class (negated; repeatable)")
    p.add_argument("--p-target", type=float, default=0.05)
    p.add_argument("--c-miss", type=float, default=1.0)
    p.add_argument("--c-fa", type=float, default=1.0)
    p.add_argument("--n-boot", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--level", type=float, default=0.95)
    p.add_argument("--csv", default=None, metavar="OUT")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_compare)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``scoremix`` command."""
    parser = argparse.ArgumentParser(
        prog="scoremix",
        description="Score modeling for binary detectors: error rates, mixed models, subgroup fairness.",
    )
    parser.add_argument("--version", action="version", version=f"scoremix {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("eer", help="EER, minDCF and threshold of a score table",
                       description="EER (in percent), minDCF and its threshold of a trial table "
                                   "(CSV, TSV, .gz or parquet). Accept = score >= threshold.")
    p.add_argument("file", metavar="FILE", help="trial table")
    p.add_argument("--score", default="score", metavar="COL", help="score column (default: score)")
    p.add_argument("--label", default="label", metavar="COL", help="label column (default: label)")
    p.add_argument("--positive", default=None, metavar="V",
                   help="label value of the positive class (default: recognised vocabularies such as "
                        "target/nontarget, bonafide/spoof, 1/0)")
    p.add_argument("--method", default="rocch", choices=EER_METHODS, help="EER definition (default: rocch)")
    p.add_argument("--p-target", type=float, default=0.05, help="prior of the positive class (default 0.05)")
    p.add_argument("--c-miss", type=float, default=1.0, help="cost of a miss (default 1)")
    p.add_argument("--c-fa", type=float, default=1.0, help="cost of a false acceptance (default 1)")
    p.add_argument("--normalize", action="store_true", help="normalised detection cost")
    p.add_argument("--lower-is-positive", action="store_true",
                   help="lower scores mean positive (distances, some countermeasures): accept = score <= threshold")
    p.add_argument("--n-boot", type=int, default=0,
                   help="speaker-cluster bootstrap replicates for intervals (default 0: none)")
    p.add_argument("--speaker", default=None, metavar="COL",
                   help="speaker (cluster) column for the bootstrap (default: every trial its own cluster)")
    p.add_argument("--ci", type=float, default=0.95, help="interval level (default 0.95)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--llr", action="store_true",
                   help="scores are calibrated log-likelihood ratios: also actDCF (Bayes threshold) and Cllr")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=_cmd_eer)

    p = sub.add_parser("study", help="run a study file (data, models, analyses → results and report)",
                       description="Run a TOML study file: fit its models, run its analyses and write one "
                                   "CSV/JSON per analysis, model JSON, netCDF posteriors, refit_lme4.R and "
                                   "report.html into DIR. See docs/study-format.md.")
    p.add_argument("study", metavar="STUDY.toml", help="study file")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="output folder (default: [study].output, else <name>-results)")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="parallel worker processes (default 1)")
    p.add_argument("--dask", default=None, metavar="ADDRESS",
                   help="run the tasks on a Dask cluster: a scheduler address or 'local' (LocalCluster)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a study key, e.g. --set analyses.fairness.n_boot=50 (repeatable)")
    p.add_argument("--no-report", action="store_true", help="skip report.html")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing non-empty output folder (once the new run is complete)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(func=_cmd_study)

    p = sub.add_parser("demo", help="a complete study on simulated data with known truth",
                       description="Run the embedded demo study: simulated countermeasure trials with known "
                                   "parameters and subgroup disadvantages; mixed models, model-based EER, "
                                   "fairness with bootstrap intervals, recovered vs true parameters; all "
                                   "outputs of 'scoremix study' in DIR. Needs no R and no shared data.")
    p.add_argument("--out", default="demo-report", metavar="DIR", help="output folder (default: demo-report)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing non-empty output folder (once the new run is complete)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--n-trials", type=int, default=20000, help="number of trials (default 20000)")
    p.add_argument("--n-boot", type=int, default=200, help="bootstrap replicates of the fairness table and of the model-vs-empirical EER intervals (default 200)")
    p.add_argument("--bayes", action="store_true", help="also fit the model with PyMC (slower)")
    p.add_argument("--bayes-draws", type=int, default=1000,
                   help="posterior draws (and tuning steps) per chain with --bayes (default 1000: bulk and tail "
                        "ESS above the 400 that the convergence check asks for)")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="parallel worker processes (default 1)")
    p.add_argument("--dask", default=None, metavar="ADDRESS", help="Dask scheduler address or 'local'")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("fit", help="fit one linear mixed model to a table",
                       description="Fit a linear mixed model given by an lme4 formula; print lme4's summary. "
                                   "With --score/--label the table is validated as a trial table first "
                                   "(columns renamed to score/label, plus y = 1 for the positive class).")
    p.add_argument("file", metavar="FILE", help="table (CSV, TSV, .gz or parquet)")
    p.add_argument("--formula", required=True, help="lme4 formula, e.g. 'score ~ label + (1|speaker)'")
    p.add_argument("--backend", default="native", choices=("native", "statsmodels", "lme4"),
                   help="fitting backend (default native)")
    p.add_argument("--ml", action="store_true", help="maximum likelihood instead of REML")
    p.add_argument("--dispersion", default=None, metavar="FORMULA", help="class-specific residual variance, '~ label'")
    p.add_argument("--score", default=None, metavar="COL", help="score column (validated, renamed to score)")
    p.add_argument("--label", default=None, metavar="COL", help="label column (validated, renamed to label)")
    p.add_argument("--positive", default=None, metavar="V", help="label value of the positive class")
    p.add_argument("--json", default=None, metavar="OUT", help="write the result as JSON (scoremix.lmer/1)")
    p.add_argument("--transform", default=None, choices=("monotone", "monotone-by-class"),
                   help="fit a transformation (latent-Gaussian) mixed model h(score) = Xβ + Zb + ε, h increasing "
                        "(monotone-by-class: one h per level of --strata)")
    p.add_argument("--strata", default=None, metavar="COL",
                   help="with --transform monotone-by-class: the strata column (default: label)")
    p.add_argument("--model-eer", nargs="*", default=None, metavar="BY",
                   help="print the model-based vs empirical EER (with interval and fit check), overall and per BY")
    p.add_argument("--speaker", default="speaker", metavar="COL",
                   help="cluster column of the empirical EER bootstrap (default: speaker)")
    p.set_defaults(func=_cmd_fit)

    p = sub.add_parser("fairness", help="SVEva subgroup fairness table of a score table",
                       description="SVEva Fair subgroup measures (DCF at the overall threshold, ratios, "
                                   "Fairness Index) with speaker-cluster bootstrap intervals.")
    p.add_argument("file", metavar="FILE", help="trial table")
    p.add_argument("--groups", nargs="+", required=True, metavar="COL", help="subgroup attribute column(s)")
    p.add_argument("--score", default="score", metavar="COL", help="score column (default: score)")
    p.add_argument("--label", default="label", metavar="COL", help="label column (default: label)")
    p.add_argument("--positive", default=None, metavar="V", help="label value of the positive class")
    p.add_argument("--speaker", default="speaker", metavar="COL", help="speaker (cluster) column (default: speaker)")
    p.add_argument("--test-speaker", default=None, metavar="COL",
                   help="test speaker column: resample enrolment x test speakers (two-way bootstrap for crossed "
                        "nontarget trials; docs/intervals.md)")
    p.add_argument("--n-boot", type=int, default=0, help="bootstrap replicates (default 0: no intervals)")
    p.add_argument("--ci", type=float, default=0.95, help="interval level (default 0.95)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--p-target", type=float, default=0.05, help="prior of the positive class (default 0.05)")
    p.add_argument("--c-miss", type=float, default=1.0, help="cost of a miss (default 1)")
    p.add_argument("--c-fa", type=float, default=1.0, help="cost of a false acceptance (default 1)")
    p.add_argument("--normalize", action="store_true", help="normalised detection cost")
    p.add_argument("--csv", default=None, metavar="OUT", help="write the full table as CSV")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(func=_cmd_fairness)

    _add_tandem_parser(sub)  # s4deteval
    _add_compare_parser(sub)  # s4deteval

    p = sub.add_parser("simulate", help="write a simulated trial table",
                       description="Write a simulated trial table; the format follows the extension: .csv "
                                   "(.csv.gz/.bz2/.xz/.zip compressed), .tsv, .parquet or .feather.")
    p.add_argument("--out", required=True, metavar="FILE", help="output table")
    p.add_argument("--kind", choices=("cm", "sv"), default="cm",
                   help="cm: countermeasure (bonafide/spoof); sv: speaker verification (default cm)")
    p.add_argument("--n-trials", type=int, default=20000, help="number of trials (default 20000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--truth", default=None, metavar="JSON", help="also write the truth as JSON")
    p.set_defaults(func=_cmd_simulate)
    return parser


class _Stop(BaseException):
    """Raised in the main thread by the SIGTERM/SIGINT handler of :func:`main`."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum: int, frame: object) -> None:
    _ignore_further_signals()  # a second Ctrl-C must not interrupt the clean-up
    raise _Stop(signum)


def _ignore_further_signals() -> None:
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(sig, signal.SIG_IGN)
        except (ValueError, OSError):  # not the main thread
            pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 a study step failed, 2 input error,
    128 + signal number when stopped by SIGINT or SIGTERM).

    SIGTERM and SIGINT stop the command: the study's staging folder is deleted, every worker
    process (joblib/loky, Dask) is stopped, and one line is printed instead of a traceback."""
    import signal

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_INPUT_ERROR
    previous: dict[int, Any] = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            previous[sig] = signal.signal(sig, _on_signal)
        except ValueError:  # not the main thread: leave signals alone
            break
    try:
        return int(args.func(args))
    except (KeyboardInterrupt, _Stop) as exc:
        _ignore_further_signals()
        from scoremix.study.parallel import stop_workers

        stop_workers()
        signum = exc.signum if isinstance(exc, _Stop) else int(signal.SIGINT)
        print(f"scoremix {args.command}: interrupted by {signal.Signals(signum).name}; stopped, "
              "no partial output left behind", file=sys.stderr)
        return 128 + signum
    except BrokenPipeError:
        # Output piped into e.g. `head` that closed early: not an error of ours. Point stdout
        # at /dev/null so the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
