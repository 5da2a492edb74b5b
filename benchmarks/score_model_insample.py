"""In-sample agreement of ``sm.score_model`` with the empirical EER on the ASVspoof 2019 LA eval
tables (issue 19 acceptance line "in sample, LA, score_model").

Per system (probabilities as logits, OC-softmax negated, as in ``speaker_holdout.py``):
``fit = sm.score_model(t, score="score", label="label", speaker="speaker", factors=["attack"],
positive="bonafide")``, then the overall model EER (``sm.model_eer(fit)``, attainable
thresholds, and the smooth latent-threshold crossing) and the per-attack model EER
(``negative_by="attack"``: all bona fide trials against one attack's spoofs) against the
empirical ROCCH EER (``sm.eer``).  Relative error = |model − empirical| / empirical.  Beside
it, what ``fit.selection`` says: which strata were fitted freely (one transform each — there
the in-sample agreement holds by construction) and what is predicted.

    python3 benchmarks/score_model_insample.py                 # all 10 systems
    python3 benchmarks/score_model_insample.py --systems lfcc_gmm_highres --out res.csv
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pandas as pd

import scoremix as sm
from speaker_holdout import DATA, system_table


def one_system(t: pd.DataFrame) -> tuple[list[dict], dict]:
    t0 = time.perf_counter()
    fit = sm.score_model(t, score="score", label="label", speaker="speaker", factors=["attack"],
                         positive="bonafide")
    secs = time.perf_counter() - t0
    y = (t["label"] == "bonafide").to_numpy(int)
    s = t["score"].to_numpy(float)
    kw = dict(label="label", positive="bonafide", n_boot=0, progress=False)
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        att = float(sm.model_eer(fit, **kw))
        lat = float(sm.model_eer(fit, thresholds="latent", **kw))
        rows.append(dict(cell="overall", eer_empirical=float(sm.eer(s, y)), eer_model=att, eer_model_latent=lat))
        per = sm.model_eer(fit, negative_by="attack", **kw)
    for lv, r in per.iterrows():
        m = (y == 1) | (t["attack"] == lv).to_numpy()
        rows.append(dict(cell=str(lv), eer_empirical=float(sm.eer(s[m], y[m])), eer_model=float(r["eer_model"]),
                         eer_model_latent=np.nan))
    sel = fit.selection
    free = set(map(str, sel.fitted_freely))
    for r in rows:
        strata = ["+:bonafide"] + ([f"-:{r['cell']}"] if r["cell"] != "overall" else
                                   [f for f in free if f.startswith("-:")])
        r["fitted_freely"] = all(st in free for st in strata)
    info = dict(chosen=sel.chosen.name, n_free=len(free), predicted="; ".join(sel.predicted), seconds=secs)
    return rows, info


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--systems", nargs="*")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    d = pd.read_csv(DATA)
    systems = a.systems or sorted(d["system"].unique())
    out, infos = [], []
    for name in systems:
        rows, info = one_system(system_table(d, name))
        for r in rows:
            r["system"] = name
        out += rows
        infos.append(dict(system=name, **info))
        tab = pd.DataFrame(rows)
        rel = (tab["eer_model"] - tab["eer_empirical"]).abs() / tab["eer_empirical"]
        print(f"{name}: chosen {info['chosen']}, {info['seconds']:.1f} s; overall rel. error "
              f"{rel.iloc[0]:.2e} (latent {abs(tab['eer_model_latent'].iloc[0] / tab['eer_empirical'].iloc[0] - 1):.3f});"
              f" per attack median {rel.iloc[1:].median():.2e}, max {rel.iloc[1:].max():.2e}", flush=True)
    tab = pd.DataFrame(out)
    tab["rel_error"] = (tab["eer_model"] - tab["eer_empirical"]).abs() / tab["eer_empirical"]
    tab["rel_error_latent"] = (tab["eer_model_latent"] - tab["eer_empirical"]).abs() / tab["eer_empirical"]
    ov = tab[tab["cell"] == "overall"]
    pa = tab[tab["cell"] != "overall"]
    print("\noverall: median relative error", ov["rel_error"].median(), "(latent thresholds",
          ov["rel_error_latent"].median(), ")")
    print("per attack: median relative error", pa["rel_error"].median(), "max", pa["rel_error"].max())
    print("cells fitted freely:", int(tab["fitted_freely"].sum()), "of", len(tab))
    print(pd.DataFrame(infos).to_string(index=False))
    if a.out:
        tab.to_csv(a.out, index=False)


if __name__ == "__main__":
    main()
