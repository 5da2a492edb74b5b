"""Split-half check of ``decision_model`` on ASVspoof 2019 LA (gender subgroups).

Protocol: the speakers of each gender are split at random into halves A and B; a share
(default 20 %) of A's trials is drawn at random; on it, the model (``decision_model``, fixed
threshold τ* of the full table) and counting estimate each gender's FNR and FPR; the
reference is counting on all of half B at the same threshold.  Reported: the mean absolute
log error (rates floored at 1e-4) of model and counting over genders × rates × repetitions.

Usage: ``OPENBLAS_NUM_THREADS=1 python benchmarks/decision_model_split_half.py [--share 0.2]
[--reps 5] [--systems ...]``
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import scoremix as sm  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "asvspoof2019_la_eval" / "asvspoof2019_la_eval_multisystem_long.csv.gz"


def rates(t: pd.DataFrame, tau: float) -> pd.DataFrame:
    y = t["label"] == "bonafide"
    err = np.where(y, t["score"] < tau, t["score"] >= tau)
    df = pd.DataFrame({"g": t["speaker_gender"], "pos": y, "err": err})
    out = df.groupby(["g", "pos"])["err"].mean().unstack()
    return pd.DataFrame({"fnr": out[True], "fpr": out[False]})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--share", type=float, default=0.2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--systems", nargs="*", default=["rawnet2_transferfiles", "lfcc_gmm_highres",
                                                      "rawgat_st_add"])
    a = ap.parse_args()
    d = pd.read_csv(DATA)
    errs = {"model": [], "counting": []}
    for system in a.systems:
        t = d[d.system == system].reset_index(drop=True)
        if system == "air_ocsoftmax":
            t["score"] = -t["score"]
        tau = sm.subgroup_dcf(t, ["speaker_gender"], positive="bonafide", n_boot=0, eer=False,
                              progress=False).threshold
        rng = np.random.default_rng(7)
        for rep in range(a.reps):
            spk = t[["speaker", "speaker_gender"]].drop_duplicates()
            half_a = set()
            for _, s in spk.groupby("speaker_gender"):
                ids = rng.permutation(s["speaker"].to_numpy())
                half_a |= set(ids[: len(ids) // 2])
            in_a = t["speaker"].isin(half_a)
            A, B = t[in_a], t[~in_a]
            sub = A.sample(frac=a.share, random_state=int(rng.integers(1 << 31)))
            truth = rates(B, tau)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = sm.decision_model(sub, tau, ["speaker_gender"], positive="bonafide",
                                      factors=["attack"], n_sim=20, n_boot=20, seed=rep)
            for g in truth.index:
                for m in ("fnr", "fpr"):
                    tv = max(truth.loc[g, m], 1e-4)
                    errs["model"].append(abs(np.log(max(r.table.loc[g, f"{m}_model"], 1e-4) / tv)))
                    errs["counting"].append(abs(np.log(max(r.table.loc[g, f"{m}_emp"], 1e-4) / tv)))
            print(system, rep, f"model {np.mean(errs['model']):.4f} counting "
                  f"{np.mean(errs['counting']):.4f}", flush=True)
    print(f"share {a.share}: mean |log error| model {np.mean(errs['model']):.4f}, counting "
          f"{np.mean(errs['counting']):.4f} over {len(errs['model'])} cells; model better in "
          f"{np.mean(np.array(errs['model']) < np.array(errs['counting'])):.0%} of cells")


if __name__ == "__main__":
    main()
