"""Empirical SVEva measures against a straightforward loop implementation."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from scoremix.fairness import SubgroupError, define_subgroups, fairness_index, subgroup_dcf
from scoremix.resampling.bootstrap import Population, draw_cluster_weights, rocch_eer_from_rates
from scoremix.fairness.engine import CostSpec, Engine
from scoremix.fairness.sveva import prepare_trials


# ----------------------------------------------------------------------------- reference
def ref_cost(s, y, t, a, b):
    P, N = y.sum(), (~y).sum()
    return a * np.sum(y & (s < t)) / P + b * np.sum(~y & (s >= t)) / N


def ref_min(s, y, a, b):
    """Loop over every distinct score and +inf; smallest minimiser."""
    best, arg = np.inf, None
    for t in np.append(np.unique(s), np.inf):
        c = ref_cost(s, y, t, a, b)
        if c < best - 1e-15:
            best, arg = c, t
    return best, arg


def ref_eer(s, y):
    """ROCCH EER from the convex hull of all ROC points (independent: scipy ConvexHull)."""
    from scipy.spatial import ConvexHull

    ts = np.append(np.unique(s), np.inf)
    pm = np.array([np.mean(s[y] < t) for t in ts])
    pf = np.array([np.mean(s[~y] >= t) for t in ts])
    pts = np.unique(np.c_[pf, pm], axis=0)
    pts = np.vstack([pts, [[1, 1]]])
    hull = ConvexHull(pts)
    best = 0.0
    # EER = largest x with x = y on the hull's lower-left boundary: intersect each edge with y = x
    for simplex in hull.simplices:
        (x1, y1), (x2, y2) = pts[simplex[0]], pts[simplex[1]]
        d1, d2 = y1 - x1, y2 - x2
        if d1 == d2:
            continue
        lam = d1 / (d1 - d2)
        if 0 <= lam <= 1:
            x = x1 + lam * (x2 - x1)
            best = x if best == 0.0 else min(best, x)
    return best


def random_table(seed: int, n: int = 1500, n_spk: int = 30, decimals: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    spk = rng.integers(0, n_spk, n)
    sex = np.array(["f", "m"])[spk % 2]
    nat = np.array(["in", "uk", "us"])[spk % 3]
    y = rng.random(n) < 0.3
    s = np.round(rng.normal(0, 1, n) + 2.0 * y + 0.4 * (sex == "f") * y, decimals)
    return pd.DataFrame({"speaker": [f"s{k:02d}" for k in spk], "sex": sex, "nat": nat,
                         "label": np.where(y, "target", "nontarget"), "score": s})


@pytest.mark.parametrize("seed,p_target,c_fa", [(0, 0.05, 1.0), (1, 0.01, 1.0), (2, 0.3, 10.0), (12, 0.2, 1.0)])
def test_measures_match_loop_reference(seed, p_target, c_fa):
    df = random_table(seed)
    res = subgroup_dcf(df, ["sex", "nat"], p_target=p_target, c_fa=c_fa, progress=False)
    a, b = p_target, c_fa * (1 - p_target)
    s = df["score"].to_numpy()
    y = (df["label"] == "target").to_numpy()
    all_min, tstar = ref_min(s, y, a, b)
    assert res.min_dcf == pytest.approx(all_min, abs=1e-12)
    assert res.threshold == tstar
    fpr_all = np.mean(s[~y] >= tstar)
    fnr_all = np.mean(s[y] < tstar)
    assert res.overall["eer"] == pytest.approx(ref_eer(s, y), abs=1e-7)
    tab = res.table.set_index("subgroup")
    ratios = []
    for sx, na in itertools.product(["f", "m"], ["in", "uk", "us"]):
        m = ((df["sex"] == sx) & (df["nat"] == na)).to_numpy()
        sg, yg = s[m], y[m]
        row = tab.loc[f"{sx}_{na}"]
        at = ref_cost(sg, yg, tstar, a, b)
        own, town = ref_min(sg, yg, a, b)
        assert row["n_pos"] == yg.sum() and row["n_neg"] == (~yg).sum()
        assert row["n_speakers"] == df.loc[m, "speaker"].nunique()
        assert row["dcf_at_overall"] == pytest.approx(at, abs=1e-12)
        assert row["min_dcf"] == pytest.approx(own, abs=1e-12)
        assert row["threshold_own"] == town
        assert row["ratio_overall"] == pytest.approx(at / all_min, rel=1e-12)
        assert row["ratio_own"] == pytest.approx(own / at, rel=1e-12, nan_ok=True)
        fpr, fnr = np.mean(sg[~yg] >= tstar), np.mean(sg[yg] < tstar)
        assert row["fpr"] == pytest.approx(fpr, abs=1e-14)
        assert row["fnr"] == pytest.approx(fnr, abs=1e-14)
        with np.errstate(invalid="ignore", divide="ignore"):
            assert row["fpr_ratio"] == pytest.approx(fpr / fpr_all, rel=1e-12, nan_ok=True)
            assert row["fnr_ratio"] == pytest.approx(fnr / fnr_all, rel=1e-12, nan_ok=True)
        assert row["n_errors"] == np.sum(yg & (sg < tstar)) + np.sum(~yg & (sg >= tstar))
        assert row["eer"] == pytest.approx(ref_eer(sg, yg), abs=1e-7)
        ratios.append(at / all_min)
    assert res.fairness_index == pytest.approx(sum(r for r in ratios if r > 1), rel=1e-12)


def test_against_scoremix_metrics():
    metrics = pytest.importorskip("scoremix.metrics")
    df = random_table(5, n=2000, decimals=2)
    res = subgroup_dcf(df, ["sex"], progress=False)
    y = (df["label"] == "target").astype(int).to_numpy()
    md = metrics.min_dcf(df["score"], y, p_target=0.05)
    assert res.min_dcf == pytest.approx(md.value, abs=1e-12)
    assert res.threshold == md.threshold
    assert res.overall["eer"] == pytest.approx(metrics.eer(df["score"], y, method="rocch"), abs=1e-7)
    for sx in ("f", "m"):
        m = (df["sex"] == sx).to_numpy()
        row = res.table.set_index("subgroup").loc[sx]
        assert row["dcf_at_overall"] == pytest.approx(
            metrics.dcf(df["score"][m], y[m], md.threshold, p_target=0.05), abs=1e-12)
        assert row["min_dcf"] == pytest.approx(metrics.min_dcf(df["score"][m], y[m]).value, abs=1e-12)


def test_normalize_scales_costs_not_ratios():
    df = random_table(3)
    r0 = subgroup_dcf(df, ["sex"], progress=False)
    r1 = subgroup_dcf(df, ["sex"], normalize=True, progress=False)
    assert r1.min_dcf == pytest.approx(r0.min_dcf / 0.05, rel=1e-12)  # min(0.05, 0.95) = 0.05
    np.testing.assert_allclose(r1.table["ratio_overall"], r0.table["ratio_overall"], rtol=1e-12)


def test_fairness_index_published_lists():
    v2 = [1.0432, 1.1523, 1.2200, 1.3359, 1.4501, 1.4558, 1.4711, 1.7827, 2.5720, 2.5766]
    l34 = [3.2869, 1.2278, 1.5319, 1.6354, 1.0419, 1.1657, 1.3566, 1.3096, 1.4783, 2.1037]
    assert round(fairness_index(v2 + [0.83, 0.99, np.nan]), 2) == 16.06
    assert round(fairness_index(l34 + [0.5]), 2) == 16.14
    assert fairness_index([1.0, 0.2]) == 0.0


def test_empty_intersection_reported_and_flagged():
    df = random_table(4)
    df = df[~((df["sex"] == "f") & (df["nat"] == "uk"))]
    res = subgroup_dcf(df, ["sex", "nat"], progress=False, n_boot=20, random_state=1)
    row = res.table.set_index("subgroup").loc["f_uk"]
    assert row["n_pos"] == 0 and row["n_neg"] == 0 and row["n_speakers"] == 0
    assert np.isnan(row["ratio_overall"]) and np.isnan(row["min_dcf"]) and np.isnan(row["ratio_overall_lo"])
    assert not row["reliable"] and "empty" in row["note"]
    assert len(res.table) == 6


def test_reliability_flags():
    df = random_table(6, n=800, n_spk=12)
    res = subgroup_dcf(df, ["sex", "nat"], progress=False, min_speakers=3)
    tab = res.table
    expect = (tab["n_errors"] >= 30) & (tab["n_speakers"] >= 3) & (tab["n_pos"] > 0) & (tab["n_neg"] > 0)
    assert (tab["reliable"] == expect).all()
    assert (~tab["reliable"]).any()  # 800 trials over 6 cells: some have < 30 errors


def test_weighted_replicate_equals_duplicated_trials():
    """A bootstrap replicate with multiplicities equals the loop on the duplicated table."""
    df = random_table(7, n=600, n_spk=15)
    prep = prepare_trials(df, ["sex"], speaker="speaker")
    cost = CostSpec()
    eng = Engine(prep.scores, prep.y, prep.clusters, len(prep.cluster_labels), prep.sg, cost)
    M = draw_cluster_weights(prep.strata, 3, np.random.default_rng(0))
    out = eng.measures(M)
    for b in range(3):
        rep = np.repeat(np.arange(len(df)), M[prep.clusters, b].astype(int))
        dup = df.iloc[rep].reset_index(drop=True)
        ref = subgroup_dcf(dup, ["sex"], progress=False)
        assert out["all_min_dcf"][b] == pytest.approx(ref.min_dcf, abs=1e-12)
        np.testing.assert_allclose(out["ratio_overall"][:, b], ref.table["ratio_overall"], rtol=1e-10)
        np.testing.assert_allclose(out["min_dcf"][:, b], ref.table["min_dcf"], atol=1e-12)
        np.testing.assert_allclose(out["eer"][:, b], ref.table["eer"], atol=1e-7)
        assert out["fairness_index"][b] == pytest.approx(ref.fairness_index, rel=1e-10)


def test_candidate_thresholds_exact_for_zero_weights():
    rng = np.random.default_rng(3)
    s = np.round(rng.normal(size=300), 1)
    y = rng.random(300) < 0.4
    cl = rng.integers(0, 20, 300)
    pop = Population(s, y, cl, 20)
    M = rng.integers(0, 3, size=(20, 5)).astype(float)
    cnt = pop.counts(M)
    pm, pf = cnt.rates()
    for b in range(5):
        w = M[cl, b]
        ts = np.append(np.unique(s), np.inf)
        full = [0.05 * np.sum(w * (y & (s < t))) / np.sum(w * y) + 0.95 * np.sum(w * (~y & (s >= t))) / np.sum(w * ~y)
                for t in ts]
        assert np.min(0.05 * pm[:, b] + 0.95 * pf[:, b]) == pytest.approx(min(full), abs=1e-12)


def test_rocch_eer_simple_cases():
    # perfectly separated: EER 0; identical classes: EER 0.5 (chance diagonal)
    pm = np.array([[0.0], [0.0], [1.0]])
    pf = np.array([[1.0], [0.0], [0.0]])
    assert rocch_eer_from_rates(pm, pf)[0] == pytest.approx(0.0, abs=1e-9)
    pm = np.array([[0.0], [1.0]])
    pf = np.array([[1.0], [0.0]])
    assert rocch_eer_from_rates(pm, pf)[0] == pytest.approx(0.5, abs=1e-9)


def test_membership_variants():
    rng = np.random.default_rng(11)
    n = 400
    e = rng.integers(0, 10, n)
    t = rng.integers(0, 10, n)
    sex = np.array(["f", "m"])
    df = pd.DataFrame({"enrol": e, "test": t, "sex_e": sex[e % 2], "sex_t": sex[t % 2]})
    kw = dict(speaker="enrol", test_speaker="test", test_groups=["sex_t"])
    for mem, expect_f in (("enrol", df["sex_e"] == "f"), ("test", df["sex_t"] == "f"),
                          ("both", (df["sex_e"] == "f") & (df["sex_t"] == "f")),
                          ("any", (df["sex_e"] == "f") | (df["sex_t"] == "f"))):
        sg = define_subgroups(df, ["sex_e"], membership=mem, **kw)
        got = np.zeros(n, bool)
        got[sg.members(0)] = True
        assert (got == expect_f.to_numpy()).all(), mem
    sg = define_subgroups(df, ["sex_e"], membership="any", **kw)
    assert sg.mem_trial.size == n + int(((df["sex_e"] != df["sex_t"])).sum())
    # speaker_table lookup gives the same cells
    table = pd.DataFrame({"sex_e": sex[np.arange(10) % 2]}, index=np.arange(10))
    sg2 = define_subgroups(df, ["sex_e"], membership="both", speaker="enrol", test_speaker="test",
                           speaker_table=table)
    sg1 = define_subgroups(df, ["sex_e"], membership="both", **kw)
    assert np.array_equal(sg1.mem_trial, sg2.mem_trial)


def test_errors_name_the_problem():
    df = random_table(8, n=200)
    with pytest.raises(SubgroupError, match="nope"):
        subgroup_dcf(df, ["nope"], progress=False)
    with pytest.raises(SubgroupError, match="test_speaker"):
        subgroup_dcf(df, ["sex"], membership="test", progress=False)
    bad = df.copy()
    bad.loc[bad.index[0], "sex"] = "m" if bad["sex"].iloc[0] == "f" else "f"
    with pytest.raises(SubgroupError, match="inconsistent attributes"):
        subgroup_dcf(bad, ["sex"], progress=False)
    bad = df.copy()
    bad.loc[bad.index[3], "score"] = np.nan
    with pytest.raises(SubgroupError, match="row 3"):
        subgroup_dcf(bad, ["sex"], progress=False)
    with pytest.raises(ValueError, match="compat"):
        subgroup_dcf(df, ["sex"], compat="sveva", n_boot=10, progress=False)
    assert issubclass(SubgroupError, ValueError)


def test_bootstrap_reproducible_and_intervals_bracket():
    df = random_table(9, n=1500, n_spk=40)
    r1 = subgroup_dcf(df, ["sex"], n_boot=60, random_state=5, progress=False)
    r2 = subgroup_dcf(df, ["sex"], n_boot=60, random_state=5, progress=False)
    pd.testing.assert_frame_equal(r1.table, r2.table)
    assert r1.fairness_index_ci == r2.fairness_index_ci
    t = r1.table
    assert (t["min_dcf_lo"] <= t["min_dcf_hi"]).all()
    assert r1.replicates["ratio_overall"].shape == (2, 60)


# ----------------------------------------------------------------------------- compat
def _old_det_points(s, y):
    """Independent reference for scikit-learn < 1.7 ``det_curve``'s stored points: the distinct
    scores ``t`` with ``t_lo <= t <= t_hi``, ``t_hi`` the smallest score whose false-alarm count
    equals that of the top score and ``t_lo`` the largest score accepting every positive."""
    u = np.unique(s)
    fp = np.array([np.sum((s >= t) & (y == 0)) for t in u])
    tp = np.array([np.sum((s >= t) & (y == 1)) for t in u])
    t_hi = u[fp == fp[-1]].min()
    t_lo = u[tp == tp[0]].max()
    keep = (u >= t_lo) & (u <= t_hi)
    P, N = y.sum(), (1 - y).sum()
    return fp[keep] / N, (P - tp[keep]) / P, u[keep]


def test_compat_sveva_reads_nearest_stored_threshold():
    df = random_table(10, n=1200, decimals=2)
    res = subgroup_dcf(df, ["sex"], compat="sveva", progress=False)
    s = df["score"].to_numpy()
    y = (df["label"] == "target").astype(int).to_numpy()
    fpr, fnr, thr = _old_det_points(s, y)
    # independent loop over the library's stored points
    costs = [0.05 * fn + 0.95 * fp for fp, fn in zip(fpr, fnr)]
    j = int(np.argmin(costs))
    assert res.min_dcf == pytest.approx(costs[j], abs=1e-14)
    assert res.threshold == thr[j]
    for sx in ("f", "m"):
        m = (df["sex"] == sx).to_numpy()
        gf, gn, gt = _old_det_points(s[m], y[m])
        k = min(range(len(gt)), key=lambda i: (abs(gt[i] - thr[j]), i))
        at = 0.05 * gn[k] + 0.95 * gf[k]
        own = min(0.05 * a + 0.95 * b for b, a in zip(gf, gn))
        row = res.table.set_index("subgroup").loc[sx]
        assert row["dcf_at_overall"] == pytest.approx(at, abs=1e-14)
        assert row["min_dcf"] == pytest.approx(own, abs=1e-14)
        assert row["ratio_overall"] == pytest.approx(at / costs[j], rel=1e-12)


def _twelve_trials():
    """The issue's 12-trial case: the top score (0.9) is a nontarget."""
    return pd.DataFrame({
        "score": [0.9, 0.3, 0.1, 0.8, 0.6, 0.45, 0.35, 0.2, 0.0, 0.7, 0.5, 0.4],
        "label": [0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1],
        "sex": ["f"] * 6 + ["m"] * 6,
        "speaker": [f"s{i}" for i in range(12)],
    })


def test_compat_sveva_twelve_trials_hand_computed():
    """By hand: overall, the scores >= 0.4 hold all 6 targets and 1 nontarget, and the false-alarm
    count is already 1 at the top score 0.9, so the stored curve is the single point tau = 0.4
    (FPR 1/6, FNR 0): minDCF = 0.95/6, tau* = 0.4, EER = max(1/6, 0).  Subgroup f: single point
    0.45 (FPR 1/3, FNR 0), cost 0.95/3 both at its own minimum and read at tau* (nearest stored
    threshold 0.45), ratio 2; subgroup m: single point 0.4 (FPR 0, FNR 0), cost 0.  FI = 2.
    (scikit-learn >= 1.7's det_curve would add 0.9 and +inf and give tau* = +inf, minDCF 0.05.)"""
    res = subgroup_dcf(_twelve_trials(), ["sex"], compat="sveva", progress=False)
    assert res.threshold == 0.4
    assert res.min_dcf == pytest.approx(0.95 / 6, abs=1e-15)
    assert res.overall["eer"] == pytest.approx(1 / 6, abs=1e-15)
    assert res.overall["fpr"] == pytest.approx(1 / 6) and res.overall["fnr"] == 0.0
    t = res.table.set_index("subgroup")
    assert t.loc["f", "min_dcf"] == pytest.approx(0.95 / 3, abs=1e-15)
    assert t.loc["f", "threshold_own"] == 0.45
    assert t.loc["f", "dcf_at_overall"] == pytest.approx(0.95 / 3, abs=1e-15)
    assert t.loc["f", "ratio_overall"] == pytest.approx(2.0, abs=1e-12)
    assert t.loc["f", "fpr"] == pytest.approx(1 / 3) and t.loc["f", "fnr"] == 0.0
    assert t.loc["m", "dcf_at_overall"] == 0.0 and t.loc["m", "min_dcf"] == 0.0
    assert t.loc["m", "threshold_own"] == 0.4
    assert res.fairness_index == pytest.approx(2.0, abs=1e-12)
    # exact counting keeps the reject-all point: tau* = +inf, minDCF = 0.05 * 1 + 0.95 * 0
    exact = subgroup_dcf(_twelve_trials(), ["sex"], progress=False)
    assert exact.threshold == np.inf and exact.min_dcf == pytest.approx(0.05, abs=1e-15)


def test_compat_sveva_curve_does_not_call_scikit_learn(monkeypatch):
    """The stored curve is rebuilt, so a changed det_curve cannot alter the results."""
    import sklearn.metrics

    def boom(*a, **k):  # pragma: no cover - must not be called
        raise AssertionError("det_curve called")

    monkeypatch.setattr(sklearn.metrics, "det_curve", boom)
    res = subgroup_dcf(_twelve_trials(), ["sex"], compat="sveva", progress=False)
    assert res.threshold == 0.4


def test_single_group_name_as_string():
    """Regression: ``groups="sex"`` was iterated character by character ('s', 'e', 'x')."""
    df = random_table(7, n=800)
    res = subgroup_dcf(df, "sex", progress=False)
    tab = res.table.set_index("subgroup")
    assert list(tab.index) == ["f", "m"]
    assert res.settings["groups"] == ["sex"]
    s = df["score"].to_numpy()
    y = (df["label"] == "target").to_numpy()
    a, b = 0.05, 0.95
    for sx in ("f", "m"):
        m = (df["sex"] == sx).to_numpy()
        assert tab.loc[sx, "min_dcf"] == pytest.approx(ref_min(s[m], y[m], a, b)[0], abs=1e-12)
    # test_groups as a string, too (membership by the test speaker's attribute)
    rng = np.random.default_rng(3)
    df2 = df.assign(test=rng.integers(0, 30, len(df)))
    df2["sex_t"] = np.array(["f", "m"])[df2["test"] % 2]
    sg = define_subgroups(df2, "sex", membership="test", test_speaker="test", test_groups="sex_t")
    got = np.zeros(len(df2), bool)
    got[sg.members(0)] = True
    assert (got == (df2["sex_t"] == "f").to_numpy()).all()
