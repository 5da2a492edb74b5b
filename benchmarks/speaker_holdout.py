"""Per-speaker held-out prediction on the ASVspoof 2019 LA eval tables (issue 19).

Every speaker × class × attack cell is split at random into a fitted share A and a held-out
share B (speakers with both classes).  ``sm.score_model`` is fitted on A; each speaker's
model EER / minDCF (p_target = 0.05, attainable thresholds) is compared with the speaker's
empirical value on B.  Ratio = model MAE / MAE of the speaker's own counts on A; beside it
the best linear shrinkage of the counts (oracle λ).  Also gender × attack cells.

    python3 benchmarks/speaker_holdout.py --quick          # 3 systems, share 0.2
    python3 benchmarks/speaker_holdout.py --shares 0.2 0.5 # all 10 systems
    python3 benchmarks/speaker_holdout.py --shares 0.2 --failure-quantile none   # without the failure mixture
    python3 benchmarks/speaker_holdout.py --shares 0.2 --speaker-pooling none    # without speaker shape pooling
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import scoremix as sm
from scoremix.validation import validate_model

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data" / "asvspoof2019_la_eval" / \
    "asvspoof2019_la_eval_multisystem_long.csv.gz"
PROB = {"rawnet2_transferfiles", "rawnet2_robeval", "air_softmax", "air_amsoftmax", "aasist_junjul"}
QUICK = ["rawnet2_transferfiles", "lfcc_gmm_highres", "rawgat_st_add"]


def system_table(d: pd.DataFrame, system: str) -> pd.DataFrame:
    """One system's trials; probabilities as logits (clipped to [1e-12, 1 − 1e-12]),
    OC-softmax negated (higher = bona fide)."""
    t = d[d["system"] == system].reset_index(drop=True)
    s = t["score"].to_numpy(float)
    if system == "air_ocsoftmax":
        s = -s
    if system in PROB:
        p = np.clip(s, 1e-12, 1 - 1e-12)
        s = np.log(p) - np.log1p(-p)
    return t.assign(score=s)


def one(t: pd.DataFrame, share: float, seed: int, by=None, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = validate_model(t, score="score", label="label", speaker="speaker", factors=["attack"],
                           positive="bonafide", share=share, seed=seed, by=by, **kw)
    return r


def chosen_label(r) -> str:
    """The specification ``score_model`` chose inside a ``validate_model`` result, with the
    speaker-pooling κ pair when there is one ("" when the fit has no selection)."""
    sel = r.info.get("selection")
    chosen = sel.chosen.name if sel is not None else ""
    sp = getattr(sel, "speaker_pooling", None)
    if sp is not None:
        chosen += f" kappa-={sp.kappa[0]:g} kappa+={sp.kappa[1]:g}"
    return chosen


def print_summary(out: pd.DataFrame, note: str = "") -> None:
    """Per cells × measure: the ratios per system and share (mean over any seeds), median and max."""
    pd.set_option("display.width", 200)
    for (cells, m), g in out.groupby(["cells", "measure"]):
        print(f"\n== {cells}, {m}{note}")
        print(g.pivot_table(index="system", columns="share", values=["ratio_model", "ratio_shrunk"]).round(3))
        print("median:", g.groupby("share")["ratio_model"].median().round(3).to_dict(),
              "max:", g.groupby("share")["ratio_model"].max().round(3).to_dict())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--systems", nargs="*")
    ap.add_argument("--shares", nargs="*", type=float, default=[0.2])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gender", action="store_true", help="also gender × attack cells")
    ap.add_argument("--out", default=None)
    ap.add_argument("--failure-quantile", default="0.99",
                    help="score_model's failure_quantile (per-speaker failure mixture); 'none' turns it off")
    ap.add_argument("--speaker-pooling", default="error_rates",
                    help="score_model's speaker_pooling ('error_rates', 'crps'; 'none' turns it off)")
    a = ap.parse_args()
    d = pd.read_csv(DATA)
    systems = a.systems or (QUICK if a.quick else sorted(d["system"].unique()))
    rows = []
    for share in a.shares:
        for sysname in systems:
            t = system_table(d, sysname)
            t0 = time.perf_counter()
            fq = None if a.failure_quantile.lower() == "none" else float(a.failure_quantile)
            r = one(t, share, a.seed, also_by=[dict(by="speaker_gender", negative_by="attack")] if a.gender else [],
                    failure_quantile=fq,
                    speaker_pooling=None if a.speaker_pooling.lower() == "none" else a.speaker_pooling)
            dt = time.perf_counter() - t0
            chosen = chosen_label(r)
            for (cells, m), row in r.summary.iterrows():
                rows.append(dict(system=sysname, share=share, seed=a.seed, cells=cells, measure=m, **row.to_dict(),
                                 seconds=dt, chosen=chosen))
            print(pd.DataFrame(rows[-len(r.summary):])[["system", "share", "cells", "measure", "ratio_model",
                  "ratio_shrunk", "n_groups", "seconds"]].round(3).to_string(header=False), chosen, flush=True)
    out = pd.DataFrame(rows)
    print_summary(out)
    if a.out:
        out.to_csv(a.out, index=False)


if __name__ == "__main__":
    main()
