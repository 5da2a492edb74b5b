"""Per-speaker shape pooling on LA: the held-out ratio of every fixed (κ−, κ+) pair and of the
pairs that choice rules pick (issue 19, session 7).

For one system and split (exactly ``validate_model``'s: ``heldout_split``, share A), the
``score_model`` fit on A without pooling is computed once (the pooling does not change it).
Every speaker's pooled rates at the attainable thresholds are linear in the blend weight,
``ω·(A's counts) + (1−ω)·(model)``, so the held-out speaker EER / minDCF ratio of every pair
costs one ROCCH per pair — the same numbers ``validate_model`` gives for that pair (up to
the 1e-4-SD point masses).  Then each rule (``--rules``) chooses a pair from the fit alone,
and its ratio is read off the surface.

    python3 benchmarks/speaker_pool_kappa_scan.py --systems rawgat_st_add --share 0.2 --seed 1
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import scoremix as sm
from scoremix.locscale.pooled import _weights
from scoremix.locscale.speaker_pool import _rocch_eer, rates_cv_entries, speaker_pooling_rates_cv
from scoremix.predictive.layer import predictive
from scoremix.validation import empirical_group_measures, heldout_split

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from speaker_holdout import DATA, system_table  # noqa: E402
from speaker_holdout_oracle import both_classes  # noqa: E402

KAPPAS = (0.0, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, np.inf)
#: rules: name → keyword arguments of speaker_pooling_rates_cv
RULES = {
    "1s-fold": dict(n_splits=1, rule="1se", se_over="fold"),      # session-6 rule (hull fixed)
    "1s-1se": dict(n_splits=1, rule="1se"),
    "1s-paired": dict(n_splits=1, rule="1se-paired"),
    "1s-min": dict(n_splits=1, rule="min"),
    "3s-1se": dict(n_splits=3, rule="1se"),
    "3s-paired": dict(n_splits=3, rule="1se-paired"),
    "3s-min": dict(n_splits=3, rule="min"),
}


def surface(fit, A: pd.DataFrame, B: pd.DataFrame, yA: np.ndarray, yB: np.ndarray, p: float = 0.05
            ) -> dict[str, np.ndarray]:
    """``{"eer": (K, K), "min_dcf": (K, K)}`` MAE ratios to counting over speakers."""
    pred = predictive(fit, None, label="label", positive="bonafide")
    tau = np.unique(pred.score[np.isfinite(pred.score)])
    spk = A["speaker"].to_numpy()
    sA = A["score"].to_numpy(np.float64)
    held = empirical_group_measures(B, ["speaker"], score="score", y=yB)
    K = len(KAPPAS)
    ae = {"eer": [], "min_dcf": []}
    cnt_ae = {"eer": [], "min_dcf": []}
    for sp in held.index:
        m = spk == sp
        if not (yA[m].any() and (~yA[m].astype(bool)).any()) or held.loc[sp].isna().any():
            continue
        fnr, fpr = pred.rates_at(tau, mask=m)
        m_fnr, m_fpr = fnr[0], fpr[0]
        sp_, sn_ = sA[m & (yA == 1)], sA[m & (yA == 0)]
        e_fnr = np.searchsorted(np.sort(sp_), tau, side="left") / sp_.size
        e_fpr = 1.0 - np.searchsorted(np.sort(sn_), tau, side="left") / sn_.size
        wn = np.array([_weights(float(sn_.size), k) for k in KAPPAS])
        wp = np.array([_weights(float(sp_.size), k) for k in KAPPAS])
        F = wp[:, None] * e_fnr[None] + (1 - wp[:, None]) * m_fnr[None]
        P = wn[:, None] * e_fpr[None] + (1 - wn[:, None]) * m_fpr[None]
        PM = np.ascontiguousarray(np.broadcast_to(F[None], (K, K, tau.size)))
        PF = np.ascontiguousarray(np.broadcast_to(P[:, None], (K, K, tau.size)))
        PM, PF = np.maximum.accumulate(PM, axis=2), np.minimum.accumulate(PF, axis=2)
        e = _rocch_eer(PM, PF)
        d = np.minimum((p * PM + (1 - p) * PF).min(axis=2), p)
        ae["eer"].append(np.abs(e - held.loc[sp, "eer"]))
        ae["min_dcf"].append(np.abs(d - held.loc[sp, "min_dcf"]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cnt_e = float(sm.eer(sA[m], yA[m]))
            cnt_d = float(sm.min_dcf(sA[m], yA[m], p_target=p).value)
        cnt_ae["eer"].append(abs(cnt_e - held.loc[sp, "eer"]))
        cnt_ae["min_dcf"].append(abs(cnt_d - held.loc[sp, "min_dcf"]))
    return {k: np.mean(ae[k], axis=0) / np.mean(cnt_ae[k]) for k in ae}



def split_fit(t: pd.DataFrame, share: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray, np.ndarray, object, float]:
    """One system's split (``validate_model``'s: :func:`scoremix.validation.heldout_split`),
    and ``score_model`` on A without speaker pooling: (A, B, y_A, y_B, fit, seconds)."""
    A, B, y_a, y_b = heldout_split(t, factors=["attack"], positive="bonafide", share=share, seed=seed)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.score_model(A, score="score", label="label", speaker="speaker", factors=["attack"],
                             positive="bonafide", speaker_pooling=None)
    return A, B, y_a, y_b, fit, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--systems", nargs="*")
    ap.add_argument("--share", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rules", nargs="*", default=list(RULES))
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    d = pd.read_csv(DATA)
    systems = a.systems or sorted(d["system"].unique())
    rows = []
    kap_idx = {k: i for i, k in enumerate(KAPPAS)}
    for sysname in systems:
        A, B, y_a, y_b, fit, t_fit = split_fit(both_classes(system_table(d, sysname)), a.share, a.seed)
        surf = surface(fit, A, B, y_a, y_b)
        best = {m: np.unravel_index(int(np.argmin(s)), s.shape) for m, s in surf.items()}
        row = dict(system=sysname, share=a.share, seed=a.seed, fit_s=round(t_fit, 1),
                   model_alone=surf["eer"][-1, -1], counts=surf["eer"][0, 0],
                   best_pair=f"({KAPPAS[best['eer'][0]]:g},{KAPPAS[best['eer'][1]]:g})",
                   best_eer=surf["eer"][best["eer"]], best_min_dcf=surf["min_dcf"][best["min_dcf"]])
        t1 = time.perf_counter()
        n_max = max(RULES[r]["n_splits"] for r in a.rules)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ent = rates_cv_entries(fit, kappas=KAPPAS, n_splits=n_max, seed=0)
        row["cv_s"] = round(time.perf_counter() - t1, 1)
        for r in a.rules:
            kw = dict(RULES[r])
            keep = [k for k, h in enumerate(ent["split"]) if h < kw["n_splits"]]
            sub = {"per": {m: [v[k] for k in keep] for m, v in ent["per"].items()},
                   "who": [ent["who"][k] for k in keep], "split": [ent["split"][k] for k in keep]}
            pool = speaker_pooling_rates_cv(fit, kappas=KAPPAS, _entries=sub, **kw)
            i, j = kap_idx[pool.kappa[0]], kap_idx[pool.kappa[1]]
            row[f"{r}"] = f"({pool.kappa[0]:g},{pool.kappa[1]:g})"
            row[f"{r}_eer"] = surf["eer"][i, j]
            row[f"{r}_dcf"] = surf["min_dcf"][i, j]
        rows.append(row)
        print(pd.DataFrame([row]).round(3).to_string(index=False), flush=True)
        if a.out:
            pd.DataFrame(rows).to_csv(a.out, index=False)
    out = pd.DataFrame(rows)
    pd.set_option("display.width", 250)
    print(out.round(3).to_string(index=False))
    cols = ["model_alone", "counts", "best_eer"] + [f"{r}_eer" for r in a.rules] + [f"{r}_dcf" for r in a.rules]
    print("median:", out[cols].median().round(3).to_dict())
    print("max:", out[cols].max().round(3).to_dict())


if __name__ == "__main__":
    main()
