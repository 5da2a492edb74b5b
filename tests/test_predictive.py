"""The one predictive layer: per-trial latent distributions, transformed fits, model DET
curves and goodness-of-fit checks, against closed forms and large simulations from the model."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

import scoremix as sm
from scoremix.fairness import model_subgroup_dcf
from scoremix.lme.api import lmer
from scoremix.metrics import eer as emp_eer
from scoremix.model_eer import model_eer, trial_moments
from scoremix.predictive import ModelFitWarning, empirical_eer_interval, model_det_curve, predictive
from scoremix.predictive.gof import missing_terms

F = 'z ~ label + (1 | speaker) + (0 + dummy(label, "spoof") | attack)'


class ExpTransform:
    """Test double of a fitted transform: latent z = log(score), score = exp(z)."""

    def __call__(self, s):
        with np.errstate(divide="ignore"):
            return np.log(np.asarray(s, dtype=float))

    def inverse(self, z):
        return np.exp(np.asarray(z, dtype=float))


def _latent_data(n=6000, n_spk=40, n_att=6, seed=0, sd_b=0.4, sd_c=0.8, sig=(1.3, 0.8)):
    """Latent LMM: z = -1 + 2.5·bonafide + b_spk + c_att·spoof + ε (σ by class); score = exp(z)."""
    rng = np.random.default_rng(seed)
    b = rng.normal(0, sd_b, n_spk)
    c = rng.normal(0, sd_c, n_att)
    spk = rng.integers(0, n_spk, n)
    y = rng.random(n) < 0.4
    att = np.where(y, -1, rng.integers(0, n_att, n))
    mean = -1 + 2.5 * y + b[spk] + np.where(y, 0.0, c[np.maximum(att, 0)])
    z = mean + rng.standard_normal(n) * np.where(y, sig[1], sig[0])
    g = np.where(spk % 2 == 0, "f", "m")
    df = pd.DataFrame({"z": z, "score": np.exp(z), "label": np.where(y, "bonafide", "spoof"),
                       "speaker": [f"s{k:02d}" for k in spk],
                       "attack": np.where(y, "bonafide", [f"A{k}" for k in np.maximum(att, 0)]), "g": g})
    return df, b, c


@pytest.fixture(scope="module")
def fits():
    df, b, c = _latent_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = lmer(F, df, dispersion="~ label")
        tr = lmer(F, df, dispersion="~ label")
    tr.transform = ExpTransform()
    return df, plain, tr


def test_trial_moments_match_hand_computation_and_partial_marginalisation(fits):
    df, fit, _ = fits
    mom = trial_moments(fit)
    re = fit.ranef
    y = (df["label"] == "bonafide").to_numpy()
    fe = fit.fixef
    b = re["speaker"]["(Intercept)"].reindex(df["speaker"]).to_numpy()
    c = np.where(y, 0.0, re["attack"].iloc[:, 0].reindex(df["attack"]).fillna(0).to_numpy())
    sig = np.where(y, fit.sigma_by["bonafide"], fit.sigma_by["spoof"])
    np.testing.assert_allclose(mom["mean"], fe["(Intercept)"] + fe["labelspoof"] * (~y) + b + c, atol=1e-9)
    np.testing.assert_allclose(mom["sd"], sig, atol=1e-12)
    # new speakers, the observed attacks: speaker effect out, its variance in
    part = predictive(fit, marginal_over=["speaker"]).trial_table()
    vc = fit.varcorr.set_index("grp")
    np.testing.assert_allclose(part["mean"], mom["mean"] - b, atol=1e-9)
    np.testing.assert_allclose(part["sd"], np.sqrt(sig ** 2 + vc.loc["speaker", "vcov"]), atol=1e-12)
    # new attacks too equals conditional=False
    both = predictive(fit, marginal_over=["speaker", "attack"]).trial_table()
    np.testing.assert_allclose(both[["mean", "sd"]], trial_moments(fit, conditional=False)[["mean", "sd"]],
                               atol=1e-12)
    with pytest.raises(sm.PredictiveError, match="'room'"):
        predictive(fit, marginal_over=["room"])
    # predicting the fitted table as new trials gives the same distributions
    again = predictive(fit, df, marginal_over=["speaker"]).trial_table()
    np.testing.assert_allclose(again[["mean", "sd"]], part[["mean", "sd"]], atol=1e-9)


def test_transformed_fit_thresholds_and_rates_use_the_transform(fits):
    df, plain, tr = fits
    # the model EER lives on the latent scale and does not depend on h
    # (the fixture's ExpTransform is attached to a fit of the latent scores, so the rows carry no
    # scores on its score scale: the latent definition)
    assert model_eer(tr, thresholds="latent") == pytest.approx(model_eer(plain, thresholds="latent"), abs=1e-12)
    p_lat, p_tr = predictive(plain), predictive(tr)
    e0, t0 = p_lat.eer(return_threshold=True, thresholds="latent")
    e1, t1 = p_tr.eer(return_threshold=True, thresholds="latent")
    assert e1[0] == pytest.approx(e0[0], abs=1e-12)
    assert t1[0] == pytest.approx(np.exp(t0[0]), rel=1e-12)  # reported on the score scale
    # rates at a score threshold τ = rates at latent log τ
    tau = np.array([0.2, 1.0, 3.0])
    fn1, fp1 = p_tr.rates_at(tau)
    fn0, fp0 = p_lat.rates_at(np.log(tau))
    np.testing.assert_allclose(fn1, fn0, atol=1e-14)
    np.testing.assert_allclose(fp1, fp0, atol=1e-14)
    # and they equal the rates of scores simulated from the fitted model (1.2M trials)
    mom = trial_moments(plain)
    rng = np.random.default_rng(5)
    idx = rng.integers(0, len(mom), 1_200_000)
    s = np.exp(mom["mean"].to_numpy()[idx] + mom["sd"].to_numpy()[idx] * rng.standard_normal(idx.size))
    yy = mom["y"].to_numpy()[idx]
    for k, t in enumerate(tau):
        fnr = np.mean(s[yy == 1] < t)
        fpr = np.mean(s[yy == 0] >= t)
        assert fn1[0, k] == pytest.approx(fnr, abs=4 * np.sqrt(fnr * (1 - fnr) / (yy == 1).sum()) + 1e-4)
        assert fp1[0, k] == pytest.approx(fpr, abs=4 * np.sqrt(fpr * (1 - fpr) / (yy == 0).sum()) + 1e-4)


def test_transformed_subgroup_dcf_equals_latent_with_score_thresholds(fits):
    df, plain, tr = fits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ModelFitWarning)
        a = model_subgroup_dcf(plain, df.assign(score=df["z"]), ["g"], n_boot=0, thresholds="latent")
        b = model_subgroup_dcf(tr, df, ["g"], n_boot=0, thresholds="latent")
    for col in ("min_dcf", "ratio_overall", "eer", "fpr", "fnr"):
        np.testing.assert_allclose(b.table[col], a.table[col], rtol=1e-12)
    np.testing.assert_allclose(b.table["threshold_own"], np.exp(a.table["threshold_own"]), rtol=1e-10)
    assert b.threshold == pytest.approx(np.exp(a.threshold), rel=1e-10)
    # the empirical values beside them are rank based: identical on z and on exp(z)
    np.testing.assert_allclose(b.table["eer_empirical"], a.table["eer_empirical"], rtol=1e-12)
    # g is not in the formula: the table says so
    assert b.notes and "no term for ['g']" in b.notes[0]


def test_model_det_curve_matches_simulation_from_the_model(fits):
    df, plain, tr = fits
    det = model_det_curve(tr, n_points=200)
    assert {"latent", "threshold", "fnr", "fpr"} <= set(det.columns)
    np.testing.assert_allclose(det["threshold"], np.exp(det["latent"]), rtol=1e-12)
    assert np.all(np.diff(det["fnr"]) >= -1e-15) and np.all(np.diff(det["fpr"]) <= 1e-15)
    mom = trial_moments(plain)
    rng = np.random.default_rng(11)
    idx = rng.integers(0, len(mom), 1_000_000)
    s = np.exp(mom["mean"].to_numpy()[idx] + mom["sd"].to_numpy()[idx] * rng.standard_normal(idx.size))
    yy = mom["y"].to_numpy()[idx]
    rows = det.iloc[:: 20]
    rows = rows[(rows["fnr"] > 1e-3) & (rows["fpr"] > 1e-3)]
    for _, r in rows.iterrows():
        fnr = np.mean(s[yy == 1] < r["threshold"])
        fpr = np.mean(s[yy == 0] >= r["threshold"])
        assert r["fnr"] == pytest.approx(fnr, abs=5 * np.sqrt(fnr * (1 - fnr) / (yy == 1).sum()) + 2e-4)
        assert r["fpr"] == pytest.approx(fpr, abs=5 * np.sqrt(fpr * (1 - fpr) / (yy == 0).sum()) + 2e-4)
    by = model_det_curve(tr, data=df, by="g", n_points=50)
    assert set(by["g"]) == {"f", "m"}


def test_single_gaussian_det_is_a_straight_probit_line():
    """No random effects, one Gaussian per class: probit(FNR) is affine in probit(FPR) with
    slope σ0/σ1 (the binormal DET line)."""
    rng = np.random.default_rng(3)
    n = 4000
    y = rng.random(n) < 0.5
    z = np.where(y, 2.0 + 0.5 * rng.standard_normal(n), rng.standard_normal(n))
    df = pd.DataFrame({"z": z, "label": np.where(y, "bonafide", "spoof"), "spk": rng.integers(0, 30, n)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = lmer("z ~ label + (1 | spk)", df, dispersion="~ label")
    det = model_det_curve(fit, conditional=False, n_points=100, p_min=1e-4)
    x, yv = norm.ppf(det["fpr"]), norm.ppf(det["fnr"])
    slope = np.polyfit(x, yv, 1)[0]
    s0 = np.hypot(fit.sigma_by["spoof"], np.sqrt(fit.varcorr.set_index("grp").loc["spk", "vcov"]))
    s1 = np.hypot(fit.sigma_by["bonafide"], np.sqrt(fit.varcorr.set_index("grp").loc["spk", "vcov"]))
    assert slope == pytest.approx(-s0 / s1, rel=1e-6)


def test_empirical_interval_is_a_cluster_bootstrap_of_the_rocch_eer():
    """The fast weighted-count bootstrap equals the slow one that replicates whole speakers."""
    from scoremix.resampling.bootstrap import draw_cluster_weights

    rng = np.random.default_rng(2)
    n = 600
    cl = rng.integers(0, 25, n)
    y = rng.random(n) < 0.5
    s = y * 1.5 + rng.normal(0, 0.4, 25)[cl] + rng.standard_normal(n)
    r = empirical_eer_interval(s, y, cl, n_boot=60, level=0.9, seed=7)
    assert r["eer"] == pytest.approx(emp_eer(s, y))
    # slow: replicate the draws (same generator calls, 50 + 10) and recompute the EER
    g = np.random.default_rng(7)
    reps = []
    for m in (50, 10):
        M = draw_cluster_weights(np.zeros(25, np.int64), m, g)
        for j in range(m):
            mult = M[cl, j].astype(int)
            reps.append(emp_eer(np.repeat(s, mult), np.repeat(y, mult)))
    reps = np.array(reps)
    # the studentised interval of sm.eer(n_boot=) on those replicates
    from scoremix.resampling.overall import studentized_overall_interval

    g = np.random.default_rng(7)
    M = np.concatenate([draw_cluster_weights(np.zeros(25, np.int64), m, g) for m in (50, 10)], axis=1)
    codes = np.unique(cl, return_inverse=True)[1]
    lo, hi = studentized_overall_interval("eer", s, y, codes, 25, M, reps, 0.9)
    # printed widened to at least the Clopper–Pearson interval of the error count (gof.binomial_floor)
    from scipy.stats import beta
    n_min = min(int(y.sum()), int((~y).sum()))
    k = round(r["eer"] * n_min)
    lo, hi = min(lo, beta.ppf(0.05, k, n_min - k + 1)), max(hi, beta.ppf(0.95, k + 1, n_min - k))
    assert r["lo"] == pytest.approx(lo, abs=1e-7) and r["hi"] == pytest.approx(hi, abs=1e-7)
    assert r["lo"] < r["eer"] < r["hi"]


def test_gaussian_fit_to_skewed_scores_warns_and_points_at_transform():
    """Scores exp(z) of a latent LMM fitted as Gaussian: the model EER misses the empirical one
    and the table warns; the right (latent) model does not."""
    df, _, _ = _latent_data(n=8000, seed=4, sd_b=0.2, sd_c=0.3)
    df["z2"] = np.exp(1.2 * df["z"])  # strongly skewed on the score scale
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bad = lmer('z2 ~ label + (1 | speaker) + (0 + dummy(label, "spoof") | attack)', df, dispersion="~ label")
        good = lmer(F, df, dispersion="~ label")
    with pytest.warns(ModelFitWarning, match='transform="monotone"'):
        tab = model_eer(bad, by=pd.Series(np.zeros(len(df), int), name="all"), n_boot=100)
    assert not tab["fit_ok"].iloc[0]
    row = tab.iloc[0]
    assert row["eer_empirical_lo"] <= row["eer_empirical"] <= row["eer_empirical_hi"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelFitWarning)
        ok = model_eer(good, by="g", data=df, n_boot=100)
    assert ok["fit_ok"].all()
    assert "no term for ['g']" in ok.attrs["note"]


def test_missing_terms_reads_formula_and_dispersion(fits):
    _, fit, _ = fits
    assert missing_terms(fit, ["speaker", "attack", "label", "g", "speaker_gender"]) == ["g", "speaker_gender"]


# ----------------------------------------------------------------------------- the real transformation model
@pytest.fixture(scope="module")
def real_transform_fits():
    """lmer(..., transform="monotone") on latent-LMM data, scores given as z and as exp(z)."""
    df, _, _ = _latent_data(n=3000, seed=7)
    form = 'score ~ label + (1 | speaker) + (0 + dummy(label, "spoof") | attack)'
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = sm.lmer(form, df.assign(score=df["z"]), dispersion="~ label", transform="monotone")
        b = sm.lmer(form, df, dispersion="~ label", transform="monotone")  # score = exp(z)
    return df, a, b


def test_real_transform_fit_is_rank_invariant_through_the_layer(real_transform_fits):
    df, a, b = real_transform_fits
    assert model_eer(a) == pytest.approx(model_eer(b), abs=1e-9)
    ta = model_eer(a, by="g", data=df.assign(score=df["z"]), n_boot=0)
    tb = model_eer(b, by="g", data=df, n_boot=0)
    np.testing.assert_allclose(tb["eer_model"], ta["eer_model"], atol=1e-9)
    np.testing.assert_allclose(tb["eer_empirical"], ta["eer_empirical"], atol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ModelFitWarning)
        ra = model_subgroup_dcf(a, df.assign(score=df["z"]), ["g"], n_boot=0)
        rb = model_subgroup_dcf(b, df, ["g"], n_boot=0)
    for col in ("min_dcf", "ratio_overall", "eer"):
        np.testing.assert_allclose(rb.table[col], ra.table[col], atol=1e-9)
    # thresholds are reported on each fit's own score scale: exp of the other's (up to the
    # interpolation of h between fitted scores, which is linear in z for a and in exp(z) for b)
    assert rb.threshold == pytest.approx(np.exp(ra.threshold), rel=0.02)
    # and the score threshold maps back to the same latent point
    pa, pb = predictive(a), predictive(b)
    ea, sa = pa.eer(return_threshold=True)
    eb, sb = pb.eer(return_threshold=True)
    assert sb[0] == pytest.approx(np.exp(sa[0]), rel=0.02)


def test_real_transform_fit_matches_the_empirical_rates(real_transform_fits):
    """Correctly specified transformation model: no ModelFitWarning, model rates at score
    thresholds within sampling error of the empirical ones."""
    df, _, b = real_transform_fits
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelFitWarning)
        tab = model_eer(b, by=pd.Series(np.zeros(len(df), int), name="all"), n_boot=100)
    assert bool(tab["fit_ok"].iloc[0])
    s, y = df["score"].to_numpy(), (df["label"] == "bonafide").to_numpy()
    tau = np.quantile(s, [0.3, 0.5, 0.7])
    fnr, fpr = predictive(b).rates_at(tau)
    for k, t in enumerate(tau):
        e_fnr, e_fpr = np.mean(s[y] < t), np.mean(s[~y] >= t)
        assert fnr[0, k] == pytest.approx(e_fnr, abs=4 * np.sqrt(e_fnr * (1 - e_fnr) / y.sum()) + 0.01)
        assert fpr[0, k] == pytest.approx(e_fpr, abs=4 * np.sqrt(e_fpr * (1 - e_fpr) / (~y).sum()) + 0.01)
    # the cells of the real transform are what bayes_lmer(transform=...) uses
    from scoremix.bayes.transform import latent_cells

    lo, hi = latent_cells(b.transform, df["score"])
    assert np.all(hi > lo)


def test_saturated_scores_enter_the_empirical_side_by_their_order():
    """+inf/-inf scores (probabilities 0/1 as logits) are ranked, not refused: the empirical
    EER and its interval equal those of any finite order-preserving stand-in."""
    rng = np.random.default_rng(9)
    n = 800
    y = rng.random(n) < 0.5
    s = y * 2.0 + rng.standard_normal(n)
    s_inf = np.where(s > 2.5, np.inf, np.where(s < -1.5, -np.inf, s))
    s_cap = np.where(s > 2.5, 50.0, np.where(s < -1.5, -50.0, s))
    cl = rng.integers(0, 20, n)
    a = empirical_eer_interval(s_inf, y, cl, n_boot=40, seed=1)
    b = empirical_eer_interval(s_cap, y, cl, n_boot=40, seed=1)
    assert a == pytest.approx(b, abs=1e-12)
    assert a["eer"] == pytest.approx(emp_eer(s_cap, y), abs=1e-12)
