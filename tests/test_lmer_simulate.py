"""LmerResult.simulate reproduces the fitted model's moments (known truth: the fitted
parameters)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import scoremix as sm

from emm_helpers import EMM_DATA


@pytest.fixture(scope="module")
def sleep_fit():
    d = pd.read_csv(EMM_DATA / "data" / "sleepstudy.csv", dtype={"Subject": str})
    return sm.lmer("Reaction ~ Days + (Days | Subject)", d)


def test_unconditional_moments(sleep_fit):
    m = sleep_fit
    nsim = 4000
    Y = m.simulate(nsim, seed=1).to_numpy()
    X = m.spec.X
    mu = X @ m.fixef.to_numpy()
    S = m.cov_re()[0]
    Z = m.spec.terms[0].X
    var = np.einsum("ij,jk,ik->i", Z, S, Z) + m.sigma ** 2
    se_mean = np.sqrt(var / nsim)
    assert np.max(np.abs(Y.mean(1) - mu) / se_mean) < 4.5
    # variance: relative SE of a sample variance is sqrt(2/(nsim-1))
    assert np.max(np.abs(Y.var(1, ddof=1) / var - 1)) < 4.5 * np.sqrt(2 / (nsim - 1))
    # covariance of two rows of the same subject: z_i' S z_j
    i, j = 0, 9
    c = np.cov(Y[i], Y[j])[0, 1]
    want = Z[i] @ S @ Z[j]
    assert abs(c - want) < 4.5 * np.sqrt((var[i] * var[j] + want ** 2) / nsim)
    # rows of different subjects are independent
    assert abs(np.corrcoef(Y[0], Y[10])[0, 1]) < 4.5 / np.sqrt(nsim)


def test_conditional_moments_and_seed(sleep_fit):
    m = sleep_fit
    Y = m.simulate(3000, seed=2, re_form=None).to_numpy()
    f = m.fitted.to_numpy()
    assert np.max(np.abs(Y.mean(1) - f)) < 4.5 * m.sigma / np.sqrt(3000)
    assert abs(Y.var(1, ddof=1).mean() / m.sigma ** 2 - 1) < 0.02
    a = m.simulate(2, seed=5)
    b = m.simulate(2, seed=5)
    pd.testing.assert_frame_equal(a, b)


def test_newdata_new_levels_get_fresh_draws(sleep_fit):
    m = sleep_fit
    nd = pd.DataFrame({"Days": [0.0, 0.0, 5.0], "Subject": ["new1", "new1", "new2"]})
    Y = m.simulate(6000, seed=3, newdata=nd).to_numpy()
    S = m.cov_re()[0]
    # same new subject at Days 0: covariance = Var(intercept); different subjects: 0
    assert abs(np.cov(Y[0], Y[1])[0, 1] / S[0, 0] - 1) < 0.1
    assert abs(np.corrcoef(Y[0], Y[2])[0, 1]) < 4.5 / np.sqrt(6000)


def test_bad_nsim(sleep_fit):
    with pytest.raises(ValueError, match="nsim"):
        sleep_fit.simulate(0)
