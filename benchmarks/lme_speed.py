"""Speed of scoremix's native LMM engine against lme4, statsmodels and PyPI peers.

Usage (from the repository root)::

    pip install mixedlm lme-python          # optional peers; skipped with a note if absent
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python benchmarks/lme_speed.py \\
        [--sizes 20000 200000 1000000] [--no-insteval] [--sm-timeout 120] [--json out.json]

Data

* simulated detector scores (:func:`scoremix.simulate.simulate_trials`, 1000 speakers ×
  13 attacks, seed = N), model
  ``score ~ label * x + (1|speaker) + (0 + spoof|attack)`` with ``spoof = 1 - y`` (the same
  model as ``(0 + dummy(label, "spoof")|attack)``, written without ``dummy()`` so that every
  engine can parse it); ``label`` is passed as plain strings so every engine uses
  "bonafide" as the reference level;
* InstEval (exported from R), ``y ~ service + (1|s) + (1|d) + (1|dept)``.

Engines (REML, default settings of each)

* native: ``build_model_spec`` + ``fit_spec`` ("build+fit") and the fit alone;
* lme4: ``r_scripts/fit_lme4.R`` at lme4's defaults, timed inside R (``timing_s``: the
  ``lmer()`` call only, no R start-up or CSV reading);
* statsmodels: only at the smallest N, in a child process with a time limit
  (``--sm-timeout``);
* ``mixedlm`` and ``lme_python`` (PyPI) when importable: their whole ``lmer`` call, in a
  child process with a time limit (``--peer-timeout``).

Columns: fit seconds, ratio = engine seconds / native build+fit seconds, and the largest
relative deviation from lme4 of the REML criterion and of the fixed effects.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
R_DIR = ROOT / "r_scripts"
SIM_FORMULA = "score ~ label * x + (1|speaker) + (0 + spoof|attack)"
INSTEVAL_FORMULA = "y ~ service + (1|s) + (1|d) + (1|dept)"


def r_blas() -> str:
    """BLAS/LAPACK lines of R's ``sessionInfo()``."""
    try:
        out = subprocess.run(["Rscript", "-e", "si <- sessionInfo(); cat(si$BLAS, si$LAPACK, sep='\\n')"],
                             capture_output=True, text=True, timeout=120)
        return out.stdout.strip() or out.stderr.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"R not available ({exc})"


def sim_data(n: int) -> pd.DataFrame:
    from scoremix.simulate import simulate_trials

    t = simulate_trials(n, 1000, 13, seed=n).table
    d = pd.DataFrame({
        "score": t["score"].to_numpy(dtype=float),
        "label": t["label"].astype(str).to_numpy(),
        "x": t["x"].to_numpy(dtype=float),
        "speaker": t["speaker"].astype(str).to_numpy(),
        "attack": t["attack"].astype(str).to_numpy(),
    })
    d["spoof"] = (d["label"] == "spoof").astype(float)
    return d


def insteval_data(tmp: Path) -> pd.DataFrame | None:
    try:
        subprocess.run(["Rscript", str(R_DIR / "export_datasets.R"), str(tmp), "insteval"],
                       check=True, capture_output=True, timeout=300)
    except (OSError, subprocess.SubprocessError):
        return None
    d = pd.read_csv(tmp / "InstEval.csv")
    for c in ("s", "d", "dept"):
        d[c] = d[c].astype(str)
    return d[["y", "service", "s", "d", "dept"]]


def run_native(formula: str, d: pd.DataFrame) -> dict[str, Any]:
    from scoremix.lme.api import fit_spec
    from scoremix.lme.model_frame import build_model_spec

    t0 = time.perf_counter()
    spec = build_model_spec(formula, d)
    t1 = time.perf_counter()
    res = fit_spec(spec, REML=True).to_dict()
    t2 = time.perf_counter()
    return {"seconds": t2 - t0, "fit_only": t2 - t1, "crit": res["reml_criterion"],
            "fixef": res["fixef"]}


def run_lme4(formula: str, csv: Path, tmp: Path) -> dict[str, Any] | str:
    out = tmp / "lme4.json"
    try:
        subprocess.run(["Rscript", str(R_DIR / "fit_lme4.R"), str(csv), formula, str(out)],
                       check=True, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"failed: {exc}"
    r = json.loads(out.read_text())
    return {"seconds": r["timing_s"], "crit": r["reml_criterion"], "fixef": r["fixef"]}


_CHILD = """
import json, sys, time, pandas as pd
engine, csv, formula, strcols = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
d = pd.read_csv(csv)
for c in strcols:
    if c in d:
        d[c] = d[c].astype(str)
if engine == "statsmodels":
    from scoremix.lme.model_frame import build_model_spec
    from scoremix.lme.backends import statsmodels_backend
    spec = build_model_spec(formula, d)
    t = time.perf_counter(); r = statsmodels_backend.fit_dict(spec, REML=True); t = time.perf_counter() - t
    out = {"seconds": t, "crit": r["reml_criterion"], "fixef": r["fixef"]}
elif engine == "mixedlm":
    import mixedlm
    t = time.perf_counter(); r = mixedlm.lmer(formula, d, REML=True); t = time.perf_counter() - t
    fe = r.fixef()
    out = {"seconds": t, "crit": float(r.REMLcrit()), "fixef": {k: float(v) for k, v in dict(fe).items()}}
elif engine == "lme_python":
    import lme_python
    t = time.perf_counter(); r = lme_python.lmer(formula, d, True); t = time.perf_counter() - t
    out = {"seconds": t, "crit": float(r.reml_criterion),
           "fixef": dict(zip(r.fixed_names, map(float, r.coefficients)))}
print(json.dumps(out))
"""

STR_COLS = "speaker,attack,label,s,d,dept"


def run_child(engine: str, csv: Path, formula: str, timeout: float) -> dict[str, Any] | str:
    """Run one engine in a child process (time limit; only the fit call is timed)."""
    module = {"mixedlm": "mixedlm", "lme_python": "lme_python"}.get(engine)
    if module is not None and importlib.util.find_spec(module) is None:
        return f"not installed (pip install {module.replace('_', '-')})"
    try:
        out = subprocess.run([sys.executable, "-c", _CHILD, engine, str(csv), formula, STR_COLS],
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"did not finish in {timeout:.0f} s"
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines()
        return "failed: " + (lines[-1] if lines else f"exit {out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def deviations(res: dict[str, Any], ref: dict[str, Any] | str) -> tuple[float, float]:
    if not isinstance(ref, dict):
        return float("nan"), float("nan")
    dc = abs(res["crit"] - ref["crit"]) / abs(ref["crit"])
    dfe = max((abs(res["fixef"].get(k, np.nan) - v) / abs(v) for k, v in ref["fixef"].items()),
              default=float("nan"))
    return dc, dfe


def bench_one(name: str, formula: str, d: pd.DataFrame, tmp: Path, with_sm: bool,
              sm_timeout: float, peer_timeout: float) -> list[dict[str, Any]]:
    csv = tmp / f"{name}.csv"
    d.to_csv(csv, index=False)
    rows: list[dict[str, Any]] = []
    nat = run_native(formula, d)
    ref = run_lme4(formula, csv, tmp)
    engines: list[tuple[str, dict[str, Any] | str]] = [("native (build+fit)", nat),
                                                       ("native (fit only)", {**nat, "seconds": nat["fit_only"]}),
                                                       ("lme4 (in R)", ref)]
    if with_sm:
        engines.append(("statsmodels", run_child("statsmodels", csv, formula, sm_timeout)))
    engines.append(("mixedlm", run_child("mixedlm", csv, formula, peer_timeout)))
    engines.append(("lme_python", run_child("lme_python", csv, formula, peer_timeout)))
    for eng, r in engines:
        if isinstance(r, dict):
            dc, dfe = deviations(r, ref)
            rows.append({"data": name, "n": len(d), "engine": eng, "seconds": r["seconds"],
                         "ratio": r["seconds"] / nat["seconds"], "crit_dev": dc, "fixef_dev": dfe,
                         "note": ""})
        else:
            rows.append({"data": name, "n": len(d), "engine": eng, "seconds": float("nan"),
                         "ratio": float("nan"), "crit_dev": float("nan"),
                         "fixef_dev": float("nan"), "note": r})
        print(_fmt(rows[-1]), flush=True)
    return rows


HEADER = ("| data | N | engine | fit s | ratio vs native | max rel dev REML crit vs lme4 "
          "| max rel dev fixef vs lme4 | note |\n|---|---:|---|---:|---:|---:|---:|---|")


def _fmt(r: dict[str, Any]) -> str:
    def g(v: float, f: str) -> str:
        return "–" if not np.isfinite(v) else format(v, f)
    return (f"| {r['data']} | {r['n']:,} | {r['engine']} | {g(r['seconds'], '.3f')} | "
            f"{g(r['ratio'], '.2f')} | {g(r['crit_dev'], '.1e')} | {g(r['fixef_dev'], '.1e')} | "
            f"{r['note']} |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="LMM speed benchmark (prints a markdown table)")
    ap.add_argument("--sizes", type=int, nargs="*", default=[20_000, 200_000, 1_000_000])
    ap.add_argument("--no-insteval", action="store_true")
    ap.add_argument("--sm-timeout", type=float, default=120.0)
    ap.add_argument("--peer-timeout", type=float, default=300.0)
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    a = ap.parse_args(argv)
    print("R BLAS:", r_blas().replace("\n", " | "))
    print("threads: OPENBLAS_NUM_THREADS =", os.environ.get("OPENBLAS_NUM_THREADS"),
          ", CPUs:", os.cpu_count())
    print(HEADER, flush=True)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        for k, n in enumerate(a.sizes):
            rows += bench_one(f"sim{n // 1000}k", SIM_FORMULA, sim_data(n), tmp, k == 0,
                              a.sm_timeout, a.peer_timeout)
        if not a.no_insteval:
            d = insteval_data(tmp)
            if d is None:
                print("| InstEval | – | – | – | – | – | – | skipped: R/lme4 not available |")
            else:
                rows += bench_one("InstEval", INSTEVAL_FORMULA, d, tmp, False, a.sm_timeout,
                                  a.peer_timeout)
    if a.json is not None:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
