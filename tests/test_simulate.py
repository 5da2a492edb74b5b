"""Tests of scoremix.simulate: schema, reproducibility and recovery of the known truth.

Every expected value is computed here independently of the simulator's own bookkeeping
(from the realised effects mapped onto the rows, closed forms, or moment estimators), and
tolerances are 5 standard errors derived from the sample sizes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import optimize, stats

from scoremix.simulate import (
    VOXCELEB1_H_LIKE_SUBGROUPS,
    Simulation,
    SimulationError,
    simulate_sv_trials,
    simulate_trials,
    speaker_table,
    voxceleb1_h_like_speakers,
)

CM_COLUMNS = ["trial_id", "speaker", "attack", "label", "y", "x", "score", "sex", "nationality", "subgroup"]
SV_COLUMNS = ["trial_id", "enrol_speaker", "test_speaker", "label", "y", "same_sex", "same_nationality",
              "sex", "nationality", "subgroup", "score"]
Z = 5.0  # tolerance in standard errors


@pytest.fixture(scope="module")
def big_cm() -> Simulation:
    return simulate_trials(400_000, 1000, 13, beta_x=0.5, beta_x_pos=-0.3, sigma_pos=0.7, seed=11)


# ---------------------------------------------------------------------------------------
# reproducibility and schema
# ---------------------------------------------------------------------------------------

def test_same_seed_same_table_different_seed_different_table():
    a = simulate_trials(3000, 50, seed=5)
    b = simulate_trials(3000, 50, seed=5)
    c = simulate_trials(3000, 50, seed=6)
    pd.testing.assert_frame_equal(a.table, b.table)
    pd.testing.assert_series_equal(a.truth["speaker_effects"], b.truth["speaker_effects"])
    assert not np.allclose(a.table["score"], c.table["score"])
    sa = simulate_sv_trials(3000, seed=5)
    sb = simulate_sv_trials(3000, seed=5)
    pd.testing.assert_frame_equal(sa.table, sb.table)
    pd.testing.assert_frame_equal(sa.truth["subgroup_shift"], sb.truth["subgroup_shift"])


def test_cm_schema_and_unpacking():
    sim = simulate_trials(5000, 200, 13, seed=1)
    table, truth = sim
    assert table is sim.table and truth is sim.truth
    assert list(table.columns) == CM_COLUMNS
    assert table["y"].dtype == np.int8
    assert table["trial_id"].is_unique
    assert set(table["label"].astype(str)) == {"bonafide", "spoof"}
    assert ((table["label"] == "bonafide").to_numpy() == (table["y"] == 1).to_numpy()).all()
    assert table["speaker"].astype(str).str.fullmatch(r"spk\d{4}").all()
    assert set(table["attack"].astype(str)) <= {f"A{k:02d}" for k in range(1, 14)} | {"bonafide"}
    expected_sub = table["nationality"].astype(str) + "_" + table["sex"].astype(str)
    assert (expected_sub == table["subgroup"].astype(str)).all()
    # trial metadata agrees with the speaker table
    meta = sim.speakers.set_index("speaker")
    assert (meta.loc[table["speaker"].astype(str), "subgroup"].to_numpy()
            == table["subgroup"].astype(str).to_numpy()).all()
    assert np.isfinite(table["score"]).all() and np.isfinite(table["x"]).all()
    # exact class count round(p * n)
    assert int(table["y"].sum()) == 2500


def test_attacks_only_on_negative_trials():
    sim = simulate_trials(20000, 100, 7, seed=2)
    t = sim.table
    is_bona = t["y"].to_numpy() == 1
    assert (t.loc[is_bona, "attack"].astype(str) == "bonafide").all()
    assert (t.loc[~is_bona, "attack"].astype(str) != "bonafide").all()
    assert set(t.loc[~is_bona, "attack"].astype(str)) == {f"A{k:02d}" for k in range(1, 8)}


def test_attack_effects_do_not_reach_positive_trials():
    # no speaker effects, no covariate: bona fide scores are N(mu + d, sigma_pos^2) whatever
    # the (huge) attack variance, spoof scores carry the attack effects.
    n = 40000
    sim = simulate_trials(n, 100, 13, mu=0.0, d=3.0, beta_x=0.0, sd_speaker=0.0, sd_attack=5.0,
                          sigma=1.0, sigma_pos=1.0, seed=3)
    t = sim.table
    pos = t.loc[t["y"] == 1, "score"].to_numpy()
    n_pos = pos.size
    # sample variance of N(., 1): chi2 interval
    lo, hi = stats.chi2.ppf([1e-6, 1 - 1e-6], n_pos - 1) / (n_pos - 1)
    assert lo < pos.var(ddof=1) < hi
    assert abs(pos.mean() - 3.0) < Z / np.sqrt(n_pos)
    neg = t.loc[t["y"] == 0]
    c = sim.truth["attack_effects"]
    resid = neg["score"].to_numpy() - c.loc[neg["attack"].astype(str)].to_numpy()
    assert abs(resid.mean()) < Z / np.sqrt(resid.size)


# ---------------------------------------------------------------------------------------
# recovery of the truth
# ---------------------------------------------------------------------------------------

def _independent_mean(sim: Simulation) -> np.ndarray:
    """mu + d·y + b[speaker] + c[attack]·(1−y) + shift, from the truth's realised effects."""
    t, tr = sim.table, sim.truth
    y = t["y"].to_numpy()
    b = tr["speaker_effects"].loc[t["speaker"].astype(str)].to_numpy()
    c_all = pd.concat([tr["attack_effects"], pd.Series({"bonafide": 0.0})])
    c = c_all.loc[t["attack"].astype(str)].to_numpy()
    sh = tr["subgroup_shift"]
    g = t["subgroup"].astype(str)
    shift = np.where(y == 1, sh["bonafide"].loc[g].to_numpy(), sh["spoof"].loc[g].to_numpy())
    return tr["mu"] + tr["d"] * y + b + c * (1 - y) + shift


def test_class_means_and_sds_match_truth(big_cm: Simulation):
    t, tr = big_cm
    y = t["y"].to_numpy()
    s = t["score"].to_numpy()
    m = _independent_mean(big_cm)
    for cls, name, slope, sig in ((0, "spoof", 0.5, 1.0), (1, "bonafide", -0.3, 0.7)):
        sel = y == cls
        n = sel.sum()
        noise_var = slope ** 2 + sig ** 2
        # mean: only x and eps are random given the design
        want_mean = m[sel].mean()
        assert tr["class_mean"][name] == pytest.approx(want_mean, rel=1e-12, abs=1e-12)
        assert abs(s[sel].mean() - want_mean) < Z * np.sqrt(noise_var / n)
        # SD: law of total variance over the design
        want_sd = np.sqrt(m[sel].var() + noise_var)
        assert tr["class_sd"][name] == pytest.approx(want_sd, rel=1e-12)
        centred = s[sel] - s[sel].mean()
        se_var = np.sqrt((np.mean(centred ** 4) - centred.var() ** 2) / n)
        se_sd = se_var / (2 * want_sd)
        assert abs(s[sel].std() - want_sd) < Z * se_sd
    # population moments (no shifts): closed form
    assert tr["class_mean_population"] == {"spoof": -2.0, "bonafide": 2.0}
    assert tr["class_sd_population"]["spoof"] == pytest.approx(np.sqrt(0.25 + 2.25 + 0.25 + 1.0))
    assert tr["class_sd_population"]["bonafide"] == pytest.approx(np.sqrt(0.25 + 0.09 + 0.49))


def test_slopes_recovered_by_ols(big_cm: Simulation):
    t = big_cm.table
    for cls, true_slope in ((0, 0.5), (1, -0.3)):
        sub = t[t["y"] == cls]
        x, s = sub["x"].to_numpy(), sub["score"].to_numpy()
        X = np.column_stack([np.ones_like(x), x])
        coef, *_ = np.linalg.lstsq(X, s, rcond=None)
        resid = s - X @ coef
        se = resid.std(ddof=2) / (x.std() * np.sqrt(x.size))
        assert abs(coef[1] - true_slope) < Z * se


def _anova_variance(resid: np.ndarray, groups: np.ndarray) -> tuple[float, float, np.ndarray, np.ndarray]:
    """One-way random-effects ANOVA moment estimator (unbalanced):
    sigma_g^2 = (MSB − MSW) / n0, n0 = (N − Σ n_k² / N) / (K − 1)."""
    codes, uniq = pd.factorize(groups)
    k = uniq.size
    n_k = np.bincount(codes).astype(float)
    sums = np.bincount(codes, weights=resid)
    means = sums / n_k
    grand = resid.mean()
    N = resid.size
    ssb = np.sum(n_k * (means - grand) ** 2)
    ssw = np.sum((resid - means[codes]) ** 2)
    msb, msw = ssb / (k - 1), ssw / (N - k)
    n0 = (N - np.sum(n_k ** 2) / N) / (k - 1)
    return (msb - msw) / n0, n0, n_k, np.asarray(uniq)


def test_speaker_variance_recovered_by_moments():
    K, per = 2000, 100
    sim = simulate_trials(K * per, K, 13, beta_x=0.5, sd_speaker=0.5, sd_attack=1.5, sigma=1.0,
                          p_positive=1.0, seed=21)  # bona fide only: no attack effects
    t, tr = sim
    resid = t["score"].to_numpy() - tr["mu"] - tr["d"] - 0.5 * t["x"].to_numpy()
    est, n0, n_k, levels = _anova_variance(resid, t["speaker"].astype(str).to_numpy())
    b = tr["speaker_effects"].loc[levels].to_numpy()
    b_bar = np.sum(n_k * b) / n_k.sum()
    realised = np.sum(n_k * (b - b_bar) ** 2) / ((levels.size - 1) * n0)
    # error given b: 2/K Σ b e + 1/K Σ (e² − σ²/n): SD ≈ sqrt(4 σ_b² σ²/(n0 K) + 2 σ⁴/(n0² K))
    se = np.sqrt(4 * 0.25 * 1.0 / (n0 * levels.size) + 2 / (n0 ** 2 * levels.size))
    assert abs(est - realised) < Z * se
    # and the population value 0.25 within the sampling error of K effects
    assert abs(est - 0.25) < Z * (np.sqrt(2 / (levels.size - 1)) * 0.25 + se)


def test_attack_variance_recovered_by_moments():
    A, per = 400, 250
    sim = simulate_trials(A * per, 300, A, beta_x=0.5, sd_speaker=0.5, sd_attack=1.5, sigma=1.0,
                          p_positive=0.0, seed=22)  # spoof only
    t, tr = sim
    b = tr["speaker_effects"].loc[t["speaker"].astype(str)].to_numpy()
    resid = t["score"].to_numpy() - tr["mu"] - 0.5 * t["x"].to_numpy() - b
    est, n0, n_k, levels = _anova_variance(resid, t["attack"].astype(str).to_numpy())
    c = tr["attack_effects"].loc[levels].to_numpy()
    c_bar = np.sum(n_k * c) / n_k.sum()
    realised = np.sum(n_k * (c - c_bar) ** 2) / ((levels.size - 1) * n0)
    se = np.sqrt(4 * 2.25 * 1.0 / (n0 * levels.size) + 2 / (n0 ** 2 * levels.size))
    assert abs(est - realised) < Z * se
    assert abs(est - 2.25) < Z * (np.sqrt(2 / (levels.size - 1)) * 2.25 + se)


def test_subgroup_shift_applied_to_the_right_class():
    shift = {"usa_m": (0.8, -0.4), "uk_f": 0.5}
    sim = simulate_trials(100_000, 500, 13, subgroup_shift=shift, seed=4)
    t, tr = sim
    m = _independent_mean(sim)
    resid = t["score"].to_numpy() - m  # x and eps only
    assert abs(resid.mean()) < Z * np.sqrt(1.25 / resid.size)
    sh = tr["subgroup_shift"]
    assert sh.loc["usa_m", "spoof"] == 0.8 and sh.loc["usa_m", "bonafide"] == -0.4
    assert sh.loc["uk_f", "spoof"] == 0.5 and sh.loc["uk_f", "bonafide"] == 0.5
    assert (sh.drop(index=["usa_m", "uk_f"]) == 0).all().all()
    # the shift shows up in the data: bona fide usa_m scores sit 0.4 below the unshifted mean
    y = t["y"].to_numpy()
    g = t["subgroup"].astype(str).to_numpy()
    b = tr["speaker_effects"].loc[t["speaker"].astype(str)].to_numpy()
    sel = (y == 1) & (g == "usa_m")
    diff = t["score"].to_numpy()[sel] - (tr["mu"] + tr["d"] + b[sel])
    assert abs(diff.mean() - (-0.4)) < Z * np.sqrt(1.25 / sel.sum())


# ---------------------------------------------------------------------------------------
# speaker metadata and subgroup counts
# ---------------------------------------------------------------------------------------

def test_default_speaker_table_counts():
    spk = voxceleb1_h_like_speakers()
    counts = spk.groupby("subgroup").size()
    assert len(counts) == 18 and len(spk) == 1194
    assert counts["india_f"] == 11 and counts["usa_m"] == 431  # studies.md, SVEva Fair Table 3
    assert spk["speaker"].is_unique
    assert set(VOXCELEB1_H_LIKE_SUBGROUPS["source"]) == {"studies.md (SVEva Fair Table 3)", "illustrative"}


def test_cm_default_allocation_of_speakers():
    # 1194 speakers reproduces the table exactly
    sim = simulate_trials(2000, 1194, seed=0)
    got = sim.speakers.groupby("subgroup").size()
    want = VOXCELEB1_H_LIKE_SUBGROUPS.set_index("subgroup")["n_speakers"]
    assert (got.loc[want.index] == want).all()
    # 100 speakers: total 100, each subgroup within 1 of its proportional quota
    sim = simulate_trials(2000, 100, seed=0)
    got = sim.speakers.groupby("subgroup").size().reindex(want.index, fill_value=0)
    quota = 100 * want / want.sum()
    assert got.sum() == 100
    assert ((got - quota).abs() < 1).all()


def test_user_speaker_metadata_per_speaker_and_per_subgroup():
    per_speaker = pd.DataFrame({"speaker": ["a", "b", "c"], "sex": ["f", "m", "f"],
                                "nationality": ["x", "x", "y"]})
    sim = simulate_trials(600, speaker_meta=per_speaker, seed=1)
    assert set(sim.table["speaker"].astype(str)) == {"a", "b", "c"}
    assert sim.speakers.set_index("speaker").loc["c", "subgroup"] == "y_f"
    counts = pd.DataFrame({"sex": ["f", "m"], "nationality": ["fr", "fr"], "n_speakers": [3, 2]})
    sim = simulate_trials(600, speaker_meta=counts, seed=1)
    assert sim.speakers.groupby("subgroup").size().to_dict() == {"fr_f": 3, "fr_m": 2}
    sv = simulate_sv_trials(600, speakers=counts, seed=1)
    assert sv.speakers.groupby("subgroup").size().to_dict() == {"fr_f": 3, "fr_m": 2}


@pytest.mark.parametrize("meta, match", [
    (pd.DataFrame({"sex": ["f"]}), "nationality"),
    (pd.DataFrame({"speaker": ["a", "a"], "sex": ["f", "m"], "nationality": ["x", "x"]}), "duplicated"),
    (pd.DataFrame({"sex": ["f", None], "nationality": ["x", "x"]}), r"'sex'.*rows: \[1\]"),
    (pd.DataFrame({"sex": ["f"], "nationality": ["x"], "n_speakers": [-1]}), "n_speakers"),
])
def test_speaker_metadata_errors(meta, match):
    with pytest.raises(SimulationError, match=match):
        speaker_table(meta)


@pytest.mark.parametrize("kwargs, match", [
    ({"n_trials": 0}, "n_trials"),
    ({"sigma": 0.0}, "sigma"),
    ({"sd_attack": -1.0}, "sd_attack"),
    ({"p_positive": 1.5}, "p_positive"),
    ({"subgroup_shift": {"atlantis_f": 1.0}}, "atlantis_f"),
    ({"subgroup_shift": {"usa_m": (1.0, 2.0, 3.0)}}, "usa_m"),
])
def test_simulate_trials_argument_errors(kwargs, match):
    with pytest.raises(SimulationError, match=match):
        simulate_trials(**{"n_trials": 100, **kwargs})
    assert issubclass(SimulationError, ValueError)


# ---------------------------------------------------------------------------------------
# speaker verification
# ---------------------------------------------------------------------------------------

def test_sv_schema_and_design():
    sim = simulate_sv_trials(60_000, p_same_subgroup=0.6, seed=8)
    t, tr = sim
    assert list(t.columns) == SV_COLUMNS
    assert t["y"].dtype == np.int8 and t["same_sex"].dtype == np.int8
    y = t["y"].to_numpy()
    enrol = t["enrol_speaker"].astype(str).to_numpy()
    test = t["test_speaker"].astype(str).to_numpy()
    assert (enrol[y == 1] == test[y == 1]).all()
    assert (enrol[y == 0] != test[y == 0]).all()
    assert set(t["label"].astype(str)) == {"target", "nontarget"}
    meta = sim.speakers.set_index("speaker")
    assert (meta.loc[enrol, "subgroup"].to_numpy() == t["subgroup"].astype(str).to_numpy()).all()
    same_sex = meta.loc[enrol, "sex"].to_numpy() == meta.loc[test, "sex"].to_numpy()
    assert (same_sex.astype(np.int8) == t["same_sex"].to_numpy()).all()
    # P(nontarget partner in the same subgroup | enrol e) = p + (1 − p)(n_g − 1)/(N − 1)
    sizes = sim.speakers.groupby("subgroup").size()
    N = len(sim.speakers)
    n_g = sizes.loc[t["subgroup"].astype(str)].to_numpy()[y == 0]
    p_exp = 0.6 + 0.4 * (n_g - 1) / (N - 1)
    same_sub = meta.loc[test[y == 0], "subgroup"].to_numpy() == meta.loc[enrol[y == 0], "subgroup"].to_numpy()
    assert abs(same_sub.sum() - p_exp.sum()) < Z * np.sqrt(np.sum(p_exp * (1 - p_exp)))


def test_sv_scores_follow_the_model():
    sim = simulate_sv_trials(100_000, sigma=0.1, sigma_pos=0.05, seed=9)
    t, tr = sim
    y = t["y"].to_numpy()
    b = tr["speaker_effects"].loc[t["enrol_speaker"].astype(str)].to_numpy()
    sh = tr["subgroup_shift"]
    g = t["subgroup"].astype(str)
    shift = np.where(y == 1, sh["target"].loc[g].to_numpy(), sh["nontarget"].loc[g].to_numpy())
    m = (tr["mu"] + tr["d"] * y + tr["beta_same_sex"] * t["same_sex"].to_numpy()
         + tr["beta_same_nationality"] * t["same_nationality"].to_numpy() + b + shift)
    resid = t["score"].to_numpy() - m
    for cls, sig in ((0, 0.1), (1, 0.05)):
        r = resid[y == cls]
        assert abs(r.mean()) < Z * sig / np.sqrt(r.size)
        lo, hi = stats.chi2.ppf([1e-6, 1 - 1e-6], r.size) / r.size
        assert lo < np.mean(r ** 2) / sig ** 2 < hi
    # explicit shifts replace the random ones; {} means none
    s0 = simulate_sv_trials(1000, subgroup_shift={}, seed=1)
    assert (s0.truth["subgroup_shift"] == 0).all().all()
    s1 = simulate_sv_trials(1000, subgroup_shift={"india_f": (0.2, -0.1)}, seed=1)
    assert s1.truth["subgroup_shift"].loc["india_f"].tolist() == [0.2, -0.1]


# ---------------------------------------------------------------------------------------
# expected error rates (the truth of the data-generating process)
# ---------------------------------------------------------------------------------------

def test_true_eer_two_gaussians_closed_form():
    # no random effects, no covariate: classes N(mu, s0²) and N(mu + d, s1²);
    # EER = Φ(−d / (s0 + s1)) at τ = mu + d·s0/(s0 + s1) (studies.md A.4)
    sim = simulate_trials(2000, 10, 3, mu=-1.0, d=2.5, beta_x=0.0, sd_speaker=0.0, sd_attack=0.0,
                          sigma=1.0, sigma_pos=0.5, seed=0)
    eer, tau = sim.true_eer(return_threshold=True)
    assert eer == pytest.approx(stats.norm.cdf(-2.5 / 1.5), abs=1e-10)
    assert tau == pytest.approx(-1.0 + 2.5 * 1.0 / 1.5, abs=1e-8)
    # minDCF closed form: minimise 0.05·Φ((τ − 1.5)/0.5) + 0.95·Φ((−1 − τ)/1)
    def cost(t: float) -> float:
        return 0.05 * stats.norm.cdf((t - 1.5) / 0.5) + 0.95 * stats.norm.sf((t + 1.0) / 1.0)
    res = optimize.minimize_scalar(cost, bounds=(-5, 5), method="bounded", options={"xatol": 1e-12})
    md = sim.true_min_dcf(p_target=0.05)
    assert md.value == pytest.approx(res.fun, rel=1e-8)
    assert md.threshold == pytest.approx(res.x, abs=1e-4)
    assert sim.true_dcf(md.threshold) == pytest.approx(md.value, rel=1e-12)
    norm = sim.true_min_dcf(p_target=0.05, normalize=True)
    assert norm.value == pytest.approx(res.fun / 0.05, rel=1e-8)


def test_true_min_dcf_trivial_decision():
    # classes nearly identical: rejecting everything (cost p_target·c_miss) is optimal
    sim = simulate_trials(2000, 10, 3, d=0.0, beta_x=0.0, sd_speaker=0.0, sd_attack=0.0, seed=0)
    md = sim.true_min_dcf(p_target=0.05)
    assert md.value == pytest.approx(0.05) and md.threshold == np.inf


def test_true_rates_match_empirical_rates(big_cm: Simulation):
    t = big_cm.table
    s = t["score"].to_numpy()
    y = t["y"].to_numpy()
    eer, tau = big_cm.true_eer(return_threshold=True)
    thresholds = np.array([-2.0, 0.0, tau, 1.5])
    pm, pf = big_cm.true_rates(thresholds)
    pos, neg = s[y == 1], s[y == 0]
    for k, th in enumerate(thresholds):
        emp_miss = np.mean(pos < th)
        emp_fa = np.mean(neg >= th)
        assert abs(emp_miss - pm[k]) < Z * np.sqrt(pm[k] * (1 - pm[k]) / pos.size) + 1e-12
        assert abs(emp_fa - pf[k]) < Z * np.sqrt(pf[k] * (1 - pf[k]) / neg.size) + 1e-12
    assert pm[2] == pytest.approx(eer, abs=1e-9) and pf[2] == pytest.approx(eer, abs=1e-9)
    # per subgroup, against direct averaging of the per-trial normal CDFs
    g = t["subgroup"].astype(str).to_numpy()
    sel = (g == "uk_f") & (y == 0)
    direct = np.mean(stats.norm.sf(0.0, loc=_independent_mean(big_cm)[sel],
                                   scale=np.sqrt(0.5 ** 2 + 1.0)))
    _, pf_uk = big_cm.true_rates(0.0, subgroup="uk_f")
    assert float(pf_uk) == pytest.approx(direct, rel=1e-10)
    with pytest.raises(SimulationError, match="atlantis"):
        big_cm.true_rates(0.0, subgroup="atlantis")


def test_sv_true_eer_matches_large_sample():
    sim = simulate_sv_trials(400_000, seed=10)
    t = sim.table
    s, y = t["score"].to_numpy(), t["y"].to_numpy()
    eer, tau = sim.true_eer(return_threshold=True)
    emp_miss, emp_fa = np.mean(s[y == 1] < tau), np.mean(s[y == 0] >= tau)
    n1, n0 = (y == 1).sum(), (y == 0).sum()
    assert abs(emp_miss - eer) < Z * np.sqrt(eer * (1 - eer) / n1)
    assert abs(emp_fa - eer) < Z * np.sqrt(eer * (1 - eer) / n0)
