"""PSIS-LOO / WAIC (per trial and per speaker), posterior predictive checks, contrasts and the
memory budget of Bayesian fits (issue 25).

Independent references: ``arviz.loo`` / ``arviz.waic`` on the full log-likelihood matrix; the
Gaussian log-density evaluated with ``scipy.stats.norm`` directly from the posterior draws; an
exact leave-one-out predictive density of a conjugate-in-the-mean model by 1-D quadrature
over σ; simulated data with a known true specification.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import integrate, stats

import scoremix as sm
from scoremix.bayes import LooError, MemoryBudgetError, Prior
from scoremix.bayes.memory import ENV_VAR, check_budget, memory_budget, parse_bytes

FIT = dict(chains=2, cores=1, progress=False)


def _quiet_fit(formula, df, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.bayes_lmer(formula, df, **{**FIT, **kw})


@pytest.fixture(scope="module")
def speaker_data() -> pd.DataFrame:
    """Scores with a strong speaker effect (SD 1) and a gender difference in the bona fide mean;
    ``attrs["mu"]``: every trial's true mean (speaker effects included), residual SD 1."""
    rng = np.random.default_rng(7)
    n, S = 400, 24
    spk = rng.integers(0, S, n)
    gender = np.where(spk % 2 == 0, "female", "male")
    bona = rng.random(n) < 0.5
    mu = np.where(bona, 2.0, -1.0) + 0.8 * bona * (gender == "female") + rng.normal(0, 1.0, S)[spk]
    y = mu + rng.normal(0, 1.0, n)
    df = pd.DataFrame({"score": y, "label": np.where(bona, "bonafide", "spoof"),
                       "speaker": np.char.add("s", spk.astype(str)), "gender": gender})
    df.attrs["mu"] = mu
    return df


@pytest.fixture(scope="module")
def fits(speaker_data):
    """The true specification (speaker intercepts) and a wrong one (no speaker effect)."""
    true = _quiet_fit("score ~ label * gender + (1|speaker)", speaker_data, draws=300, tune=300, seed=1)
    wrong = _quiet_fit("score ~ label * gender", speaker_data, draws=300, tune=300, seed=2)
    return true, wrong


def _pointwise_scipy(fit) -> np.ndarray:
    """(S, n) Gaussian log-likelihood from the posterior draws, written out independently."""
    post = fit.idata.posterior
    spec = fit.spec
    flat = lambda a: np.asarray(a).reshape(-1, *np.asarray(a).shape[2:])  # noqa: E731
    mu = sum(flat(post[n].values)[:, None] * np.asarray(spec.X)[:, j][None, :]
             for j, n in enumerate(spec.fixef_names))
    for t in spec.terms:
        b = flat(post[f"b_{t.group}"].values)[:, :, 0]
        mu = mu + b[:, np.asarray(t.codes)] * np.asarray(t.X)[:, 0][None, :]
    sig = flat(post["sigma"].values)[:, None]
    return stats.norm.logpdf(np.asarray(spec.y)[None, :], mu, sig)


def test_pointwise_loglik_matches_scipy_and_is_chunk_invariant(fits):
    true, _ = fits
    ref = _pointwise_scipy(true)
    full = true.log_likelihood()["score"].values.reshape(ref.shape)
    np.testing.assert_allclose(full, ref, rtol=1e-12, atol=1e-10)
    # a budget just above the kept array: the chunks (working set ~6 arrays per row) are ~1/6 of it
    tiny = true.log_likelihood(max_memory=int(ref.size * 8 * 1.05))
    np.testing.assert_array_equal(tiny["score"].values.reshape(ref.shape), full)


def test_grouped_loglik_is_the_sum_over_each_speakers_trials(fits, speaker_data):
    true, _ = fits
    ref = _pointwise_scipy(true)  # (S, n)
    by = pd.DataFrame(ref.T).groupby(speaker_data["speaker"].to_numpy()).sum()  # (G, S), sorted levels
    grouped = true.log_likelihood(group="speaker", max_memory="200kB")  # 6-row chunks
    g = grouped["score"]
    assert list(g["speaker"].values) == list(by.index)
    np.testing.assert_allclose(g.values.reshape(-1, len(by)).T, by.to_numpy(), rtol=1e-10, atol=1e-8)
    # an array of labels works the same as the column name
    g2 = true.log_likelihood(group=speaker_data["speaker"].to_numpy())["score"].values
    np.testing.assert_allclose(g2, g.values)


def test_chunked_loo_and_waic_equal_arviz_on_the_full_matrix(fits):
    import arviz as az

    true, _ = fits
    mine = true.loo(max_memory="200kB")
    mine_w = true.waic(max_memory="200kB")
    true.log_likelihood(add=True)
    ref = az.loo(true.idata, pointwise=True)
    ref_w = az.waic(true.idata, pointwise=True)
    for k in ("elpd_loo", "se", "p_loo"):
        assert mine[k] == pytest.approx(ref[k], rel=1e-10, abs=1e-9)
    np.testing.assert_allclose(mine["pareto_k"].values, ref["pareto_k"].values, rtol=1e-10)
    for k in ("elpd_waic", "se", "p_waic"):
        assert mine_w[k] == pytest.approx(ref_w[k], rel=1e-10, abs=1e-9)


def test_loo_picks_the_true_specification_per_trial_and_per_speaker(fits, speaker_data):
    true, wrong = fits
    cmp = sm.bayes_compare({"speaker_intercepts": true, "no_speaker_effect": wrong})
    assert cmp.index[0] == "speaker_intercepts"
    # the speaker effect (SD 1 over 24 speakers, ~17 trials each) is decisive: many SEs apart
    assert cmp.loc["no_speaker_effect", "elpd_diff"] > 4 * cmp.loc["no_speaker_effect", "dse"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # grouped PSIS: large Pareto k are expected (see docs)
        g = sm.bayes_compare({"speaker_intercepts": true, "no_speaker_effect": wrong},
                             group=speaker_data["speaker"])
    assert g.index[0] == "speaker_intercepts"
    assert int(true.loo(group="speaker")["n_data_points"]) == 24
    # new-speaker predictive: the speaker's intercept integrated out
    gi = sm.bayes_compare({"speaker_intercepts": true, "no_speaker_effect": wrong},
                          group=speaker_data["speaker"], integrate=True)
    assert gi.index[0] == "speaker_intercepts"
    assert (true.loo(group="speaker", integrate=True)["pareto_k"].values < 0.7).all()


def test_integrated_group_loglik_is_the_marginal_gaussian_density(fits, speaker_data):
    r"""``integrate=True``: :math:`y_g \sim N(X_g\beta_d, \sigma_d^2 I + \tau_d^2 11^\top)` per draw,
    evaluated with ``scipy.stats.multivariate_normal``."""
    true, _ = fits
    ll = true.log_likelihood(group="speaker", integrate=True, max_memory="1MB")["score"].values
    ll = ll.reshape(-1, ll.shape[-1])
    post, spec = true.idata.posterior, true.spec
    flat = lambda a: np.asarray(a).reshape(-1)  # noqa: E731
    beta = np.stack([flat(post[n].values) for n in spec.fixef_names], axis=1)
    sig, tau = flat(post["sigma"].values), flat(post["sd_speaker__(Intercept)"].values)
    spk = speaker_data["speaker"].to_numpy()
    for d in (0, 123, 599):
        for gi, g in enumerate(sorted(set(spk))):
            R = spk == g
            cov = sig[d] ** 2 * np.eye(R.sum()) + tau[d] ** 2
            ref = stats.multivariate_normal.logpdf(np.asarray(spec.y)[R], np.asarray(spec.X)[R] @ beta[d], cov)
            assert ll[d, gi] == pytest.approx(ref, abs=1e-8)


def test_loo_matches_exact_leave_one_out_of_a_conjugate_model():
    r"""``y_i ~ N(μ, σ²)``, μ ~ N(0, 3²), σ ~ half-N(2): given σ the mean is conjugate, so
    :math:`p(y_i\mid y_{-i}) = \int N(y_i; m_{-i}(σ), σ^2 + v_{-i}(σ))\,p(σ\mid y_{-i})\,dσ` is a
    1-D integral (adaptive quadrature).  PSIS-LOO must agree within its Monte Carlo error."""
    rng = np.random.default_rng(0)
    y = rng.normal(1.0, 1.5, 25)
    y[3] = 5.0  # one influential point
    fit = _quiet_fit("y ~ 1", pd.DataFrame({"y": y}), draws=1500, tune=500, seed=3,
                     priors={"(Intercept)": Prior("normal", {"mu": 0.0, "sigma": 3.0}),
                             "sigma": Prior("halfnormal", {"sigma": 2.0})})
    m0, s0, ss = 0.0, 3.0, 2.0

    def cond(yi, rest, sig):
        prec = 1 / s0**2 + rest.size / sig**2
        mean = (m0 / s0**2 + rest.sum() / sig**2) / prec
        return mean, sig**2 + 1 / prec

    def marg_rest(rest, sig):  # p(y_-i | σ) p(σ), up to a constant shared by both integrals
        cov = sig**2 * np.eye(rest.size) + s0**2
        return stats.multivariate_normal.pdf(rest, np.full(rest.size, m0), cov) * stats.halfnorm.pdf(sig, 0, ss)

    exact = []
    for i in range(y.size):
        rest = np.delete(y, i)
        num = integrate.quad(lambda s: stats.norm.pdf(y[i], cond(y[i], rest, s)[0], np.sqrt(cond(y[i], rest, s)[1]))
                             * marg_rest(rest, s), 0.05, 10, limit=200)[0]
        den = integrate.quad(lambda s: marg_rest(rest, s), 0.05, 10, limit=200)[0]
        exact.append(np.log(num / den))
    exact = np.array(exact)
    res = fit.loo()
    k = res["pareto_k"].values
    assert (k < 0.7).all()
    # Monte Carlo error: ~0.003 for the ordinary points; for the influential point (k ≈ 0.5)
    # PSIS on 3000 *independent* exact posterior draws has SD 0.031 over replications (checked
    # with a 2-D grid posterior), ~0.05 at this chain's effective sample size: allow 0.25 there
    err = np.abs(res["loo_i"].values - exact)
    assert (np.delete(err, 3) < 0.02).all(), err
    assert err[3] < 0.25, err
    assert res["elpd_loo"] == pytest.approx(exact.sum(), abs=0.3)


def test_ppc_uses_the_one_inferencedata_and_replicates_match_the_model(fits):
    import matplotlib

    matplotlib.use("Agg")
    true, _ = fits
    ax = true.ppc(n_draws=30, seed=4)
    assert ax is not None
    pp = true.idata.posterior_predictive["score"]
    assert pp.shape == (2, 30, true.spec.n)
    # replicate mean and SD agree with the observed scores' (model fits): within 3 posterior SDs
    obs = np.asarray(true.spec.y)
    m = pp.values.mean(axis=2).ravel()
    assert abs(m.mean() - obs.mean()) < 3 * m.std() + 0.05
    sd = pp.values.std(axis=2).ravel()
    assert abs(sd.mean() - obs.std()) < 3 * sd.std() + 0.05


def test_memory_budget_is_checked_before_allocating(fits, monkeypatch):
    true, _ = fits
    assert parse_bytes("500MB") == 500_000_000
    assert parse_bytes("1.5GiB") == int(1.5 * 2**30)
    assert parse_bytes(1024) == 1024
    for bad in ("lots", "-3GB", "5 parsecs", True):
        with pytest.raises(ValueError):
            parse_bytes(bad)
    monkeypatch.setenv(ENV_VAR, "3GB")
    assert memory_budget() == 3_000_000_000
    assert memory_budget("1GB") == 1_000_000_000  # the argument wins
    monkeypatch.setenv(ENV_VAR, "10kB")
    with pytest.raises(MemoryBudgetError, match="max_memory=.*SCOREMIX_MAX_MEMORY"):
        true.log_likelihood()
    monkeypatch.delenv(ENV_VAR)
    with pytest.raises(MemoryBudgetError, match=r"posterior predictive replicates \(2 chain\(s\) × 300 draws"):
        true.posterior_predictive(max_memory="1MB")
    with pytest.raises(MemoryBudgetError, match="ppc\\(n_draws"):
        check_budget(2e9, "x", "1GB", shrink="ask for fewer replicate draws (ppc(n_draws=...))")
    # class moments: chunking over draws by the budget changes nothing
    a = true.class_moments(groups="gender")
    b = true.class_moments(groups="gender", max_memory=true.spec.n * 8 * 12)  # one draw per chunk
    pd.testing.assert_frame_equal(a, b)


def test_loo_errors_name_the_problem(fits, speaker_data):
    true, _ = fits
    with pytest.raises(LooError, match="'nope'"):
        true.loo(group="nope")
    with pytest.raises(LooError, match="labels"):
        true.loo(group=np.zeros(3))
    with pytest.raises(LooError, match="two fits"):
        sm.bayes_compare({"a": true})


def test_posterior_contrast_female_minus_male(fits, speaker_data):
    r"""Contrast draws are the differences of the per-level EER draws of the mixture model EER
    (``model_eer(method="mixture")``, an independent root finder); the true conditional
    contrast (class mixtures of the trials' true Gaussians, speaker effects included, root by
    ``scipy.optimize.brentq``) lies in the 95 % HDI."""
    from scipy.optimize import brentq

    from scoremix.model_eer import model_eer

    true, _ = fits
    c = true.contrast("gender", speaker_data, max_draws=200)
    row = c.table.set_index(["measure", "contrast"]).loc[("eer", "female - male")]
    me = model_eer(true, by="gender", data=speaker_data, method="mixture", max_draws=200, progress=False,
                   thresholds="latent").draws  # the contrasts use the smooth (latent) crossing
    wide = me.pivot(index="draw", columns="gender", values="eer")
    diff = (wide["female"] - wide["male"]).to_numpy()
    mine = c.draws[c.draws.measure == "eer"].pivot(index="draw", columns="level", values="value")
    np.testing.assert_allclose(mine.to_numpy(), wide[mine.columns].to_numpy(), rtol=1e-6, atol=1e-9)
    assert row["mean"] == pytest.approx(diff.mean(), rel=1e-6)
    mu, bona, g = speaker_data.attrs["mu"], (speaker_data["label"] == "bonafide").to_numpy(), speaker_data["gender"]

    def true_eer(sel):
        fnr = lambda t: stats.norm.cdf(t - mu[sel & bona]).mean()  # noqa: E731
        fpr = lambda t: stats.norm.sf(t - mu[sel & ~bona]).mean()  # noqa: E731
        t = brentq(lambda t: fnr(t) - fpr(t), -10, 10)
        return fnr(t)

    truth = true_eer((g == "female").to_numpy()) - true_eer((g == "male").to_numpy())
    assert row["hdi_lo"] <= truth <= row["hdi_hi"], (truth, row)
    dcf = c.table.set_index(["measure", "contrast"]).loc[("min_dcf", "female - male")]
    assert dcf["hdi_lo"] <= dcf["median"] <= dcf["hdi_hi"]
    with pytest.raises(sm.ContrastError, match="'nope'"):
        true.contrast("nope", speaker_data)


def test_integrated_loglik_with_correlated_slopes_and_dispersion_on_synthetic_draws():
    """Woodbury with a 2×2 Σ and class-specific σ: no sampling, random 'posterior' draws put in an
    InferenceData; reference ``scipy.stats.multivariate_normal`` on each group's rows."""
    import types

    import arviz as az
    import xarray as xr

    from scoremix.bayes.elpd import log_likelihood
    from scoremix.lme.model_frame import build_model_spec

    rng = np.random.default_rng(2)
    n, G = 90, 6
    df = pd.DataFrame({"y": rng.normal(size=n), "x": rng.normal(size=n), "spk": np.char.add("s", rng.integers(0, G, n).astype(str)),
                       "label": rng.choice(["bonafide", "spoof"], n)})
    spec = build_model_spec("y ~ x + label + (x|spk)", df, dispersion="~ label")
    C, D = 2, 5
    dv = {nm: (("chain", "draw"), rng.normal(size=(C, D))) for nm in spec.fixef_names}
    dv["sd_spk__(Intercept)"] = (("chain", "draw"), rng.uniform(0.3, 1.5, (C, D)))
    dv["sd_spk__x"] = (("chain", "draw"), rng.uniform(0.3, 1.5, (C, D)))
    dv["cor_spk__(Intercept).x"] = (("chain", "draw"), rng.uniform(-0.8, 0.8, (C, D)))
    from scoremix.bayes.priors import sigma_names

    for nm in sigma_names(spec):
        dv[nm] = (("chain", "draw"), rng.uniform(0.5, 2.0, (C, D)))
    dv["b_spk"] = (("chain", "draw", "spk__level", "spk__term"), rng.normal(size=(C, D, G, 2)))
    post = xr.Dataset(dv)
    fit = types.SimpleNamespace(spec=spec, idata=az.InferenceData(posterior=post), cells=None, transform=None)
    ll = log_likelihood(fit, "spk", integrate=True, max_memory="20kB")["y"].values.reshape(C * D, G)
    f = lambda nm: post[nm].values.reshape(-1)  # noqa: E731
    X, y, x = np.asarray(spec.X), np.asarray(spec.y), df["x"].to_numpy()
    sig_of_row = np.stack([f(nm) for nm in sigma_names(spec)], axis=1)[:, np.asarray(spec.dispersion_codes)]
    beta = np.stack([f(nm) for nm in spec.fixef_names], axis=1)
    for d in range(C * D):
        s0, s1, r = f("sd_spk__(Intercept)")[d], f("sd_spk__x")[d], f("cor_spk__(Intercept).x")[d]
        Sig = np.array([[s0 * s0, r * s0 * s1], [r * s0 * s1, s1 * s1]])
        for gi, g in enumerate(sorted(df["spk"].unique())):
            R = df["spk"].to_numpy() == g
            Z = np.column_stack([np.ones(R.sum()), x[R]])
            cov = Z @ Sig @ Z.T + np.diag(sig_of_row[d, R] ** 2)
            ref = stats.multivariate_normal.logpdf(y[R], X[R] @ beta[d], cov)
            assert ll[d, gi] == pytest.approx(ref, abs=1e-8)
