"""Speed of ``scoremix.lmer`` with lme4 2.0's ``cs()``/``ar1()`` terms beside glmmTMB, interleaved.

Usage (from the repository root)::

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/lmer_structured_speed.py \\
        [--groups 2000] [--times 6] [--reps 2]

Data: ``groups`` subjects × ``times`` visits × 2 replicates, heterogeneous SDs and
``ρ^|i-j|`` (ρ = 0.5) random effects, σ = 0.7, a covariate (seed 11).  Models (REML):
``y ~ x + time + ar1(0 + time | g)`` and ``y ~ x + time + cs(0 + time | g)``.  Each
repetition fits scoremix then glmmTMB (R in a child process, one BLAS thread, timing the
``glmmTMB()`` call only).  Columns: seconds of each, ratio glmmTMB / scoremix, −2 logLik of
both (scoremix's must be no higher).  Debian's lme4 1.1 has no ``cs()``/``ar1()``, so
glmmTMB (which fits the same models) is the reference.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import scoremix as sm  # noqa: E402

R_FIT = r"""
suppressMessages({library(glmmTMB); library(jsonlite)})
a <- commandArgs(trailingOnly = TRUE)
d <- read.csv(a[1], stringsAsFactors = TRUE)
t0 <- proc.time()[["elapsed"]]
m <- glmmTMB(as.formula(a[2]), data = d, REML = TRUE)
t1 <- proc.time()[["elapsed"]]
cat(toJSON(list(seconds = t1 - t0, m2ll = as.numeric(-2 * logLik(m))), auto_unbox = TRUE,
           digits = NA))
"""


def design(groups: int, times: int, seed: int = 11) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    lag = np.abs(np.subtract.outer(np.arange(times), np.arange(times)))
    sd = np.linspace(0.8, 1.2, times)
    L = np.linalg.cholesky(np.outer(sd, sd) * 0.5 ** lag)
    b = rng.standard_normal((groups, times)) @ L.T
    g = np.repeat(np.arange(groups), 2 * times)
    t = np.tile(np.arange(times), 2 * groups)
    x = rng.standard_normal(g.size).round(4)
    y = 2 + 0.5 * x + 0.3 * t + b[g, t] + 0.7 * rng.standard_normal(g.size)
    return pd.DataFrame({"y": y.round(6), "x": x, "g": [f"g{i:05d}" for i in g],
                         "time": [f"t{i}" for i in t]})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=2000)
    ap.add_argument("--times", type=int, default=6)
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    d = design(a.groups, a.times)
    with tempfile.TemporaryDirectory() as tmp:
        csv = Path(tmp) / "d.csv"
        d.to_csv(csv, index=False)
        rs = Path(tmp) / "fit.R"
        rs.write_text(R_FIT)
        print(f"{len(d)} rows, {a.groups} groups x {a.times} times")
        for f in ("y ~ x + time + ar1(0 + time | g)", "y ~ x + time + cs(0 + time | g)"):
            for r in range(a.reps):
                t0 = time.perf_counter()
                m = sm.lmer(f, d)
                ts = time.perf_counter() - t0
                out = subprocess.run(["Rscript", str(rs), str(csv), f], capture_output=True,
                                     text=True, env={"OPENBLAS_NUM_THREADS": "1",
                                                     "OMP_NUM_THREADS": "1",
                                                     "PATH": "/usr/bin:/bin"})
                ref = json.loads(out.stdout.strip().splitlines()[-1])
                print(f"{f:40s} rep {r + 1}: scoremix {ts:6.2f} s  glmmTMB {ref['seconds']:6.2f} s  "
                      f"ratio {ref['seconds'] / ts:5.1f}  -2logLik {-2 * m.loglik:.6f} "
                      f"vs {ref['m2ll']:.6f}")


if __name__ == "__main__":
    main()
