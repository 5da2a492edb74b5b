"""lme4 2.0's ``cs()`` and ``ar1()`` random-effect covariances in ``glmer`` against glmmTMB.

References: ``tests/data/glmm/structured/<id>.json`` from
``r_scripts/glmer_structured_reference.R`` (glmmTMB, Laplace; its ``cs()`` is lme4 2.0's
``cs()``, its ``ar1()`` lme4 2.0's ``ar1()``).  A binomial GLMM of 1920 rows, 80 groups × a
four-level ``time`` factor.  Tolerances: −2 logLik to 1e-7 relative (both Laplace at
their optimum), fixed effects 1e-4, SEs 1e-3 relative, SDs and correlations 1e-4; the
parameter count (AIC) equals glmmTMB's ``df``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import scoremix as sm
from scoremix.glmm.errors import GlmmUnsupportedError
from scoremix.glmm.structure import ThetaMap
from scoremix.lme.relcov import theta_to_T
from scoremix.lme.spec import RandomTerm

DIR = Path(__file__).resolve().parents[1] / "tests" / "data" / "glmm" / "structured"


def _fit(formula: str) -> sm.GlmerResult:
    d = pd.read_csv(DIR / "structured.csv")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.glmer(formula, d, "binomial")


@pytest.mark.parametrize("name", ["cs_binomial", "ar1_binomial"])
def test_structured_glmer_matches_glmmtmb(name):
    ref = json.loads((DIR / f"{name}.json").read_text())
    m = _fit(ref["formula"])
    assert -2 * m.loglik == pytest.approx(ref["criterion"], rel=1e-7)
    assert -2 * m.loglik <= ref["criterion"] + 1e-6 * ref["criterion"]
    assert list(m.fixef.index) == list(ref["fixef"])
    np.testing.assert_allclose(m.fixef.to_numpy(), list(ref["fixef"].values()), atol=1e-4)
    np.testing.assert_allclose(m.se.to_numpy(), ref["se"], rtol=1e-3)
    T = theta_to_T(m.theta.to_numpy(), [4])[0]
    S = T @ T.T
    sd = np.sqrt(np.diag(S))
    np.testing.assert_allclose(sd, ref["sd"], rtol=1e-4)
    np.testing.assert_allclose(S / np.outer(sd, sd), np.array(ref["cor"]), atol=1e-4)
    assert m.npar == ref["df"]
    assert m.aic == pytest.approx(ref["criterion"] + 2 * ref["df"], rel=1e-7)
    with pytest.raises(GlmmUnsupportedError, match="cs\\(\\)/ar1\\(\\)"):
        m.confint(method="profile")


def test_theta_map_closed_forms():
    """``φ → θ`` gives ``chol(D R D)`` with the structure's ``R``."""
    X = np.ones((3, 3))
    terms = [RandomTerm("g", "g", ["a", "b", "c"], np.zeros(3, np.int64), ["l"], X, s)
             for s in ("cs", "ar1", "cs_hom", "ar1_het")]
    tm = ThetaMap.of(terms)
    assert tm.n_phi == 4 + 2 + 2 + 4
    sd = np.array([1.5, 0.5, 2.0])
    z_cs, z_ar = 0.3, -0.4
    a = -0.5
    rho_cs = a + (1 - a) / (1 + np.exp(-z_cs))
    rho_ar = np.tanh(z_ar)
    phi = np.concatenate([sd, [z_cs], [0.7, z_ar], [0.7, z_cs], sd, [z_ar]])
    T = theta_to_T(tm.theta(phi), [3, 3, 3, 3])
    R_cs = np.full((3, 3), rho_cs) + (1 - rho_cs) * np.eye(3)
    R_ar = rho_ar ** np.abs(np.subtract.outer(np.arange(3), np.arange(3)))
    want = [np.diag(sd) @ R_cs @ np.diag(sd), 0.49 * R_ar, 0.49 * R_cs,
            np.diag(sd) @ R_ar @ np.diag(sd)]
    for Tk, W in zip(T, want):
        np.testing.assert_allclose(Tk @ Tk.T, W, atol=1e-12)
    # the start is ρ = 0 with unit SDs
    th0 = tm.theta(tm.init(np.zeros(24)))
    for Tk in theta_to_T(th0, [3, 3, 3, 3]):
        np.testing.assert_allclose(Tk @ Tk.T, np.eye(3), atol=1e-12)


def test_a_two_column_cs_term_is_the_unstructured_term():
    """With two columns ``cs()`` has one correlation and two SDs: the unstructured model."""
    a = _fit("y ~ x + cs(1 + x | g)")
    b = _fit("y ~ x + (1 + x | g)")
    assert a.loglik == pytest.approx(b.loglik, rel=1e-8)
    np.testing.assert_allclose(a.fixef.to_numpy(), b.fixef.to_numpy(), atol=1e-5)
    assert a.npar == b.npar
