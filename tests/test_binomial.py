"""Binomial intervals against R (stored reference + live prop.test / binom.test / qbeta) and closed forms."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from conftest import TEST_DATA

from scoremix.binomial import binomial_interval, rate_at, rule_of_30
from scoremix.metrics import MetricInputError

REF = TEST_DATA / "detection_eval" / "binomial_r_reference.csv"


def test_equals_stored_r_reference():
    ref = pd.read_csv(REF, skipinitialspace=True)
    assert len(ref) == 324
    for method, g in ref.groupby("method"):
        for level, h in g.groupby("level"):
            lo, hi = binomial_interval(h["k"].to_numpy(), h["n"].to_numpy(), level=level, method=method)
            np.testing.assert_allclose(lo, h["lo"], rtol=0, atol=1e-10, err_msg=method)
            np.testing.assert_allclose(hi, h["hi"], rtol=0, atol=1e-10, err_msg=method)


def test_wilson_closed_form_and_edges():
    # k = 10, n = 40, z = 1.959964: centre (10 + z^2/2)/(40 + z^2)
    z = 1.959963984540054
    c = (10 + z * z / 2) / (40 + z * z)
    h = z / (40 + z * z) * np.sqrt(10 * 30 / 40 + z * z / 4)
    lo, hi = binomial_interval(10, 40)
    assert abs(lo - (c - h)) < 1e-15 and abs(hi - (c + h)) < 1e-15
    for m in ("wilson", "clopper-pearson", "jeffreys"):
        lo, hi = binomial_interval(0, 20, method=m)
        assert lo == 0.0 and 0 < hi < 1
        lo, hi = binomial_interval(20, 20, method=m)
        assert hi == 1.0 and 0 < lo < 1
    # Clopper-Pearson at k = 0 has the closed form 1 - (alpha/2)^(1/n)
    assert abs(binomial_interval(0, 20, method="clopper-pearson")[1] - (1 - 0.025 ** (1 / 20))) < 1e-12


def test_rate_at_counts_and_rule_of_30():
    s = np.array([0.1, 0.4, 0.35, 0.8, 0.3, 0.2])
    y = np.array([0, 0, 1, 1, 0, 1])
    e = rate_at(s, y, 0.3, kind="fpr", method="jeffreys")
    assert float(e) == 2 / 3 and e.n_clusters == 3 and e.interval == "jeffreys"
    lo, hi = binomial_interval(2, 3, method="jeffreys")
    assert (e.lo, e.hi) == (float(lo), float(hi))
    assert float(rate_at(s, y, 0.3, kind="fnr")) == 1 / 3
    assert rule_of_30(5370, 33327) == (30 / 5370, 30 / 33327)
    assert rule_of_30(10, 100) == (1.0, 0.3)


def test_bad_input():
    with pytest.raises(MetricInputError, match="method must be"):
        binomial_interval(1, 10, method="wald")
    with pytest.raises(MetricInputError, match="0 <= k <= n"):
        binomial_interval(11, 10)
    with pytest.raises(MetricInputError, match="kind must be"):
        rate_at([0.1, 0.2], [0, 1], 0.1, kind="eer")


@pytest.mark.r
def test_live_r(tmp_path):
    if shutil.which("Rscript") is None:
        pytest.skip("Rscript is not installed")
    from conftest import REPO_ROOT

    out = tmp_path / "ref.csv"
    subprocess.run(["Rscript", str(REPO_ROOT / "r_scripts" / "binomial_reference.R"), str(out)], check=True,
                   capture_output=True, timeout=120)
    live = pd.read_csv(out, skipinitialspace=True)
    for method, g in live.groupby("method"):
        for level, h in g.groupby("level"):
            lo, hi = binomial_interval(h["k"].to_numpy(), h["n"].to_numpy(), level=level, method=method)
            np.testing.assert_allclose(lo, h["lo"], rtol=0, atol=1e-10)
            np.testing.assert_allclose(hi, h["hi"], rtol=0, atol=1e-10)


def test_rule_of_30_lines_on_det_plots():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from scoremix.binomial import draw_rule_of_30
    from scoremix.metrics import probit

    _, ax = plt.subplots()
    draw_rule_of_30(ax, 300, 3000)
    xs = [ln.get_xdata()[0] for ln in ax.lines]
    ys = [ln.get_ydata()[0] for ln in ax.lines]
    assert float(probit(30 / 3000)) in xs and float(probit(30 / 300)) in ys
    plt.close("all")
