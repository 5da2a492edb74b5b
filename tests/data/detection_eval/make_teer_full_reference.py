"""Full-data t-EER of the 10 LA CMs with the ASV baseline by the published double loop (ASVspoof 5
``compute_teer``, rho = 0 path): for every ASV position, the first CM position minimising
|Pmiss_tdm - Pfa_tdm| over ALL CM positions (brute force, chunked), then the first ASV position
minimising the intersection criterion.  O(N^2) ~ 1e10 operations per CM; run offline:

    PYTHONPATH=tests python3 tests/data/detection_eval/make_teer_full_reference.py OUT.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from tandem_reference import det_curve

ROOT = Path(__file__).resolve().parents[3].parent / "shared" / "data"


def teer_full(tar_asv, non_asv, spf_asv, tar_cm, non_cm, spf_cm, chunk=128):
    allsc = np.concatenate((tar_asv, non_asv, spf_asv))
    lab = np.concatenate((np.ones(tar_asv.size), np.zeros(non_asv.size), -np.ones(spf_asv.size)))
    lab = lab[np.argsort(allsc, kind="mergesort")]
    pm_a = np.concatenate(([0], np.cumsum(lab == 1) / tar_asv.size))
    pf_n = np.concatenate(([1], 1 - np.cumsum(lab == 0) / non_asv.size))
    pf_s = np.concatenate(([1], 1 - np.cumsum(lab == -1) / spf_asv.size))
    pmiss_cm, pfa_cm, _ = det_curve(np.concatenate((tar_cm, non_cm)), spf_cm)
    allowed = np.flatnonzero(pm_a < pf_n)
    best, out = np.inf, np.nan
    for s in range(0, allowed.size, chunk):
        a = allowed[s:s + chunk]
        pmt = pmiss_cm[None, :] + (1 - pmiss_cm[None, :]) * pm_a[a, None]
        pft = (1 - 0.0) * (1 - pmiss_cm[None, :]) * pf_n[a, None] + 0.0 * pfa_cm[None, :] * pf_s[a, None]
        c = np.argmin(np.abs(pmt - pft), axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            crit = np.abs(pf_n[a] / pf_s[a] - pfa_cm[c] / (1 - pmiss_cm[c]))
        for i in range(a.size):  # first strict improvement, in ASV order
            if crit[i] < best:
                best, out = crit[i], pf_s[a[i]] * pfa_cm[c[i]]
    return float(out)


def main() -> None:
    asv = pd.read_csv(ROOT / "asvspoof2019_la_asv_baseline" / "asvspoof2019_la_asv_baseline.csv.gz")
    asv = asv[asv["split"] == "eval"].reset_index(drop=True)
    cm = pd.read_csv(ROOT / "asvspoof2019_la_eval" / "asvspoof2019_la_eval_multisystem_long.csv.gz")
    cm.loc[cm["system"] == "air_ocsoftmax", "score"] *= -1
    res = {}
    for name in sorted(cm["system"].unique()):
        j = asv.merge(cm[cm["system"] == name][["utt", "score"]].rename(columns={"score": "cm"}), on="utt")
        k, a, c = j["trial_type"].to_numpy(), j["score"].to_numpy(), j["cm"].to_numpy()
        res[name] = teer_full(a[k == "target"], a[k == "nontarget"], a[k == "spoof"],
                              c[k == "target"], c[k == "nontarget"], c[k == "spoof"])
        print(name, repr(res[name]), flush=True)
        Path(sys.argv[1]).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
