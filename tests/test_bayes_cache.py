"""pm.Data refits and the model cache; names shared with LmerResult; the diagnostics gate;
the optional numpyro sampler."""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import pytest
import scipy.stats as st

pytest.importorskip("pymc")

from test_bayes_likelihood import _dense_parts, _model_values, make_spec  # noqa: E402


def _potential_fn(model):
    return model.compile_fn(model.replace_rvs_by_values([model.potentials[0]])[0], inputs=model.value_vars,
                            on_unused_input="ignore", mode="FAST_COMPILE")


@pytest.mark.parametrize("case", [dict(), dict(slope=True, disp=True, weights=True)])
def test_set_data_turns_collapsed_model_into_other_datas(case):
    """A collapsed model built on data set 1, pm.set_data to data set 2 (same level counts,
    other y, weights, prior scales): its potential is data set 2's dense MVN log-density."""
    import pymc as pm

    from scoremix.bayes.joint import beta_prior_arrays, build_collapsed_model, model_data, model_signature
    from scoremix.bayes.params import variance_draws
    from scoremix.bayes.priors import resolve_priors
    from scoremix.bayes.suffstats import blocked_suffstats

    spec1, spec2 = make_spec(seed=0, **case), make_spec(seed=9, **case)
    ps1, ps2 = resolve_priors(spec1, None), resolve_priors(spec2, None)
    ss1, ss2 = blocked_suffstats(spec1), blocked_suffstats(spec2)
    assert model_signature(spec1, ps1, ss1, "collapsed", "suffstats", []) == \
        model_signature(spec2, ps2, ss2, "collapsed", "suffstats", [])
    model = build_collapsed_model(spec1, ps1, ss1).model
    pm.set_data(model_data(spec2, ps2, ss2, "collapsed"), model=model)
    pot = _potential_fn(model)
    logp = model.compile_logp(mode="FAST_COMPILE")
    m0, s0 = beta_prior_arrays(spec2, ps2)
    p = {k: v + 0.3 for k, v in model.initial_point().items()}
    sig, Ts = variance_draws(spec2, _model_values(model, p))
    Z, G, R = _dense_parts(spec2, sig[0], [T[0] for T in Ts])
    V = spec2.X @ np.diag(s0**2) @ spec2.X.T + Z @ G @ Z.T + R
    ref = st.multivariate_normal(spec2.X @ m0, V).logpdf(spec2.y)
    assert float(pot(p)) == pytest.approx(ref, rel=1e-8)
    # the priors moved too: logp - potential = data set 2's prior log-density (+ log-Jacobians)
    fresh = build_collapsed_model(spec2, ps2, ss2).model
    assert float(logp(p)) == pytest.approx(float(fresh.compile_logp(mode="FAST_COMPILE")(p)), rel=1e-10)


def test_set_data_joint_suffstats_equals_rows_of_other_data():
    import pymc as pm

    from scoremix.bayes.joint import build_joint_model, model_data
    from scoremix.bayes.priors import resolve_priors
    from scoremix.bayes.suffstats import blocked_suffstats

    spec1, spec2 = make_spec(seed=0, disp=True, weights=True), make_spec(seed=4, disp=True, weights=True)
    ps1, ps2 = resolve_priors(spec1, None), resolve_priors(spec2, None)
    m = build_joint_model(spec1, ps1, blocked_suffstats(spec1), "suffstats", centred=True).model
    pm.set_data(model_data(spec2, ps2, blocked_suffstats(spec2), "joint"), model=m)
    rows = build_joint_model(spec2, ps2, None, "rows", centred=True).model
    fa, fb = m.compile_logp(mode="FAST_COMPILE"), rows.compile_logp(mode="FAST_COMPILE")
    rng = np.random.default_rng(3)
    for _ in range(2):
        p = {k: v + rng.normal(0, 0.5, np.shape(v)) for k, v in rows.initial_point().items()}
        assert float(fa(p)) == pytest.approx(float(fb(p)), rel=1e-8)


def test_cached_refit_equals_fresh_fit():
    """Second fit with the same level counts reuses the cached model and gives exactly the
    draws of a fit on a freshly built model (same seed) — which also shows that seeded runs
    reproduce (β and b come from the seeded conditional draws)."""
    from scoremix.bayes import BayesConvergenceWarning, bayes_lmer
    from scoremix.bayes.cache import clear_model_cache, model_cache_info

    kw = dict(draws=60, tune=60, chains=2, cores=1, progress=False, seed=5)
    a_spec, b_spec = make_spec(seed=1, n=150, n1=6, n2=3), make_spec(seed=2, n=150, n1=6, n2=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BayesConvergenceWarning)
        clear_model_cache()
        a = bayes_lmer(a_spec, posterior_predictive=True, **kw)
        assert model_cache_info().size == 1
        hits = model_cache_info().hits
        b_cached = bayes_lmer(b_spec, **kw)
        assert model_cache_info().hits == hits + 1
        b_fresh = bayes_lmer(b_spec, cache=False, **kw)
    for name in b_fresh.param_names + ["b_spk"]:
        np.testing.assert_array_equal(b_cached.draws(name), b_fresh.draws(name))
    # posterior predictive: y_rep = Xβ + Zb + σε per draw, so standardised residuals are N(0, 1)
    yrep = a.idata.posterior_predictive["y"].values
    assert yrep.shape == (2, 60, a_spec.n)
    fl = lambda n: a.draws(n).reshape(120, *a.draws(n).shape[2:])  # noqa: E731
    beta = np.stack([fl(n) for n in a.param_names[:3]], axis=1)
    mu = beta @ a_spec.X.T + fl("b_spk")[:, a_spec.terms[0].codes, 0] + fl("b_att")[:, a_spec.terms[1].codes, 0]
    z = (yrep.reshape(120, -1) - mu) / fl("sigma")[:, None]
    assert abs(z.mean()) < 4 / np.sqrt(z.size) and abs(z.std() - 1) < 4 / np.sqrt(2 * z.size)


def test_parameter_names_match_lmer_result():
    """compare()/summary() names = the names derived from a native LmerResult (correlated
    slope, dispersion): every frequentist value finds its posterior row."""
    import pandas as pd

    from scoremix.bayes.priors import resolve_priors
    from scoremix.bayes.result import BayesLmerResult
    from scoremix.lme.api import lmer
    from scoremix.lme.model_frame import build_model_spec

    rng = np.random.default_rng(0)
    n = 400
    df = pd.DataFrame({"spk": rng.integers(0, 20, n).astype(str), "x": rng.normal(size=n),
                       "label": rng.choice(["bonafide", "spoof"], n)})
    df["y"] = rng.normal(size=n) + df["x"] * rng.normal(1, 0.5, 20)[df["spk"].astype(int)]
    formula = "y ~ label + x + (1 + x | spk)"
    fit = lmer(formula, df, dispersion="~ label")
    spec = build_model_spec(formula, df, dispersion="~ label")
    res = BayesLmerResult(idata=None, spec=spec, method="collapsed", likelihood="suffstats", sampler="pymc",
                          priors=resolve_priors(spec, None), diagnostics=None)  # type: ignore[arg-type]
    freq = BayesLmerResult._freq_values(fit)
    assert set(freq) == set(res.param_names)
    assert "cor_spk__(Intercept).x" in res.param_names
    assert {"sigma_bonafide", "sigma_spoof"} <= set(res.param_names)
    assert freq["cor_spk__(Intercept).x"][0] == pytest.approx(
        fit.varcorr.query("grp == 'spk' and var2 == 'x'")["sdcor"].iloc[0])


def _fake_idata(post: dict, diverging=None, depth=None):
    import arviz as az

    ss = {}
    if diverging is not None:
        ss["diverging"] = diverging
    if depth is not None:
        ss["tree_depth"] = depth
    return az.from_dict(posterior=post, sample_stats=ss or None)


def test_diagnostics_gate_flags_each_failure():
    from scoremix.bayes.diagnostics import BayesConvergenceWarning, diagnose, gate

    rng = np.random.default_rng(0)
    good = rng.normal(size=(4, 1000))
    stuck = rng.normal(size=(4, 1000)) + np.array([0, 0, 0, 3.0])[:, None]  # one chain elsewhere
    ar = np.zeros((4, 1000))  # AR(1) with ρ = 0.99: ESS ≈ 4000·(1-ρ)/(1+ρ) ≈ 20
    e = rng.normal(size=(4, 1000))
    for t in range(1, 1000):
        ar[:, t] = 0.99 * ar[:, t - 1] + e[:, t]
    div = np.zeros((4, 1000), bool)
    div[1, 5] = div[2, 7] = True
    depth = np.full((4, 1000), 3)
    depth[0, 0] = 10
    d = diagnose(_fake_idata({"a": good, "b": stuck, "c": ar}, div, depth), ["a", "b", "c"])
    assert d.n_divergent == 2 and d.n_max_treedepth == 1
    msg = {p.split(" ")[0]: p for p in d.problems}
    assert "'b'" in msg["R-hat"] and "'a'" not in msg["R-hat"]
    assert "'c'" in msg["bulk"] and "'a'" not in msg["bulk"]  # (the stuck chain 'b' too)
    assert "2 divergent transitions" in msg["2"] and "maximum tree depth" in msg["1"]
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        gate(d)
    assert [w.category for w in rec] == [BayesConvergenceWarning] * len(d.problems) == [BayesConvergenceWarning] * 5
    assert any("target_accept" in str(w.message) for w in rec)
    ok = diagnose(_fake_idata({"a": good}, np.zeros((4, 1000), bool), np.full((4, 1000), 3)), ["a"])
    assert ok.ok and ok.problems == []


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("numpyro") is None, reason="numpyro/jax not installed (optional)")
def test_numpyro_sampler_matches_pymc_posterior():
    """numpyro (optional) and PyMC NUTS on the same collapsed model: posterior means agree
    within Monte Carlo error."""
    from scoremix.bayes import BayesConvergenceWarning, bayes_lmer

    spec = make_spec(seed=3, n=200, n1=8, n2=4)
    kw = dict(draws=400, tune=300, chains=2, cores=1, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BayesConvergenceWarning)
        a = bayes_lmer(spec, sampler="numpyro", seed=1, **kw)
        b = bayes_lmer(spec, sampler="pymc", seed=2, **kw)
    import arviz as az

    assert a.sampler == "numpyro" and a.param_names == b.param_names
    for name in a.param_names:
        ea = float(az.mcse(a.idata, var_names=[name])[name].values)
        eb = float(az.mcse(b.idata, var_names=[name])[name].values)
        assert abs(a.draws(name).mean() - b.draws(name).mean()) < 4.0 * np.hypot(ea, eb), name
