"""What an estimator built from the fitted share A can reach on issue 19's per-speaker line.

Issue 19's protocol (LA eval, speakers with both classes, every speaker × class × attack cell
split at random into a fitted share A and a held-out share B, exactly as
``scoremix.validation.validate_model`` splits it) with estimators that do not use
``score_model``.  Every ratio is an estimator's MAE against the speaker's empirical ROCCH EER (or
minDCF, p_target = 0.05) on B over the MAE of the speaker's own counts on A:

* ``eb_roc``: **nonparametric empirical Bayes of the speaker's ROC.**  At every distinct score
  :math:`\\tau` of A, speaker :math:`i`'s miss count :math:`k_i(\\tau)` of :math:`n_i` bona fide
  trials is beta-binomial, :math:`k_i \\mid p_i \\sim \\mathrm{Bin}(n_i, p_i)`,
  :math:`p_i \\sim \\mathrm{Beta}(M\\bar p, M(1-\\bar p))` with :math:`\\bar p(\\tau)` the pooled
  rate; the posterior mean is :math:`\\hat p_i = (k_i + M\\bar p)/(n_i + M)`.  One prior strength
  :math:`M` per class (the maximum of the beta-binomial marginal likelihood summed over
  thresholds, on a grid of 49 values in :math:`[10^{-1}, 10^5]` and :math:`\\infty`); the same
  for false alarms; the shrunk rates made monotone in :math:`\\tau`; the speaker's EER is the
  ROCCH EER of the shrunk points, its minDCF their minimum cost.  It uses the *whole* empirical
  ROC of every speaker and the pooled one, with a prior strength estimated from A only.
* ``eb_roc_per_threshold``: the same with its own :math:`M(\\tau)` at every threshold.
* ``shrunk_oracle``: the best linear shrinkage of counts toward the pooled value, with λ chosen
  on B (what ``validate_model`` prints beside the model; an oracle).

With ``--tail Q``, instead, the quantity that drives a strong detector's speaker EER: each
speaker's bona fide share below the pooled Q-quantile of A's bona fide scores, predicted for B
by the beta-binomial posterior mean (ML hyperparameters), its posterior-predictive median for B's
size (the MAE-optimal prediction of B's share under that prior); ratio = MAE over that of the
speaker's own share on A.

With ``--with-model``, also ``score_model`` with its defaults (``validate_model``, about 20 s per
split) and two equal-weight forecast combinations (Bates & Granger 1969) of the per-speaker EERs:
``avg_model_eb`` = (model + ``eb_roc``)/2 and ``avg_model_eb_count`` = (model + ``eb_roc`` +
counts)/3.

Self-check: with :math:`M = 0` the shrunk points are the speaker's own counts, and their EER and
minDCF must equal ``sm.eer``/``sm.min_dcf`` on A (asserted to 1e-12 for every speaker).

    python3 benchmarks/speaker_eb_shrinkage.py                       # 10 systems, seeds 1-3, 20 % and 50 %
    python3 benchmarks/speaker_eb_shrinkage.py --systems rawgat_st_mul --seeds 1
    python3 benchmarks/speaker_eb_shrinkage.py --tail 0.01 --shares 0.2 --systems rawgat_st_add rawgat_st_cat rawgat_st_mul
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from scipy import stats
from scipy.optimize import minimize
from scipy.special import betaln

from scoremix.metrics import eer as emp_eer
from scoremix.metrics import hull_eer
from scoremix.metrics import min_dcf as emp_min_dcf
from scoremix.validation import empirical_group_measures, heldout_split, shrinkage_mae
from speaker_holdout import DATA, one, system_table  # benchmarks/ is sys.path[0]

#: prior strengths M of the beta prior tried (∞ = full pooling)
STRENGTHS = np.r_[np.logspace(-1, 5, 49), np.inf]
P_TARGET = 0.05


def betabinom_loglik(k: np.ndarray, n: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Beta-binomial log-likelihood (without the binomial coefficient) of counts ``k``
    (speakers × thresholds) of ``n`` (speakers) at pooled rates ``p`` (thresholds), for every
    prior strength of :data:`STRENGTHS`: ``(len(STRENGTHS), thresholds)``."""
    p = np.clip(p, 1e-12, 1 - 1e-12)
    nk = n[:, None] - k
    out = np.empty((STRENGTHS.size, k.shape[1]))
    for j, m in enumerate(STRENGTHS):
        if np.isinf(m):
            out[j] = (k * np.log(p) + nk * np.log1p(-p)).sum(axis=0)
        else:
            a, b = m * p, m * (1 - p)
            out[j] = (betaln(k + a, nk + b) - betaln(a, b)).sum(axis=0)
    return out


def shrunk_rates(k: np.ndarray, n: np.ndarray, per_threshold: bool) -> tuple[np.ndarray, np.ndarray]:
    """Posterior-mean rates ``(k + M p̄)/(n + M)`` (speakers × thresholds) and the chosen M."""
    p = k.sum(axis=0) / n.sum()
    ll = betabinom_loglik(k, n, p)
    m = STRENGTHS[ll.argmax(axis=0)] if per_threshold else np.full(k.shape[1], STRENGTHS[ll.sum(axis=1).argmax()])
    w = np.where(np.isinf(m), 0.0, n[:, None] / (n[:, None] + np.where(np.isinf(m), 1.0, m)))
    return w * k / n[:, None] + (1 - w) * p, m


def eer_and_min_dcf(p_miss: np.ndarray, p_fa: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per speaker: ROCCH EER and minimum DCF (p_target 0.05, reject-all and accept-all included)
    of rates at increasing thresholds."""
    eer = np.array([hull_eer(p_fa[i], p_miss[i])[0] for i in range(p_miss.shape[0])])
    cost = P_TARGET * p_miss + (1 - P_TARGET) * p_fa
    dcf = np.minimum(cost.min(axis=1), min(P_TARGET, 1 - P_TARGET))
    return eer, dcf


def speaker_counts(frame: pd.DataFrame, y: np.ndarray, speakers: np.ndarray, thr: np.ndarray):
    """Miss counts (positives below τ) and false-alarm counts (negatives at or above τ) per
    speaker and threshold, with the class sizes."""
    s = frame["score"].to_numpy(float)
    spk = frame["speaker"].to_numpy()
    km, kf, nm, nf = [], [], [], []
    for sp in speakers:
        pos = np.sort(s[(spk == sp) & (y == 1)])
        neg = np.sort(s[(spk == sp) & (y == 0)])
        km.append(np.searchsorted(pos, thr, side="left"))
        kf.append(neg.size - np.searchsorted(neg, thr, side="left"))
        nm.append(pos.size)
        nf.append(neg.size)
    return (np.array(km, float), np.array(nm, float), np.array(kf, float), np.array(nf, float))


def one_split(t: pd.DataFrame, share: float, seed: int, with_model: bool = False) -> dict:
    """Ratios to counting of every estimator on one split (as ``validate_model`` splits)."""
    A, B, yA, yB = heldout_split(t, factors=["attack"], positive="bonafide", share=share, seed=seed)
    held = empirical_group_measures(B, ["speaker"], score="score", y=yB, p_target=P_TARGET)
    cnt = empirical_group_measures(A, ["speaker"], score="score", y=yA, p_target=P_TARGET)
    speakers = held.index.to_numpy()
    thr = np.unique(A["score"].to_numpy(float))
    km, nm, kf, nf = speaker_counts(A, yA, speakers, thr)
    own_e, own_d = eer_and_min_dcf(km / nm[:, None], kf / nf[:, None])
    assert np.allclose(own_e, cnt["eer"].to_numpy(), atol=1e-12, rtol=0), "counts EER differs from sm.eer"
    assert np.allclose(own_d, cnt["min_dcf"].to_numpy(), atol=1e-12, rtol=0), "counts minDCF differs from sm.min_dcf"
    out, eb_eer = {}, {}
    for name, per in [("eb_roc", False), ("eb_roc_per_threshold", True)]:
        pm, m_miss = shrunk_rates(km, nm, per)
        pf, m_fa = shrunk_rates(kf, nf, per)
        pm = np.maximum.accumulate(pm, axis=1)  # misses grow with the threshold
        pf = np.minimum.accumulate(pf, axis=1)  # false alarms fall
        e, dc = eer_and_min_dcf(pm, pf)
        eb_eer[name] = e
        for meas, est in [("eer", e), ("min_dcf", dc)]:
            base = np.abs(cnt[meas].to_numpy() - held[meas].to_numpy()).mean()
            out[f"{name}:{meas}"] = np.abs(est - held[meas].to_numpy()).mean() / base
        if not per:
            out["M_miss"], out["M_fa"] = float(m_miss[0]), float(m_fa[0])
    sA = A["score"].to_numpy(float)
    pooled = {"eer": float(emp_eer(sA, yA)), "min_dcf": float(emp_min_dcf(sA, yA, p_target=P_TARGET).value)}
    for meas in ["eer", "min_dcf"]:
        base = np.abs(cnt[meas].to_numpy() - held[meas].to_numpy()).mean()
        mae, _ = shrinkage_mae(cnt[meas].to_numpy(), pooled[meas], held[meas].to_numpy())
        out[f"shrunk_oracle:{meas}"] = mae / base
    out["speakers"] = speakers.size
    if with_model:
        g = one(t, share, seed).groups.loc[speakers]
        eb = eb_eer["eb_roc"]
        h, m, c = held["eer"].to_numpy(), g["eer_model"].to_numpy(), cnt["eer"].to_numpy()
        base = np.abs(c - h).mean()
        out["model:eer"] = np.abs(m - h).mean() / base
        out["avg_model_eb:eer"] = np.abs((m + eb) / 2 - h).mean() / base
        out["avg_model_eb_count:eer"] = np.abs((m + eb + c) / 3 - h).mean() / base
    return out


def tail_split(t: pd.DataFrame, share: float, seed: int, q: float) -> dict:
    """Ratios to the speaker's own A share of the bona fide tail-share predictors (``--tail``)."""
    A, B, yA, yB = heldout_split(t, factors=["attack"], positive="bonafide", share=share, seed=seed)
    bA, bB = A[yA == 1], B[yB == 1]
    cut = float(np.quantile(bA["score"], q))
    gA, gB = bA.groupby("speaker")["score"], bB.groupby("speaker")["score"]
    k = gA.apply(lambda x: int((x < cut).sum())).to_numpy(float)
    n = gA.size().to_numpy(float)
    kB = gB.apply(lambda x: int((x < cut).sum())).to_numpy(float)
    nB = gB.size().to_numpy(float)
    truth = kB / nB
    base = np.abs(k / n - truth).mean()

    def nll(log_ab: np.ndarray) -> float:
        a_, b_ = np.exp(log_ab)
        return -float(stats.betabinom.logpmf(k, n, a_, b_).sum())

    a, b = np.exp(minimize(nll, [0.0, 3.0], method="Nelder-Mead").x)
    post_mean = (a + k) / (a + b + n)
    pred_median = stats.betabinom.median(nB, a + k, b + n - k) / nB
    return {"betabinom_mean": np.abs(post_mean - truth).mean() / base,
            "betabinom_predictive_median": np.abs(pred_median - truth).mean() / base,
            "prior_strength": float(a + b)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--systems", nargs="*")
    ap.add_argument("--shares", nargs="*", type=float, default=[0.2, 0.5])
    ap.add_argument("--seeds", nargs="*", type=int, default=[1, 2, 3])
    ap.add_argument("--with-model", action="store_true", help="also score_model (validate_model) and combinations")
    ap.add_argument("--tail", type=float, default=None, help="bona fide tail share below this pooled quantile")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    d = pd.read_csv(DATA)
    systems = a.systems or sorted(d["system"].unique())
    rows = []
    for share in a.shares:
        for system in systems:
            t = system_table(d, system)
            for seed in a.seeds:
                r = one_split(t, share, seed, a.with_model) if a.tail is None else tail_split(t, share, seed, a.tail)
                rows.append(dict(system=system, share=share, seed=seed, **r))
                print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in rows[-1].items()}, flush=True)
    out = pd.DataFrame(rows)
    pd.set_option("display.width", 200)
    if a.tail is not None:
        print(out.round(3).to_string(index=False))
        if a.out:
            out.to_csv(a.out, index=False)
        return
    cols = ["eb_roc:eer", "eb_roc_per_threshold:eer", "shrunk_oracle:eer", "eb_roc:min_dcf", "shrunk_oracle:min_dcf"]
    cols += [c for c in ["model:eer", "avg_model_eb:eer", "avg_model_eb_count:eer"] if c in out.columns]
    for share, g in out.groupby("share"):
        print(f"\n== share {share:g}: ratio to counting, mean over seeds")
        tab = g.groupby("system")[cols].mean()
        print(tab.round(3))
        print("per seed, median (max) over systems:")
        for seed, gs in g.groupby("seed"):
            print(f"  seed {seed}: " + ", ".join(f"{c} {gs[c].median():.3f} ({gs[c].max():.3f})" for c in cols))
    if a.out:
        out.to_csv(a.out, index=False)


if __name__ == "__main__":
    main()
