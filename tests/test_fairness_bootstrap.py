"""Cluster bootstrap: multiplicities, and interval coverage against closed-form truth."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize_scalar
from scipy.stats import norm

from scoremix.fairness import subgroup_dcf
from scoremix.resampling.bootstrap import draw_cluster_weights


def test_cluster_weights_resample_within_strata():
    strata = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2])
    M = draw_cluster_weights(strata, 500, np.random.default_rng(0))
    assert M.shape == (9, 500)
    for s, n in ((0, 3), (1, 2), (2, 4)):
        assert (M[strata == s].sum(axis=0) == n).all()
    # each cluster is drawn on average once (multinomial with n_s draws, p = 1/n_s)
    np.testing.assert_allclose(M.mean(axis=1), 1.0, atol=0.15)
    M2 = draw_cluster_weights(strata, 500, np.random.default_rng(0))
    assert np.array_equal(M, M2)


# ---------------------------------------------------------------- coverage simulation
MU = {(0, 0): 0.0, (0, 1): 2.5, (1, 0): 0.4, (1, 1): 2.5}
SB, SIG, S, K = 0.5, 1.0, 30, 20  # speaker SD, residual SD, speakers per subgroup, trials per class per speaker


def _truth(p_target: float) -> list[float]:
    """Closed form: subgroup g, class y ~ N(MU[g, y], SB² + SIG²); equal mixture overall."""
    sd = np.hypot(SB, SIG)

    def cost(t, gs):
        fa = np.mean([norm.sf(t, MU[(g, 0)], sd) for g in gs])
        mi = np.mean([norm.cdf(t, MU[(g, 1)], sd) for g in gs])
        return p_target * mi + (1 - p_target) * fa

    o = minimize_scalar(lambda t: cost(t, [0, 1]), bounds=(-2, 6), method="bounded", options=dict(xatol=1e-10))
    return [cost(o.x, [g]) / o.fun for g in (0, 1)]


def _simulate(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    spk = np.repeat(np.arange(2 * S), 2 * K)
    g = spk % 2
    y = np.tile(np.r_[np.zeros(K), np.ones(K)], 2 * S).astype(bool)
    mean = np.where(y, 2.5, np.where(g == 1, 0.4, 0.0))
    s = mean + rng.normal(0, SB, 2 * S)[spk] + rng.normal(0, SIG, spk.size)
    return pd.DataFrame({"speaker": spk, "g": g, "label": y.astype(int), "score": s})


@pytest.mark.slow
def test_percentile_intervals_cover_truth():
    """95 % intervals of ratio_overall cover the Gaussian truth in 90-99 % of 200 datasets."""
    truth = _truth(0.05)
    assert truth[1] > 1 > truth[0]
    hits = np.zeros(2)
    n_sets = 200
    for seed in range(n_sets):
        r = subgroup_dcf(_simulate(seed), ["g"], n_boot=200, random_state=seed, progress=False, eer=False,
                         interval="percentile")
        t = r.table
        hits += (t["ratio_overall_lo"].to_numpy() <= truth) & (np.asarray(truth) <= t["ratio_overall_hi"].to_numpy())
    cover = hits / n_sets
    assert ((0.90 <= cover) & (cover <= 0.99)).all(), cover


# ---------------------------------------------------------------- bootstrap in pieces
def _two_systems(seed: int = 3) -> pd.DataFrame:
    """One trial list scored by two systems (B = A + noise), long format."""
    a = _simulate(seed)
    b = a.copy()
    b["score"] = a["score"] + np.random.default_rng(seed + 1).normal(0, 0.7, len(a))
    a["trial"] = b["trial"] = np.arange(len(a))
    return pd.concat([a.assign(system="A"), b.assign(system="B")], ignore_index=True)


def test_pieces_reproduce_single_seed_bootstrap_exactly():
    """One piece with seed s and B replicates = subgroup_dcf(n_boot=B, random_state=s)."""
    from scoremix.fairness import subgroup_dcf_replicates, with_bootstrap

    df = _simulate(1)
    full = subgroup_dcf(df, ["g"], n_boot=40, random_state=9, progress=False)
    point = subgroup_dcf(df, ["g"], n_boot=0, progress=False)
    assert "ratio_overall_lo" not in point.table.columns and np.isnan(point.fairness_index_ci[0])
    reps = subgroup_dcf_replicates(df, ["g"], [9], [40])
    for k, v in full.replicates.items():
        np.testing.assert_array_equal(reps[k], v, err_msg=k)
    comb = with_bootstrap(point, reps, 0.95)
    pd.testing.assert_frame_equal(comb.table, full.table, check_exact=True)
    assert comb.fairness_index_ci == full.fairness_index_ci
    assert comb.settings["n_boot"] == 40


def test_pieces_are_the_union_of_their_seeds_and_intervals_use_all_replicates():
    """k pieces of m replicates = the concatenation of k single-seed bootstraps (so the same
    multiset whatever order the pieces come back in), and the intervals are the percentiles of
    all k·m replicates (checked with numpy by hand)."""
    from scoremix.fairness import concat_replicates, subgroup_dcf_replicates, with_bootstrap

    df = _simulate(2)
    seeds = [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(5).spawn(3)]
    counts = [12, 12, 7]
    pieces = [subgroup_dcf_replicates(df, ["g"], [s], [m]) for s, m in zip(seeds, counts)]
    joint = subgroup_dcf_replicates(df, ["g"], seeds, counts)
    direct = [subgroup_dcf(df, ["g"], n_boot=m, random_state=s, progress=False).replicates
              for s, m in zip(seeds, counts)]
    for key in joint:
        want = np.concatenate([d[key] for d in direct], axis=-1)
        np.testing.assert_array_equal(joint[key], want, err_msg=key)
        np.testing.assert_array_equal(np.sort(concat_replicates(pieces[::-1])[key], axis=-1),
                                      np.sort(want, axis=-1), err_msg=key)
    assert joint["fairness_index"].shape == (31,) and joint["ratio_overall"].shape == (2, 31)
    point = subgroup_dcf(df, ["g"], n_boot=0, progress=False)
    # the default (expanded) intervals do not depend on the order of the pieces either
    pd.testing.assert_frame_equal(with_bootstrap(point, pieces, 0.9).table,
                                  with_bootstrap(point, pieces[::-1], 0.9).table, check_exact=True)
    res = with_bootstrap(point, pieces, 0.9, interval="percentile")
    pd.testing.assert_frame_equal(res.table, with_bootstrap(point, pieces[::-1], 0.9, interval="percentile").table,
                                  check_exact=True)
    assert res.settings["n_boot"] == 31
    r = np.where(np.isinf(joint["ratio_overall"]), np.nan, joint["ratio_overall"])
    np.testing.assert_allclose(res.table["ratio_overall_lo"], np.nanquantile(r, 0.05, axis=1), rtol=1e-14)
    np.testing.assert_allclose(res.table["ratio_overall_hi"], np.nanquantile(r, 0.95, axis=1), rtol=1e-14)
    fi = joint["fairness_index"]
    assert res.fairness_index_ci == pytest.approx((np.quantile(fi, 0.05), np.quantile(fi, 0.95)), rel=1e-14)
    # the last piece matters: the first two pieces alone give another interval
    first = with_bootstrap(point, pieces[:2], 0.9, interval="percentile")
    assert first.settings["n_boot"] == 24 and first.fairness_index_ci != res.fairness_index_ci


def test_pieces_validation():
    from scoremix.fairness import subgroup_dcf_replicates, with_bootstrap

    df = _simulate(1)
    with pytest.raises(ValueError, match="equal length"):
        subgroup_dcf_replicates(df, ["g"], [1, 2], [5])
    with pytest.raises(ValueError, match="at least one replicate"):
        subgroup_dcf_replicates(df, ["g"], [1], [0])
    point = subgroup_dcf(df, ["g"], n_boot=0, progress=False)
    reps = subgroup_dcf_replicates(df, ["g"], [1], [5])
    bad = {k: (v[:1] if v.ndim == 2 else v) for k, v in reps.items()}
    with pytest.raises(ValueError, match=r"expected \(2, B\)"):
        with_bootstrap(point, bad)
    with pytest.raises(ValueError, match="piece 1 has measures"):
        with_bootstrap(point, [reps, {"fairness_index": reps["fairness_index"]}])
    sveva = subgroup_dcf(df, ["g"], n_boot=0, compat="sveva", progress=False)
    with pytest.raises(ValueError, match="compat='sveva'"):
        with_bootstrap(sveva, reps)


def test_paired_comparison_in_pieces():
    """compare_subgroup_dcf(n_boot=B, random_state=s) = point + compare_replicates([s], [B]);
    pieces give the intervals of all paired replicates, differences taken replicate-wise."""
    from scoremix.fairness import compare_replicates, compare_subgroup_dcf, compare_with_bootstrap

    long = _two_systems()
    kw = dict(system="system", trial_id="trial", label="label", measures=("ratio_overall", "fnr"), progress=False)
    full = compare_subgroup_dcf(long, ["g"], n_boot=30, random_state=4, **kw)
    point = compare_subgroup_dcf(long, ["g"], n_boot=0, **kw)
    one = compare_with_bootstrap(point, compare_replicates(long, ["g"], [4], [30], **kw))
    pd.testing.assert_frame_equal(one.table, full.table, check_exact=True)
    assert one.fairness_index == full.fairness_index
    pieces = [compare_replicates(long, ["g"], [s], [m], **kw) for s, m in ((11, 10), (12, 10), (13, 5))]
    res = compare_with_bootstrap(point, pieces, ci=0.8)
    direct = [compare_subgroup_dcf(long, ["g"], n_boot=m, random_state=s, **kw).replicates
              for s, m in ((11, 10), (12, 10), (13, 5))]
    d = np.concatenate([x["B"]["ratio_overall"] - x["A"]["ratio_overall"] for x in direct], axis=1)
    assert d.shape == (2, 25)
    # differences: the expanded percentile interval (t levels for each subgroup's speakers)
    from scoremix.resampling.intervals import expanded_percentile_interval, fairness_index_speakers

    n = point.table["n_speakers"].to_numpy(float)
    lo, hi = expanded_percentile_interval(d, n, 0.8)
    np.testing.assert_allclose(res.table["ratio_overall_diff_lo"], lo, rtol=1e-14)
    np.testing.assert_allclose(res.table["ratio_overall_diff_hi"], hi, rtol=1e-14)
    fd = np.concatenate([x["B"]["fairness_index"] - x["A"]["fairness_index"] for x in direct])
    n_fi = min(fairness_index_speakers(point.points[k]["ratio_overall"][:, 0], n) for k in ("A", "B"))
    flo, fhi = expanded_percentile_interval(fd[None, :], np.array([n_fi]), 0.8)
    assert res.fairness_index["diff"][1:] == pytest.approx((flo[0], fhi[0]), rel=1e-14)
    assert list(res.table.columns) == list(full.table.columns)
    with pytest.raises(ValueError, match="for systems"):
        compare_with_bootstrap(point, {"A": pieces[0]["A"], "C": pieces[0]["B"]})
