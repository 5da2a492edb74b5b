"""Tests of scoremix.model_eer: closed-form, mixture and LMM-implied EERs."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from scoremix.lme.spec import ModelSpec, RandomTerm
from scoremix.model_eer import (
    ModelEERError,
    gaussian_eer,
    mixture_eer,
    model_eer,
    model_eer_from_moments,
    trial_moments,
)


def _eer(scores, y):
    from scoremix.metrics import eer

    return eer(scores, y)


# ---------------------------------------------------------------------------------------
# closed form
# ---------------------------------------------------------------------------------------
def test_gaussian_eer_hand_values():
    # tied: Φ(-d/(2σ)) with d = 2, σ = 1 → Φ(-1) = 0.158655 (normal table)
    assert gaussian_eer(mean_neg=0.0, sd_neg=1.0, mean_pos=2.0, sd_pos=1.0) == pytest.approx(0.1586553, abs=1e-7)
    # unequal: Φ(-(3 - 1)/(0.5 + 1.5)) = Φ(-1)
    assert gaussian_eer(mean_neg=1.0, sd_neg=1.5, mean_pos=3.0, sd_pos=0.5) == pytest.approx(0.1586553, abs=1e-7)
    # no separation → 0.5; inverted detector → above 0.5
    assert gaussian_eer(mean_neg=0.3, sd_neg=2.0, mean_pos=0.3, sd_pos=1.0) == 0.5
    assert gaussian_eer(mean_neg=1.0, sd_neg=1.0, mean_pos=0.0, sd_pos=1.0) == pytest.approx(1 - 0.3085375, abs=1e-7)
    # Table IX (SNR): d 1.430, σ² 1.739 → Φ(-1.430 / (2·1.31871)) = Φ(-0.5422) ≈ 0.2938
    s = np.sqrt(1.739)
    assert gaussian_eer(mean_neg=-1.094, sd_neg=s, mean_pos=-1.094 + 1.430, sd_pos=s) == pytest.approx(0.2938, abs=2e-4)


def test_gaussian_eer_is_vectorised_over_draws():
    rng = np.random.default_rng(0)
    mu0 = rng.normal(0, 0.1, (500, 3))
    mu1 = mu0 + rng.uniform(0.5, 3.0, (500, 3))
    s0 = rng.uniform(0.5, 1.5, (500, 1))
    s1 = rng.uniform(0.5, 1.5, (500, 1))
    out = model_eer_from_moments(mu0, mu1, s0, s1)
    assert out.shape == (500, 3)
    i, j = 17, 2
    assert out[i, j] == pytest.approx(norm.cdf(-(mu1[i, j] - mu0[i, j]) / (s0[i, 0] + s1[i, 0])))
    assert isinstance(gaussian_eer(mean_neg=0, sd_neg=1, mean_pos=1, sd_pos=1), float)


def test_gaussian_eer_rejects_bad_sd():
    with pytest.raises(ModelEERError, match="sd_neg=0.0"):
        gaussian_eer(mean_neg=0.0, sd_neg=0.0, mean_pos=1.0, sd_pos=1.0)
    with pytest.raises(ModelEERError, match="index \\[1\\]"):
        gaussian_eer(mean_neg=[0, 0], sd_neg=[1, -1], mean_pos=[1, 1], sd_pos=1)


@pytest.mark.parametrize(
    "mu0, mu1, s0, s1",
    [(0.0, 1.6, 1.0, 1.0), (-1.0, 2.0, 2.0, 0.7)],
    ids=["tied", "unequal"],
)
def test_gaussian_eer_matches_one_million_simulated_trials(mu0, mu1, s0, s1):
    rng = np.random.default_rng(42)
    n = 500_000
    scores = np.r_[rng.normal(mu0, s0, n), rng.normal(mu1, s1, n)]
    y = np.r_[np.zeros(n, dtype=np.int8), np.ones(n, dtype=np.int8)]
    assert gaussian_eer(mean_neg=mu0, sd_neg=s0, mean_pos=mu1, sd_pos=s1) == pytest.approx(_eer(scores, y), abs=0.002)


# ---------------------------------------------------------------------------------------
# mixtures
# ---------------------------------------------------------------------------------------
def test_mixture_eer_single_component_is_closed_form():
    e, tau = mixture_eer([1.0], [1.5], [3.0], [0.5], return_threshold=True)
    assert e == pytest.approx(norm.cdf(-1.0))
    assert tau == pytest.approx((3.0 * 1.5 + 1.0 * 0.5) / 2.0)
    # two identical components behave like one (goes through the numerical solver)
    assert mixture_eer([1.0, 1.0], [1.5, 1.5], [3.0, 3.0], [0.5, 0.5]) == pytest.approx(norm.cdf(-1.0), abs=1e-9)


def test_mixture_eer_balances_rates_and_matches_simulation():
    m0, s0, w0 = np.array([-2.0, 0.5]), np.array([1.0, 0.6]), np.array([0.7, 0.3])
    m1, s1, w1 = np.array([1.0, 3.0, 0.0]), np.array([0.8, 1.2, 1.0]), np.array([0.5, 0.3, 0.2])
    e, tau = mixture_eer(m0, s0, m1, s1, w0, w1, return_threshold=True)
    fnr = np.sum(w1 * norm.cdf((tau - m1) / s1))
    fpr = np.sum(w0 * norm.sf((tau - m0) / s0))
    assert fnr == pytest.approx(fpr, abs=1e-10)
    assert e == pytest.approx(fnr, abs=1e-10)
    rng = np.random.default_rng(3)
    n = 500_000
    k0 = rng.choice(2, n, p=w0)
    k1 = rng.choice(3, n, p=w1)
    scores = np.r_[rng.normal(m0[k0], s0[k0]), rng.normal(m1[k1], s1[k1])]
    y = np.r_[np.zeros(n), np.ones(n)].astype(np.int8)
    assert e == pytest.approx(_eer(scores, y), abs=0.002)


def test_mixture_eer_errors():
    with pytest.raises(ModelEERError, match="positive class has no"):
        mixture_eer([0.0], [1.0], [], [])
    with pytest.raises(ModelEERError, match="component 1"):
        mixture_eer([0.0, 1.0], [1.0, 0.0], [2.0], [1.0])


# ---------------------------------------------------------------------------------------
# LMM-implied EER with a stand-in fit carrying the TRUE parameters
# ---------------------------------------------------------------------------------------
class TrueFit:
    """Minimal LmerResult stand-in: s = mu + d·y + b_speaker + c_attack·spoof + ε."""

    def __init__(self, data, mu, d, b, c, sigma, sigma_by=None, var_b=0.0, var_c=0.0):
        self.mu, self.d, self.b, self.c = mu, d, b, c
        self.sigma = sigma
        self.sigma_by = sigma_by
        y = (data["label"] == "bonafide").to_numpy().astype(float)
        terms = []
        rows = []
        if b is not None:
            lv = sorted(b.index)
            codes = pd.Categorical(data["speaker"], categories=lv).codes.astype(np.int64)
            terms.append(RandomTerm("speaker", "speaker", ["(Intercept)"], codes, lv, np.ones((len(data), 1))))
            rows.append(("speaker", "(Intercept)", None, var_b, np.sqrt(var_b)))
        if c is not None:
            lv = sorted(c.index)
            codes = pd.Categorical(data["attack"].where(data["attack"].isin(lv)),
                                   categories=lv).codes.astype(np.int64)
            name = 'dummy(label, "spoof")'
            terms.append(RandomTerm("attack", "attack", [name], codes, lv, (1 - y)[:, None]))
            rows.append(("attack", name, None, var_c, np.sqrt(var_c)))
        rows.append(("Residual", None, None, sigma**2, sigma))
        self.varcorr = pd.DataFrame(rows, columns=["grp", "var1", "var2", "vcov", "sdcor"])
        disp_levels = ["bonafide", "spoof"] if sigma_by is not None else None
        disp_codes = np.where(y == 1, 0, 1) if sigma_by is not None else None
        self.spec = ModelSpec(
            formula="score ~ label + ...", response="score", y=data["score"].to_numpy(float),
            X=np.column_stack([np.ones(len(data)), y]), fixef_names=["(Intercept)", "labelbonafide"],
            terms=terms, data=data, dispersion_codes=disp_codes, dispersion_levels=disp_levels,
        )

    def predict(self, newdata=None, re_form=None):
        newdata = self.spec.data if newdata is None else newdata
        y = (newdata["label"] == "bonafide").to_numpy().astype(float)
        out = self.mu + self.d * y
        if re_form is None:
            if self.b is not None:
                out = out + self.b.reindex(newdata["speaker"]).fillna(0).to_numpy()
            if self.c is not None:
                out = out + (1 - y) * self.c.reindex(newdata["attack"]).fillna(0).to_numpy()
        return out


def _simulate_truth(n, seed, mu=-1.0, d=2.5, sd_b=0.7, sd_c=1.2, sig_pos=0.8, sig_neg=1.3):
    """Trials from the truth; returns (data, speaker effects, attack effects)."""
    rng = np.random.default_rng(seed)
    b = pd.Series(rng.normal(0, sd_b, 40), index=[f"s{k:02d}" for k in range(40)])
    c = pd.Series(rng.normal(0, sd_c, 6), index=[f"A{k:02d}" for k in range(6)])
    y = rng.integers(0, 2, n)
    spk = rng.choice(b.index.to_numpy(), n)
    att = np.where(y == 1, "bonafide", rng.choice(c.index.to_numpy(), n))
    mean = mu + d * y + b[spk].to_numpy() + (1 - y) * c.reindex(att).fillna(0).to_numpy()
    score = mean + np.where(y == 1, sig_pos, sig_neg) * rng.standard_normal(n)
    data = pd.DataFrame({"score": score, "label": np.where(y == 1, "bonafide", "spoof"),
                         "speaker": spk, "attack": att, "y": y})
    return data, b, c


def test_marginal_eer_is_closed_form_with_variance_components():
    data, b, c = _simulate_truth(3000, seed=1)
    fit = TrueFit(data, -1.0, 2.5, b, c, sigma=1.3,
                  sigma_by=pd.Series({"bonafide": 0.8, "spoof": 1.3}), var_b=0.49, var_c=1.44)
    # negatives: N(-1, 1.3² + 0.49 + 1.44); positives: N(1.5, 0.8² + 0.49)
    expected = norm.cdf(-2.5 / (np.sqrt(1.69 + 0.49 + 1.44) + np.sqrt(0.64 + 0.49)))
    assert model_eer(fit, conditional=False, thresholds="latent") == pytest.approx(expected, abs=1e-9)
    mom = trial_moments(fit, conditional=False)
    assert mom.loc[mom["y"] == 1, "sd"].iloc[0] == pytest.approx(np.sqrt(0.64 + 0.49))


def test_conditional_eer_matches_huge_simulation_from_same_effects():
    data, b, c = _simulate_truth(4000, seed=2)
    fit = TrueFit(data, -1.0, 2.5, b, c, sigma=1.3, sigma_by={"bonafide": 0.8, "spoof": 1.3})
    model = model_eer(fit, conditional=True)
    # 1M trials with the same realised effects, speaker/attack frequencies as the fitted rows
    rng = np.random.default_rng(20)
    idx = rng.integers(0, len(data), 1_000_000)
    d = data.iloc[idx]
    y = d["y"].to_numpy()
    mean = -1.0 + 2.5 * y + b[d["speaker"]].to_numpy() + (1 - y) * c.reindex(d["attack"]).fillna(0).to_numpy()
    score = mean + np.where(y == 1, 0.8, 1.3) * rng.standard_normal(y.size)
    assert model == pytest.approx(_eer(score, y), abs=0.002)


def test_model_eer_by_subgroup_and_errors():
    rng = np.random.default_rng(4)
    n = 20000
    y = rng.integers(0, 2, n)
    g = rng.choice(["A", "B"], n)
    d = np.where(g == "A", 2.0, 3.0)
    score = d * y + rng.standard_normal(n)
    data = pd.DataFrame({"score": score, "label": np.where(y == 1, "bonafide", "spoof"), "g": g})
    fit = TrueFit(data, 0.0, 0.0, None, None, sigma=1.0)
    fit.predict = lambda nd=None, re_form=None: np.where(data["label"] == "bonafide",
                                                         np.where(data["g"] == "A", 2.0, 3.0), 0.0)
    tab = model_eer(fit, by="g", thresholds="latent")
    assert tab.loc["A", "eer_model"] == pytest.approx(norm.cdf(-1.0), abs=1e-9)
    assert tab.loc["B", "eer_model"] == pytest.approx(norm.cdf(-1.5), abs=1e-9)
    assert tab.loc["A", "n_pos"] + tab.loc["A", "n_neg"] == int((g == "A").sum())
    assert tab.loc["A", "eer_empirical"] == pytest.approx(norm.cdf(-1.0), abs=0.015)
    tab2 = model_eer(fit, by=pd.Series(g, name="grp"), thresholds="latent")
    assert tab2.index.name == "grp"
    np.testing.assert_allclose(tab2["eer_model"].to_numpy(), tab["eer_model"].to_numpy())
    with pytest.raises(ModelEERError, match="'nope'.*data="):
        model_eer(fit, by="nope")
    with pytest.raises(ModelEERError, match="'cls'"):
        model_eer(fit, label="cls")
    # columns outside the model frame come from data=, matched by index label
    fit.spec.data = data.drop(columns="g")
    extra = data.assign(g2=data["g"]).sample(frac=1.0, random_state=0)
    tab3 = model_eer(fit, by="g2", data=extra, thresholds="latent")
    np.testing.assert_allclose(tab3["eer_model"].to_numpy(), tab["eer_model"].to_numpy())
    with pytest.raises(ModelEERError, match="neither"):
        model_eer(fit, by="g3", data=extra)


# ---------------------------------------------------------------------------------------
# a real lmer fit of simulated data vs the simulation's expected-rate EER
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sim_fit():
    lmer = pytest.importorskip("scoremix.lme.api").lmer
    from scoremix.simulate import simulate_trials

    sim = simulate_trials(20000, n_speakers=200, n_attacks=40, mu=-1.0, d=2.5, beta_x=0.4,
                          sd_speaker=0.5, sd_attack=1.0, sigma=1.0, seed=11)
    fit = lmer('score ~ label + x + (1 | speaker) + (0 + dummy(label, "spoof") | attack)', sim.table)
    return sim, fit


def test_model_eer_of_lmer_fit_matches_simulation_truth(sim_fit):
    sim, fit = sim_fit
    # conditional on realised speakers/attacks: the simulation's exact expected-rate EER
    assert model_eer(fit, conditional=True) == pytest.approx(sim.true_eer(), abs=0.006)
    # and an empirical EER of the same table is close to both
    assert model_eer(fit, conditional=True) == pytest.approx(
        _eer(sim.table["score"].to_numpy(), sim.table["y"].to_numpy()), abs=0.01)


def test_marginal_model_eer_of_lmer_fit_matches_population(sim_fit):
    sim, fit = sim_fit
    t = sim.truth
    m0, m1 = t["class_mean_population"]["spoof"], t["class_mean_population"]["bonafide"]
    s0, s1 = t["class_sd_population"]["spoof"], t["class_sd_population"]["bonafide"]
    # the fit's marginal mixes over the observed x, the truth integrates x ~ N(0, 1); the
    # attack variance from 40 attacks has ~23 % relative SE (→ about ±0.01 in the EER)
    assert model_eer(fit, conditional=False) == pytest.approx(gaussian_eer(mean_neg=m0, sd_neg=s0, mean_pos=m1, sd_pos=s1), abs=0.02)


def test_marginal_model_eer_of_lmer_fit_is_closed_form_of_its_estimates():
    lmer = pytest.importorskip("scoremix.lme.api").lmer
    from scoremix.simulate import simulate_trials

    sim = simulate_trials(5000, n_speakers=80, n_attacks=10, beta_x=0.0, sigma=1.0,
                          sigma_pos=0.6, seed=5)
    fit = lmer('score ~ label + (1 | speaker) + (0 + dummy(label, "spoof") | attack)', sim.table,
               dispersion="~ label")
    vc = fit.varcorr.set_index("grp")["vcov"]
    sd = fit.sigma_by
    d = fit.fixef["labelbonafide"]
    # one Gaussian per class: spoof var σ_spoof² + σ_b² + σ_c², bona fide σ_bonafide² + σ_b²
    hand = norm.cdf(-d / (np.sqrt(sd["spoof"] ** 2 + vc["speaker"] + vc["attack"])
                          + np.sqrt(sd["bonafide"] ** 2 + vc["speaker"])))
    assert model_eer(fit, conditional=False, thresholds="latent") == pytest.approx(hand, abs=1e-9)


# ---------------------------------------------------------------------------------------
# BayesLmerResult → posterior distribution of the model-based EER
# ---------------------------------------------------------------------------------------
def _posterior_fixture(n_chain=2, n_draw=4, seed=7):
    """A BayesLmerResult holding KNOWN draws (no sampling): s = β0 + β1·y + β2·x + b_spk +
    c_att·spoof + ε, ε ~ N(0, σ_label²)."""
    import xarray as xr

    from scoremix.bayes.result import BayesLmerResult

    rng = np.random.default_rng(seed)
    n = 400
    y = rng.integers(0, 2, n)
    x = rng.normal(0, 1, n)
    spk_lv = [f"s{k}" for k in range(6)]
    att_lv = ["A1", "A2", "A3"]
    spk = rng.integers(0, 6, n)
    att = np.where(y == 1, -1, rng.integers(0, 3, n))
    g = rng.choice(["m", "f"], n)
    score = -1 + 2 * y + 0.5 * x + rng.normal(0, 1, n)
    data = pd.DataFrame({"score": score, "label": np.where(y == 1, "bonafide", "spoof"), "x": x,
                         "speaker": np.array(spk_lv)[spk],
                         "attack": np.where(y == 1, "bonafide", np.array(att_lv)[np.maximum(att, 0)])})
    dummy = 'dummy(label, "spoof")'
    terms = [RandomTerm("speaker", "speaker", ["(Intercept)"], spk.astype(np.int64), spk_lv, np.ones((n, 1))),
             RandomTerm("attack", "attack", [dummy], np.maximum(att, 0).astype(np.int64), att_lv,
                        (1.0 - y)[:, None])]
    spec = ModelSpec("score ~ label + x + ...", "score", score, np.column_stack([np.ones(n), y, x]),
                     ["(Intercept)", "labelbonafide", "x"], terms, data,
                     dispersion_formula="~ label", dispersion_codes=np.where(y == 1, 0, 1).astype(np.int64),
                     dispersion_levels=["bonafide", "spoof"])
    S = (n_chain, n_draw)
    post = {
        "(Intercept)": rng.normal(-1, 0.1, S), "labelbonafide": rng.normal(2, 0.2, S), "x": rng.normal(0.5, 0.1, S),
        "sd_speaker__(Intercept)": rng.uniform(0.3, 0.6, S), f"sd_attack__{dummy}": rng.uniform(0.8, 1.2, S),
        "sigma_bonafide": rng.uniform(0.7, 0.9, S), "sigma_spoof": rng.uniform(1.1, 1.4, S),
    }
    post["sigma"] = post["sigma_bonafide"]
    b_spk = rng.normal(0, 0.5, S + (6, 1))
    b_att = rng.normal(0, 1.0, S + (3, 1))
    ds = xr.Dataset(
        {**{k: (("chain", "draw"), v) for k, v in post.items()},
         "b_speaker": (("chain", "draw", "speaker__level", "speaker__term"), b_spk),
         "b_attack": (("chain", "draw", "attack__level", "attack__term"), b_att)},
        coords={"chain": np.arange(n_chain), "draw": np.arange(n_draw), "speaker__level": spk_lv,
                "speaker__term": ["(Intercept)"], "attack__level": att_lv, "attack__term": [dummy]},
    )

    class _IData:  # only .posterior is read by the result's accessors
        posterior = ds

    res = BayesLmerResult(idata=_IData(), spec=spec, method="collapsed", likelihood="suffstats",
                          sampler="pymc", priors=None, diagnostics=None)
    flat = {k: v.reshape(-1) for k, v in post.items()}
    flat["b_speaker"] = b_spk.reshape(-1, 6)
    flat["b_attack"] = b_att.reshape(-1, 3)
    return res, data.assign(g=g), y, x, spk, att, flat


def _hand_mixture_eer(m0, s0, m1, s1):
    """EER of two equal-weight Gaussian mixtures by root-finding FNR(τ) = FPR(τ) (scipy)."""
    from scipy.optimize import brentq as _brentq

    f = lambda t: norm.cdf((t - m1) / s1).mean() - norm.sf((t - m0) / s0).mean()  # noqa: E731
    tau = _brentq(f, -60, 60, xtol=1e-13)
    return norm.cdf((tau - m1) / s1).mean()


def test_bayes_model_eer_is_per_draw_mixture_eer_of_known_draws():
    pytest.importorskip("arviz")
    pytest.importorskip("xarray")
    res, data, y, x, spk, att, p = _posterior_fixture()
    pe = model_eer(res, progress=False, thresholds="latent")
    marg = model_eer(res, conditional=False, progress=False, thresholds="latent")
    grp = model_eer(res, by="g", data=data, progress=False, thresholds="latent")
    assert list(pe.draws["draw"]) == list(range(8))
    for d in range(8):
        fixed = p["(Intercept)"][d] + p["labelbonafide"][d] * y + p["x"][d] * x
        sd = np.where(y == 1, p["sigma_bonafide"][d], p["sigma_spoof"][d])
        # conditional: add the draw's speaker effect and (spoof rows) attack effect
        mean = fixed + p["b_speaker"][d][spk] + np.where(y == 0, p["b_attack"][d][np.maximum(att, 0)], 0.0)
        hand = _hand_mixture_eer(mean[y == 0], sd[y == 0], mean[y == 1], sd[y == 1])
        assert pe.draws["eer"].iloc[d] == pytest.approx(hand, abs=1e-9)
        # marginal: one Gaussian per class (x varies, so still a mixture over trials)
        sdm = np.sqrt(sd**2 + p["sd_speaker__(Intercept)"][d] ** 2
                      + (1 - y) * p['sd_attack__dummy(label, "spoof")'][d] ** 2)
        hand_m = _hand_mixture_eer(fixed[y == 0], sdm[y == 0], fixed[y == 1], sdm[y == 1])
        assert marg.draws["eer"].iloc[d] == pytest.approx(hand_m, abs=1e-9)
        # per subgroup (a column outside the model frame, from data=)
        for lv in ("f", "m"):
            r = (data["g"] == lv).to_numpy()
            h = _hand_mixture_eer(mean[r & (y == 0)], sd[r & (y == 0)], mean[r & (y == 1)], sd[r & (y == 1)])
            got = grp.draws[(grp.draws["g"] == lv) & (grp.draws["draw"] == d)]["eer"].iloc[0]
            assert got == pytest.approx(h, abs=1e-9)
    # summary: posterior mean, SD, median, an HDI around them, counts and empirical EER
    s = pe.summary.loc["all"]
    e = pe.draws["eer"].to_numpy()
    assert s["eer_model"] == pytest.approx(e.mean())
    assert s["eer_sd"] == pytest.approx(e.std(ddof=1))
    assert s["eer_median"] == pytest.approx(np.median(e))
    lo, hi = pe.interval_columns
    assert (lo, hi) == ("hdi_2.5%", "hdi_97.5%")  # level=0.95, as for every interval
    assert e.min() <= s[lo] <= s["eer_median"] <= s[hi] <= e.max()
    assert (s["n_neg"], s["n_pos"]) == (int((y == 0).sum()), int((y == 1).sum()))
    assert s["eer_empirical"] == pytest.approx(_eer(data["score"].to_numpy(), y))
    assert list(grp.summary.index) == ["f", "m"]
    assert grp.summary["n_neg"].sum() + grp.summary["n_pos"].sum() == len(data)


def test_bayes_model_eer_moments_method_and_errors():
    pytest.importorskip("arviz")
    pytest.importorskip("xarray")
    res, data, y, x, spk, att, p = _posterior_fixture(n_chain=1, n_draw=3, seed=8)
    pe = model_eer(res, method="moments", level=0.9)
    assert pe.interval_columns == ("hdi_5%", "hdi_95%")
    with pytest.warns(FutureWarning, match="hdi_prob= is renamed level="):
        old = model_eer(res, method="moments", hdi_prob=0.9)
    pd.testing.assert_frame_equal(old.summary, pe.summary)
    with pytest.raises(TypeError, match="level= only"):
        model_eer(res, method="moments", hdi_prob=0.9, level=0.9)
    for d in range(3):
        mean = (p["(Intercept)"][d] + p["labelbonafide"][d] * y + p["x"][d] * x + p["b_speaker"][d][spk]
                + np.where(y == 0, p["b_attack"][d][np.maximum(att, 0)], 0.0))
        var = np.where(y == 1, p["sigma_bonafide"][d], p["sigma_spoof"][d]) ** 2
        # one Gaussian per class with the mixture's mean and variance
        m0, m1 = mean[y == 0].mean(), mean[y == 1].mean()
        s0 = np.sqrt(var[y == 0].mean() + mean[y == 0].var())
        s1 = np.sqrt(var[y == 1].mean() + mean[y == 1].var())
        assert pe.draws["eer"].iloc[d] == pytest.approx(norm.cdf(-(m1 - m0) / (s0 + s1)), abs=1e-10)
    with pytest.raises(ModelEERError, match="method"):
        model_eer(res, method="exact")
    with pytest.raises(ModelEERError, match="level"):
        model_eer(res, level=1.5)
    with pytest.raises(ModelEERError, match="'nope'"):
        model_eer(res, by="nope")


def test_bayes_model_eer_of_sampled_fit_matches_truth_and_lmer():
    """A real (tiny) bayes_lmer fit: the posterior EER is centred on the REML fit's model EER
    and within 3 posterior SDs of the simulation's true EER."""
    pytest.importorskip("pymc")
    import warnings

    from scoremix.bayes import bayes_lmer
    from scoremix.lme.api import lmer
    from scoremix.simulate import simulate_trials

    sim = simulate_trials(1000, n_speakers=20, n_attacks=5, mu=-1.0, d=2.5, beta_x=0.0,
                          sd_speaker=0.5, sd_attack=1.0, sigma=1.0, seed=3)
    f = 'score ~ label + (1 | speaker) + (0 + dummy(label, "spoof") | attack)'
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = bayes_lmer(f, sim.table, draws=100, tune=200, chains=1, cores=1, random_seed=1,
                         progressbar=False)
        pe = model_eer(res, progress=False)
    s = pe.summary.loc["all"]
    lo, hi = pe.interval_columns
    assert len(pe.draws) == 100
    reml = model_eer(lmer(f, sim.table))
    # the REML plug-in EER lies inside the credible interval and near the posterior mean
    assert s[lo] < reml < s[hi]
    assert s["eer_model"] == pytest.approx(reml, abs=0.01)
    # the simulation's true (conditional) EER is within 3 posterior SDs
    assert abs(s["eer_model"] - sim.true_eer()) < 3 * s["eer_sd"]
    assert 0 < s[hi] - s[lo] < 0.1
