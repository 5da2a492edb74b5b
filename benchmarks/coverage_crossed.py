"""Coverage of 95 % subgroup intervals with crossed enrolment × test speakers: one-way vs two-way bootstrap.

Usage::

    PYTHONPATH=src python3 benchmarks/coverage_crossed.py            # the table of docs/intervals.md
    PYTHONPATH=src python3 benchmarks/coverage_crossed.py --quick    # 30 data sets, B = 300: noisier
    PYTHONPATH=src python3 benchmarks/coverage_crossed.py --csv out.csv   # also save the long table

Design (:class:`scoremix.fairness.coverage.CoverageDesign` with ``n_test``): subgroups of 5,
8, 15 and 30 enrolment speakers, 40 target and 400 nontarget trials per speaker; the
nontarget trials of every enrolment speaker are spread over one pool of 40 test speakers
shared by all subgroups (10 trials per enrolment × test pair); nontarget score
``δ_g + b_e + c_t + ε`` with enrolment effect ``σ_b = 0.5`` and test-speaker effect
``σ_c`` (scenarios ``σ_c = 0`` and ``σ_c = 0.5``); truth in closed form (both effects
integrated out: nontarget scores ``N(δ_g, 1 + σ_b² + σ_c²)``).

Every data set is bootstrapped twice with the same seed, ``subgroup_dcf(...,
resample="one-way")`` (enrolment speakers only, the default) and ``resample="two-way"``
(enrolment × test speakers, Owen's pigeonhole bootstrap), both with the default
``interval="studentized"``.  Prints coverage per measure × size × scenario, the median
``log(hi/lo)`` width, and the worst cell of the six headline measures per size.  Fixed seeds:
the table is reproducible.  About 8 minutes on one core with the defaults (150 data sets per
scenario, B = 500).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from scoremix.fairness.coverage import CoverageDesign, coverage_pivot, coverage_study

ACCEPT = ("ratio_overall", "fpr", "fnr", "fpr_ratio", "fnr_ratio", "dcf_at_overall")
MEASURES = ACCEPT + ("min_dcf",)

BASE = dict(sizes=(5, 8, 15, 30), shift_non=(0.3, 0.2, -0.1, 0.0), shift_tar=(-0.2, 0.1, 0.2, 0.0),
            sd_speaker=0.5, n_test=40)
SCENARIOS = {
    "sd_test 0": (CoverageDesign(**BASE, sd_test=0.0), 21),
    "sd_test 0.5": (CoverageDesign(**BASE, sd_test=0.5), 22),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="30 data sets and 300 replicates per scenario")
    ap.add_argument("--datasets", type=int, default=None, help="data sets per scenario (default 150; quick 30)")
    ap.add_argument("--boot", type=int, default=None, help="bootstrap replicates (default 500; quick 300)")
    ap.add_argument("--csv", default=None, help="write the long per-interval table here")
    args = ap.parse_args()
    n_sets = args.datasets or (30 if args.quick else 150)
    n_boot = args.boot or (300 if args.quick else 500)
    t0 = time.perf_counter()
    frames = []
    for name, (design, seed) in SCENARIOS.items():
        for resample in ("one-way", "two-way"):
            r = coverage_study(design, n_sets, n_boot=n_boot, seed=seed, measures=MEASURES, resample=resample)
            r = r[r.method == "studentized"]
            r.insert(0, "resample", resample)
            r.insert(0, "scenario", name)
            frames.append(r)
    res = pd.concat(frames, ignore_index=True)
    if args.csv:
        res.to_csv(args.csv, index=False)
    pd.set_option("display.width", 200)
    print(f"\n{n_sets} data sets per scenario, B = {n_boot}, 95 % studentized intervals; "
          f"{time.perf_counter() - t0:.0f} s\n")
    cov = coverage_pivot(res, "resample", MEASURES, SCENARIOS)
    print("coverage (one-way = enrolment speakers only; two-way = enrolment x test speakers)")
    print(cov.round(3).to_string())
    with np.errstate(all="ignore"):
        res["log_width"] = np.log(res["hi"] / res["lo"])
    wid = coverage_pivot(res, "resample", MEASURES, SCENARIOS, value="log_width", aggfunc="median")
    print("\nmedian log(hi/lo)")
    print(wid.round(2).to_string())
    worst = res[res.measure.isin(ACCEPT)].groupby(["resample", "scenario", "measure", "n_speakers"])["covered"] \
        .mean().groupby(["resample", "scenario", "n_speakers"]).min().unstack()
    print("\nworst of the six headline measures per size")
    print(worst.round(3).to_string())
    print(f"\ninfinite interval ends: {int(np.isinf(res[['lo', 'hi']].to_numpy()).sum())} "
          f"of {2 * len(res)}")


if __name__ == "__main__":
    main()
