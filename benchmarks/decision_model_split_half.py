"""Split-half check of ``decision_model`` on ASVspoof 2019 LA (issue 19's protocol).

Protocol: every speaker × class × attack cell of a system's table is split at random into a
fitted share A (default 20 %) and a held-out share B.  The threshold is SVEva's τ* of the
*full* table, the same for every estimator and for the reference (B's counted value).  One
fit per system and seed, ``decision_model(A, τ*, ["speaker_gender"], factors=["attack"])``
(options ``--pool`` → ``pool_groups=True``, ``--factor-by-group`` → a random gender × attack
interaction).  Targets and estimators: ``decision_model_floor.targets`` —

* cells: gender FNR, FPR and SVEva's ratios (``ratio_overall`` = DCF_g / DCF_all, FNR and
  FPR ratios); gender × attack FPR (13 attacks); random groups of 2–4 speakers of one gender
  (drawn per seed), FNR and FPR;
* ``counting``: the counted value on A;
* ``model_new``: the default subgroup rate (a new speaker of the gender; gender cells only);
* ``model_obs``: ``result.rates(B, by)`` — the trial-weighted conditional rates of the
  target's own speakers (and attacks), weighted by B's trials, calibrated to A's counts per
  class × gender (the default); ``model_raw``: ``calibrate=False``;
* ``shrink``: the best linear shrinkage of counts, w·count + (1−w)·pooled, w chosen per system
  × cell kind *with B in hand* (an oracle); pooled = the class rate of A over both genders
  (gender), the attack's rate of A over both genders (gender × attack), the gender's rate of
  A (speaker groups), 1 (ratios).

Metric: mean absolute error against B on the rate (ratio) scale; its ratio to counting's per
system, then the median over the 10 systems and the number of systems where it is below 1.

Usage: ``OPENBLAS_NUM_THREADS=1 nice -n 5 python benchmarks/decision_model_split_half.py
[--share 0.2] [--seeds 1 2] [--systems ...] [--pool] [--factor-by-group] [--out cells.csv]``;
``--insample`` instead runs issue 20's in-sample line on the full tables.
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
sys.path.insert(0, str(ROOT / "benchmarks"))

from decision_model_floor import split, summarise, targets, with_groups

import scoremix as sm

DATA = ROOT.parent / "shared" / "data" / "asvspoof2019_la_eval" / "asvspoof2019_la_eval_multisystem_long.csv.gz"


def system_and_threshold(d: pd.DataFrame, system: str) -> tuple[pd.DataFrame, float]:
    """One system's trials (OC-softmax negated: higher = bona fide) and SVEva's τ* of the full table."""
    t = d[d.system == system].reset_index(drop=True)
    if system == "air_ocsoftmax":
        t["score"] = -t["score"]
    tau = sm.subgroup_dcf(t, ["speaker_gender"], positive="bonafide", n_boot=0, eer=False,
                          progress=False).threshold
    return t, tau


def one(t: pd.DataFrame, tau: float, share: float, seed: int, **kw) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    t = with_groups(t, np.random.default_rng(10_000 + seed))
    in_a = split(t, share, rng)
    A, B = t[in_a], t[~in_a]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = sm.decision_model(A, tau, ["speaker_gender"], positive="bonafide", factors=["attack"],
                              n_sim=2, n_boot=2, seed=seed, **kw)
        return targets(A, B, r, tau)


def insample(d: pd.DataFrame, systems: list[str], **kw) -> None:
    """Issue 20's in-sample line: model FNR, FPR, DCF and SVEva ratios of each gender inside
    the speaker-bootstrap 95 % interval of the counted value, at τ* (min_dcf)."""
    n_in = n_all = 0
    for system in systems:
        t = d[d.system == system]
        if system == "air_ocsoftmax":
            t = t.assign(score=-t["score"])
        t0 = time.time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = sm.decision_model(t, "min_dcf", ["speaker_gender"], positive="bonafide", factors=["attack"],
                                  n_sim=300, n_boot=300, seed=1, **kw)
        ins = r.inside()
        n_in, n_all = n_in + int(ins.to_numpy().sum()), n_all + ins.size
        out = [f"{g}:{m}" for g in ins.index for m in ins.columns if not ins.loc[g, m]]
        print(f"# {system}: {int(ins.to_numpy().sum())}/{ins.size} inside, outside {out} "
              f"({time.time() - t0:.0f} s)", flush=True)
    print(f"in-sample: {n_in}/{n_all} ({n_in / n_all:.1%}) inside the counted 95 % intervals")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--share", type=float, default=0.2)
    ap.add_argument("--seeds", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--systems", nargs="*", default=None)
    ap.add_argument("--out", default=None, help="CSV of every cell")
    ap.add_argument("--pool", action="store_true", help="pool_groups=True")
    ap.add_argument("--factor-by-group", action="store_true", help="factor_by_group=True")
    ap.add_argument("--factor-by-speaker", action="store_true", help="factor_by_speaker=True")
    ap.add_argument("--insample", action="store_true",
                    help="instead: the in-sample acceptance (model value inside the counted 95 %% "
                         "interval) on the full tables, 300 draws and replicates, seed 1")
    a = ap.parse_args()
    d = pd.read_csv(DATA)
    systems = a.systems or sorted(d.system.unique())
    if a.insample:
        insample(d, systems, pool_groups=a.pool, factor_by_group=a.factor_by_group,
                 factor_by_speaker=a.factor_by_speaker)
        return
    out, allc = [], []
    for system in systems:
        t, tau = system_and_threshold(d, system)
        t0 = time.time()
        res = pd.concat([one(t, tau, a.share, s, pool_groups=a.pool, factor_by_group=a.factor_by_group,
                             factor_by_speaker=a.factor_by_speaker).assign(seed=s) for s in a.seeds], ignore_index=True)
        allc.append(res.assign(system=system))
        out.append(summarise(res).assign(system=system))
        print(f"# {system}: {time.time() - t0:.0f} s", flush=True)
    out = pd.concat(out, ignore_index=True)
    print(f"\n# share {a.share}, seeds {a.seeds}, pool_groups={a.pool}, factor_by_group={a.factor_by_group}, "
          f"factor_by_speaker={a.factor_by_speaker}")
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    rows = []
    for kind, o in out.groupby("kind", sort=False):
        row = {"kind": kind}
        for e in ("model_new", "model_raw", "model_obs", "shrink"):
            if f"ratio_{e}" in o and o[f"ratio_{e}"].notna().all():
                row[f"{e} median"] = float(np.median(o[f"ratio_{e}"]))
                row[f"{e} <1"] = f"{int((o[f'ratio_{e}'] < 1).sum())}/{len(o)}"
        row["counting MAE"] = float(o["mae_counting"].mean())
        rows.append(row)
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    print()
    wide = out.pivot(index="system", columns="kind", values="ratio_model_obs")
    print("model_obs MAE / counting MAE per system:")
    print(wide.to_string(float_format=lambda v: f"{v:.2f}"))
    if a.out:
        pd.concat(allc, ignore_index=True).to_csv(a.out, index=False)


if __name__ == "__main__":
    main()
