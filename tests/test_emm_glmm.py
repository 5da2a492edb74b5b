"""scoremix.emm on generalised linear mixed models (``sm.glmer``) against R emmeans 1.8.4
(r_scripts/emmeans_glmm_battery.R → tests/data/emmeans/glmm_battery.json).

Binomial (logit, probit) and Poisson (log) models: cbpp, grouseticks, a VerbAgg subset,
epil and seeded detector decision/count tables; factors of 2–13 levels, interactions,
covariates at ``at=`` values, a 0/1 covariate (emmeans's ``cov.keep``), unbalanced cells;
link scale, ``type="response"`` (back-transformed means, ratios / odds ratios) and
``regrid`` (differences of probabilities / rates).

The emmeans layer is a function of ``β̂``, ``vcov`` and the design: each model is evaluated
at lme4's ``β̂`` and ``vcov`` (stored) and compared with emmeans to 1e-6 (estimates, SEs,
z ratios, limits; relative to max(1, |value|)) and 1e-4 (p-values); df are infinite on
both sides.  ``mvt`` as in test_emm_battery.py.  The native fits agree with lme4 to the
engines' tolerance (tests/test_glmm.py), checked here on the marginal means too.
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pandas as pd
import pytest
from scipy import special, stats

import scoremix as sm
from scoremix.emm import contrast, emmeans, joint_tests, regrid

from emm_glmm_helpers import DATA, fit_at_lme4, load_glmm_battery, native_fit, run_glmm_query
from emm_helpers import compare, load_battery

BATTERY = load_glmm_battery()
MODELS = {m["id"]: m for m in BATTERY["models"]}
CASES = [pytest.param(m["id"], i, id=f"{m['id']}-{i}-{q['kind']}",
                      marks=[pytest.mark.slow] if q.get("adjust") == "mvt" else [])
         for m in BATTERY["models"] for i, q in enumerate(m["queries"])]


def test_battery_coverage():
    lmm = load_battery()["models"]
    assert len(MODELS) >= 8 and len(lmm) + len(MODELS) >= 25
    fams = {(m["family"], m["link"]) for m in MODELS.values()}
    assert {("binomial", "logit"), ("binomial", "probit"), ("poisson", "log")} <= fams
    qs = [q for m in MODELS.values() for q in m["queries"]]
    assert {q["kind"] for q in qs} == {"emmeans", "contrast", "joint_tests"}
    assert {q.get("type") for q in qs if q["kind"] != "joint_tests"} == {"link", "response"}
    assert any(q.get("regrid") for q in qs) and any(q.get("at") for q in qs)
    assert {"pairwise", "trt.vs.ctrl", "eff", "consec"} <= {q.get("method") for q in qs}
    assert {"tukey", "holm", "bonferroni", "mvt", "none"} <= {q.get("adjust") for q in qs}


@pytest.mark.parametrize("mid,i", CASES)
def test_matches_emmeans_glmm(mid, i):
    m = MODELS[mid]
    q = m["queries"][i]
    ours = run_glmm_query(fit_at_lme4(m), q)
    errs = compare(ours, q["result"], q)
    assert not errs, f"{mid} query {i} ({q['kind']} {q.get('specs')} {q.get('method')} {q.get('type')}): {errs}"


@pytest.mark.parametrize("mid", ["g_cbpp", "g_counts"])
def test_native_fit_close_to_lme4(mid):
    """Without lme4's estimates the native fit's marginal means agree with emmeans on lme4's
    default fit to 2e-3 and 2e-2 in SEs (lme4's default PIRLS tolerance 1e-7 moves its own estimates by
    ~1e-3; tests/data/glmm/*.json notes)."""
    m = MODELS[mid]
    fit = native_fit(m)
    q = m["queries"][0]
    ours = emmeans(fit, q["specs"]).summary()
    ref = pd.DataFrame(q["result"])
    np.testing.assert_allclose(ours["emmean"], ref["emmean"], atol=2e-3)
    np.testing.assert_allclose(ours["SE"], ref["SE"], rtol=2e-2)  # lme4 default: Hessian SEs ~1% off


def test_native_fit_equals_tight_lme4():
    """Against lme4 refitted with converged PIRLS (tolPwrss 1e-12, tests/data/glmm/
    cbpp_cbind.json) the native marginal means agree to 1e-4 and their SEs to 1e-3."""
    tight = json.loads((DATA / "glmm" / "cbpp_cbind.json").read_text())
    m = MODELS["g_cbpp"]
    ref = fit_at_lme4(dict(m, fixef=tight["fixef"], vcov=tight["vcov"], id="tight_cbpp"))
    a = emmeans(native_fit(m), "period", type="response").summary()
    b = emmeans(ref, "period", type="response").summary()
    np.testing.assert_allclose(a["prob"], b["prob"], atol=1e-4)
    np.testing.assert_allclose(a["SE"], b["SE"], rtol=1e-3)


def test_response_scale_closed_form():
    """``type="response"``: g⁻¹ of the link mean, delta-method SE, back-transformed limits;
    contrasts are odds ratios exp(η_i − η_j) tested on the link scale; ``regrid``
    contrasts are differences of probabilities with SE √(d'Σd) (closed forms)."""
    fit = fit_at_lme4(MODELS["g_cbpp"])
    link = emmeans(fit, "period").summary()
    resp = emmeans(fit, "period", type="response").summary()
    eta = link["emmean"].to_numpy()
    p = special.expit(eta)
    np.testing.assert_allclose(resp["prob"], p, rtol=1e-12)
    np.testing.assert_allclose(resp["SE"], p * (1 - p) * link["SE"], rtol=1e-10)
    np.testing.assert_allclose(resp["asymp.LCL"], special.expit(link["asymp.LCL"]), rtol=1e-12)
    e = emmeans(fit, "period")
    orat = contrast(emmeans(fit, "period", type="response"), "pairwise", adjust="none").summary()
    assert orat["odds.ratio"].iloc[0] == pytest.approx(np.exp(eta[0] - eta[1]), rel=1e-12)
    assert orat["null"].iloc[0] == 1.0
    diff = contrast(regrid(e), "pairwise", adjust="none").summary()
    d = np.zeros(4); d[0], d[1] = p[0] * (1 - p[0]), -p[1] * (1 - p[1])
    L = e.L
    se = np.sqrt(d @ L @ fit.vcov.to_numpy() @ L.T @ d)
    assert diff["estimate"].iloc[0] == pytest.approx(p[0] - p[1], rel=1e-12)
    assert diff["SE"].iloc[0] == pytest.approx(se, rel=1e-10)
    assert diff["p.value"].iloc[0] == pytest.approx(2 * stats.norm.sf(abs((p[0] - p[1]) / se)), rel=1e-10)
    jt = joint_tests(fit)
    assert np.isinf(jt["df2"].iloc[0])


def test_regrid_of_lmm_is_identity():
    from emm_helpers import fit_model
    lm = fit_model(load_battery()["models"][0], None)
    e = emmeans(lm, "fDays")
    assert regrid(e) is e


@pytest.mark.r
def test_live_emmeans_glmm(rscript):
    """Live R: emmeans on the cbpp glmer, response scale and odds ratios, equals scoremix at
    lme4's estimates."""
    path = (DATA / "glmm" / "cbpp.csv").as_posix()
    code = f"""
suppressPackageStartupMessages({{library(lme4); library(emmeans); library(jsonlite)}})
d <- read.csv('{path}', colClasses = c(herd = 'factor', period = 'factor'))
m <- glmer(cbind(incidence, size - incidence) ~ period + (1 | herd), d, family = binomial)
e <- emmeans(m, 'period', type = 'response')
c <- summary(contrast(e, 'pairwise', adjust = 'holm'), type = 'response')
r <- summary(contrast(regrid(e), 'trt.vs.ctrl', adjust = 'bonferroni'))
cat(toJSON(list(fixef = as.list(fixef(m)), vcov = unname(as.matrix(vcov(m))), emm = summary(e),
                con = as.data.frame(c), reg = as.data.frame(r), joint = as.data.frame(joint_tests(m))),
           digits = NA, na = 'null', auto_unbox = TRUE))
"""
    out = subprocess.run([rscript, "-e", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    live = json.loads(out.stdout)
    m = dict(MODELS["g_cbpp"], fixef=live["fixef"], vcov=live["vcov"], id="live_cbpp")
    fit = fit_at_lme4(m)
    e = emmeans(fit, "period", type="response")
    assert not compare(e.summary(), live["emm"], {"kind": "emmeans"})
    assert not compare(contrast(e, "pairwise", adjust="holm").summary(), live["con"],
                       {"kind": "contrast", "adjust": "holm"})
    assert not compare(contrast(regrid(e), "trt.vs.ctrl", adjust="bonferroni").summary(), live["reg"],
                       {"kind": "contrast", "adjust": "bonferroni"})
    assert not compare(joint_tests(fit), live["joint"], {"kind": "joint_tests"})


def test_transformation_fit_on_latent_scale():
    """A transformation fit (h(score) = Xβ + Zb + ε, h estimated) is summarised on its latent
    scale: means L β̂ with SE √(L V L') from the fit's own vcov, z tests (closed form)."""
    rng = np.random.default_rng(1)
    n = 400
    g = rng.choice(["a", "b", "c"], n)
    s = rng.choice([f"s{i}" for i in range(15)], n)
    z = np.select([g == "a", g == "b"], [0.0, 0.5], 1.0) + rng.normal(0, 0.5, 15)[pd.factorize(s, sort=True)[0]] \
        + rng.normal(size=n)
    fit = sm.lmer("score ~ g + (1 | spk)", pd.DataFrame({"g": g, "spk": s, "score": np.exp(z)}),
                  transform="monotone")
    with pytest.warns(UserWarning, match="transformation fit"):
        e = emmeans(fit, "g")
    out = e.summary()
    b, V = fit.fixef.to_numpy(), fit.vcov.to_numpy()
    L = np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], float)
    np.testing.assert_allclose(out["emmean"], L @ b, rtol=1e-12)
    np.testing.assert_allclose(out["SE"], np.sqrt(np.diag(L @ V @ L.T)), rtol=1e-12)
    assert np.all(np.isinf(out["df"]))
    c = contrast(emmeans(fit, "g", lmer_df="asymptotic"), "trt.vs.ctrl", adjust="none").summary()
    np.testing.assert_allclose(c["estimate"], b[1:], rtol=1e-12)
    np.testing.assert_allclose(c["p.value"], 2 * stats.norm.sf(np.abs(b[1:] / np.sqrt(np.diag(V)[1:]))),
                               rtol=1e-10)
