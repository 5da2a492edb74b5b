"""The ROCCH of operating points with repeats (s7bayes-api): model rates evaluated at a
superset of a population's thresholds repeat operating points (flat steps); the hull must be
that of the distinct points, so the EER equals the empirical ROCCH EER of the counts."""

from __future__ import annotations

import numpy as np

import scoremix as sm
from scoremix.metrics import _lower_hull
from scoremix.predictive.attainable import hull_eer
from scoremix.validation import rocch_eer


def _rates(s, y, tau):
    fnr = np.array([(s[y == 1] < t).mean() for t in tau])
    fpr = np.array([(s[y == 0] >= t).mean() for t in tau])
    return fnr, fpr


def test_hull_eer_at_a_superset_of_thresholds_equals_the_empirical_eer():
    rng = np.random.default_rng(3)
    for rep in range(20):
        n1, n0 = int(rng.integers(5, 40)), int(rng.integers(20, 120))
        s = np.r_[rng.normal(1.5, 1, n1), rng.normal(0, 1, n0)]
        s[:3] = rng.normal(-2, 0.3, 3)                       # a few catastrophic positives
        y = np.r_[np.ones(n1, int), np.zeros(n0, int)]
        other = rng.normal(0.5, 2, 300)                      # someone else's scores: flat steps here
        tau = np.union1d(np.unique(s), other)
        fnr, fpr = _rates(s, y, tau)
        e = hull_eer(fpr, fnr)[0]
        assert abs(e - sm.eer(s, y)) < 1e-12
        assert abs(e - rocch_eer(np.r_[0, fnr, 1], np.r_[1, fpr, 0])) < 1e-8


def test_lower_hull_of_repeated_points_is_that_of_the_distinct_ones():
    x = np.array([0.0, 0.1, 0.1, 0.1, 0.5, 0.5, 1.0])
    y = np.array([1.0, 0.3, 0.3, 0.3, 0.1, 0.1, 0.0])
    h = _lower_hull(x, y)
    assert list(h) == [0, 1, 4, 6]
