"""Interval machinery of issue 11: bca-t levels by hand, the bias-shifted interval, the
jackknife, degenerate intervals, the coverage-driven reliability rule, the closed-form truth
of the coverage simulation, metric intervals (Estimate) and a reduced coverage check."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy.integrate import quad
from scipy.stats import norm

import scoremix as sm
from scoremix.fairness import subgroup_dcf
from scoremix.resampling.bootstrap import draw_cluster_weights
from scoremix.fairness.coverage import CoverageDesign, coverage_study, simulate_subgroup_trials, true_subgroup_measures
from scoremix.fairness.reliability import MEASURED_COVERAGE, MIN_COVERAGE, flag_rows, measured_coverage
from scoremix.resampling.intervals import (bca_t_interval, bca_t_levels, expanded_z, jackknife_weights,
                                          percentile_interval, shift_t_interval)


# ----------------------------------------------------------------------------- bca-t by hand
def test_expanded_quantile_hand_values():
    # t_{4}(0.975) = 2.7764451, t_{29}(0.975) = 2.0452296 (tables); times sqrt(n/(n-1))
    z = expanded_z(np.array([5.0, 30.0, 1.0]), 0.95)
    assert z[0] == pytest.approx(2.7764451 * np.sqrt(5 / 4), abs=1e-6)
    assert z[1] == pytest.approx(2.0452296 * np.sqrt(30 / 29), abs=1e-6)
    assert np.isnan(z[2])


def test_bca_t_levels_reduce_to_expanded_percentile_without_bias_or_skew():
    reps = np.array([[-2.0, -1.0, 1.0, 2.0]])  # median-unbiased: z0 = 0
    jack = np.array([[1.0, -1.0, 2.0, -2.0]])  # symmetric influence: a = 0
    lo, hi = bca_t_levels(np.array([0.0]), reps, jack, np.zeros(4, int), np.array([5.0]), 0.95)
    q = norm.cdf(-2.7764451 * np.sqrt(5 / 4))  # 0.000954
    assert lo[0] == pytest.approx(q, abs=1e-7) and hi[0] == pytest.approx(1 - q, abs=1e-7)


def test_bca_t_levels_bias_and_acceleration_by_hand():
    reps = np.array([[-1.0, 1.0, 2.0, 3.0]])  # 1 of 4 below the estimate 0: z0 = Phi^-1(0.25)
    jack = np.array([[1.0, 2.0, 3.0, 6.0]])  # U = mean - jack = [2, 1, 0, -3]
    z0 = -0.6744897502
    a = -18.0 / (6.0 * 14.0 ** 1.5)  # sum U^3 = -18, sum U^2 = 14
    z = 2.7764451 * np.sqrt(5 / 4)
    want = [norm.cdf(z0 + (z0 + s * z) / (1 - a * (z0 + s * z))) for s in (-1, 1)]
    lo, hi = bca_t_levels(np.array([0.0]), reps, jack, np.zeros(4, int), np.array([5.0]), 0.95)
    assert lo[0] == pytest.approx(want[0], rel=1e-8) and hi[0] == pytest.approx(want[1], rel=1e-8)
    # the interval ends are the replicate quantiles at those levels (linear interpolation)
    ilo, ihi = bca_t_interval(np.array([0.0]), reps, jack, np.zeros(4, int), np.array([5.0]), 0.95)
    assert ilo[0] == pytest.approx(np.quantile(reps[0], want[0]), rel=1e-8)
    assert ihi[0] == pytest.approx(np.quantile(reps[0], want[1]), rel=1e-8)


def test_shift_t_interval_by_hand():
    reps = np.array([[1.0, 2.0, 3.0, 4.0, 5.0]])  # mean 3, estimate 3.5: bootstrap bias -0.5
    q = norm.cdf(-2.7764451 * np.sqrt(5 / 4))
    lo, hi = shift_t_interval(np.array([3.5]), reps, np.array([5.0]), 0.95)
    assert lo[0] == pytest.approx(np.quantile(reps[0], q) + 1.0, rel=1e-7)
    assert hi[0] == pytest.approx(np.quantile(reps[0], 1 - q) + 1.0, rel=1e-7)


def test_jackknife_weights_delete_one_cluster_within_strata():
    W = jackknife_weights(np.array([0, 0, 1, 2, 2]))
    assert W.shape == (5, 5)
    assert W[0, 0] == 0 and W[1, 0] == 1 and W[0, 1] == 1
    assert W[2, 2] == 1  # alone in its stratum: kept
    assert W.sum() == 25 - 4


# ----------------------------------------------------------------------------- subgroup tables
def _table(n_spk: int, seed: int = 0) -> pd.DataFrame:
    d = CoverageDesign(sizes=(n_spk, n_spk), shift_non=(0.0, 0.2), shift_tar=(0.0, -0.2))
    return simulate_subgroup_trials(d, seed=seed)


def test_percentile_interval_equals_replicate_quantiles():
    res = subgroup_dcf(_table(6), ["group"], n_boot=50, random_state=1, progress=False, eer=False,
                       interval="percentile")
    reps = res.replicates["ratio_overall"]
    for g in range(2):
        assert res.table["ratio_overall_lo"].iloc[g] == pytest.approx(np.quantile(reps[g], 0.025), rel=1e-12)
        assert res.table["ratio_overall_hi"].iloc[g] == pytest.approx(np.quantile(reps[g], 0.975), rel=1e-12)
    assert res.settings["interval"] == "percentile"
    lo, hi = percentile_interval(reps, 0.95)
    assert np.allclose(lo, res.table["ratio_overall_lo"])


def test_expanded_equals_quantiles_at_t_levels():
    df = _table(6)
    a = subgroup_dcf(df, ["group"], n_boot=200, random_state=3, progress=False, eer=False, interval="expanded")
    b = subgroup_dcf(df, ["group"], n_boot=200, random_state=3, progress=False, eer=False, interval="expanded")
    assert a.settings["interval"] == "expanded"
    pd.testing.assert_frame_equal(a.table, b.table)
    q = norm.cdf(-2.5705818 * np.sqrt(6 / 5))  # t_5(0.975) = 2.5705818: level 0.0080
    for g in range(2):
        reps = a.replicates["fpr"][g]
        assert a.table["fpr_lo"].iloc[g] == pytest.approx(np.quantile(reps, q), rel=1e-6)
        assert a.table["fpr_hi"].iloc[g] == pytest.approx(np.quantile(reps, 1 - q), rel=1e-6)
        # min_dcf: shifted by twice the bootstrap bias
        m = a.replicates["min_dcf"][g]
        bias = m.mean() - a.table["min_dcf"].iloc[g]
        assert a.table["min_dcf_lo"].iloc[g] == pytest.approx(np.quantile(m, q) - 2 * bias, rel=1e-6)
    c = subgroup_dcf(df, ["group"], n_boot=200, random_state=3, progress=False, eer=False, interval="bca-t")
    assert c.settings["interval"] == "bca-t" and not np.allclose(c.table["fpr_lo"], a.table["fpr_lo"])
    with pytest.raises(ValueError, match="interval must be one of"):
        subgroup_dcf(df, ["group"], n_boot=10, interval="basic", progress=False)


def test_degenerate_intervals_are_blank_and_flagged():
    """One speaker per subgroup: every replicate draws that speaker, so intervals have zero width."""
    rng = np.random.default_rng(0)
    y = np.tile(np.r_[np.ones(20), np.zeros(60)], 2).astype(int)
    df = pd.DataFrame({"speaker": np.repeat(["a", "b"], 80), "g": np.repeat(["x", "y"], 80), "label": y,
                       "score": y * 2.0 + rng.normal(size=160)})
    res = subgroup_dcf(df, ["g"], n_boot=30, random_state=0, progress=False, interval="percentile")
    t = res.table
    assert t["ratio_overall_lo"].isna().all() and t["ratio_overall_hi"].isna().all()
    assert not t["reliable"].any()
    assert t["note"].str.contains("degenerate").all()
    assert np.isnan(res.fairness_index_ci).all()


def test_fairness_index_context():
    res = subgroup_dcf(_table(8), ["group"], n_boot=100, random_state=0, progress=False, eer=False)
    assert res.n_subgroups == 2
    lo = res.table["ratio_overall_lo"].to_numpy()
    assert res.share_above_one == pytest.approx(np.sum(lo > 1) / 2)
    assert np.isnan(subgroup_dcf(_table(8), ["group"], progress=False).share_above_one)


# ----------------------------------------------------------------------------- reliability rule
def test_reliability_rule_follows_measured_coverage():
    sizes = np.array(sorted(MEASURED_COVERAGE))
    n = np.array([3, sizes[0], 15, 200, 60, 60])
    err = np.array([100, 100, 100, 100, 10, 100])
    ok, notes = flag_rows(n, err, np.full(6, 50), np.array([50, 50, 50, 50, 50, 0]))
    assert not ok[0] and "fewer than any size" in notes[0]
    size, cov = measured_coverage(n)
    assert list(size[:4]) == [0, sizes[0], 15, sizes[-1]]
    for i in (1, 2, 3):
        assert ok[i] == (cov[i] >= MIN_COVERAGE)
        if not ok[i]:
            assert f"at {size[i]} speakers" in notes[i]
    assert not ok[4] and "10 errors" in notes[4]
    assert not ok[5] and "one class only" in notes[5]
    # data summary: no error count yet, a class-count floor
    ok, notes = flag_rows(np.array([60]), None, np.array([10]), np.array([500]), min_class_trials=30)
    assert not ok[0] and "fewer than 30 trials of a class" in notes[0]


# ----------------------------------------------------------------------------- coverage simulation truth
def test_true_measures_match_numerical_integration_over_speakers():
    d = CoverageDesign(sd_speaker=0.4, sigma_pos=1.2)
    tr = true_subgroup_measures(d)
    tau = float(tr["threshold"].iloc[0])
    g = 1
    sb = d.sd_speaker
    fnr = quad(lambda b: norm.cdf((tau - d.d - d.shift_tar[g] - b) / d.sigma_pos) * norm.pdf(b, 0, sb), -8, 8)[0]
    fpr = quad(lambda b: norm.sf(tau - d.shift_non[g] - b) * norm.pdf(b, 0, sb), -8, 8)[0]
    row = tr.iloc[g]
    assert row["fnr"] == pytest.approx(fnr, rel=1e-7) and row["fpr"] == pytest.approx(fpr, rel=1e-7)
    assert row["dcf_at_overall"] == pytest.approx(0.05 * fnr + 0.95 * fpr, rel=1e-7)
    # tau* minimises the mixture cost: a grid never beats it
    w = np.asarray(d.sizes) / np.sum(d.sizes)
    s0, s1 = d.class_sd

    def cost(t):
        return (0.05 * w @ norm.cdf((t - d.d - np.asarray(d.shift_tar)) / s1)
                + 0.95 * w @ norm.sf((t - np.asarray(d.shift_non)) / s0))

    grid = np.linspace(tau - 1, tau + 1, 4001)
    assert min(cost(t) for t in grid) >= float(tr["all_min_dcf"].iloc[0]) - 1e-12
    assert row["ratio_overall"] == pytest.approx(row["dcf_at_overall"] / tr["all_min_dcf"].iloc[0])
    # the subgroup's EER: the threshold where its miss and false-alarm rates (speaker effect integrated
    # out numerically) are equal
    from scipy.optimize import brentq

    def gap(t):
        fn = quad(lambda b: norm.cdf((t - d.d - d.shift_tar[g] - b) / d.sigma_pos) * norm.pdf(b, 0, sb), -8, 8)[0]
        fp = quad(lambda b: norm.sf(t - d.shift_non[g] - b) * norm.pdf(b, 0, sb), -8, 8)[0]
        return fn - fp, fn

    t_e = brentq(lambda t: gap(t)[0], -2, 5, xtol=1e-12)
    assert row["eer"] == pytest.approx(gap(t_e)[1], rel=1e-7)


@pytest.mark.slow
def test_reduced_coverage_expanded_beats_percentile_at_eight_speakers():
    """50 data sets, subgroups of 8 and 30 speakers with speaker effects: the 95 % expanded intervals
    of ratio_overall, fnr and dcf_at_overall cover in >= 0.85 of data sets (binomial SE ~0.03),
    and at 8 speakers at least as often as the percentile intervals."""
    d = CoverageDesign(sizes=(8, 30), shift_non=(0.2, 0.0), shift_tar=(-0.1, 0.0), sd_speaker=0.4)
    r = coverage_study(d, 50, n_boot=300, seed=5, progress=False,
                       measures=("ratio_overall", "fnr", "dcf_at_overall"))
    cov = r.groupby(["method", "measure", "n_speakers"])["covered"].mean()
    assert (cov.loc["expanded"] >= 0.85).all(), cov
    assert (cov.loc["studentized"] >= 0.85).all(), cov
    assert cov.loc["expanded"].xs(8, level="n_speakers").mean() >= \
        cov.loc["percentile"].xs(8, level="n_speakers").mean()


# ----------------------------------------------------------------------------- metric intervals
def _spk_scores(seed: int = 0):
    rng = np.random.default_rng(seed)
    spk = np.repeat(np.arange(25), 40)
    y = np.tile(np.r_[np.ones(10), np.zeros(30)], 25).astype(int)
    s = 2.0 * y + rng.normal(size=spk.size) + rng.normal(0, 0.5, 25)[spk]
    return s, y, spk


def test_metric_values_unchanged_without_bootstrap():
    s, y, spk = _spk_scores()
    e = sm.eer(s, y)
    assert type(e) is float
    b = sm.eer(s, y, n_boot=100, speaker=spk, seed=0)
    assert isinstance(b, sm.Estimate) and float(b) == e and b * 100 == pytest.approx(100 * e)
    assert b.lo < e < b.hi and b.n_clusters == 25 and b.n_boot == 100
    md = sm.min_dcf(s, y, n_boot=100, speaker=spk, seed=0)
    assert md.value == sm.min_dcf(s, y).value and md.lo <= md.value <= md.hi
    assert md.normalized == pytest.approx(md.value / 0.05)
    assert np.isnan(sm.min_dcf(s, y).lo)
    c = sm.cllr(s - 1.0, y, n_boot=50, speaker=spk, seed=2)
    assert float(c) == sm.cllr(s - 1.0, y) and c.lo < c < c.hi
    a = sm.act_dcf(s, y, n_boot=50, speaker=spk, seed=2)
    assert float(a) == sm.act_dcf(s, y)
    with pytest.raises(sm.metrics.MetricInputError, match="speaker= is only used"):
        sm.eer(s, y, speaker=spk)
    with pytest.raises(sm.metrics.MetricInputError, match="speaker has 3 values"):
        sm.eer(s, y, n_boot=40, speaker=spk[:3])


def test_cluster_bootstrap_replicates_are_speaker_resamples():
    """Independent re-implementation: the same multiplicities (speakers numbered in the sorted
    order of their string form), trials repeated per speaker, expanded-percentile ends."""
    s, y, spk = _spk_scores(1)
    est = sm.resampling.cluster_bootstrap(lambda a, b: float(np.mean(a[b == 1])), s, y, speaker=spk, n_boot=64,
                                       seed=9)
    names = sorted({str(v) for v in spk})
    M = draw_cluster_weights(np.zeros(25, np.int64), 64, np.random.default_rng(9)).astype(int)
    reps = []
    for b in range(64):
        idx = np.concatenate([np.flatnonzero(spk.astype(str) == nm).repeat(M[c, b]) for c, nm in enumerate(names)])
        reps.append(np.mean(s[np.sort(idx)][y[np.sort(idx)] == 1]))
    q = norm.cdf(-2.0638986 * np.sqrt(25 / 24))  # t_24(0.975) = 2.0638986
    assert est.lo == pytest.approx(np.quantile(reps, q), rel=1e-6)
    assert est.hi == pytest.approx(np.quantile(reps, 1 - q), rel=1e-6)
    assert est.interval == "expanded" and est.n_clusters == 25


def test_cli_eer_with_intervals(tmp_path, capsys):
    from scoremix.cli import main

    s, y, spk = _spk_scores(2)
    p = tmp_path / "t.csv"
    pd.DataFrame({"score": s, "label": y, "spk": spk}).to_csv(p, index=False)
    assert main(["eer", str(p), "--n-boot", "60", "--speaker", "spk", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["eer"] == pytest.approx(sm.eer(s, y))
    assert out["eer_lo"] < out["eer"] < out["eer_hi"]
    assert out["min_dcf_normalized"] == pytest.approx(out["min_dcf"] / 0.05)
    assert main(["eer", str(p), "--n-boot", "60", "--speaker", "nope"]) != 0
    assert "nope" in capsys.readouterr().err


def test_cli_eer_llr_adds_act_dcf_and_cllr_with_intervals(tmp_path, capsys):
    from scoremix.cli import main

    s, y, spk = _spk_scores(3)
    p = tmp_path / "t.csv"
    pd.DataFrame({"score": s, "label": y, "spk": spk}).to_csv(p, index=False)
    assert main(["eer", str(p), "--llr", "--n-boot", "60", "--speaker", "spk", "--seed", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ad = sm.act_dcf(s, y, n_boot=60, speaker=spk, seed=4)
    cl = sm.cllr(s, y, n_boot=60, speaker=spk, seed=4)
    assert out["act_dcf"] == pytest.approx(sm.act_dcf(s, y)) and out["cllr"] == pytest.approx(sm.cllr(s, y))
    assert (out["act_dcf_lo"], out["act_dcf_hi"]) == pytest.approx((ad.lo, ad.hi))
    assert (out["cllr_lo"], out["cllr_hi"]) == pytest.approx((cl.lo, cl.hi))
    assert main(["eer", str(p), "--llr"]) == 0
    txt = capsys.readouterr().out
    assert "actDCF" in txt and "Cllr" in txt
    assert main(["eer", str(p), "--llr", "--lower-is-positive"]) != 0
    assert "--llr" in capsys.readouterr().err


def test_study_metrics_llr_rows_carry_act_dcf_and_cllr_intervals():
    from scoremix.study.config import MetricsConfig
    from scoremix.study.tasks import metrics_task

    s, y, spk = _spk_scores(5)
    cfg = MetricsConfig(n_boot=50, seed=2, speaker="spk", llr=True)
    tab = metrics_task("sys", pd.DataFrame({"score": s, "y": y, "spk": spk}), cfg)["table"]
    row = tab[tab["by"] == "overall"].iloc[0]
    ad = sm.act_dcf(s, y, n_boot=50, speaker=spk, seed=2)
    cl = sm.cllr(s, y, n_boot=50, speaker=spk, seed=2)
    assert row["act_dcf"] == pytest.approx(float(ad)) and row["cllr"] == pytest.approx(float(cl))
    assert (row["act_dcf_lo"], row["act_dcf_hi"]) == pytest.approx((ad.lo, ad.hi))
    assert (row["cllr_lo"], row["cllr_hi"]) == pytest.approx((cl.lo, cl.hi))
    assert "act_dcf" not in metrics_task("sys", pd.DataFrame({"score": s, "y": y, "spk": spk}),
                                         MetricsConfig())["table"].columns


def test_report_metrics_table_shows_act_dcf_and_cllr_with_units():
    from scoremix.study.config import MetricsConfig
    from scoremix.study.report import _metric_columns

    tab = pd.DataFrame({"system": ["a"], "by": ["overall"], "cell": ["all"], "n_trials": [10], "n_pos": [5],
                        "n_neg": [5], "eer": [0.1], "min_dcf": [0.03], "min_dcf_threshold": [1.0],
                        "act_dcf": [0.04], "act_dcf_lo": [0.02], "act_dcf_hi": [0.06], "cllr": [0.3],
                        "cllr_lo": [0.2], "cllr_hi": [0.4]})
    show, cols = _metric_columns(tab, MetricsConfig(llr=True, n_boot=10))
    assert cols[-6:] == ["actDCF (unnormalised)", "actDCF (unnormalised) lo", "actDCF (unnormalised) hi",
                         "Cllr (bits)", "Cllr (bits) lo", "Cllr (bits) hi"]
    assert show.loc[0, "actDCF (unnormalised) hi"] == 0.06 and show.loc[0, "Cllr (bits) lo"] == 0.2
    assert show.loc[0, "EER % (rocch)"] == pytest.approx(10.0)
    assert show.loc[0, "minDCF (normalised)"] == pytest.approx(0.03 / 0.05)


def test_unbounded_interval_end_is_kept_named_and_printed_as_unbounded():
    """Subgroup x: its false alarms all come from one of 6 speakers (the others' nontarget
    scores stop at 1.0, below τ*), so (5/6)^6 = 33 % of the replicates draw no false alarm
    there (> α/2): the data cannot bound x's fpr_ratio from above.  The studentised end is
    +inf, capped at the ratio's maximum 1/fpr_overall (issue 24), and tables print an infinite end
    as 'unbounded', never 'inf'.  Ends with a logical maximum are capped there instead: a rate at 1, a minDCF
    at the cost of the better trivial system, min(c_miss·p, c_fa·(1−p)) = 0.05 here."""
    from scoremix.report_html import Table, _table_html

    rng = np.random.default_rng(1)
    rows = []
    for g, n_spk in (("x", 6), ("y", 30)):
        for j in range(n_spk):
            non = rng.normal(0.5 if (g == "x" and j == 0) else 0.0, 1, 100)
            if g == "x" and j > 0:
                non = np.minimum(non, 1.0)
            tar = rng.normal(3, 1, 20)
            for s, lab in ((tar, 1), (non, 0)):
                rows.append(pd.DataFrame({"speaker": f"{g}{j}", "group": g, "label": lab, "score": s}))
    df = pd.concat(rows, ignore_index=True)
    res = subgroup_dcf(df, ["group"], n_boot=400, random_state=0, progress=False, eer=False)
    t = res.table.set_index("subgroup")
    x = t.loc["x"]
    assert x["fpr"] > 0 and (df.query("group == 'x' and label == 0").score > res.threshold).sum() == 2
    # issue 24: the +inf studentised end is capped at the ratio's maximum 1/fpr_overall (fpr_x ≤ 1), and
    # two false alarms do not make a reliable row (fewer than MIN_CLASS_ERRORS errors of a class)
    assert 0 < x["fpr_ratio"] and np.isfinite(x["fpr_ratio_lo"])
    assert x["fpr_ratio_hi"] == pytest.approx(1 / res.overall["fpr"], rel=1e-12)
    assert x["fpr_hi"] == 1.0
    assert x["min_dcf_hi"] == pytest.approx(0.05, abs=1e-15)
    assert (t["min_dcf_hi"] <= 0.05 + 1e-15).all()
    assert not x["reliable"] and "2 false alarms" in x["note"]
    assert "unbounded" not in t.loc["y", "note"]
    shown = res.table[["subgroup", "fpr_ratio", "fpr_ratio_lo", "fpr_ratio_hi"]].assign(fpr_ratio_hi=np.inf)
    html = _table_html(Table(shown))
    assert "unbounded" in html and ">inf<" not in html
    # normalised costs: the trivial system costs 1
    r2 = subgroup_dcf(df, ["group"], n_boot=400, random_state=0, progress=False, eer=False, normalize=True)
    assert r2.table.set_index("subgroup").loc["x", "min_dcf_hi"] == pytest.approx(1.0, abs=1e-12)


def test_interval_end_text_and_forest_plot_of_an_unbounded_end():
    import matplotlib

    matplotlib.use("Agg")
    from scoremix.fairness.plots import plot_forest
    from scoremix.report_html import format_interval_end, is_interval_end

    assert format_interval_end(float("inf")) == "unbounded" and format_interval_end(float("-inf")) == "unbounded"
    assert format_interval_end(float("nan")) == "–" and format_interval_end(0.123456) == "0.1235"
    assert is_interval_end("fpr_ratio_hi") and is_interval_end("EER % (rocch) lo") and not is_interval_end("threshold")
    tab = pd.DataFrame({"subgroup": ["a", "b"], "ratio_overall": [1.2, 0.9], "ratio_overall_lo": [0.8, 0.7],
                        "ratio_overall_hi": [np.inf, 1.1], "reliable": [True, True]})
    fig = plot_forest(tab)
    ax = fig.axes[0]
    # the unbounded row is drawn as a dotted line from its lower end to past every finite value, with an arrow
    assert any(t.get_text() == "interval unbounded above" for t in ax.get_legend().get_texts())
    segs = [s for c in ax.collections for s in getattr(c, "get_segments", lambda: [])()]
    ends = sorted(float(s[1][0]) for s in segs if len(s) == 2 and s[0][1] == s[1][1] and s[0][0] == 0.8)
    assert ends and ends[-1] > 1.2


@pytest.mark.parametrize("hip", [True, False])
def test_weighted_replicates_equal_reevaluation_on_resampled_trials(hip):
    """Every built-in metric's vectorised replicate equals the metric re-evaluated on the
    trials of the drawn speakers, each repeated as often as its speaker was drawn (ties,
    an empty class in some replicates, infinite LLRs, both score directions)."""
    from scoremix.resampling.bootstrap import draw_cluster_weights
    from scoremix.resampling import WeightedReplicates

    rng = np.random.default_rng(7)
    C = 7
    cl = np.repeat(np.arange(C), 30)
    y = np.tile(np.r_[np.ones(6, int), np.zeros(24, int)], C)
    y[cl == 6] = 0  # speaker 6 has nontargets only
    s = np.round(np.where(y == 1, 2.0, 0.0) + rng.normal(0, 0.3, C)[cl] + rng.normal(size=y.size), 1)  # ties
    llr = s - 1.0
    llr[np.flatnonzero((y == 0) & (cl == 3))[0]] = np.inf  # an infinitely wrong LLR of speaker 3
    sgn = 1.0 if hip else -1.0
    M = draw_cluster_weights(np.zeros(C, np.int64), 40, np.random.default_rng(0))
    M[:, 0] = 0.0
    M[6, 0] = C  # replicate 0: speaker 6 only — no target trial
    kinds = {
        "eer": (dict(), lambda a, b: sm.eer(sgn * a, b, higher_is_positive=hip), s),
        "min_dcf": (dict(p_target=0.2, c_miss=1.0, c_fa=2.0, normalize=True),
                    lambda a, b: sm.min_dcf(sgn * a, b, 0.2, 1.0, 2.0, True, higher_is_positive=hip).value, s),
        "dcf": (dict(threshold=0.1, p_target=0.2, c_miss=1.0, c_fa=2.0, normalize=False),
                lambda a, b: sm.dcf(a, b, 0.1, 0.2, 1.0, 2.0, False), s),
        "cllr": (dict(), lambda a, b: sm.cllr(a, b), llr),
    }
    import warnings

    for kind, (params, stat, x) in kinds.items():
        xs = x if kind in ("dcf", "cllr") else sgn * x
        fast = WeightedReplicates(kind, xs if kind in ("eer", "min_dcf") else x, y, cl, C, **params)(M)
        assert np.isnan(fast[0]), kind
        for b in range(1, M.shape[1]):
            idx = np.repeat(np.arange(y.size), M[cl, b].astype(int))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                want = stat(xs[idx] if kind in ("eer", "min_dcf") else x[idx], y[idx])
            if np.isinf(want):
                assert fast[b] == want, (kind, b)
            else:
                assert fast[b] == pytest.approx(want, abs=1e-9), (kind, b)
        assert any(np.isinf(fast[1:])) == (kind == "cllr"), kind
    # the public function: the studentised interval of the slow re-evaluation's replicates from the same draws
    from scoremix.resampling.overall import studentized_overall_interval

    spk = np.array([f"s{c}" for c in cl])
    quick = sm.eer(sgn * s, y, higher_is_positive=hip, n_boot=60, speaker=spk, seed=3)
    M = draw_cluster_weights(np.zeros(C, np.int64), 60, np.random.default_rng(3))
    slow = []
    for b in range(60):
        idx = np.repeat(np.arange(y.size), M[cl, b].astype(int))
        try:
            slow.append(sm.eer(s[idx], y[idx]))
        except sm.metrics.MetricInputError:
            slow.append(np.nan)
    lo, hi = studentized_overall_interval("eer", s, y, cl, C, M, np.array(slow), 0.95)
    assert quick.interval == "studentized"
    assert quick.lo == pytest.approx(lo, abs=1e-9) and quick.hi == pytest.approx(hi, abs=1e-9)


def test_log_se_of_two_ratios_is_the_cluster_sandwich_by_hand():
    """h = a·ΣmU/ΣmP + b·ΣmV/ΣmN; Var(log h) = C/(C−1)·Σ_c m_c (Z_c − Z̄)², Z_c the influence."""
    from scoremix.resampling.overall import log_se_two_ratios

    rng = np.random.default_rng(3)
    C = 6
    P, N = rng.integers(5, 20, C).astype(float), rng.integers(50, 90, C).astype(float)
    U, V = np.floor(P * rng.random(C)), np.floor(N * rng.random(C) * 0.2)
    a, b = 0.05, 0.95
    m = np.array([2.0, 0, 1, 1, 0, 2])
    h, se = log_se_two_ratios(U, P, V, N, a, b, m[:, None])
    ru, rv = m @ U / (m @ P), m @ V / (m @ N)
    assert h[0] == pytest.approx(a * ru + b * rv, rel=1e-12)
    z = (a * (U - ru * P) / (m @ P) + b * (V - rv * N) / (m @ N)) / (a * ru + b * rv)
    zbar = (m @ z) / C
    var = C / (C - 1) * (m @ (z - zbar) ** 2)
    assert se[0] == pytest.approx(np.sqrt(var), rel=1e-10)
