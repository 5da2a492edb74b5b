"""Model checks of transformation fits on the latent scale (scoremix.transform.check), on
data simulated from a transformation model with known truth."""

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import scoremix as sm


def _sim(seed, sd_pos=1.0, beff=0.0, n_spk=20, n_per=20):
    """Latent z = 1.5·pos + b_speaker + ε (+ beff·[f = 1]), ε ~ N(0, 1) or N(0, sd_pos²)
    for positives; observed score sinh(z) (monotone, far from Gaussian)."""
    rng = np.random.default_rng(seed)
    spk = np.repeat(np.arange(n_spk), n_per)
    lab = rng.integers(0, 2, spk.size)
    f = rng.integers(0, 3, spk.size)
    eps = rng.normal(size=spk.size) * np.where(lab == 1, sd_pos, 1.0)
    z = 1.5 * lab + rng.normal(0, 0.6, n_spk)[spk] + eps + beff * (f == 1)
    return pd.DataFrame(dict(score=np.sinh(z), label=np.where(lab == 1, "pos", "neg"),
                             speaker=[f"s{i}" for i in spk], f=f.astype(str)))


def _fit(formula, d, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.lmer(formula, d, transform="monotone", **kw)


def _p(chk, prefix):
    t = chk.tests
    return float(t.loc[t["test"].str.startswith(prefix), "p.value"].iloc[0])


F = "score ~ label + (1 | speaker)"


def test_correct_model_passes_and_check_model_dispatches():
    d = _sim(1)
    m = _fit(F, d)
    chk = m.check(nsim=200, by=["label"])
    assert (chk.tests["p.value"] > 0.05).all(), chk.tests
    assert chk.convergence["ok"] and chk.advice == []
    assert chk.singularity["term"].tolist() == ["speaker"]
    chk2 = sm.check_model(m, nsim=200, by=["label"])     # no UnsupportedModelError any more
    np.testing.assert_array_equal(chk2.residuals.residuals, chk.residuals.residuals)
    import matplotlib
    matplotlib.use("Agg")
    assert len(chk.plot().axes) == 6


def test_latent_residuals_invariant_to_monotone_maps_of_the_scores():
    """The fit and the cells depend on the scores only through their order, so the latent
    residuals of exp(s) and of 10·s + 3 equal those of s."""
    d = _sim(3)
    r0 = _fit(F, d).check(nsim=100, seed=5).residuals.residuals
    for g in (np.exp, lambda s: 10 * s + 3):
        r1 = _fit(F, d.assign(score=g(d["score"]))).check(nsim=100, seed=5).residuals.residuals
        np.testing.assert_allclose(r1.to_numpy(), r0.to_numpy(), atol=1e-6)


def test_misspecified_variance_detected_and_cured():
    d = _sim(2, sd_pos=2.0)
    chk = _fit(F, d).check(by=["label"])
    assert _p(chk, "spread by label") < 1e-5
    assert any("dispersion='~ label'" in a for a in chk.advice)
    chk2 = _fit(F, d, dispersion="~ label").check(by=["label"])
    assert _p(chk2, "spread by label") > 0.05


def test_missing_term_detected():
    d = _sim(4, beff=1.0)
    chk = _fit(F, d).check(by={"f": d["f"]})
    assert _p(chk, "location by f") < 1e-6
    assert any("latent residuals shift with f" in a for a in chk.advice)
    assert _p(_fit("score ~ label + f + (1 | speaker)", d).check(by=["f"]), "location by f") > 0.01


@pytest.mark.slow
def test_latent_residuals_uniform_on_data_from_a_transformation_model():
    """60 data sets from the transformation model, each fitted and checked: the latent
    residuals pooled over the data sets are uniform, and the per-fit KS test keeps its
    level (it is conservative: the transform is estimated, module docstring)."""
    pu, r = [], []
    for s in range(60):
        chk = _fit(F, _sim(100 + s)).check(nsim=100, seed=s)
        pu.append(_p(chk, "uniformity"))
        r.append(chk.residuals.residuals.to_numpy())
    assert stats.kstest(np.concatenate(r), "uniform").pvalue > 0.01
    pu = np.array(pu)
    assert np.mean(pu < 0.05) <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / pu.size)
    assert np.mean(pu < 0.2) <= 0.2 + 2 * np.sqrt(0.2 * 0.8 / pu.size)


def test_study_panel_for_a_transformation_fit_equals_direct_call(tmp_path):
    """A transformation model in a study gets its latent-scale checks panel (no error)."""
    from scoremix.study import parse_study, run_study
    from scoremix.study.data import load_study_data
    from scoremix.study.postfit import _checks_table

    path = tmp_path / "d.csv"
    _sim(7).assign(label=lambda d: np.where(d["label"] == "pos", "bonafide", "spoof")).to_csv(path, index=False)
    raw = {"study": {"name": "tchk", "seed": 1},
           "data": {"file": str(path), "score": "score", "label": "label", "positive": "bonafide",
                    "speaker": "speaker"},
           "models": [{"name": "t", "formula": "score ~ label + (1 | speaker)", "transform": "monotone"}],
           "analyses": {"checks": {"nsim": 50, "seed": 2}}}
    cfg = parse_study(raw)
    res = run_study(cfg, out_dir=tmp_path / "o", progress=False)
    ck = pd.read_csv(tmp_path / "o" / "model_checks.csv")
    df = load_study_data(cfg.data, seed=cfg.study.seed).table
    want = _checks_table(_fit("score ~ label + (1 | speaker)", df).check(nsim=50, seed=2))
    assert list(ck["check"]) == list(want["check"]) and "uniformity (KS)" in set(ck["check"])
    np.testing.assert_allclose(ck["statistic"], want["statistic"], rtol=1e-9)
    np.testing.assert_allclose(ck["p.value"], want["p.value"], rtol=1e-9, equal_nan=True)
    assert "Model checks" in res.section_titles
    assert "not computed" not in (tmp_path / "o" / "report.html").read_text(encoding="utf-8")
