"""What limits the decision model on the split-half protocol: a simulation with known truth.

Simulated decision tables shaped like one ASVspoof 2019 LA system (37 female and 30 male
speakers; per speaker ~137 / ~76 bona fide trials and ~92 / ~50 spoofed trials per each of 13
attacks), errors at a fixed threshold drawn from

    logit p = β[class, gender] + b[speaker, class] + a[attack]            (negatives)
              + c[gender, attack] + d[speaker, attack]

with (b_neg, b_pos) ~ N(0, [[0.5², ρ], [ρ, 1.5²]]) (ρ = −0.6·0.5·1.5), a ~ N(0, 3.5²),
c ~ N(0, 0.5²), d ~ N(0, 0.5²) (the last two are *not* in the fitted model unless
``factor_by_group``), β = (−1.5, −1.2) for misses and (−9.0, −8.5) for false alarms
(the LA fits give σ_pos 1.2–1.7, σ_neg 0.44–0.54, ρ −0.16 to −0.68, attack SD 3.2–5.2).

Each speaker × class × attack cell is split as on LA (round(20 %) of its trials to A, the rest
to B).  Targets, each a set of B cells: gender FNR and FPR, gender × attack FPR, and random
groups of 2–4 speakers of one gender (FNR and FPR).  Estimators:

* ``floor``: the *true* rate of the target, Σ_B n_c p_c / Σ_B n_c — what even the truth
  achieves against B's counting noise;
* ``counting``: the counted rate of A;
* ``model_new``: ``decision_model(A)``'s default (a new speaker of the gender; gender only);
* ``model_obs``: ``decision_model(A).rates(B, by)`` — trial-weighted conditional rates of the
  target's own speakers, weighted by B's trials, β calibrated so that A's fitted cells add
  up to A's counts (``calibrate=True``, the default); ``model_raw``: the same with
  ``calibrate=False`` (the Laplace β̂);
* ``shrink``: the best linear shrinkage of counts, w·count + (1−w)·pooled, with w chosen
  with B in hand (an oracle), pooled = the class rate of A over both genders (gender), the
  attack's rate of A over both genders (gender × attack), the gender's rate of A (speaker
  groups).

Reported: mean absolute error against B's counted rate, its ratio to counting's, and the bias
and RMSE of each estimator against the true target rate (the floor's value).

Usage: ``OPENBLAS_NUM_THREADS=1 nice -n 5 python benchmarks/decision_model_floor.py
[--reps 20] [--share 0.2] [--factor-by-group]``
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import special

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import scoremix as sm  # noqa: E402

ATTACKS = [f"A{k:02d}" for k in range(7, 20)]


def simulate(seed: int, *, n_f: int = 37, n_m: int = 30, sd_pos: float = 1.5, sd_neg: float = 0.5,
             rho: float = -0.6, sd_attack: float = 3.5, sd_ga: float = 0.5, sd_sa: float = 0.5,
             beta: dict | None = None, scale: float = 1.0) -> pd.DataFrame:
    """One LA-like decision table at threshold 0 (score −1/+1 coding an error), with the true
    error probability ``p`` of every trial.  ``scale`` multiplies every cell's trial count."""
    rng = np.random.default_rng(seed)
    beta = beta or {("pos", "female"): -1.5, ("pos", "male"): -1.2,
                    ("neg", "female"): -9.0, ("neg", "male"): -8.5}
    a = dict(zip(ATTACKS, rng.normal(0, sd_attack, len(ATTACKS))))
    c = {(g, l): rng.normal(0, sd_ga) for g in ("female", "male") for l in ATTACKS}
    cov = np.array([[sd_neg ** 2, rho * sd_neg * sd_pos], [rho * sd_neg * sd_pos, sd_pos ** 2]])
    parts = []
    for k in range(n_f + n_m):
        g = "female" if k < n_f else "male"
        spk = f"S{k:03d}"
        b_neg, b_pos = rng.multivariate_normal([0, 0], cov)
        n_pos = max(5, int(round(scale * rng.normal(137 if g == "female" else 76, 15))))
        cells = [("bonafide", "bonafide", n_pos, special.expit(beta[("pos", g)] + b_pos))]
        for l in ATTACKS:
            n = max(3, int(round(scale * rng.normal(92 if g == "female" else 50, 8))))
            eta = beta[("neg", g)] + b_neg + a[l] + c[(g, l)] + rng.normal(0, sd_sa)
            cells.append(("spoof", l, n, special.expit(eta)))
        for lab, att, n, p in cells:
            e = rng.random(n) < p
            sign = np.where(e, -1.0, 1.0) if lab == "bonafide" else np.where(e, 1.0, -1.0)
            parts.append(pd.DataFrame({"score": sign, "label": lab, "speaker": spk, "speaker_gender": g,
                                       "attack": att, "p": p}))
    t = pd.concat(parts, ignore_index=True)
    return with_groups(t, rng)


def with_groups(t: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """Add ``spk_group`` (random groups of 2-4 speakers within each gender) and
    ``gender_attack``."""
    grp = {}
    for g, spks in t.groupby("speaker_gender")["speaker"].unique().items():
        spks = list(rng.permutation(spks))
        i = 0
        while i < len(spks):
            m = int(rng.integers(2, 5))
            if len(spks) - (i + m) == 1:
                m += 1
            for s in spks[i:i + m]:
                grp[s] = f"{str(g)[0]}{i:02d}"
            i += m
    t = t.copy()
    t["spk_group"] = t["speaker"].map(grp)
    t["gender_attack"] = t["speaker_gender"].astype(str) + ":" + t["attack"].astype(str)
    return t


def split(t: pd.DataFrame, share: float, rng: np.random.Generator) -> np.ndarray:
    """Boolean mask of A: in every speaker × label × attack cell, round(share·n) (≥ 1) rows."""
    in_a = np.zeros(len(t), bool)
    for idx in t.groupby(["speaker", "label", "attack"]).indices.values():
        k = max(1, int(round(share * len(idx))))
        in_a[rng.choice(idx, size=k, replace=False)] = True
    return in_a


def err(t: pd.DataFrame, tau: float = 0.0) -> np.ndarray:
    y = (t["label"] == "bonafide").to_numpy()
    s = t["score"].to_numpy(float)
    return np.where(y, s < tau, s >= tau).astype(float)


def targets(A: pd.DataFrame, B: pd.DataFrame, r, tau: float = 0.0) -> pd.DataFrame:
    """One row per target cell: truth (floor), counted A and B, model estimates, pooled."""
    A, B = A.assign(err=err(A, tau), pos=A["label"] == "bonafide"), B.assign(err=err(B, tau),
                                                                             pos=B["label"] == "bonafide")
    rows = []
    specs = [("gender", "speaker_gender", None), ("gender×attack", "gender_attack", "attack"),
             ("speaker group", "spk_group", "speaker_gender")]
    for kind, col, pool_col in specs:
        obs = r.rates(B, col, n_sim=2)
        raw = r.rates(B, col, n_sim=2, calibrate=False)
        for pos in (True, False):
            if kind == "gender×attack" and pos:
                continue
            m = "fnr" if pos else "fpr"
            a_c, b_c = A[A.pos == pos], B[B.pos == pos]
            ga, gb = a_c.groupby(col), b_c.groupby(col)
            for h, sa in ga:
                sb = b_c.iloc[gb.indices[h]]
                if pool_col is None:
                    pooled = a_c["err"].mean()
                else:
                    pooled = a_c.loc[a_c[pool_col] == sa[pool_col].iloc[0], "err"].mean()
                rows.append(dict(kind=f"{kind} {m}", cell=h, n_a=len(sa), n_b=len(sb),
                                 floor=sb["p"].mean() if "p" in sb else np.nan, ref=sb["err"].mean(), counting=sa["err"].mean(),
                                 pooled=pooled, model_obs=obs.loc[h, f"{m}_model"],
                                 model_raw=raw.loc[h, f"{m}_model"],
                                 model_new=(r.table.loc[h, f"{m}_model"] if kind == "gender" else np.nan)))
    # SVEva's ratios of the gender subgroups (DCF = 0.05 FNR + 0.95 FPR): every estimator's
    # ratio from its own rates; the shrinkage pulls the counted ratio toward 1
    obs = r.rates(B, "speaker_gender", n_sim=2)
    obs_all = r.rates(B.assign(_all="all"), "_all", n_sim=2).iloc[0]
    raw = r.rates(B, "speaker_gender", n_sim=2, calibrate=False)
    raw_all = r.rates(B.assign(_all="all"), "_all", n_sim=2, calibrate=False).iloc[0]
    has_p = "p" in B.columns

    def ratios(fnr, fpr, fnr_all, fpr_all):
        dcf, dcf_all = 0.05 * fnr + 0.95 * fpr, 0.05 * fnr_all + 0.95 * fpr_all
        return {"ratio_overall": dcf / dcf_all, "fnr_ratio": fnr / fnr_all, "fpr_ratio": fpr / fpr_all}

    def rate_pair(d, col="err"):
        return d.loc[d.pos, col].mean(), d.loc[~d.pos, col].mean()

    for h in sorted(A["speaker_gender"].unique()):
        a_h, b_h = A[A.speaker_gender == h], B[B.speaker_gender == h]
        est = {"counting": ratios(*rate_pair(a_h), *rate_pair(A)),
               "ref": ratios(*rate_pair(b_h), *rate_pair(B)),
               "model_obs": ratios(obs.loc[h, "fnr_model"], obs.loc[h, "fpr_model"],
                                   obs_all["fnr_model"], obs_all["fpr_model"]),
               "model_raw": ratios(raw.loc[h, "fnr_model"], raw.loc[h, "fpr_model"],
                                   raw_all["fnr_model"], raw_all["fpr_model"]),
               "model_new": {m: r.table.loc[h, f"{m}_model"] for m in ("ratio_overall", "fnr_ratio", "fpr_ratio")},
               "floor": (ratios(*rate_pair(b_h, "p"), *rate_pair(B, "p")) if has_p
                         else dict.fromkeys(("ratio_overall", "fnr_ratio", "fpr_ratio"), np.nan))}
        for m in ("ratio_overall", "fnr_ratio", "fpr_ratio"):
            rows.append(dict(kind=f"gender {m}", cell=h, n_a=len(a_h), n_b=len(b_h), pooled=1.0,
                             **{e: v[m] for e, v in est.items()}))
    return pd.DataFrame(rows)


EST = ("floor", "counting", "model_new", "model_raw", "model_obs", "shrink")


def summarise(res: pd.DataFrame) -> pd.DataFrame:
    grid = np.linspace(0, 1, 101)
    out = []
    for kind, c in res.groupby("kind", sort=False):
        c = c.copy()
        # oracle weight of the linear shrinkage, chosen with B in hand
        w = grid[np.argmin([(w * c.counting + (1 - w) * c.pooled - c.ref).abs().mean() for w in grid])]
        c["shrink"] = w * c.counting + (1 - w) * c.pooled
        row = {"kind": kind, "cells": len(c), "w_shrink": w}
        mae_c = (c.counting - c.ref).abs().mean()
        for e in EST:
            if c[e].isna().all():
                continue
            row[f"mae_{e}"] = (c[e] - c.ref).abs().mean()
            row[f"ratio_{e}"] = row[f"mae_{e}"] / mae_c
            row[f"bias_{e}"] = (c[e] - c.floor).mean()
            row[f"rmse_{e}"] = float(np.sqrt(((c[e] - c.floor) ** 2).mean()))
        out.append(row)
    return pd.DataFrame(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--share", type=float, default=0.2)
    ap.add_argument("--factor-by-group", action="store_true")
    ap.add_argument("--factor-by-speaker", action="store_true")
    ap.add_argument("--sd-ga", type=float, default=0.5)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    allr = []
    t0 = time.time()
    for rep in range(a.reps):
        t = simulate(1000 + rep, sd_ga=a.sd_ga)
        in_a = split(t, a.share, np.random.default_rng(rep))
        A, B = t[in_a], t[~in_a]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = sm.decision_model(A, 0.0, ["speaker_gender"], positive="bonafide", factors=["attack"],
                                  n_sim=2, n_boot=2, seed=rep, factor_by_group=a.factor_by_group,
                                  factor_by_speaker=a.factor_by_speaker)
        allr.append(targets(A, B, r).assign(rep=rep))
    res = pd.concat(allr, ignore_index=True)
    print(f"# {a.reps} reps, share {a.share}, factor_by_group={a.factor_by_group}, "
          f"factor_by_speaker={a.factor_by_speaker}, sd_ga={a.sd_ga}, "
          f"{time.time() - t0:.0f} s")
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 40)
    s = summarise(res)
    print(s[["kind", "cells", "w_shrink"] + [f"ratio_{e}" for e in EST]].to_string(
        index=False, float_format=lambda v: f"{v:.3f}"))
    print()
    print(s[["kind"] + [f"{k}_{e}" for e in EST for k in ("bias", "rmse")]].to_string(
        index=False, float_format=lambda v: f"{v:.2e}"))
    if a.out:
        res.to_csv(a.out, index=False)


if __name__ == "__main__":
    main()
