"""Speed of the location-scale score models (issue 19 acceptance; timings, never asserted in tests).

1. Gaussian location-scale mixed model (speaker location and log-SD per class, speaker ×
   stratum location) on 1M simulated rows: ``fit_locscale(..., LocScaleSpec(transform=False))``.
2. One location-scale transformation fit (one transform per class × attack) on an LA system
   (71,237 rows).
3. ``score_model`` (5 candidates, 4-fold speaker-grouped CV, then the chosen fit) on the same table.

    nice -n 5 python3 benchmarks/locscale_speed.py
Report the machine load (``uptime``) beside the numbers.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from locscale_helpers import simulate_ls  # noqa: E402
from speaker_holdout import DATA, system_table  # noqa: E402

from scoremix.locscale import LocScaleSpec, fit_locscale, score_model  # noqa: E402


def main() -> None:
    print("load:", os.getloadavg())
    d = simulate_ls(n_speakers=400, n_per_cell=625, strata_neg=3, omega=0.3, seed=0)   # 1.0M rows
    spec = LocScaleSpec(score="score", label="label", speaker="speaker", positive="bonafide", strata=("attack",),
                        speaker_by_stratum=("negative",), transform=False)
    t0 = time.perf_counter()
    f = fit_locscale(d, spec)
    print(f"Gaussian location-scale fit, {len(d):,} rows: {time.perf_counter() - t0:.1f} s "
          f"(tau_g = {np.exp(f.params.log_tg).round(3)}, truth [0.3 0.4])")
    if not DATA.exists():
        print("LA data absent: skipping 2-3")
        return
    t = system_table(pd.read_csv(DATA), "lfcc_gmm_highres")
    spec = LocScaleSpec(score="score", label="label", speaker="speaker", positive="bonafide", strata=("attack",),
                        speaker_by_stratum=("negative",))
    t0 = time.perf_counter()
    fit_locscale(t, spec)
    print(f"location-scale transformation fit, {len(t):,} rows: {time.perf_counter() - t0:.1f} s")
    t0, c0 = time.perf_counter(), time.process_time()
    f = score_model(t, score="score", label="label", speaker="speaker", factors=["attack"], positive="bonafide")
    print(f"score_model, {len(t):,} rows: {time.perf_counter() - t0:.1f} s wall, {time.process_time() - c0:.1f} s "
          f"CPU (the CPU time is the meaningful number on a loaded machine); chosen {f.selection.chosen.name}")
    print("load:", os.getloadavg())


if __name__ == "__main__":
    main()
