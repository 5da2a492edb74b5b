"""The fast one-transform fit (bayes_lmer(..., transform=<lmer fit>), method="collapsed"):
latent points + collapsed sampler, against the exact cell likelihood (method="joint") on
the same data and fixed transform."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pymc")


def _data(seed=2, n=400, n_spk=12):
    rng = np.random.default_rng(seed)
    spk = rng.integers(0, n_spk, n)
    y = rng.random(n) < 0.5
    b = rng.normal(0, 0.5, n_spk)
    z = -1.0 + 2.0 * y + b[spk] + rng.standard_normal(n) * np.where(y, 0.8, 1.0)
    s = np.round(np.exp(0.7 * z), 4)  # a monotone map; 4 decimals: few ties
    return pd.DataFrame({"score": s, "label": np.where(y, "target", "nontarget"),
                         "speaker": [f"s{k:02d}" for k in spk]})


def test_latent_points_are_the_ml_fits_latent_responses():
    import scoremix as sm
    from scoremix.bayes.latent import latent_point_spec
    from scoremix.lme.model_frame import build_model_spec

    df = _data()
    f = "score ~ label + (1|speaker)"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ml = sm.lmer(f, df, dispersion="~ label", transform="monotone")
    spec = build_model_spec(f, df, dispersion="~ label")
    sp, tr, (lo, hi) = latent_point_spec(f, df, spec, ml, "~ label", None)
    z = sp.y
    assert tr is ml.transform
    # every latent point lies in its score's cell, and the points equal the ML fit's latent responses
    assert np.all((z > lo) & (z <= hi))
    lat = ml.latent_gaussian_fit()
    np.testing.assert_allclose(z, lat.require_spec("test").y, rtol=0, atol=1e-12)


@pytest.mark.slow
def test_fast_path_agrees_with_exact_cells():
    import scoremix as sm

    df = _data()
    f = "score ~ label + (1|speaker)"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ml = sm.lmer(f, df, dispersion="~ label", transform="monotone")
        fast = sm.bayes_lmer(f, df, dispersion="~ label", transform=ml, draws=600, tune=500, chains=2, cores=1,
                             seed=1, progress=False)
        exact = sm.bayes_lmer(f, df, dispersion="~ label", transform=ml.transform, method="joint", draws=600,
                              tune=500, chains=2, cores=1, seed=2, progress=False)
    assert fast.method == "collapsed" and exact.method == "joint"
    assert fast.cells is not None
    for name in ["labeltarget", "sigma_target", "sigma_nontarget", "sd_speaker__(Intercept)"]:
        a, b = fast.draws(name).ravel(), exact.draws(name).ravel()
        tf = fast.diagnostics.table.loc[name]
        te = exact.diagnostics.table.loc[name]
        se = np.hypot(a.std() / np.sqrt(tf["ess_bulk"]), b.std() / np.sqrt(te["ess_bulk"]))
        # within MC error, plus the points' approximation (cell widths ~1e-3 on the latent scale)
        assert abs(a.mean() - b.mean()) < 4 * se + 0.01, (name, a.mean(), b.mean(), se)
        assert a.std() == pytest.approx(b.std(), rel=0.15)


def test_fast_path_tables_by_a_column_of_the_data():
    """Regression (study with ``transform = "monotone"`` and ``by=``): the fitted frame keeps
    the observed scores, so ``model_eer(fit, by=<a data column>, data=df)`` matches ``df`` and
    its empirical column is the per-group ROCCH EER of the raw scores."""
    import scoremix as sm

    df = _data().assign(group=lambda d: np.where(d["speaker"] < "s06", "a", "b"))
    f = "score ~ label + (1|speaker)"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.bayes_lmer(f, df, dispersion="~ label", transform="monotone", draws=100, tune=100, chains=1,
                            cores=1, seed=3, progress=False)
        tab = sm.model_eer(fit, by="group", data=df, progress=False).summary
    np.testing.assert_array_equal(fit.spec.data["score"].to_numpy(), df["score"].to_numpy())
    for g, part in df.groupby("group"):
        want = sm.eer(part["score"].to_numpy(), (part["label"] == "target").to_numpy())
        assert tab.loc[g, "eer_empirical"] == pytest.approx(want, abs=1e-12)
        assert 0.0 < tab.loc[g, "eer_model"] < 0.5
