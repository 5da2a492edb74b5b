"""scoremix.emm against R emmeans 1.8.4 on a battery of 28 linear mixed models
(r_scripts/emmeans_battery.R → tests/data/emmeans/battery.json).

Every model is evaluated at lme4's θ (stored with the references) so that the post-fit
layer is compared with emmeans at identical variance parameters.  Tolerances:
estimates, SEs, t ratios and confidence limits 1e-6 (relative to max(1, |value|)), df
1e-4, p-values 1e-4 (absolute); ``mvt`` p-values against mvtnorm at high precision
(``p.value.precise``) 5e-4 (both are quasi-Monte Carlo; the singular correlation of
pairwise families is the hard case); ``mvt`` and ``dunnettx`` critical values 5e-3 in units of the
SE (emmeans's are randomised / a uniroot with tol 5e-4); joint tests' ``df2`` and
``F.ratio`` as emmeans rounds them (2 and 3 decimals).  ``mvt`` queries are marked slow
(quasi-Monte Carlo integrals).
"""

from __future__ import annotations

import json
import subprocess
import warnings

import numpy as np
import pandas as pd
import pytest

import scoremix as sm
from scoremix.emm import EmmError, contrast, emmeans, joint_tests

from conftest import shared_data_dir
from emm_helpers import EMM_DATA, battery_fit, compare, load_battery, run_query

BATTERY = load_battery()
MODELS = {m["id"]: m for m in BATTERY["models"]}
CASES = [(m["id"], i) for m in BATTERY["models"] for i, q in enumerate(m["queries"])]


def _fit(model_id):
    m = MODELS[model_id]
    fit = battery_fit(m, shared_data_dir())
    if fit is None:
        pytest.skip(f"data of {model_id} ({m['data']}) needs ../shared/data (absent)")
    return fit


#: models with more than 300 rows: their Kenward-Roger queries (dense n x n) are slow
BIG = {"carrots_product", "carrots_sens", "sim_attacks", "la_attack_gender", "la_label_gender",
       "chick_int", "chick_slopes", "ham", "ham_gender", "sim_unbalanced_full", "sim_unbalanced_slopes",
       "sim_crossed"}


def _param(mid, i):
    q = MODELS[mid]["queries"][i]
    slow = q.get("adjust") == "mvt" or (mid in BIG and q.get("lmer_df") == "kenward-roger")
    marks = [pytest.mark.slow] if slow else []
    return pytest.param(mid, i, marks=marks, id=f"{mid}-{i}-{q['kind']}")


def test_battery_size():
    assert len(MODELS) >= 25
    kinds = {q["kind"] for m in MODELS.values() for q in m["queries"]}
    assert kinds == {"emmeans", "contrast", "joint_tests"}
    methods = {q.get("method") for m in MODELS.values() for q in m["queries"]}
    adjusts = {q.get("adjust") for m in MODELS.values() for q in m["queries"]}
    assert {"pairwise", "trt.vs.ctrl", "eff", "consec"} <= methods
    assert {"tukey", "holm", "bonferroni", "mvt", "none"} <= adjusts


@pytest.mark.parametrize("mid,i", [_param(mid, i) for mid, i in CASES])
def test_matches_emmeans(mid, i):
    fit = _fit(mid)
    q = MODELS[mid]["queries"][i]
    ours = run_query(fit, q)
    errs = compare(ours, q["result"], q)
    assert not errs, f"{mid} query {i} ({q['kind']} {q.get('specs')} {q.get('method')}): {errs}"


def test_native_fit_close_to_lme4():
    """Without pinning θ, the native fits give emmeans within the engines' agreement."""
    from emm_helpers import fit_model
    m = MODELS["machines"]
    fit = fit_model(m, None)
    ours = emmeans(fit, "Machine").summary()
    ref = pd.DataFrame(m["queries"][0]["result"])
    np.testing.assert_allclose(ours["emmean"], ref["emmean"], rtol=1e-6)
    np.testing.assert_allclose(ours["SE"], ref["SE"], rtol=1e-5)


def test_bad_input_errors():
    fit = _fit("machines")
    with pytest.raises(EmmError, match="Mashine"):
        emmeans(fit, "Mashine")
    with pytest.raises(EmmError, match="level"):
        emmeans(fit, "Machine", at={"Machine": ["Z"]})
    with pytest.raises(EmmError, match="lmer_df"):
        emmeans(fit, "Machine", lmer_df="wald")
    with pytest.raises(EmmError, match="weights"):
        emmeans(_fit("ham_gender"), "Product", weights="popular").summary()
    e = emmeans(fit, "Machine")
    with pytest.raises(EmmError, match="method"):
        contrast(e, "allpairs")
    with pytest.raises(EmmError, match="adjust"):
        contrast(e, "pairwise", adjust="tukeyy")
    with pytest.raises(EmmError, match="3 means"):
        contrast(e, {"c": [1, -1]})


def test_custom_contrast_equals_closed_form():
    fit = _fit("machines")
    e = emmeans(fit, "Machine")
    c = contrast(e, {"A vs rest": [1, -0.5, -0.5]}).summary()
    mu = e.summary()["emmean"].to_numpy()
    assert c["estimate"].iloc[0] == pytest.approx(mu[0] - 0.5 * (mu[1] + mu[2]), rel=1e-12)


def test_response_scale_with_a_link():
    """A GLMM-like fit (family with a logit link): response-scale means are the inverse
    link of the link-scale means, delta-method SE, back-transformed limits; contrasts are
    odds ratios."""
    base = _fit("machines")

    class Fam:
        link = "logit"
        linkinv = staticmethod(lambda e: 1 / (1 + np.exp(-e)))
        mu_eta = staticmethod(lambda e: np.exp(-e) / (1 + np.exp(-e)) ** 2)

    class FakeGlmm:
        fixef = base.fixef / 50
        vcov = base.vcov / 2500
        spec = base.spec
        family = Fam()

    link = emmeans(FakeGlmm(), "Machine").summary()
    resp = emmeans(FakeGlmm(), "Machine", type="response").summary()
    assert np.all(~np.isfinite(link["df"]))
    p = 1 / (1 + np.exp(-link["emmean"]))
    np.testing.assert_allclose(resp["prob"], p, rtol=1e-12)
    np.testing.assert_allclose(resp["SE"], p * (1 - p) * link["SE"], rtol=1e-12)
    np.testing.assert_allclose(resp["asymp.LCL"], 1 / (1 + np.exp(-link["asymp.LCL"])), rtol=1e-12)
    orat = contrast(emmeans(FakeGlmm(), "Machine", type="response"), "pairwise", adjust="none").summary()
    d = link["emmean"].to_numpy()
    assert orat["odds.ratio"].iloc[0] == pytest.approx(np.exp(d[0] - d[1]), rel=1e-12)
    assert "z.ratio" in orat.columns


@pytest.mark.r
def test_live_emmeans(rscript, tmp_path):
    """Live R emmeans on one model equals scoremix at lme4's θ."""
    code = f"""
suppressPackageStartupMessages({{library(lme4); library(emmeans); library(jsonlite)}})
d <- read.csv('{(EMM_DATA / 'data' / 'Alfalfa.csv').as_posix()}', colClasses = c(Variety = 'factor', Date = 'factor', Block = 'factor'))
m <- lmer(Yield ~ Date * Variety + (1 | Block) + (1 | Block:Variety), d)
e <- emmeans(m, 'Date', lmer.df = 'satterthwaite')
c <- summary(contrast(e, 'pairwise', adjust = 'holm'))
j <- joint_tests(m, lmer.df = 'kenward-roger')
cat(toJSON(list(theta = as.numeric(getME(m, 'theta')), emm = summary(e), con = as.data.frame(c),
                joint = as.data.frame(j)), digits = NA))
"""
    out = subprocess.run([rscript, "-e", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    live = json.loads(out.stdout)
    from emm_helpers import fit_at_theta, fit_model
    fit = fit_at_theta(fit_model(MODELS["alfalfa"], None), live["theta"])
    q = {"kind": "emmeans"}
    assert not compare(emmeans(fit, "Date").summary(), live["emm"], q)
    assert not compare(contrast(emmeans(fit, "Date"), "pairwise", adjust="holm").summary(),
                       live["con"], {"kind": "contrast", "adjust": "holm"})
    assert not compare(joint_tests(fit, lmer_df="kenward-roger"), live["joint"], {"kind": "joint_tests"})
