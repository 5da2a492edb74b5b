"""Transform uncertainty of Bayesian location-scale transformation fits
(scoremix.bayes.locscale_pool, ``posterior_eer(transform_uncertainty="bootstrap")``).

* a pool of one transform (the ML one) reproduces the fixed-transform table exactly;
* a bootstrap replicate's scores are the ML fit's latent draws mapped back by ĥ_s⁻¹
  (ĥ_s of the replicate's score = the drawn latent value, closed form);
* the pooled draws are the concatenation of every replicate fit's draws, and seeded pools
  are reproducible;
* slow: on data simulated from a known model and transform, the pooled 95 % intervals cover
  the true EER at least as often as the fixed-transform ones over seeded replicates;
* errors are named.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pymc")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scoremix.bayes.locscale import BayesLocScaleError, bayes_locscale
from scoremix.bayes.locscale_pool import bootstrap_scores, transform_pool


def _data(seed: int, n_speakers: int = 6, n_per_cell: int = 10):
    from locscale_helpers import simulate_ls

    df = simulate_ls(n_speakers=n_speakers, n_per_cell=n_per_cell, strata_neg=2, seed=seed)
    df["score"] = 1.0 / (1.0 + np.exp(-df["score"] / 2.0))  # known monotone transform, h = 2 logit
    return df


@pytest.fixture(scope="module")
def fitted():
    from scoremix.locscale import LocScaleSpec, fit_locscale

    fit = fit_locscale(_data(2), LocScaleSpec(strata=("attack",), positive="bonafide"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = bayes_locscale(fit, draws=100, tune=100, chains=1, cores=1, seed=3)
    return fit, res


@pytest.fixture(scope="module")
def pool2(fitted):
    """A pool of two transforms, built through ``posterior_eer`` (and cached on the result)."""
    _, res = fitted
    res.posterior_eer(max_draws=40, transform_uncertainty="bootstrap", n_transform=2, seed=5)
    return res.settings["_pools"][(2, 5)]


def test_pool_of_the_ml_transform_is_the_fixed_fit_exactly(fitted):
    _, res = fitted
    fixed = res.posterior_eer(max_draws=50)
    pooled = res.posterior_eer(max_draws=50, transform_uncertainty="bootstrap", n_transform=1, seed=1)
    for col in ("n", "empirical", "mean", "median", "lo", "hi", "covers"):
        assert (pooled[col] == fixed[col]).all(), col
    assert (pooled["lo_fixed"] == fixed["lo"]).all() and (pooled["hi_fixed"] == fixed["hi"]).all()
    assert (pooled["n_transform"] == 1).all()
    fixed = res.posterior_dcf(max_draws=50)
    pooled = res.posterior_dcf(max_draws=50, transform_uncertainty="bootstrap", n_transform=1, seed=1)
    for col in ("n", "empirical", "mean", "median", "lo", "hi", "covers"):
        assert (pooled[col] == fixed[col]).all(), col


def test_bootstrap_scores_are_latent_draws_mapped_back(fitted):
    fit, _ = fitted
    rep = bootstrap_scores(fit, np.random.default_rng(11))
    z = fit.trial_mean + fit.trial_sd * np.random.default_rng(11).standard_normal(len(rep))
    strata = fit.strata.to_numpy(dtype=object)
    back = np.asarray(fit.transform(rep["score"].to_numpy(), strata), float)
    np.testing.assert_allclose(back, z, rtol=0, atol=1e-9)
    cols = [c for c in rep.columns if c != "score"]
    assert rep[cols].equals(fit._data.frame[cols])


def test_pooled_draws_concatenate_the_replicates_and_are_seeded(fitted, pool2):
    _, res = fitted
    pool = pool2
    assert pool.n_transform == 2 and pool.results[0] is res
    _, E, _ = pool.eer_draws(max_draws=40)
    parts = [r.eer_draws(max_draws=40)[1] for r in pool.results]
    np.testing.assert_array_equal(E, np.concatenate(parts, axis=1))
    # every replicate re-estimates its transforms on its own scores
    s0 = res.fit._data.score
    assert all(not np.array_equal(r.fit._data.score, s0) for r in pool.results[1:])
    again = transform_pool(res, 2, seed=5)
    np.testing.assert_array_equal(E, again.eer_draws(max_draws=40)[1])
    tab = pool.posterior_eer(max_draws=40)
    a = np.quantile(E[0], [0.025, 0.975])
    assert tab.loc["all", "lo"] == pytest.approx(a[0], rel=1e-12)
    assert tab.loc["all", "hi"] == pytest.approx(a[1], rel=1e-12)


def test_subgroup_eer_and_dcf_tables_pool_the_replicates(fitted, pool2):
    """``by=`` levels (attacks, each against all bona fide trials) through ``posterior_eer`` and
    ``posterior_dcf``: pooled intervals = quantiles of the concatenated replicate draws, the
    fixed-transform columns = the fixed-transform table, ``dcf_at_overall`` pooled too."""
    _, res = fitted
    kw = dict(max_draws=40, transform_uncertainty="bootstrap", n_transform=2, seed=5)
    tab = res.posterior_eer(by="attack", level=0.9, **kw)
    fixed = res.posterior_eer(by="attack", level=0.9, max_draws=40)
    E = np.concatenate([r.eer_draws("attack", max_draws=40)[1] for r in pool2.results], axis=1)
    assert list(tab.index) == ["all", "A0", "A1", "bonafide"] == list(fixed.index)
    for k, lab in enumerate(tab.index):
        lo, hi = np.nanquantile(E[k], [0.05, 0.95])
        assert tab.loc[lab, "lo"] == pytest.approx(lo, rel=1e-12) and tab.loc[lab, "hi"] == pytest.approx(hi, rel=1e-12)
        assert tab.loc[lab, "mean"] == pytest.approx(np.nanmean(E[k]), rel=1e-12)
        for col in ("n", "empirical"):
            assert tab.loc[lab, col] == fixed.loc[lab, col]
        assert tab.loc[lab, "lo_fixed"] == fixed.loc[lab, "lo"] and tab.loc[lab, "hi_fixed"] == fixed.loc[lab, "hi"]
    assert (tab["n_transform"] == 2).all()
    dk = dict(p_target=0.2, max_draws=40)
    dt = res.posterior_dcf(by="attack", **{**kw, **dk})
    dfix = res.posterior_dcf(by="attack", **dk)
    parts = [r.dcf_draws("attack", **dk) for r in pool2.results]
    M = np.concatenate([p[1] for p in parts], axis=1)
    at = np.concatenate([p[3] for p in parts], axis=1)
    for k, lab in enumerate(dt.index):
        lo, hi = np.nanquantile(M[k], [0.025, 0.975])
        assert dt.loc[lab, "lo"] == pytest.approx(lo, rel=1e-12) and dt.loc[lab, "hi"] == pytest.approx(hi, rel=1e-12)
        assert dt.loc[lab, "empirical"] == dfix.loc[lab, "empirical"]
        assert dt.loc[lab, "lo_fixed"] == dfix.loc[lab, "lo"] and dt.loc[lab, "hi_fixed"] == dfix.loc[lab, "hi"]
        if k:
            assert dt.loc[lab, "dcf_at_overall"] == pytest.approx(np.nanmean(at[k - 1]), rel=1e-12)


def test_named_errors(fitted):
    from scoremix.locscale import LocScaleSpec, fit_locscale

    _, res = fitted
    with pytest.raises(BayesLocScaleError, match="n_transform"):
        transform_pool(res, 0)
    with pytest.raises(BayesLocScaleError, match="transform_uncertainty"):
        res.posterior_eer(transform_uncertainty="sampled")
    with pytest.raises(BayesLocScaleError, match="BayesLocScaleResult"):
        transform_pool(object(), 2)
    gfit = fit_locscale(_data(2), LocScaleSpec(strata=("attack",), positive="bonafide", transform=False))
    with pytest.raises(BayesLocScaleError, match="transform=False"):
        bootstrap_scores(gfit, np.random.default_rng(0))


def _simulate_known(seed: int, n_speakers: int = 6, n_per_cell: int = 12, *, latent: bool = False):
    """Location-scale data with realised speaker effects, observed through
    ``score = expit(z / 2)``; returns the table and the true EER (percent) of the class
    mixtures given the realised effects (every trial's N(μ_s + b, (σ_s e^g)²), latent crossing)."""
    import pandas as pd
    from scipy.optimize import brentq
    from scipy.stats import norm

    rng = np.random.default_rng(seed)
    mu = {"bonafide": 2.5, "A0": -1.0, "A1": -1.5}
    sd = {"bonafide": 1.0, "A0": 0.8, "A1": 1.1}
    rows, m, s, pos = [], [], [], []
    for i in range(n_speakers):
        for c, lab, strata in ((1, "bonafide", ["bonafide"]), (0, "spoof", ["A0", "A1"])):
            b, g = rng.normal(0, 0.5), rng.normal(0, 0.3)
            for st in strata:
                z = mu[st] + b + sd[st] * np.exp(g) * rng.standard_normal(n_per_cell)
                rows.append(pd.DataFrame({"speaker": f"s{i}", "label": lab, "attack": st,
                                          "score": 1 / (1 + np.exp(-z / 2))}))
                m += [mu[st] + b] * n_per_cell
                s += [sd[st] * np.exp(g)] * n_per_cell
                pos += [c == 1] * n_per_cell
    m, s, pos = np.array(m), np.array(s), np.array(pos)

    def gap(t):
        return norm.cdf((t - m[pos]) / s[pos]).mean() - norm.sf((t - m[~pos]) / s[~pos]).mean()

    t = brentq(gap, -20, 20, xtol=1e-12)
    if latent:
        return m, s, pos, 100 * float(norm.cdf((t - m[pos]) / s[pos]).mean())
    return pd.concat(rows, ignore_index=True), 100 * float(norm.cdf((t - m[pos]) / s[pos]).mean())


def test_true_eer_of_the_simulator_is_the_eer_of_its_generating_model():
    """The coverage check's truth: the EER of a large sample drawn from the same realised
    speaker effects (every trial's N(m, s²), scores through expit(z/2)) is the computed
    crossing within 4 binomial standard errors."""
    from scoremix.metrics import eer

    m, s, pos, truth = _simulate_known(101, latent=True)
    rng = np.random.default_rng(0)
    R = 1000
    z = m[:, None] + s[:, None] * rng.standard_normal((m.size, R))
    score = (1 / (1 + np.exp(-z / 2))).ravel()
    y = np.repeat(pos, R).astype(int)
    emp = 100 * float(eer(score, y))
    se = 100 * np.sqrt(truth / 100 * (1 - truth / 100) / min(y.sum(), y.size - y.sum()))
    assert abs(emp - truth) < 4 * se, (emp, truth, se)
    assert 1.0 < truth < 20.0  # a non-trivial EER (the check is informative)


@pytest.mark.slow
def test_pooled_intervals_cover_the_true_eer_at_least_as_often():
    """Known model and transform, 4 seeded data sets: the pooled (K = 4) 95 % intervals of the
    latent-crossing EER cover the true EER in at least as many data sets as the fixed-transform
    intervals and in at least 3 of 4, and are wider on average."""
    from scoremix.locscale import LocScaleSpec, fit_locscale

    spec = LocScaleSpec(strata=("attack",), positive="bonafide")
    cover_fixed = cover_pooled = 0
    widths = []
    for r in range(4):
        df, truth = _simulate_known(100 + r)
        fit = fit_locscale(df, spec)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = bayes_locscale(fit, draws=100, tune=100, chains=1, cores=1, seed=r)
        tab = res.posterior_eer(thresholds="latent", max_draws=100, transform_uncertainty="bootstrap",
                                n_transform=4, seed=r).loc["all"]
        cover_fixed += tab["lo_fixed"] <= truth <= tab["hi_fixed"]
        cover_pooled += tab["lo"] <= truth <= tab["hi"]
        widths.append((tab["hi"] - tab["lo"], tab["hi_fixed"] - tab["lo_fixed"]))
    w = np.array(widths)
    assert cover_pooled >= cover_fixed and cover_pooled >= 3, (cover_pooled, cover_fixed, w)
    assert w[:, 0].mean() > w[:, 1].mean(), w
