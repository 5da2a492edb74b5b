"""fit.check() and all_fit: scaled residuals are uniform under the model and detect a
misspecified variance and a missing term (seeded examples with known truth); rePCA and
all_fit against lme4."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import scoremix as sm
from scoremix.lme.scaled_residuals import scaled_residuals
from scoremix.lme.singularity import re_pca

from emm_helpers import EMM_DATA

ALLFIT = json.loads((EMM_DATA / "allfit.json").read_text())


def _grouped(seed: int, sd_by_label=(1.0, 1.0), f_effect=0.0, n_g=30, n_per=10):
    rng = np.random.default_rng(seed)
    g = np.repeat([f"g{i:02d}" for i in range(n_g)], n_per)
    label = np.tile(["a", "b"], n_g * n_per // 2)
    F = rng.choice(["f1", "f2"], size=g.size)
    x = rng.normal(size=g.size)
    sd = np.where(label == "a", sd_by_label[0], sd_by_label[1])
    y = (1 + 0.5 * x + 0.8 * (label == "b") + f_effect * (F == "f2")
         + np.repeat(rng.normal(0, 0.7, n_g), n_per) + rng.normal(size=g.size) * sd)
    return pd.DataFrame({"y": y, "x": x, "label": label, "F": F, "g": g})


def test_detects_misspecified_variance():
    d = _grouped(11, sd_by_label=(0.5, 2.0))
    wrong = sm.lmer("y ~ x + label + (1 | g)", d)
    right = sm.lmer("y ~ x + label + (1 | g)", d, dispersion="~ label")
    tw = scaled_residuals(wrong, 250, seed=1, by=["label"]).tests.set_index("test")["p.value"]
    tr = scaled_residuals(right, 250, seed=1, by=["label"]).tests.set_index("test")["p.value"]
    assert tw["spread by label (Fligner-Killeen)"] < 1e-6
    assert tr["spread by label (Fligner-Killeen)"] > 0.01
    assert tr["uniformity (KS, calibrated)"] > 0.01


def test_detects_missing_term():
    d = _grouped(12, f_effect=1.2)
    wrong = sm.lmer("y ~ x + label + (1 | g)", d)
    right = sm.lmer("y ~ x + label + F + (1 | g)", d)
    tw = scaled_residuals(wrong, 250, seed=2, by={"F": d["F"]}).tests.set_index("test")["p.value"]
    tr = scaled_residuals(right, 250, seed=2, by=["F"]).tests.set_index("test")["p.value"]
    assert tw["location by F (Kruskal-Wallis)"] < 1e-6
    assert tr["location by F (Kruskal-Wallis)"] > 0.01
    chk = wrong.check(by={"F": d["F"]}, influence=False)
    assert any("missing" in a for a in chk.advice)


@pytest.mark.slow
def test_scaled_residuals_uniform_on_data_simulated_from_the_fit():
    """200 data sets simulated from a fit, each refitted: the KS p-values of the scaled
    residuals are themselves uniform (KS test p > 0.01) with mean near 1/2."""
    d = _grouped(13, n_g=15, n_per=6)
    base = sm.lmer("y ~ x + label + (1 | g)", d)
    ys = base.simulate(200, seed=5).to_numpy()
    pv = []
    for s in range(200):
        f = base.refit(y=ys[:, s])
        pv.append(scaled_residuals(f, 99, seed=s).tests["p.value"].iloc[0])
    pv = np.asarray(pv)
    assert stats.kstest(pv, "uniform").pvalue > 0.01
    assert abs(pv.mean() - 0.5) < 4 * np.sqrt(1 / 12 / 200)


def test_re_pca_flags_a_singular_term():
    rng = np.random.default_rng(3)
    d = _grouped(14)
    d["y"] = 1 + 0.5 * d["x"] + np.repeat(rng.normal(0, 0.7, 30), 10) + rng.normal(size=len(d))
    m = sm.lmer("y ~ x + (x | g)", d)    # no true slope variance: boundary fit
    pca = re_pca(m)
    assert pca["singular"].all() == m.singular
    T = np.linalg.svd(np.array([[m.theta.iloc[0], 0], [m.theta.iloc[1], m.theta.iloc[2]]]), compute_uv=False)
    np.testing.assert_allclose(pca["sdev"], T, rtol=1e-12)


def test_convergence_report_of_a_good_fit():
    d = pd.read_csv(EMM_DATA / "data" / "sleepstudy.csv", dtype={"Subject": str})
    c = sm.lmer("Reaction ~ Days + (Days | Subject)", d).check(nsim=99, influence=False)
    assert c.convergence["ok"] and c.convergence["scaled_grad"] < 1e-4
    assert c.convergence["min_hess_eigen"] > 0


def _data_for(mid):
    dd = EMM_DATA / "data"
    if mid == "sleep_slopes":
        return pd.read_csv(dd / "sleepstudy.csv", dtype={"Subject": str})
    if mid == "machines":
        return pd.read_csv(dd / "Machines.csv", dtype={"Worker": str, "Machine": str})
    return pd.read_csv(dd / "cake.csv", dtype={"replicate": str, "recipe": str, "ftemp": str})


@pytest.mark.parametrize("ref", ALLFIT["models"], ids=lambda m: m["id"])
def test_all_fit_matches_lme4_allfit(ref):
    """Same fields as summary(allFit(m)); ≥ 4 optimisers; every converged optimiser reaches
    lme4's log-likelihood (1e-6) and fixed effects (1e-4 relative), and sdcor names agree."""
    m = sm.lmer(ref["formula"], _data_for(ref["id"]))
    af = sm.all_fit(m)
    assert af.which_ok.sum() >= 4
    best_r = max(ref["llik"].values())
    fx = pd.Series(ref["fixef"]["bobyqa"])
    ok = [k for k in af.llik.index if abs(af.llik[k] - best_r) < 1e-6]
    assert len(ok) >= 4
    for k in ok:
        np.testing.assert_allclose(af.fixef.loc[k, fx.index], fx, rtol=1e-4)
    # an optimiser that stops short is visible in the table (its log-likelihood is lower
    # or it carries a convergence message), as in lme4's allFit summary
    for k in af.llik.index:
        if k not in ok:
            assert af.llik[k] < best_r or af.msgs[k] != "[OK]"
    assert set(af.sdcor.columns) == set(ref["sdcor"]["bobyqa"])
    s = pd.Series(ref["sdcor"]["bobyqa"])
    np.testing.assert_allclose(af.sdcor.loc[ok[0], s.index], s, rtol=1e-3)
    summ = af.summary()
    assert {"ok", "loglik", "dloglik", "time_s", "feval", "messages"} <= set(summ.columns)


@pytest.mark.r
def test_re_pca_live(rscript):
    code = ("suppressPackageStartupMessages(library(lme4));"
            f"d<-read.csv('{(EMM_DATA / 'data' / 'sleepstudy.csv').as_posix()}',colClasses=c(Subject='factor'));"
            "m<-lmer(Reaction~Days+(Days|Subject),d);cat(rePCA(m)$Subject$sdev, sep=' ')")
    out = subprocess.run([rscript, "-e", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    r = np.array([float(v) for v in out.stdout.split()])
    d = pd.read_csv(EMM_DATA / "data" / "sleepstudy.csv", dtype={"Subject": str})
    ours = re_pca(sm.lmer("Reaction ~ Days + (Days | Subject)", d))["sdev"].to_numpy()
    np.testing.assert_allclose(ours, r, rtol=1e-4)


def test_transformation_fit_is_checked_on_its_latent_scale():
    """The Gaussian checks simulate scores; a transformation fit is checked on its latent
    scale instead (scoremix.transform.check; tests/test_check_transform.py), never misjudged
    by the score-scale checks."""
    rng = np.random.default_rng(2)
    g = rng.choice(["a", "b"], 200)
    s = rng.choice([f"s{i}" for i in range(10)], 200)
    z = (g == "b") * 0.5 + rng.normal(0, 0.5, 10)[pd.factorize(s, sort=True)[0]] + rng.normal(size=200)
    fit = sm.lmer("score ~ g + (1 | spk)", pd.DataFrame({"g": g, "spk": s, "score": np.exp(z)}),
                  transform="monotone")
    chk = sm.check_model(fit, nsim=100)
    assert "latent" in chk.residuals.notes[0]
    assert "dispersion (simulated)" not in set(chk.tests["test"])
    assert chk.tests["p.value"].min() > 0.01
