"""Goodness-of-fit flags of model-based numbers on the ASVspoof 2019 LA tables (issue 19, "Warnings").

For every system of ``../shared/data/asvspoof2019_la_eval`` (probabilities as logits, saturated
ones as ±inf; OC-softmax negated) we fit one transformation mixed model

    score ~ label*speaker_gender + (1|speaker) + (1|attack),  transform="monotone"

and collect every model cell a user sees:

* the overall model EER (``sm.model_eer(fit)``, an ``Estimate``),
* the per-attack EER, all bona fide trials against one attack (``negative_by="attack"``, 13 cells),
* gender × SVEva measure (``sm.model_subgroup_dcf(fit, trials, ["speaker_gender"])``: 2 × 9 cells).

Check 1 (real data): every cell whose model value lies outside the printed empirical 95 % interval
has ``fit_ok = False`` (counted: ``outside_but_ok`` must be 0).

Check 2 (calibration): scores simulated from the fitted model (new speaker and attack effects,
latent Gaussian errors mapped through the fitted transform's cells), the same model refitted,
the same cells computed: the share of flagged cells must be at most 7 %.

Run:  PYTHONPATH=src nice -n 5 python3 benchmarks/model_fit_flags.py [--systems a,b] [--n-sim 1]
Writes ``docs/data/model_fit_flags.json`` and prints a table (the numbers in docs/predictive.md).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import scoremix as sm
from scoremix.lme.confint import simulate_response

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "asvspoof2019_la_eval" / "asvspoof2019_la_eval_multisystem_long.csv.gz"
PROB = {"rawnet2_transferfiles", "rawnet2_robeval", "air_softmax", "air_amsoftmax", "aasist_junjul"}
FORMULA = "score ~ label*speaker_gender + (1|speaker) + (1|attack)"
MEASURES = ("min_dcf", "eer", "ratio_overall", "fpr", "fnr", "dcf_at_overall", "ratio_own", "fpr_ratio", "fnr_ratio")


def system_table(d: pd.DataFrame, system: str) -> pd.DataFrame:
    g = d[d["system"] == system].reset_index(drop=True)
    s = g["score"].to_numpy(float)
    if system in PROB:
        with np.errstate(divide="ignore"):
            s = np.log(s) - np.log1p(-s)          # p = 0 / 1 → ∓inf (saturated, kept)
    if system == "air_ocsoftmax":
        s = -s
    return g.assign(score=s)


def fit(g: pd.DataFrame):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.lmer(FORMULA, g, transform="monotone", control=dict(vcov=False))


def cells(f, g: pd.DataFrame, n_boot: int) -> pd.DataFrame:
    """One row per model cell: model value, printed empirical interval, fit_ok."""
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        e = sm.model_eer(f, positive="bonafide", data=g, n_boot=n_boot)
        rows.append(("overall", "eer", float(e), e.empirical, e.empirical_lo, e.empirical_hi, e.fit_ok))
        t = sm.model_eer(f, positive="bonafide", data=g, negative_by="attack", n_boot=n_boot)
        for a, r in t.iterrows():
            rows.append((f"attack {a}", "eer", r["eer_model"], r["eer_empirical"], r["eer_empirical_lo"],
                         r["eer_empirical_hi"], bool(r["fit_ok"])))
        sv = sm.model_subgroup_dcf(f, g, ["speaker_gender"], positive="bonafide", n_boot=n_boot)
        for _, r in sv.table.iterrows():
            for m in MEASURES:
                rows.append((f"gender {r['subgroup']}", m, r[m], r[f"{m}_empirical"], r[f"{m}_empirical_lo"],
                             r[f"{m}_empirical_hi"], bool(r[f"fit_ok_{m}"])))
    out = pd.DataFrame(rows, columns=["cell", "measure", "model", "empirical", "lo", "hi", "fit_ok"])
    with np.errstate(invalid="ignore"):
        out["outside"] = (out["model"] < out["lo"] - 1e-9 * np.maximum(1, out["model"].abs())) | \
                         (out["model"] > out["hi"] + 1e-9 * np.maximum(1, out["model"].abs()))
    return out


def simulate(f, g: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """Scores from the fitted transformation model: latent y* = Xβ + Zb* + σε (new random
    effects), then the observed cell whose latent interval holds it."""
    z = simulate_response(f, rng)
    tr = f.transform
    k = np.searchsorted(tr.alpha, z, side="left")
    ys = tr.values[k]
    out = g.loc[f.spec.data.index].copy()
    out["score"] = ys
    return out.reset_index(drop=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--systems", default="")
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--n-sim", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "docs" / "data" / "model_fit_flags.json"))
    a = ap.parse_args()
    d = pd.read_csv(DATA)
    systems = a.systems.split(",") if a.systems else sorted(d["system"].unique())
    real, sim, timing = [], [], {}
    for sysname in systems:
        t0 = time.perf_counter()
        g = system_table(d, sysname)
        f = fit(g)
        c = cells(f, g, a.n_boot).assign(system=sysname)
        real.append(c)
        rng = np.random.default_rng(20261125)
        for r in range(a.n_sim):
            gs = simulate(f, g, rng)
            fs = fit(gs)
            sim.append(cells(fs, gs, a.n_boot).assign(system=sysname, rep=r))
        timing[sysname] = time.perf_counter() - t0
        cr, cs = real[-1], sim[-1] if sim else None
        print(f"{sysname:24s} real: {int((~cr['fit_ok']).sum()):3d}/{len(cr)} flagged, "
              f"{int((cr['outside'] & cr['fit_ok']).sum())} outside-but-ok | simulated: "
              f"{int((~cs['fit_ok']).sum()) if cs is not None else -1}/{len(cs) if cs is not None else 0} flagged "
              f"({timing[sysname]:.0f} s)", flush=True)
    R = pd.concat(real, ignore_index=True)
    S = pd.concat(sim, ignore_index=True) if sim else pd.DataFrame(columns=R.columns)
    summary = {
        "formula": FORMULA, "transform": "monotone", "n_boot": a.n_boot, "n_sim": a.n_sim,
        "real": {"cells": int(len(R)), "outside_interval": int(R["outside"].sum()),
                 "flagged": int((~R["fit_ok"]).sum()),
                 "outside_but_ok": int((R["outside"] & R["fit_ok"]).sum())},
        "simulated": {"cells": int(len(S)), "flagged": int((~S["fit_ok"].astype(bool)).sum()),
                      "share_flagged": float((~S["fit_ok"].astype(bool)).mean()) if len(S) else float("nan"),
                      "by_kind": {k: float((~v["fit_ok"].astype(bool)).mean())
                                  for k, v in S.groupby(S["cell"].str.split().str[0])} if len(S) else {}},
        "seconds_per_system": timing,
        "load": os.getloadavg()[0],
    }
    print(json.dumps(summary, indent=1))
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(summary, indent=1))
    R.to_csv(Path(a.out).with_suffix(".real.csv"), index=False)
    S.to_csv(Path(a.out).with_suffix(".sim.csv"), index=False)


if __name__ == "__main__":
    main()
