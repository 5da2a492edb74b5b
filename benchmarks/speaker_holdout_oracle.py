"""What the per-speaker held-out line of issue 19 can reach: the protocol on tables simulated
from a known truth with the exact LA design.

Each truth gives every speaker × class × attack cell of the real table (speakers with both
classes; the real cell counts) a known score distribution, so every speaker's *true* EER and
minimum DCF (p_target 0.05, ROCCH / attainable thresholds of the true distribution) are known:

* ``empirical``: speaker-level empirical resampling — a cell's truth is the empirical
  distribution of the real cell's scores (drawn with replacement); a speaker's true rate is the
  empirical rate of all the speaker's real trials;
* ``model``: the system's ``score_model`` fit on the whole real table without speaker shape
  pooling (speaker location and log-SD effects at their posterior means, the failure mixture
  with every speaker's failure share): each row's conditional mixture; true rates are the fit's
  conditional model rates (``model_group_measures``).

Every replicate draws a new table, splits it exactly as ``validate_model`` does (``split_cells``,
share A) and scores estimators of each speaker's held-out empirical rate on B by MAE relative to
counting on A (the issue's ratio):

* ``true``: the speaker's true rate (the oracle estimator of the rate);
* ``median``: the median of the speaker's held-out empirical rate under the truth (from
  ``--median-draws`` independent tables): the MAE-optimal predictor of B given the truth, i.e.
  the lowest ratio any estimator can reach in expectation;
* ``shrunk``: the best linear shrinkage of counts (λ chosen on B, as in ``validate_model``);
* ``model``: ``score_model`` (current defaults) through ``validate_model`` on the same split
  (first ``--model-reps`` replicates only: minutes each).

Besides, ``*_vs_true`` columns: the MAE to the speaker's TRUE rate relative to counting's (the
error in estimating the rate itself, which only a simulation can measure).

    python3 benchmarks/speaker_holdout_oracle.py --systems rawgat_st_cat --reps 40 --model-reps 2
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from scoremix.validation import empirical_group_measures, model_group_measures, shrinkage_mae, split_cells
from scoremix.metrics import eer, min_dcf

HERE = Path(__file__).resolve().parent
import sys  # noqa: E402

sys.path.insert(0, str(HERE))
from speaker_holdout import DATA, system_table  # noqa: E402

MEASURES = ("eer", "min_dcf")
DEFAULT = ["rawgat_st_cat", "rawgat_st_mul", "rawgat_st_add", "aasist_junjul", "lfcc_gmm_highres"]


def both_classes(t: pd.DataFrame) -> pd.DataFrame:
    """Speakers with both classes (as ``validate_model`` keeps them), index reset."""
    ok = t.groupby("speaker")["label"].agg(lambda v: v.nunique() == 2)
    return t[t["speaker"].map(ok).to_numpy(bool)].reset_index(drop=True)


def cell_codes(t: pd.DataFrame) -> np.ndarray:
    return t.groupby(["speaker", "label", "attack"], sort=True, observed=True).ngroup().to_numpy()


class EmpiricalTruth:
    """Each cell's truth: the empirical distribution of the real cell's scores."""

    name = "empirical"

    def __init__(self, t: pd.DataFrame) -> None:
        self.t = t
        self.score = t["score"].to_numpy(np.float64)
        codes = cell_codes(t)
        self.order = np.argsort(codes, kind="stable")
        cs = codes[self.order]
        start = np.r_[0, np.flatnonzero(np.diff(cs)) + 1]
        n = np.diff(np.r_[start, cs.size])
        self.start_of_row = np.repeat(start, n)[np.argsort(self.order, kind="stable")]
        self.n_of_row = np.repeat(n, n)[np.argsort(self.order, kind="stable")]

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        k = self.start_of_row + np.floor(rng.random(self.score.size) * self.n_of_row).astype(np.int64)
        return self.score[self.order[k]]

    def true_measures(self) -> pd.DataFrame:
        y = (self.t["label"] == "bonafide").to_numpy(np.int8)
        return empirical_group_measures(self.t, ["speaker"], score="score", y=y)


class ModelTruth:
    """Each row's conditional mixture under the system's fit (no speaker shape pooling)."""

    name = "model"

    def __init__(self, t: pd.DataFrame) -> None:
        import scoremix as sm
        from scoremix.locscale.speaker_pool import base_components

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.fit = sm.score_model(t, score="score", label="label", speaker="speaker", factors=["attack"],
                                      positive="bonafide", speaker_pooling=None)
        self.t = t
        mean, sd, strata, w1, m2, s2, st2, w2 = base_components(self.fit, None)
        n = mean.size
        rows = [np.arange(n)]
        ws, ms, ss, sts = [np.ones(n) if w1 is None else w1], [mean], [sd], [strata]
        if m2 is not None:
            for j in range(m2.shape[1]):
                rows.append(np.arange(n))
                ws.append(w2[:, j])
                ms.append(m2[:, j])
                ss.append(s2[:, j])
                sts.append(st2[:, j])
        row, w = np.concatenate(rows), np.concatenate(ws)
        keep = w > 0
        codes = cell_codes(t)
        cell = codes[row[keep]]
        o = np.argsort(cell, kind="stable")
        self.c_w = w[keep][o]
        self.c_mean, self.c_sd = np.concatenate(ms)[keep][o], np.concatenate(ss)[keep][o]
        self.c_stratum = np.concatenate(sts)[keep][o]
        cs = cell[o]
        self.G = np.cumsum(self.c_w)
        start = np.r_[0, np.flatnonzero(np.diff(cs)) + 1]
        end = np.r_[start[1:], cs.size]
        base = np.where(start > 0, self.G[np.maximum(start - 1, 0)], 0.0)
        tot = self.G[end - 1] - base
        cell_ids = cs[start]
        pos = np.searchsorted(cell_ids, codes)
        self.row_base, self.row_tot = base[pos], tot[pos]
        self.levels = pd.unique(self.c_stratum)

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        n = self.row_base.size
        target = self.row_base + rng.random(n) * self.row_tot
        k = np.minimum(np.searchsorted(self.G, target, side="right"), self.G.size - 1)
        z = self.c_mean[k] + self.c_sd[k] * rng.standard_normal(n)
        st = self.c_stratum[k]
        out = np.empty(n)
        for lv in self.levels:
            m = st == lv
            if m.any():
                h = self.fit.transform.stratum(lv)
                out[m] = np.asarray(h.values)[np.searchsorted(h.alpha, z[m], side="left")]
        return out

    def true_measures(self) -> pd.DataFrame:
        return model_group_measures(self.fit, ["speaker"], label="label", positive="bonafide")


def split_measures(sim: pd.DataFrame, y: np.ndarray, share: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame,
                                                                                       dict]:
    in_a = split_cells(sim.assign(__y=y), share, ["speaker", "__y", "attack"], seed=seed)
    A, B = sim.loc[in_a].reset_index(drop=True), sim.loc[~in_a].reset_index(drop=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cnt = empirical_group_measures(A, ["speaker"], score="score", y=y[in_a])
        held = empirical_group_measures(B, ["speaker"], score="score", y=y[~in_a])
        sA = A["score"].to_numpy(np.float64)
        pooled = {"eer": float(eer(sA, y[in_a])), "min_dcf": float(min_dcf(sA, y[in_a], p_target=0.05).value)}
    return cnt, held, pooled


def run(truth, share: float, reps: int, model_reps: int, median_draws: int, seed0: int) -> pd.DataFrame:
    t = truth.t
    y = (t["label"] == "bonafide").to_numpy(np.int8)
    true = truth.true_measures()
    # the MAE-optimal predictor of B given the truth: median of the held-out rate over independent tables
    rng_m = np.random.default_rng([seed0, 999])
    helds = {m: [] for m in MEASURES}
    for k in range(median_draws):
        _, held, _ = split_measures(t.assign(score=truth.draw(rng_m)), y, share, seed=10_000 + k)
        for m in MEASURES:
            helds[m].append(held[m])
    med = {m: pd.concat(helds[m], axis=1).median(axis=1) for m in MEASURES}
    rows = []
    rng = np.random.default_rng([seed0, 1])
    for r in range(reps):
        sim = t.assign(score=truth.draw(rng))
        cnt, held, pooled = split_measures(sim, y, share, seed=r)
        mod = None
        if r < model_reps:
            from scoremix.validation import validate_model

            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                v = validate_model(sim, score="score", label="label", speaker="speaker", factors=["attack"],
                                   positive="bonafide", share=share, seed=r)
            g = v.groups
            assert np.allclose(g["eer_heldout"].reindex(held.index).to_numpy(), held["eer"].to_numpy(),
                               equal_nan=True), "validate_model's split differs"
            mod = g
            sel = v.info["selection"]
            pool = getattr(sel, "speaker_pooling", None)
            print(f"  model rep {r}: {time.perf_counter() - t0:.0f} s, {sel.chosen.name}"
                  + (f" kappa {pool.kappa}" if pool is not None else ""), flush=True)
        for m in MEASURES:
            df = pd.DataFrame({"held": held[m], "count": cnt[m], "true": true[m].reindex(held.index),
                               "median": med[m].reindex(held.index)}).dropna()
            h = df["held"].to_numpy()
            mae_c = np.abs(df["count"] - h).mean()
            mae_s, lam = shrinkage_mae(df["count"].to_numpy(), pooled[m], h)
            row = dict(truth=truth.name, share=share, rep=r, measure=m, n=len(df), mae_count=mae_c,
                       ratio_true=np.abs(df["true"] - h).mean() / mae_c,
                       ratio_median=np.abs(df["median"] - h).mean() / mae_c,
                       ratio_shrunk=mae_s / mae_c, lam=lam)
            tr = df["true"].to_numpy()
            mae_ct = np.abs(df["count"] - tr).mean()
            row["shrunk_vs_true"] = np.abs(lam * df["count"] + (1 - lam) * pooled[m] - tr).mean() / mae_ct
            row["true_mean"] = float(tr.mean())
            row["true_zero_share"] = float(np.mean(tr < 1e-12))
            row["held_zero_share"] = float(np.mean(h < 1e-12))
            if mod is not None:
                mm = mod[f"{m}_model"].reindex(df.index).to_numpy()
                row["ratio_model"] = np.abs(mm - h).mean() / mae_c
                row["model_vs_true"] = np.abs(mm - tr).mean() / mae_ct
            rows.append(row)
    return pd.DataFrame(rows)


def summarise(out: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in ["ratio_true", "ratio_median", "ratio_shrunk", "ratio_model", "shrunk_vs_true",
                        "model_vs_true"] if c in out.columns]
    g = out.groupby(["system", "truth", "share", "measure"])
    mean = g[cols].mean()
    se = g[cols].std(ddof=1) / np.sqrt(g[cols].count())
    res = mean.round(3).astype(str) + " ± " + se.round(3).astype(str)
    res["p(true>1)"] = g["ratio_true"].apply(lambda v: float(np.mean(v > 1.0))).round(2)
    res["reps"] = g.size()
    res["true_mean"] = g["true_mean"].mean().round(4)
    res["true_zero"] = g["true_zero_share"].mean().round(2)
    res["held_zero"] = g["held_zero_share"].mean().round(2)
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--systems", nargs="*", default=DEFAULT)
    ap.add_argument("--truths", nargs="*", default=["empirical", "model"])
    ap.add_argument("--shares", nargs="*", type=float, default=[0.2])
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--model-reps", type=int, default=0)
    ap.add_argument("--median-draws", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    d = pd.read_csv(DATA)
    outs = []
    for sysname in a.systems:
        t = both_classes(system_table(d, sysname))
        for tn in a.truths:
            t0 = time.perf_counter()
            truth = EmpiricalTruth(t) if tn == "empirical" else ModelTruth(t)
            for share in a.shares:
                o = run(truth, share, a.reps, a.model_reps, a.median_draws, a.seed).assign(system=sysname)
                outs.append(o)
                print(summarise(o).to_string(), f"({time.perf_counter() - t0:.0f} s)", flush=True)
                if a.out:
                    pd.concat(outs).to_csv(a.out, index=False)
    out = pd.concat(outs)
    pd.set_option("display.width", 250)
    print("\n== summary (mean ± MC SE over replicates)")
    print(summarise(out).to_string())


if __name__ == "__main__":
    main()
