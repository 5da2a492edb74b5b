"""Every random-effect structure ``lmer`` accepts is fitted by ``bayes_lmer`` (issue 25):
correlated 3×3 slopes, uncorrelated ``||`` slopes, nested ``a/b`` factors; the API
convention (``seed=``, ``level=``, ``progress=``, old names with ``FutureWarning``) and
Ctrl-C (a truncated posterior is never a normal result).

Reference: the REML fit of the same formula (``sm.lmer``, itself checked against lme4):
the posterior parameter names must be exactly lmer's ``VarCorr`` rows, fixed effects within
3 posterior SDs of the REML estimates, and every REML SD inside the 99 % HDI.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import scoremix as sm

FIT = dict(chains=2, cores=1, progress=False)


def _fit(formula, df, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.bayes_lmer(formula, df, **{**FIT, **kw})


def _check_against_reml(b, df):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = sm.lmer(b.spec.formula, df)
    cmp = b.compare(f, level=0.99)
    vc = pd.DataFrame(f.varcorr)
    n_rows = len(vc)  # sd rows + cor rows + residual
    assert len(b.sd_names) + len(b.cor_names) + 1 == n_rows
    fe = cmp.loc[b.fixef_names]
    assert (fe["z"].abs() < 3).all(), fe
    sds = cmp.loc[b.sd_names + ["sigma"]]
    assert ((sds["estimate"] >= sds.iloc[:, 4] - 1e-9) & (sds["estimate"] <= sds.iloc[:, 5] + 1e-9)).all(), sds
    return cmp


@pytest.mark.slow
def test_correlated_3x3_slopes():
    rng = np.random.default_rng(11)
    n, S = 600, 25
    spk = rng.integers(0, S, n)
    x, z = rng.normal(size=n), rng.normal(size=n)
    L = np.linalg.cholesky(np.array([[1.0, 0.3, 0.0], [0.3, 0.5, 0.1], [0.0, 0.1, 0.4]]))
    u = rng.normal(size=(S, 3)) @ L.T
    y = 1 + 0.5 * x - 0.3 * z + u[spk, 0] + u[spk, 1] * x + u[spk, 2] * z + rng.normal(0, 0.7, n)
    df = pd.DataFrame({"y": y, "x": x, "z": z, "spk": np.char.add("s", spk.astype(str))})
    b = _fit("y ~ x + z + (x + z | spk)", df, draws=150, tune=200, seed=1)
    assert len(b.cor_names) == 3 and b.draws("b_spk").shape[2:] == (S, 3)
    _check_against_reml(b, df)


@pytest.mark.slow
def test_uncorrelated_slopes_and_nested_factors():
    rng = np.random.default_rng(12)
    n = 900
    site = rng.integers(0, 6, n)
    spk = rng.integers(0, 5, n)  # speaker labels reused across sites: site/spk is the nesting
    att = rng.integers(0, 8, n)
    x = rng.normal(size=n)
    a0, a1 = rng.normal(0, 0.8, 8), rng.normal(0, 0.5, 8)
    y = (0.5 * x + a0[att] + a1[att] * x + rng.normal(0, 0.7, 6)[site] + rng.normal(0, 0.6, (6, 5))[site, spk]
         + rng.normal(0, 0.6, n))
    df = pd.DataFrame({"y": y, "x": x, "att": np.char.add("a", att.astype(str)),
                       "site": np.char.add("k", site.astype(str)), "spk": np.char.add("s", spk.astype(str))})
    b = _fit("y ~ x + (x || att) + (1 | site/spk)", df, draws=300, tune=300, seed=2)
    groups = sorted(t.group for t in b.spec.terms)
    assert groups == sorted(["att", "att.1", "spk:site", "site"])
    assert b.cor_names == []  # '||' has no correlation parameters
    assert b.draws("b_spk:site").shape[2] == 30
    _check_against_reml(b, df)


# ---------------------------------------------------------------------------- API convention, Ctrl-C
@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(5)
    spk = rng.integers(0, 10, 120)
    y = rng.normal(0, 1, 10)[spk] + rng.normal(size=120)
    return pd.DataFrame({"y": y, "spk": np.char.add("s", spk.astype(str))})


def test_seed_level_progress_convention_and_deprecated_names(small):
    kw = dict(draws=40, tune=40, chains=1, cores=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = sm.bayes_lmer("y ~ 1 + (1|spk)", small, seed=3, progress=False, **kw)
    with pytest.warns(FutureWarning, match="random_seed= is renamed seed="):
        b = sm.bayes_lmer("y ~ 1 + (1|spk)", small, random_seed=3, progress=False, **kw)
    np.testing.assert_array_equal(a.draws("sigma"), b.draws("sigma"))
    with pytest.warns(FutureWarning, match="progressbar= is renamed progress="):
        sm.bayes_lmer("y ~ 1 + (1|spk)", small, seed=3, progressbar=False, **kw)
    with pytest.raises(TypeError, match="seed= only"):
        sm.bayes_lmer("y ~ 1 + (1|spk)", small, seed=3, random_seed=3, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = sm.bayes_lmer("y ~ 1 + (1|spk)", small, seed=np.random.default_rng(9), progress=False, **kw)
        g2 = sm.bayes_lmer("y ~ 1 + (1|spk)", small, seed=np.random.default_rng(9), progress=False, **kw)
    np.testing.assert_array_equal(g.draws("sigma"), g2.draws("sigma"))
    s1 = a.summary(level=0.9)
    with pytest.warns(FutureWarning, match="hdi_prob= is renamed level="):
        s2 = a.summary(hdi_prob=0.9)
    pd.testing.assert_frame_equal(s1, s2)
    assert "hdi_5%" in s1.columns
    with pytest.raises(ValueError, match="level must lie in"):
        a.summary(level=1.5)


def test_ctrl_c_never_returns_a_truncated_posterior(small, monkeypatch):
    """A KeyboardInterrupt raised during sampling (PyMC's documented way: from the draw
    callback) makes PyMC return the draws so far; bayes_lmer must raise instead."""
    import pymc as pm

    real = pm.sample

    def interrupted(*args, **kwargs):
        def cb(trace, draw):
            if draw.draw_idx >= 35:  # 20 tuning + 15 kept draws
                raise KeyboardInterrupt

        return real(*args, callback=cb, **kwargs)

    monkeypatch.setattr(pm, "sample", interrupted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(sm.SamplingInterrupted, match="interrupted after .* of 60 draws") as ei:
            sm.bayes_lmer("y ~ 1 + (1|spk)", small, draws=60, tune=20, chains=1, cores=1, seed=1, progress=False)
    assert isinstance(ei.value, KeyboardInterrupt)
    assert ei.value.draws_requested == 60 and ei.value.draws_done < 60


# ---------------------------------------------------------------------------- s6bayes-check: the rest of lmer's structures
@pytest.mark.slow
def test_diag_structure_and_interaction_grouping_are_fitted():
    """lme4 2.0's ``diag(1 + x | g)`` (independent variances, one term per column, as lmer
    splits it) and an interaction grouping ``(1 | a:b)``: lmer's VarCorr names, REML inside."""
    rng = np.random.default_rng(13)
    n = 800
    spk = rng.integers(0, 20, n)
    a, b = rng.integers(0, 4, n), rng.integers(0, 3, n)
    x = rng.normal(size=n)
    y = (0.4 * x + rng.normal(0, 0.8, 20)[spk] + rng.normal(0, 0.5, 20)[spk] * x
         + rng.normal(0, 0.6, (4, 3))[a, b] + rng.normal(0, 0.7, n))
    df = pd.DataFrame({"y": y, "x": x, "spk": np.char.add("s", spk.astype(str)),
                       "a": np.char.add("a", a.astype(str)), "b": np.char.add("b", b.astype(str))})
    fit = _fit("y ~ x + diag(1 + x | spk) + (1 | a:b)", df, draws=300, tune=300, seed=4)
    assert fit.cor_names == []  # diag(): no correlation parameters
    assert len(fit.sd_names) == 3
    _check_against_reml(fit, df)


@pytest.mark.parametrize("term", ["cs(1 + x | spk)", "ar1(0 + f | spk)"])
def test_structured_covariances_are_lmer_only_and_refused_by_bayes_lmer(small, term):
    """cs() / ar1() (lme4 2.0) are fitted by lmer (tests/test_lmer_structured.py checks them
    against glmmTMB); bayes_lmer has no prior for them and refuses them by name."""
    from scoremix.lme.errors import UnsupportedModelError

    df = small.assign(x=np.arange(len(small)) % 7 / 7.0, f=np.char.add("t", (np.arange(len(small)) % 3).astype(str)))
    with pytest.raises(UnsupportedModelError, match=r"cs\(\)/ar1\(\) random terms are fitted by lmer/glmer"):
        sm.bayes_lmer(f"y ~ 1 + {term}", df, draws=10, tune=10, chains=1, progress=False)


@pytest.mark.parametrize("term", ["cs(1 + x | spk)", "ar1(0 + f | spk)"])
def test_bayes_glmer_refuses_structured_covariances_by_name(small, term):
    """glmer fits cs()/ar1(); bayes_glmer has no such prior and must not fit them as unstructured."""
    from scoremix.lme.errors import UnsupportedModelError

    df = small.assign(x=np.arange(len(small)) % 7 / 7.0, f=np.char.add("t", (np.arange(len(small)) % 3).astype(str)),
                      e=(small["y"] > 0).astype(int))
    with pytest.raises(UnsupportedModelError, match=r"cs\(\)/ar1\(\) random terms are fitted by lmer/glmer"):
        sm.bayes_glmer(f"e ~ 1 + {term}", df, draws=10, tune=10, chains=1, progress=False)
