"""Profile-likelihood and Wald intervals of ``scoremix.glmer`` against lme4's
``confint(profile(m))`` and ``confint(m, method = "Wald")``.

References: ``tests/data/glmm/profile/<id>.json`` from ``r_scripts/glmer_profile.R``
(lme4 1.1-31 with converged PIRLS).  lme4 reads its limits off an interpolating spline
through profile points, scoremix solves ``ζ(v) = ±z`` exactly, so the two agree to the
spline's error: limits to ``1e-3`` absolute (observed ≤ 2e-4).  Wald limits inherit the
battery's SE tolerance (1e-3 relative).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from test_glmm import REF_DIR, fit, load

from scoremix.glmm.profile import sdcor_bounds, sdcor_to_theta, theta_to_sdcor

PROFILE_DIR = REF_DIR / "profile"


def _check_profile(name: str, level_key: str = "") -> None:
    ref, d = load(name)
    pr = json.loads((PROFILE_DIR / f"{name}.json").read_text())
    m = fit(ref, d)
    ci = m.confint(method="profile")
    assert list(ci.index) == pr["rows"]
    np.testing.assert_allclose(ci.iloc[:, 0], pr["lower"], atol=1e-3, rtol=0)
    np.testing.assert_allclose(ci.iloc[:, 1], pr["upper"], atol=1e-3, rtol=0)
    # Wald rows: the fixed effects (lme4's .sig rows are NA)
    w = m.confint()
    rows = [r for r in pr["wald_rows"] if not r.startswith(".sig")]
    lo = [v for r, v in zip(pr["wald_rows"], pr["wald_lower"]) if not r.startswith(".sig")]
    hi = [v for r, v in zip(pr["wald_rows"], pr["wald_upper"]) if not r.startswith(".sig")]
    assert list(w.index) == rows
    tol = 2e-3 * stats.norm.ppf(0.975) * m.se.to_numpy()
    assert np.all(np.abs(w.iloc[:, 0].to_numpy() - lo) <= tol)
    assert np.all(np.abs(w.iloc[:, 1].to_numpy() - hi) <= tol)


def test_profile_confint_matches_lme4_cbpp():
    _check_profile("cbpp_cbind")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bacteria", "cbpp_agq5_probit"])
def test_profile_confint_matches_lme4_slow(name):
    if not (PROFILE_DIR / f"{name}.json").exists():
        pytest.skip(f"no lme4 profile reference for {name}")
    _check_profile(name)


def test_profile_end_points_are_where_the_deviance_rises_by_z2():
    """The closed-form definition: at each limit the profiled deviance is ``d̂ + z²``."""
    ref, d = load("cbpp_cbind")
    m = fit(ref, d)
    ci = m.confint(method="profile", parm=["period2"], level=0.9)
    z = stats.norm.ppf(0.95)
    ref2 = dict(ref, formula="cbind(incidence, size - incidence) ~ period + (1 | herd) "
                              "+ offset(off)")
    for v in ci.loc["period2"]:
        # fix β_period2 = v through an offset and refit the rest
        d2 = d.assign(off=v * (d["period"].astype(str) == "2"),
                      period=d["period"].astype(str).replace({"2": "1"}))
        d2["period"] = d2["period"].astype("category")
        m2 = fit(ref2, d2)
        assert -2 * m2.loglik - (-2 * m.loglik) == pytest.approx(z ** 2, abs=2e-4)


def test_sdcor_parameterisation_round_trip():
    # a 2-column term and a scalar one: θ = (T11, T21, T22 | T)
    theta = np.array([1.2, -0.5, 0.7, 0.3])
    psi = theta_to_sdcor(theta, [2, 1])
    sd1, sd2 = 1.2, np.hypot(0.5, 0.7)
    np.testing.assert_allclose(psi, [sd1, 1.2 * -0.5 / (sd1 * sd2), sd2, 0.3], rtol=1e-12)
    np.testing.assert_allclose(sdcor_to_theta(psi, [2, 1]), theta, rtol=1e-12)
    lo, hi = sdcor_bounds([2, 1])
    np.testing.assert_array_equal(lo, [0, -1, 0, 0])
    np.testing.assert_array_equal(hi, [np.inf, 1, np.inf, np.inf])
