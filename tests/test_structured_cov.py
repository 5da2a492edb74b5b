"""lme4 2.0's ``diag()`` covariance structure in ``lmer`` and ``glmer`` (issue 20).

References: ``tests/data/parity3/diag_<id>.json`` from
``r_scripts/structured_cov_reference.R``: Debian's lme4 1.1-31 has no ``diag()``, so the
reference is the equivalent lme4 model with one independent scalar term per model-matrix
column (tight bobyqa), cross-checked there against glmmTMB's ``diag()`` (same criterion to
1e-6).  Tolerances: criterion to 1e-7 relative, fixed effects and SDs to 1e-4 relative,
SEs to 1e-3.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import scoremix as sm
from scoremix.lme.anova_tables import AnovaError
from scoremix.lme.errors import FormulaError

REF_DIR = Path(__file__).resolve().parents[1] / "tests" / "data" / "parity3"
CASES = sorted(p.stem for p in REF_DIR.glob("diag_*.json"))


def _data() -> pd.DataFrame:
    d = pd.read_csv(REF_DIR / "sleep_period.csv")
    d["Subject"] = d["Subject"].astype(str)
    d["period"] = pd.Categorical(d["period"], categories=["early", "mid", "late"])
    return d


@pytest.mark.parametrize("name", CASES)
def test_diag_matches_lme4_equivalent_and_glmmtmb(name):
    ref = json.loads((REF_DIR / f"{name}.json").read_text())
    assert ref["criterion"] == pytest.approx(ref["glmmTMB_criterion"], rel=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = sm.lmer(ref["formula"], _data(), REML=ref["REML"])
    crit = -2 * m.loglik
    assert crit == pytest.approx(ref["criterion"], rel=1e-7)
    assert list(m.fixef.index) == list(ref["fixef"])
    np.testing.assert_allclose(m.fixef.to_numpy(), list(ref["fixef"].values()), rtol=1e-4)
    np.testing.assert_allclose(m.se.to_numpy(), ref["se"], rtol=1e-3)
    vc = m.varcorr
    sds = vc.loc[vc["grp"] != "Residual", "sdcor"].to_numpy()
    np.testing.assert_allclose(np.sort(sds), np.sort(ref["sd"]), rtol=1e-4, atol=1e-6)
    assert m.sigma == pytest.approx(ref["sigma"], rel=1e-5)
    # one parameter per column, no correlations
    assert len(m.theta) == len(ref["sd"])


def test_diag_of_numeric_columns_is_the_double_bar_model():
    d = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = sm.lmer("Reaction ~ Days + diag(1 + Days | Subject)", d)
        b = sm.lmer("Reaction ~ Days + (Days || Subject)", d)
    assert a.loglik == pytest.approx(b.loglik, rel=1e-10)
    np.testing.assert_allclose(a.theta.to_numpy(), b.theta.to_numpy(), rtol=1e-6)


def test_diag_predicts_new_data_with_its_columns():
    d = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = sm.lmer("Reaction ~ Days + diag(1 + period | Subject)", d)
    np.testing.assert_allclose(m.predict(d.iloc[:25]).to_numpy(), np.asarray(m.fitted)[:25],
                               rtol=1e-10)


def test_diag_in_glmer_is_the_independent_terms_model():
    rng = np.random.default_rng(7)
    n_g, n_per = 40, 30
    g = np.repeat(np.arange(n_g), n_per)
    x = rng.normal(size=g.size)
    eta = -0.5 + 0.4 * x + rng.normal(0, 0.8, n_g)[g] + rng.normal(0, 0.5, n_g)[g] * x
    d = pd.DataFrame({"y": (rng.random(g.size) < 1 / (1 + np.exp(-eta))).astype(int),
                      "x": x, "g": [f"g{k}" for k in g]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = sm.glmer("y ~ x + diag(1 + x | g)", d, "binomial")
        b = sm.glmer("y ~ x + (1 | g) + (0 + x | g)", d, "binomial")
    assert a.loglik == pytest.approx(b.loglik, rel=1e-9)
    np.testing.assert_allclose(a.fixef.to_numpy(), b.fixef.to_numpy(), atol=1e-6)


def test_structured_covariances_without_support_are_refused_by_name():
    d = _data()
    for f in ("Reaction ~ Days + toep(0 + period | Subject)",
              "Reaction ~ Days + ou(0 + period | Subject)"):
        # cs() and ar1() fit in lmer (tests/test_lmer_structured.py); glmmTMB's others do not
        with pytest.raises(FormulaError, match="structured covariance .* not supported"):
            sm.lmer(f, d)
    with pytest.raises(FormulaError, match="hom = TRUE"):
        sm.lmer("Reaction ~ Days + diag(1 + Days | Subject, hom = TRUE)", d)
    with pytest.raises(FormulaError, match="takes one random-effects term"):
        sm.lmer("Reaction ~ Days + diag(1 + Days | Subject, 2)", d)
    with pytest.raises(AnovaError, match="structured"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sm.ranova(sm.lmer("Reaction ~ Days + diag(1 + Days | Subject)", d))
