"""Tests of scoremix.nuisance: GMM nuisance LLRs and the two-Gaussian nuisance model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import multivariate_normal, norm

from scoremix.nuisance import (
    ConstantFeatureError,
    NonFiniteFeatureError,
    NuisanceInputError,
    NuisanceLLR,
    SingleClassError,
    TooFewTrialsError,
    nuisance_model,
)


def _two_gaussians(n: int = 4000, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = np.r_[np.zeros(n, dtype=int), np.ones(n, dtype=int)]
    w = np.r_[rng.normal(-1.0, 2.0, n), rng.normal(1.5, 0.7, n)]
    return w, y


def test_llr_single_gaussian_equals_closed_form():
    w, y = _two_gaussians()
    model = NuisanceLLR(n_components=1, random_state=0).fit(w, y)
    grid = np.linspace(-6, 6, 41)
    # closed form with the maximum-likelihood (ddof=0) class mean and SD
    m0, s0 = w[y == 0].mean(), w[y == 0].std()
    m1, s1 = w[y == 1].mean(), w[y == 1].std()
    expected = norm.logpdf(grid, m1, s1) - norm.logpdf(grid, m0, s0)
    np.testing.assert_allclose(model.llr(grid), expected, rtol=1e-4, atol=1e-4)
    # and close to the LLR of the true generating Gaussians
    truth = norm.logpdf(grid, 1.5, 0.7) - norm.logpdf(grid, -1.0, 2.0)
    inner = np.abs(grid) < 3
    np.testing.assert_allclose(model.llr(grid)[inner], truth[inner], atol=0.25)
    assert model.n_components_ == {0: 1, 1: 1}


def test_llr_multidimensional_full_covariance():
    rng = np.random.default_rng(1)
    c0 = np.array([[1.0, 0.6], [0.6, 2.0]])
    c1 = np.array([[0.5, -0.2], [-0.2, 0.8]])
    w0 = rng.multivariate_normal([0, 0], c0, 3000)
    w1 = rng.multivariate_normal([1, -1], c1, 3000)
    w = pd.DataFrame(np.r_[w0, w1], columns=["snr", "nonspeech"])
    y = np.r_[np.zeros(3000), np.ones(3000)].astype(int)
    model = NuisanceLLR(n_components=1, random_state=0).fit(w, y)
    pts = rng.normal(size=(25, 2))
    expected = (multivariate_normal(w1.mean(0), np.cov(w1.T, ddof=0)).logpdf(pts)
                - multivariate_normal(w0.mean(0), np.cov(w0.T, ddof=0)).logpdf(pts))
    np.testing.assert_allclose(model.llr(pts), expected, rtol=1e-4, atol=1e-4)
    with pytest.raises(NuisanceInputError, match="2"):
        model.llr(np.zeros(5))


def test_bic_picks_true_component_counts():
    rng = np.random.default_rng(2)
    neg = np.concatenate([rng.normal(m, 1.0, 400) for m in (-12, 0, 12)])
    pos = np.concatenate([rng.normal(m, 1.0, 500) for m in (-6, 6)])
    w = np.r_[neg, pos]
    y = np.r_[np.zeros(neg.size), np.ones(pos.size)].astype(int)
    model = NuisanceLLR(n_components="bic", max_components=6, random_state=0).fit(w, y)
    assert model.n_components_ == {0: 3, 1: 2}
    assert model.bic_.loc[3, "neg"] == model.bic_["neg"].min()
    assert model.bic_.loc[2, "pos"] == model.bic_["pos"].min()


def test_bic_is_reproducible_with_seed():
    w, y = _two_gaussians(500, seed=3)
    a = NuisanceLLR(random_state=7).fit(w, y).llr(w[:10])
    b = NuisanceLLR(random_state=7).fit(w, y).llr(w[:10])
    np.testing.assert_array_equal(a, b)


def test_string_labels_are_accepted():
    w, y = _two_gaussians(300, seed=4)
    lab = np.where(y == 1, "bonafide", "spoof")
    m1 = NuisanceLLR(n_components=1).fit(w, y).llr(w[:5])
    m2 = NuisanceLLR(n_components=1).fit(w, lab).llr(w[:5])
    np.testing.assert_allclose(m1, m2)


def test_constant_feature_is_named():
    rng = np.random.default_rng(5)
    w = pd.DataFrame({"snr": rng.normal(size=100), "nonspeech": np.r_[np.full(50, 0.3), rng.random(50)]})
    y = np.r_[np.zeros(50), np.ones(50)].astype(int)
    with pytest.raises(ConstantFeatureError, match="nonspeech.*negative"):
        NuisanceLLR(n_components=1).fit(w, y)


def test_too_few_trials_for_components():
    rng = np.random.default_rng(6)
    w = rng.normal(size=23)
    y = np.r_[np.zeros(20), np.ones(3)].astype(int)
    with pytest.raises(TooFewTrialsError, match="positive class has 3"):
        NuisanceLLR(n_components=4).fit(w, y)
    with pytest.raises(TooFewTrialsError, match="positive class has 1"):
        NuisanceLLR().fit(w[:21], y[:21])


def test_non_finite_rows_are_counted():
    w = np.arange(10, dtype=float)
    w[[2, 7]] = [np.nan, np.inf]
    y = np.r_[np.zeros(5), np.ones(5)].astype(int)
    with pytest.raises(NonFiniteFeatureError, match=r"2 row\(s\).*\[2, 7\]"):
        NuisanceLLR(n_components=1).fit(w, y)


def test_single_class_is_rejected():
    with pytest.raises(SingleClassError, match="negative"):
        NuisanceLLR(n_components=1).fit(np.arange(10.0), np.zeros(10, dtype=int))
    with pytest.raises(SingleClassError):
        nuisance_model(np.arange(10.0), np.ones(10, dtype=int))


def test_errors_are_value_errors():
    for cls in (ConstantFeatureError, TooFewTrialsError, NonFiniteFeatureError, SingleClassError):
        assert issubclass(cls, ValueError)


def test_nuisance_model_matches_hand_computation():
    rng = np.random.default_rng(8)
    n0, n1 = 3000, 2000
    y = np.r_[np.zeros(n0), np.ones(n1)].astype(int)
    ell = np.r_[rng.normal(-1.0, 1.2, n0), rng.normal(0.5, 0.8, n1)]
    nm = nuisance_model(ell, y)
    a, b = ell[y == 0], ell[y == 1]
    pooled = np.sqrt((((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()) / (n0 + n1 - 2))
    assert nm.mu == pytest.approx(a.mean(), abs=1e-10)
    assert nm.d == pytest.approx(b.mean() - a.mean(), abs=1e-10)
    assert nm.sigma == pytest.approx(pooled, rel=1e-10)
    assert nm.sigma_neg == pytest.approx(a.std(ddof=1))
    assert nm.sigma_pos == pytest.approx(b.std(ddof=1))
    assert nm.eer_model == pytest.approx(norm.cdf(-nm.d / (2 * pooled)))
    assert nm.eer_model_unequal == pytest.approx(norm.cdf(-nm.d / (a.std(ddof=1) + b.std(ddof=1))))
    # empirical EER of the LLRs close to the unequal-variance truth Φ(-1.5/2.0)
    assert nm.eer_empirical == pytest.approx(norm.cdf(-1.5 / 2.0), abs=0.02)
    frame = nm.to_frame("snr")
    assert list(frame.columns[:5]) == ["mu_l", "d_l", "sigma2_l", "eer_model", "eer_empirical"]
    assert frame.loc["snr", "sigma2_l"] == pytest.approx(pooled**2)


def test_nuisance_model_no_class_information_gives_half():
    rng = np.random.default_rng(9)
    ell = rng.normal(0.2, 1.0, 20000)
    y = rng.integers(0, 2, 20000)
    nm = nuisance_model(ell, y)
    assert nm.eer_model == pytest.approx(0.5, abs=0.01)
    assert nm.eer_empirical == pytest.approx(0.5, abs=0.02)


def test_end_to_end_uninformative_feature():
    """A feature with the same distribution in both classes yields EER near 50 %."""
    rng = np.random.default_rng(10)
    w = rng.gamma(2.0, 3.0, 6000)
    y = rng.integers(0, 2, 6000)
    llr = NuisanceLLR(n_components=1, random_state=0).fit(w[:3000], y[:3000]).llr(w[3000:])
    nm = nuisance_model(llr, y[3000:])
    assert abs(nm.d) < 0.1
    assert nm.eer_empirical > 0.44
