"""Speed of ``scoremix.glmer`` (native) beside ``lme4::glmer``, interleaved.

Usage (from the repository root)::

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python benchmarks/glmer_speed.py \\
        [--rows 1000000] [--reps 1] [--battery] [--json out.json]

Models

* a detector decision table: ``rows`` trials of 1000 speakers × 13 attacks (gender a
  speaker attribute, an error indicator drawn from a logit-normal model with speaker and
  attack effects, seed 20), ``error ~ gender + (1 | speaker) + (1 | attack)``, Laplace.
  scoremix collapses the 0/1 rows into the 13,000 speaker × attack cells (identical rows
  share a cell); lme4 fits the rows;
* with ``--battery``: every model of ``tests/data/glmm`` (lme4's time is the one stored
  by ``r_scripts/glmer_battery.R``, lme4's default settings); with ``--battery-live``
  lme4 is timed now, right after each native fit (``--only id ...`` picks models,
  ``--skip-decisions`` skips the decision table).

Each repetition runs native then lme4 (R in a child process with one BLAS thread, timing
the ``glmer()`` call only, without start-up and CSV reading).  Columns: seconds, ratio
lme4 / native, −2 logLik of both; the live battery also reports CPU seconds of each side
(``time.process_time`` / R's user + system time), the steadier measure on a loaded
machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import scoremix as sm  # noqa: E402

R_FIT = r"""
suppressMessages({library(lme4); library(jsonlite)})
a <- commandArgs(trailingOnly = TRUE)
d <- read.csv(a[1], stringsAsFactors = TRUE)
d$speaker <- factor(d$speaker); d$attack <- factor(d$attack)
t0 <- proc.time()[["elapsed"]]
m <- glmer(as.formula(a[2]), data = d, family = binomial)
t1 <- proc.time()[["elapsed"]]
cat(toJSON(list(seconds = t1 - t0, m2ll = as.numeric(-2 * logLik(m)), fixef = unname(fixef(m))),
           auto_unbox = TRUE, digits = NA))
"""

#: one battery model, lme4's default settings (levels as stored by the reference JSON)
R_BATTERY = r"""
suppressMessages({library(lme4); library(jsonlite)})
a <- commandArgs(trailingOnly = TRUE)
ref <- fromJSON(a[1])
d <- read.csv(a[2])
for (nm in names(ref$factors)) d[[nm]] <- factor(as.character(d[[nm]]), levels = ref$factors[[nm]])
d$.w <- if (is.null(ref$weights)) 1 else d[[ref$weights]]
fam <- get(ref$family)(link = ref$link)
p0 <- proc.time()
m <- suppressMessages(suppressWarnings(glmer(as.formula(ref$formula), data = d, family = fam,
                                             weights = .w, nAGQ = ref$nAGQ)))
dt <- proc.time() - p0
cat(toJSON(list(seconds = dt[["elapsed"]], cpu = dt[["user.self"]] + dt[["sys.self"]],
                m2ll = as.numeric(-2 * logLik(m))), auto_unbox = TRUE, digits = NA))
"""


def decision_table(rows: int, seed: int = 20) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n_spk, n_att = 1000, 13
    spk = rng.integers(0, n_spk, rows)
    att = rng.integers(0, n_att, rows)
    b_s = rng.normal(0, 0.7, n_spk)
    b_a = rng.normal(0, 0.5, n_att)
    male = spk % 2 == 1
    eta = -2.5 + 0.3 * male + b_s[spk] + b_a[att]
    err = (rng.random(rows) < 1 / (1 + np.exp(-eta))).astype(int)
    return pd.DataFrame({"error": err, "gender": np.where(male, "male", "female"),
                         "speaker": [f"s{k:04d}" for k in spk], "attack": [f"A{k:02d}" for k in att]})


def run_native(formula: str, d: pd.DataFrame) -> dict:
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = sm.glmer(formula, d, "binomial")
    return {"seconds": time.perf_counter() - t0, "m2ll": -2 * m.loglik,
            "fixef": m.fixef.tolist()}


def run_lme4(formula: str, csv: Path, timeout: float) -> dict:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    with tempfile.NamedTemporaryFile("w", suffix=".R", delete=False) as f:
        f.write(R_FIT)
    out = subprocess.run(["Rscript", f.name, str(csv), formula], capture_output=True, text=True,
                         timeout=timeout, env=env)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-1000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_lme4_battery(ref_path: Path, csv: Path, timeout: float) -> dict:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    with tempfile.NamedTemporaryFile("w", suffix=".R", delete=False) as f:
        f.write(R_BATTERY)
    out = subprocess.run(["Rscript", f.name, str(ref_path), str(csv)], capture_output=True,
                         text=True, timeout=timeout, env=env)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-1000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def battery(live: bool = False, only: list[str] | None = None,
            timeout: float = 600) -> list[dict]:
    rows = []
    for p in sorted((ROOT / "tests" / "data" / "glmm").glob("*.json")):
        if only and p.stem not in only:
            continue
        ref = json.loads(p.read_text())
        d = pd.read_csv(p.parent / f"{ref['data']}.csv")
        for c, lev in ref.get("factors", {}).items():
            d[c] = pd.Categorical(d[c].astype(str), categories=[lev] if isinstance(lev, str) else lev)
        t0, c0 = time.perf_counter(), time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = sm.glmer(ref["formula"], d, ref["family"], link=ref["link"], nAGQ=ref["nAGQ"],
                         weights=ref.get("weights"))
        sec, cpu = time.perf_counter() - t0, time.process_time() - c0
        lme4_s, lme4_m2ll, lme4_cpu = ref["seconds_default"], ref["criterion_default"], None
        if live:   # interleaved: lme4 right after the native fit
            lm = run_lme4_battery(p, p.parent / f"{ref['data']}.csv", timeout)
            lme4_s, lme4_m2ll, lme4_cpu = lm["seconds"], lm["m2ll"], lm["cpu"]
        rows.append({"model": ref["id"], "native_s": round(sec, 3), "lme4_s": lme4_s,
                     "ratio": round(lme4_s / sec, 2), "native_cpu": round(cpu, 3),
                     "lme4_cpu": lme4_cpu,
                     "cpu_ratio": None if lme4_cpu is None else round(lme4_cpu / cpu, 2),
                     "m2ll_native": -2 * m.loglik,
                     "m2ll_lme4_default": lme4_m2ll, "lme4_timing": "live" if live else "stored"})
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--battery", action="store_true")
    ap.add_argument("--battery-live", action="store_true",
                    help="time lme4 on each battery model now, right after the native fit")
    ap.add_argument("--only", nargs="*", default=None, help="battery model ids")
    ap.add_argument("--skip-decisions", action="store_true")
    ap.add_argument("--r-timeout", type=float, default=1800)
    ap.add_argument("--json", type=str, default=None)
    a = ap.parse_args()
    print("uptime:", os.popen("uptime").read().strip(), flush=True)
    formula = "error ~ gender + (1 | speaker) + (1 | attack)"
    out: dict = {"rows": a.rows, "runs": []}
    d = None if a.skip_decisions else decision_table(a.rows)
    with tempfile.TemporaryDirectory() as tmp:
        csv = Path(tmp) / "decisions.csv"
        if d is not None:
            d.to_csv(csv, index=False)
        for r in range(0 if d is None else a.reps):
            nat = run_native(formula, d)
            print("native", nat, flush=True)
            lm = run_lme4(formula, csv, a.r_timeout)
            print("lme4  ", lm, flush=True)
            out["runs"].append({"native": nat, "lme4": lm, "ratio": lm["seconds"] / nat["seconds"]})
            print(f"rep {r}: native {nat['seconds']:.2f} s, lme4 {lm['seconds']:.2f} s, "
                  f"ratio {lm['seconds'] / nat['seconds']:.1f}; -2logLik native "
                  f"{nat['m2ll']:.4f} lme4 {lm['m2ll']:.4f}", flush=True)
    if a.battery or a.battery_live:
        out["battery"] = battery(live=a.battery_live, only=a.only, timeout=a.r_timeout)
    print("uptime:", os.popen("uptime").read().strip(), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
