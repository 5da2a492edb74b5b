"""Paired two-system comparison and Casual-Conversations breakdowns."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scoremix.fairness import breakdown, compare_subgroup_dcf, subgroup_dcf


def two_systems(seed: int = 0, n: int = 2000, n_spk: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    spk = rng.integers(0, n_spk, n)
    sex = np.array(["f", "m"])[spk % 2]
    y = rng.random(n) < 0.4
    base = rng.normal(0, 1, n) + 2.0 * y
    a = np.round(base + 0.5 * (sex == "f") * ~y, 2)
    b = np.round(base + rng.normal(0, 0.5, n), 2)
    common = {"trial": np.arange(n), "speaker": spk, "sex": sex, "label": np.where(y, "bonafide", "spoof")}
    return pd.concat([pd.DataFrame({**common, "system": "A", "score": a}),
                      pd.DataFrame({**common, "system": "B", "score": b})], ignore_index=True)


def test_compare_points_equal_separate_runs():
    df = two_systems()
    cmp = compare_subgroup_dcf(df, ["sex"], systems=("A", "B"), trial_id="trial", n_boot=50, random_state=0,
                               progress=False)
    ra = subgroup_dcf(df[df.system == "A"], ["sex"], progress=False)
    rb = subgroup_dcf(df[df.system == "B"], ["sex"], progress=False)
    t = cmp.table
    np.testing.assert_allclose(t["ratio_overall_A"], ra.table["ratio_overall"], rtol=1e-12)
    np.testing.assert_allclose(t["ratio_overall_B"], rb.table["ratio_overall"], rtol=1e-12)
    np.testing.assert_allclose(t["ratio_overall_diff"], rb.table["ratio_overall"] - ra.table["ratio_overall"],
                               rtol=1e-12)
    assert cmp.fairness_index["A"][0] == pytest.approx(ra.fairness_index)
    assert cmp.fairness_index["diff"][0] == pytest.approx(rb.fairness_index - ra.fairness_index)
    # the per-system intervals equal an unpaired run with the same seed (same resamples)
    # (the same method as subgroup_dcf: studentized by default, percentile on request)
    for interval in ("studentized", "percentile"):
        c = compare_subgroup_dcf(df, ["sex"], systems=("A", "B"), trial_id="trial", n_boot=50, random_state=0,
                                 progress=False, interval=interval)
        for nm in ("A", "B"):
            r = subgroup_dcf(df[df.system == nm], ["sex"], n_boot=50, random_state=0, progress=False,
                             interval=interval)
            for m in ("ratio_overall", "ratio_own"):
                for e in ("lo", "hi"):
                    np.testing.assert_allclose(c.table[f"{m}_{nm}_{e}"], r.table[f"{m}_{e}"], rtol=1e-12)
    # differences: expanded percentile of the paired replicate differences
    from scoremix.resampling.intervals import expanded_percentile_interval
    d = cmp.replicates["B"]["ratio_overall"] - cmp.replicates["A"]["ratio_overall"]
    lo, hi = expanded_percentile_interval(d, t["n_speakers"].to_numpy(float), 0.95)
    np.testing.assert_allclose(t["ratio_overall_diff_lo"], lo, rtol=1e-12)
    np.testing.assert_allclose(t["ratio_overall_diff_hi"], hi, rtol=1e-12)


def test_compare_identical_systems_zero_difference():
    df = two_systems()
    df.loc[df.system == "B", "score"] = df.loc[df.system == "A", "score"].to_numpy()
    cmp = compare_subgroup_dcf(df, ["sex"], n_boot=40, random_state=1, progress=False)
    t = cmp.table
    assert (t["ratio_overall_diff"] == 0).all()
    assert (t["ratio_overall_diff_lo"] == 0).all() and (t["ratio_overall_diff_hi"] == 0).all()


def test_compare_paired_interval_narrower_than_unpaired():
    """Pairing cancels shared speaker variation: the paired interval of the difference is
    narrower than the one from independent resamples of the two systems."""
    df = two_systems(3, n=3000)
    cmp = compare_subgroup_dcf(df, ["sex"], n_boot=300, random_state=2, progress=False)
    ra = subgroup_dcf(df[df.system == "A"], ["sex"], n_boot=300, random_state=10, progress=False)
    rb = subgroup_dcf(df[df.system == "B"], ["sex"], n_boot=300, random_state=20, progress=False)
    unpaired = rb.replicates["ratio_overall"] - ra.replicates["ratio_overall"]
    w_unp = np.quantile(unpaired, 0.975, axis=1) - np.quantile(unpaired, 0.025, axis=1)
    w_pair = (cmp.table["ratio_overall_diff_hi"] - cmp.table["ratio_overall_diff_lo"]).to_numpy()
    assert (w_pair < w_unp).all()


def test_compare_errors():
    df = two_systems()
    with pytest.raises(ValueError, match="exactly two"):
        compare_subgroup_dcf(pd.concat([df, df.assign(system="C")]), ["sex"], n_boot=0, progress=False)


# ----------------------------------------------------------------------------- breakdown
def test_breakdown_matches_loop():
    rng = np.random.default_rng(4)
    n = 1200
    skin = rng.choice(["I-II", "III-IV", "V-VI"], n)
    gender = rng.choice(["f", "m"], n)
    y = rng.random(n) < 0.5
    p = np.clip(1 / (1 + np.exp(-(rng.normal(0, 1.5, n) + 2 * (2 * y - 1) - 0.8 * (skin == "V-VI")))), 0, 1)
    p = np.round(p, 3)
    df = pd.DataFrame({"skin": skin, "gender": gender, "label": np.where(y, "real", "fake"), "score": p})
    out = breakdown(df, ["skin", ("gender", "skin")], n_boot=30, random_state=0, progress=False)
    assert (out["threshold"] == 0.5).all()
    acc = p >= 0.5
    fn_all, fp_all = np.sum(y & ~acc), np.sum(~y & acc)
    sk = out[out.attribute == "skin"].set_index("value")
    for v in ("I-II", "III-IV", "V-VI"):
        m = skin == v
        row = sk.loc[v]
        tp, fp, fn = np.sum(m & y & acc), np.sum(m & ~y & acc), np.sum(m & y & ~acc)
        assert row["n"] == m.sum()
        assert row["share"] == pytest.approx(m.mean())
        assert row["precision"] == pytest.approx(tp / (tp + fp))
        assert row["fn_share"] == pytest.approx(fn / fn_all)
        assert row["fp_share"] == pytest.approx(fp / fp_all)
        assert row["fn_share_ratio"] == pytest.approx((fn / fn_all) / (np.sum(m & y) / y.sum()))
        pc = np.clip(p[m], 1e-15, 1 - 1e-15)
        ll = -np.mean(np.where(y[m], np.log(pc), np.log(1 - pc)))
        assert row["log_loss"] == pytest.approx(ll, rel=1e-10)
        sub = df[m]
        ref = subgroup_dcf(sub.assign(speaker=0, one="x"), ["one"], progress=False)
        assert row["min_dcf"] == pytest.approx(ref.min_dcf, abs=1e-12)
        assert row["eer"] == pytest.approx(ref.overall["eer"], abs=1e-9)
        assert row["eer_lo"] <= row["eer_hi"]
    inter = out[out.attribute == "gender×skin"]
    assert len(inter) == 6 and inter["n"].sum() == n
    assert sk.loc["V-VI", "fn_share_ratio"] > 1  # darker skin: more false negatives than its share
