"""``validation.rocch_eer`` (the ROCCH EER of real-valued operating points, now computed by
``metrics.hull_eer``) against an independent linear programme:
:math:`\\max_{w,z} z` subject to :math:`z \\le w P_{miss,k} + (1-w) P_{fa,k}`, :math:`0\\le w\\le 1`
(scipy's HiGHS), on ordered, unordered, tied and repeated points. Tolerance 1e-12."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

from scoremix.validation import rocch_eer


def _lp_eer(pm: np.ndarray, pf: np.ndarray) -> float:
    a_ub = np.c_[-(pm - pf), np.ones_like(pm)]
    res = linprog([0.0, -1.0], A_ub=a_ub, b_ub=pf, bounds=[(0, 1), (None, None)], method="highs")
    assert res.status == 0
    return float(-res.fun)


@pytest.mark.parametrize("kind", ["ordered", "unordered", "rounded"])
def test_rocch_eer_equals_linear_programme(kind: str) -> None:
    rng = np.random.default_rng(19)
    for _ in range(300):
        k = int(rng.integers(1, 25))
        if kind == "ordered":
            pm, pf = np.sort(rng.random(k)), np.sort(rng.random(k))[::-1]
        else:
            pm, pf = rng.random(k), rng.random(k)
        if kind == "rounded":  # ties and repeated points
            pm, pf = np.round(pm, 1), np.round(pf, 1)
        P, F = np.r_[0.0, pm, 1.0], np.r_[1.0, pf, 0.0]
        assert rocch_eer(P, F) == pytest.approx(_lp_eer(P, F), abs=1e-12)


def test_rocch_eer_nan_and_separable() -> None:
    assert np.isnan(rocch_eer(np.array([0.0, np.nan, 1.0]), np.array([1.0, 0.5, 0.0])))
    # a perfectly separating point gives 0; the chance diagonal gives 0.5
    assert rocch_eer(np.array([0.0, 0.0, 1.0]), np.array([1.0, 0.0, 0.0])) == 0.0
    assert rocch_eer(np.array([0.0, 1.0]), np.array([1.0, 0.0])) == pytest.approx(0.5, abs=1e-15)


@pytest.mark.parametrize("kind", ["ordered", "unordered", "rounded"])
def test_bootstrap_kernel_equals_linear_programme(kind: str) -> None:
    """``resampling.bootstrap.rocch_eer_from_rates`` (golden section over α, then the exact
    intersection of the two active lines) on many columns at once, against the LP to 1e-12."""
    from scoremix.resampling.bootstrap import rocch_eer_from_rates

    rng = np.random.default_rng(20)
    for k in (1, 3, 10, 60):
        cols = 40
        if kind == "ordered":
            pm, pf = np.sort(rng.random((k, cols)), axis=0), np.sort(rng.random((k, cols)), axis=0)[::-1]
        else:
            pm, pf = rng.random((k, cols)), rng.random((k, cols))
        if kind == "rounded":
            pm, pf = np.round(pm, 1), np.round(pf, 1)
        P = np.vstack([np.zeros(cols), pm, np.ones(cols)])
        F = np.vstack([np.ones(cols), pf, np.zeros(cols)])
        got, alpha = rocch_eer_from_rates(P, F, return_alpha=True)
        want = np.array([_lp_eer(P[:, j], F[:, j]) for j in range(cols)])
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
        # the returned α is the search's: it attains the value to the search's precision
        np.testing.assert_allclose(np.min(alpha * P + (1 - alpha) * F, axis=0), want, rtol=0, atol=1e-8)
