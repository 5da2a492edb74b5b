"""Posterior checks of a Bayesian fit (scoremix.bayes.model_check) and their place in a
study's "Model checks" panel: every fitted model of a report has a checks panel."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import scoremix as sm
from scoremix.bayes.model_check import PPC_STATISTICS, bayes_check


def _data(seed=0, lognormal=False):
    rng = np.random.default_rng(seed)
    spk = np.repeat(np.arange(20), 15)
    lab = rng.integers(0, 2, spk.size)
    z = 1.5 * lab + rng.normal(0, 0.5, 20)[spk] + rng.normal(size=spk.size)
    return pd.DataFrame(dict(score=np.exp(z) if lognormal else z,
                             label=np.where(lab == 1, "bonafide", "spoof"), spk=[f"s{i}" for i in spk]))


def _bayes(d, seed=1):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.bayes_lmer("score ~ label + (1 | spk)", d, draws=150, tune=150, chains=2, seed=seed,
                             progress=False, cores=1)


@pytest.fixture(scope="module")
def fits():
    return _bayes(_data()), _bayes(_data(lognormal=True))


def test_ppc_p_values_and_diagnostics(fits):
    good, bad = fits
    c = bayes_check(good, n_draws=60, seed=0)
    # the diagnostics rows are the fit's own numbers
    dg = good.diagnostics
    d = c.diagnostics.set_index("check")["value"]
    assert d["R-hat (max)"] == dg.max_rhat and d["bulk ESS (min)"] == dg.min_ess_bulk
    assert d["tail ESS (min)"] == dg.min_ess_tail and d["divergent transitions"] == dg.n_divergent
    # observed statistics are those of the scores; p-values are frequencies over 120 replicates
    y = _data()["score"].to_numpy()
    p = c.ppc.set_index("statistic")
    assert list(p.index) == list(PPC_STATISTICS)
    np.testing.assert_allclose(p.loc["mean", "observed"], y.mean(), rtol=1e-12)
    np.testing.assert_allclose(p.loc["sd", "observed"], y.std(ddof=1), rtol=1e-12)
    assert np.allclose(p["ppp"] * 120, np.round(p["ppp"] * 120))
    # a Gaussian model of Gaussian scores: mean and SD are reproduced (ppp near 1/2)
    assert 0.2 < p.loc["mean", "ppp"] < 0.8 and 0.2 < p.loc["sd", "ppp"] < 0.8
    assert p.loc["mean", "ok"] and p.loc["sd", "ok"]
    # the table (model_checks.csv layout) holds both
    t = c.table
    assert list(t.columns) == ["check", "statistic", "p.value", "ok"] and len(t) == 5 + len(PPC_STATISTICS)
    # log-normal scores fitted with a Gaussian model: skewness and upper tail are misfitted
    pb = bayes_check(bad, n_draws=60, seed=0).ppc.set_index("statistic")
    assert pb.loc["skewness", "ppp"] < 0.01 and pb.loc["max", "ppp"] < 0.01
    assert not pb.loc["skewness", "ok"]
    import matplotlib
    matplotlib.use("Agg")
    assert len(c.plot().axes) == 2


@pytest.mark.slow
def test_study_panel_for_a_bayesian_fit_equals_direct_call(tmp_path):
    from scoremix.study import parse_study, run_study
    from scoremix.study.data import load_study_data
    from scoremix.study.parallel import task_seed

    path = tmp_path / "d.csv"
    _data(3).to_csv(path, index=False)
    raw = {"study": {"name": "bchk", "seed": 1},
           "data": {"file": str(path), "score": "score", "label": "label", "positive": "bonafide",
                    "speaker": "spk"},
           "models": [{"name": "b", "formula": "score ~ label + (1 | spk)", "backend": "bayes",
                       "draws": 100, "tune": 100, "chains": 2, "compare_with": "none"}],
           "analyses": {"checks": {"nsim": 40, "seed": 4}}}
    cfg = parse_study(raw)
    res = run_study(cfg, out_dir=tmp_path / "o", progress=False)
    ck = pd.read_csv(tmp_path / "o" / "model_checks.csv")
    # the same fit called directly (the study's data table and task seed)
    df = load_study_data(cfg.data, seed=cfg.study.seed).table
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.bayes_lmer("score ~ label + (1 | spk)", df, draws=100, tune=100, chains=2,
                            seed=task_seed(1, "model/b/all"), progress=False, cores=1)
    np.testing.assert_array_equal(fit.idata.posterior["sigma"].values,
                                  res.models[0]["idata"].posterior["sigma"].values)
    want = bayes_check(fit, n_draws=40, seed=4).table
    assert list(ck["model"]) == ["b"] * len(want)
    assert list(ck["check"]) == list(want["check"])
    np.testing.assert_allclose(ck["statistic"], want["statistic"], rtol=1e-12)
    np.testing.assert_allclose(ck["p.value"], want["p.value"], rtol=1e-12, equal_nan=True)
    assert list(ck["ok"]) == list(want["ok"])
    html = (tmp_path / "o" / "report.html").read_text(encoding="utf-8")
    assert "Model checks" in res.section_titles and "posterior predictive skewness" in html
    assert "b / all: check panel" in html
