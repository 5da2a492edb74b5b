"""Failure mixture, s6failure: the speaker multiplier averaged over its hyper-parameter posterior
(shares follow the speaker's own count, with the shrinkage the data support) and per-stratum
failure distributions chosen by speaker-grouped CV.

Checked against: numerical integrals (posterior mean of the zero-inflated gamma multiplier),
the Bayes-optimal posterior mean under the true hyper-parameters (simulation), and simulated
attack-specific failures with known rates."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import integrate, stats
from scipy.special import ndtr

from scoremix.locscale import LocScaleSpec, fit_locscale
from scoremix.locscale.failure import (_fit_zinb, choose_failure_min_count, failure_flags, failure_shape_cv,
                                       fit_shares, multiplier_posterior, zinb_grid, zinb_loglik, zinb_predictive)
from scoremix.predictive.layer import predictive


def _post_mean_numeric(K: int, E: float, w: float, M: float) -> float:
    """E[r | K] under r ~ w δ0 + (1 − w) Gamma(M, M(1 − w)), K | r ~ Poisson(E r), by quadrature."""
    beta = M * (1 - w)
    f = lambda r, p: r ** p * stats.poisson.pmf(K, E * r) * stats.gamma.pdf(r, M, scale=1 / beta)  # noqa: E731
    num = (1 - w) * integrate.quad(f, 0, np.inf, args=(1,), epsabs=1e-15)[0]
    den = w * (K == 0) + (1 - w) * integrate.quad(f, 0, np.inf, args=(0,), epsabs=1e-15)[0]
    return num / den


def test_multiplier_posterior_mean_closed_form():
    K = np.array([0, 0, 1, 3, 7]); E = np.array([0.2, 2.0, 0.2, 0.5, 3.0])
    for w, M in [(0.0, 0.7), (0.4, 2.5), (0.85, 40.0)]:
        got = multiplier_posterior(K, E, np.array([w]), np.array([M]), np.array([1.0]))
        want = [_post_mean_numeric(int(k), float(e), w, M) for k, e in zip(K, E)]
        np.testing.assert_allclose(got, want, rtol=1e-7)
    # a mixture over two hyper-parameter points is the posterior-weighted average
    two = multiplier_posterior(K, E, np.array([0.0, 0.4]), np.array([0.7, 2.5]), np.array([0.25, 0.75]))
    a = multiplier_posterior(K, E, np.array([0.0]), np.array([0.7]), np.array([1.0]))
    b = multiplier_posterior(K, E, np.array([0.4]), np.array([2.5]), np.array([1.0]))
    np.testing.assert_allclose(two, 0.25 * a + 0.75 * b, rtol=1e-12)


def test_hyper_posterior_and_predictive():
    rng = np.random.default_rng(0)
    E = rng.uniform(0.1, 2, 50)
    K = rng.poisson(E * rng.gamma(1.5, 1 / 1.5, 50))
    w, M, post = zinb_grid(K, E)
    assert post.sum() == pytest.approx(1.0, abs=1e-12)
    ll = np.array([zinb_loglik(K, E, wi, Mi).sum() for wi, Mi in zip(w, M)])
    i, j = int(np.argmax(ll)), int(np.argmin(ll))
    assert np.log(post[i] / post[j]) == pytest.approx(ll[i] - ll[j], rel=1e-9)
    # a posterior with one point is that point's likelihood; a flat one the log-mean-exp
    one = np.zeros_like(post); one[i] = 1.0
    np.testing.assert_allclose(zinb_predictive(K, E, (w, M, one)), zinb_loglik(K, E, w[i], M[i]), rtol=1e-12)
    two = np.zeros_like(post); two[[i, j]] = 0.5
    want = np.logaddexp(zinb_loglik(K, E, w[i], M[i]), zinb_loglik(K, E, w[j], M[j])) + np.log(0.5)
    np.testing.assert_allclose(zinb_predictive(K, E, (w, M, two)), want, rtol=1e-12)


def _speaker_counts(n_spk: int, n: np.ndarray, pbar: float, w: float, M: float, seed: int):
    rng = np.random.default_rng(seed)
    r = np.where(rng.random(n_spk) < w, 0.0, rng.gamma(M, 1 / (M * (1 - w)), n_spk))
    pi = np.minimum(pbar * r, 1.0)
    k = rng.binomial(n, pi)
    spk = np.repeat([f"s{i:03d}" for i in range(n_spk)], n)
    fail = np.concatenate([np.arange(m) < kk for m, kk in zip(n, k)])
    return spk, fail, pi, k, r


def test_shares_recover_speaker_shares_with_bayes_shrinkage():
    """300 speakers, true multiplier from a zero-inflated gamma (w = 0.5, M = 2): the shares are
    near the Bayes posterior means under the TRUE hyper-parameters, closer to the true shares
    than the speakers' own counts and than the pooled share, and increase with the count."""
    n_spk = 300
    n = np.random.default_rng(9).choice([40, 80], n_spk)
    spk, fail, pi, k, _ = _speaker_counts(n_spk, n, 0.03, 0.5, 2.0, seed=1)
    sh = fit_shares(spk, np.full(spk.size, "+"), np.ones(spk.size, int), fail)
    est = sh.cells.xs("+", level="key")["pi"].reindex([f"s{i:03d}" for i in range(n_spk)]).to_numpy()
    pbar = k.sum() / n.sum()
    oracle = pbar * multiplier_posterior(k, n * pbar, np.array([0.5]), np.array([2.0]), np.array([1.0]))
    err = lambda e: float(np.mean((e - pi) ** 2))  # noqa: E731
    # measured (seed 1): MSE 4.12e-4 against own counts 5.49e-4, pooled 1.61e-3, oracle 3.82e-4
    assert err(est) < 0.85 * err(k / n) and err(est) < 0.35 * err(np.full(n_spk, pbar))
    assert err(est) < 1.12 * err(oracle)               # nearly as good as knowing (w, M)
    for m in (40, 80):                                 # monotone in the speaker's count
        sel = n == m
        order = np.argsort(k[sel], kind="stable")
        assert np.all(np.diff(est[sel][order]) >= -1e-12)


def test_shares_vary_with_the_count_where_the_ml_plug_in_is_a_zero_inflated_poisson():
    """A few speakers with one to three failures each (the RawGAT-ST bona fide pattern): the
    ML hyper-parameters sit on the boundary M → ∞, whose plug-in posterior gives every speaker
    with a failure the same share; the posterior-averaged share grows with the count."""
    n = np.full(48, 20)
    k = np.zeros(48, int); k[:3] = 1; k[3:6] = 2; k[6] = 3
    spk = np.repeat([f"s{i:02d}" for i in range(48)], n)
    fail = np.concatenate([np.arange(m) < kk for m, kk in zip(n, k)])
    pbar = k.sum() / n.sum()
    w, M = _fit_zinb(k.astype(float), n * pbar)
    assert M >= 1e5                                    # the plug-in: a zero-inflated Poisson
    plug = (M + k) / (M * (1 - w) + n * pbar)
    assert plug[0] == pytest.approx(plug[6], rel=1e-3)  # 1 and 3 failures: the same share
    sh = fit_shares(spk, np.full(spk.size, "+"), np.ones(spk.size, int), fail)
    est = sh.cells.xs("+", level="key")["pi"].reindex([f"s{i:02d}" for i in range(48)]).to_numpy()
    assert est[0] < est[3] < est[6]
    assert est[6] / est[0] > 1.3
    assert est[10] < 0.5 * est[0]                      # speakers without failures stay low


MU_B, MU_S = 5.0, -4.0


def simulate_attacks(n_spk: int = 40, n_b: int = 80, n_s: int = 150, share: float = 0.03,
                     loc: tuple = (4.6, 7.6), seed: int = 0) -> pd.DataFrame:
    """Bona fide N(MU_B + b_i, 1); spoofs of attacks A1, A2 from N(MU_S + c_i, 1), of which a share
    ``share`` are failures from N(loc[a], 0.3): attack-specific failure distributions."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_spk):
        b, c = rng.normal(0, 0.4, 2)
        rows += [(f"s{i:02d}", "bonafide", "-", v) for v in rng.normal(MU_B + b, 1, n_b)]
        for a, lf in zip(("A1", "A2"), loc):
            f = rng.random(n_s) < share
            rows += [(f"s{i:02d}", "spoof", a, v) for v in np.where(f, rng.normal(lf, 0.3, n_s),
                                                                     rng.normal(MU_S + c, 1, n_s))]
    return pd.DataFrame(rows, columns=["speaker", "label", "attack", "score"])


def _fpr_at(fit, d: pd.DataFrame, tau: np.ndarray, attack: str) -> np.ndarray:
    pred = predictive(fit, None, label="label", positive="bonafide")
    m = (pred.frame["attack"] == attack).to_numpy() | pred.y.astype(bool)
    return pred.rates_at(tau, mask=m)[1][0]


@pytest.fixture(scope="module")
def attacks():
    d = simulate_attacks()
    spec = LocScaleSpec(score="score", label="label", speaker="speaker", positive="bonafide", strata=("attack",),
                        speaker_scale=(), failure_quantile=0.95)
    return d, fit_locscale(d, spec.with_(failure_min_count=1)), fit_locscale(d, spec)


def test_attack_specific_failures_chosen_by_cv(attacks):
    d, fit, _ = attacks
    y = (d["label"] == "bonafide").to_numpy()
    fail = failure_flags(d["score"].to_numpy(), y, fit.failure["cuts"])
    key = np.where(y, "+:-", "-:" + d["attack"].astype(str))
    cv = failure_shape_cv(d["speaker"].to_numpy(), key, y.astype(int), d["score"].to_numpy(), fail, seed=0)
    assert choose_failure_min_count(cv) is not None
    # both attacks' failures from one distribution: one per class is kept (one-SE rule)
    d1 = simulate_attacks(loc=(6.0, 6.0), seed=3)
    y1 = (d1["label"] == "bonafide").to_numpy()
    f1 = failure_flags(d1["score"].to_numpy(), y1, fit.failure["cuts"])
    k1 = np.where(y1, "+:-", "-:" + d1["attack"].astype(str))
    cv1 = failure_shape_cv(d1["speaker"].to_numpy(), k1, y1.astype(int), d1["score"].to_numpy(), f1, seed=0)
    assert choose_failure_min_count(cv1) is None


def test_attack_specific_failure_rates_recovered(attacks):
    """Per attack, the FPR between the two failure modes: truth 3 % · P(N(7.6, 0.3) ≥ τ) for A2 and
    ≈ 0 for A1; the per-stratum failure distributions recover it, one pooled distribution
    splits it over both attacks."""
    d, fit, fit_cls = attacks
    tau = np.array([5.6, 6.1, 6.6])
    truth = {"A1": 0.03 * ndtr((4.6 - tau) / 0.3), "A2": 0.03 * ndtr((7.6 - tau) / 0.3)}
    for a in ("A1", "A2"):
        own, cls = _fpr_at(fit, d, tau, a), _fpr_at(fit_cls, d, tau, a)
        assert np.max(np.abs(own - truth[a])) < 0.006
        assert np.max(np.abs(cls - truth[a])) > 0.01


def test_per_stratum_mixture_rates_closed_form(attacks):
    """Per speaker and attack, model FPR(τ) = (1 − π̂) · core FPR(τ) + π̂ · G_a(τ), G_a the
    attack's own pooled failure distribution (empirical)."""
    d, fit, _ = attacks
    pred = predictive(fit, None, label="label", positive="bonafide")
    y = pred.y.astype(bool)
    s = d["score"].to_numpy()
    fail = failure_flags(s, y, fit.failure["cuts"])
    att = pred.frame["attack"].to_numpy()
    spk = pred.frame["speaker"].to_numpy()
    tau = np.quantile(s[~y], np.linspace(0.5, 0.999, 25))
    cells = fit.failure["shares"].cells
    for name in ["s04", "s21"]:
        for a in ("A1", "A2"):
            G = np.sort(s[~y & fail & (att == a)])
            m = (spk == name) & (att == a) & ~y
            fpr = pred.rates_at(tau, mask=m | ((spk == name) & y))[1][0]
            pi = float(cells.loc[(name, f"-:{a}"), "pi"])
            core = m & ~fail
            lat = np.asarray(fit.transform.transforms[f"-:{a}"].latent_threshold(tau), float)
            core_fpr = ndtr((fit.trial_mean[core][None] - lat[:, None]) / fit.trial_sd[core][None]).mean(axis=1)
            g = 1 - np.searchsorted(G, tau, side="left") / G.size
            np.testing.assert_allclose(fpr, (1 - pi) * core_fpr + pi * g, atol=1e-9)
