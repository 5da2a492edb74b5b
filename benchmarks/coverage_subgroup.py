"""Coverage of 95 % subgroup intervals (percentile, expanded, studentized) in simulations with known truth.

Usage::

    PYTHONPATH=src python3 benchmarks/coverage_subgroup.py            # full table (docs/intervals.md)
    PYTHONPATH=src python3 benchmarks/coverage_subgroup.py --quick    # a few minutes less, noisier
    PYTHONPATH=src python3 benchmarks/coverage_subgroup.py --csv out.csv   # also save the long table

Scenarios (see :mod:`scoremix.fairness.coverage` for the model and the closed-form truth):
subgroups of 5, 8, 15, 30 and 60 speakers in one data set, 40 target and 400 nontarget
trials per speaker, p_target 0.05;

* ``effects``: speaker effects σ_b = 0.5 (σ = 1, d = 3),
* ``no effects``: σ_b = 0 (independent trials),
* ``other``: other shifts, σ_b = 0.3, target σ = 1.3, d = 2.5 and another seed.

Every data set and every bootstrap has its own fixed seed, so the table is reproducible.
Prints coverage per measure × subgroup size × scenario for the three methods (percentile =
SVEva's, expanded = the previous default, studentized = the default), the median log-width
of the intervals, the mean number of errors at τ* per size, and for the default method the
per-size minimum over the six acceptance measures and the three scenarios (the input of
:mod:`scoremix.fairness.reliability`).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from scoremix.fairness.coverage import COVERAGE_MEASURES, CoverageDesign, coverage_pivot, coverage_study

ACCEPT = ("ratio_overall", "fpr", "fnr", "fpr_ratio", "fnr_ratio", "dcf_at_overall")

SCENARIOS = {
    "effects": (CoverageDesign(sd_speaker=0.5), 11),
    "no effects": (CoverageDesign(sd_speaker=0.0), 12),
    "other": (CoverageDesign(sd_speaker=0.3, sigma_pos=1.3, d=2.5, shift_non=(-0.2, 0.3, 0.1, -0.1, 0.0),
                             shift_tar=(0.3, -0.2, 0.0, 0.2, -0.1)), 13),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="40 data sets and 500 replicates per scenario")
    ap.add_argument("--datasets", type=int, default=None, help="data sets per scenario (default 200; quick 40)")
    ap.add_argument("--boot", type=int, default=None, help="bootstrap replicates (default 1000; quick 500)")
    ap.add_argument("--csv", default=None, help="write the long per-interval table here")
    ap.add_argument("--seed-offset", type=int, default=0,
                    help="add this to every scenario's seed: a validation run on data sets the table was not made "
                         "with (docs/intervals.md uses 0 for the table and 1000 for the validation)")
    args = ap.parse_args()
    n_sets = args.datasets or (40 if args.quick else 200)
    n_boot = args.boot or (500 if args.quick else 1000)
    t0 = time.perf_counter()
    frames = []
    for name, (design, seed) in SCENARIOS.items():
        r = coverage_study(design, n_sets, n_boot=n_boot, seed=seed + args.seed_offset)
        r.insert(0, "scenario", name)
        frames.append(r)
    res = pd.concat(frames, ignore_index=True)
    if args.csv:
        res.to_csv(args.csv, index=False)
    pd.set_option("display.width", 200)
    print(f"\n{n_sets} data sets per scenario, B = {n_boot}, seed offset {args.seed_offset}, 95 % intervals; "
          f"{time.perf_counter() - t0:.0f} s\n")
    cov = coverage_pivot(res, "method", COVERAGE_MEASURES, SCENARIOS)
    print("coverage (percentile = SVEva's, expanded = previous default, studentized = default)")
    print(cov.round(3).to_string())
    with np.errstate(all="ignore"):
        res["log_width"] = np.log(res["hi"] / res["lo"])
    wid = res[res.measure.isin(ACCEPT + ("min_dcf",))].pivot_table(
        index="measure", columns=["method", "n_speakers"], values="log_width", aggfunc="median")
    print("\nmedian log(hi/lo) over scenarios and data sets")
    print(wid.round(2).to_string())
    err = res[res.measure == "fpr"].groupby(["scenario", "n_speakers"])["n_errors"].mean().unstack()
    print("\nmean errors at tau* per subgroup")
    print(err.round(0).to_string())
    print(f"fewest errors at tau* in any data set: {int(res['n_errors'].min())}")
    for method in ("studentized", "expanded", "percentile"):
        new = res[(res.method == method) & res.measure.isin(ACCEPT)]
        cells = new.groupby(["measure", "scenario", "n_speakers"])["covered"].mean()
        worst = cells.groupby("n_speakers").min()
        print(f"\n{method}: minimum coverage over the six acceptance measures and the scenarios, per size"
              + (" (scoremix.fairness.reliability.MEASURED_COVERAGE)" if method == "studentized" else ""))
        print(worst.round(3).to_string())
        print(f"{method}: mean over all {cells.size} cells {cells.mean():.3f}; cells below 0.92: "
              + ", ".join(f"{m}/{sc}/{n}={v:.3f}" for (m, sc, n), v in cells[cells < 0.92].items()))
        md = res[(res.method == method) & (res.measure == "min_dcf")].groupby(["scenario", "n_speakers"])[
            "covered"].mean().unstack()
        print(f"{method} min_dcf coverage")
        print(md.round(3).to_string())
    print(f"\ninfinite studentized interval ends: "
          f"{int(np.isinf(res[res.method == 'studentized'][['lo', 'hi']]).any(axis=1).sum())} of "
          f"{int((res.method == 'studentized').sum())}")


if __name__ == "__main__":
    main()
