"""The ``scoremix`` command line (``scoremix = scoremix.cli:main``; also ``python -m scoremix.cli``).

Subcommands:

``scoremix eer FILE --score COL --label COL [--positive V] [--method rocch]``
    EER (%), minDCF and its threshold of a trial table (CSV/TSV/.gz/parquet).
``scoremix demo [--out DIR] [--seed S] [--n-trials N]``
    Simulated detector with known truth → ``trials.csv``, ``truth.json``, ``metrics.json``,
    ``report.html`` in ``DIR``.
``scoremix simulate --out FILE [--kind cm|sv] [--n-trials N] [--seed S] [--truth JSON]``
    Write a simulated trial table (and optionally its truth).

Errors in the input (missing file or column, bad labels, non-finite scores, …) print one
line ``scoremix <command>: error: <file>: <message>`` on stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from scoremix._version import __version__

__all__ = ["main", "build_parser", "EXIT_INPUT_ERROR"]

#: Exit status for invalid input (same as argparse's usage errors).
EXIT_INPUT_ERROR = 2

EER_METHODS = ("rocch", "interp", "asvspoof", "voxceleb")


def _one_line(exc: BaseException) -> str:
    msg = str(exc) or type(exc).__name__
    if isinstance(exc, KeyError) and msg.startswith("'") and msg.endswith("'"):
        msg = msg[1:-1]
    return " ".join(msg.split())


def _fail(command: str, where: str | None, exc: BaseException) -> int:
    prefix = f"scoremix {command}: error: "
    if where:
        prefix += f"{where}: "
    print(prefix + _one_line(exc), file=sys.stderr)
    return EXIT_INPUT_ERROR


# ---------------------------------------------------------------------------------------
# eer
# ---------------------------------------------------------------------------------------

def _cmd_eer(args: argparse.Namespace) -> int:
    from scoremix import metrics
    from scoremix.trials import load_trials

    path = Path(args.file)
    if not path.exists():
        return _fail("eer", str(path), FileNotFoundError("no such file"))
    try:
        trials = load_trials(path, score=args.score, label=args.label, positive=args.positive)
        scores = trials["score"].to_numpy()
        y = trials["y"].to_numpy()
        eer = float(metrics.eer(scores, y, method=args.method))
        md = metrics.min_dcf(scores, y, p_target=args.p_target, c_miss=args.c_miss, c_fa=args.c_fa,
                             normalize=args.normalize)
    except (ValueError, KeyError, OSError) as exc:
        return _fail("eer", str(path), exc)
    n_pos = int(y.sum())
    result = {
        "file": str(path), "n_trials": int(y.size), "n_positive": n_pos, "n_negative": int(y.size - n_pos),
        "eer": eer, "eer_method": args.method,
        "min_dcf": float(md.value), "min_dcf_threshold": float(md.threshold),
        "p_miss": float(md.p_miss), "p_fa": float(md.p_fa),
        "p_target": args.p_target, "c_miss": args.c_miss, "c_fa": args.c_fa, "normalized": args.normalize,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    norm = "normalised" if args.normalize else "unnormalised"
    print(f"{path}: {y.size} trials ({n_pos} positive, {y.size - n_pos} negative)")
    print(f"EER ({args.method}): {100 * eer:.4f} %")
    print(f"minDCF (p_target={args.p_target:g}, c_miss={args.c_miss:g}, c_fa={args.c_fa:g}, {norm}): "
          f"{md.value:.6f}")
    print(f"minDCF threshold: {md.threshold:.6g} (accept = score >= threshold; "
          f"P_miss {100 * md.p_miss:.4f} %, P_fa {100 * md.p_fa:.4f} %)")
    return 0


# ---------------------------------------------------------------------------------------
# demo
# ---------------------------------------------------------------------------------------

def _cmd_demo(args: argparse.Namespace) -> int:
    from scoremix.demo import run_demo
    from scoremix.simulate import SimulationError

    try:
        res = run_demo(args.out, seed=args.seed, n_trials=args.n_trials, progress=not args.no_progress)
    except SimulationError as exc:
        return _fail("demo", None, exc)
    except OSError as exc:
        return _fail("demo", str(args.out), exc)
    ov = res["metrics"].get("overall", {})
    print(f"Simulated {args.n_trials} countermeasure trials (seed {args.seed}) with known truth and "
          f"evaluated them ({len(res['sections'])} report sections).")
    if ov:
        print(f"  overall EER   {100 * ov['eer']:.3f} % (true {100 * ov['true_eer']:.3f} %)")
        print(f"  overall minDCF {ov['min_dcf']:.5f} (true {ov['true_min_dcf']:.5f}, "
              f"p_target={ov['p_target']:g})")
    descriptions = {"trials": "simulated trial table", "truth": "true parameters and realised effects",
                    "metrics": "computed measures", "report": "HTML report (self-contained)"}
    for name, path in res["files"].items():
        print(f"  {descriptions.get(name, name):<40} {path}")
    for line in res["messages"]:
        print(f"  {line}")
    return 0


# ---------------------------------------------------------------------------------------
# simulate
# ---------------------------------------------------------------------------------------

def _cmd_simulate(args: argparse.Namespace) -> int:
    from scoremix.demo import to_jsonable
    from scoremix.simulate import SimulationError, simulate_sv_trials, simulate_trials

    try:
        if args.kind == "cm":
            sim = simulate_trials(n_trials=args.n_trials, seed=args.seed)
        else:
            sim = simulate_sv_trials(n_trials=args.n_trials, seed=args.seed)
    except SimulationError as exc:
        return _fail("simulate", None, exc)
    out = Path(args.out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix == ".parquet":
            sim.table.to_parquet(out, index=False)
        else:
            sim.table.to_csv(out, index=False)
        if args.truth:
            Path(args.truth).write_text(json.dumps(to_jsonable(sim.truth), indent=2), encoding="utf-8")
    except (OSError, ImportError) as exc:
        return _fail("simulate", str(out), exc)
    print(f"wrote {len(sim.table)} {args.kind} trials to {out}" + (f", truth to {args.truth}" if args.truth else ""))
    return 0


# ---------------------------------------------------------------------------------------
# parser
# ---------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``scoremix`` command."""
    parser = argparse.ArgumentParser(
        prog="scoremix",
        description="Score modeling for binary detectors: error rates, mixed models, subgroup fairness.",
    )
    parser.add_argument("--version", action="version", version=f"scoremix {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("eer", help="EER, minDCF and threshold of a score table",
                       description="EER (%%), minDCF and its threshold of a trial table "
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
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=_cmd_eer)

    p = sub.add_parser("demo", help="simulate a detector with known truth and write a report",
                       description="Simulate countermeasure trials with known truth, compute EER/minDCF "
                                   "overall and per subgroup, and write trials.csv, truth.json, "
                                   "metrics.json and report.html into DIR.")
    p.add_argument("--out", default="demo-report", metavar="DIR", help="output folder (default: demo-report)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--n-trials", type=int, default=20000, help="number of trials (default 20000)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("simulate", help="write a simulated trial table",
                       description="Write a simulated trial table (CSV, .csv.gz or .parquet by extension).")
    p.add_argument("--out", required=True, metavar="FILE", help="output table")
    p.add_argument("--kind", choices=("cm", "sv"), default="cm",
                   help="cm: countermeasure (bonafide/spoof); sv: speaker verification (default cm)")
    p.add_argument("--n-trials", type=int, default=20000, help="number of trials (default 20000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--truth", default=None, metavar="JSON", help="also write the truth as JSON")
    p.set_defaults(func=_cmd_simulate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 input error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_INPUT_ERROR
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
