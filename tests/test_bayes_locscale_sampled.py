"""Sampled stratum transforms (scoremix.bayes.locscale_sampled, ``bayes_locscale(transform="sampled")``).

* the Bernstein map with equal increments is the identity (the ML transform), and its
  Jacobian basis is the derivative of the map (finite differences);
* the cell statistics (linear / quadratic in the increments) give the cell means and
  within-cell sums of squares of the mapped trial values computed directly;
* the model's likelihood term at random increments equals the collapsed likelihood of the
  directly mapped latent values plus the log-Jacobian, and at equal increments the
  fixed-transform model's;
* with a fixed range narrower than the data (the simulation-based calibration's design) the
  values beyond it enter through the linear tails: basis and Jacobian agree with ``warp`` and
  its finite-difference derivative, and a built model given the new data by ``pm.set_data``
  has the collapsed likelihood of the mapped values plus the log-Jacobian;
* with the identity map the posterior EER equals the fixed-transform computation exactly;
* a sampled fit runs end to end; errors are named.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pymc")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scoremix.bayes.locscale import BayesLocScaleError, bayes_locscale, locscale_cells
from scoremix.bayes.locscale_sampled import (
    basis_F,
    basis_J,
    build_sampled_model,
    cell_zbar,
    sampled_eer_draws,
    sampled_model_data,
    sampled_transform_data,
    warp,
)


@pytest.fixture(scope="module")
def setup():
    from test_bayes_locscale_pool import _data

    from scoremix.locscale import LocScaleSpec, fit_locscale

    fit = fit_locscale(_data(2), LocScaleSpec(strata=("attack",), positive="bonafide"))
    cells, maps = locscale_cells(fit)
    td = sampled_transform_data(cells, maps["ez"], maps["ez2"], maps["trial_cell"], order=5)
    return fit, cells, maps, td


def _random_w(rng, S, M, scale=0.6):
    g = rng.normal(0, scale, (S, M))
    e = np.exp(g - g.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _cells_loglik(cells, trial_cell, z, s_v, mu, lam, tau_b, tau_g, g) -> float:
    """The unit log-likelihood (``unit_loglik_graph``) from the trials' warped latents ``z``:
    each cell's count, mean and within-cell sum of squares (plus the transform's ``s_v``)."""
    import pytensor.tensor as pt

    from scoremix.bayes.locscale_model import unit_loglik_graph

    C = cells.unit.size
    n = np.bincount(trial_cell, minlength=C).astype(float)
    zbar = np.bincount(trial_cell, weights=z, minlength=C) / n
    ssw = np.bincount(trial_cell, weights=(z - zbar[trial_cell]) ** 2, minlength=C) + s_v
    tg = np.ones(2)
    tg[np.flatnonzero(cells.scale)] = tau_g
    return unit_loglik_graph(cells, pt.constant(n), pt.constant(zbar), pt.constant(ssw), pt.constant(mu),
                             pt.constant(lam), pt.constant(tau_b), pt.constant(tg), pt.constant(np.zeros(2)),
                             pt.constant(np.zeros(2)), pt.constant(g)).eval().sum()


def test_equal_increments_are_the_identity_and_J_is_the_derivative(setup):
    _, cells, _, td = setup
    S, M = cells.n_strata, td.order
    lat = np.linspace(td.lo.min() - 1, td.hi.max() + 1, 301)
    L = np.tile(lat, (S, 1))
    np.testing.assert_allclose(warp(L, td, np.full((S, M), 1.0 / M)), L, rtol=0, atol=1e-12)
    w = _random_w(np.random.default_rng(1), S, M)
    for s in range(S):
        x = np.linspace(0.02, 0.98, 25)
        z = td.lo[s] + x * (td.hi[s] - td.lo[s])
        eps = 1e-6
        num = (warp(np.tile(z + eps, (S, 1)), td, w)[s] - warp(np.tile(z - eps, (S, 1)), td, w)[s]) / (2 * eps)
        np.testing.assert_allclose(num, basis_J(x, M) @ w[s], rtol=1e-6)
        assert np.all(np.diff(warp(np.tile(lat, (S, 1)), td, w)[s]) > 0)
    # F_k is the upper tail of the binomial: F_1 + ... + F_M = M x
    x = np.linspace(0, 1, 11)
    np.testing.assert_allclose(basis_F(x, M).sum(axis=1), M * x, atol=1e-12)


def test_cell_statistics_match_the_directly_mapped_trials(setup):
    _, cells, maps, td = setup
    w = _random_w(np.random.default_rng(2), cells.n_strata, td.order)
    tc = maps["trial_cell"]
    keep = tc >= 0
    ez = maps["ez"][keep]
    st = cells.stratum[tc[keep]]
    lat = np.full((cells.n_strata, ez.size), np.nan)
    for s in range(cells.n_strata):
        lat[s] = ez
    z = warp(lat, td, w)[st, np.arange(ez.size)]
    C = cells.unit.size
    n = np.bincount(tc[keep], minlength=C)
    zbar = np.bincount(tc[keep], weights=z, minlength=C) / n
    np.testing.assert_allclose(cell_zbar(cells, td, w[None])[0], zbar, rtol=1e-12, atol=1e-12)
    ssw = np.bincount(tc[keep], weights=(z - zbar[tc[keep]]) ** 2, minlength=C) + td.sV
    span = (td.hi - td.lo)[cells.stratum]
    quad = np.einsum("cm,cmk,ck->c", w[cells.stratum], td.sFFc, w[cells.stratum])
    np.testing.assert_allclose(span ** 2 * quad + td.sV, ssw, rtol=1e-10, atol=1e-12)


def test_model_likelihood_is_the_collapsed_likelihood_of_mapped_values_plus_jacobian(setup):

    from scoremix.bayes.locscale_model import (
        build_locscale_model,
        default_locscale_priors,
    )

    _, cells, maps, td = setup
    pri = default_locscale_priors(cells)
    model = build_sampled_model(cells, td, pri, centred=False)
    vals = model.replace_rvs_by_values([model.potentials[0], model["w"], model["mu"], model["lam"], model["tau_b"],
                                        model["tau_g"], model["g"]])
    pot = model.compile_fn(vals[0], inputs=model.value_vars)
    outs = model.compile_fn(vals[1:], inputs=model.value_vars)
    pt0 = model.initial_point()
    rng = np.random.default_rng(4)
    point = {k: v + rng.normal(0, 0.3, np.shape(v)) for k, v in pt0.items()}
    w, mu, lam, tau_b, tau_g, g = outs(point)
    tc = maps["trial_cell"]
    keep = tc >= 0
    st = cells.stratum[tc[keep]]
    lat = np.tile(maps["ez"][keep], (cells.n_strata, 1))
    z = warp(lat, td, w)[st, np.arange(st.size)]
    ll = _cells_loglik(cells, tc[keep], z, td.sV, mu, lam, tau_b, tau_g, g)
    x = (maps["ez"][keep] - td.lo[st]) / (td.hi - td.lo)[st]
    jac = np.log(np.einsum("tm,tm->t", basis_J(x, td.order), w[st])).sum()
    assert float(pot(point)) == pytest.approx(ll + jac, rel=1e-9)
    # equal increments (γ = 0): the fixed-transform model's likelihood
    fixed = build_locscale_model(cells, pri, centred=False)
    fpot = fixed.compile_fn(fixed.replace_rvs_by_values([fixed.potentials[0]])[0], inputs=fixed.value_vars)
    p0 = dict(point)
    p0["gamma_raw_zerosum__"] = np.zeros_like(point["gamma_raw_zerosum__"])
    fp = {k: p0[k] for k in fixed.initial_point()}
    assert float(pot(p0)) == pytest.approx(float(fpot(fp)), rel=1e-9)


def test_fixed_narrow_range_uses_linear_tails_in_basis_and_likelihood(setup):
    import pymc as pm

    from scoremix.bayes.locscale_model import default_locscale_priors

    _, cells, maps, td = setup
    S, M = cells.n_strata, td.order
    span = td.hi - td.lo
    lo2, hi2 = td.lo + 0.3 * span, td.hi - 0.25 * span          # about half of every stratum's trials outside
    td2 = sampled_transform_data(cells, maps["ez"], maps["ez2"], maps["trial_cell"], order=M, lo=lo2, hi=hi2)
    np.testing.assert_array_equal(td2.lo, lo2)
    np.testing.assert_allclose(td2.hi, hi2, rtol=1e-14)
    w = _random_w(np.random.default_rng(5), S, M)
    lat = np.linspace(td.lo.min() - 2, td.hi.max() + 2, 401)
    for s in range(S):
        x = (lat - lo2[s]) / (hi2[s] - lo2[s])
        assert (x < 0).any() and (x > 1).any()
        h = lo2[s] + (hi2[s] - lo2[s]) * basis_F(x, M) @ w[s]
        np.testing.assert_allclose(h, warp(np.tile(lat, (S, 1)), td2, w)[s], rtol=0, atol=1e-12)
        eps = 1e-6
        num = (warp(np.tile(lat + eps, (S, 1)), td2, w)[s] - warp(np.tile(lat - eps, (S, 1)), td2, w)[s]) / (2 * eps)
        np.testing.assert_allclose(num, basis_J(x, M) @ w[s], rtol=1e-6)
    # a model built on the data range, given the narrow-range statistics as new data
    pri = default_locscale_priors(cells)
    model = build_sampled_model(cells, td, pri, centred=False)
    pm.set_data(sampled_model_data(cells, td2), model=model)
    vals = model.replace_rvs_by_values([model.potentials[0], model["w"], model["mu"], model["lam"], model["tau_b"],
                                        model["tau_g"], model["g"]])
    pot = model.compile_fn(vals[0], inputs=model.value_vars)
    outs = model.compile_fn(vals[1:], inputs=model.value_vars)
    rng = np.random.default_rng(6)
    point = {k: v + rng.normal(0, 0.3, np.shape(v)) for k, v in model.initial_point().items()}
    w, mu, lam, tau_b, tau_g, g = outs(point)
    tc = maps["trial_cell"]
    keep = tc >= 0
    st = cells.stratum[tc[keep]]
    ez = maps["ez"][keep]
    z = warp(np.tile(ez, (S, 1)), td2, w)[st, np.arange(st.size)]
    eps = 1e-6
    dz = (warp(np.tile(ez + eps, (S, 1)), td2, w) - warp(np.tile(ez - eps, (S, 1)), td2, w))[st, np.arange(st.size)]
    ll = _cells_loglik(cells, tc[keep], z, td2.sV, mu, lam, tau_b, tau_g, g)
    jac = np.log(dz / (2 * eps)).sum()
    assert float(pot(point)) == pytest.approx(ll + jac, rel=1e-7)


def test_identity_map_gives_the_fixed_transform_eer_and_a_sampled_fit_runs(setup):
    from scoremix.predictive.attainable import attainable_eer

    fit, cells, _, _ = setup
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = bayes_locscale(fit, draws=30, tune=60, chains=1, cores=1, seed=1, transform="sampled", order=5)
    d = res.draws
    D = d["mu"].shape[0]
    assert d["w"].shape == (D, cells.n_strata, 5) and np.allclose(d["w"].sum(axis=2), 1.0)
    assert (d["tau_h"] > 0).all() and "tau_h" in res.summary().index
    pred, W, _ = res.predictive("attack", max_draws=10)
    ident = np.full((pred.n_draws, cells.n_strata, 5), 0.2)
    got = sampled_eer_draws(pred, W, res.settings["tdata"], ident, "attainable", 500)
    want = attainable_eer(pred, W, max_thresholds=500)[0]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    tab = res.posterior_eer(by="attack", max_draws=10, max_thresholds=500)
    assert list(tab.index) == ["all", "A0", "A1", "bonafide"]
    assert ((tab["lo"] <= tab["mean"]) & (tab["mean"] <= tab["hi"])).all()
    lat = res.posterior_eer(thresholds="latent", max_draws=10)
    assert np.isfinite(lat["mean"]).all()
    with pytest.raises(BayesLocScaleError, match="posterior_dcf"):
        res.posterior_dcf()
    with pytest.raises(BayesLocScaleError, match="already in"):
        res.posterior_eer(transform_uncertainty="bootstrap", n_transform=2)


def test_named_errors(setup):
    from test_bayes_locscale_pool import _data

    from scoremix.locscale import LocScaleSpec, fit_locscale

    fit = setup[0]
    with pytest.raises(BayesLocScaleError, match="transform must be"):
        bayes_locscale(fit, transform="bernstein")
    with pytest.raises(BayesLocScaleError, match="order"):
        bayes_locscale(fit, transform="sampled", order=1)
    gfit = fit_locscale(_data(2), LocScaleSpec(strata=("attack",), positive="bonafide", transform=False))
    with pytest.raises(BayesLocScaleError, match="transform=False"):
        bayes_locscale(gfit, transform="sampled")
