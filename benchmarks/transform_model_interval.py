"""Model-EER intervals of a transformation fit on LA (issue 24, item 5): the speaker re-weighting
(parameters fixed; ``eer_model_reweight_lo/_hi``) against the refit-based parametric bootstrap
(``model_interval="parametric"``: scores simulated through the fitted transform, full refits;
``eer_model_lo/_hi``), per speaker gender, marginal (population EER of a cell: new levels of every
grouping factor; the default formula has speakers only).

Run:  PYTHONPATH=src nice -n 5 python3 benchmarks/transform_model_interval.py [--system lfcc_gmm_highres] [--n-refits 20]
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path

import pandas as pd

import scoremix as sm

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "asvspoof2019_la_eval" / "asvspoof2019_la_eval_multisystem_long.csv.gz"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--system", default="lfcc_gmm_highres")
    ap.add_argument("--n-refits", type=int, default=20)
    ap.add_argument("--formula", default="score ~ label*speaker_gender + (1|speaker)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "data" / "transform_model_interval.json"))
    a = ap.parse_args()
    d = pd.read_csv(DATA)
    g = d[d["system"] == a.system].reset_index(drop=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = sm.lmer(a.formula, g, transform="monotone", control=dict(vcov=False))
        t0 = time.perf_counter()
        rw = sm.model_eer(f, positive="bonafide", by="speaker_gender", data=g, conditional=False, n_boot=200,
                          model_interval="speakers", progress=False)
        t1 = time.perf_counter()
        par = sm.model_eer(f, positive="bonafide", by="speaker_gender", data=g, conditional=False,
                           n_boot=a.n_refits, model_interval="parametric", progress=False)
        t2 = time.perf_counter()
    out = {"system": a.system, "formula": a.formula, "n_refits": a.n_refits, "load": os.getloadavg()[0],
           "seconds_reweight": t1 - t0, "seconds_parametric": t2 - t1, "cells": {}}
    for cell in rw.index:
        r, p = rw.loc[cell], par.loc[cell]
        out["cells"][str(cell)] = {
            "eer_model": float(r["eer_model"]),
            "reweight_width_pp": 100 * float(r["eer_model_reweight_hi"] - r["eer_model_reweight_lo"]),
            "parametric_width_pp": 100 * float(p["eer_model_hi"] - p["eer_model_lo"]),
            "empirical": float(r["eer_empirical"]),
            "empirical_width_pp": 100 * float(r["eer_empirical_hi"] - r["eer_empirical_lo"])}
    print(json.dumps(out, indent=1))
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
