"""Fairness panel: hand computations on a hand-made example; threshold on overall rates; intervals."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scoremix.fairness.panel import fairness_panel, fdr, garbe, gini, max_geomean
from scoremix.fairness.subgroups import SubgroupError


def _hand():
    """Three groups, 10 targets and 10 nontargets each; at threshold 0.5 (accept s >= 0.5):
    FMR = (1, 2, 4)/10 and FNMR = (1, 1, 3)/10."""
    rows = []
    for grp, n_fa, n_miss in (("a", 1, 1), ("b", 2, 1), ("c", 4, 3)):
        for i in range(10):
            rows.append((grp, f"{grp}{i % 5}", 0, 0.9 if i < n_fa else 0.1))
            rows.append((grp, f"{grp}{i % 5}", 1, 0.2 if i < n_miss else 0.8))
    return pd.DataFrame(rows, columns=["grp", "speaker", "label", "score"])


def test_hand_computations():
    p = fairness_panel(_hand(), "grp", operating_points=[0.5])
    t = p.table.set_index("measure")["value"]
    # FMR (0.1, 0.2, 0.4): geometric mean (0.008)^(1/3) = 0.2 -> Max/GeoMean 2; max/min 4
    assert t["max/geomean FMR"] == pytest.approx(2.0, abs=1e-12)
    assert t["max/min FMR"] == pytest.approx(4.0, abs=1e-12)
    # FNMR (0.1, 0.1, 0.3): geometric mean (0.1*0.1*0.3)^(1/3) = 0.003^(1/3)
    assert t["max/geomean FNMR"] == pytest.approx(0.3 / 0.003 ** (1 / 3), abs=1e-12)
    assert t["max/min FNMR"] == pytest.approx(3.0, abs=1e-12)
    # Gini with G/(G-1): FMR: sum|xi-xj| = 2(0.1+0.3+0.2) = 1.2, mean 0.7/3 -> 1.5*1.2/(18*0.7/3) = 3/7
    assert t["gini FMR"] == pytest.approx(3 / 7, abs=1e-12)
    # FNMR: sum = 2(0+0.2+0.2) = 0.8, mean 0.5/3 -> 1.5*0.8/(18*0.5/3) = 0.4
    assert t["gini FNMR"] == pytest.approx(0.4, abs=1e-12)
    assert t["GARBE"] == pytest.approx(0.5 * 3 / 7 + 0.5 * 0.4, abs=1e-12)
    # FDR = 1 - (0.5 * 0.3 + 0.5 * 0.2) = 0.75
    assert t["FDR"] == pytest.approx(0.75, abs=1e-12)
    g = p.groups.set_index("group")
    np.testing.assert_allclose(g["fmr"], [0.1, 0.2, 0.4], atol=1e-15)
    np.testing.assert_allclose(g["fnmr"], [0.1, 0.1, 0.3], atol=1e-15)
    p2 = fairness_panel(_hand(), "grp", operating_points=[0.5], alpha=0.8)
    assert p2.table.set_index("measure")["value"]["FDR"] == pytest.approx(1 - (0.8 * 0.3 + 0.2 * 0.2), abs=1e-12)


def test_formula_helpers_vectorise():
    x = np.array([[0.1, 0.2, 0.4], [0.2, 0.2, 0.2]])
    np.testing.assert_allclose(max_geomean(x), [2.0, 1.0], atol=1e-12)
    np.testing.assert_allclose(gini(x), [3 / 7, 0.0], atol=1e-12)
    np.testing.assert_allclose(fdr(x, x), [0.7, 1.0], atol=1e-12)
    np.testing.assert_allclose(garbe(x, x, 0.3), [3 / 7, 0.0], atol=1e-12)


def test_threshold_on_overall_rates_and_calibration():
    rng = np.random.default_rng(0)
    n = 400
    g = np.repeat(["f", "m"], n // 2)
    y = np.tile([1, 0, 0, 0], n // 4)
    s = np.where(y == 1, 2.0, -2.0) + np.where(g == "f", 0.5, 0.0) + rng.normal(size=n)
    d = pd.DataFrame({"grp": g, "label": y, "score": s, "speaker": [f"{a}{i % 20}" for i, a in enumerate(g)]})
    p = fairness_panel(d, "grp", operating_points=["eer", {"fpr": 0.05}], llr=True)
    tau_eer = p.table.query("operating_point == 'overall EER' and measure == 'threshold'")["value"].iloc[0]
    # the overall EER threshold: the distinct score minimising |Pmiss - Pfa|
    u = np.unique(s)
    pm = np.array([np.mean(s[y == 1] < t) for t in u])
    pf = np.array([np.mean(s[y == 0] >= t) for t in u])
    assert tau_eer == u[np.argmin(np.abs(pm - pf))]
    tau_f = p.table.query("operating_point == 'overall FPR 0.05' and measure == 'threshold'")["value"].iloc[0]
    assert tau_f == u[np.flatnonzero(pf <= 0.05)[0]]
    # per-group Cllr by the definition
    gr = p.groups.query("operating_point == 'calibration'").set_index("group")
    for lev in ("f", "m"):
        m = g == lev
        c = 0.5 * (np.mean(np.log2(1 + np.exp(-s[m & (y == 1)]))) + np.mean(np.log2(1 + np.exp(s[m & (y == 0)]))))
        assert gr.loc[lev, "cllr"] == pytest.approx(c, abs=1e-12)


def test_intervals_seeded_and_bracket():
    d = _hand()
    d = pd.concat([d.assign(speaker=d["speaker"] + f"_{k}") for k in range(4)], ignore_index=True)
    a = fairness_panel(d, "grp", operating_points=[0.5], n_boot=200, seed=3)
    b = fairness_panel(d, "grp", operating_points=[0.5], n_boot=200, seed=3)
    pd.testing.assert_frame_equal(a.table, b.table)
    row = a.table.set_index("measure").loc["FDR"]
    assert row["lo"] <= row["value"] <= row["hi"] and row["hi"] > row["lo"]


def test_errors():
    d = _hand()
    with pytest.raises(SubgroupError, match="no column 'sex'"):
        fairness_panel(d, "sex")
    with pytest.raises(SubgroupError, match="one group only"):
        fairness_panel(d.assign(grp="x"), "grp")
    bad = d.copy()
    bad.loc[0, "grp"] = "b"
    with pytest.raises(SubgroupError, match="more than one"):
        fairness_panel(bad, "grp")
    with pytest.raises(SubgroupError, match="operating point"):
        fairness_panel(d, "grp", operating_points=["median"])
