"""Bayesian location-scale / stratified transformation models (scoremix.bayes.locscale).

* the collapsed per-cell likelihood (b and u integrated out given g) equals the multivariate
  normal density of the unit's trials computed directly (scipy);
* the exact conditional draws of b match the Gaussian conditional computed by dense algebra;
* the posterior agrees with plain PyMC on the full trial-level likelihood (b, g, u explicit)
  within Monte Carlo error (slow);
* errors are named.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

pytest.importorskip("pymc")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scoremix.bayes.locscale import BayesLocScaleError, bayes_locscale
from scoremix.bayes.locscale_model import (
    LocScaleCells,
    conditional_effects,
    unit_loglik_graph,
)


def _unit_data(rng, n_strata=3, n_per=(4, 6, 5)):
    z = [rng.normal(0.3 * k, 1.0, n) for k, n in enumerate(n_per[:n_strata])]
    return z


@pytest.mark.parametrize("corr,omega", [((True, True), (True, False)), ((False, False), (False, False)),
                                        ((False, False), (True, False)), ((True, False), (False, False))])
def test_unit_loglik_equals_direct_multivariate_normal(corr, omega):
    """Also without correlation / ω (those graphs drop the constant-zero terms)."""
    import pytensor.tensor as pt

    rng = np.random.default_rng(3)
    # two units: unit 0 (negative class, 3 strata), unit 1 (positive class, 1 stratum)
    z0 = _unit_data(rng)
    z1 = [rng.normal(2.0, 0.7, 7)]
    cells_z = z0 + z1
    unit = np.array([0, 0, 0, 1])
    stratum = np.array([0, 1, 2, 3])
    n = np.array([len(x) for x in cells_z], float)
    sz = np.array([x.sum() for x in cells_z])
    szz = np.array([(x ** 2).sum() for x in cells_z])
    cells = LocScaleCells(unit=unit, stratum=stratum, n=n, sz=sz, szz=szz, unit_class=np.array([0, 1]),
                          stratum_class=np.array([0, 0, 0, 1]), scale=[True, True], corr=list(corr),
                          omega=list(omega), tail=[False, False])
    mu = np.array([0.1, 0.2, -0.3, 1.8])
    lam = np.array([-0.1, 0.05, 0.2, -0.3])
    tau_b, tg = np.array([0.6, 0.4]), np.array([0.3, 0.5])
    rho = np.where(cells.corr, [0.5, -0.4], 0.0)
    om2 = np.where(cells.omega, [0.2, 0.0], 0.0)
    g = np.array([0.25, -0.4])
    got = unit_loglik_graph(cells, pt.constant(n), pt.constant(sz / n), pt.constant(np.maximum(szz - sz ** 2 / n, 0)),
                            pt.constant(mu), pt.constant(lam), pt.constant(tau_b), pt.constant(tg), pt.constant(rho),
                            pt.constant(om2), pt.constant(g)).eval()
    for u, c in ((0, 0), (1, 1)):
        idx = np.flatnonzero(unit == u)
        zz = np.concatenate([cells_z[k] for k in idx])
        st = np.concatenate([np.full(len(cells_z[k]), k) for k in idx])
        # b | g ~ N(rho tau_b g / tau_g, tau_b^2 (1 - rho^2)); u_cell ~ N(0, om2)
        m = mu[st] + rho[c] * tau_b[c] / tg[c] * g[u]
        cov = np.diag(np.exp(2 * (lam[st] + g[u]))) + tau_b[c] ** 2 * (1 - rho[c] ** 2)
        cov = cov + om2[c] * (st[:, None] == st[None, :])
        want = stats.multivariate_normal(m, cov).logpdf(zz)
        assert got[u] == pytest.approx(want, rel=1e-10, abs=1e-9)


def test_conditional_b_draws_match_dense_gaussian_conditional():
    rng = np.random.default_rng(5)
    cells_z = [rng.normal(0.5, 1.0, 5), rng.normal(-0.2, 1.0, 8)]
    n = np.array([5.0, 8.0])
    sz = np.array([x.sum() for x in cells_z])
    szz = np.array([(x ** 2).sum() for x in cells_z])
    cells = LocScaleCells(unit=np.array([0, 0]), stratum=np.array([0, 1]), n=n, sz=sz, szz=szz,
                          unit_class=np.array([0]), stratum_class=np.array([0, 0]), scale=[True, False],
                          corr=[False, False], omega=[True, False], tail=[False, False])
    mu, lam = np.array([0.1, -0.1]), np.array([0.0, 0.2])
    tb, om2, g = 0.7, 0.09, 0.1
    D = 200_000
    rep = lambda a: np.repeat(np.atleast_2d(a), D, axis=0)
    b, u = conditional_effects(cells, rep(mu), rep(lam), rep([tb, 0.5]), rep([0.3, 0.0]), rep([0.0, 0.0]),
                               rep([om2, 0.0]), rep([g]), np.random.default_rng(1))
    # dense: y = mu_s + b + u_s + e; gamma = (b, u0, u1) Gaussian, prior diag(tb², om2, om2)
    zz = np.concatenate(cells_z)
    st = np.r_[np.zeros(5, int), np.ones(8, int)]
    Z = np.column_stack([np.ones(13), st == 0, st == 1]).astype(float)
    R = np.diag(np.exp(2 * (lam[st] + g)))
    P0 = np.diag([1 / tb ** 2, 1 / om2, 1 / om2])
    V = np.linalg.inv(Z.T @ np.linalg.solve(R, Z) + P0)
    m = V @ Z.T @ np.linalg.solve(R, zz - mu[st])
    se = np.sqrt(np.diag(V) / D)
    assert abs(b[:, 0].mean() - m[0]) < 5 * se[0]
    assert abs(u[:, 0].mean() - m[1]) < 5 * se[1] and abs(u[:, 1].mean() - m[2]) < 5 * se[2]
    assert b[:, 0].var() == pytest.approx(V[0, 0], rel=0.02)
    assert u[:, 1].var() == pytest.approx(V[2, 2], rel=0.02)


def test_named_errors():
    from scoremix.bayes.transform import TransformSpecError

    with pytest.raises(BayesLocScaleError, match="LocScaleFit"):
        bayes_locscale(object())
    from scoremix.locscale import LocScaleSpec

    with pytest.raises(BayesLocScaleError, match="needs the trials"):
        bayes_locscale(LocScaleSpec())
    with pytest.raises(BayesLocScaleError, match="draws"):
        bayes_locscale(LocScaleSpec(), None, draws=0)
    from scoremix.bayes.latent import latent_point_spec

    with pytest.raises(TransformSpecError, match="method='joint'"):
        latent_point_spec(None, None, None, object(), None, None)


@pytest.mark.slow
def test_agrees_with_plain_pymc_on_the_trial_likelihood():
    """Same model and priors, sampled (a) on cell statistics with b, u integrated out and
    (b) by plain PyMC on every trial with b, g, u explicit: posterior means within MC error."""
    import arviz as az
    import pymc as pm
    from locscale_helpers import simulate_ls

    from scoremix.locscale import LocScaleSpec, fit_locscale

    df = simulate_ls(n_speakers=10, n_per_cell=6, strata_neg=2, omega=0.3, seed=4)
    spec = LocScaleSpec(strata=("attack",), positive="bonafide", transform=False, speaker_by_stratum=("negative",),
                        correlated=("positive",))
    fit = fit_locscale(df, spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = bayes_locscale(fit, draws=600, tune=500, chains=2, cores=1, seed=2, centred=False)
    cells = res.cells
    pri = res.draws and None
    from scoremix.bayes.locscale_model import default_locscale_priors

    pri = default_locscale_priors(cells)
    data = fit._data
    tc = res.maps["trial_cell"]
    z = data.score
    s = cells.stratum[tc]
    un = cells.unit[tc]
    with pm.Model():
        mu = pm.Normal("mu", pri.mu_loc, pri.mu_scale, shape=cells.n_strata)
        lam = pm.Normal("lam", pri.lam_loc, pri.lam_scale, shape=cells.n_strata)
        tau_b = pm.HalfNormal("tau_b", pri.tb_scale, shape=2)
        tau_g = pm.HalfNormal("tau_g", pri.tg_scale, shape=2)
        r01 = pm.Beta("rho01", 2, 2)
        omega = pm.HalfNormal("omega", pri.om_scale)
        rho = pm.math.stack([0.0, 2 * r01 - 1])
        e1 = pm.Normal("e1", 0, 1, shape=cells.n_units)
        e2 = pm.Normal("e2", 0, 1, shape=cells.n_units)
        uc = cells.unit_class
        g = tau_g[uc] * e1
        b = tau_b[uc] * (rho[uc] * e1 + pm.math.sqrt(1 - rho[uc] ** 2) * e2)
        ucell = pm.Normal("u_raw", 0, 1, shape=cells.unit.size)
        uu = omega * ucell * (cells.stratum_class[cells.stratum] == 0)
        pm.Normal("z", mu[s] + b[un] + uu[tc], pm.math.exp(lam[s] + g[un]), observed=z)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = pm.sample(600, tune=500, chains=2, cores=1, random_seed=3, progressbar=False, target_accept=0.95)
    post = ref.posterior
    pairs = {"tau_b[negative]": post["tau_b"][..., 0], "tau_b[positive]": post["tau_b"][..., 1],
             "tau_g[negative]": post["tau_g"][..., 0], "tau_g[positive]": post["tau_g"][..., 1],
             "omega[negative]": post["omega"], "rho[positive]": 2 * post["rho01"] - 1,
             f"mu[{cells.strata_levels[0]}]": post["mu"][..., 0],
             f"sigma[{cells.strata_levels[1]}]": np.exp(post["lam"][..., 1])}
    ours = res.summary()
    for name, draws_ref in pairs.items():
        a = np.asarray(draws_ref)
        mref = float(a.mean())
        se_ref = float(az.mcse(az.convert_to_dataset(a[..., None].reshape(a.shape[0], a.shape[1])))["x"])
        mine, se_mine = float(ours.loc[name, "mean"]), float(ours.loc[name, "mcse_mean"])
        zscore = (mine - mref) / np.hypot(se_ref, se_mine)
        assert abs(zscore) < 4.0, (name, mine, mref, se_mine, se_ref)


def test_posterior_eer_is_the_crossing_of_the_draws_cell_mixtures():
    """posterior_eer(thresholds="latent") of a Gaussian location-scale fit: per draw, the crossing
    of FNR and FPR of the class mixtures of every trial's N(μ_s + b + u, (σ_s e^g)²), found here by
    brentq from the draws directly (trial by trial, no components)."""
    from locscale_helpers import simulate_ls
    from scipy.optimize import brentq
    from scipy.stats import norm

    from scoremix.locscale import LocScaleSpec, fit_locscale

    df = simulate_ls(n_speakers=6, n_per_cell=8, strata_neg=2, omega=0.3, seed=2)
    spec = LocScaleSpec(strata=("attack",), positive="bonafide", transform=False, speaker_by_stratum=("negative",))
    fit = fit_locscale(df, spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = bayes_locscale(fit, draws=40, tune=40, chains=1, cores=1, seed=3)
    tab = res.posterior_eer(thresholds="latent", max_draws=None, level=0.5)
    pred, W, labels = res.predictive(max_draws=None)
    assert labels == ["all"] and W[0].sum() == len(df)
    d = res.draws
    cells = res.cells
    tc = res.maps["trial_cell"]
    s, un = cells.stratum[tc], cells.unit[tc]
    y = fit._data.y == 1
    eers = []
    for k in range(d["mu"].shape[0]):
        m = d["mu"][k, s] + d["b"][k, un] + d["u"][k, tc]
        sd = np.exp(d["lam"][k, s] + d["g"][k, un])

        def gap(t, m=m, sd=sd):
            return norm.cdf((t - m[y]) / sd[y]).mean() - norm.sf((t - m[~y]) / sd[~y]).mean()

        t = brentq(gap, -20, 20, xtol=1e-12)
        eers.append(100 * norm.cdf((t - m[y]) / sd[y]).mean())
    eers = np.array(eers)
    assert tab.loc["all", "mean"] == pytest.approx(eers.mean(), rel=1e-6)
    assert tab.loc["all", "lo"] == pytest.approx(np.quantile(eers, 0.25), rel=1e-6)
    assert tab.loc["all", "n"] == len(df)
