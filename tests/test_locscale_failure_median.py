"""Failure mixture, s8speaker: the speaker multiplier summarised by its posterior median
(``LocScaleSpec(failure_share="median")``, :func:`multiplier_quantile`).

Checked against: the posterior CDF computed by direct numerical integration of the
zero-inflated gamma–Poisson posterior density (quadrature, independent of the incomplete-gamma
closed form), the gamma quantile (scipy) where the posterior has no zero component, and a
simulation with known truth (the median minimises the expected absolute error)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import integrate, optimize, stats

from scoremix.locscale import LocScaleSpec, fit_locscale
from scoremix.locscale.failure import fit_shares, multiplier_posterior, multiplier_quantile, zinb_grid


def _post_cdf_numeric(x: float, K: int, E: float, w: float, M: float) -> float:
    """P(r <= x | K) with r ~ w δ0 + (1 − w) Gamma(M, M(1 − w)), K | r ~ Poisson(E r): the
    unnormalised posterior density Poisson(K; E r) Gamma(r; M, β) integrated by quadrature."""
    beta = M * (1 - w)
    f = lambda r: stats.poisson.pmf(K, E * r) * stats.gamma.pdf(r, M, scale=1 / beta)  # noqa: E731
    zero = w * (K == 0)
    total = zero + (1 - w) * integrate.quad(f, 0, np.inf, epsabs=1e-15, limit=200)[0]
    part = zero + (1 - w) * integrate.quad(f, 0, x, epsabs=1e-15, limit=200)[0]
    return part / total


def _quantile_numeric(q: float, K: int, E: float, hyper: list[tuple[float, float, float]]) -> float:
    """The smallest x with Σ p_θ P(r <= x | K, θ) >= q, by root finding on the numerical CDF."""
    cdf = lambda x: sum(p * _post_cdf_numeric(x, K, E, w, M) for w, M, p in hyper)  # noqa: E731
    if cdf(0.0) >= q:
        return 0.0
    return optimize.brentq(lambda x: cdf(x) - q, 1e-12, 100.0, xtol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("w,M", [(0.0, 0.7), (0.4, 2.5), (0.3, 40.0)])
def test_median_equals_numerical_posterior_median(w, M):
    K = np.array([0, 0, 1, 3, 7])
    E = np.array([0.2, 2.0, 0.2, 0.5, 3.0])
    got = multiplier_quantile(K, E, np.array([w]), np.array([M]), np.array([1.0]))
    want = [_quantile_numeric(0.5, int(k), float(e), [(w, M, 1.0)]) for k, e in zip(K, E)]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)


def test_quantiles_over_a_hyper_posterior_and_zero_mass():
    K = np.array([0, 0, 2]); E = np.array([0.3, 1.5, 0.3])
    hyper = [(0.0, 0.7, 0.3), (0.6, 3.0, 0.7)]
    w, M, p = (np.array(v) for v in zip(*hyper))
    for q in (0.25, 0.5, 0.9):
        got = multiplier_quantile(K, E, w, M, p, q)
        want = [_quantile_numeric(q, int(k), float(e), hyper) for k, e in zip(K, E)]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)
    # K = 0 with a dominant zero component: the median is exactly 0 (P(r = 0 | K) >= 1/2)
    assert multiplier_quantile(np.array([0.0]), np.array([1.0]), np.array([0.9]), np.array([5.0]),
                               np.array([1.0]))[0] == 0.0


def test_median_without_zero_inflation_is_the_gamma_median():
    K = np.array([0, 1, 4]); E = np.array([0.5, 0.5, 2.0]); M = 1.7
    got = multiplier_quantile(K, E, np.array([0.0]), np.array([M]), np.array([1.0]))
    want = stats.gamma.ppf(0.5, M + K, scale=1 / (M + E))
    np.testing.assert_allclose(got, want, rtol=1e-8)


def test_bad_quantile():
    with pytest.raises(ValueError, match="quantile q"):
        multiplier_quantile(np.array([0.0]), np.array([1.0]), np.array([0.0]), np.array([1.0]), np.array([1.0]), 1.0)
    with pytest.raises(ValueError, match="estimate must be one of"):
        fit_shares(np.array(["a"]), np.array(["+"]), np.array([1]), np.array([False]), estimate="mode")


def test_median_minimises_absolute_error_in_simulation():
    """300 speakers with a known zero-inflated gamma multiplier (w = 0.5, M = 2): under the
    estimated hyper-posterior the posterior median has a lower mean absolute error for the
    true multiplier than the posterior mean (and the mean a lower squared error)."""
    rng = np.random.default_rng(3)
    n = 300
    E = rng.uniform(0.5, 4.0, n)
    r = np.where(rng.random(n) < 0.5, 0.0, rng.gamma(2.0, 1 / (2.0 * 0.5), n))
    K = rng.poisson(E * r).astype(float)
    w, M, post = zinb_grid(K, E)
    mean = multiplier_posterior(K, E, w, M, post)
    med = multiplier_quantile(K, E, w, M, post)
    mae_mean, mae_med = np.abs(mean - r).mean(), np.abs(med - r).mean()
    mse_mean, mse_med = ((mean - r) ** 2).mean(), ((med - r) ** 2).mean()
    assert mae_med < 0.95 * mae_mean
    assert mse_mean < mse_med
    # speakers without failures: the median puts most of them at (or near) zero failure share
    assert np.median(med[K == 0]) < 0.25 * np.median(mean[K == 0])


def test_fit_locscale_uses_the_median_shares():
    rng = np.random.default_rng(5)
    rows = []
    for i in range(40):
        bad = i < 6
        for c, n in (("bonafide", 40), ("spoof", 120)):
            s = rng.normal(2.0 if c == "bonafide" else -2.0, 1.0, n)
            if bad and c == "bonafide":
                s[: rng.integers(2, 6)] = rng.normal(-3.0, 0.3, 1)
            rows.append(pd.DataFrame(dict(score=s, label=c, speaker=f"s{i:02d}")))
    t = pd.concat(rows, ignore_index=True)
    spec = LocScaleSpec(positive="bonafide", failure_quantile=0.99)
    fits = {v: fit_locscale(t, spec.with_(failure_share=v), n_pass=1) for v in ("mean", "median")}
    for v, fit in fits.items():
        sh = fit.failure["shares"]
        assert sh.info["estimate"] == v
        c = sh.cells[sh.cells["cls"] == 1]
        K, E = c["k"].to_numpy(float), (c["n"] * c["pooled"]).to_numpy(float)
        hyp = sh.info["hyper"][1]
        f = multiplier_posterior if v == "mean" else multiplier_quantile
        np.testing.assert_allclose(c["pi"].to_numpy(), np.minimum(c["pooled"].to_numpy() * f(K, E, *hyp), 1.0),
                                   rtol=1e-12)
    # the median never exceeds the mean for the speakers without failures here (right-skewed posteriors)
    m0 = fits["mean"].failure["shares"].cells
    m1 = fits["median"].failure["shares"].cells
    z = (m0["cls"] == 1) & (m0["k"] == 0)
    assert (m1.loc[z, "pi"] <= m0.loc[z, "pi"] + 1e-15).all()


def test_score_model_rejects_an_unknown_failure_share():
    from scoremix.locscale.fit import LocScaleError
    from scoremix.locscale.select import score_model

    t = pd.DataFrame(dict(score=[0.0, 1.0], label=["spoof", "bonafide"], speaker=["a", "a"]))
    with pytest.raises(LocScaleError, match="failure_share must be one of"):
        score_model(t, positive="bonafide", failure_share="mode")
