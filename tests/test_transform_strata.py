"""Class-stratified transformation model: ``lmer(..., transform="monotone-by-class")``.

Checks: equality with ``ordinal::clm(bin ~ x, nominal = ~ label, link = "probit")`` (the
no-random-effects special case: class-specific thresholds, common covariate effect; stored
reference + live R), exact rank invariance of the stratified model EER, ties and saturated
ends, identification (absorbed columns, fixed σ levels), the model EER against the EER of
the known generating model, the shared-h model unchanged, named errors.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.special import ndtr, ndtri

import scoremix as sm
from scoremix.predictive import stratified_model_eer
from scoremix.transform import StratifiedTransform, UnknownStratumError
from scoremix.transform.errors import SingleClassError, TooFewDistinctScoresError, TransformError

DATA = Path(__file__).resolve().parent / "data"


def _fit_clm_case():
    d = pd.read_csv(DATA / "strata_clm.csv")
    return d, sm.lmer("bin ~ x + label", d, transform="monotone-by-class")


def _compare_clm(fit, ref, tol=1e-5):
    assert fit.loglik == pytest.approx(ref["loglik"], abs=1e-6)
    assert fit.fixef["x"] == pytest.approx(ref["beta_x"], abs=tol)
    assert np.sqrt(fit.vcov.loc["x", "x"]) == pytest.approx(ref["se_x"], rel=1e-4)
    for lv in ("bonafide", "spoof"):
        a = fit.transform.stratum(lv).alpha
        r = np.asarray(ref[f"thresholds_{lv}"])
        # no stratum intercept (absorbed columns 0): the edges are clm's class thresholds
        # themselves, so the latent means x'β of fit.predict() are on h_s's scale
        np.testing.assert_allclose(a, r, atol=tol)


def test_equals_clm_nominal_thresholds():
    _, fit = _fit_clm_case()
    assert isinstance(fit.transform, StratifiedTransform)
    assert fit.fixef["labelspoof"] == 0.0 and fit.fixef["(Intercept)"] == 0.0
    assert fit.fit_info["transform"]["absorbed_fixef"] == ["(Intercept)", "labelspoof"]
    _compare_clm(fit, json.loads((DATA / "strata_clm_ref.json").read_text()))


def test_live_clm_nominal(tmp_path):
    r = shutil.which("Rscript")
    ok = r is not None and subprocess.run(
        [r, "-e", "suppressMessages({library(ordinal); library(jsonlite)}); cat('ok')"],
        capture_output=True, text=True, timeout=120).stdout.strip().endswith("ok")
    if not ok:
        pytest.skip("R with ordinal and jsonlite is not installed")
    _, fit = _fit_clm_case()
    out = tmp_path / "o.json"
    script = Path(__file__).resolve().parents[1] / "r_scripts" / "fit_clm_nominal.R"
    subprocess.run([r, str(script), str(DATA / "strata_clm.csv"), str(out)], check=True, timeout=300)
    _compare_clm(fit, json.loads(out.read_text()))


def _sim(n=1500, seed=3):
    """Bona fide: h_1(S) = log S (S log-normal), spoof: h_0(S) = asinh(S) with a shift;
    speaker shift common to both classes, attack shift for spoof."""
    rng = np.random.default_rng(seed)
    spk = rng.integers(0, 25, n)
    bona = rng.random(n) < 0.35
    att = rng.integers(0, 4, n)
    b = rng.normal(0, 0.4, 25)
    a = rng.normal(0, 0.5, 4)
    z = b[spk] + np.where(bona, 0.0, a[att]) + rng.normal(size=n)
    s = np.where(bona, np.exp(z + 2.0), np.sinh(z - 0.5))
    return pd.DataFrame(dict(score=s, label=np.where(bona, "bonafide", "spoof"),
                             speaker=[f"s{i}" for i in spk],
                             attack=np.where(bona, "bonafide", [f"A{i}" for i in att])))


FORMULA = 'score ~ label + (1|speaker) + (0 + dummy(label, "spoof")|attack)'


@pytest.fixture(scope="module")
def sim_fit():
    d = _sim()
    return d, sm.lmer(FORMULA, d, dispersion="~ label", transform="monotone-by-class")


def test_rank_invariance(sim_fit):
    d, fit = sim_fit
    e0 = stratified_model_eer(fit, positive="bonafide")
    y = d["score"].to_numpy()
    for g in (np.arctan, lambda v: pd.Series(v).rank().to_numpy(),
              lambda v: np.sinh(v / 3)):
        f2 = sm.lmer(FORMULA, d.assign(score=g(y)), dispersion="~ label",
                     transform="monotone-by-class", control=dict(vcov=False))
        assert abs(f2.loglik - fit.loglik) < 1e-7
        assert abs(stratified_model_eer(f2, positive="bonafide") - e0) <= 1e-9


def test_identification_and_transform(sim_fit):
    d, fit = sim_fit
    assert list(fit.sigma_by) == [1.0, 1.0]           # both classes' SD fixed: h_s carries it
    assert fit.fit_info["transform"]["fixed_sigma_levels"] == ["bonafide", "spoof"]
    # the estimated h_s are affine in the true transforms (log S, asinh S) within noise
    for lv, true in (("bonafide", np.log), ("spoof", np.arcsinh)):
        s = np.sort(d.loc[d.label == lv, "score"].to_numpy())[20:-20]
        h = fit.transform(s, lv)
        assert np.corrcoef(h, true(s))[0, 1] > 0.998
        assert np.all(np.diff(fit.transform.stratum(lv).alpha) > 0)
    # per-row strata vs scalar stratum
    st = fit.strata.to_numpy(dtype=object)
    y = fit.spec.y
    np.testing.assert_array_equal(fit.transform.lower(y, st)[st == "spoof"],
                                  fit.transform.lower(y[st == "spoof"], "spoof"))
    assert np.all(np.isfinite(fit.residuals))
    with pytest.raises(UnknownStratumError, match="'other'.*known strata"):
        fit.transform(0.0, "other")
    with pytest.raises(TypeError, match="needs the stratum"):
        fit.transform(0.0)
    rt = StratifiedTransform.from_dict(json.loads(json.dumps(fit.transform.to_dict())))
    np.testing.assert_allclose(rt(y, st), fit.transform(y, st))


def test_model_eer_against_truth_and_formula(sim_fit):
    d, fit = sim_fit
    # hand formula: FNR(τ) = mean_pos Φ((h_1(τ) − m)/s), FPR(τ) = mean_neg [1 − Φ((h_0(τ) − m)/s)]
    from scoremix.model_eer import trial_moments
    mom = trial_moments(fit, label="label", positive="bonafide")
    e = stratified_model_eer(fit, positive="bonafide", thresholds="latent")
    taus = np.sort(d["score"].to_numpy())
    pos, neg = mom.y.to_numpy() == 1, mom.y.to_numpy() == 0
    fnr = np.array([ndtr((fit.transform.latent_threshold(t, "bonafide") - mom["mean"][pos])
                         / mom["sd"][pos]).mean() for t in taus[::15]])
    fpr = np.array([1 - ndtr((fit.transform.latent_threshold(t, "spoof") - mom["mean"][neg])
                             / mom["sd"][neg]).mean() for t in taus[::15]])
    k = np.argmax(fnr >= fpr)
    assert k > 0
    assert fnr[k - 1] - 1e-12 <= e <= fnr[k] + 1e-12      # the crossing lies between
    assert fpr[k] - 1e-12 <= e <= fpr[k - 1] + 1e-12
    assert sm.model_eer(fit, positive="bonafide", thresholds="latent") == e     # one path: the predictive layer
    assert sm.model_eer(fit, positive="bonafide") == stratified_model_eer(fit, positive="bonafide")
    # by= (one speaker's trials): the crossing of that speaker's hand-computed rates
    tab = sm.model_eer(fit, positive="bonafide", by="speaker", data=d, n_boot=0, thresholds="latent")
    spk = d.loc[mom.index, "speaker"].to_numpy()
    sp = tab.index[0]
    m = spk == sp
    fnr = np.array([ndtr((fit.transform.latent_threshold(t, "bonafide") - mom["mean"][pos & m])
                         / mom["sd"][pos & m]).mean() for t in taus])
    fpr = np.array([1 - ndtr((fit.transform.latent_threshold(t, "spoof") - mom["mean"][neg & m])
                             / mom["sd"][neg & m]).mean() for t in taus])
    k = np.argmax(fnr >= fpr)
    es = tab.loc[sp, "eer_model"]
    assert fnr[k - 1] - 1e-12 <= es <= fnr[k] + 1e-12 and fpr[k] - 1e-12 <= es <= fpr[k - 1] + 1e-12
    assert es == stratified_model_eer(fit, positive="bonafide", pos_mask=m, neg_mask=m, thresholds="latent")
    # the empirical EER of the data the model was fitted on
    emp = sm.eer(d["score"].to_numpy(), (d.label == "bonafide").astype(int).to_numpy())
    assert abs(e - emp) < 0.02


def test_ties_and_saturation():
    d = _sim(900, seed=5)
    s = np.round(d["score"].to_numpy(), 1)          # many ties
    s[:20] = np.where(d.label.to_numpy()[:20] == "bonafide", np.inf, -np.inf)
    fit = sm.lmer(FORMULA, d.assign(score=s), dispersion="~ label",
                  transform="monotone-by-class", control=dict(vcov=False))
    for lv in ("bonafide", "spoof"):
        t = fit.transform.stratum(lv)
        sv = s[d.label == lv]
        assert t.n_cells == np.unique(sv).size
        assert t.lower(-np.inf) == -np.inf
    e = stratified_model_eer(fit, positive="bonafide")
    assert 0 < e < 0.5


def test_dispersion_nested_in_strata():
    d = _sim(1200, seed=8)
    d["dgrp"] = d["attack"]
    fit = sm.lmer(FORMULA, d, dispersion="~ dgrp", transform="monotone-by-class",
                  control=dict(vcov=False))
    sb = fit.sigma_by
    # one fixed level per stratum: bonafide (its own stratum) and the first attack A0
    assert sb["bonafide"] == 1.0 and sb["A0"] == 1.0
    assert all(0.5 < sb[a] < 2.0 for a in ("A1", "A2", "A3"))


def test_shared_h_unchanged():
    d = _sim(600, seed=9)
    f1 = sm.lmer("score ~ label + (1|speaker)", d, transform="monotone", control=dict(vcov=False))
    assert not isinstance(f1.transform, StratifiedTransform)
    assert f1.fixef["labelspoof"] != 0.0


def test_named_errors():
    d = _sim(300, seed=2)
    with pytest.raises(TransformError, match="strata column 'cls'"):
        sm.lmer("score ~ label", d, transform="monotone-by-class", control=dict(strata="cls"))
    d2 = d.copy()
    d2.loc[d2.label == "bonafide", "score"] = np.where(
        np.arange((d2.label == "bonafide").sum()) % 2 == 0, 1.0, 2.0)
    # a stratum with two distinct scores (or one: a point mass) is fitted, not refused: its
    # transform is the stratum's empirical CDF on the probit scale (closed form, no random effects)
    f2 = sm.lmer("score ~ label", d2, transform="monotone-by-class", control=dict(vcov=False))
    hb = f2.transform.stratum("bonafide")
    share = float((d2.loc[d2.label == "bonafide", "score"] == 1.0).mean())
    assert hb.alpha == pytest.approx([ndtri(share)], abs=1e-12)
    with pytest.raises(SingleClassError, match="single level"):
        sm.lmer("score ~ 1", d.assign(label="spoof"), transform="monotone-by-class")
    fg = sm.lmer("score ~ label", d, transform="monotone", control=dict(vcov=False))
    with pytest.raises(TransformError, match="monotone-by-class"):
        stratified_model_eer(fg, positive="bonafide")
