"""Speed as a new user gets it: no thread variables set, and another CPU-bound process running.

Usage (from the repository root)::

    python benchmarks/threads_under_load.py [--n 1000000] [--reps 3] [--no-battery] [--json out.json]

The script removes ``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and
``SCOREMIX_BLAS_THREADS`` from its environment (re-running itself without them when any is
set), so the BLAS starts at its default of one thread per core, and starts one busy-looping
child process for the whole run (the "second CPU-bound process").  The load average is
printed at the start and the end.  Then:

1. the 1M-row detector LMM of ``benchmarks/lme_speed.py`` (``score ~ label * x +
   (1|speaker) + (0 + spoof|attack)``, 1000 speakers × 13 attacks), REML:
   * scoremix as shipped (its hot paths choose their BLAS threads, ``docs/performance.md``),
   * scoremix with ``sm.set_threads(None)`` (the BLAS left at its default: the old behaviour),
   * lme4 (``r_scripts/fit_lme4.R``, timed inside R around ``lmer()``);
   each ``lmer`` call timed with the model frame (build + fit), median of ``--reps`` runs;
2. the lme4 battery of ``benchmarks/lme_battery_speed.py`` (``--set battery``), model by
   model against lme4, in the same environment and under the same load.

On a shared machine the numbers are indicative: state the load beside them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "SCOREMIX_BLAS_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def _busy(stop_at: float) -> None:
    x = 0
    while time.time() < stop_at:
        x = (x * 1103515245 + 12345) % 2147483648


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2]


def detector_lmm(n: int, reps: int) -> dict:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import lme_speed as ls

    import scoremix as sm

    formula = "score ~ label * x + (1|speaker) + (0 + spoof|attack)"
    d = ls.sim_data(n)
    out: dict = {"n": n, "formula": formula}
    for name, setting in (("scoremix (threads chosen)", "default"), ("scoremix (BLAS default threads)", None)):
        sm.set_threads(1 if setting == "default" else None)
        times, crit = [], None
        for _ in range(reps):
            t0 = time.perf_counter()
            fit = sm.lmer(formula, d)
            times.append(time.perf_counter() - t0)
            crit = fit.to_dict()["reml_criterion"]
        out[name] = {"seconds": _median(times), "all": times, "crit": crit}
        print(f"  {name}: {_median(times):.3f} s (runs {', '.join(f'{t:.3f}' for t in times)}), "
              f"load {_load()}", flush=True)
    sm.set_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        csv = Path(tmp) / "d.csv"
        d.to_csv(csv, index=False)
        r = ls.run_lme4(formula, csv, Path(tmp))
    out["lme4"] = r
    if isinstance(r, dict):
        print(f"  lme4 (in R): {r['seconds']:.3f} s, load {_load()}", flush=True)
        for k in ("scoremix (threads chosen)", "scoremix (BLAS default threads)"):
            out[k]["speedup_vs_lme4"] = r["seconds"] / out[k]["seconds"]
            out[k]["rel_crit_dev"] = abs(out[k]["crit"] - r["crit"]) / abs(r["crit"])
            print(f"  {k}: {out[k]['speedup_vs_lme4']:.0f}x faster than lme4 "
                  f"(REML criterion rel. dev. {out[k]['rel_crit_dev']:.1e})")
    else:
        print(f"  lme4: {r}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--battery-reps", type=int, default=3)
    ap.add_argument("--no-battery", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if any(v in os.environ for v in THREAD_VARS):
        env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
        os.execve(sys.executable, [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])], env)
    import numpy  # noqa: F401  (load the BLAS before listing it)
    import scipy.linalg  # noqa: F401
    import threadpoolctl

    print("thread variables: none set (" + ", ".join(THREAD_VARS) + ")")
    print("BLAS at start: " + ", ".join(f"{i['internal_api']} {i['num_threads']} threads"
                                         for i in threadpoolctl.threadpool_info()))
    print(f"CPU cores: {os.cpu_count()}; load average before the load process: {_load()}")
    load = mp.Process(target=_busy, args=(time.time() + 24 * 3600,), daemon=True)
    load.start()
    time.sleep(2.0)
    res: dict = {"cores": os.cpu_count(), "load_start": os.getloadavg()}
    try:
        print(f"one CPU-bound process started (pid {load.pid}); load average {_load()}\n")
        print(f"1. detector LMM, {args.n:,} rows")
        res["detector"] = detector_lmm(args.n, args.reps)
        if not args.no_battery:
            print("\n2. lme4 battery (benchmarks/lme_battery_speed.py --set battery), same environment and load")
            sys.path.insert(0, str(ROOT / "benchmarks"))
            import lme_battery_speed as lb

            with tempfile.TemporaryDirectory() as tmp:
                js = Path(tmp) / "battery.json"
                lb.main(["--set", "battery", "--reps", str(args.battery_reps), "--json", str(js)])
                rows = json.loads(js.read_text()) if js.exists() else []
            res["battery"] = rows
            ratios = [r["ratio"] for r in rows if isinstance(r.get("ratio"), (int, float))]
            slower = [r["name"] for r in rows if isinstance(r.get("ratio"), (int, float)) and r["ratio"] > 1]
            if ratios:
                print(f"\nbattery: {len(ratios)} models, scoremix/lme4 time ratio max {max(ratios):.2f}; "
                      f"slower than lme4: {slower or 'none'}")
    finally:
        load.terminate()
        load.join()
    res["load_end"] = os.getloadavg()
    print(f"\nload average at the end: {_load()}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
