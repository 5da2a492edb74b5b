"""The stratum-aware predictive layer: fits with one transform per stratum
(``transform="monotone-by-class"``) through model_eer(by=), model_subgroup_dcf and model DET
curves, on one common score threshold (``scoremix.predictive.axis``).

Independent values: (a) the shared fit itself (a stratified fit whose strata all carry the
shared transform must reproduce it), (b) the closed-form rates of a simulated stratified
transformation model with known h_s, β and σ, (c) refits on strictly increasing maps of
the scores, and (d) the closed-form EER of a model without random effects (one Gaussian per
class, linear latent thresholds on the crossing segment).
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import brentq
from scipy.special import ndtr, ndtri

import scoremix as sm
from scoremix.predictive import PredictiveError, StrataAxis, predictive
from scoremix.predictive import stratified_model_eer
from scoremix.transform import StratifiedTransform

MEASURES = ["min_dcf", "eer", "fpr", "fnr", "ratio_overall", "fpr_ratio", "fnr_ratio"]


def _quiet(fn, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **kw)


# --------------------------------------------------------------------------- (a) shared h in strata
@pytest.fixture(scope="module")
def shared_pair():
    rng = np.random.default_rng(3)
    n = 1500
    spk = rng.integers(0, 25, n)
    bona = rng.random(n) < 0.35
    z = rng.normal(0, 0.4, 25)[spk] + np.where(bona, 1.5, -1.0) + rng.normal(size=n)
    d = pd.DataFrame(dict(score=np.exp(z), label=np.where(bona, "bonafide", "spoof"),
                          speaker=[f"s{i}" for i in spk], sex=np.where(spk % 2 == 0, "F", "M")))
    fit = sm.lmer("score ~ label + (1|speaker)", d, transform="monotone", control=dict(vcov=False))
    st = copy.copy(fit)
    st.transform = StratifiedTransform("label", ["bonafide", "spoof"], [fit.transform, fit.transform])
    st.strata = d.loc[fit.spec.data.index, "label"].rename("label")
    return d, fit, st


def test_shared_transform_in_every_stratum_gives_the_shared_numbers(shared_pair):
    d, fit, st = shared_pair
    # model EER and its score threshold
    e0, t0 = predictive(fit, positive="bonafide").eer(return_threshold=True)
    e1, t1 = predictive(st, positive="bonafide").eer(return_threshold=True)
    assert abs(e1[0] - e0[0]) < 1e-9
    assert t1[0] == pytest.approx(t0[0], rel=1e-7)
    assert sm.model_eer(st, positive="bonafide") == pytest.approx(sm.model_eer(fit, positive="bonafide"), abs=1e-9)
    # by= tables (conditional and marginal over speakers)
    for cond in (True, False):
        a = sm.model_eer(fit, positive="bonafide", by="sex", data=d, n_boot=0, conditional=cond)
        b = sm.model_eer(st, positive="bonafide", by="sex", data=d, n_boot=0, conditional=cond)
        np.testing.assert_allclose(b["eer_model"], a["eer_model"], atol=1e-9, rtol=0)
        np.testing.assert_array_equal(b["eer_empirical"], a["eer_empirical"])
    # SVEva table: the minimum DCF to 1e-9; rates at the minimiser to the precision of an
    # argmin of a smooth function (√ε of the threshold), hence 1e-7
    ra = _quiet(sm.model_subgroup_dcf, fit, d, ["sex"], positive="bonafide", n_boot=0)
    rb = _quiet(sm.model_subgroup_dcf, st, d, ["sex"], positive="bonafide", n_boot=0)
    np.testing.assert_allclose(rb.table["min_dcf"], ra.table["min_dcf"], atol=1e-9, rtol=0)
    np.testing.assert_allclose(rb.table["eer"], ra.table["eer"], atol=1e-9, rtol=0)
    np.testing.assert_allclose(rb.table[MEASURES], ra.table[MEASURES], atol=1e-7, rtol=0)
    np.testing.assert_allclose(rb.table["threshold_own"], ra.table["threshold_own"], rtol=1e-6)
    assert rb.min_dcf == pytest.approx(ra.min_dcf, abs=1e-9)
    # rates at score thresholds: the exact step rates, identical
    taus = np.quantile(d["score"], [0.05, 0.3, 0.5, 0.8, 0.97])
    pa, pb = predictive(fit, positive="bonafide"), predictive(st, positive="bonafide")
    for x, y in zip(pa.rates_at(taus), pb.rates_at(taus)):
        np.testing.assert_allclose(y, x, atol=1e-14, rtol=0)


def test_stratified_det_curve_lies_on_the_shared_curve(shared_pair):
    d, fit, st = shared_pair
    det = sm.model_det_curve(st, positive="bonafide", n_points=200)
    pa = predictive(fit, positive="bonafide")
    assert det["fpr"].is_monotonic_decreasing and det["fnr"].is_monotonic_increasing
    lo, hi = float(pa.mean.min() - 12), float(pa.mean.max() + 12)
    for _, r in det.iloc[::13].iterrows():
        # the shared model's latent threshold with the same FPR, then its FNR there
        t = brentq(lambda v: pa.rates_at([v], scale="latent")[1][0, 0] - r["fpr"], lo, hi, xtol=1e-14)
        assert pa.rates_at([t], scale="latent")[0][0, 0] == pytest.approx(r["fnr"], abs=1e-9)


# --------------------------------------------------------------------------- (b) known truth
MU = {("bonafide", "F"): 1.5, ("bonafide", "M"): 1.0, ("spoof", "F"): -1.0, ("spoof", "M"): -0.8}
SB = 0.5


def _sim_truth(seed: int, n: int = 4000, n_spk: int = 80) -> pd.DataFrame:
    """h_bonafide(S) = log S, h_spoof(S) = asinh S; h_s(S) = μ[class, sex] + b_speaker + ε,
    b ~ N(0, 0.5²), ε ~ N(0, 1)."""
    rng = np.random.default_rng(seed)
    spk = rng.integers(0, n_spk, n)
    sex = np.where(spk % 2 == 0, "F", "M")
    lab = np.where(rng.random(n) < 0.4, "bonafide", "spoof")
    mu = np.array([MU[(lv, g)] for lv, g in zip(lab, sex)])
    z = mu + rng.normal(0, SB, n_spk)[spk] + rng.normal(size=n)
    s = np.where(lab == "bonafide", np.exp(z), np.sinh(z))
    return pd.DataFrame(dict(score=s, label=lab, speaker=[f"s{i}" for i in spk], sex=sex))


def _true_rates(tau: float, g: str) -> tuple[float, float]:
    """Marginal over speakers: FNR = Φ((log τ − μ₁)/√(1+σ_b²)), FPR = 1 − Φ((asinh τ − μ₀)/√(1+σ_b²))."""
    sd = np.sqrt(1 + SB ** 2)
    h1 = np.log(tau) if tau > 0 else -np.inf
    return float(ndtr((h1 - MU[("bonafide", g)]) / sd)), float(1 - ndtr((np.arcsinh(tau) - MU[("spoof", g)]) / sd))


@pytest.fixture(scope="module")
def truth_fit():
    d = _sim_truth(11)
    return d, sm.lmer("score ~ label*sex + (1|speaker)", d, transform="monotone-by-class", control=dict(vcov=False))


def test_subgroup_dcf_rates_match_the_known_stratified_model(truth_fit):
    """Over 8 seeds (n = 4000, 80 speakers) the model's subgroup rates at its own τ* deviate
    from the closed form by SD 0.11–0.13 on the probit scale (FPR ≈ 0.5–2 %) and SD 7–10 %
    relative (FNR ≈ 0.4–0.6), with means within 2 SE of 0: the tolerances are ~4 SD."""
    d, fit = truth_fit
    r = _quiet(sm.model_subgroup_dcf, fit, d, ["sex"], positive="bonafide", conditional=False, n_boot=0)
    assert r.table.shape[0] == 2
    for _, row in r.table.iterrows():
        fnr, fpr = _true_rates(r.threshold, row["sex"])
        assert abs(ndtri(row["fpr"]) - ndtri(fpr)) < 0.5, (row["sex"], row["fpr"], fpr)
        assert abs(row["fnr"] / fnr - 1) < 0.35, (row["sex"], row["fnr"], fnr)
    # the subgroup EERs (marginal) against the closed-form EER of each sex
    tab = sm.model_eer(fit, positive="bonafide", by="sex", data=d, n_boot=0, conditional=False)
    for g in ("F", "M"):
        tau = brentq(lambda t: np.subtract(*_true_rates(t, g)), 1e-3, 1e3)
        assert abs(ndtri(tab.loc[g, "eer_model"]) - ndtri(_true_rates(tau, g)[0])) < 0.25
    # the estimated class-specific sex shifts (latent, σ = 1): truth −0.5 and +0.2 − (−0.5) = 0.7
    assert fit.fixef["sexM"] == pytest.approx(-0.5, abs=0.25)
    assert fit.fixef["labelspoof:sexM"] == pytest.approx(0.7, abs=0.3)


def test_latent_means_are_on_the_scale_of_each_h(truth_fit):
    """The per-trial latent means (fit.predict) and h_s share one origin: the model's
    P(S < τ) averaged over a class equals the empirical fraction of that class below τ."""
    d, fit = truth_fit
    pred = predictive(fit, positive="bonafide")
    y = pred.y == 1
    for q in (0.2, 0.5, 0.8):
        for cls in (y, ~y):
            tau = float(np.quantile(pred.score[cls], q))
            fnr, fpr = pred.rates_at([tau], cls)
            model_below = fnr[0, 0] if cls is y else 1 - fpr[0, 0]
            assert model_below == pytest.approx(np.mean(pred.score[cls] < tau), abs=0.03)


# --------------------------------------------------------------------------- (c) rank invariance
def test_rank_invariance_of_every_measure(truth_fit):
    d, fit = truth_fit
    y = d["score"].to_numpy()
    base = dict(eer=sm.model_eer(fit, positive="bonafide", by="sex", data=d, n_boot=0)["eer_model"].to_numpy(),
                sveva=_quiet(sm.model_subgroup_dcf, fit, d, ["sex"], positive="bonafide", n_boot=0).table[MEASURES],
                det=sm.model_det_curve(fit, positive="bonafide", n_points=100)[["fpr", "fnr"]])
    for g in (np.arctan, lambda v: pd.Series(v).rank().to_numpy(), lambda v: np.sinh(v / 3)):
        d2 = d.assign(score=g(y))
        f2 = sm.lmer("score ~ label*sex + (1|speaker)", d2, transform="monotone-by-class", control=dict(vcov=False))
        e = sm.model_eer(f2, positive="bonafide", by="sex", data=d2, n_boot=0)["eer_model"].to_numpy()
        np.testing.assert_allclose(e, base["eer"], atol=1e-9, rtol=0)
        sv = _quiet(sm.model_subgroup_dcf, f2, d2, ["sex"], positive="bonafide", n_boot=0).table[MEASURES]
        np.testing.assert_allclose(sv, base["sveva"], atol=1e-9, rtol=0)
        det = sm.model_det_curve(f2, positive="bonafide", n_points=100)[["fpr", "fnr"]]
        np.testing.assert_allclose(det, base["det"], atol=1e-9, rtol=0)


# --------------------------------------------------------------------------- (d) closed form
def test_eer_without_random_effects_equals_the_closed_form():
    """``score ~ label`` by class: every trial of class s is N(0, 1) on h_s's scale, so
    FNR = Φ(t₁), FPR = 1 − Φ(t₀).  On the knot segment where the exact step rates cross, both
    latent thresholds run linearly in one fraction f, and FNR = FPR ⇔ t₁(f) = −t₀(f): a
    linear equation in f."""
    rng = np.random.default_rng(5)
    n = 1200
    bona = rng.random(n) < 0.5
    z = rng.normal(size=n) + np.where(bona, 1.2, -1.2)
    d = pd.DataFrame(dict(score=np.where(bona, np.exp(z), np.sinh(z)), label=np.where(bona, "bonafide", "spoof")))
    fit = sm.lmer("score ~ label", d, transform="monotone-by-class", control=dict(vcov=False))
    tr = fit.transform
    v = np.unique(d["score"])
    t1 = tr.latent_threshold(v, "bonafide")
    t0 = tr.latent_threshold(v, "spoof")
    fnr, fpr = ndtr(t1), 1 - ndtr(t0)
    k = int(np.argmax(fnr >= fpr))            # crossing between knots k-1 and k
    a1, b1, a0, b0 = t1[k - 1], t1[k], t0[k - 1], t0[k]
    assert np.isfinite([a1, b1, a0, b0]).all()
    f = -(a1 + a0) / ((b1 - a1) + (b0 - a0))
    truth = ndtr(a1 + f * (b1 - a1))
    assert abs(sm.model_eer(fit, positive="bonafide", thresholds="latent") - truth) < 1e-9
    e, t = predictive(fit, positive="bonafide").eer(return_threshold=True, thresholds="latent")
    assert abs(e[0] - truth) < 1e-9
    # the attainable (default) definition: the empirical ROCCH EER, the model reproducing each class
    assert abs(sm.model_eer(fit, positive="bonafide") - sm.eer(d["score"], d["label"] == "bonafide")) < 1e-9
    assert v[k - 2] <= t[0] <= v[k - 1]        # reported as h⁻¹ reports it for a shared h


# --------------------------------------------------------------------------- axis and errors
def test_axis_is_continuous_monotone_and_inverts(truth_fit):
    _, fit = truth_fit
    ax = StrataAxis(fit.transform)
    u = np.linspace(ax.U[1] - 3, ax.U[-2] + 3, 4001)
    lat = ax.latent(u)
    assert np.all(lat[:, 1:] >= lat[:, :-1])
    # a stratum is −∞ below its smallest fitted score (bona fide scores are > 0 here) and
    # finite from there on: continuous where finite
    for row in lat:
        fin = np.flatnonzero(np.isfinite(row))
        assert fin.size > 1000 and np.all(np.diff(fin) == 1)            # one finite stretch
        assert np.isneginf(row[:fin[0]]).all() and np.isposinf(row[fin[-1] + 1:]).all()
    # continuous at the knots (between them it is linear, or logarithmic at a stratum's ends)
    k = np.arange(2, ax.U.size - 2)
    k = k[np.isfinite(ax.T[:, k - 1]).all(axis=0) & np.isfinite(ax.T[:, k + 1]).all(axis=0)]
    for eps in (-1e-11, 1e-11):
        np.testing.assert_allclose(ax.latent(ax.U[k] + eps), ax.T[:, k], atol=1e-6, rtol=0)
    # knots: exact latent thresholds of the pooled scores
    np.testing.assert_array_equal(ax.latent(ax.U[1:-1]), ax.T[:, 1:-1])
    np.testing.assert_array_equal(ax.from_score(ax.values[1:])[:, :],
                                  np.stack([fit.transform.latent_threshold(ax.values[1:], lv) for lv in ax.levels]))
    for s in range(ax.n_strata):
        t = lat[s, ::97][np.isfinite(lat[s, ::97])]
        np.testing.assert_allclose(ax.latent(ax.position(t, s))[s], t, atol=1e-10)
    assert np.isneginf(ax.latent(-np.inf)).all() and np.isposinf(ax.latent(np.inf)).all()


def test_named_errors(truth_fit):
    d, fit = truth_fit
    f2 = sm.lmer("score ~ label", d.assign(cls=d.label), transform="monotone-by-class",
                 control=dict(strata="cls", vcov=False))
    with pytest.raises(sm.SubgroupError, match="strata column 'cls' not in the trial table"):
        _quiet(sm.model_subgroup_dcf, f2, d, ["sex"], positive="bonafide", n_boot=0)
    with pytest.raises(PredictiveError, match="stratum 'replay' \\(column 'cls'\\) was not seen in fitting"):
        predictive(f2, d.assign(cls=np.where(d.label == "spoof", "replay", d.label)), positive="bonafide")
    with pytest.raises(ValueError, match="does not support a transform per stratum"):
        sm.bayes_lmer("score ~ label", d, transform=fit.transform, draws=10, tune=10, chains=1)
    with pytest.raises(ValueError, match="'monotone-by-class'\\) is not supported"):
        sm.bayes_lmer("score ~ label", d, transform="monotone-by-class", draws=10, tune=10, chains=1)
    with pytest.raises(sm.transform.TransformError, match="one entry per model-frame row"):
        stratified_model_eer(fit, positive="bonafide", neg_mask=np.ones(3, bool))


# --------------------------------------------------------------------------- study files
TOML = """
[study]
name = "t"
[data]
file = "x.csv"
[[models]]
name = "m"
formula = "score ~ label + (1 | speaker)"
"""


@pytest.mark.parametrize("patch, needle", [
    ({"strata": "label"}, r"models\[0\]\.strata: applies only with transform = \"monotone-by-class\""),
    ({"transform": "monotone-by-class", "backend": "bayes"},
     r"models\[0\]\.transform: 'monotone-by-class' needs backend 'native'"),
])
def test_study_toml_accepts_monotone_by_class_with_strata(patch, needle):
    import tomllib

    from scoremix.study import StudyConfigError, parse_study

    raw = tomllib.loads(TOML)
    raw["models"][0].update(patch)
    with pytest.raises(StudyConfigError, match=needle):
        parse_study(raw, base_dir=".")
    raw = tomllib.loads(TOML)
    raw["models"][0].update({"transform": "monotone-by-class", "strata": "dgrp"})
    m = parse_study(raw, base_dir=".").models[0]
    assert (m.transform, m.strata) == ("monotone-by-class", "dgrp")


def test_study_fit_model_fits_the_stratified_model(monkeypatch):
    """The study passes transform= and control=dict(strata=...) to lmer; its model_eer table
    is the one of model_eer(by=) on the same fit."""
    import scoremix.lme.api as api
    from scoremix.study.config import ModelConfig, ModelEERConfig
    from scoremix.study.tasks import fit_model

    seen = {}
    real = api.lmer

    def spy(*a, **kw):
        seen.update(kw)
        return real(*a, **kw)

    monkeypatch.setattr(api, "lmer", spy)
    d = _sim_truth(2, n=1500, n_spk=30)
    d["y"] = (d["label"] == "bonafide").astype(int)
    d["cls"] = d["label"]
    m = ModelConfig(name="m", formula="score ~ label*sex + (1 | speaker)", transform="monotone-by-class",
                    strata="cls")
    out = _quiet(fit_model, m, "sys", d, 0, ModelEERConfig(by=["sex"], n_boot=20), None, "speaker")
    assert seen["transform"] == "monotone-by-class" and seen["control"] == {"strata": "cls"}
    tab = out["model_eer"]
    assert set(tab["transform"]) == {"monotone-by-class"}
    fit = real("score ~ label*sex + (1 | speaker)", d, transform="monotone-by-class", control=dict(strata="cls"))
    direct = _quiet(sm.model_eer, fit, by="sex", label="y", data=d, n_boot=20, speaker="speaker")
    got = tab[tab["by"] == "sex"].set_index("cell")
    np.testing.assert_allclose(got["eer_model"], direct["eer_model"].to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(got["eer_empirical_lo"], direct["eer_empirical_lo"].to_numpy(), rtol=1e-12)
    assert list(got["fit_ok"]) == list(direct["fit_ok"])
    assert out.get("det_png", b"")[:4] == b"\x89PNG"


def test_cli_fit_stratified(tmp_path, capsys):
    from scoremix.cli import main

    d = _sim_truth(4, n=1200, n_spk=24)
    path = tmp_path / "t.csv"
    d.to_csv(path, index=False)
    rc = main(["fit", str(path), "--formula", "score ~ label*sex + (1|speaker)", "--transform", "monotone-by-class",
               "--strata", "label", "--positive", "bonafide", "--label", "label", "--model-eer", "sex"])
    out = capsys.readouterr().out
    assert rc == 0 and "Model-based vs empirical EER" in out
    rc = main(["fit", str(path), "--formula", "score ~ label", "--strata", "label"])
    assert rc != 0 and "--strata applies only with --transform monotone-by-class" in capsys.readouterr().err
