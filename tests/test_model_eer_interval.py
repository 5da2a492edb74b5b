"""Model-side interval of the model-vs-empirical EER tables (issue 11): the parametric bootstrap
(replicates = refits of data simulated from the fit, by hand), the speaker re-weighting
replicates recomputed with the scalar mixture root finder, named errors, and coverage of the
population EER in a simulation with known truth."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm
from scipy.stats import t as student_t

from scoremix import lmer
from scoremix.resampling.bootstrap import draw_cluster_weights
from scoremix.resampling.intervals import expanded_percentile_interval
from scoremix.model_eer import model_eer
from scoremix.predictive import predictive
from scoremix.lme.confint import simulate_response
from scoremix.predictive.gof import model_eer_interval
from scoremix.predictive.param_boot import ModelIntervalError, ModelIntervalWarning, parametric_eer_replicates
from scoremix.predictive.mixture import ModelEERError, mixture_eer

D, SD_B = 3.0, 0.5
#: population EER of the simulation: classes N(0, 1 + SD_B²) and N(D, 1 + SD_B²)
TRUE_EER = float(norm.cdf(-D / (2 * np.sqrt(1 + SD_B ** 2))))
#: the slow coverage test: data sets and refits per data set
COVERAGE_SETS, COVERAGE_REFITS = 100, 30


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
    tab = model_eer(fit, by="half", label="label", data=df, n_boot=100, speaker="speaker", progress=False)
    for side in ("model", "empirical"):
        assert (tab[f"eer_{side}_lo"] < tab[f"eer_{side}"]).all() and (tab[f"eer_{side}"] < tab[f"eer_{side}_hi"]).all()
    assert "eer_model_lo" not in model_eer(fit, by="half", label="label", data=df, n_boot=0).columns


def test_simulate_response_by_hand():
    """One parametric-bootstrap response: y* = Xβ̂ + b*[speaker] + ε* with b* ~ N(0, σ̂_b²) per
    speaker then ε* ~ N(0, σ̂²) per row, drawn in that order from one generator."""
    df = _sim(5, 2, n_tar=8, n_non=20)
    fit = lmer("score ~ label + (1 | speaker)", df)
    got = simulate_response(fit, np.random.default_rng(11))
    rng = np.random.default_rng(11)
    sd_b = float(np.sqrt(fit.cov_re()[0][0, 0]))
    b = rng.standard_normal(5) * sd_b
    eps = rng.standard_normal(len(df)) * fit.sigma
    beta = fit.fixef.to_numpy()
    x_target = (df["label"] == "target").to_numpy(float)  # treatment coding, reference "nontarget"
    spk = pd.factorize(df["speaker"], sort=True)[0]
    assert got == pytest.approx(beta[0] + beta[1] * x_target + b[spk] + eps, abs=1e-12)


def test_parametric_replicate_is_a_refit_of_data_simulated_with_the_same_seed():
    """Replicate r of the parametric model interval equals the model EER of an ordinary lmer fit
    to the r-th response simulated from the fit (same seed), and the table's interval is the
    bias-corrected normal interval on the logit scale (expanded small-sample quantile) of those
    replicates, the bias measured against the population EER of the fit."""
    df = _sim(6, 0, n_tar=10, n_non=30).assign(half=lambda d: np.where(d["speaker"] < "s03", "a", "b"))
    fit = lmer("score ~ label + (1 | speaker)", df)
    masks = [(df["half"] == h).to_numpy() for h in ("a", "b")]
    reps = parametric_eer_replicates(fit, masks, n_boot=12, seed=5, data=df, progress=False)
    rng = np.random.default_rng(5)
    for r in range(3):
        ystar = simulate_response(fit, rng)
        refit = lmer("score ~ label + (1 | speaker)", df.assign(score=ystar))
        pred = predictive(refit, data=df)
        for j, m in enumerate(masks):
            assert reps[j, r] == pytest.approx(float(pred.eer(m)[0]), rel=1e-5)
    tab = model_eer(fit, by="half", data=df, n_boot=12, seed=5, speaker="speaker", level=0.8, check_fit=False,
                    progress=False)
    assert (tab["eer_model_interval"] == "parametric").all() and tab.attrs["model_interval"] == "parametric"
    marg = predictive(fit, data=df, conditional=False)  # the population EER of each half at the fitted parameters
    cond = predictive(fit, data=df)
    logit = lambda p: np.log(p / (1 - p))  # noqa: E731
    # expanded normal quantile for the 3 speakers of each half: √(3/2) t_2(0.9)
    z = np.sqrt(3 / 2) * student_t.ppf(0.9, 2)
    for j, h in enumerate(("a", "b")):
        e, t = float(cond.eer(masks[j])[0]), float(marg.eer(masks[j])[0])
        ell = logit(reps[j])
        centre = logit(e) - (ell.mean() - logit(t))  # the replicates' bias against the bootstrap truth removed
        want = 1 / (1 + np.exp(-(centre + np.array([-z, z]) * ell.std(ddof=1))))
        assert tab.loc[h, ["eer_model_lo", "eer_model_hi"]].to_numpy(float) == pytest.approx(want, rel=1e-9)
        assert tab.loc[h, "eer_model"] == pytest.approx(e, rel=1e-12)
    # the old method on request, labelled
    old = model_eer(fit, by="half", data=df, n_boot=12, seed=5, speaker="speaker", model_interval="speakers",
                    check_fit=False)
    assert (old["eer_model_interval"] == "speakers").all()


def test_model_eer_tables_share_refits_and_equal_single_tables():
    """model_eer_tables (one set of refits for several breakdowns) gives the tables of separate
    model_eer calls with the same seed (each of which refits the same simulated responses)."""
    from scoremix.model_eer import model_eer_tables

    df = _sim(6, 5, n_tar=10, n_non=30).assign(half=lambda d: np.where(d["speaker"] < "s03", "a", "b"),
                                               third=lambda d: np.where(d["speaker"] < "s02", "x", "y"))
    fit = lmer("score ~ label + (1 | speaker)", df)
    kw = dict(data=df, n_boot=8, seed=2, speaker="speaker", check_fit=False, progress=False)
    both = model_eer_tables(fit, ["half", "third", "speaker"], **kw)
    for by, tab in zip(["half", "third", "speaker"], both):
        pd.testing.assert_frame_equal(tab, model_eer(fit, by=by, **kw))
    assert [t.attrs["model_interval"] for t in both] == ["parametric", "parametric", "speakers"]
    with pytest.raises(ModelEERError, match="every breakdown"):
        model_eer_tables(fit, [None], **kw)
    # n_refits: the refits of the model interval apart from the empirical replicates
    few = model_eer(fit, by="half", **{**kw, "n_boot": 30, "n_refits": 8})
    tab = model_eer(fit, by="half", **kw)
    pd.testing.assert_frame_equal(few[["eer_model_lo", "eer_model_hi"]], tab[["eer_model_lo", "eer_model_hi"]])
    assert not np.allclose(few["eer_empirical_lo"], tab["eer_empirical_lo"])
    with pytest.raises(ModelIntervalError, match="n_refits"):
        model_eer(fit, by="half", **{**kw, "n_refits": 1})


def test_model_interval_named_errors_and_labels():
    import scoremix as sm

    df = _sim(6, 3, n_tar=10, n_non=30).assign(half=lambda d: np.where(d["speaker"] < "s03", "a", "b"))
    fit = lmer("score ~ label + (1 | speaker)", df)
    for n_boot in (5, 0):
        with pytest.raises(ModelIntervalError, match="model_interval must be one of"):
            model_eer(fit, by="half", data=df, n_boot=n_boot, model_interval="bootMer")
    # a breakdown by the grouping factor the model conditions on: each cell is one speaker's EER
    with pytest.raises(ModelIntervalError, match=r"by=\['speaker'\] names a grouping factor"):
        model_eer(fit, by="speaker", data=df, n_boot=5, model_interval="parametric")
    by_spk = model_eer(fit, by="speaker", data=df, n_boot=5, check_fit=False)  # auto: the labelled fallback
    assert (by_spk["eer_model_interval"] == "speakers").all()
    assert (model_eer(fit, by="speaker", data=df, n_boot=5, conditional=False, check_fit=False,
                      progress=False)["eer_model_interval"] == "parametric").all()
    # no replicates: no interval and no method column
    assert "eer_model_interval" not in model_eer(fit, by="half", data=df, n_boot=0).columns
    # a transformation fit has no cheap refit
    rng = np.random.default_rng(1)
    d = df.assign(score=np.exp(df["score"] / 2) + 0.01 * rng.random(len(df)))
    tf = sm.lmer("score ~ label + (1|speaker)", d, transform="monotone", control=dict(vcov=False))
    # a transformation fit: refit-based on request (each replicate a full fit), re-weighting by default
    par = model_eer(tf, by="half", data=d, n_boot=4, model_interval="parametric", check_fit=False, progress=False)
    assert (par["eer_model_interval"] == "parametric").all()
    assert (par["eer_model_lo"] < par["eer_model_hi"]).all() and "eer_model_reweight_lo" not in par.columns
    auto = model_eer(tf, by="half", data=d, n_boot=20, check_fit=False)
    assert (auto["eer_model_interval"] == "speakers").all() and auto.attrs["model_interval"] == "speakers"
    # the re-weighting (parameters fixed) sits in its own columns, never in eer_model_lo/_hi
    assert "eer_model_lo" not in auto.columns and "eer_model_reweight_lo" in auto.columns

    # a posterior fit: its credible interval is the interval
    class Posterior:
        idata = None

        def class_moments(self):  # pragma: no cover - never called
            raise AssertionError

    with pytest.raises(ModelIntervalError, match="credible interval"):
        model_eer(Posterior(), by="half", model_interval="parametric")


def test_failed_refits_are_left_out_with_a_named_warning(monkeypatch):
    import importlib

    pb = importlib.import_module("scoremix.predictive.param_boot")  # (sm.predictive is the function)

    df = _sim(6, 4, n_tar=10, n_non=30)
    fit = lmer("score ~ label + (1 | speaker)", df)
    real, calls = pb.predictive, []

    def flaky(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("non-finite predictive SD")
        return real(*a, **k)

    monkeypatch.setattr(pb, "predictive", flaky)
    with pytest.warns(ModelIntervalWarning, match="1 of 4 parametric-bootstrap refits"):
        reps = parametric_eer_replicates(fit, [np.ones(len(df), bool)], n_boot=4, seed=0, data=df, progress=False)
    assert np.isnan(reps[0, 1]) and np.isfinite(reps[0, [0, 2, 3]]).all()


@pytest.mark.slow
def test_parametric_model_interval_covers_population_eer():
    """COVERAGE_SETS data sets of 10 speakers (σ_b = 0.5, the hard case of the benchmark): the 95 %
    parametric model interval of the conditional model EER covers the population EER
    Φ(−d / (2 √(1 + σ_b²))) in >= 0.90 of them.  Uses COVERAGE_REFITS refits per data set
    (the tables default to 200) to stay well under a minute.  On these data sets the interval
    covers 0.92 with 30 refits, 0.91 with 40 and with 200 (the basic interval 0.86 with 30 or 40,
    the old speaker re-weighting about 0.76); the benchmark (benchmarks/coverage_model_eer.py, other seeds)
    measures 0.95 on 200 data sets of 10 speakers (docs/intervals.md)."""
    cov = []
    for k in range(COVERAGE_SETS):
        df = _sim(10, 2000 + k)
        fit = lmer("score ~ label + (1 | speaker)", df)
        tab = model_eer(fit, by=pd.Series(np.zeros(len(df), int), index=df.index), label="label", data=df,
                        n_boot=COVERAGE_REFITS, speaker="speaker", seed=k, check_fit=False, progress=False)
        cov.append(tab["eer_model_lo"].iloc[0] <= TRUE_EER <= tab["eer_model_hi"].iloc[0])
    assert np.mean(cov) >= 0.90, np.mean(cov)


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
    assert (tab["eer_model_reweight_lo"] < tab["eer_model"]).all() and (tab["eer_model"] < tab["eer_model_reweight_hi"]).all()
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
