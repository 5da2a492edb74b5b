"""``DecisionModelResult.rates``: model FNR/FPR of any subgroups of any table (held-out
trials, a few speakers) as trial-weighted conditional cell rates.

Checks: calibrated rates of the fitted subgroups on the fitted table equal the counts (the
fixed-effect score equation, a closed form); the counted columns equal direct counting; bad
input is named; and, on simulated decision tables with known error probabilities (the
split-half protocol at 20 %), the rates of groups of 2–4 speakers have a smaller error
against the true held-out rate than counting, with no material bias.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import special

import scoremix as sm
from scoremix.fairness.decision_model import decision_model

ATT = ["A1", "A2", "A3", "A4"]


def simulate(seed: int, n_spk: int = 40, scale: float = 1.0, sd: tuple = (0.6, 1.2)) -> pd.DataFrame:
    """Errors at τ = 0 (score sign) with logit p = β[class, gender] + b[speaker, class]
    + a[attack] (negatives); p stored per trial; random groups of 2–4 speakers per gender."""
    rng = np.random.default_rng(seed)
    beta = {("pos", "f"): -1.5, ("pos", "m"): -1.1, ("neg", "f"): -4.0, ("neg", "m"): -3.6}
    a = dict(zip(ATT, rng.normal(0, 1.5, len(ATT))))
    parts, groups = [], {}
    order = {"f": [], "m": []}
    for k in range(n_spk):
        g = "f" if k % 2 == 0 else "m"
        spk = f"s{k:02d}"
        order[g].append(spk)
        b_neg, b_pos = rng.normal(0, sd)
        cells = [("target", "bonafide", int(scale * rng.integers(60, 140)), beta[("pos", g)] + b_pos)]
        cells += [("nontarget", l, int(scale * rng.integers(40, 90)), beta[("neg", g)] + b_neg + a[l])
                  for l in ATT]
        for lab, att, n, eta in cells:
            p = special.expit(eta)
            e = rng.random(n) < p
            sc = np.where(e, -1.0, 1.0) if lab == "target" else np.where(e, 1.0, -1.0)
            parts.append(pd.DataFrame({"score": sc, "label": lab, "speaker": spk, "gender": g,
                                       "attack": att, "p": p}))
    for g, spks in order.items():
        i = 0
        while i < len(spks):
            m = 3 if len(spks) - i in (3, 5) else 2 if len(spks) - i <= 4 else int(rng.integers(2, 5))
            m = min(m, len(spks) - i)
            for s in spks[i:i + m]:
                groups[s] = f"{g}{i:02d}"
            i += m
    t = pd.concat(parts, ignore_index=True)
    t["group"] = t["speaker"].map(groups)
    return t


def split(t: pd.DataFrame, share: float, rng: np.random.Generator) -> np.ndarray:
    in_a = np.zeros(len(t), bool)
    for idx in t.groupby(["speaker", "label", "attack"]).indices.values():
        in_a[rng.choice(idx, size=max(1, int(round(share * len(idx)))), replace=False)] = True
    return in_a


def fit(t: pd.DataFrame, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return decision_model(t, 0.0, ["gender"], factors=["attack"], n_sim=50, n_boot=2, seed=1, **kw)


def test_calibrated_rates_of_fitted_subgroups_are_their_counts():
    """On the fitted table the calibrated model rate of a fitted subgroup is its counted
    rate: X'(e - nμ) = 0 per class × gender (to 1e-9); uncalibrated it is not (the Laplace
    β̂).  The counted columns are direct counts."""
    t = simulate(1)
    r = fit(t)
    out = r.rates(t, "gender")
    raw = r.rates(t, "gender", calibrate=False)
    y = t["label"] == "target"
    for g in ("f", "m"):
        s = t[t.gender == g]
        ys = s["label"] == "target"
        fnr, fpr = np.mean(s.score[ys] < 0), np.mean(s.score[~ys] >= 0)
        assert out.loc[g, "fnr_emp"] == pytest.approx(fnr, abs=1e-12)
        assert out.loc[g, "fpr_emp"] == pytest.approx(fpr, abs=1e-12)
        assert out.loc[g, "fnr_model"] == pytest.approx(fnr, abs=1e-9)
        assert out.loc[g, "fpr_model"] == pytest.approx(fpr, abs=1e-9)
        assert out.loc[g, "fnr_model_lo"] < out.loc[g, "fnr_model"] < out.loc[g, "fnr_model_hi"]
        assert out.loc[g, "n_pos"] == int(ys.sum()) and out.loc[g, "n_neg"] == int((~ys).sum())
    assert not np.allclose(raw["fnr_model"], out["fnr_model"], atol=1e-6)
    # with pooled subgroup means the calibration is per class: the overall rates are counts
    rp = fit(t, pool_groups=True)
    allc = rp.rates(t.assign(all="all"), "all").iloc[0]
    assert allc["fnr_model"] == pytest.approx(np.mean(t.score[y] < 0), abs=1e-9)
    assert allc["fpr_model"] == pytest.approx(np.mean(t.score[~y] >= 0), abs=1e-9)


def test_rates_of_a_new_speaker_use_the_new_speaker_integral():
    """A speaker absent from the fit gets the marginal rate of its class × gender (the
    default table's new-speaker value, here with its single attack mix)."""
    t = simulate(2)
    r = fit(t[t.speaker != "s00"])
    new = t[(t.speaker == "s00") & (t.label == "target")]
    out = r.rates(new, "speaker", calibrate=False)
    assert out.loc["s00", "fnr_model"] == pytest.approx(r.table.loc["f", "fnr_model"], rel=1e-10)


def test_rates_bad_input_is_named():
    t = simulate(3, n_spk=10, scale=0.5)
    r = fit(t[t.gender == "f"])
    with pytest.raises(sm.SubgroupError, match="not in the fit"):
        r.rates(t, "group")
    with pytest.raises(sm.SubgroupError, match="'nope'"):
        r.rates(t[t.gender == "f"], "nope")


@pytest.mark.slow
def test_speaker_group_rates_beat_counting_against_known_truth():
    """Split-half at 20 % on 6 simulated tables with few trials per speaker (half the
    default counts; speaker SDs 0.5 / 0.7): for groups of 2–4 speakers the calibrated model
    rate (fitted on A, weighted by B's trials) has a smaller RMSE against the *true* B rate
    Σ n_c p_c / Σ n_c than A's counts — FNR and FPR by ≥ 10 % and ≥ 15 % (measured 0.71
    and 0.67) — and no material bias: the per-table mean error (groups within a table share
    the fit, so tables are the independent units) has |t| < 3."""
    err = {"fnr": {"model": [], "count": [], "rep": []}, "fpr": {"model": [], "count": [], "rep": []}}
    for rep in range(6):
        t = simulate(100 + rep, scale=0.5, sd=(0.5, 0.7))
        in_a = split(t, 0.2, np.random.default_rng(rep))
        A, B = t[in_a], t[~in_a]
        out = fit(A).rates(B, "group", n_sim=2)
        for h in out.index:
            a_h, b_h = A[A.group == h], B[B.group == h]
            for m, lab, sign in (("fnr", "target", -1.0), ("fpr", "nontarget", 1.0)):
                truth = b_h.loc[b_h.label == lab, "p"].mean()
                counted = np.mean(a_h.loc[a_h.label == lab, "score"] == sign)
                err[m]["model"].append(out.loc[h, f"{m}_model"] - truth)
                err[m]["count"].append(counted - truth)
                err[m]["rep"].append(rep)
    for m, bound in (("fnr", 0.9), ("fpr", 0.85)):
        e_mod, e_cnt = np.array(err[m]["model"]), np.array(err[m]["count"])
        ratio = np.sqrt(np.mean(e_mod ** 2) / np.mean(e_cnt ** 2))
        assert ratio < bound, (m, ratio)
        per = pd.Series(e_mod).groupby(np.array(err[m]["rep"])).mean()
        assert abs(per.mean()) < 3 * per.std(ddof=1) / np.sqrt(len(per)), m


def test_new_speaker_integrates_the_speaker_by_attack_effect():
    """``factor_by_speaker=True``: a new speaker's FPR over its attacks is, from the fitted
    parameters alone, Σ_l n_l ∫ logit⁻¹(β_neg,g + a_l + c_l,g + s z) φ(z) dz / Σ n_l with
    s² = σ²_speaker,neg + σ²_speaker×attack (uncalibrated)."""
    from scoremix.fairness.decision_model import logit_normal_mean

    rng = np.random.default_rng(4)
    t = simulate(5)
    # a speaker × attack interaction in the false alarms
    inter = {(s, a): rng.normal(0, 0.8) for s in t.speaker.unique() for a in ATT}
    neg = t.label == "nontarget"
    shift = np.array([inter[(s, a)] if n else 0.0 for s, a, n in zip(t.speaker, t.attack, neg)])
    p = special.expit(special.logit(t["p"]) + shift)
    e = rng.random(len(t)) < p
    t["score"] = np.where(neg, np.where(e, 1.0, -1.0), t["score"])
    r = fit(t[t.speaker != "s00"], factor_by_group=True, factor_by_speaker=True)
    assert "(0 + isneg | f0s)" in r.settings["formula"]
    vc = r.fit.varcorr
    vc = vc() if callable(vc) else vc
    var_fs = float(vc.loc[vc.grp == "f0s", "vcov"].iloc[0])
    var_spk = float(vc.loc[(vc.grp == "spk") & (vc.var1 == "clsneg") & vc.var2.isna(), "vcov"].iloc[0])
    assert var_fs > 0.1
    new = t[(t.speaker == "s00") & neg]
    out = r.rates(new, "speaker", calibrate=False)
    re_ = r.fit.ranef
    beta = r.fit.fixef["cellneg|f"]
    n = new.groupby("attack").size()
    eta = np.array([beta + re_["f0"].loc[a].iloc[0] + re_["f0g"].loc[f"{a}:f"].iloc[0] for a in n.index])
    want = float(n.to_numpy() @ logit_normal_mean(eta, np.sqrt(var_spk + var_fs)) / n.sum())
    assert out.loc["s00", "fpr_model"] == pytest.approx(want, rel=1e-10)
