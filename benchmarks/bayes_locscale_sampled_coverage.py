"""Coverage of the true EER by fixed-transform and sampled-transform posterior intervals
(``bayes_locscale(..., transform="fixed" | "sampled")``, ``scoremix.bayes.locscale_sampled``).

The data sets of ``benchmarks/bayes_locscale_pool_coverage.py`` (same simulator and seeds
``1000 + r``: 6 speakers, bona fide + 2 attacks, 12 trials per cell, scores ``expit(z / 2)``;
true EER = crossing of the true class mixtures given the realised speaker effects), so the rows
pair with that benchmark's pooled intervals.  Per data set the 95 % interval of the
latent-crossing EER with the transforms fixed at ML and with a Bernstein deformation (order 6)
sampled.  Writes ``docs/data/bayes_locscale_sampled_coverage.json``.

    nice -n 5 python3 benchmarks/bayes_locscale_sampled_coverage.py --reps 20
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
OUT = HERE.parent / "docs" / "data" / "bayes_locscale_sampled_coverage.json"


def main(reps: int, draws: int, start: int, order: int) -> None:
    from test_bayes_locscale_pool import _simulate_known

    from scoremix.bayes.locscale import bayes_locscale
    from scoremix.locscale import LocScaleSpec, fit_locscale

    spec = LocScaleSpec(strata=("attack",), positive="bonafide")
    rows = []
    la0 = " ".join(f"{x:.1f}" for x in os.getloadavg())
    t0 = time.perf_counter()
    c0 = time.process_time()
    for r in range(start, start + reps):
        df, truth = _simulate_known(1000 + r)
        fit = fit_locscale(df, spec)
        tabs = {}
        for kind in ("fixed", "sampled"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = bayes_locscale(fit, draws=draws, tune=draws, chains=1, cores=1, seed=r, transform=kind,
                                     order=order)
            tabs[kind] = res.posterior_eer(thresholds="latent", max_draws=draws).loc["all"]
            if kind == "sampled":
                div = int(res.idata.sample_stats.diverging.sum())
                tau_h = float(res.draws["tau_h"].mean())
        f, s = tabs["fixed"], tabs["sampled"]
        row = dict(rep=r, truth=truth, empirical=float(f["empirical"]), lo_fixed=float(f["lo"]), hi_fixed=float(f["hi"]),
                   lo_sampled=float(s["lo"]), hi_sampled=float(s["hi"]), mean_fixed=float(f["mean"]),
                   mean_sampled=float(s["mean"]), covers_fixed=bool(f["lo"] <= truth <= f["hi"]),
                   covers_sampled=bool(s["lo"] <= truth <= s["hi"]), divergences=div, tau_h_mean=tau_h)
        rows.append(row)
        print(row, flush=True)
        cov = {k: float(np.mean([x[f"covers_{k}"] for x in rows])) for k in ("fixed", "sampled")}
        wid = {k: float(np.mean([x[f"hi_{k}"] - x[f"lo_{k}"] for x in rows])) for k in ("fixed", "sampled")}
        OUT.parent.mkdir(exist_ok=True)
        OUT.write_text(json.dumps(dict(reps=len(rows), draws=draws, order=order, coverage=cov, width=wid,
                                       seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - c0,
                                       load_before=la0, load_now=" ".join(f"{x:.1f}" for x in os.getloadavg()),
                                       rows=rows), indent=1))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--order", type=int, default=6)
    a = ap.parse_args()
    main(a.reps, a.draws, a.start, a.order)
