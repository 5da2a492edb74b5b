"""Sampling tests of bayes_lmer: collapsed = joint = rows within Monte Carlo error, coverage of a
known truth, agreement with lme4's REML fit, class moments / model EER, real ASVspoof data."""

from __future__ import annotations

import json
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.special import ndtr

from scoremix.lme.spec import ModelSpec, RandomTerm

pytest.importorskip("pymc")

from test_bayes_likelihood import make_spec  # noqa: E402  (helper of the sibling test module)

FIT = dict(chains=2, cores=1, progress=False)


def _fit(spec, **kw):
    from scoremix.bayes import BayesConvergenceWarning, bayes_lmer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BayesConvergenceWarning)
        return bayes_lmer(spec, **{**FIT, **kw})


def _mean_mcse(res, name):
    import arviz as az

    d = res.draws(name)
    return float(d.mean()), float(az.mcse(res.idata, var_names=[name], method="mean")[name].values)


def test_collapsed_joint_rows_agree_and_result_structure():
    """One test (not several sharing a fixture) so that pytest-xdist fits the three small
    models once, not once per worker."""
    spec = make_spec(n=300, n1=10, n2=5)
    fits = {
        "collapsed": _fit(spec, draws=400, tune=300, seed=1),
        "joint": _fit(spec, draws=400, tune=300, seed=2, method="joint"),
        "rows": _fit(spec, draws=400, tune=300, seed=3, method="joint", likelihood="rows"),
    }
    for other in ("joint", "rows"):
        _check_agree(fits["collapsed"], fits[other])
    _check_result_structure(fits["collapsed"])


def _check_agree(a, b):
    assert a.param_names == b.param_names
    for name in a.param_names:
        ma, ea = _mean_mcse(a, name)
        mb, eb = _mean_mcse(b, name)
        assert abs(ma - mb) < 4.0 * np.hypot(ea, eb), (b.method, b.likelihood, name, ma, mb, ea, eb)


def _check_result_structure(r):
    s = r.summary()
    assert list(s.index) == ["(Intercept)", "lab", "x", "sd_spk__(Intercept)", "sd_att__(Intercept)", "sigma"]
    assert r.draws("b_spk").shape == (2, 400, 10, 1)
    assert set(r.idata.groups()) >= {"posterior", "sample_stats", "observed_data"}
    vc = r.varcorr
    assert list(vc["grp"]) == ["spk", "att", "Residual"]
    assert vc["sdcor"].iloc[2] == pytest.approx(r.draws("sigma").mean())
    assert vc["vcov"].iloc[0] == pytest.approx((r.draws("sd_spk__(Intercept)") ** 2).mean())
    fx = r.fixef
    assert fx.loc["lab", "mean"] == pytest.approx(r.draws("lab").mean())
    d = r.diagnostics
    assert d.table.shape == (6, 3) and d.n_draws == 800
    # compare() against an LmerResult.to_dict()-like mapping
    freq = {"fixef": {"(Intercept)": 0.4, "lab": 2.0, "x": -0.3}, "se": {"(Intercept)": 0.5, "lab": 0.1, "x": 0.05},
            "varcorr": [{"grp": "spk", "var1": "(Intercept)", "var2": None, "vcov": 0.49, "sdcor": 0.7},
                        {"grp": "att", "var1": "(Intercept)", "var2": None, "vcov": 2.25, "sdcor": 1.5},
                        {"grp": "Residual", "var1": None, "var2": None, "vcov": 1.44, "sdcor": 1.2}],
            "sigma": 1.2}
    cmp_ = r.compare(freq)
    assert cmp_.loc["sd_att__(Intercept)", "estimate"] == 1.5
    assert cmp_.loc["lab", "se"] == 0.1
    assert cmp_.loc["sigma", "z"] == pytest.approx((r.draws("sigma").mean() - 1.2) / r.draws("sigma").std(ddof=1))


def _truth_spec(seed=3):
    """Known truth: 40 speakers × 8 attacks, class-specific residual SD."""
    rng = np.random.default_rng(seed)
    n, n1, n2 = 2400, 40, 8
    spk = np.arange(n) % n1
    att = rng.integers(0, n2, n)
    lab = rng.integers(0, 2, n)
    truth = {"(Intercept)": -1.0, "lab": 3.0, "sd_spk__(Intercept)": 0.5, "sd_att__(Intercept)": 1.2,
             "sigma_0": 1.0, "sigma_1": 1.6}
    sig = np.where(lab == 1, truth["sigma_1"], truth["sigma_0"])
    y = (truth["(Intercept)"] + truth["lab"] * lab + rng.normal(0, 0.5, n1)[spk] + rng.normal(0, 1.2, n2)[att]
         + sig * rng.normal(size=n))
    X = np.column_stack([np.ones(n), lab])
    terms = [RandomTerm("spk", "spk", ["(Intercept)"], spk, [f"s{i:02d}" for i in range(n1)], np.ones((n, 1))),
             RandomTerm("att", "att", ["(Intercept)"], att, [f"a{i}" for i in range(n2)], np.ones((n, 1)))]
    data = pd.DataFrame({"y": y, "lab": lab, "spk": spk, "att": att,
                         "label": np.where(lab == 1, "bonafide", "spoof")})
    spec = ModelSpec("y ~ lab + (1|spk) + (1|att)", "y", y, X, ["(Intercept)", "lab"], terms, data,
                     dispersion_formula="~ lab", dispersion_codes=lab.astype(np.int64),
                     dispersion_levels=["0", "1"])
    return spec, truth


def test_known_truth_coverage_class_moments_and_eer():
    """One seeded fit of the known-truth data (one test so pytest-xdist fits it once)."""
    spec, truth = _truth_spec()
    res = _fit(spec, draws=500, tune=500, seed=11)
    _check_intervals_cover_known_truth(truth, res)
    _check_class_moments_and_model_eer(spec, res)


def _check_intervals_cover_known_truth(truth, res):
    assert res.diagnostics.n_divergent == 0
    for name, val in truth.items():
        lo, hi = np.quantile(res.draws(name), [0.05, 0.95])
        assert lo < val < hi, (name, lo, val, hi)
    assert np.all(res.draws("sigma") == res.draws("sigma_0"))


def _check_class_moments_and_model_eer(spec, res):
    mom = res.class_moments(groups="att", label="label", max_draws=5)
    assert set(mom["class"]) == {0, 1}
    # independent recomputation for one cell and one draw
    d = int(mom["draw"].iloc[0])
    flat = lambda n: res.draws(n).reshape(-1, *res.draws(n).shape[2:])  # noqa: E731
    mu = (flat("(Intercept)")[d] + flat("lab")[d] * spec.X[:, 1] + flat("b_spk")[d][spec.terms[0].codes, 0]
          + flat("b_att")[d][spec.terms[1].codes, 0])
    v = np.where(spec.X[:, 1] == 1, flat("sigma_1")[d], flat("sigma_0")[d]) ** 2
    rows = (spec.data["att"].to_numpy() == 3) & (spec.X[:, 1] == 1)
    got = mom[(mom["att"] == 3) & (mom["class"] == 1) & (mom["draw"] == d)].iloc[0]
    assert got["mean"] == pytest.approx(mu[rows].mean(), rel=1e-10)
    assert got["sd"] == pytest.approx(np.sqrt(v[rows].mean() + mu[rows].var()), rel=1e-10)
    assert got["n"] == rows.sum()
    eer = res.model_eer(groups="att", label="label", max_draws=5)
    e = eer[(eer["att"] == 3) & (eer["draw"] == d)]["eer"].iloc[0]
    m = mom[(mom["att"] == 3) & (mom["draw"] == d)].set_index("class")
    assert e == pytest.approx(ndtr(-(m.loc[1, "mean"] - m.loc[0, "mean"]) / (m.loc[0, "sd"] + m.loc[1, "sd"])))
    # marginal moments: class-0 variance adds the two random-effect variances to σ_0²
    mm = res.class_moments(label="label", random="marginal", max_draws=3)
    r0 = mm[mm["class"] == 0].iloc[0]
    dd = int(r0["draw"])
    expect = np.sqrt(flat("sigma_0")[dd] ** 2 + flat("sd_spk__(Intercept)")[dd] ** 2
                     + flat("sd_att__(Intercept)")[dd] ** 2)
    assert r0["sd"] == pytest.approx(expect, rel=1e-10)
    assert r0["mean"] == pytest.approx(flat("(Intercept)")[dd], rel=1e-10)


_R_FIT = r"""
suppressMessages({library(lme4); library(jsonlite)})
d <- read.csv("{csv}")
d$spk <- factor(d$spk); d$att <- factor(d$att)
m <- lmer(y ~ lab + (1|spk) + (1|att), data = d, REML = TRUE,
          control = lmerControl(optCtrl = list(ftol_abs = 1e-12, xtol_abs = 1e-10)))
vc <- as.data.frame(VarCorr(m))
cat(toJSON(list(fixef = as.list(fixef(m)), sd = as.list(setNames(vc$sdcor, vc$grp))), digits = 15, auto_unbox = TRUE))
"""


def test_posterior_means_agree_with_lme4_reml(rscript, tmp_path):
    """Homoscedastic variant of the truth data: posterior means within a fraction of the
    posterior SD of lme4's REML estimates (weakly informative priors, 2400 rows)."""
    spec, _ = _truth_spec(seed=5)
    spec.dispersion_codes = spec.dispersion_formula = spec.dispersion_levels = None
    res = _fit(spec, draws=500, tune=500, seed=3)
    csv = tmp_path / "d.csv"
    spec.data.to_csv(csv, index=False)
    script = tmp_path / "fit.R"
    script.write_text(_R_FIT.replace("{csv}", str(csv)))
    out = subprocess.run([rscript, str(script)], capture_output=True, text=True, timeout=300, check=True)
    ref = json.loads(out.stdout)
    for name in ("(Intercept)", "lab"):
        m, se = _mean_mcse(res, name)
        # the fixed-effect posterior mean is the GLS estimate averaged over θ: ≈ REML's
        assert abs(m - ref["fixef"][name]) < 0.25 * res.draws(name).std() + 4 * se, name
    m, se = _mean_mcse(res, "sigma")
    assert abs(m - ref["sd"]["Residual"]) < 0.25 * res.draws("sigma").std() + 4 * se
    # 40 speakers: the posterior of the speaker SD is near-symmetric around the REML value
    m, se = _mean_mcse(res, "sd_spk__(Intercept)")
    assert abs(m - ref["sd"]["spk"]) < 0.5 * res.draws("sd_spk__(Intercept)").std() + 4 * se


@pytest.mark.slow
def test_asvspoof2019_collapsed_vs_lmer(shared_data: Path):
    """Real data: collapsed fit of the crossed model; fixed effects near the native REML fit."""
    from scoremix.lme.api import lmer

    df = pd.read_csv(shared_data / "asvspoof2019_la_eval" / "asvspoof2019_la_eval.csv.gz")
    formula = 'score_logit ~ label + (1|speaker) + (0 + dummy(label, "spoof")|attack)'
    from scoremix.lme.model_frame import build_model_spec

    spec = build_model_spec(formula, df)
    res = _fit(spec, draws=200, tune=300, seed=1)
    freq = lmer(formula, df)
    cmp_ = res.compare(freq)
    assert res.diagnostics.n_divergent == 0
    for name in ("(Intercept)", "labelspoof"):
        row = cmp_.loc[name]
        # 14 attack levels: the label effect's posterior is wide; REML within 1 posterior SD
        assert abs(row["z"]) < 1.0, (name, row.to_dict())
    assert cmp_.loc["sigma", "estimate"] == pytest.approx(cmp_.loc["sigma", "mean"], rel=0.01)
