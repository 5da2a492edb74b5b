"""``GlmerResult.check()`` (scoremix.glmm.check): DHARMa-style scaled residuals of a GLMM
are uniform on data simulated from a fit, and the checks detect overdispersion, zero
inflation and a missing term in seeded examples; convergence and singularity checks
against closed forms."""

import copy
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import scoremix as sm


def _pois(seed, olre=0.0, beff=0.0, zi=0.0, n_g=40, n_per=15, sd_g=0.5):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(n_g), n_per)
    x = rng.normal(size=g.size)
    f = rng.integers(0, 3, g.size)
    eta = 0.5 + 0.4 * x + rng.normal(0, sd_g, n_g)[g] + olre * rng.normal(size=g.size) + beff * (f == 1)
    y = rng.poisson(np.exp(eta))
    y[rng.uniform(size=y.size) < zi] = 0
    return pd.DataFrame(dict(y=y, x=x, g=[f"g{i}" for i in g], f=f.astype(str),
                             obs=[f"o{i}" for i in range(g.size)]))


def _fit(formula, data, family="poisson"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.glmer(formula, data, family=family)


def _p(chk, prefix):
    t = chk.tests
    return float(t.loc[t["test"].str.startswith(prefix), "p.value"].iloc[0])


def _stat(chk, prefix):
    t = chk.tests
    return float(t.loc[t["test"].str.startswith(prefix), "statistic"].iloc[0])


def test_correct_model_passes_every_check():
    d = _pois(11)
    m = _fit("y ~ x + (1 | g)", d)
    chk = m.check(nsim=200, by={"f": d["f"]})
    assert set(chk.tests["test"]) >= {"uniformity (KS)", "dispersion (Pearson, simulated)",
                                      "outliers (binomial)", "zero-inflation (simulated)"}
    assert (chk.tests["p.value"] > 0.05).all(), chk.tests
    assert chk.convergence["ok"] and not chk.singularity["singular"].any()
    assert chk.advice == []
    # the residuals are probabilities, indexed like the data
    r = chk.residuals.residuals
    assert r.index.equals(d.index) and r.between(0, 1).all()
    # check_model dispatches to the GLMM checks
    chk2 = sm.check_model(m, nsim=200, by={"f": d["f"]})
    np.testing.assert_array_equal(chk2.residuals.residuals, r)
    import matplotlib
    matplotlib.use("Agg")
    fig = chk.plot()
    assert len(fig.axes) == 6


def test_overdispersion_detected_and_cured_by_olre():
    d = _pois(2, olre=0.6)
    chk = _fit("y ~ x + (1 | g)", d).check(nsim=200)
    assert _stat(chk, "dispersion") > 1.3 and _p(chk, "dispersion") < 0.01
    assert any("overdispersion" in a for a in chk.advice)
    chk2 = _fit("y ~ x + (1 | g) + (1 | obs)", d).check(nsim=200)
    assert _p(chk2, "dispersion") > 0.05 and _p(chk2, "uniformity") > 0.05


def test_zero_inflation_detected():
    chk = _fit("y ~ x + (1 | g)", _pois(3, zi=0.2)).check(nsim=200)
    assert _stat(chk, "zero-inflation") > 1.2 and _p(chk, "zero-inflation") < 0.01
    assert any("zeros" in a for a in chk.advice)


def test_missing_term_detected():
    d = _pois(4, beff=0.8)
    chk = _fit("y ~ x + (1 | g)", d).check(nsim=200, by={"f": d["f"]})
    assert _p(chk, "location by f") < 1e-6
    assert any("residuals shift with f" in a for a in chk.advice)
    chk2 = _fit("y ~ x + f + (1 | g)", d).check(nsim=200, by=["f"])
    assert _p(chk2, "location by f") > 0.01


def test_convergence_scaled_gradient_is_the_newton_step():
    """At β̂ + δ e_x the scaled gradient max|H⁻¹g| is the Newton step back, ≈ |δ|."""
    m = _fit("y ~ x + (1 | g)", _pois(5))
    c0 = m.check(nsim=50).convergence
    assert c0["ok"] and c0["scaled_grad"] < 1e-4 and c0["min_hess_eigen"] > 0
    m2 = copy.copy(m)
    m2.fixef = m.fixef.copy()
    m2.fixef["x"] += 0.01
    from scoremix.glmm.check import glmer_convergence
    c1 = glmer_convergence(m2)
    assert c1["scaled_grad"] == pytest.approx(0.01, rel=0.05)
    assert not c1["ok"] and any("scaled gradient" in s for s in c1["messages"])


def test_singularity_per_term():
    d = _pois(6, sd_g=0.0, n_g=15)
    m = _fit("y ~ x + (1 | g)", d)
    sp = m.check(nsim=50).singularity
    # a scalar term: the singular value of T is |θ|
    assert sp["sdev"].iloc[0] == pytest.approx(abs(m.theta.iloc[0]), abs=1e-12)
    assert bool(sp["singular"].iloc[0]) == (abs(m.theta.iloc[0]) < 1e-4)


def test_binomial_cbind_and_no_influence():
    rng = np.random.default_rng(7)
    g = np.repeat(np.arange(30), 6)
    x = rng.normal(size=g.size)
    n = rng.integers(5, 15, g.size)
    k = rng.binomial(n, 1 / (1 + np.exp(-(-0.5 + 0.8 * x + rng.normal(0, 0.6, 30)[g]))))
    d = pd.DataFrame(dict(k=k, nk=n - k, x=x, g=g.astype(str)))
    m = _fit("cbind(k, nk) ~ x + (1 | g)", d, family="binomial")
    chk = m.check(nsim=200)
    assert "zero-inflation (simulated)" not in set(chk.tests["test"])
    assert (chk.tests["p.value"] > 0.01).all(), chk.tests
    m_r = copy.copy(m)
    m_r.glmm_data, m_r.backend = None, "lme4"       # what an R-backend fit holds
    from scoremix.glmm.errors import GlmmUnsupportedError
    with pytest.raises(GlmmUnsupportedError, match="backend='native'"):
        sm.check_model(m_r)
    c2 = m.check(nsim=50, influence=True)
    assert len(c2.influence) == 0 and any("influential" in n for n in c2.residuals.notes)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["poisson", "binomial"])
def test_scaled_residuals_uniform_on_data_simulated_from_the_fit(family):
    """50 data sets simulated from a fitted GLMM, each refitted and checked: the KS
    p-values of the scaled residuals and the dispersion p-values are uniform."""
    rng = np.random.default_rng(0)
    g = np.repeat(np.arange(25), 8)
    x = rng.normal(size=g.size)
    eta = -0.3 + 0.5 * x + rng.normal(0, 0.7, 25)[g]
    y = rng.poisson(np.exp(eta)) if family == "poisson" else rng.binomial(1, 1 / (1 + np.exp(-eta)))
    base = pd.DataFrame(dict(x=x, g=g.astype(str)))
    m0 = _fit("y ~ x + (1 | g)", base.assign(y=y), family)
    pu, pd_ = [], []
    for s in range(50):
        ys = m0.simulate(1, seed=100 + s).iloc[:, 0].to_numpy()
        chk = _fit("y ~ x + (1 | g)", base.assign(y=ys), family).check(nsim=100, seed=s)
        pu.append(_p(chk, "uniformity"))
        pd_.append(_p(chk, "dispersion"))
    for p in (np.array(pu), np.array(pd_)):
        assert stats.kstest(p, "uniform").pvalue > 0.01
        assert abs(p.mean() - 0.5) < 4 * np.sqrt(1 / 12 / p.size)
