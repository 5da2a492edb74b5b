"""InstEval with correlated lecturer slopes: scoremix's native engine vs lme4, interleaved.

Model (REML): ``y ~ service + (1 | s) + (service | d)`` on lme4's full ``InstEval``
(73,421 ratings, 2,972 students ``s``, 1,128 lecturers ``d``, ``service`` a two-level factor).

Usage (from the repository root)::

    nice -n 5 python benchmarks/insteval_slopes_speed.py [--reps 3] [--threads one|default|both]
        [--json out.json] [--fits 1]

Each repetition runs one scoremix fit and one lme4 fit, alternately (scoremix first in odd
repetitions, lme4 first in even ones), each in its own child process so that both see the
same machine load:

* scoremix: ``scoremix.lmer(formula, data)`` (model frame + fit + result), timed in the child
  around that call (the data frame is read before);
* lme4: ``lmer(formula, InstEval)`` at lme4's defaults, timed in R around that call.

``--threads one`` sets ``OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=1`` in both children (the
acceptance setting), ``default`` leaves them unset (lme4's OpenBLAS uses every core;
scoremix limits its own hot paths to one BLAS thread unless told otherwise, see
docs/performance.md), ``both`` runs the two settings one after the other.  Reported per
fit: wall seconds, CPU seconds (user + system of the process; lme4: R's ``proc.time()``),
the REML criterion, the number of criterion evaluations and the 1-minute load average read
before the fit.  Ratio = lme4 / scoremix (above 1: scoremix faster).

``--fits N`` (N > 1) fits the model N times in each child process: the first fit is the one a
user pays in a fresh process (scoremix: including numba's import and the loading of its cached
kernels, about 0.3–0.6 s; lme4: nothing comparable, its C++ is compiled), the median of the
others is the steady state of a session that fits many models (studies, bootstraps).  Both are
reported; neither replaces the other.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FORMULA = "y ~ service + (1 | s) + (service | d)"

_R = r"""
suppressPackageStartupMessages(library(lme4))
data(InstEval, package = "lme4")
args <- commandArgs(trailingOnly = TRUE)
if (length(args) >= 2 && args[2] == "export") {
  d <- InstEval
  for (col in names(d)) if (is.factor(d[[col]])) d[[col]] <- as.character(d[[col]])
  utils::write.csv(d, args[1], row.names = FALSE)
  quit(save = "no")
}
nfit <- if (length(args) >= 2) as.integer(args[2]) else 1L
wall <- numeric(nfit); cpu <- numeric(nfit)
for (k in seq_len(nfit)) {
  t0 <- proc.time()
  m <- lmer(y ~ service + (1 | s) + (service | d), InstEval, REML = TRUE)
  t1 <- proc.time() - t0
  wall[k] <- t1[["elapsed"]]; cpu[k] <- t1[["user.self"]] + t1[["sys.self"]]
}
cat(sprintf('{"walls": [%s], "cpus": [%s], "crit": %.12f, "n_eval": %d}\n',
            paste(sprintf("%.6f", wall), collapse = ", "), paste(sprintf("%.6f", cpu), collapse = ", "),
            REMLcrit(m), as.integer(m@optinfo$feval)), file = args[1])
"""

_PY = r"""
import json, sys, time, warnings
import pandas as pd
csv, out, nfit = sys.argv[1], sys.argv[2], int(sys.argv[3])
d = pd.read_csv(csv, dtype={"s": str, "d": str, "service": str, "dept": str})
import scoremix as sm
walls, cpus = [], []
for _ in range(nfit):
    w0, c0 = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = sm.lmer("y ~ service + (1 | s) + (service | d)", d)
    w1, c1 = time.perf_counter(), time.process_time()
    walls.append(w1 - w0); cpus.append(c1 - c0)
r = m.to_dict()
json.dump({"walls": walls, "cpus": cpus, "crit": r["reml_criterion"],
           "n_eval": int(m.fit_info.get("n_eval", -1))}, open(out, "w"))
"""


def _load() -> float:
    return os.getloadavg()[0]


def _env(threads: str) -> dict[str, str]:
    env = dict(os.environ)
    for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.pop(k, None)
    if threads == "one":
        env["OPENBLAS_NUM_THREADS"] = "1"
        env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _first_and_warm(r: dict) -> dict:
    """``wall``/``cpu``: the first fit of the fresh process; ``wall_warm``/``cpu_warm``: the
    median of the later fits in the same process (NaN with one fit)."""
    w, c = r.pop("walls"), r.pop("cpus")
    r.update(wall=w[0], cpu=c[0], wall_warm=float(np.median(w[1:])) if len(w) > 1 else float("nan"),
             cpu_warm=float(np.median(c[1:])) if len(c) > 1 else float("nan"))
    return r


def run_scoremix(csv: Path, tmp: Path, env: dict[str, str], fits: int = 1) -> dict:
    out = tmp / "sm.json"
    script = tmp / "sm_child.py"
    script.write_text(_PY)
    load = _load()
    subprocess.run([sys.executable, str(script), str(csv), str(out), str(fits)], check=True, env=env)
    r = _first_and_warm(json.loads(out.read_text()))
    r["load"] = load
    return r


def run_lme4(tmp: Path, env: dict[str, str], fits: int = 1) -> dict:
    out = tmp / "lme4.json"
    script = tmp / "lme4_child.R"
    script.write_text(_R)
    load = _load()
    subprocess.run(["Rscript", str(script), str(out), str(fits)], check=True, env=env)
    r = _first_and_warm(json.loads(out.read_text()))
    r["load"] = load
    return r


def r_versions() -> str:
    try:
        out = subprocess.run(
            ["Rscript", "-e", "si <- sessionInfo(); cat(R.version.string, "
             "as.character(packageVersion('lme4')), si$BLAS, sep=' | ')"],
            capture_output=True, text=True, timeout=120)
        return out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"R not available ({exc})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", choices=["one", "default", "both"], default="both")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--fits", type=int, default=1,
                    help="fits per child process; the first is reported as 'first' (fresh process), "
                         "the median of the others as 'warm'")
    args = ap.parse_args()
    settings = ["one", "default"] if args.threads == "both" else [args.threads]
    rows = []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        csv = tmp / "InstEval.csv"
        script = tmp / "export.R"
        script.write_text(_R)
        subprocess.run(["Rscript", str(script), str(csv), "export"], check=True)
        print(f"R: {r_versions()}")
        import numpy
        import scipy
        print(f"Python: numpy {numpy.__version__}, scipy {scipy.__version__}; "
              f"{os.cpu_count()} CPUs; load average at start {os.getloadavg()}")
        print(f"model: {FORMULA} (REML)\n")
        for threads in settings:
            env = _env(threads)
            for rep in range(args.reps):
                order = ["scoremix", "lme4"] if rep % 2 == 0 else ["lme4", "scoremix"]
                for engine in order:
                    r = (run_scoremix(csv, tmp, env, args.fits) if engine == "scoremix"
                         else run_lme4(tmp, env, args.fits))
                    r.update(engine=engine, threads=threads, rep=rep + 1)
                    rows.append(r)
                    print(f"threads={threads:7s} rep {rep + 1} {engine:8s} wall {r['wall']:7.2f} s  "
                          f"cpu {r['cpu']:7.2f} s  crit {r['crit']:.9f}  evals {r['n_eval']:3d}  "
                          f"load {r['load']:.1f}"
                          + (f"  warm wall {r['wall_warm']:.2f} s cpu {r['cpu_warm']:.2f} s"
                             if args.fits > 1 else ""), flush=True)
    print()
    print("| BLAS threads | engine | wall s (median, range) | CPU s (median, range) | REML criterion | evaluations | load (1 min) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for threads in settings:
        med = {}
        for engine in ("scoremix", "lme4"):
            rs = [r for r in rows if r["threads"] == threads and r["engine"] == engine]
            w = np.array([r["wall"] for r in rs])
            c = np.array([r["cpu"] for r in rs])
            ld = np.array([r["load"] for r in rs])
            med[engine] = (np.median(w), np.median(c))
            print(f"| {threads} | {engine} | {np.median(w):.2f} ({w.min():.2f}–{w.max():.2f}) | "
                  f"{np.median(c):.2f} ({c.min():.2f}–{c.max():.2f}) | {rs[0]['crit']:.6f} | "
                  f"{rs[0]['n_eval']} | {ld.min():.1f}–{ld.max():.1f} |")
        sw, sc = med["scoremix"]
        lw, lc = med["lme4"]
        crit_s = min(r["crit"] for r in rows if r["threads"] == threads and r["engine"] == "scoremix")
        crit_l = min(r["crit"] for r in rows if r["threads"] == threads and r["engine"] == "lme4")
        print(f"| {threads} | ratio lme4/scoremix | {lw / sw:.2f}× | {lc / sc:.2f}× | "
              f"Δ = {crit_s - crit_l:+.2e} | | |")
        if args.fits > 1:
            for engine in ("scoremix", "lme4"):
                rs = [r for r in rows if r["threads"] == threads and r["engine"] == engine]
                w = np.array([r["wall_warm"] for r in rs]); c = np.array([r["cpu_warm"] for r in rs])
                med[engine] = (np.median(w), np.median(c))
                print(f"| {threads} | {engine}, later fits in the same process | {np.median(w):.2f} "
                      f"({w.min():.2f}–{w.max():.2f}) | {np.median(c):.2f} ({c.min():.2f}–{c.max():.2f}) | | | |")
            (sw, sc), (lw, lc) = med["scoremix"], med["lme4"]
            print(f"| {threads} | ratio, later fits | {lw / sw:.2f}× | {lc / sc:.2f}× | | | |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
