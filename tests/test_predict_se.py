"""predict(se_fit=True) against lme4's vcov_full formula evaluated in R with lme4's own
matrices (r_scripts/predict_se_reference.R; Debian's lme4 1.1-31 predates se.fit)."""

from __future__ import annotations

import json
import subprocess
import warnings

import numpy as np
import pandas as pd
import pytest

import scoremix as sm
from scoremix.lme.prediction import vcov_full

from emm_helpers import EMM_DATA

REF = json.loads((EMM_DATA / "predict_se.json").read_text())


def _data(model_id: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    if model_id == "sleep_slopes":
        d = pd.read_csv(EMM_DATA / "data" / "sleepstudy.csv", dtype={"Subject": str})
    else:
        d = pd.read_csv(EMM_DATA / "data" / "Machines.csv", dtype={"Worker": str, "Machine": str})
    nd = pd.DataFrame(REF["newdata"][model_id])
    for c in nd.columns:
        if c in ("Subject", "Worker", "Machine"):
            nd[c] = nd[c].astype(str)
    return d, nd


@pytest.mark.parametrize("m", REF["models"], ids=lambda m: m["id"])
def test_se_fit_matches_lme4_formula(m):
    d, nd = _data(m["id"])
    fit = sm.lmer(m["formula"], d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fit.predict(nd, se_fit=True, allow_new_levels=True)
    np.testing.assert_allclose(out["fit"], m["fit"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out["se_fit"], m["se_fit"], rtol=1e-5)
    pop = fit.predict(nd, re_form="~0", se_fit=True)
    np.testing.assert_allclose(pop["fit"], m["fit_fixed"], rtol=1e-6)
    np.testing.assert_allclose(pop["se_fit"], m["se_fixed"], rtol=1e-5)


def test_vcov_full_beta_block_is_vcov():
    d, _ = _data("sleep_slopes")
    fit = sm.lmer("Reaction ~ Days + (Days | Subject)", d)
    C = vcov_full(fit)
    p = len(fit.fixef)
    np.testing.assert_allclose(C[-p:, -p:], fit.vcov.to_numpy(), rtol=1e-8)


def test_prediction_interval_covers_new_observations():
    """A simulation with known truth: over 300 data sets, one new observation of a new
    subject falls in the 90% prediction interval about 90% of the time (4 binomial SE)."""
    rng = np.random.default_rng(7)
    n_sub, n_per, reps = 20, 5, 300
    sub = np.repeat([f"s{i}" for i in range(n_sub)], n_per)
    x = np.tile(np.linspace(0, 1, n_per), n_sub)
    hits = 0
    for _ in range(reps):
        y = 1 + 2 * x + np.repeat(rng.normal(0, 0.8, n_sub), n_per) + rng.normal(0, 0.5, x.size)
        fit = sm.lmer("y ~ x + (1 | g)", pd.DataFrame({"y": y, "x": x, "g": sub}))
        xn = rng.uniform(0, 1)
        yn = 1 + 2 * xn + rng.normal(0, 0.8) + rng.normal(0, 0.5)
        pi = fit.predict(pd.DataFrame({"x": [xn], "g": ["new"]}), allow_new_levels=True,
                         interval="prediction", level=0.9)
        hits += int(pi["lower"].iloc[0] <= yn <= pi["upper"].iloc[0])
    assert abs(hits / reps - 0.9) < 4 * np.sqrt(0.09 / reps)


def test_new_levels_refused_when_asked():
    d, nd = _data("machines")
    fit = sm.lmer("score ~ Machine + (1 | Worker)", d)
    with pytest.raises(sm.NewLevelError):
        fit.predict(nd, se_fit=True, allow_new_levels=False)


@pytest.mark.r
def test_live_reference_matches_stored(rscript, tmp_path):
    out = tmp_path / "p.json"
    subprocess.run([rscript, "r_scripts/predict_se_reference.R", str(out)], check=True,
                   capture_output=True, cwd=EMM_DATA.parents[2])
    live = json.loads(out.read_text())
    for a, b in zip(live["models"], REF["models"]):
        np.testing.assert_allclose(a["se_fit"], b["se_fit"], rtol=1e-8)
