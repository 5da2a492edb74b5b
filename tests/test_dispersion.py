"""Class-specific residual variance (``dispersion="~ label"``): Var(ε_i) = σ² ρ_{label(i)}.

Checked (1) against lme4 alone: weighted ``lmer`` fits (weights 1 and 1/ρ) with ρ optimised
over the REML criterion / ML deviance (``r_scripts/native_reference.R``); (2) against a direct
dense-matrix Gaussian likelihood maximised with scipy; (3) against simulated truth.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import optimize

import lme_native_helpers as H
from scoremix.lme import native


def fit_quiet(spec, REML=True):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return native.fit(spec, REML=REML)


@pytest.mark.parametrize("key", ["reml", "ml"])
def test_dispersion_matches_weighted_lmer_rho_optimisation(key):
    ref = H.load_ref("dispersion")[key]
    m = fit_quiet(H.dispersion_spec(), REML=(key == "reml"))
    rho = m.fit_info["rho"]
    assert rho[0] == 1.0
    assert rho[1] == pytest.approx(ref["rho"], rel=1e-5)
    # the criterion of the joint optimum is never worse than the 1-d search over ρ
    crit = -2 * m.loglik
    assert crit == pytest.approx(ref["criterion"], rel=1e-9)
    assert crit <= ref["criterion"] + 1e-8
    np.testing.assert_allclose(m.sigma_by.to_numpy(), list(ref["sigma_by"].values()), rtol=1e-5)
    assert list(m.sigma_by.index) == ["0", "1"]
    assert m.sigma == pytest.approx(ref["sigma"], rel=1e-5)
    np.testing.assert_allclose(m.fixef.to_numpy(), list(ref["fixef"].values()), rtol=1e-5)
    np.testing.assert_allclose(m.se.to_numpy(), list(ref["se"].values()), rtol=1e-4)
    np.testing.assert_allclose(m.theta.to_numpy(), ref["theta"], rtol=1e-4)
    np.testing.assert_allclose(m.varcorr["vcov"].to_numpy(), [v["vcov"] for v in ref["varcorr"]], rtol=1e-4)
    # one more parameter than the weighted lmer fit (ρ_1)
    npar_r = len(ref["fixef"]) + len(ref["theta"]) + 1
    assert m.npar == npar_r + 1
    assert m.aic == pytest.approx(crit + 2 * (npar_r + 1), rel=1e-9)
    for g, r in ref["ranef"].items():
        vals = m.ranef[g].loc[[str(v) for v in r["levels"]]].to_numpy()
        np.testing.assert_allclose(vals, r["values"], rtol=1e-4, atol=1e-5)
        csd = m.ranef_condsd[g].loc[[str(v) for v in r["levels"]]].to_numpy()
        np.testing.assert_allclose(csd, r["condsd"], rtol=1e-4)


def _small_dispersion_data(seed=4, n=160):
    rng = np.random.default_rng(seed)
    d = pd.DataFrame({"speaker": rng.integers(0, 12, n).astype(str),
                      "attack": rng.integers(0, 5, n).astype(str),
                      "label": rng.binomial(1, 0.5, n)})
    bs = rng.normal(0, 0.6, 12)
    ba = rng.normal(0, 1.0, 5)
    d["score"] = (1 + 2 * d.label + bs[d.speaker.astype(int)] + ba[d.attack.astype(int)]
                  + rng.normal(0, 1, n) * np.where(d.label == 1, 1.8, 0.7))
    return d


def _dense_criterion(spec, params, reml):
    """-2 log L from V = Z diag(σ_b², σ_c²) Z' + diag(σ_0², σ_1²)[label], β by GLS."""
    s_b, s_c, s0, s1 = np.exp(params)
    ZZ = []
    for t in spec.terms:  # Z_k Z_k' = 1[same level]
        ZZ.append((t.codes[:, None] == t.codes[None, :]).astype(float))
    V = (s_b ** 2 * ZZ[0] + s_c ** 2 * ZZ[1]
         + np.diag(np.where(spec.dispersion_codes == 1, s1 ** 2, s0 ** 2)))
    Vi = np.linalg.inv(V)
    X, y = spec.X, spec.y
    XtVX = X.T @ Vi @ X
    beta = np.linalg.solve(XtVX, X.T @ Vi @ y)
    r = y - X @ beta
    n, p = spec.n, spec.p
    out = np.linalg.slogdet(V)[1] + r @ Vi @ r
    if reml:
        return out + np.linalg.slogdet(XtVX)[1] + (n - p) * np.log(2 * np.pi)
    return out + n * np.log(2 * np.pi)


@pytest.mark.parametrize("reml", [True, False])
def test_dispersion_matches_dense_likelihood_optimum(reml):
    d = _small_dispersion_data()
    spec = H.spec(d, "score", ["(Intercept)", "label"],
                  [H.term(d, "speaker", ["(Intercept)"]), H.term(d, "attack", ["(Intercept)"])],
                  dispersion="label")
    m = fit_quiet(spec, reml)
    sd = dict(zip(m.varcorr["grp"], m.varcorr["sdcor"]))
    mine = np.log([sd["speaker"], sd["attack"], m.sigma_by["0"], m.sigma_by["1"]])
    # the dense likelihood at the native estimates equals the native criterion
    assert _dense_criterion(spec, mine, reml) == pytest.approx(-2 * m.loglik, rel=1e-10)
    # and scipy's optimum of the dense likelihood is the same point
    start = mine + np.array([0.3, -0.3, 0.2, -0.2])
    res = optimize.minimize(lambda x: _dense_criterion(spec, x, reml), start, method="Nelder-Mead",
                            options=dict(xatol=1e-8, fatol=1e-11, maxiter=3000, maxfev=6000))
    assert -2 * m.loglik <= res.fun + 1e-7
    np.testing.assert_allclose(np.exp(res.x), np.exp(mine), rtol=2e-3)


def test_dispersion_recovers_simulated_truth():
    rng = np.random.default_rng(21)
    n = 30_000
    d = pd.DataFrame({"speaker": rng.integers(0, 200, n).astype(str),
                      "attack": rng.integers(0, 10, n).astype(str),
                      "label": rng.binomial(1, 0.4, n)})
    d["score"] = (rng.normal(0, 0.5, 200)[d.speaker.astype(int)] + rng.normal(0, 1, 10)[d.attack.astype(int)]
                  + 2 * d.label + rng.normal(0, 1, n) * np.where(d.label == 1, 2.0, 1.0))
    spec = H.spec(d, "score", ["(Intercept)", "label"],
                  [H.term(d, "speaker", ["(Intercept)"]), H.term(d, "attack", ["(Intercept)"])],
                  dispersion="label")
    m = fit_quiet(spec)
    # SEs of the residual SDs are ~0.5 % here; allow 3 %
    assert m.sigma_by["0"] == pytest.approx(1.0, rel=0.03)
    assert m.sigma_by["1"] == pytest.approx(2.0, rel=0.03)
    assert m.fit_info["rho"][1] == pytest.approx(4.0, rel=0.06)
    assert m.fixef["label"] == pytest.approx(2.0, abs=0.06)
    assert "Residual" in m.summary() and "Dispersion: ~ label" in m.summary()
    assert m.to_dict()["sigma_by"] == {"0": m.sigma_by["0"], "1": m.sigma_by["1"]}


def test_dispersion_level_without_rows_is_named():
    d = _small_dispersion_data()
    spec = H.spec(d, "score", ["(Intercept)", "label"], [H.term(d, "speaker", ["(Intercept)"])],
                  dispersion="label")
    spec.dispersion_levels = ["0", "1", "2"]
    with pytest.raises(ValueError, match="dispersion level '2' has no rows"):
        native.fit(spec)
