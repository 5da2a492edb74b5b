"""`LmerResult`: schema round trip, R-layout accessors, predict, r2, summary, the lmer API."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import lme_native_helpers as H
from scoremix.lme import native
from scoremix.lme.result import LmerResult

SCHEMA_KEYS = {"schema", "backend", "formula", "dispersion", "REML", "nobs", "ngrps", "fixef", "se",
               "vcov", "theta", "sigma", "sigma_by", "varcorr", "loglik", "reml_criterion",
               "deviance", "aic", "bic", "converged", "singular", "ranef"}


@pytest.fixture(scope="module")
def sleep_fit():
    return native.fit(H.sleepstudy_spec())


def test_to_dict_has_exactly_the_schema_keys_and_is_json(sleep_fit, tmp_path):
    d = sleep_fit.to_dict()
    assert set(d) == SCHEMA_KEYS
    assert d["schema"] == "scoremix.lmer/1" and d["backend"] == "native"
    assert d["reml_criterion"] == pytest.approx(-2 * d["loglik"]) and d["deviance"] is None
    path = tmp_path / "fit.json"
    text = sleep_fit.to_json(path)
    assert json.loads(path.read_text()) == json.loads(text)
    assert d["varcorr"][-1] == dict(grp="Residual", var1=None, var2=None,
                                    vcov=pytest.approx(sleep_fit.sigma ** 2), sdcor=sleep_fit.sigma)
    assert d["ranef"]["Subject"]["terms"] == ["(Intercept)", "Days"]


def test_from_dict_round_trip(sleep_fit):
    spec = sleep_fit.spec
    back = LmerResult.from_dict(json.loads(sleep_fit.to_json()), spec)
    pd.testing.assert_series_equal(back.fixef, sleep_fit.fixef)
    pd.testing.assert_frame_equal(back.vcov, sleep_fit.vcov)
    pd.testing.assert_series_equal(back.theta, sleep_fit.theta)
    pd.testing.assert_frame_equal(back.varcorr, sleep_fit.varcorr)
    for g in sleep_fit.ranef:
        pd.testing.assert_frame_equal(back.ranef[g], sleep_fit.ranef[g])
        pd.testing.assert_frame_equal(back.ranef_condsd[g], sleep_fit.ranef_condsd[g])
    pd.testing.assert_series_equal(back.fitted, sleep_fit.fitted)
    assert back.aic == pytest.approx(sleep_fit.aic) and back.bic == pytest.approx(sleep_fit.bic)
    assert back.to_dict() == sleep_fit.to_dict()


def test_from_dict_of_lme4_output_gives_r_fitted_and_predictions():
    """An lme4 fit (JSON from R) rebuilt with the spec reproduces R's fitted values,
    residuals and predict() on new data (a new level gets random effect 0)."""
    ref = H.load_ref("sleepstudy")
    spec = H.sleepstudy_spec()
    m = LmerResult.from_dict(ref["reml"], spec)
    assert m.backend == "lme4"
    np.testing.assert_allclose(m.fitted.to_numpy(), ref["reml"]["fitted"], rtol=1e-10)
    np.testing.assert_allclose(m.residuals.to_numpy(), ref["reml"]["residuals"], atol=1e-9)
    new = pd.DataFrame(ref["predict"]["newdata"])
    new["Subject"] = new["Subject"].astype(str)
    np.testing.assert_allclose(m.predict(new, allow_new_levels=True).to_numpy(), ref["predict"]["full"],
                               rtol=1e-10)
    np.testing.assert_allclose(m.predict(new, re_form="~0").to_numpy(), ref["predict"]["fixed"], rtol=1e-10)
    np.testing.assert_allclose(m.predict().to_numpy(), ref["reml"]["fitted"], rtol=1e-10)
    # a re_form formula keeps the random terms it names (here the only one: as re_form=None)
    np.testing.assert_allclose(m.predict(new, re_form="~(Days|Subject)", allow_new_levels=True).to_numpy(),
                               ref["predict"]["full"], rtol=1e-10)
    with pytest.raises(ValueError, match="re_form"):
        m.predict(new, re_form="~(1|Nosuchgroup)")


def test_from_dict_without_spec_keeps_estimates_and_explains_what_needs_it():
    ref = H.load_ref("penicillin")["reml"]
    m = LmerResult.from_dict(ref)
    assert m.fixef["(Intercept)"] == ref["fixef"]["(Intercept)"]
    assert list(m.ranef) == ["plate", "sample"]
    assert m.ranef["sample"].shape == (6, 1)
    with pytest.raises(ValueError, match="needs the model spec"):
        m.fitted


def test_ranef_layout_joins_double_bar_terms():
    """(1 + Days || Subject) → two terms of one grouping factor: ranef joins their columns."""
    d = H.load_csv("sleepstudy")
    t1 = H.term(d, "Subject", ["(Intercept)"])
    t2 = H.term(d, "Subject", ["Days"], name="Subject.1")
    spec = H.spec(d, "Reaction", ["(Intercept)", "Days"], [t1, t2], "Reaction ~ Days + (Days || Subject)")
    m = native.fit(spec)
    assert list(m.ranef) == ["Subject"]
    assert list(m.ranef["Subject"].columns) == ["(Intercept)", "Days"]
    assert list(m.varcorr["grp"]) == ["Subject", "Subject.1", "Residual"]
    assert list(m.theta.index) == ["Subject.(Intercept)", "Subject.Days"]  # as getME(m, "theta")
    # lme4 (default controls, so 1e-3): sdcor 25.051328, 5.988187, 25.565279
    np.testing.assert_allclose(m.varcorr["sdcor"], [25.051328, 5.988187, 25.565279], rtol=1e-3)
    back = LmerResult.from_dict(m.to_dict(), spec)
    pd.testing.assert_frame_equal(back.ranef["Subject"], m.ranef["Subject"])
    pd.testing.assert_series_equal(back.fitted, m.fitted)


def test_tvalues_and_names(sleep_fit):
    np.testing.assert_allclose(sleep_fit.tvalues, sleep_fit.fixef / np.sqrt(np.diag(sleep_fit.vcov)))
    assert sleep_fit.ngrps == {"Subject": 18} and sleep_fit.nobs == 180
    assert sleep_fit.npar == 6


def test_summary_and_repr_look_like_lme4(sleep_fit):
    s = sleep_fit.summary()
    for piece in ["Linear mixed model fit by REML", "REML criterion at convergence: 1743.6",
                  "Scaled residuals:", "Random effects:", "Subject  (Intercept)", "Residual",
                  "Number of obs: 180, groups:  Subject, 18", "Fixed effects:", "t value",
                  "Correlation of Fixed Effects:", "-0.138"]:
        assert piece in s, piece
    # lme4 prints the scaled residual quantiles -3.9536 -0.4634 0.0231 0.4634 5.1793
    for q in ["-3.9536", "-0.4634", "0.0231", "0.4634", "5.1793"]:
        assert q in s
    assert "REML criterion 1743.628" in repr(sleep_fit)
    ml = native.fit(H.sleepstudy_spec(), REML=False).summary()
    assert "maximum likelihood" in ml and "1763.9" in ml and "1751.9" in ml


def test_r2_nakagawa_hand_formula():
    """R² from the lme4 reference estimates by the Nakagawa–Schielzeth formula (performance
    is not installed): var_f = var(Xβ), var_r = mean_i x_i'Σx_i (Johnson 2014), var_e = σ²."""
    for name, key, make in [("sleepstudy", "reml", H.sleepstudy_spec),
                            ("detector", "reml", H.detector_spec),
                            ("detector", "slope", lambda: H.detector_spec(slope=True))]:
        ref = H.load_ref(name)[key]
        spec = make()
        m = native.fit(spec)
        eta = spec.X @ np.array(list(ref["fixef"].values()))
        var_f = np.var(eta, ddof=1)
        var_r = 0.0
        for t in spec.terms:
            rows = [v for v in ref["varcorr"] if v["grp"] == t.group]
            S = np.zeros((t.p, t.p))
            for v in rows:
                i = t.term_names.index(v["var1"])
                j = t.term_names.index(v["var2"]) if v["var2"] is not None else i
                S[i, j] = S[j, i] = v["vcov"]
            var_r += np.mean(np.sum((t.X @ S) * t.X, axis=1))
        var_e = ref["sigma"] ** 2
        r2 = m.r2()
        assert r2["marginal"] == pytest.approx(var_f / (var_f + var_r + var_e), rel=1e-4)
        assert r2["conditional"] == pytest.approx((var_f + var_r) / (var_f + var_r + var_e), rel=1e-4)


def test_r2_random_intercept_closed_form():
    """Penicillin: no fixed variance, so marginal R² = 0 and conditional =
    (σ²_plate + σ²_sample) / (σ²_plate + σ²_sample + σ²) from lme4's VarCorr."""
    ref = H.load_ref("penicillin")["reml"]
    v = [r["vcov"] for r in ref["varcorr"]]
    r2 = native.fit(H.penicillin_spec()).r2()
    assert r2["marginal"] == pytest.approx(0.0, abs=1e-20)
    assert r2["conditional"] == pytest.approx((v[0] + v[1]) / sum(v), rel=1e-4)


# ------------------------------------------------------------------ the lmer API
def test_lmer_formula_api_equals_hand_spec():
    pytest.importorskip("scoremix.lme.model_frame")
    from scoremix.lme.api import lmer
    ref = H.load_ref("pastes")["reml"]
    d = H.load_csv("pastes")
    m = lmer("strength ~ 1 + (1 | batch/cask)", d)
    assert m.reml_criterion == pytest.approx(ref["reml_criterion"], rel=1e-8)
    np.testing.assert_allclose(m.varcorr["sdcor"], [v["sdcor"] for v in ref["varcorr"]], rtol=1e-4)
    assert list(m.varcorr["grp"]) == [v["grp"] for v in ref["varcorr"]]
    dd = H.load_csv("detector")
    md = lmer("score ~ label + x + (1 | speaker) + (1 | attack)", dd, weights=dd["w"].to_numpy(), REML=False)
    assert md.deviance == pytest.approx(H.load_ref("detector")["ml"]["deviance"], rel=1e-8)


def test_lmer_unknown_backend_is_named():
    from scoremix.lme.api import lmer
    with pytest.raises(ValueError, match="unknown backend 'julia'"):
        lmer("y ~ 1 + (1 | g)", pd.DataFrame({"y": [1.0, 2.0], "g": ["a", "b"]}), backend="julia")


def test_predict_unseen_levels_warn_by_default_and_refuse_when_asked():
    """Unseen grouping levels: a warning naming the factor and level by default, lme4's
    error with allow_new_levels=False, silence with True; seen levels never warn."""
    import warnings

    from scoremix.lme.errors import NewLevelError

    ref = H.load_ref("sleepstudy")
    m = LmerResult.from_dict(ref["reml"], H.sleepstudy_spec())
    new = pd.DataFrame({"Days": [1.0, 2.0], "Subject": ["308", "999"]})
    with pytest.warns(UserWarning, match=r"1 row\(s\) with levels of 'Subject' unseen.*'999'"):
        p = m.predict(new)
    assert p.iloc[1] == pytest.approx(m.predict(new, re_form="~0").iloc[1], rel=1e-12)
    with pytest.raises(NewLevelError, match="'999'.*allow_new_levels=True"):
        m.predict(new, allow_new_levels=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.predict(new, allow_new_levels=True)
        m.predict(new.iloc[:1])
