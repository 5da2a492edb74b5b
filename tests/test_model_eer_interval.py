"""Model-side interval of the model-vs-empirical EER tables (issue 11): the speaker-bootstrap
replicates recomputed with the scalar mixture root finder, and coverage of the population
EER in a simulation with known truth."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from scoremix import lmer
from scoremix.fairness.bootstrap import draw_cluster_weights
from scoremix.fairness.resampling import expanded_percentile_interval
from scoremix.model_eer import model_eer
from scoremix.predictive import predictive
from scoremix.predictive.gof import model_eer_interval
from scoremix.predictive.mixture import mixture_eer

D, SD_B = 3.0, 0.5
#: population EER of the simulation: classes N(0, 1 + SD_B²) and N(D, 1 + SD_B²)
TRUE_EER = float(norm.cdf(-D / (2 * np.sqrt(1 + SD_B ** 2))))


def _sim(n_spk: int, seed: int, n_tar: int = 40, n_non: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    spk = np.repeat(np.arange(n_spk), n_tar + n_non)
    y = np.tile(np.r_[np.ones(n_tar), np.zeros(n_non)], n_spk)
    b = rng.normal(0, SD_B, n_spk)
    return pd.DataFrame({"speaker": [f"s{j:02d}" for j in spk], "label": np.where(y == 1, "target", "nontarget"),
                         "score": D * y + b[spk] + rng.normal(size=y.size)})


def test_model_interval_replicates_by_hand():
    df = _sim(6, 0, n_tar=10, n_non=30)
    fit = lmer("score ~ label + (1 | speaker)", df)
    pred = predictive(fit, data=df, label="label")
    spk = pd.factorize(df["speaker"], sort=True)[0]
    mask = np.ones(len(df), bool)
    lo, hi = model_eer_interval(pred, mask, spk, n_boot=40, level=0.9, seed=3)
    M = draw_cluster_weights(np.zeros(6, np.int64), 40, np.random.default_rng(3))
    mean, sd = pred.mean[0, pred.component], pred.sd[0, pred.component]
    pos = pred.positive[pred.component]
    reps = []
    for b in range(40):
        w = M[spk, b]  # every trial weighted by its speaker's multiplicity
        reps.append(mixture_eer(mean[~pos], sd[~pos], mean[pos], sd[pos], w[~pos], w[pos]))
    want = expanded_percentile_interval(np.array(reps)[None, :], np.array([6.0]), 0.9)
    assert lo == pytest.approx(want[0][0], abs=1e-7) and hi == pytest.approx(want[1][0], abs=1e-7)
    assert lo < float(pred.eer()[0]) < hi
    # a posterior fit or no replicates: no interval
    assert np.isnan(model_eer_interval(pred, mask, spk, n_boot=0)).all()


def test_model_eer_table_has_both_intervals():
    df = _sim(8, 1).assign(half=lambda d: np.where(d["speaker"] < "s04", "a", "b"))
    fit = lmer("score ~ label + (1 | speaker)", df)
    tab = model_eer(fit, by="half", label="label", data=df, n_boot=100, speaker="speaker")
    for side in ("model", "empirical"):
        assert (tab[f"eer_{side}_lo"] < tab[f"eer_{side}"]).all() and (tab[f"eer_{side}"] < tab[f"eer_{side}_hi"]).all()
    assert "eer_model_lo" not in model_eer(fit, by="half", label="label", data=df, n_boot=0).columns


@pytest.mark.slow
def test_model_interval_covers_population_eer():
    """100 data sets of 30 speakers (σ_b = 0.5): the 95 % model-side interval of the conditional
    mixture EER covers the population EER Φ(−d / (2 √(1 + σ_b²))) in >= 0.80 of them.  Measured
    0.88 (empirical interval 0.92); at 10 speakers 0.77 (empirical 0.79): the interval leaves out
    the estimation error of the variances and the shrinkage of the fitted speaker effects
    (docs/intervals.md), so it under-covers with few speakers — this test guards the measured level."""
    cov = []
    for k in range(100):
        df = _sim(30, 100 + k)
        fit = lmer("score ~ label + (1 | speaker)", df)
        tab = model_eer(fit, by=pd.Series(np.zeros(len(df), int), index=df.index), label="label", data=df,
                        n_boot=200, speaker="speaker", seed=k, check_fit=False)
        cov.append(tab["eer_model_lo"].iloc[0] <= TRUE_EER <= tab["eer_model_hi"].iloc[0])
    assert np.mean(cov) >= 0.80, np.mean(cov)


def test_model_interval_of_a_stratified_transform_fit_uses_its_threshold_axis():
    """transform="monotone-by-class" (one transform per class): every replicate equals the
    layer's own mixture EER (Predictive.mixture on its common threshold axis, batch_eer) with
    the trial weights set to the speakers' multiplicities, and the interval brackets the
    model EER."""
    import scoremix as sm
    from scoremix.predictive.mixture import batch_eer

    rng = np.random.default_rng(4)
    n, n_spk = 2000, 30
    spk = rng.integers(0, n_spk, n)
    lab = np.where(rng.random(n) < 0.4, "bonafide", "spoof")
    z = np.where(lab == "bonafide", 2.0, -1.0) + rng.normal(0, 0.5, n_spk)[spk] + rng.normal(size=n)
    d = pd.DataFrame(dict(score=np.where(lab == "bonafide", np.exp(z), np.sinh(z)), label=lab,
                          speaker=[f"s{i:02d}" for i in spk], half=np.where(spk < 15, "a", "b")))
    fit = sm.lmer("score ~ label + (1|speaker)", d, transform="monotone-by-class", control=dict(vcov=False))
    tab = model_eer(fit, by="half", label="label", data=d, n_boot=100, speaker="speaker", check_fit=False)
    assert (tab["eer_model_lo"] < tab["eer_model"]).all() and (tab["eer_model"] < tab["eer_model_hi"]).all()
    pred = predictive(fit, data=d, label="label")
    mask = (d["half"] == "a").to_numpy()
    codes = pd.factorize(d["speaker"], sort=True)[0]
    lo, hi = model_eer_interval(pred, mask, codes, n_boot=30, level=0.9, seed=5)
    cell = np.unique(codes[mask], return_inverse=True)[1]
    M = draw_cluster_weights(np.zeros(cell.max() + 1, np.int64), 30, np.random.default_rng(5))
    W = np.zeros((30, pred.n_components))
    for b in range(30):
        np.add.at(W[b], pred.component[mask], M[cell, b])
    reps = batch_eer(pred.mixture(W))[:, 0]
    want = expanded_percentile_interval(reps[None, :], np.array([float(cell.max() + 1)]), 0.9)
    assert lo == pytest.approx(want[0][0], abs=1e-9) and hi == pytest.approx(want[1][0], abs=1e-9)
