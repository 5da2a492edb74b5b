"""scoremix (native engine) vs lme4: fit time and criterion for each model of a battery.

Usage::

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python benchmarks/lme_battery_speed.py \\
        [--only NAME ...] [--no-insteval] [--reps 3] [--json rows.json]

Both engines are timed in the same run on the same CSV files (exported from R by
``r_scripts/battery_speed.R``): lme4 inside R (the ``lmer()`` call alone, default
``lmerControl``, minimum over ``reps`` calls), scoremix around ``scoremix.lmer(formula,
data)`` (model frame included, as lme4's time includes its own; minimum over ``reps``
calls).  ``ratio`` = scoremix / lme4 (below 1: scoremix faster).  ``Δcrit`` is scoremix's
REML criterion (or ML deviance) minus the *tight* lme4 optimum (bobyqa restarted from lme4's
optimum with ``rhoend = 1e-12``), relative; the acceptance criterion is ``Δcrit ≤ 1e-10``.
The BLAS of both sides is printed first (R's from ``sessionInfo()``).

Models: the correlated-slope models of issue 12 (sleepstudy, Orthodont, Oxboys 3×3,
Machines, InstEval ``(1 | s) + (service | d)``) and the models of the existing tests
(Penicillin, Pastes, sleepstudy, InstEval scalar terms), plus a few textbook ones.  When
``tests/data/battery/`` exists (the lme4 battery of issue 12), pass ``--battery`` to add its
models (``models.json`` there: name, data, formula, REML).
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

from scoremix.lme.api import lmer  # noqa: E402

#: name, data set, formula (lme4 syntax understood by both), REML, factor columns, reps
MODELS = [
    ("sleepstudy (Days|Subject)", "sleepstudy", "Reaction ~ Days + (Days | Subject)", True, ["Subject"], 5),
    ("sleepstudy (Days|Subject) ML", "sleepstudy", "Reaction ~ Days + (Days | Subject)", False, ["Subject"], 5),
    ("sleepstudy (Days||Subject)", "sleepstudy", "Reaction ~ Days + (Days || Subject)", True, ["Subject"], 5),
    ("sleepstudy (Days|Subject)+(1|Days)", "sleepstudy", "Reaction ~ Days + (Days | Subject) + (1 | fDays)", True, ["Subject", "fDays"], 5),
    ("Orthodont age*Sex+(age|Subject)", "Orthodont", "distance ~ age * Sex + (age | Subject)", True, ["Subject"], 5),
    ("Oxboys 3x3 (age+age2|Subject)", "Oxboys", "height ~ age + age2 + (age + age2 | Subject)", True, ["Subject"], 5),
    ("Machines (Machine|Worker)", "Machines", "score ~ Machine + (Machine | Worker)", True, ["Worker"], 5),
    ("Machines (1|Worker)+(1|Worker:Machine)", "Machines", "score ~ Machine + (1 | Worker) + (1 | Worker:Machine)", True, ["Worker"], 5),
    ("BodyWeight Time*Diet+(Time|Rat)", "BodyWeight", "weight ~ Time * Diet + (Time | Rat)", True, ["Rat", "Diet"], 5),
    ("ChickWeight quadratic (Time|Chick)", "ChickWeight", "weight ~ Time + Time2 + (Time | Chick)", True, ["Chick"], 5),
    ("Pixel (day|Dog)+(1|Dog:Side)", "Pixel", "pixel ~ day + day2 + (day | Dog) + (1 | Dog:Side)", True, ["Dog", "Side"], 5),
    ("Penicillin (1|plate)+(1|sample)", "Penicillin", "diameter ~ 1 + (1 | plate) + (1 | sample)", True, [], 5),
    ("Pastes (1|batch/cask)", "Pastes", "strength ~ 1 + (1 | batch/cask)", True, [], 5),
    ("Dyestuff (1|Batch)", "Dyestuff", "Yield ~ 1 + (1 | Batch)", True, [], 5),
    ("Rail (1|Rail)", "Rail", "travel ~ 1 + (1 | Rail)", True, ["Rail"], 5),
    ("InstEval (1|s)+(1|d)+(1|dept)", "InstEval", "y ~ service + (1 | s) + (1 | d) + (1 | dept)", True, ["s", "d", "dept"], 1),
    ("InstEval (1|s)+(service|d)", "InstEval", "y ~ service + (1 | s) + (service | d)", True, ["s", "d", "dept"], 1),
]


def run_r(models: list[dict], outdir: Path, timing: bool) -> dict:
    spec = outdir / "models.json"
    spec.write_text(json.dumps(models))
    cmd = ["Rscript", str(ROOT / "r_scripts" / "battery_speed.R"), str(spec), str(outdir)]
    subprocess.run(cmd + ([] if timing else ["--no-timing"]), check=True)
    return json.loads((outdir / "lme4_times.json").read_text())


def rpy2_timer():
    """``(csv, formula, REML, factors) -> seconds`` of one in-process ``lmer()`` call via
    rpy2, or ``None`` when rpy2 is not available."""
    try:
        import rpy2.robjects as ro
    except Exception:  # noqa: BLE001 - any rpy2/R start-up problem: fall back to Rscript
        return None
    ro.r["source"](str(ROOT / "r_scripts" / "battery_speed.R"))
    fn = ro.globalenv["smx_time_lmer"]

    def timer(csv: Path, formula: str, reml: bool, factors: list[str]) -> float:
        return float(fn(str(csv), formula, reml, ro.StrVector(factors))[0])
    return timer


def load_data(outdir: Path, name: str, factors: list[str]) -> pd.DataFrame:
    d = pd.read_csv(outdir / f"{name}.csv")
    for c in factors:
        d[c] = d[c].astype(str)
    return d


def time_scoremix(formula: str, d: pd.DataFrame, reml: bool):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        fit = lmer(formula, d, REML=reml)
        return time.perf_counter() - t0, fit


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="*", help="substrings of model names to run")
    ap.add_argument("--no-insteval", action="store_true")
    ap.add_argument("--reps", type=int, default=None, help="override the repetitions of small models")
    ap.add_argument("--battery", action="store_true", help="add tests/data/battery/models.json")
    ap.add_argument("--json", type=Path, help="write the rows as JSON")
    ap.add_argument("--no-rpy2", action="store_true",
                    help="time lme4 in one Rscript batch instead of interleaved through rpy2")
    a = ap.parse_args(argv)
    rows = [dict(name=n, data=ds, formula=f, REML=r, factors=fc, reps=rp)
            for n, ds, f, r, fc, rp in MODELS]
    if a.battery:
        bat = ROOT / "tests" / "data" / "battery" / "models.json"
        if bat.exists():
            for m in json.loads(bat.read_text()):
                rows.append(dict(name=m["name"], data=m["data"], formula=m["formula"],
                                 REML=bool(m.get("REML", True)), factors=m.get("factors", []),
                                 reps=3))
        else:
            print(f"note: {bat} not found; running the built-in list only")
    if a.only:
        rows = [r for r in rows if any(s in r["name"] for s in a.only)]
    if a.no_insteval:
        rows = [r for r in rows if r["data"] != "InstEval"]
    if a.reps is not None:
        for r in rows:
            r["reps"] = a.reps if r["data"] != "InstEval" else 1
    import numpy as _np
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        timer = None if a.no_rpy2 else rpy2_timer()
        r_out = run_r(rows, tmp, timing=timer is None)
        print("lme4 timed " + ("in-process through rpy2, interleaved with scoremix (min over reps)"
                               if timer else "in one Rscript batch before scoremix (min over reps)"))
        sess = json.loads((tmp / "r_session.json").read_text())
        print(f"\nR: {sess['R']}, lme4 {sess['lme4']}\n  BLAS: {sess['BLAS']}\n  LAPACK: {sess['LAPACK']}")
        try:
            cfg = _np.show_config(mode="dicts")["Build Dependencies"]["blas"]
            print(f"numpy {_np.__version__}: BLAS {cfg.get('name')} {cfg.get('version', '')}")
        except Exception:  # noqa: BLE001 - older numpy
            print(f"numpy {_np.__version__}")
        print()
        print("| model | n | lme4 (s) | scoremix (s) | ratio | Δcrit vs tight lme4 (rel.) | evals |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        out = []
        for r in rows:
            d = load_data(tmp, r["data"], r["factors"])
            ref = r_out[r["name"]]
            ts, tr = np.inf, []
            for _ in range(r["reps"]):
                if timer is not None:
                    tr.append(timer(tmp / f"{r['data']}.csv", r["formula"], r["REML"], r["factors"]))
                t, fit = time_scoremix(r["formula"], d, r["REML"])
                ts = min(ts, t)
            if tr:
                ref["time_s"] = min(tr)
            crit = -2 * fit.loglik
            rel = (crit - ref["criterion_tight"]) / abs(ref["criterion_tight"])
            ratio = ts / ref["time_s"]
            out.append(dict(name=r["name"], n=len(d), lme4_s=ref["time_s"], scoremix_s=ts,
                            ratio=ratio, crit=crit, crit_lme4_tight=ref["criterion_tight"],
                            rel_diff=rel, n_eval=fit.fit_info.get("n_eval"),
                            fit_info={k: v for k, v in fit.fit_info.items() if k.startswith("time")}))
            print(f"| {r['name']} | {fit.nobs} | {ref['time_s']:.3f} | {ts:.3f} | {ratio:.2f} | "
                  f"{rel:+.1e} | {fit.fit_info.get('n_eval')} |", flush=True)
        slower = [o["name"] for o in out if o["ratio"] > 1]
        worse = [o["name"] for o in out if o["rel_diff"] > 1e-10]
        print(f"\nslower than lme4: {slower or 'none'}; criterion above lme4's tight optimum "
              f"+ 1e-10 (relative): {worse or 'none'}")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
