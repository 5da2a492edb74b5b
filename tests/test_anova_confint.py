"""Likelihood-ratio tests and confidence intervals against lme4 (stored references)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.linalg as sla
from scipy import optimize, stats

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


# ------------------------------------------------- profile intervals of a dispersion model
CHI2_95 = stats.chi2.ppf(0.95, 1)


def _sim_dispersion(seed, n, n_spk, n_att, sd_spk=0.8, sd_att=1.0, sd0=1.0, sd1=2.0):
    """``score = 1 + 2·label + b_speaker + c_attack + ε``, ``ε ~ N(0, sd_label²)``."""
    rng = np.random.default_rng(seed)
    d = pd.DataFrame({"speaker": rng.integers(0, n_spk, n).astype(str),
                      "attack": rng.integers(0, n_att, n).astype(str),
                      "label": rng.binomial(1, 0.5, n)})
    d["score"] = (1 + 2 * d.label + rng.normal(0, sd_spk, n_spk)[d.speaker.astype(int)]
                  + rng.normal(0, sd_att, n_att)[d.attack.astype(int)]
                  + rng.normal(0, 1, n) * np.where(d.label == 1, sd1, sd0))
    spec = H.spec(d, "score", ["(Intercept)", "label"],
                  [H.term(d, "speaker", ["(Intercept)"]), H.term(d, "attack", ["(Intercept)"])],
                  dispersion="label")
    return d, spec


class _DenseML:
    """-2 log L of ``y ~ N(Xβ, V)``, ``V = s_1² Z_1Z_1' + s_2² Z_2Z_2' + diag(s_{d(i)}²)``,
    from the dense ``n × n`` matrix; ``β`` (minus the fixed ``β_j``, an offset) by GLS.
    Parameters ``(s_1, s_2, s_0, s_1)`` = (.sig01, .sig02, .sigma, .sigma.1)."""

    def __init__(self, spec):
        self.ZZ = [(t.codes[:, None] == t.codes[None, :]).astype(float) for t in spec.terms]
        self.lab = np.asarray(spec.dispersion_codes) == 1
        self.X, self.y, self.n = spec.X, spec.y, spec.n

    def dev(self, sds, fixed_beta=None):
        s1, s2, s0, sl = sds
        V = s1 ** 2 * self.ZZ[0] + s2 ** 2 * self.ZZ[1] + np.diag(np.where(self.lab, sl ** 2, s0 ** 2))
        cho = sla.cho_factor(V, lower=True)
        X, y = self.X, self.y
        if fixed_beta is not None:
            j, v = fixed_beta
            y = y - v * X[:, j]
            X = np.delete(X, j, axis=1)
        ViX, Viy = sla.cho_solve(cho, X), sla.cho_solve(cho, y)
        beta = np.linalg.solve(X.T @ ViX, X.T @ Viy)
        r = y - X @ beta
        return 2 * np.sum(np.log(np.diag(cho[0]))) + r @ sla.cho_solve(cho, r) + self.n * np.log(2 * np.pi)

    def profile(self, start_sds, fix_sd=None, fixed_beta=None):
        """min over the free SDs (log scale) with SD ``fix_sd = (k, v)`` or ``β_j`` fixed."""
        free = [k for k in range(4) if fix_sd is None or k != fix_sd[0]]

        def f(x):
            s = np.array(start_sds, float)
            s[free] = np.exp(x)
            if fix_sd is not None:
                s[fix_sd[0]] = fix_sd[1]
            return self.dev(s, fixed_beta)

        x = np.log(np.asarray(start_sds, float)[free])
        r = optimize.minimize(f, x, method="BFGS", options=dict(gtol=1e-8))
        r2 = optimize.minimize(f, r.x, method="Nelder-Mead",
                               options=dict(xatol=1e-9, fatol=1e-12, maxiter=4000))
        return min(r.fun, r2.fun)


def test_profile_of_dispersion_model_hits_the_chi2_cutoff_of_a_dense_likelihood():
    """Every end point ``v`` of a profile interval satisfies ``min d(·|ψ_j = v) − min d =
    χ²₁(0.95)``, with ``d`` the ML deviance recomputed densely and minimised by scipy."""
    _, spec = _sim_dispersion(seed=11, n=150, n_spk=15, n_att=8)
    m = fit_quiet(spec, REML=False)
    ci = confint(m, method="profile", progress=False)
    assert list(ci.index) == [".sig01", ".sig02", ".sigma", ".sigma.1", "(Intercept)", "label"]
    dense = _DenseML(spec)
    # scalar terms: the random-effect SDs are σ·θ_k
    start = np.concatenate([m.sigma * m.theta.to_numpy(), m.sigma_by.to_numpy()])
    dmin = dense.profile(start)
    assert dmin == pytest.approx(-2 * m.loglik, abs=1e-6)
    checked = 0
    for k, name in enumerate(ci.index):
        for col in ci.columns:
            v = ci.loc[name, col]
            if k < 4 and v == 0.0:  # an SD whose profile stays below the cut-off down to 0
                assert dense.profile(start, fix_sd=(k, 0.0)) - dmin <= CHI2_95
                continue
            if k < 4:
                d = dense.profile(start, fix_sd=(k, v))
            else:
                d = dense.profile(start, fixed_beta=(k - 4, v))
            assert d - dmin == pytest.approx(CHI2_95, abs=1e-4), (name, col)
            checked += 1
    assert checked >= 10


def test_profile_of_dispersion_model_at_large_n_vs_wald_truth_and_bootstrap():
    n = 4000
    _, spec = _sim_dispersion(seed=5, n=n, n_spk=200, n_att=40, sd0=1.0, sd1=2.0)
    m = fit_quiet(spec, REML=False)
    ci = confint(m, method="profile", progress=False)
    wald = confint(m, method="wald")
    for name in ["(Intercept)", "label"]:
        width = wald.loc[name].diff().iloc[-1]
        assert abs(ci.loc[name].iloc[0] - wald.loc[name].iloc[0]) < 0.05 * width
        assert abs(ci.loc[name].iloc[1] - wald.loc[name].iloc[1]) < 0.05 * width
    # the residual SDs cover the simulated truth
    assert ci.loc[".sigma.1"].iloc[0] < 2.0 < ci.loc[".sigma.1"].iloc[1]
    assert ci.loc[".sigma"].iloc[0] < 1.0 < ci.loc[".sigma"].iloc[1]
    # large-sample SD of an SD from n_1 residuals: σ_1/sqrt(2 n_1); the interval is ±1.96 of it
    n1 = int((np.asarray(spec.dispersion_codes) == 1).sum())
    width = ci.loc[".sigma.1"].diff().iloc[-1]
    assert width == pytest.approx(2 * 1.96 * m.sigma_by["1"] / np.sqrt(2 * n1), rel=0.1)
    boot = confint(m, method="boot", n_boot=100, seed=3, progress=False, parm=[".sigma.1"])
    # percentile end points of 100 draws are ±~7 % of the width off; allow 25 %
    np.testing.assert_allclose(boot.loc[".sigma.1"].to_numpy(), ci.loc[".sigma.1"].to_numpy(),
                               atol=0.25 * width)


def test_default_method_is_profile_like_lme4(sleep):
    """lme4's confint.merMod defaults to the likelihood profile: so does scoremix."""
    ci = sleep["m1"].confint(parm=["Days"], progress=False)
    ref = sleep["ref"]["confint_profile"]
    assert ci.iloc[0, 0] == pytest.approx(ref["lower"][-1], rel=1e-4)
    assert ci.iloc[0, 1] == pytest.approx(ref["upper"][-1], rel=1e-4)
