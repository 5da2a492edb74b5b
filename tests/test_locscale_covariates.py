"""Per-class covariate location terms of the location-scale score model
(:mod:`scoremix.locscale.covariates`, ``score_model(covariates=...)``).

* Gaussian engine (``transform=False``), speaker location only: the fit equals statsmodels'
  ML linear mixed model fitted to each class separately (the likelihood factorises over
  classes) and, given its own variance parameters, the closed-form GLS estimate.
* Transformation engine: a simulation with known truth (scores = a different increasing map
  of the latent values per stratum) recovers the per-class slopes on the latent scale.
* ``score_model`` keeps a covariate with an effect and drops one without.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import scoremix as sm
from scoremix.locscale import LocScaleError, LocScaleSpec, fit_locscale
from scoremix.locscale.covariates import CovariateDesign


def _gauss_data(seed: int = 5, n_spk: int = 40, per: int = 30) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_spk):
        g = "f" if i % 2 else "m"
        for y in (0, 1):
            b = rng.normal(0, 0.5 if y else 0.8)
            x = rng.normal(0, 1, per)
            z = ((2.0 if y else -1.0) + (0.7 if y else -0.4) * x + (0.3 if y else 0.6) * (g == "m") + b
                 + rng.normal(0, 1.0 if y else 1.5, per))
            rows.append(pd.DataFrame(dict(score=z, label=y, speaker=f"s{i:02d}", x=x, g=g)))
    return pd.concat(rows, ignore_index=True)


@pytest.fixture(scope="module")
def gauss_fit():
    df = _gauss_data()
    spec = LocScaleSpec(score="score", label="label", speaker="speaker", positive=1, speaker_scale=(),
                        covariates=("x", "g"), transform=False)
    return df, fit_locscale(df, spec)


def test_gaussian_covariates_equal_statsmodels_mixedlm(gauss_fit):
    """Per class, ``score ~ x + g + (1 | speaker)`` by ML (statsmodels MixedLM): slopes to 2e-3,
    speaker SD to 2e-3, total log-likelihood to 0.01 (optimiser tolerances of both fits)."""
    smf = pytest.importorskip("statsmodels.formula.api")
    df, fit = gauss_fit
    total = 0.0
    vc = fit.varcorr.set_index("var1")["sdcor"]
    for y, cls in ((0, "negative"), (1, "positive")):
        d = df[df["label"] == y]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = smf.mixedlm("score ~ x + C(g)", d, groups=d["speaker"]).fit(reml=False)
        total += m.llf
        assert abs(fit.coef[f"{cls}:x"] - m.fe_params["x"]) < 2e-3
        assert abs(fit.coef[f"{cls}:g[m]"] - m.fe_params["C(g)[T.m]"]) < 2e-3
        assert abs(vc[f"location:{cls}"] - np.sqrt(m.cov_re.iloc[0, 0])) < 2e-3
        k = fit._data.cells.levels.index("+" if y else "-")
        assert abs(np.exp(fit.params.lam[k]) - np.sqrt(m.scale)) < 2e-3
        assert abs(fit.params.mu[k] - m.fe_params["Intercept"]) < 2e-3
    assert abs(fit.loglik - total) < 0.01


def test_gaussian_covariates_equal_gls_closed_form(gauss_fit):
    r"""Given the fitted σ and τ_b of a class, its location parameters are the GLS estimate
    :math:`(X^\top V^{-1}X)^{-1}X^\top V^{-1}z` with :math:`V_i=\sigma^2 I+\tau_b^2 11^\top` per
    speaker (the ML fixed effects at the ML variance parameters): to 2e-3 (the engine's
    L-BFGS-B stops at a relative log-likelihood change of 1e-7, about 4e-4 here, where the
    likelihood is flat in the intercept to that order)."""
    df, fit = gauss_fit
    p = fit.params
    for y, cls in ((0, "negative"), (1, "positive")):
        d = df[df["label"] == y]
        k = fit._data.cells.levels.index("+" if y else "-")
        s2, t2 = np.exp(2 * p.lam[k]), np.exp(2 * p.log_tb[y])
        A, r = np.zeros((3, 3)), np.zeros(3)
        for _, g in d.groupby("speaker"):
            X = np.c_[np.ones(len(g)), g["x"], (g["g"] == "m").astype(float)]
            Vi = np.linalg.inv(s2 * np.eye(len(g)) + t2 * np.ones((len(g), len(g))))
            A += X.T @ Vi @ X
            r += X.T @ Vi @ g["score"].to_numpy()
        gls = np.linalg.solve(A, r)
        np.testing.assert_allclose([p.mu[k], fit.coef[f"{cls}:x"], fit.coef[f"{cls}:g[m]"]], gls, atol=2e-3)


def _transform_data(seed: int = 11, n_spk: int = 50, per: int = 16) -> tuple[pd.DataFrame, dict]:
    rng = np.random.default_rng(seed)
    truth = dict(beta={0: -0.5, 1: 0.8}, gamma={0: 0.4, 1: -0.3}, sigma={0: 1.0, 1: 0.7})
    rows = []
    for i in range(n_spk):
        for y in (0, 1):
            b = rng.normal(0, 0.5)
            for a in (["A1", "A2"] if y == 0 else ["bonafide"]):
                x = rng.normal(0, 1, per)
                cond = rng.choice(["clean", "noisy"], per)
                z = ({"A1": 0.0, "A2": 0.6, "bonafide": 3.0}[a] + truth["beta"][y] * x
                     + truth["gamma"][y] * (cond == "noisy") + b + rng.normal(0, truth["sigma"][y], per))
                s = {"A1": np.exp(z), "A2": z ** 3 + z, "bonafide": 2 * z + 4}[a]   # increasing, per stratum
                rows.append(pd.DataFrame(dict(score=s, label=y, speaker=f"s{i:02d}", attack=a, x=x, cond=cond,
                                              noise=rng.normal(0, 1, per))))
    return pd.concat(rows, ignore_index=True), truth


def test_transform_covariates_recover_per_class_slopes():
    """Latent scale: the slopes are identified relative to each stratum's residual SD
    (the transform is free per stratum), :math:`\\beta_c/\\sigma_s` ↔ truth
    :math:`\\beta_c/\\sigma_c`.  About 1,600 trials per class: standard error ≈ 0.03 for the
    numeric slope and 0.06 for the dummy; tolerance 0.1 and 0.18 (3 SE)."""
    df, truth = _transform_data()
    spec = LocScaleSpec(score="score", label="label", speaker="speaker", positive=1, strata=("attack",),
                        speaker_scale=(), covariates=("x", "cond"))
    fit = fit_locscale(df, spec)
    p = fit.params
    for k, lv in enumerate(fit._data.cells.levels):
        y = 1 if lv.startswith("+") else 0
        cls = ("negative", "positive")[y]
        sd = np.exp(p.lam[k])
        assert abs(fit.coef[f"{cls}:x"] / sd - truth["beta"][y] / truth["sigma"][y]) < 0.1, lv
        assert abs(fit.coef[f"{cls}:cond[noisy]"] / sd - truth["gamma"][y] / truth["sigma"][y]) < 0.18, lv
    # in sample every stratum's distribution is still reproduced (covariates change the speakers' and
    # trials' predictions, not the stratum margins): model EER at attainable thresholds = sm.eer
    df1 = df.assign(one="all")
    m = sm.validation.model_group_measures(fit, ["one"], label="label", positive=1, trials=df1)
    assert abs(m["eer"].iloc[0] - sm.eer(df["score"], df["label"])) < 1e-6
    # prediction on new trials adds x'β of their class
    new = df.groupby("label").head(2).copy()
    mu0, _, _ = fit.latent_moments(new.assign(x=0.0, cond="clean"), marginal_over=["speaker"])
    mu1, _, _ = fit.latent_moments(new.assign(x=1.0, cond="clean"), marginal_over=["speaker"])
    np.testing.assert_allclose(mu1 - mu0, fit.coef[[f"{('negative', 'positive')[v]}:x" for v in new["label"]]],
                               atol=1e-12)
    with pytest.raises(LocScaleError, match="level 'reverb' was not seen"):
        fit.latent_moments(new.assign(cond="reverb"))


def test_score_model_keeps_an_effect_and_drops_noise():
    df, _ = _transform_data(seed=3, n_spk=30, per=10)
    base = LocScaleSpec(score="score", label="label", speaker="speaker", positive=1, strata=("attack",),
                        speaker_scale=(), name="location")
    fit = sm.score_model(df, score="score", label="label", speaker="speaker", factors=["attack"],
                         covariates=["x", "noise"], positive=1, candidates=[base])
    sel = fit.selection
    assert sel.chosen.covariates == ("x",)
    assert list(sel.table.index) == ["location", "location+label:x", "location+label:x+label:noise"]
    assert sel.table["chosen"].tolist() == [False, True, False]
    assert "label × x location (per class)" in sel.predicted
    assert sorted(sel.fitted_freely) == ["+:bonafide", "-:A1", "-:A2"]   # covariates are not strata any more
    assert list(fit.coef.index) == ["negative:x", "positive:x"]


def test_covariate_errors():
    df, _ = _transform_data(seed=1, n_spk=6, per=4)
    with pytest.raises(LocScaleError, match="covariate 'age' is not in the trial table"):
        sm.score_model(df, label="label", factors=["attack"], covariates=["age"], positive=1)
    bad = df.assign(x=np.where(np.arange(len(df)) == 5, np.nan, df["x"]))
    spec = LocScaleSpec(label="label", positive=1, speaker_scale=(), covariates=("x",))
    with pytest.raises(LocScaleError, match="covariate 'x' has missing values"):
        fit_locscale(bad, spec)
    with pytest.raises(LocScaleError, match="covariate 'c' has one level only"):
        fit_locscale(df.assign(c="a"), spec.with_(covariates=("c",)))
    d = CovariateDesign.from_frame(df, ["x", "cond"])
    assert d.names == ["x", "cond[noisy]"] and d.coef_names()[0] == "negative:x"


def test_misfit_hint_names_score_model_covariates(gauss_fit):
    """A flagged subgroup cell of a score model without a term for the subgroup column points at
    ``covariates=[...]``; with the covariate, the column is no longer reported missing."""
    from scoremix.predictive.gof import misfit_hint, missing_terms

    df, fit = gauss_fit
    assert missing_terms(fit, ["g", "x"]) == []
    bare = fit_locscale(df, fit.locscale_spec.with_(covariates=()))
    assert missing_terms(bare, ["g"]) == ["g"]
    assert "pass covariates=['g']" in misfit_hint(bare, ["g"])
