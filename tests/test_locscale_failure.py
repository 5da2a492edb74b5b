"""Per-speaker failure mixture of the location-scale score model (scoremix.locscale.failure):
beta-binomial likelihood and shares against scipy / brute force, the mixture's rates against
their closed form, recovery of a simulated failure share and its spread, per-speaker EER
against the true (simulated) one, and score_model's choice with and without failures."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import optimize, stats
from scipy.special import ndtr

import scoremix as sm
from scoremix.locscale import LocScaleSpec, fit_locscale
from scoremix.locscale.failure import (betabinom_loglik, failure_cuts, failure_cv, failure_flags, fit_shares)
from scoremix.locscale.select import score_model
from scoremix.predictive.layer import predictive
from scoremix.validation import model_group_measures

MU_B, MU_S, MU_F = 4.0, -4.0, -6.0        # bona fide core, spoof, bona fide failures (where spoofs live)
Q = 0.95                                  # failure quantile of the tests (at most 5 % of a class)


def simulate(n_spk: int = 40, n_b: int = 120, n_s: int = 150, mu_logit: float = -4.5, tau: float = 1.3,
             seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Bona fide score of speaker i: (1 − π_i) N(MU_B + b_i, 1) + π_i N(MU_F, 1), logit π_i ~ N(mu_logit, tau²);
    spoofs of two attacks N(MU_S + a + c_i, 1).  Returns the trials and the per-speaker truth."""
    rng = np.random.default_rng(seed)
    pi = 1 / (1 + np.exp(-rng.normal(mu_logit, tau, n_spk))) if tau > 0 else np.full(n_spk, 1 / (1 + np.exp(-mu_logit)))
    b = rng.normal(0, 0.5, n_spk)
    c = rng.normal(0, 0.5, n_spk)
    rows, truth = [], []
    for i in range(n_spk):
        f = rng.random(n_b) < pi[i]
        sb = np.where(f, rng.normal(MU_F, 1, n_b), rng.normal(MU_B + b[i], 1, n_b))
        rows += [(f"s{i:02d}", "bonafide", "-", v) for v in sb]
        for a, off in (("A1", 0.0), ("A2", 1.0)):
            rows += [(f"s{i:02d}", "spoof", a, v) for v in rng.normal(MU_S + off + c[i], 1, n_s)]

        def fnr(t: float) -> float:
            return (1 - pi[i]) * ndtr(t - MU_B - b[i]) + pi[i] * ndtr(t - MU_F)

        def fpr(t: float) -> float:
            return 0.5 * (ndtr(MU_S + c[i] - t) + ndtr(MU_S + 1 + c[i] - t))

        t_eer = optimize.brentq(lambda t: fnr(t) - fpr(t), -20, 20)
        truth.append((f"s{i:02d}", pi[i], float(fnr(t_eer))))
    return (pd.DataFrame(rows, columns=["speaker", "label", "attack", "score"]),
            pd.DataFrame(truth, columns=["speaker", "pi", "eer"]).set_index("speaker"))


def test_betabinom_loglik_matches_scipy():
    k = np.array([0, 3, 7, 12]); n = np.array([10, 10, 30, 12]); a = np.array([0.3, 2.0, 5.0, 0.7])
    b = np.array([4.0, 9.0, 1.5, 0.2])
    np.testing.assert_allclose(betabinom_loglik(k, n, a, b), stats.betabinom.logpmf(k, n, a, b), rtol=1e-12)


def test_shares_are_beta_binomial_posterior_means_at_the_ml_concentration():
    rng = np.random.default_rng(3)
    p = rng.beta(0.5, 20, 60)
    n = rng.integers(10, 40, 60)
    k = rng.binomial(n, p)
    spk = np.repeat([f"s{i}" for i in range(60)], n)
    fail = np.concatenate([np.arange(m) < kk for m, kk in zip(n, k)])
    sh = fit_shares(spk, np.full(spk.size, "+"), np.ones(spk.size, int), fail, pooling="cell")
    pbar = k.sum() / n.sum()
    assert sh.pooled["+"] == pytest.approx(pbar, rel=1e-12)
    # brute force: the ML concentration on a fine log grid (pooled mean fixed)
    grid = np.exp(np.linspace(np.log(0.05), np.log(1e4), 20001))
    ll = [stats.betabinom.logpmf(k, n, M * pbar, M * (1 - pbar)).sum() for M in grid]
    M = grid[int(np.argmax(ll))]
    assert sh.concentration[1] == pytest.approx(M, rel=2e-3)
    cells = sh.cells.loc[[f"s{i}" for i in range(60)]]
    np.testing.assert_allclose(cells["pi"].to_numpy(), (k + M * pbar) / (n + M), rtol=2e-3)


def test_zinb_loglik_closed_form():
    """Zero-inflated gamma–Poisson: against a numerical integral over the gamma multiplier."""
    from scipy import integrate
    from scoremix.locscale.failure import zinb_loglik
    w, M = 0.3, 1.7
    beta = M * (1 - w)
    for K, E in [(0, 0.4), (2, 0.4), (5, 2.5)]:
        f = integrate.quad(lambda r: stats.poisson.pmf(K, E * r) * stats.gamma.pdf(r, M, scale=1 / beta), 0, np.inf,
                           epsabs=1e-14)[0]
        p = w * (K == 0) + (1 - w) * f
        assert float(zinb_loglik(np.array([K]), np.array([E]), w, M)[0]) == pytest.approx(np.log(p), rel=1e-8)


def test_cuts_are_at_most_the_tail_share_of_each_class():
    rng = np.random.default_rng(1)
    s = np.r_[rng.normal(0, 1, 5000), rng.normal(0.5, 1, 5000)]   # a weak detector: heavy overlap
    y = np.r_[np.zeros(5000), np.ones(5000)]
    cuts = failure_cuts(s, y, 0.99)
    f = failure_flags(s, y, cuts)
    assert f[y == 1].mean() <= 0.0101 and f[y == 0].mean() <= 0.0101
    assert cuts.pos == pytest.approx(np.quantile(s[y == 1], 0.01))
    assert cuts.neg == pytest.approx(np.quantile(s[y == 0], 0.99))


@pytest.fixture(scope="module")
def failing():
    d, truth = simulate()
    spec = LocScaleSpec(score="score", label="label", speaker="speaker", positive="bonafide", strata=("attack",),
                        speaker_scale=(), failure_quantile=Q)
    return d, truth, fit_locscale(d, spec), fit_locscale(d, spec.with_(failure_quantile=None))


def test_mixture_rates_closed_form(failing):
    """Per speaker, model FNR(τ) = (1 − π̂) · core FNR(τ) + π̂ · (share of the pooled bona fide failures below τ)."""
    d, _, fit, _ = failing
    pred = predictive(fit, None, label="label", positive="bonafide")
    spk = pred.frame["speaker"].to_numpy()
    y = pred.y.astype(bool)
    s = d["score"].to_numpy()
    fail = failure_flags(s, y, fit.failure["cuts"])
    G = np.sort(s[y & fail])
    tau = np.quantile(s, np.linspace(0.01, 0.99, 41))
    sh = fit.failure["shares"].cells
    for name in ["s03", "s17", "s31"]:
        m = spk == name
        fnr, _ = pred.rates_at(tau, mask=m)
        pi = float(sh.loc[(name, "+:-"), "pi"])
        core = m & y & ~fail
        mean, sd = fit.trial_mean[core], fit.trial_sd[core]
        lat = np.asarray(fit.transform.transforms["+:-"].latent_threshold(tau), float)
        core_fnr = ndtr((lat[:, None] - mean[None]) / sd[None]).mean(axis=1)
        g = np.searchsorted(G, tau, side="left") / G.size
        np.testing.assert_allclose(fnr[0], (1 - pi) * core_fnr + pi * g, atol=1e-9)


def test_recovers_failure_share_and_spread(failing):
    d, truth, fit, _ = failing
    sh = fit.failure["shares"]
    # the failures (all below the cut here: failures sit where spoofs live) and their share
    emp = (d.label == "bonafide") & (d.score < fit.failure["cuts"].pos)
    assert sh.pooled["+:-"] == pytest.approx(emp[d.label == "bonafide"].mean(), rel=1e-12)
    assert sh.pooled["+:-"] == pytest.approx(truth["pi"].mean(), abs=0.01)
    # spread of π = p̄ r: SD of the zero-inflated gamma multiplier r (E r = 1,
    # Var r = (M + 1) / (M (1 − w)) − 1) against the SD of the simulated π_i (40 speakers: ±40 %)
    M, p, w = sh.concentration[1], sh.pooled["+:-"], sh.info["zero_share"][1]
    sd_model = p * np.sqrt((M + 1) / (M * (1 - w)) - 1)
    assert sd_model == pytest.approx(truth["pi"].std(), rel=0.4)
    # per-speaker π̂ closer to the truth than the raw per-speaker shares
    cells = sh.cells.xs("+:-", level="key")
    raw = cells["k"] / cells["n"]
    assert np.abs(cells["pi"] - truth["pi"]).mean() < np.abs(raw - truth["pi"]).mean()


def test_per_speaker_eer_closer_to_truth_with_the_mixture(failing):
    d, truth, fit, fit0 = failing
    m = model_group_measures(fit, ["speaker"], label="label", positive="bonafide")["eer"]
    m0 = model_group_measures(fit0, ["speaker"], label="label", positive="bonafide")["eer"]
    y = (d["label"] == "bonafide").to_numpy()
    emp = pd.Series({k: sm.eer(g["score"].to_numpy(), y[g.index]) for k, g in d.groupby("speaker")})
    err, err0 = np.abs(m - truth["eer"]).mean(), np.abs(m0 - truth["eer"]).mean()
    err_count = np.abs(emp - truth["eer"]).mean()
    print(err, err0, err_count)
    assert err < 0.7 * err0          # the location-scale model alone spreads the failures over every speaker
    assert err < err_count           # and the mixture beats the speaker's own counts


def test_score_model_picks_the_mixture_only_with_failures():
    one = [LocScaleSpec(score="score", label="label", speaker="speaker", positive="bonafide", strata=("attack",),
                        speaker_scale=(), name="location")]
    d1, _ = simulate(seed=5)
    d0, _ = simulate(tau=0.0, mu_logit=-30.0, seed=6)    # no failures at all
    d2, _ = simulate(tau=0.0, mu_logit=-4.5, seed=7)     # failures, one share for every speaker
    kw = dict(score="score", label="label", speaker="speaker", factors=["attack"], positive="bonafide",
              candidates=one)
    f1, f0, f2 = (score_model(d, failure_quantile=Q, **kw) for d in (d1, d0, d2))
    assert f1.failure is not None and f1.selection.chosen.failure_quantile == Q
    assert f0.failure is None and f2.failure is None
    assert "+failure-mixture" in f1.selection.table.index
