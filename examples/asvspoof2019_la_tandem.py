"""The 10 ASVspoof 2019 LA countermeasures in tandem with the official ASV baseline, every number
with a speaker-cluster bootstrap interval.

Reads the shared tables (``$SCOREMIX_SHARED_DATA`` or ../shared/data) and writes to ``--out``:

* ``tandem.csv`` — min t-DCF (2019 and 2021 cost models), t-EER, a-DCF and the SASV-EER / SV-EER /
  SPF-EER of the cascade, per CM, with intervals (``sm.tdcf``, ``sm.teer``, ``sm.adcf``, ``sm.sasv_eer``);
* ``comparisons.csv`` — all 45 pairs of CMs on EER and minDCF (paired speaker bootstrap, Holm) and
  AUC (DeLong) (``sm.compare_systems``);
* ``fairness_gender.csv`` / ``fairness_gender_groups.csv`` — the fairness panel by speaker gender of
  one CM and of the ASV baseline, at the overall EER threshold and over a range of operating points (overall
  FPR 0.001–0.2, ``sm.fairness_panel``), with ``fairness_sweep.png`` (the panel measures against the overall
  FPR, interval bands; ``scoremix.fairness.panel.plot_operating_points``);
* ``ape.png`` — Bayes error-rate (APE) curves with the PAV minimum for the logit-scale CMs, and per
  gender for one of them (``sm.ape_curve``).

Run:  python examples/asvspoof2019_la_tandem.py [--n-boot 200] [--out tandem_out] [--seed 2019]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

import scoremix as sm
from scoremix.tandem.table import tandem_table

LOGIT_CMS = ["rawgat_st_add", "rawgat_st_cat", "rawgat_st_mul", "lfcc_gmm_highres"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--seed", type=int, default=2019)
    ap.add_argument("--fairness-system", default="rawgat_st_mul")
    ap.add_argument("--out", default="tandem_out")
    ap.add_argument("--skip", nargs="*", default=[], choices=["tandem", "compare", "fairness", "ape"])
    args = ap.parse_args()
    root = Path(os.environ.get("SCOREMIX_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
    asv = pd.read_csv(root / "asvspoof2019_la_asv_baseline" / "asvspoof2019_la_asv_baseline.csv.gz")
    asv = asv[asv["split"] == "eval"].reset_index(drop=True)
    cm = pd.read_csv(root / "asvspoof2019_la_eval" / "asvspoof2019_la_eval_multisystem_long.csv.gz")
    cm.loc[cm["system"] == "air_ocsoftmax", "score"] *= -1  # lower = bona fide in its file
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    if "tandem" not in args.skip:
        t0 = time.time()
        tab = tandem_table(asv, cm, join="utt", system="system", asv_speaker="claimed_speaker", cm_speaker="speaker",
                           n_boot=args.n_boot, seed=args.seed)
        tab.to_csv(out / "tandem.csv", index=False)
        print(f"tandem table ({time.time() - t0:.0f} s)")
        with pd.option_context("display.width", 250, "display.max_columns", 40):
            print(tab.round(4).to_string(index=False))

    if "compare" not in args.skip:
        t0 = time.time()
        cmp_ = sm.compare_systems(cm, metrics=["eer", "min_dcf", "auc"], speaker="speaker", trial="utt",
                                  n_boot=args.n_boot, seed=args.seed)
        cmp_.to_csv(out / "comparisons.csv", index=False)
        print(f"\npairwise comparisons ({time.time() - t0:.0f} s); pairs with Holm-adjusted p < 0.05 per metric:")
        print(cmp_.assign(sig=cmp_["p_adjusted"] < 0.05).groupby("metric")["sig"].agg(["sum", "size"]).to_string())

    if "fairness" not in args.skip:
        t0 = time.time()
        from scoremix.fairness.panel import FPR_GRID, plot_operating_points

        ops = ["eer", *[{"fpr": f} for f in FPR_GRID]]
        g = cm[cm["system"] == args.fairness_system]
        pc = sm.fairness_panel(g, "speaker_gender", speaker="speaker", operating_points=ops, n_boot=args.n_boot,
                               seed=args.seed, llr=args.fairness_system in LOGIT_CMS)
        pa = sm.fairness_panel(asv[asv["trial_type"] != "spoof"], "claimed_gender", label="trial_type",
                               speaker="claimed_speaker", operating_points=ops, n_boot=args.n_boot, seed=args.seed)
        tab = pd.concat([pc.table.assign(system=args.fairness_system), pa.table.assign(system="asv_baseline")])
        grp = pd.concat([pc.groups.assign(system=args.fairness_system), pa.groups.assign(system="asv_baseline")])
        tab.to_csv(out / "fairness_gender.csv", index=False)
        grp.to_csv(out / "fairness_gender_groups.csv", index=False)
        print(f"\nfairness panel by gender ({time.time() - t0:.0f} s)")
        print(tab.round(4).to_string(index=False))
        import matplotlib

        matplotlib.use("Agg")
        for name, p in ((args.fairness_system, pc), ("asv_baseline", pa)):
            fig = plot_operating_points(p, title=f"{name}: fairness by gender over operating points")
            fig.savefig(out / f"fairness_sweep_{name}.png", dpi=100)
        print(f"wrote {out}/fairness_sweep_*.png")

    if "ape" not in args.skip:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        curves = {}
        for name in LOGIT_CMS:
            g = cm[cm["system"] == name]
            curves[name] = sm.ape_curve(g["score"], g["label"])
        sm.plot_ape(curves, ax=axes[0], title="CMs (logit / LLR scale)")
        g = cm[cm["system"] == args.fairness_system]
        by = {sex: sm.ape_curve(h["score"], h["label"]) for sex, h in g.groupby("speaker_gender")}
        sm.plot_ape(by, ax=axes[1], title=f"{args.fairness_system} by speaker gender")
        fig.tight_layout()
        fig.savefig(out / "ape.png", dpi=120)
        print(f"\nwrote {out / 'ape.png'}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
