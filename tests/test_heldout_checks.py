"""Held-out checks on other tables (issue 19, session 7): fixes found by the split-half protocol.

Independent values:
(a) a Gaussian model ``score ~ label + (1|speaker)`` with dispersion per class shifts both
    classes of a speaker by the same random intercept, so every speaker's model EER is the
    closed form Φ(−Δ/(σ₀+σ₁)) and its minimum DCF the closed-form minimum over the threshold
    of p·Φ((t−μ₁)/σ₁) + (1−p)·Φ(−(t−μ₀)/σ₀) (scipy) — also for a speaker with 8 trials,
    because a detector's threshold may be any of the evaluated trials' distinct scores;
(b) on the LA dev table (skipped when absent) ``score_model`` + ``model_eer(by="speaker")``
    structural invariants against ``sm.eer`` of each speaker's trials.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import ndtr

import scoremix as sm
from scoremix.predictive import predictive

def _quiet(fn, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **kw)


@pytest.fixture(scope="module")
def gaussian_fit():
    rng = np.random.default_rng(3)
    n_spk, n = 40, 20000
    spk = rng.integers(0, n_spk, n)
    spk[:8] = n_spk                                   # a speaker with 8 trials: 4 per class
    lab = rng.random(n) < 0.5
    lab[:8] = [True, False] * 4
    b = rng.normal(0, 0.7, n_spk + 1)[spk]
    s = b + np.where(lab, rng.normal(2.0, 1.0, n), rng.normal(0.0, 1.5, n))
    d = pd.DataFrame(dict(score=s, label=np.where(lab, "t", "n"), speaker=spk))
    fit = _quiet(sm.lmer, "score ~ label + (1|speaker)", d, dispersion="~ label")
    pred = predictive(fit, positive="t", conditional=False)
    neg, pos = np.flatnonzero(~pred.positive)[0], np.flatnonzero(pred.positive)[0]
    m0, m1 = pred.mean[0, neg], pred.mean[0, pos]
    sd = np.sqrt(pred.sd[0] ** 2 - float(fit.varcorr.set_index("grp").loc["speaker", "vcov"]))   # the residual SDs
    return d, fit, (m0, m1, sd[neg], sd[pos])


def test_subgroup_model_eer_uses_every_evaluated_threshold(gaussian_fit):
    d, fit, (m0, m1, s0, s1) = gaussian_fit
    closed = float(ndtr(-(m1 - m0) / (s0 + s1)))
    tab = _quiet(sm.model_eer, fit, by="speaker", positive="t", n_boot=0)
    # every speaker, the 8-trial one included: its own 8 scores would give a coarse ROC (0.25 steps)
    np.testing.assert_allclose(tab["eer_model"].to_numpy(), closed, atol=3e-4, rtol=0)
    assert tab.loc[40, "n_pos"] == 4 and tab.loc[40, "n_neg"] == 4


def test_subgroup_model_min_dcf_uses_every_evaluated_threshold(gaussian_fit):
    d, fit, (m0, m1, s0, s1) = gaussian_fit
    p = 0.05
    res = _quiet(sm.model_subgroup_dcf, fit, d, ["speaker"], positive="t", p_target=p, n_boot=0)
    tab = res.table.set_index("speaker")
    tt = predictive(fit, positive="t").trial_table()
    for sp in (0, 17, 40):
        rows = tt[d["speaker"].to_numpy() == sp]
        shift = float(rows.loc[rows["y"] == 0, "mean"].iloc[0] - m0)      # the speaker's intercept
        cost = lambda t: p * ndtr((t - m1 - shift) / s1) + (1 - p) * ndtr(-(t - m0 - shift) / s0)
        r = minimize_scalar(cost, bounds=(m0 + shift - 3, m1 + shift + 6), method="bounded",
                            options=dict(xatol=1e-10))
        assert tab.loc[sp, "min_dcf"] == pytest.approx(min(float(r.fun), p), abs=2e-4), sp


# --------------------------------------------------------------------------- LA dev end to end
LA_DEV = "asvspoof2019_la_dev/asvspoof2019_la_dev_lfcc_gmm.csv.gz"


@pytest.fixture(scope="module")
def la_dev_fit(shared_data):
    path = shared_data / LA_DEV
    if not path.is_file():
        pytest.skip(f"real data absent: {path}")
    d = pd.read_csv(path)
    # a small, fixed subset keeps the test fast: 6 speakers with both classes, 4 bona-fide-only
    spk = sorted(d["speaker"].unique())
    both = [s for s in spk if d.loc[d["speaker"] == s, "label"].nunique() == 2][:6]
    one = [s for s in spk if d.loc[d["speaker"] == s, "label"].nunique() == 1][:4]
    t = d[d["speaker"].isin(both + one)]
    t = pd.concat([g.iloc[::4] for _, g in t.groupby(["speaker", "label", "attack"])]).reset_index(drop=True)
    fit = _quiet(sm.score_model, t, score="score", label="label", speaker="speaker", factors=["attack"],
                 positive="bonafide")
    tab = _quiet(sm.model_eer, fit, by="speaker", positive="bonafide", n_boot=0)
    return t, fit, tab, both, one


@pytest.mark.shared_data
@pytest.mark.slow
def test_la_dev_score_model_speaker_table(la_dev_fit):
    t, fit, tab, both, one = la_dev_fit
    assert sorted(tab.index) == sorted(both + one)
    for sp in both + one:
        g = t[t["speaker"] == sp]
        y = (g["label"] == "bonafide").to_numpy()
        assert tab.loc[sp, "n_pos"] == y.sum() and tab.loc[sp, "n_neg"] == (~y).sum()
        if y.all():                       # a speaker with one class has no EER, model or empirical
            assert np.isnan(tab.loc[sp, "eer_model"]) and np.isnan(tab.loc[sp, "eer_empirical"])
            continue
        assert abs(tab.loc[sp, "eer_empirical"] - sm.eer(g["score"].to_numpy(), y)) < 1e-12
        assert 0.0 <= tab.loc[sp, "eer_model"] <= 0.5
    # the model's overall value against sm.eer of all trials (strata fitted freely): exact
    est = _quiet(sm.model_eer, fit, positive="bonafide", n_boot=0)
    y = (t["label"] == "bonafide").to_numpy()
    assert abs(est.empirical - sm.eer(t["score"].to_numpy(), y)) < 1e-12


# --------------------------------------------------------------------------- input shapes
def _small(seed=21, n_spk=8):
    rng = np.random.default_rng(seed)
    spk = np.repeat(np.arange(n_spk), 30)
    lab = np.tile(np.r_[np.ones(10, bool), np.zeros(20, bool)], n_spk)
    s = rng.normal(0, 0.5, n_spk)[spk] + np.where(lab, rng.normal(2, 1, spk.size), rng.normal(0, 1, spk.size))
    return pd.DataFrame(dict(score=s, label=np.where(lab, "target", "nontarget"), speaker=spk,
                             attack=np.where(lab, "bona", np.where(rng.random(spk.size) < 0.5, "A1", "A2"))))


def test_model_eer_table_with_mixed_type_speaker_ids():
    d = _small()
    # ids of two types in one object column (e.g. read from a spreadsheet): "s0".."s3" and 4..7
    d["speaker"] = pd.Series([f"s{v}" if v < 4 else int(v) for v in d["speaker"]], dtype=object)
    fit = _quiet(sm.lmer, "score ~ label + (1|speaker)", d)
    tab = _quiet(sm.model_eer, fit, by="speaker", positive="target", n_boot=0)
    assert sorted(map(str, tab.index)) == sorted(map(str, d["speaker"].unique()))
    for sp, g in d.groupby(d["speaker"].map(str)):
        row = tab.loc[[i for i in tab.index if str(i) == sp][0]]
        assert row["eer_empirical"] == pytest.approx(sm.eer(g["score"].to_numpy(), (g["label"] == "target").to_numpy()),
                                                     abs=1e-12)


def test_score_model_names_a_factor_with_missing_levels():
    d = _small()
    d.loc[d["label"] == "target", "attack"] = np.nan          # bona fide trials without an attack
    with pytest.raises(sm.LocScaleError, match=r"column 'attack' has 80 missing value\(s\) \(first at row 0\); fill"):
        sm.score_model(d, label="label", speaker="speaker", factors=["attack"], positive="target")


# --------------------------------------------------------------------------- repeated operating points
def _dual_eer(pf, pm):
    """max_w min_k [w·pm_k + (1−w)·pf_k] over the points plus accept-all (1, 0) and reject-all (0, 1)
    (brute force over a fine grid of w; exact breakpoints do not matter at the tolerance used)."""
    pf = np.r_[1.0, pf, 0.0]
    pm = np.r_[0.0, pm, 1.0]
    w = np.linspace(0, 1, 200001)
    return float(np.max(np.min(w[:, None] * pm[None, :] + (1 - w[:, None]) * pf[None, :], axis=1)))


def test_hull_eer_with_repeated_operating_points():
    from scoremix.predictive.attainable import hull_eer

    # a model whose rates are constant over several thresholds (point masses): the corner (0, 0)
    # appears four times; it is a hull vertex, so the EER is 0 (it was 0.5)
    pf = np.array([1.0, 1.0, 2 / 3, 1 / 3, 0.0, 0.0, 0.0, 0.0])
    pm = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 1.0])
    assert hull_eer(pf, pm)[0] == 0.0
    rng = np.random.default_rng(8)
    for _ in range(30):
        k = 12
        pf_ = np.sort(rng.choice(np.linspace(0, 1, 7), k))[::-1]
        pm_ = np.sort(rng.choice(np.linspace(0, 1, 7), k))
        rep = rng.integers(1, 4, k)                          # every point repeated 1-3 times
        pf_, pm_ = np.repeat(pf_, rep), np.repeat(pm_, rep)
        assert hull_eer(pf_, pm_)[0] == pytest.approx(_dual_eer(pf_, pm_), abs=2e-5)


def test_speaker_pooling_kappa_zero_gives_each_speakers_empirical_eer():
    from scoremix.locscale.speaker_pool import with_speaker_pooling

    d = _small(seed=5)
    fit = _quiet(sm.score_model, d, label="label", speaker="speaker", factors=["attack"], positive="target",
                 speaker_pooling=None, failure_quantile=None)
    with_speaker_pooling(fit, 0.0)       # every speaker's own distribution (module docs of speaker_pool)
    tab = _quiet(sm.model_eer, fit, by="speaker", positive="target", n_boot=0)
    for sp, g in d.groupby("speaker"):
        e = sm.eer(g["score"].to_numpy(), (g["label"] == "target").to_numpy())
        assert tab.loc[sp, "eer_model"] == pytest.approx(e, abs=1e-6)
        assert tab.loc[sp, "eer_empirical"] == pytest.approx(e, abs=1e-12)


def test_score_model_fit_supplies_its_class_column_and_positive_value():
    d = _small(seed=9).rename(columns={"label": "key", "speaker": "spk", "score": "llr"})
    d["key"] = d["key"].map({"target": "tgt", "nontarget": "imp"})       # no known vocabulary
    fit = _quiet(sm.score_model, d, score="llr", label="key", speaker="spk", positive="tgt",
                 speaker_pooling=None, failure_quantile=None)
    tab = _quiet(sm.model_eer, fit, by="spk", n_boot=0)                  # the call, as written
    ref = _quiet(sm.model_eer, fit, by="spk", label="key", positive="tgt", n_boot=0)
    pd.testing.assert_frame_equal(tab, ref)
    for sp, g in d.groupby("spk"):
        y = (g["key"] == "tgt").to_numpy()
        assert tab.loc[sp, "eer_empirical"] == pytest.approx(sm.eer(g["llr"].to_numpy(), y), abs=1e-12)
        assert tab.loc[sp, "n_pos"] == y.sum()
    r = _quiet(sm.model_subgroup_dcf, fit, d, ["spk"], n_boot=0, p_target=0.05)
    r_ref = _quiet(sm.model_subgroup_dcf, fit, d, ["spk"], label="key", positive="tgt", speaker="spk",
                   n_boot=0, p_target=0.05)
    np.testing.assert_array_equal(r.table["min_dcf"].to_numpy(), r_ref.table["min_dcf"].to_numpy())
    assert (r.table["n_speakers"] == 1).all()


def test_model_subgroup_dcf_on_the_fitted_rows_uses_their_pooled_masses():
    from scoremix.locscale.speaker_pool import with_speaker_pooling

    rng = np.random.default_rng(12)
    n_spk, n_pos, n_neg = 6, 40, 600            # negative cells above the 256-quantile cap of new rows
    spk = np.repeat(np.arange(n_spk), n_pos + n_neg)
    lab = np.tile(np.r_[np.ones(n_pos, bool), np.zeros(n_neg, bool)], n_spk)
    s = rng.normal(0, 0.4, n_spk)[spk] + np.where(lab, rng.normal(2, 1, spk.size), rng.standard_t(4, spk.size))
    d = pd.DataFrame(dict(score=s, label=np.where(lab, "target", "nontarget"), speaker=spk))
    fit = _quiet(sm.score_model, d, label="label", speaker="speaker", positive="target",
                 speaker_pooling=None, failure_quantile=None)
    with_speaker_pooling(fit, 10.0)
    # reference: the fitted rows' model rates at every distinct score, minimum cost by brute force
    pred = predictive(fit)
    tau = np.unique(pred.score)
    ref = {}
    for sp in range(n_spk):
        fnr, fpr = pred.rates_at(tau, mask=(d["speaker"] == sp).to_numpy())
        ref[sp] = min(float(np.min(0.05 * fnr[0] + 0.95 * fpr[0])), 0.05)
    for trials in (d, d.copy()):               # the fitted frame itself and an equal copy
        tab = _quiet(sm.model_subgroup_dcf, fit, trials, ["speaker"], n_boot=0).table.set_index("speaker")
        for sp in range(n_spk):
            assert tab.loc[sp, "min_dcf"] == pytest.approx(ref[sp], abs=1e-12)
