"""Cluster bootstrap: multiplicities, and interval coverage against closed-form truth."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize_scalar
from scipy.stats import norm

from scoremix.fairness import subgroup_dcf
from scoremix.fairness.bootstrap import draw_cluster_weights


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
        r = subgroup_dcf(_simulate(seed), ["g"], n_boot=200, random_state=seed, progress=False, eer=False)
        t = r.table
        hits += (t["ratio_overall_lo"].to_numpy() <= truth) & (np.asarray(truth) <= t["ratio_overall_hi"].to_numpy())
    cover = hits / n_sets
    assert ((0.90 <= cover) & (cover <= 0.99)).all(), cover
