"""Model-based rates at attainable thresholds (``scoremix.predictive.attainable``).

Independent values:
(a) a stratified transformation model without random effects reproduces every stratum's
    empirical CDF (closed-form ML), so its model EER / minimum DCF must equal ``sm.eer`` /
    ``sm.min_dcf`` of the data to 1e-9 — on tied, saturated (a stratum entirely at −∞, a
    stratum with two values) and non-concave (bimodal negatives) data;
(b) the ROCCH EER of a set of operating points equals its dual form
    max_w min_k [w·Pmiss_k + (1−w)·Pfa_k] (computed here by brute force over a fine w grid
    plus the exact breakpoints);
(c) for a Gaussian model with continuous scores the attainable EER converges to the closed
    form Φ(−Δ/(σ0+σ1)) as the thresholds get dense.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.special import ndtr

import scoremix as sm
from scoremix.trials import NonFiniteScoreError
from scoremix.predictive import predictive
from scoremix.predictive.attainable import attainable_measures, hull_eer, score_rates, attainable_scores


def _quiet(fn, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **kw)


def _tied_nonconcave(seed=1, n=700):
    rng = np.random.default_rng(seed)
    lab = rng.random(n) < 0.4
    neg = np.where(rng.random(n) < 0.5, rng.normal(-1, 0.5, n), rng.normal(2.5, 0.3, n))  # bimodal
    z = np.where(lab, rng.normal(2, 1, n), neg)
    return pd.DataFrame(dict(score=np.round(z * 2) / 2, label=np.where(lab, "bonafide", "spoof")))


def _saturated(seed=2, n=900):
    rng = np.random.default_rng(seed)
    att = rng.choice(["bonafide", "A1", "A2", "A3"], n, p=[.3, .3, .2, .2])
    z = np.where(att == "bonafide", rng.normal(2, 1, n), np.where(att == "A1", rng.normal(-1, 1, n), 0.0))
    s = np.round(z * 3) / 3
    s[att == "A2"] = -np.inf                               # p = 0 for every trial: a point mass
    s[att == "A3"] = np.where(rng.random(n) < 0.5, 1.0, 2.0)[att == "A3"]   # two values, inside bona fide's range
    return pd.DataFrame(dict(score=s, label=np.where(att == "bonafide", "bonafide", "spoof"), attack=att))


CASES = {
    "tied_nonconcave": (_tied_nonconcave, "label"),
    "saturated": (_saturated, "attack"),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def stratified(request):
    make, strata = CASES[request.param]
    d = make()
    fit = _quiet(sm.lmer, "score ~ label", d, transform="monotone-by-class",
                 control=dict(vcov=False, strata=strata))
    assert fit.fit_info["transform"]["closed_form"]
    return d, fit


def test_stratified_fit_gives_the_empirical_eer_and_min_dcf_exactly(stratified):
    d, fit = stratified
    y = (d["label"] == "bonafide").to_numpy()
    e = sm.model_eer(fit, positive="bonafide")
    assert abs(float(e) - sm.eer(d["score"], y)) < 1e-9
    for pt in (0.05, 0.5, 0.01):
        r = _quiet(sm.model_subgroup_dcf, fit, d.assign(speaker=np.arange(len(d)) % 7, g="x"), ["g"],
                   positive="bonafide", n_boot=0, p_target=pt)
        md = sm.min_dcf(d["score"], y, p_target=pt)
        assert abs(r.min_dcf - md.value) < 1e-9
        assert abs(r.overall["eer"] - sm.eer(d["score"], y)) < 1e-9
        assert r.threshold == md.threshold
    # every operating point, not only the optima
    pred = predictive(fit, positive="bonafide")
    tau = attainable_scores(pred.score)
    pm, pf = score_rates(pred, pred.counts()[None, :], tau)
    emp = sm.rates_at(d["score"].to_numpy(), y, tau)
    np.testing.assert_allclose(pm[0, 0], emp.p_miss, atol=1e-12, rtol=0)
    np.testing.assert_allclose(pf[0, 0], emp.p_fa, atol=1e-12, rtol=0)


def test_latent_definition_differs_on_tied_data():
    d = _tied_nonconcave()
    fit = _quiet(sm.lmer, "score ~ label", d, transform="monotone-by-class", control=dict(vcov=False))
    pred = predictive(fit, positive="bonafide")
    y = (d["label"] == "bonafide").to_numpy()
    lat = float(pred.eer(thresholds="latent")[0])
    att = float(pred.eer()[0])
    assert abs(att - sm.eer(d["score"], y)) < 1e-9
    assert abs(lat - att) > 0.01     # the smooth crossing of the un-hulled curve is another number
    with pytest.raises(ValueError, match="thresholds must be one of"):
        pred.eer(thresholds="smooth")


def test_saturated_stratum_is_a_point_mass():
    d = _saturated()
    fit = _quiet(sm.lmer, "score ~ label", d, transform="monotone-by-class",
                 control=dict(vcov=False, strata="attack"))
    assert fit.fit_info["transform"]["n_cells_by_stratum"][fit.transform.levels.index("A2")] == 1
    h = fit.transform.stratum("A2")
    np.testing.assert_array_equal(h.lower(np.array([-np.inf, -1e300, 0.0])), [-np.inf, np.inf, np.inf])


def _dual_eer(pf, pm):
    """max_w min_k [w·pm_k + (1−w)·pf_k] over the points plus accept-all (1, 0) and reject-all (0, 1)."""
    pf = np.r_[1.0, pf, 0.0]
    pm = np.r_[0.0, pm, 1.0]
    w = np.linspace(0, 1, 200001)
    return float(np.max(np.min(w[:, None] * pm[None, :] + (1 - w[:, None]) * pf[None, :], axis=1)))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_hull_eer_equals_the_dual_form(seed):
    rng = np.random.default_rng(seed)
    k = 40
    pf = np.sort(rng.random(k))[::-1]
    pm = np.sort(rng.random(k))
    e, _, _ = hull_eer(pf, pm)
    assert e == pytest.approx(_dual_eer(pf, pm), abs=2e-5)


def test_hull_eer_matches_sm_eer_on_random_tied_data():
    rng = np.random.default_rng(5)
    for _ in range(20):
        s = rng.integers(0, 12, 80).astype(float)
        y = rng.random(80) < 0.5 + 0.04 * (s - 6)
        if y.all() or not y.any():
            continue
        tau = np.unique(s)
        r = sm.rates_at(s, y, tau)
        assert hull_eer(r.p_fa, r.p_miss)[0] == pytest.approx(sm.eer(s, y), abs=1e-12)


def test_gaussian_model_attainable_eer_approaches_closed_form():
    rng = np.random.default_rng(7)
    n = 20000
    lab = rng.random(n) < 0.5
    d = pd.DataFrame(dict(score=np.where(lab, rng.normal(2.0, 1.0, n), rng.normal(0.0, 1.5, n)),
                          label=np.where(lab, "t", "n"), speaker=rng.integers(0, 30, n)))
    fit = _quiet(sm.lmer, "score ~ label + (1|speaker)", d, dispersion="~ label")
    pred = predictive(fit, positive="t", conditional=False)
    assert pred.n_components == 2                   # one Gaussian per class
    neg, pos = np.flatnonzero(~pred.positive)[0], np.flatnonzero(pred.positive)[0]
    closed = float(ndtr(-(pred.mean[0, pos] - pred.mean[0, neg]) / (pred.sd[0, pos] + pred.sd[0, neg])))
    att = float(pred.eer()[0])
    lat = float(pred.eer(thresholds="latent")[0])
    assert lat == pytest.approx(closed, abs=1e-9)
    assert att == pytest.approx(closed, abs=2e-4)  # thresholds every ~1/20000 of the trials
    assert att >= lat - 1e-12                       # a subset of the smooth (concave) curve's points


def test_attainable_measures_match_sveva_table_on_reproducing_fit():
    d = _tied_nonconcave(seed=4, n=1200)
    rng = np.random.default_rng(4)
    d["speaker"] = np.arange(len(d)) % 40
    d["g"] = np.where(d["speaker"] % 2 == 0, "F", "M")
    strata = d["label"] + "_" + d["g"]
    fit = _quiet(sm.lmer, "score ~ label*g", d.assign(cell=strata), transform="monotone-by-class",
                 control=dict(vcov=False, strata="cell"))
    assert fit.fit_info["transform"]["closed_form"]
    mod = _quiet(sm.model_subgroup_dcf, fit, d.assign(cell=strata), ["g"], positive="bonafide", n_boot=0)
    emp = _quiet(sm.subgroup_dcf, d, ["g"], positive="bonafide", progress=False)
    for m in ("min_dcf", "eer", "fpr", "fnr", "ratio_overall", "dcf_at_overall", "fpr_ratio", "fnr_ratio",
              "ratio_own"):
        np.testing.assert_allclose(mod.table[m].to_numpy(float), emp.table[m].to_numpy(float), atol=1e-9,
                                   rtol=0, err_msg=m)
    assert mod.fairness_index == pytest.approx(emp.fairness_index, abs=1e-9)


# --------------------------------------------------------------------------- ±inf scores: order is all they need
def _inf_data(seed=11, n=400):
    rng = np.random.default_rng(seed)
    spk = rng.integers(0, 20, n)
    y = rng.random(n) < 0.4
    s = np.where(y, rng.normal(1.5, 1, n), rng.normal(0, 1, n))
    s[rng.random(n) < 0.08] = np.inf
    s[rng.random(n) < 0.08] = -np.inf
    fin = s.copy()                                   # an order-equivalent finite copy
    fin[np.isposinf(s)] = 100.0
    fin[np.isneginf(s)] = -100.0
    d = pd.DataFrame(dict(score=s, label=np.where(y, "bonafide", "spoof"), speaker=spk,
                          g=np.where(spk % 2 == 0, "F", "M")))
    return d, fin, y


def test_eer_and_min_dcf_accept_inf_scores():
    d, fin, y = _inf_data()
    s = d["score"].to_numpy()
    for m in ("rocch", "interp", "asvspoof", "voxceleb"):
        assert sm.eer(s, y, method=m) == sm.eer(fin, y, method=m)
    a, b = sm.min_dcf(s, y, p_target=0.3), sm.min_dcf(fin, y, p_target=0.3)
    assert a.value == b.value and a.p_miss == b.p_miss and a.p_fa == b.p_fa
    tb = {100.0: np.inf, -100.0: -np.inf}.get(b.threshold, b.threshold)
    assert a.threshold == tb
    # a threshold at a saturated score is reported as ±inf
    s2 = np.array([np.inf, np.inf, 1.0, 0.0, -np.inf])
    y2 = np.array([1, 1, 0, 0, 0])
    assert sm.min_dcf(s2, y2, p_target=0.5).threshold == np.inf
    e = sm.eer(s, y, n_boot=40, seed=0, speaker=d["speaker"])
    f = sm.eer(fin, y, n_boot=40, seed=0, speaker=d["speaker"])
    assert (float(e), e.lo, e.hi) == (float(f), f.lo, f.hi)
    with pytest.raises(NonFiniteScoreError):
        sm.eer(np.r_[s[:-1], np.nan], y)


def test_subgroup_dcf_accepts_inf_scores():
    d, fin, y = _inf_data()
    a = sm.subgroup_dcf(d, ["g"], positive="bonafide", n_boot=20, random_state=0, progress=False)
    b = sm.subgroup_dcf(d.assign(score=fin), ["g"], positive="bonafide", n_boot=20, random_state=0, progress=False)
    for m in ("min_dcf", "eer", "fpr", "fnr", "ratio_overall", "min_dcf_lo", "eer_hi"):
        np.testing.assert_array_equal(a.table[m].to_numpy(float), b.table[m].to_numpy(float))
    back = {100.0: np.inf, -100.0: -np.inf}
    assert a.threshold == back.get(b.threshold, b.threshold)
    with pytest.raises(sm.SubgroupError, match="missing or non-numeric value in row 3"):
        sm.subgroup_dcf(d.assign(score=np.r_[d["score"].to_numpy()[:3], np.nan, d["score"].to_numpy()[4:]]),
                        ["g"], positive="bonafide", progress=False)


# --------------------------------------------------------------------------- negative_by and goodness of fit
def _attack_data(seed=21, n=2400):
    rng = np.random.default_rng(seed)
    spk = rng.integers(0, 24, n)
    att = rng.choice(["bonafide", "A1", "A2", "A3"], n, p=[.35, .25, .2, .2])
    shift = {"bonafide": 2.0, "A1": -1.0, "A2": 0.8, "A3": 0.0}
    z = np.vectorize(shift.get)(att) + rng.normal(0, 0.4, 24)[spk] + rng.normal(size=n)
    return pd.DataFrame(dict(score=np.round(z, 1), label=np.where(att == "bonafide", "bonafide", "spoof"),
                             attack=att, speaker=[f"s{i:02d}" for i in spk],
                             sex=np.where(spk % 2 == 0, "F", "M")))


def test_negative_by_reproduces_per_attack_eer_of_a_reproducing_fit():
    d = _attack_data()
    d["cell"] = d["attack"] + "_" + d["sex"]     # one transform per attack × sex: reproduces every cell
    fit = _quiet(sm.lmer, "score ~ label", d, transform="monotone-by-class",
                 control=dict(vcov=False, strata="cell"))
    tab = _quiet(sm.model_eer, fit, positive="bonafide", negative_by="attack", data=d, n_boot=0)
    assert list(tab.index) == ["A1", "A2", "A3"]
    for a in ("A1", "A2", "A3"):
        sub = d[(d["label"] == "bonafide") | (d["attack"] == a)]
        assert abs(tab.loc[a, "eer_model"] - sm.eer(sub["score"], sub["label"] == "bonafide")) < 1e-9
        assert tab.loc[a, "n_neg"] == (d["attack"] == a).sum()
    # crossed with by=: positives and negatives of the cell
    t2 = _quiet(sm.model_eer, fit, positive="bonafide", by="sex", negative_by="attack", data=d, n_boot=0)
    sub = d[(d["sex"] == "F") & ((d["label"] == "bonafide") | (d["attack"] == "A2"))]
    assert abs(t2.loc[("F", "A2"), "eer_model"] - sm.eer(sub["score"], sub["label"] == "bonafide")) < 1e-9
    # the SVEva table: one block per attack, each equal to the empirical table of that subset
    r = _quiet(sm.model_subgroup_dcf, fit, d, ["sex"], positive="bonafide", n_boot=0, negative_by="attack")
    assert list(pd.unique(r.table["negative"])) == ["(all)", "A1", "A2", "A3"]
    sub = d[(d["label"] == "bonafide") | (d["attack"] == "A3")]
    emp = _quiet(sm.subgroup_dcf, sub, ["sex"], positive="bonafide", progress=False)
    blk = r.table[r.table["negative"] == "A3"]
    for m in ("min_dcf", "eer", "fpr", "fnr", "ratio_overall"):
        np.testing.assert_allclose(blk[m].to_numpy(float), emp.table[m].to_numpy(float), atol=1e-9, err_msg=m)


def test_fit_ok_is_exactly_outside_the_printed_interval_and_hints_name_the_cause():
    d = _attack_data(seed=22)
    fit = _quiet(sm.lmer, "score ~ label + (1|speaker)", d, transform="monotone", control=dict(vcov=False))
    with pytest.warns(sm.ModelFitWarning, match="missing location term.*attack"):
        tab = sm.model_eer(fit, positive="bonafide", negative_by="attack", data=d, n_boot=60)
    out = (tab["eer_model"] < tab["eer_empirical_lo"]) | (tab["eer_model"] > tab["eer_empirical_hi"])
    np.testing.assert_array_equal(tab["fit_ok"].to_numpy(), ~out.to_numpy())
    assert out.any()          # no attack term: the per-attack cells are off
    assert (tab.loc[~tab["fit_ok"], "fit_hint"].str.contains("missing location term")).all()
    assert (tab.loc[tab["fit_ok"], "fit_hint"] == "").all()
    r = _quiet(sm.model_subgroup_dcf, fit, d, ["sex"], positive="bonafide", n_boot=60)
    t = r.table
    all_ok = np.ones(len(t), bool)
    for m in ("min_dcf", "eer", "ratio_overall", "fpr", "fnr", "dcf_at_overall", "ratio_own", "fpr_ratio",
              "fnr_ratio"):
        o = ((t[m] < t[f"{m}_empirical_lo"] - 1e-9) | (t[m] > t[f"{m}_empirical_hi"] + 1e-9)).to_numpy()
        o = o & np.isfinite(t[f"{m}_empirical"].to_numpy(float))
        np.testing.assert_array_equal(t[f"fit_ok_{m}"].to_numpy(), ~o, err_msg=m)
        all_ok &= ~o
    np.testing.assert_array_equal(t["fit_ok"].to_numpy(), all_ok)
    # the overall Estimate carries the same rule
    e = _quiet(sm.model_eer, fit, positive="bonafide", n_boot=60)
    assert isinstance(e, sm.Estimate) and isinstance(e, float)
    assert e.fit_ok == bool(e.empirical_lo <= float(e) <= e.empirical_hi)
    assert e.empirical == pytest.approx(sm.eer(d["score"], d["label"] == "bonafide"), abs=1e-12)


def test_degenerate_class_is_never_a_silent_model_eer():
    rng = np.random.default_rng(3)
    n = 600
    lab = rng.random(n) < 0.5
    spk = rng.integers(0, 12, n)
    s = np.where(lab, rng.normal(0.5, 1.0, n), 0.0)          # every spoof score is 0
    d = pd.DataFrame(dict(score=s, label=np.where(lab, "bonafide", "spoof"), speaker=spk))
    fit = _quiet(sm.lmer, "score ~ label + (1|speaker)", d, dispersion="~ label")
    with pytest.warns(sm.ModelFitWarning, match="point mass"):
        e = sm.model_eer(fit, positive="bonafide")
    assert e.fit_ok is False and "point mass" in e.hint
    with pytest.warns(sm.ModelFitWarning, match="point mass"):
        sm.model_eer(fit, positive="bonafide", by=pd.Series(np.zeros(n, int), name="all"), n_boot=0)


def test_data_with_another_response_is_refused():
    d = _attack_data(seed=23)
    fit = _quiet(sm.lmer, "score ~ label + (1|speaker)", d)
    other = d.assign(score=d["score"].sample(frac=1.0, random_state=1).to_numpy())   # same index, other scores
    with pytest.raises(sm.PredictiveError, match="response column 'score'"):
        sm.model_eer(fit, positive="bonafide", by="sex", data=other)
    ok = _quiet(sm.model_eer, fit, positive="bonafide", by="sex", data=d.sample(frac=1.0, random_state=2), n_boot=0)
    assert list(ok.index) == ["F", "M"]


def test_refined_eer_is_exact_over_all_thresholds():
    """The coarse-to-fine EER of one population equals the hull of the rates at every distinct
    score (computed here in full), on a non-concave model ROC with many thresholds."""
    from scoremix.predictive.attainable import _eer_rows, attainable_eer

    rng = np.random.default_rng(9)
    n = 9000
    spk = rng.integers(0, 40, n)
    lab = rng.random(n) < 0.4
    mode = rng.random(n) < 0.5
    z = np.where(lab, rng.normal(1.0, 1.0, n), np.where(mode, rng.normal(-1.5, 0.4, n), rng.normal(2.2, 0.4, n)))
    d = pd.DataFrame(dict(score=z + rng.normal(0, 0.5, 40)[spk], label=np.where(lab, "t", "n"), speaker=spk,
                          mode=np.where(mode | lab, "a", "b")))
    fit = _quiet(sm.lmer, "score ~ label + mode + (1|speaker)", d, dispersion="~ label")
    pred = predictive(fit, positive="t")
    w = pred.counts()[None, :]
    tau = np.unique(pred.score)
    assert tau.size > 4096
    pm, pf = score_rates(pred, w, tau)
    full_e, full_t = _eer_rows(pm, pf, tau)
    e, t = attainable_eer(pred, w)
    assert e[0, 0] == pytest.approx(full_e[0, 0], abs=1e-14)
    assert t[0, 0] == full_t[0, 0]
    assert float(pred.eer()[0]) == pytest.approx(full_e[0, 0], abs=1e-14)


def test_refined_sveva_measures_equal_the_full_evaluation():
    """Point-fit SVEva measures (minimum DCF, τ*, EERs by refinement) equal the evaluation of the
    rates at every distinct score (the matrix path, forced with a huge max_thresholds)."""
    rng = np.random.default_rng(12)
    n = 9000
    spk = rng.integers(0, 40, n)
    lab = rng.random(n) < 0.4
    z = np.where(lab, rng.normal(1.2, 1.0, n), np.where(rng.random(n) < 0.5, rng.normal(-1.5, 0.4, n),
                                                        rng.normal(2.0, 0.5, n)))
    d = pd.DataFrame(dict(score=z + rng.normal(0, 0.4, 40)[spk], label=np.where(lab, "t", "n"), speaker=spk,
                          g=np.where(spk % 2 == 0, "F", "M")))
    fit = _quiet(sm.lmer, "score ~ label*g + (1|speaker)", d, dispersion="~ label")
    pred = predictive(fit, d, positive="t")
    g = (d["g"] == "M").to_numpy().astype(int)
    W = pred.population_weights(np.arange(n), g, 2)
    members = [np.arange(n), np.flatnonzero(g == 0), np.flatnonzero(g == 1)]
    for pt in (0.05, 0.5):
        fast = attainable_measures(pred, W, p_target=pt, members=members)
        full = attainable_measures(pred, W, p_target=pt, members=members, max_thresholds=10 ** 9)
        for k in ("all_min_dcf", "all_threshold", "all_eer", "min_dcf", "threshold_own", "eer", "fpr", "fnr",
                  "ratio_overall", "fairness_index"):
            np.testing.assert_allclose(np.asarray(fast[k], float), np.asarray(full[k], float), rtol=0,
                                       atol=1e-13, err_msg=k)
