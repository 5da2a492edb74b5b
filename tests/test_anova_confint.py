"""Likelihood-ratio tests and confidence intervals against lme4 (stored references)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import lme_native_helpers as H
from scoremix.lme import native
from scoremix.lme.inference import RefitMLWarning, anova, confint, psi_to_theta, theta_to_psi


def fit_quiet(spec, REML=True):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return native.fit(spec, REML=REML)


@pytest.fixture(scope="module")
def sleep():
    return dict(m0=fit_quiet(H.sleepstudy_spec(slope=False)), m1=fit_quiet(H.sleepstudy_spec()),
                ref=H.load_ref("sleepstudy"))


def test_anova_matches_lme4(sleep):
    ref = sleep["ref"]["anova"]
    with pytest.warns(RefitMLWarning, match=r"refitting model\(s\) with ML \(instead of REML\)"):
        tab = anova(sleep["m1"], sleep["m0"], names=["m1", "m0"])  # given out of order
    assert list(tab.index) == ref["rows"]
    assert list(tab.columns) == ["npar", "AIC", "BIC", "logLik", "deviance", "Chisq", "Df", "Pr(>Chisq)"]
    assert list(tab["npar"]) == ref["npar"]
    for col, key in [("AIC", "AIC"), ("BIC", "BIC"), ("logLik", "logLik"), ("deviance", "deviance")]:
        np.testing.assert_allclose(tab[col], ref[key], rtol=1e-8)
    assert np.isnan(tab["Chisq"].iloc[0]) and np.isnan(tab["Pr(>Chisq)"].iloc[0])
    assert tab["Chisq"].iloc[1] == pytest.approx(ref["Chisq"][1], rel=1e-6)
    assert tab["Df"].iloc[1] == ref["Df"][1]
    assert tab["Pr(>Chisq)"].iloc[1] == pytest.approx(ref["p"][1], rel=1e-5)


def test_anova_of_ml_fits_does_not_refit_and_checks_rows(sleep):
    m0 = fit_quiet(H.sleepstudy_spec(slope=False), REML=False)
    m1 = fit_quiet(H.sleepstudy_spec(), REML=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tab = anova(m0, m1)
    chisq = 2 * (m1.loglik - m0.loglik)
    assert tab.loc["m1", "Chisq"] == pytest.approx(chisq)
    assert tab.loc["m1", "Pr(>Chisq)"] == pytest.approx(stats.chi2.sf(chisq, 2))
    other = fit_quiet(H.penicillin_spec())
    with pytest.raises(ValueError, match="different numbers of rows"):
        anova(m0, other)
    with pytest.raises(ValueError, match="at least two"):
        anova(m0)


def test_wald_intervals_match_lme4(sleep):
    ref = sleep["ref"]["confint_wald"]
    ci = confint(sleep["m1"], method="wald")
    assert list(ci.index) == ref["names"]
    assert list(ci.columns) == ["2.5 %", "97.5 %"]
    fx = ["(Intercept)", "Days"]
    np.testing.assert_allclose(ci.loc[fx, "2.5 %"], ref["lower"][-2:], rtol=1e-6)
    np.testing.assert_allclose(ci.loc[fx, "97.5 %"], ref["upper"][-2:], rtol=1e-6)
    assert ci.loc[".sig01"].isna().all()
    ci90 = sleep["m1"].confint("wald", level=0.9)
    assert list(ci90.columns) == ["5 %", "95 %"]
    z = stats.norm.ppf(0.95)
    assert ci90.loc["Days", "95 %"] == pytest.approx(sleep["m1"].fixef["Days"] + z * sleep["m1"].se["Days"])


@pytest.mark.parametrize("which", ["m1", "m0ml", "singular"])
def test_profile_intervals_match_lme4(sleep, which):
    if which == "m1":
        m, ref = sleep["m1"], sleep["ref"]["confint_profile"]
    elif which == "m0ml":
        m, ref = fit_quiet(H.sleepstudy_spec(slope=False), REML=False), sleep["ref"]["confint_profile_m0ml"]
    else:
        m, ref = fit_quiet(H.singular_spec()), H.load_ref("singular")["confint_profile"]
    ci = confint(m, method="profile", progress=False)
    assert list(ci.index) == ref["names"]
    lo, hi = np.asarray(ref["lower"], float), np.asarray(ref["upper"], float)
    scale = np.maximum(np.abs(hi - lo), 1e-8)
    rtol = np.full(len(lo), 1e-3)
    if which == "singular":
        # lme4's confint interpolates a spline through a coarse profile; next to the boundary
        # it is 0.2 % off the exact root of lme4's own profiled deviance, which we match
        exact = H.load_ref("singular")["sig01_upper_exact"]
        assert ci.iloc[0, 1] == pytest.approx(exact, rel=1e-6)
        assert ci.iloc[0, 0] == 0.0
        rtol[0] = 3e-3
    # within 1e-3 relative to the value (1e-3 of the interval width for values near 0)
    for k in range(len(lo)):
        assert ci.iloc[k, 0] == pytest.approx(lo[k], rel=rtol[k], abs=1e-3 * scale.min())
        assert ci.iloc[k, 1] == pytest.approx(hi[k], rel=rtol[k], abs=1e-3 * scale.min())


def test_profile_parm_subset(sleep):
    ci = sleep["m1"].confint("profile", parm=["Days"], progress=False)
    ref = sleep["ref"]["confint_profile"]
    assert list(ci.index) == ["Days"]
    assert ci.iloc[0, 0] == pytest.approx(ref["lower"][-1], rel=1e-4)
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['days'\]"):
        sleep["m1"].confint("profile", parm=["days"])
    with pytest.raises(ValueError, match="unknown confint method 'bayes'"):
        sleep["m1"].confint("bayes")


def test_psi_theta_round_trip():
    theta = np.array([0.9, -0.2, 0.3, 1.1])  # one 2×2 term and one 1×1 term
    psi = theta_to_psi(theta, 2.0, [2, 1])
    # Σ = σ² T T': sd1 = σ·0.9, cor = T21/sqrt(T21² + T22²)
    assert psi[0] == pytest.approx(1.8)
    assert psi[1] == pytest.approx(-0.2 / np.hypot(0.2, 0.3))
    assert psi[2] == pytest.approx(2 * np.hypot(0.2, 0.3))
    assert psi[4] == 2.0
    th, s = psi_to_theta(psi, [2, 1])
    np.testing.assert_allclose(th, theta, rtol=1e-12)
    assert s == 2.0


def test_bootstrap_is_seeded_and_agrees_with_sampling_theory(sleep):
    m = sleep["m0"]
    a = confint(m, method="boot", n_boot=150, seed=42, progress=False)
    b = confint(m, method="boot", n_boot=150, seed=42, progress=False)
    pd.testing.assert_frame_equal(a, b)
    c = confint(m, method="boot", n_boot=150, seed=43, progress=False)
    assert not a.equals(c)
    draws = a.attrs["draws"]
    # simulated from the fit: bootstrap means near the estimates, SDs near the standard errors
    for name in ["(Intercept)", "Days"]:
        se = m.se[name]
        assert abs(draws[name].mean() - m.fixef[name]) < 4 * se / np.sqrt(150)
        assert draws[name].std() == pytest.approx(se, rel=0.2)
    # percentile interval of Days close to the Wald interval (±20 % of its half-width)
    half = 1.96 * m.se["Days"]
    assert a.loc["Days", "2.5 %"] == pytest.approx(m.fixef["Days"] - half, abs=0.2 * half)
    assert a.loc["Days", "97.5 %"] == pytest.approx(m.fixef["Days"] + half, abs=0.2 * half)
    # σ's interval covers the estimate
    assert a.loc[".sigma", "2.5 %"] < m.sigma < a.loc[".sigma", "97.5 %"]


def test_bootstrap_of_weighted_dispersion_model_runs():
    m = fit_quiet(H.dispersion_spec())
    ci = confint(m, method="boot", n_boot=20, seed=1, progress=False)
    assert ci.loc["label"].between(1.0, 3.0).all()
    assert np.isfinite(ci.to_numpy()).all()


def test_bootstrap_of_dispersion_model_includes_every_residual_sd():
    """``.sigma.spoof`` (σ·sqrt(ρ_spoof)) is bootstrapped too; its draws centre on the estimate
    and spread like the large-sample SE of an SD estimated from ``n_k`` residuals,
    ``σ_k / sqrt(2 n_k)`` (the few fixed/random-effect degrees of freedom do not matter at
    n_k ≈ 2500)."""
    from pathlib import Path

    from scoremix.lme.api import lmer
    d = pd.read_csv(Path(__file__).resolve().parent / "data" / "reference" / "sim_detector.csv")
    m = lmer('score ~ label * x + (1|speaker) + (0 + dummy(label, "spoof")|attack)', d,
             dispersion="~ label")
    nb = 60
    ci = confint(m, method="boot", n_boot=nb, seed=7, progress=False)
    assert list(ci.index[:4]) == [".sig01", ".sig02", ".sigma", ".sigma.spoof"]
    draws = ci.attrs["draws"]
    for lev, name in [("bonafide", ".sigma"), ("spoof", ".sigma.spoof")]:
        est = m.sigma_by[lev]
        se = est / np.sqrt(2 * int((d["label"] == lev).sum()))
        assert abs(draws[name].mean() - est) < 4 * se / np.sqrt(nb)
        assert draws[name].std() == pytest.approx(se, rel=0.3)
    wald = confint(m, method="wald")
    assert np.isnan(wald.loc[".sigma.spoof"]).all()
