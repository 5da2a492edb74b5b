"""APE / Bayes error-rate curves: actual by definition, PAV minimum = min over thresholds (ROCCH) DCF."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit

from scoremix.ape import ape_curve, pav_llrs, plot_ape
from scoremix.metrics import min_dcf


def _data(seed=0, n=300):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(int)
    s = np.where(y == 1, 1.5, -1.0) + rng.normal(size=n) * np.where(y == 1, 1.3, 1.0)
    return s, y


@pytest.mark.parametrize("seed", [0, 1])
def test_pav_minimum_equals_min_dcf_and_actual_by_definition(seed):
    s, y = _data(seed)
    eta = np.linspace(-4, 4, 33) + 0.0123  # off any PAV level
    c = ape_curve(s, y, prior_log_odds=eta)
    for e, act, mn in zip(eta, c["actual"], c["minimum"]):
        pi = expit(e)
        want = min_dcf(s, y, p_target=pi, c_miss=1, c_fa=1, normalize=False).value
        assert mn == pytest.approx(want, abs=1e-12)
        direct = pi * np.mean(s[y == 1] < -e) + (1 - pi) * np.mean(s[y == 0] >= -e)
        assert act == pytest.approx(direct, abs=1e-15)
        assert mn <= act + 1e-15
    assert (c["minimum"] <= c["default"] + 1e-15).all()


def test_pav_llrs_are_monotone_and_calibrated_on_their_own_data():
    s, y = _data(2)
    l = pav_llrs(s, y)
    o = np.argsort(s)
    assert np.all(l[o][1:] >= l[o][:-1])
    # PAV posteriors reproduce the class proportion within each level set
    p = expit(l + np.log(y.mean() / (1 - y.mean())))
    for v in np.unique(l[np.isfinite(l)]):
        m = l == v
        assert p[m][0] == pytest.approx(y[m].mean(), abs=1e-9)


def test_plot_draws_per_group(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    s, y = _data(3)
    ax = plot_ape({"g1": ape_curve(s[:150], y[:150]), "g2": ape_curve(s[150:], y[150:])}, title="by group")
    assert len(ax.lines) == 5
    ax.figure.savefig(tmp_path / "ape.png")
