"""bayes_glmer: the per-cell likelihood against scipy's row densities (every link), the
response forms, the priors, LOO on distinct pairs against arviz on all rows, predictions,
agreement with glmer (slow) and the Bayesian decision model (slow)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytensor
import pytest
from scipy import special, stats

import scoremix as sm
from scoremix.bayes import ClassMomentsError, PriorError
from scoremix.bayes.elpd import reff
from scoremix.bayes.glmer import build_glmm_model, glmm_model_data, glmm_priors
from scoremix.bayes.glmm_links import linkinv_np, loglik_graph, loglik_np

LINKS = [("binomial", "logit"), ("binomial", "probit"), ("binomial", "cloglog"), ("binomial", "log"),
         ("poisson", "log"), ("poisson", "identity"), ("poisson", "sqrt")]


def _table(seed: int = 0, n: int = 600) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    g = rng.integers(0, 12, n)
    h = rng.integers(0, 5, n)
    x = rng.choice([-1.0, 0.0, 0.5, 1.0], n)
    eta = -1.2 + 0.4 * x + rng.normal(0, 0.5, 12)[g] + rng.normal(0, 0.3, 5)[h]
    return pd.DataFrame({"y": (rng.random(n) < special.expit(eta)).astype(int), "x": x,
                         "g": [f"g{i:02d}" for i in g], "h": [f"h{i}" for i in h],
                         "cnt": rng.poisson(np.exp(eta + 1.0))})


def _row_loglik(family: str, link: str, eta: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """scipy's log densities of the rows (constants included)."""
    mu = linkinv_np(eta, link)
    if family == "binomial":
        return stats.binom.logpmf(np.round(w * y), np.round(w), mu)
    return stats.poisson.logpmf(y, mu)


@pytest.mark.parametrize("family,link", LINKS)
def test_cell_loglik_equals_sum_of_row_densities(family, link):
    df = _table()
    lhs = "y" if family == "binomial" else "cnt"
    md = glmm_model_data(f"{lhs} ~ x + (1|g) + (1|h)", df, family, link)
    c = md.cells
    assert c.n_cells < len(df) / 2                      # 12 × 5 × 4 patterns at most
    rng = np.random.default_rng(1)
    # η per cell, kept inside every link's domain (log: η < 0; identity/sqrt: η > 0)
    eta_c = rng.uniform(-3.0, -0.1, c.n_cells) if link == "log" and family == "binomial" else (
        rng.uniform(0.2, 3.0, c.n_cells) if link in ("identity", "sqrt") else np.clip(rng.normal(0, 1.5, c.n_cells), -4, 1.5))
    rows = _row_loglik(family, link, eta_c[c.row_cell], md.y, md.w)
    if family == "binomial":
        const = special.gammaln(md.w + 1) - special.gammaln(md.w * md.y + 1) - special.gammaln(md.w * (1 - md.y) + 1)
    else:
        const = -special.gammaln(md.y + 1)
    expected = rows.sum() - const.sum()
    got_np = loglik_np(eta_c, c.k, c.f, family, link).sum()
    got_pt = float(pytensor.function([], loglik_graph(eta_c, c.k, c.f, family, link), mode="FAST_COMPILE")())
    assert got_np == pytest.approx(expected, rel=1e-10, abs=1e-8)
    assert got_pt == pytest.approx(expected, rel=1e-10, abs=1e-8)


def test_log_ndtr_graph_is_accurate_with_finite_gradients():
    import pytensor.tensor as pt

    from scoremix.bayes.glmm_links import log_ndtr_graph

    x = pt.dvector("x")
    y = log_ndtr_graph(x)
    fn = pytensor.function([x], [y, pt.grad(y.sum(), x)], mode="FAST_COMPILE")
    v = np.array([-40.0, -5.0, -1.0, -0.3, 0.0, 2.0, 5.0, 9.0])
    val, grad = fn(v)
    np.testing.assert_allclose(val, special.log_ndtr(v), rtol=1e-13)
    # d/dx log Φ(x) = φ(x)/Φ(x)
    np.testing.assert_allclose(grad, np.exp(stats.norm.logpdf(v) - special.log_ndtr(v)), rtol=1e-10)


def test_response_forms_give_the_same_cells():
    df = _table(2)
    base = glmm_model_data("y ~ x + (1|g)", df, "binomial", None).cells
    tot = lambda c: pd.DataFrame({"g": c.codes[0], "x": c.X[:, 1], "k": c.k, "f": c.f}).groupby(["g", "x"]).sum()
    ref = tot(base)
    d2 = df.assign(yl=df["y"].astype(bool), yf=pd.Categorical(np.where(df["y"] == 1, "err", "ok"),
                                                               categories=["ok", "err"]))
    for formula in ("yl ~ x + (1|g)", "yf ~ x + (1|g)"):
        pd.testing.assert_frame_equal(tot(glmm_model_data(formula, d2, "binomial", None).cells), ref)
    agg = df.groupby(["g", "x"], as_index=False)["y"].agg(["sum", "count"]).reset_index()
    agg["fail"] = agg["count"] - agg["sum"]
    agg["prop"] = agg["sum"] / agg["count"]
    cb = glmm_model_data("cbind(sum, fail) ~ x + (1|g)", agg, "binomial", None).cells
    pr = glmm_model_data("prop ~ x + (1|g)", agg, "binomial", None, weights="count").cells
    for c in (cb, pr):
        got = tot(c)
        np.testing.assert_allclose(got[["k", "f"]].to_numpy(), ref[["k", "f"]].to_numpy(), rtol=1e-12)


def test_default_priors_are_link_scale_and_sigma_is_refused():
    df = _table(3)
    md = glmm_model_data("y ~ x + (1|g)", df, "binomial", "logit")
    ps = glmm_priors(md, None)
    assert ps.fixef["(Intercept)"].params["mu"] == pytest.approx(special.logit(df["y"].mean()), rel=1e-12)
    assert ps.fixef["(Intercept)"].params["sigma"] == pytest.approx(2.5)
    assert ps.fixef["x"].params["sigma"] == pytest.approx(2.5 / df["x"].std(ddof=1), rel=1e-9)
    assert ps.sd["sd_g__(Intercept)"].params == {"nu": 3.0, "sigma": 1.0}
    assert ps.sigma == {}
    with pytest.raises(PriorError, match="no residual SD"):
        glmm_priors(md, {"sigma": sm.Prior.half_normal(1.0)})
    with pytest.raises(PriorError, match="unknown prior key"):
        glmm_priors(md, {"sd_nope__(Intercept)": sm.Prior.half_normal(1.0)})


def test_model_logp_difference_matches_scipy():
    """The whole PyMC model (priors + cell likelihood, non-centred) against scipy at two points."""
    df = _table(4, 300)
    md = glmm_model_data("y ~ x + (1|g)", df, "binomial", "probit")
    ps = glmm_priors(md, None)
    model = build_glmm_model(md, ps)
    logp = model.compile_logp()
    rng = np.random.default_rng(5)

    def independent(beta, sd, z):
        b = sd * z
        eta = md.spec.X @ beta + b[np.asarray(md.spec.terms[0].codes)]
        lp = stats.binom.logpmf(md.y, 1, special.ndtr(eta)).sum()
        lp += sum(stats.norm.logpdf(beta[j], ps.fixef[n].params["mu"], ps.fixef[n].params["sigma"])
                  for j, n in enumerate(md.spec.fixef_names))
        lp += stats.t.logpdf(sd, 3, scale=1.0) + np.log(2) + np.log(sd)   # half-t₃ and the log transform
        lp += stats.norm.logpdf(z).sum()
        return lp

    vals = []
    for _ in range(2):
        beta, sd, z = rng.normal(0, 0.5, 2), rng.uniform(0.2, 1.5), rng.normal(0, 1, 12)
        pt = {"beta": beta, "sd__0__0_log__": np.log(sd), "z__0": z[:, None]}
        vals.append((logp(pt), independent(beta, sd, z)))
    assert vals[0][0] - vals[1][0] == pytest.approx(vals[0][1] - vals[1][1], rel=1e-9, abs=1e-7)


@pytest.fixture(scope="module")
def small_fit():
    df = _table(6, 400)
    agg = df.groupby(["g", "x"], as_index=False)["y"].agg(["sum", "count"]).reset_index()
    agg["fail"] = agg["count"] - agg["sum"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.bayes_glmer("cbind(sum, fail) ~ x + (1|g)", agg, draws=150, tune=200, chains=2, cores=1,
                             seed=3, progress=False, check=False)
    return fit, agg


def test_fit_names_predict_and_errors(small_fit):
    fit, agg = small_fit
    assert isinstance(fit, sm.BayesGlmerResult)
    assert fit.param_names == ["(Intercept)", "x", "sd_g__(Intercept)"]
    assert list(fit.varcorr["grp"]) == ["g"]
    assert fit.ranef("g").shape == (12, 1)
    # response-scale draws are g⁻¹ of the link draws, per draw
    lk = fit.predict(type="link", summary=False)
    rs = fit.predict(type="response", summary=False)
    np.testing.assert_allclose(rs, special.expit(lk), rtol=1e-12)
    # a level unseen in fitting gets the population value (random effects 0)
    new = pd.DataFrame({"x": [0.5], "g": ["unseen"]})
    fixed = fit.predict(new, type="link", summary=False)
    beta = fit._beta_draws()
    np.testing.assert_allclose(fixed[0], beta[:, 0] + 0.5 * beta[:, 1], rtol=1e-12)
    tab = fit.predict(level=0.9)
    assert list(tab.columns) == ["mean", "sd", "5%", "95%"] and len(tab) == len(agg)
    with pytest.raises(ClassMomentsError, match="bayes_decision_model"):
        fit.model_eer()


def test_loo_on_distinct_pairs_equals_arviz_on_all_rows(small_fit):
    import arviz as az

    fit, _ = small_fit
    mine = fit.loo()
    fit.log_likelihood(add=True)
    ref = az.loo(fit.idata, pointwise=True, reff=reff(fit))
    assert mine["elpd_loo"] == pytest.approx(float(ref["elpd_loo"]), rel=1e-10)
    assert mine["p_loo"] == pytest.approx(float(ref["p_loo"]), rel=1e-8)
    np.testing.assert_allclose(mine["pareto_k"].values, ref["pareto_k"].values, rtol=1e-10)
    assert sm.bayes_loo(fit)["elpd_loo"] == mine["elpd_loo"]      # the package-level entry point
    w = fit.waic()
    wr = az.waic(fit.idata, pointwise=True)
    assert w["elpd_waic"] == pytest.approx(float(wr["elpd_waic"]), rel=1e-10)
    # grouped: the sum of the group's rows per draw
    ll = fit.log_likelihood("g")
    full = fit.log_likelihood()
    codes = pd.factorize(fit.spec.data["g"], sort=True)[0]
    v = full[fit.spec.response].values
    np.testing.assert_allclose(ll[fit.spec.response].values[..., 0], v[..., codes == 0].sum(-1), rtol=1e-12)


def test_posterior_predictive_replicates_trials(small_fit):
    fit, agg = small_fit
    ds = fit.posterior_predictive(n_draws=20, seed=1)
    rep = ds[fit.spec.response].values
    assert rep.shape == (2, 20, len(agg))
    assert np.all(rep <= agg["count"].to_numpy()[None, None, :]) and np.all(rep >= 0)
    np.testing.assert_array_equal(fit.idata.observed_data[fit.spec.response].values, agg["sum"].to_numpy())


def test_bad_input_is_named():
    df = _table(7, 100)
    with pytest.raises(sm.GlmmUnsupportedError, match="no random effects"):
        sm.bayes_glmer("y ~ x", df)
    with pytest.raises(sm.FamilyError, match="link"):
        sm.bayes_glmer("y ~ x + (1|g)", df, link="sqrt")
    with pytest.raises(ValueError, match="draws"):
        sm.bayes_glmer("y ~ x + (1|g)", df, draws=0)
    with pytest.raises(sm.GlmmResponseError, match="outside"):
        sm.bayes_glmer("cnt ~ x + (1|g)", df)


@pytest.mark.slow
def test_posterior_agrees_with_glmer_on_larger_data():
    """2,400 rows in 60 cells: posterior means of β within 0.5 posterior SD of glmer's
    estimates, and of the speaker SD within 25 %."""
    rng = np.random.default_rng(11)
    n = 2400
    g = rng.integers(0, 30, n)
    x = rng.choice([0.0, 1.0], n)
    eta = -1.0 + 0.8 * x + rng.normal(0, 0.6, 30)[g]
    df = pd.DataFrame({"y": (rng.random(n) < special.expit(eta)).astype(int), "x": x, "g": g.astype(str)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.bayes_glmer("y ~ x + (1|g)", df, draws=300, tune=300, chains=2, cores=1, seed=2,
                             progress=False, check=False)
    ref = sm.glmer("y ~ x + (1|g)", df)
    tab = fit.fixef
    for name in ("(Intercept)", "x"):
        assert abs(tab.loc[name, "mean"] - ref.fixef[name]) < 0.5 * tab.loc[name, "sd"]
    assert fit.draws("sd_g__(Intercept)").mean() == pytest.approx(float(ref.theta.iloc[0]), rel=0.25)


@pytest.mark.slow
def test_bayes_decision_model_beside_the_frequentist_one():
    rng = np.random.default_rng(3)
    rows = []
    for s in range(16):
        g, u = ("f" if s < 8 else "m"), rng.normal(0, 0.5)
        for i in range(30):
            lab = "bonafide" if i < 10 else "spoof"
            sc = rng.normal(2 if lab == "bonafide" else -2, 1.5) + u
            rows.append((f"s{s}", g, lab, sc))
    df = pd.DataFrame(rows, columns=["speaker", "gender", "label", "score"])
    res = sm.bayes_decision_model(df, 0.0, ["gender"], draws=200, tune=200, chains=2, cores=1, progress=False,
                                  n_boot=200, seed=1)
    freq = sm.decision_model(df, 0.0, ["gender"], n_boot=200, seed=1)
    t = res.table
    for m in ("fnr", "fpr", "dcf"):
        pd.testing.assert_series_equal(t[f"{m}_emp"], freq.table[f"{m}_emp"])
        # the frequentist plug-in lies inside the posterior interval; the interval is ordered
        assert ((t[f"{m}_model_lo"] <= t[f"{m}_freq"]) & (t[f"{m}_freq"] <= t[f"{m}_model_hi"])).all()
        assert ((t[f"{m}_model_lo"] <= t[f"{m}_model"]) & (t[f"{m}_model"] <= t[f"{m}_model_hi"])).all()
    # equal trial counts per subgroup: the two DCF ratios to the overall DCF average 1 per draw
    d = res.draws[res.draws["measure"] == "fnr_ratio"].pivot(index="draw", columns="subgroup", values="value")
    np.testing.assert_allclose(d.mean(axis=1), 1.0, rtol=1e-10)


def test_refit_on_the_same_design_reuses_the_compiled_step_and_is_reproducible(small_fit):
    from scoremix.bayes import glmer as G

    fit, agg = small_fit
    n_cached = len(G._STEP_CACHE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = sm.bayes_glmer("cbind(sum, fail) ~ x + (1|g)", agg, draws=150, tune=200, chains=2, cores=1,
                               seed=3, progress=False, check=False)
    assert len(G._STEP_CACHE) == n_cached
    np.testing.assert_array_equal(again.draws("x"), fit.draws("x"))
    # new counts on the same design and priors: the cached model sees them (pm.Data)
    pri = {"(Intercept)": sm.Prior.normal(0.0, 2.5)}
    kw = dict(draws=150, tune=200, chains=2, cores=1, seed=3, progress=False, check=False, priors=pri)
    flipped = agg.assign(sum=agg["fail"], fail=agg["sum"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = sm.bayes_glmer("cbind(sum, fail) ~ x + (1|g)", agg, **kw)
        n_cached = len(G._STEP_CACHE)
        other = sm.bayes_glmer("cbind(sum, fail) ~ x + (1|g)", flipped, **kw)
    assert len(G._STEP_CACHE) == n_cached
    # swapping successes and failures mirrors the posterior of every coefficient (symmetric
    # priors): the means are opposite within Monte Carlo error (ESS ≥ 50 each)
    for name in ("(Intercept)", "x"):
        assert other.fixef.loc[name, "mean"] == pytest.approx(-base.fixef.loc[name, "mean"],
                                                              abs=4 * base.fixef.loc[name, "sd"] / np.sqrt(50))


@pytest.mark.slow
def test_poisson_posterior_agrees_with_glmer():
    """Poisson log link with an offset, 40 groups × 30 rows: posterior means of β within 0.5
    posterior SD of glmer's estimates."""
    rng = np.random.default_rng(12)
    n = 1200
    g = np.repeat(np.arange(40), 30)
    x = rng.choice([0.0, 1.0], n)
    expo = rng.choice([1.0, 2.0], n)
    mu = expo * np.exp(0.3 + 0.5 * x + rng.normal(0, 0.4, 40)[g])
    df = pd.DataFrame({"y": rng.poisson(mu), "x": x, "g": g.astype(str), "lexpo": np.log(expo)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.bayes_glmer("y ~ x + offset(lexpo) + (1|g)", df, "poisson", draws=300, tune=300, chains=2,
                             cores=1, seed=4, progress=False, check=False)
    ref = sm.glmer("y ~ x + offset(lexpo) + (1|g)", df, "poisson")
    assert fit.model_data.cells.n_cells <= 160           # 40 groups × 2 x × 2 offsets
    for name in ("(Intercept)", "x"):
        assert abs(fit.fixef.loc[name, "mean"] - ref.fixef[name]) < 0.5 * fit.fixef.loc[name, "sd"]
    assert fit.draws("sd_g__(Intercept)").mean() == pytest.approx(float(ref.theta.iloc[0]), rel=0.25)
