"""Gender fairness of two ASVspoof 2019 LA countermeasures, with speaker-bootstrap intervals.

Reads the shared multisystem score table (``$SCOREMIX_SHARED_DATA`` or ../shared/data),
computes the SVEva measures per speaker gender for two systems (1000 speaker-level
cluster-bootstrap replicates, resampling speakers within gender), the paired difference
of ``ratio_overall`` between the systems, and writes a forest plot, a DET plot and the
two-system ratio scatter.

Run:  python examples/asvspoof2019_gender_fairness.py [--systems lfcc_gmm_highres rawgat_st_add]
      [--n-boot 1000] [--out fairness_out]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pandas as pd

from scoremix.fairness import compare_subgroup_dcf, subgroup_dcf
from scoremix.fairness.plots import plot_ratio_scatter


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", nargs=2, default=["lfcc_gmm_highres", "rawgat_st_add"])
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=2019)
    ap.add_argument("--out", default="fairness_out")
    args = ap.parse_args()
    root = Path(os.environ.get("SCOREMIX_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
    path = root / "asvspoof2019_la_eval" / "asvspoof2019_la_eval_multisystem_long.csv.gz"
    df = pd.read_csv(path, usecols=["utt", "speaker", "speaker_gender", "label", "system", "score"])
    df = df[df["system"].isin(args.systems)].reset_index(drop=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cols = ["subgroup", "n_speakers", "n_pos", "n_neg", "dcf_at_overall", "min_dcf", "ratio_overall",
            "ratio_overall_lo", "ratio_overall_hi", "ratio_own", "fpr_ratio", "fnr_ratio", "eer", "n_errors",
            "reliable"]
    tables = {}
    for k, name in enumerate(args.systems):
        res = subgroup_dcf(df[df["system"] == name], ["speaker_gender"], n_boot=args.n_boot,
                           random_state=args.seed, progress=True)
        tables[name] = res.table
        print(f"\n== {name}: minDCF {res.min_dcf:.5f} at tau* {res.threshold:.4g}, EER {100 * res.overall['eer']:.2f} %, "
              f"FI {res.fairness_index:.3f} [{res.fairness_index_ci[0]:.3f}, {res.fairness_index_ci[1]:.3f}]")
        print(res.table[cols].to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        res.plot_forest().savefig(out / f"forest_{name}.png", dpi=120)
        res.plot_det().savefig(out / f"det_{name}.png", dpi=120)
        res.table.to_csv(out / f"gender_{name}.csv", index=False)
    cmp = compare_subgroup_dcf(df, ["speaker_gender"], systems=args.systems, trial_id="utt",
                               n_boot=args.n_boot, random_state=args.seed, progress=True)
    print(f"\n== paired difference {args.systems[1]} - {args.systems[0]}")
    dcols = ["subgroup", "ratio_overall_diff", "ratio_overall_diff_lo", "ratio_overall_diff_hi"]
    print(cmp.table[dcols].to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print("FI:", {k: tuple(round(x, 3) for x in v) for k, v in cmp.fairness_index.items()})
    plot_ratio_scatter(cmp).savefig(out / "ratio_scatter.png", dpi=120)
    cmp.table.to_csv(out / "gender_comparison.csv", index=False)
    print(f"\nfigures and tables written to {out}/")


if __name__ == "__main__":
    main()
