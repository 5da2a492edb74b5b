"""Split-half check of ``decision_model`` on ASVspoof 2019 LA (issue 19's protocol).

Protocol: every speaker × class × attack cell of a system's table is split at random into a
fitted share A (default 20 %) and a held-out share B.  The threshold is SVEva's τ* of the
*full* table, the same for every estimator and for the reference.  On A:

* ``counting``: the counted rate of the cell;
* ``model_new``: ``decision_model(A, τ*, ["speaker_gender"], factors=["attack"])`` — the rate
  of a new speaker of the subgroup (marginal over the fitted speaker distribution);
* ``model_obs``: the same fit, ``speakers="observed"`` — the trial-weighted rate of the
  subgroup's own (fitted) speakers at their conditional modes; for gender × attack cells,
  ``Σ_k n_A(k,l) μ̂(k,l) / Σ_k n_A(k,l)`` with ``μ̂`` from ``fit.predict`` (speaker and attack
  conditional modes);
* ``shrink``: the best linear shrinkage of counts, ``w·count + (1-w)·pooled`` (pooled = the
  class rate of A over both genders), with ``w`` on a grid chosen *per system with B in hand*
  (an oracle: an upper bound on what any linear shrinkage can do).

Reference: the counted rate of the same cell on B.  Cells: gender FNR and FPR (4 per
system) and gender × attack FPR (26 per system, 13 spoofing attacks).  Metrics, both fair to
every estimator: mean absolute error on the rate scale (no flooring needed), and mean
|log error| with every rate — estimate and reference alike — floored at 0.5/n of its cell's
trials (half a count, the resolution of counting).

Usage: ``OPENBLAS_NUM_THREADS=1 python benchmarks/decision_model_split_half.py [--share 0.2]
[--seeds 0 1] [--systems ...] [--point mean|mode] [--pool]``  (all 10 systems by default;
``--point``/``--pool`` are passed to ``decision_model``; the gender × attack model cells are
always plug-in predictions at the conditional modes).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import scoremix as sm  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "asvspoof2019_la_eval" / "asvspoof2019_la_eval_multisystem_long.csv.gz"
EST = ("counting", "model_new", "model_obs", "shrink")


def split(t: pd.DataFrame, share: float, rng: np.random.Generator) -> np.ndarray:
    """Boolean mask of A: in every speaker × label × attack cell, round(share·n) (≥ 1) rows."""
    in_a = np.zeros(len(t), bool)
    for idx in t.groupby(["speaker", "label", "attack"]).indices.values():
        k = max(1, int(round(share * len(idx))))
        in_a[rng.choice(idx, size=k, replace=False)] = True
    return in_a


def errors(t: pd.DataFrame, tau: float) -> pd.DataFrame:
    y = (t["label"] == "bonafide").to_numpy()
    s = t["score"].to_numpy(float)
    return pd.DataFrame({"g": t["speaker_gender"].to_numpy(), "attack": t["attack"].to_numpy(),
                         "spk": t["speaker"].to_numpy(), "pos": y,
                         "err": np.where(y, s < tau, s >= tau).astype(float)})


def one(t: pd.DataFrame, tau: float, share: float, seed: int, **kw) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    in_a = split(t, share, rng)
    A, B = t[in_a], t[~in_a]
    ea, eb = errors(A, tau), errors(B, tau)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r_new = sm.decision_model(A, tau, ["speaker_gender"], positive="bonafide", factors=["attack"],
                                  n_sim=2, n_boot=2, seed=seed, **kw)
        r_obs = sm.decision_model(A, tau, ["speaker_gender"], positive="bonafide", factors=["attack"],
                                  n_sim=2, n_boot=2, seed=seed, speakers="observed", **kw)
    rows = []
    pooled = {True: ea.loc[ea.pos, "err"].mean(), False: ea.loc[~ea.pos, "err"].mean()}
    for (g, pos), sa in ea.groupby(["g", "pos"]):
        sb = eb[(eb.g == g) & (eb.pos == pos)]
        m = "fnr" if pos else "fpr"
        rows.append(dict(kind=f"gender {m}", cell=f"{g}", pos=pos, n_a=len(sa), n_b=len(sb),
                         truth=sb["err"].mean(), counting=sa["err"].mean(), pooled=pooled[pos],
                         model_new=r_new.table.loc[g, f"{m}_model"],
                         model_obs=r_obs.table.loc[g, f"{m}_model"]))
    # gender × attack FPR: conditional predictions of every A cell (speaker × attack)
    fit = r_obs.fit
    neg = ea[~ea.pos]
    cells = neg.groupby(["g", "attack", "spk"]).size().rename("n").reset_index()
    newd = pd.DataFrame({"cell": "neg|" + cells["g"].astype(str), "spk": cells["spk"].astype(str),
                         "f0": cells["attack"].astype(str), "isneg": 1.0, "ispos": 0.0,
                         "cls": "neg"})
    newd["cell"] = pd.Categorical(newd["cell"], categories=fit.spec.frame["cell"].cat.categories) \
        if hasattr(fit, "spec") and hasattr(fit.spec, "frame") else newd["cell"]
    cells["mu"] = np.asarray(fit.predict(newd, type="response"), float)
    for (g, att), c in cells.groupby(["g", "attack"]):
        sa = neg[(neg.g == g) & (neg.attack == att)]
        sb = eb[(~eb.pos) & (eb.g == g) & (eb.attack == att)]
        rows.append(dict(kind="gender×attack fpr", cell=f"{g}:{att}", pos=False, n_a=len(sa), n_b=len(sb),
                         truth=sb["err"].mean(), counting=sa["err"].mean(), pooled=pooled[False],
                         model_new=np.nan, model_obs=float((c["n"] * c["mu"]).sum() / c["n"].sum())))
    return pd.DataFrame(rows)


def score(df: pd.DataFrame, w: float) -> pd.DataFrame:
    df = df.copy()
    df["shrink"] = w * df["counting"] + (1 - w) * df["pooled"]
    fa, fb = 0.5 / df["n_a"], 0.5 / df["n_b"]
    lt = np.log(np.maximum(df["truth"], fb))
    for e in EST:
        df[f"ae_{e}"] = (df[e] - df["truth"]).abs()
        df[f"le_{e}"] = (np.log(np.maximum(df[e], fa)) - lt).abs()
    return df


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--share", type=float, default=0.2)
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1])
    ap.add_argument("--systems", nargs="*", default=None)
    ap.add_argument("--out", default=None, help="CSV of every cell")
    ap.add_argument("--point", default="mode", choices=["mean", "mode"])
    ap.add_argument("--pool", action="store_true", help="pool_groups=True")
    a = ap.parse_args()
    d = pd.read_csv(DATA)
    systems = a.systems or sorted(d.system.unique())
    allc = []
    for system in systems:
        t = d[d.system == system].reset_index(drop=True)
        if system == "air_ocsoftmax":
            t["score"] = -t["score"]
        tau = sm.subgroup_dcf(t, ["speaker_gender"], positive="bonafide", n_boot=0, eer=False,
                              progress=False).threshold
        t0 = time.time()
        res = pd.concat([one(t, tau, a.share, s, point=a.point, pool_groups=a.pool).assign(seed=s) for s in a.seeds], ignore_index=True)
        res["system"] = system
        allc.append(res)
        print(f"# {system}: {time.time() - t0:.0f} s", flush=True)
    res = pd.concat(allc, ignore_index=True)
    grid = np.linspace(0, 1, 101)
    out = []
    for (system, kind), c in res.groupby(["system", "kind"]):
        # oracle shrinkage weight per system × cell kind, chosen on the absolute error
        w = grid[np.argmin([score(c, w)["ae_shrink"].mean() for w in grid])]
        s = score(c, w)
        out.append({"system": system, "kind": kind, "w_shrink": w, "cells": len(s),
                    **{f"mae_{e}": s[f"ae_{e}"].mean() for e in EST},
                    **{f"logerr_{e}": s[f"le_{e}"].mean() for e in EST}})
    out = pd.DataFrame(out)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    for kind, o in out.groupby("kind"):
        print(f"\n## {kind}, share {a.share}, seeds {a.seeds}")
        cols = ["system", "w_shrink"] + [f"mae_{e}" for e in EST] + [f"logerr_{e}" for e in EST]
        print(o[cols].to_string(index=False, float_format=lambda v: f"{v:.5g}"))
        print("mean:", {k: round(float(o[k].mean()), 5) for k in cols[2:]})
        for e in ("model_new", "model_obs", "shrink"):
            if o[f"mae_{e}"].notna().all():
                print(f"  {e}: MAE ratio to counting median {np.median(o[f'mae_{e}'] / o['mae_counting']):.3f}, "
                      f"systems better {int((o[f'mae_{e}'] < o['mae_counting']).sum())}/{len(o)}")
    if a.out:
        res.to_csv(a.out, index=False)


if __name__ == "__main__":
    main()
