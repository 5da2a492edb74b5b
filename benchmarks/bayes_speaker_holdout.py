"""Per-speaker posterior EER intervals of the Bayesian fit of what score_model chose, against
held-out trials (issue 25 / issue 19's split protocol; s7bayes-api).

Protocol (``benchmarks/speaker_holdout.py``, ``scoremix.validation``): speakers with both
classes; every speaker × class × attack cell split at random into a fitted share A and a
held-out share B (``--share``, default 0.5).  ``sm.score_model`` is fitted on A (failure
mixture and speaker shape pooling chosen by its CVs), then ``sm.bayes_score_model`` on the
same fit.  Per speaker: the posterior EER (median, 95 % interval; attainable thresholds),
whether the interval covers the speaker's empirical EER on B, beside the frequentist model EER
(``validation.model_group_measures``) and the speaker's own counts on A.  The same posterior
draws are also summarised without the speaker pooling (kappa = inf: the model part alone).

    nice -n 5 python3 benchmarks/bayes_speaker_holdout.py --system rawgat_st_mul --share 0.5 --seed 1

Writes ``docs/data/bayes_speaker_holdout.json`` (one key per system/share/seed).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import pandas as pd
from speaker_holdout import system_table as speaker_system_table  # benchmarks/ is sys.path[0]

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data" / "asvspoof2019_la_eval" / "asvspoof2019_la_eval_multisystem_long.csv.gz"
OUT = HERE.parent / "docs" / "data" / "bayes_speaker_holdout.json"


def system_table(system: str) -> pd.DataFrame:
    """One system's trials as ``benchmarks/speaker_holdout.py`` prepares them."""
    return speaker_system_table(pd.read_csv(DATA), system)[["speaker", "attack", "label", "score"]]


def load_avg() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def summarise(tab: pd.DataFrame, held: pd.Series, freq: pd.Series, count: pd.Series) -> dict:
    t = tab.drop(index="all").copy()
    t["heldout"] = 100 * held.reindex(t.index).to_numpy()
    t = t[np.isfinite(t["heldout"])]
    cov = ((t["lo"] <= t["heldout"]) & (t["heldout"] <= t["hi"])).to_numpy()
    return dict(n_speakers=int(len(t)), coverage=float(cov.mean()),
                mae_posterior_median=float(np.mean(np.abs(t["median"] - t["heldout"]))),
                mae_frequentist=float(np.mean(np.abs(100 * freq.reindex(t.index) - t["heldout"]))),
                mae_counts=float(np.mean(np.abs(100 * count.reindex(t.index) - t["heldout"]))),
                median_width=float(np.median(t["hi"] - t["lo"])),
                below=int((t["heldout"] < t["lo"]).sum()), above=int((t["heldout"] > t["hi"]).sum()))


def predictive_intervals(fit, post, B: pd.DataFrame, yB: np.ndarray, n_sim: int, level: float, seed: int
                         ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per speaker, the (posterior) predictive interval of the *empirical* EER of a held-out
    sample of B's size and class × attack mix: for every posterior draw (Bayes) or ``n_sim``
    times from the ML fit (frequentist plug-in), every B row's score is drawn from its A cell's
    distribution — the core Gaussian (of the draw / of the ML fit) mapped by the cell's stratum
    transform, the failure distribution G (N(0, 1) on the failure stratum), and the point masses
    at the cell's A scores, with the fit's weights (failure shares, omega) — and the speaker's
    ROCCH EER of the simulated scores against B's labels is taken.  Returns ``(bayes, freq)``
    tables of ``lo``, ``hi`` (percent)."""
    from scoremix.metrics import eer

    rng = np.random.default_rng(seed)
    data = fit._data
    spec = fit.locscale_spec
    spkA = np.asarray(data.speakers, dtype=object)[data.speaker_codes]
    keyA = data.core_key
    tr = fit.transform
    pool = getattr(fit, "speaker_pooling", None)
    omega = pool.omega(spkA, data.y) if pool is not None and pool.used else np.zeros(spkA.size)
    mix = fit.trial_mixture()
    if mix is None:
        w1f, w2f, st2f = np.ones(spkA.size), np.zeros(spkA.size), np.full(spkA.size, None, object)
    else:
        w1f, _, _, st2f, w2f = mix
        w1f, w2f, st2f = np.asarray(w1f, float), np.asarray(w2f, float), np.asarray(st2f, object)
    strata = fit.strata.to_numpy(dtype=object)
    tc = post.maps["trial_cell"]
    cells, d = post.cells, post.draws
    D = d["mu"].shape[0]
    idx = np.unique(np.round(np.linspace(0, D - 1, min(D, n_sim))).astype(np.int64))
    labB = np.where(yB == 1, "+", "-").astype(object)
    keyB = (pd.Series(labB) + ":" + B[spec.strata[0]].astype(str).to_numpy()).to_numpy(object)
    spkB = B[spec.speaker].astype(str).to_numpy(object)
    groupsA = pd.Series(np.arange(spkA.size)).groupby([spkA, keyA]).apply(np.asarray)
    out_b, out_f = [], []
    a = (1 - level) / 2
    for sp in np.unique(spkB):
        rowsB = np.flatnonzero(spkB == sp)
        sims_b = np.empty((idx.size, rowsB.size))
        sims_f = np.empty((n_sim, rowsB.size))
        for key in np.unique(keyB[rowsB]):
            rb = np.flatnonzero(keyB[rowsB] == key)
            rA = groupsA[(sp, key)]
            core = rA[tc[rA] >= 0]
            wc = float(np.sum((1 - omega[rA]) * w1f[rA] * (tc[rA] >= 0)))
            wg = float(np.sum((1 - omega[rA]) * (w2f[rA] + w1f[rA] * (tc[rA] < 0))))
            wp = float(np.sum(omega[rA]))
            gst = st2f[rA][0] if mix is not None else None
            if mix is not None and wc == 0 and wg > 0:
                gst = strata[rA[0]]
            p = np.array([wc, wg, wp]) / (wc + wg + wp)
            for sims, n_rep, draw in ((sims_b, idx.size, True), (sims_f, n_sim, False)):
                part = np.array([rng.choice(3, size=rb.size, p=p) for _ in range(n_rep)])     # (R, n)
                z = rng.standard_normal(part.shape)
                sc = np.empty(part.shape)
                if core.size:
                    k = tc[core[0]]
                    if draw:
                        m = (d["mu"][idx, cells.stratum[k]] + d["b"][idx, cells.unit[k]] + d["u"][idx, k])[:, None]
                        s = np.exp(d["lam"][idx, cells.stratum[k]] + d["g"][idx, cells.unit[k]])[:, None]
                    else:
                        m, s = fit.trial_mean[core[0]], fit.trial_sd[core[0]]
                    zc = m + s * z
                    sc[part == 0] = tr.inverse(zc[part == 0], np.full(int((part == 0).sum()), strata[core[0]], object))
                if (part == 1).any():
                    sc[part == 1] = tr.inverse(z[part == 1], np.full(int((part == 1).sum()), gst, object))
                if (part == 2).any():
                    sc[part == 2] = rng.choice(data.score[rA], size=int((part == 2).sum()))
                bad = np.isnan(sc)
                if bad.any():   # a stratum with one distinct score has no inverse: its point mass
                    lv = np.where(part == 1, gst, strata[core[0]] if core.size else gst)[bad]
                    sc[bad] = [data.score[strata == v][0] for v in lv]
                sims[:, rb] = sc
        yy = yB[rowsB]
        eb = np.array([eer(sims_b[r], yy) for r in range(idx.size)])
        ef = np.array([eer(sims_f[r], yy) for r in range(n_sim)])
        out_b.append((sp, 100 * np.quantile(eb, a), 100 * np.quantile(eb, 1 - a)))
        out_f.append((sp, 100 * np.quantile(ef, a), 100 * np.quantile(ef, 1 - a)))
    cols = ["speaker", "lo", "hi"]
    return (pd.DataFrame(out_b, columns=cols).set_index("speaker"),
            pd.DataFrame(out_f, columns=cols).set_index("speaker"))


def coverage(iv: pd.DataFrame, held: pd.Series) -> dict:
    h = 100 * held.reindex(iv.index)
    ok = np.isfinite(h)
    inside = ((iv["lo"] <= h) & (h <= iv["hi"]))[ok]
    return dict(n_speakers=int(ok.sum()), coverage=float(inside.mean()), median_width=float((iv["hi"] - iv["lo"]).median()),
                below=int((h < iv["lo"])[ok].sum()), above=int((h > iv["hi"])[ok].sum()))


def main() -> None:
    import scoremix as sm
    from scoremix.locscale.speaker_pool import with_speaker_pooling
    from scoremix.trials import label_to_binary
    from scoremix.validation import empirical_group_measures, model_group_measures, split_cells

    ap = argparse.ArgumentParser()
    ap.add_argument("--system", default="rawgat_st_mul")
    ap.add_argument("--share", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--max-draws", type=int, default=200)
    a = ap.parse_args()
    t = system_table(a.system)
    y = np.asarray(label_to_binary(t["label"], positive="bonafide"), np.int8)
    both = pd.Series(y).groupby(t["speaker"].to_numpy()).agg(lambda v: 0 < v.mean() < 1)
    keep = t["speaker"].map(both).to_numpy(bool)
    t, y = t.loc[keep].reset_index(drop=True), y[keep]
    in_a = split_cells(t.assign(__y=y), a.share, ["speaker", "__y", "attack"], seed=a.seed)
    A, B = t.loc[in_a].reset_index(drop=True), t.loc[~in_a].reset_index(drop=True)
    out: dict = dict(system=a.system, share=a.share, seed=a.seed, n_fit=len(A), n_heldout=len(B),
                     draws=f"2 x ({a.draws} + {a.draws})", max_draws=a.max_draws)
    la = [load_avg()]
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.score_model(A, score="score", label="label", speaker="speaker", factors=["attack"],
                             positive="bonafide", seed=a.seed)
    out["score_model_s"] = time.perf_counter() - t0
    sel = fit.selection
    pool = getattr(fit, "speaker_pooling", None)
    out["chosen"] = sel.chosen.name
    out["kappa"] = {("positive" if c else "negative"): v for c, v in (pool.kappa.items() if pool else [])}
    out["failure_mixture"] = fit.failure is not None
    print(out, flush=True)
    held = empirical_group_measures(B, ["speaker"], score="score", y=y[~in_a])["eer"]
    count = empirical_group_measures(A, ["speaker"], score="score", y=y[in_a])["eer"]
    freq = model_group_measures(fit, ["speaker"], label="label", positive="bonafide")["eer"]
    la.append(load_avg())
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = sm.bayes_score_model(fit, draws=a.draws, tune=a.draws, chains=2, cores=1, seed=a.seed)
    out["bayes_s"] = time.perf_counter() - t0
    out["min_ess_bulk"], out["max_rhat"] = post.min_ess, post.max_rhat
    out["notes"] = post.notes
    la.append(load_avg())
    t0 = time.perf_counter()
    tab = post.posterior_eer("speaker", max_draws=a.max_draws)
    out["posterior_eer_s"] = time.perf_counter() - t0
    out["carried"] = summarise(tab, held, freq, count)
    pd.concat([tab, (100 * held).rename("heldout"), (100 * freq).rename("frequentist"),
               (100 * count).rename("counts")], axis=1).to_csv(f"/tmp/bayes_speaker_holdout_{a.system}_{a.seed}.csv")
    t0 = time.perf_counter()
    ivb, ivf = predictive_intervals(fit, post, B, y[~in_a], a.max_draws, 0.95, a.seed)
    out["predictive_s"] = time.perf_counter() - t0
    out["predictive_bayes"] = coverage(ivb, held)
    out["predictive_frequentist_plugin"] = coverage(ivf, held)
    print("predictive", out["predictive_bayes"], out["predictive_frequentist_plugin"], flush=True)
    out["all"] = tab.loc["all"].to_dict()
    print("carried", out["carried"], flush=True)
    if pool is not None:
        with_speaker_pooling(fit, np.inf)       # the same draws, the model part alone
        tab0 = post.posterior_eer("speaker", max_draws=a.max_draws)
        freq0 = model_group_measures(fit, ["speaker"], label="label", positive="bonafide")["eer"]
        out["without_speaker_pooling"] = summarise(tab0, held, freq0, count)
        with_speaker_pooling(fit, pool.kappa)
        print("without pooling", out["without_speaker_pooling"], flush=True)
    la.append(load_avg())
    out["load_avg"] = la
    OUT.parent.mkdir(exist_ok=True)
    res = json.loads(OUT.read_text()) if OUT.exists() else {}
    res[f"{a.system}/share{a.share:g}/seed{a.seed}"] = out
    OUT.write_text(json.dumps(res, indent=1, default=float))
    print(json.dumps(out, indent=1, default=float))


if __name__ == "__main__":
    main()
