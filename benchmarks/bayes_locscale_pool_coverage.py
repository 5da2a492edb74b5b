"""Coverage of the true EER by fixed-transform and transform-pooled posterior intervals
(``posterior_eer(transform_uncertainty="bootstrap")``, ``scoremix.bayes.locscale_pool``).

R data sets from a known stratified location-scale model observed through
``score = expit(z / 2)`` (the simulator of ``tests/test_bayes_locscale_pool.py``: 6 speakers,
bona fide + 2 attacks, 12 trials per cell); the true EER is the crossing of the true class
mixtures given the realised speaker effects; per data set the 95 % interval of the latent-crossing
EER with the transforms fixed and pooled over K transform replicates.  Writes
``docs/data/bayes_locscale_pool_coverage.json``.

    nice -n 5 python3 benchmarks/bayes_locscale_pool_coverage.py --reps 20 --k 6
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
OUT = HERE.parent / "docs" / "data" / "bayes_locscale_pool_coverage.json"


def main(reps: int, k: int, draws: int, start: int) -> None:
    from test_bayes_locscale_pool import _simulate_known

    from scoremix.bayes.locscale import bayes_locscale
    from scoremix.locscale import LocScaleSpec, fit_locscale

    spec = LocScaleSpec(strata=("attack",), positive="bonafide")
    rows = []
    la0 = " ".join(f"{x:.1f}" for x in os.getloadavg())
    t0 = time.perf_counter()
    for r in range(start, start + reps):
        df, truth = _simulate_known(1000 + r)
        fit = fit_locscale(df, spec)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = bayes_locscale(fit, draws=draws, tune=draws, chains=1, cores=1, seed=r)
        tab = res.posterior_eer(thresholds="latent", max_draws=draws, transform_uncertainty="bootstrap",
                                n_transform=k, seed=r).loc["all"]
        row = dict(rep=r, truth=truth, lo=tab["lo"], hi=tab["hi"], lo_fixed=tab["lo_fixed"], hi_fixed=tab["hi_fixed"],
                   covers=bool(tab["lo"] <= truth <= tab["hi"]),
                   covers_fixed=bool(tab["lo_fixed"] <= truth <= tab["hi_fixed"]))
        rows.append(row)
        print(row, flush=True)
        cov = np.mean([x["covers"] for x in rows]), np.mean([x["covers_fixed"] for x in rows])
        w = np.mean([x["hi"] - x["lo"] for x in rows]), np.mean([x["hi_fixed"] - x["lo_fixed"] for x in rows])
        OUT.parent.mkdir(exist_ok=True)
        OUT.write_text(json.dumps(dict(reps=len(rows), k=k, draws=draws, coverage_pooled=cov[0], coverage_fixed=cov[1],
                                       width_pooled=w[0], width_fixed=w[1], seconds=time.perf_counter() - t0,
                                       load_before=la0, load_now=" ".join(f"{x:.1f}" for x in os.getloadavg()),
                                       rows=rows), indent=1, default=float))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--k", type=int, default=6)
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--start", type=int, default=0)
    a = ap.parse_args()
    main(a.reps, a.k, a.draws, a.start)
