"""scoremix (native engine) vs lme4: fit time and criterion for each model of a battery.

Usage::

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python benchmarks/lme_battery_speed.py \\
        [--set battery|extra|all] [--only NAME ...] [--no-insteval] [--reps 3] [--json rows.json]

Models: ``battery`` is the lme4-parity battery of issue 12 (``tests/data/battery/``: 70
models from lme4's, nlme's and lmerTest's test suites and textbook data, with R's column
classes and lme4's tight optima); ``extra`` adds models that are not in it (full InstEval
with ``(1 | s) + (service | d)`` and ``(1 | s) + (1 | d) + (1 | dept)``, sleepstudy with a
numeric grouping factor, Pixel), whose data and tight optima this script gets from R
(``r_scripts/battery_speed.R``).  Default: ``all``.

Timing: scoremix around ``scoremix.lmer(formula, data, ...)`` (model frame included, as
lme4's time includes its own), lme4 around the ``lmer()`` call at its default settings inside
R, both the median (``--stat min``: the minimum) over ``reps`` calls (default 5; full
InstEval: 1).  With rpy2, lme4 runs in-process and
each lme4 call is interleaved with a scoremix call, so both see the same machine load;
without rpy2 (``--no-rpy2``), lme4 is timed in one Rscript batch for the extra models and the
battery's stored lme4 times (``refs/<id>.json``: ``lme4_time_s``) are used for the battery.
``ratio`` = scoremix / lme4 (below 1: scoremix faster).  ``Δcrit`` is scoremix's REML
criterion (or ML deviance) minus lme4's *tight* optimum, relative; the acceptance criterion
is ``Δcrit ≤ 1e-10``.  The BLAS of both sides is printed first (R's from ``sessionInfo()``).
"""

from __future__ import annotations

import argparse
import json
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
sys.path.insert(0, str(ROOT / "tests"))   # battery_helpers: the battery's data sets
BATTERY = ROOT / "tests" / "data" / "battery"

from scoremix.lme.api import lmer  # noqa: E402

#: models not in the battery: name, data set, formula, REML, factor columns, reps
EXTRA = [
    ("sleepstudy (Days|Subject)+(1|Days)", "sleepstudy", "Reaction ~ Days + (Days | Subject) + (1 | fDays)", True, ["Subject", "fDays"], 5),
    ("Pixel (day|Dog)+(1|Dog:Side)", "Pixel", "pixel ~ day + day2 + (day | Dog) + (1 | Dog:Side)", True, ["Dog", "Side"], 5),
    ("InstEval (1|s)+(1|d)+(1|dept)", "InstEval", "y ~ service + (1 | s) + (1 | d) + (1 | dept)", True, ["s", "d", "dept"], 1),
    ("InstEval (1|s)+(service|d)", "InstEval", "y ~ service + (1 | s) + (service | d)", True, ["s", "d", "dept"], 1),
]


def run_r(models: list[dict], outdir: Path, timing: bool) -> dict:
    spec = outdir / "models.json"
    spec.write_text(json.dumps(models))
    cmd = ["Rscript", str(ROOT / "r_scripts" / "battery_speed.R"), str(spec), str(outdir)]
    subprocess.run(cmd + ([] if timing else ["--no-timing"]), check=True)
    return json.loads((outdir / "lme4_times.json").read_text())


def rpy2_timers():
    """``(extra, battery)`` timers of one in-process ``lmer()`` call via rpy2 (seconds), or
    ``None`` when rpy2 is not available: ``extra(csv, formula, REML, factors)`` and
    ``battery(model_dict)``."""
    try:
        import rpy2.robjects as ro
        ro.r["source"](str(ROOT / "r_scripts" / "battery_speed.R"))
        if (ROOT / "r_scripts" / "battery.R").exists():
            ro.r["source"](str(ROOT / "r_scripts" / "battery.R"))
    except Exception:  # noqa: BLE001 - any rpy2/R start-up problem: fall back to Rscript
        return None
    fx, fb = ro.globalenv["smx_time_lmer"], ro.globalenv["smx_time_battery"]

    def extra(csv: Path, formula: str, reml: bool, factors: list[str]) -> float:
        return float(fx(str(csv), formula, reml, ro.StrVector(factors))[0])

    def battery(m: dict) -> float:
        return float(fb(str(BATTERY / "data"), json.dumps(m))[0])
    return extra, battery


def load_data(outdir: Path, name: str, factors: list[str]) -> pd.DataFrame:
    d = pd.read_csv(outdir / f"{name}.csv")
    for c in factors:
        d[c] = d[c].astype(str)
    return d


def time_scoremix(formula: str, d: pd.DataFrame, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        fit = lmer(formula, d, **kwargs)
        return time.perf_counter() - t0, fit


def battery_rows() -> list[dict]:
    """The battery's models with their tight optima and stored lme4 times."""
    if not (BATTERY / "models.json").exists():
        print(f"note: {BATTERY} not found; the battery is skipped")
        return []
    rows = []
    for m in json.loads((BATTERY / "models.json").read_text()):
        ref = json.loads((BATTERY / "refs" / f"{m['id']}.json").read_text())
        rows.append(dict(name=m["id"], model=m, reps=5,
                         criterion_tight=ref["criterion"], lme4_time_stored=ref.get("lme4_time_s")))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", choices=["battery", "extra", "all"], default="all")
    ap.add_argument("--only", nargs="*", help="substrings of model names to run")
    ap.add_argument("--no-insteval", action="store_true", help="skip the full InstEval models")
    ap.add_argument("--reps", type=int, default=None, help="override the repetitions of small models")
    ap.add_argument("--json", type=Path, help="write the rows as JSON")
    ap.add_argument("--stat", choices=["median", "min"], default="median",
                    help="statistic of the repetitions reported for each side (default median)")
    ap.add_argument("--no-rpy2", action="store_true",
                    help="no in-process lme4: Rscript batch for the extra models, stored times "
                         "for the battery")
    a = ap.parse_args(argv)
    extra = [dict(name=n, data=ds, formula=f, REML=r, factors=fc, reps=rp)
             for n, ds, f, r, fc, rp in EXTRA] if a.set in ("extra", "all") else []
    battery = battery_rows() if a.set in ("battery", "all") else []
    if a.only:
        extra = [r for r in extra if any(s in r["name"] for s in a.only)]
        battery = [r for r in battery if any(s in r["name"] for s in a.only)]
    if a.no_insteval:
        extra = [r for r in extra if r["data"] != "InstEval"]
    if a.reps is not None:
        for r in extra + battery:
            r["reps"] = 1 if r.get("data") == "InstEval" else a.reps
    timers = None if a.no_rpy2 else rpy2_timers()
    print("lme4 timed " + ("in-process through rpy2, interleaved with scoremix"
                           if timers else "in one Rscript batch (extra models) / stored times (battery)")
          + f"; {a.stat} over the repetitions")
    try:
        import os
        print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    except OSError:
        pass
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        r_out = run_r(extra, tmp, timing=timers is None) if extra else {}
        if (tmp / "r_session.json").exists():
            sess = json.loads((tmp / "r_session.json").read_text())
            print(f"\nR: {sess['R']}, lme4 {sess['lme4']}\n  BLAS: {sess['BLAS']}\n  LAPACK: {sess['LAPACK']}")
        elif battery:
            env = json.loads((BATTERY / "refs" / f"{battery[0]['name']}.json").read_text()).get("timing_env", {})
            print(f"\nR (battery references): {env.get('R')}, lme4 {env.get('lme4')}\n"
                  f"  BLAS: {env.get('blas')}\n  LAPACK: {env.get('lapack')}")
        try:
            cfg = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
            print(f"numpy {np.__version__}: BLAS {cfg.get('name')} {cfg.get('version', '')}")
        except Exception:  # noqa: BLE001 - older numpy
            print(f"numpy {np.__version__}")
        print()
        print("| model | n | lme4 (s) | scoremix (s) | ratio | Δcrit vs tight lme4 (rel.) | evals |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in battery + extra:
            if "model" in r:   # battery
                from battery_helpers import fit_kwargs, load_dataset
                m = r["model"]
                d = load_dataset(m["dataset"])
                formula, kwargs, tight = m["formula"], fit_kwargs(m), r["criterion_tight"]
                lme4_call = (lambda m=m: timers[1](m)) if timers else None
                stored = r["lme4_time_stored"]
            else:
                d = load_data(tmp, r["data"], r["factors"])
                formula, kwargs, tight = r["formula"], dict(REML=r["REML"]), r_out[r["name"]]["criterion_tight"]
                lme4_call = ((lambda r=r: timers[0](tmp / f"{r['data']}.csv", r["formula"], r["REML"],
                                                     r["factors"])) if timers else None)
                stored = r_out[r["name"]].get("time_s")
            tsl, tr = [], []
            try:
                for _ in range(r["reps"]):
                    if lme4_call is not None:
                        tr.append(lme4_call())
                    t, fit = time_scoremix(formula, d, **kwargs)
                    tsl.append(t)
            except Exception as e:  # noqa: BLE001 - report and go on with the battery
                print(f"| {r['name']} | – | – | – | – | {type(e).__name__}: {e} | – |", flush=True)
                continue
            agg = np.median if a.stat == "median" else np.min
            ts = float(agg(tsl))
            t_lme4 = float(agg(tr)) if tr else stored
            crit = -2 * fit.loglik
            rel = (crit - tight) / abs(tight)
            ratio = ts / t_lme4 if t_lme4 else np.nan
            out.append(dict(name=r["name"], n=fit.nobs, lme4_s=t_lme4, scoremix_s=ts, ratio=ratio,
                            lme4_all_s=tr, scoremix_all_s=tsl, stat=a.stat,
                            crit=crit, crit_lme4_tight=tight, rel_diff=rel,
                            n_eval=fit.fit_info.get("n_eval"),
                            fit_info={k: v for k, v in fit.fit_info.items() if k.startswith("time")}))
            print(f"| {r['name']} | {fit.nobs} | {t_lme4:.3f} | {ts:.3f} | {ratio:.2f} | "
                  f"{rel:+.1e} | {fit.fit_info.get('n_eval')} |", flush=True)
    slower = [o["name"] for o in out if o["ratio"] > 1]
    worse = [o["name"] for o in out if o["rel_diff"] > 1e-10]
    ratios = np.array([o["ratio"] for o in out if np.isfinite(o["ratio"])])
    if ratios.size:
        print(f"\n{len(out)} models; ratio median {np.median(ratios):.2f}, max {ratios.max():.2f}; "
              f"slower than lme4: {slower or 'none'}; criterion above lme4's tight optimum "
              f"+ 1e-10 (relative): {worse or 'none'}")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
