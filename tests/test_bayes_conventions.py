"""One argument convention for every Bayesian entry point (issue 25, s7bayes-api).

* every ``level=`` of a Bayesian public callable (the names of ``scoremix.__all__`` with
  "bayes"/"posterior" in them) and of the public methods of their result classes defaults to
  0.95, read from the signatures; ``seed``, ``level`` and ``progress`` are keyword-only;
  every fit and long call has ``seed=`` and ``progress=``;
* ``BayesLocScaleResult.summary(level=0.9)`` is computed from the stored draws: its HDI
  bounds equal ``arviz.hdi`` of the draws kept in ``result.draws`` (a different store than the
  ``InferenceData`` the summary reads) to 1e-12;
* ``BayesLmerResult`` tables default to the 95 % HDI (equal to ``arviz.hdi`` at 0.95), the
  deprecated ``hdi_prob=`` still works with a FutureWarning;
* ``posterior_subgroup_dcf(progress=True)`` gives the table of ``progress=False``.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pymc")
import arviz as az  # noqa: E402

import scoremix as sm  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: the fits and long calls that must take seed= and progress= (keyword-only)
LONG_CALLS = ("bayes_lmer", "bayes_glmer", "bayes_locscale", "bayes_decision_model", "posterior_subgroup_dcf")


def _bayes_public() -> dict[str, object]:
    return {n: getattr(sm, n) for n in sm.__all__ if "bayes" in n.lower() or "posterior" in n.lower()}


def _callables() -> list[tuple[str, object]]:
    """Every Bayesian public function and every public method of the Bayesian result
    classes (those in ``__all__`` and the ones the fits return)."""
    from scoremix.bayes.locscale_pool import TransformPool

    out = []
    classes = [o for o in _bayes_public().values() if inspect.isclass(o)] + [TransformPool]
    for name, obj in _bayes_public().items():
        if inspect.isfunction(obj):
            out.append((name, obj))
    for cls in classes:
        for m, f in inspect.getmembers(cls, inspect.isfunction):
            if not m.startswith("_"):
                out.append((f"{cls.__name__}.{m}", f))
    return out


def test_the_bayesian_public_names_are_found():
    names = set(_bayes_public())
    assert {"bayes_lmer", "bayes_glmer", "bayes_locscale", "bayes_score_model", "bayes_decision_model",
            "posterior_subgroup_dcf", "posterior_contrasts", "BayesLmerResult", "BayesGlmerResult",
            "BayesLocScaleResult"} <= names
    assert len(_callables()) > 40


def test_every_level_defaults_to_95_percent_and_is_keyword_only():
    seen = []
    for name, f in _callables():
        sig = inspect.signature(inspect.unwrap(f))
        for p in sig.parameters.values():
            if p.name == "level":
                seen.append(name)
                assert p.default == 0.95, f"{name}: level defaults to {p.default!r}"
                assert p.kind is inspect.Parameter.KEYWORD_ONLY, f"{name}: level= is not keyword-only"
            if p.name in ("seed", "progress"):
                assert p.kind is inspect.Parameter.KEYWORD_ONLY, f"{name}: {p.name}= is not keyword-only"
            assert p.name not in ("hdi_prob", "random_seed", "progressbar") or \
                {"hdi_prob": "level", "random_seed": "seed", "progressbar": "progress"}[p.name] in sig.parameters, \
                f"{name}: a deprecated spelling {p.name}= without its new name"
    for must in ("BayesLmerResult.summary", "BayesLmerResult.compare", "BayesLmerResult.model_eer",
                 "BayesGlmerResult.summary", "BayesGlmerResult.compare", "BayesGlmerResult.predict", "bayes_glmer",
                 "BayesLocScaleResult.summary", "BayesLocScaleResult.posterior_eer", "posterior_contrasts",
                 "posterior_subgroup_dcf", "bayes_decision_model"):
        assert must in seen, must
    # the default interval of a bayes_glmer fit's tables (a dataclass field)
    fld = {f.name: f for f in dataclasses.fields(sm.BayesGlmerResult)}
    assert fld["level"].default == 0.95


def test_fits_and_long_calls_take_seed_and_progress():
    pub = _bayes_public()
    for name in LONG_CALLS:
        params = inspect.signature(inspect.unwrap(pub[name])).parameters
        for arg in ("seed", "progress"):
            assert arg in params, f"{name} has no {arg}="
            assert params[arg].kind is inspect.Parameter.KEYWORD_ONLY, f"{name}: {arg}= is not keyword-only"


def test_posterior_subgroup_measures_options_are_keyword_only():
    params = inspect.signature(inspect.unwrap(sm.posterior_subgroup_measures)).parameters
    assert all(params[n].kind is inspect.Parameter.KEYWORD_ONLY for n in ("p_target", "c_miss", "c_fa", "level"))


@pytest.fixture(scope="module")
def locscale_result():
    from locscale_helpers import simulate_ls

    from scoremix.locscale import LocScaleSpec, fit_locscale

    df = simulate_ls(n_speakers=8, n_per_cell=10, strata_neg=2, seed=4)
    fit = fit_locscale(df, LocScaleSpec(strata=("attack",), positive="bonafide", transform=False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.bayes_locscale(fit, draws=60, tune=60, chains=2, cores=1, seed=5)


def test_locscale_summary_level_is_the_hdi_of_the_stored_draws(locscale_result):
    res = locscale_result
    d = res.draws
    for level, cols in ((0.9, ("hdi_5%", "hdi_95%")), (0.95, ("hdi_2.5%", "hdi_97.5%"))):
        tab = res.summary(level=level)
        assert list(tab.columns[2:4]) == list(cols)
        for k, lv in enumerate(res.cells.strata_levels):
            for name, draws in ((f"mu[{lv}]", d["mu"][:, k]), (f"sigma[{lv}]", np.exp(d["lam"][:, k]))):
                ref = np.asarray(az.hdi(np.ravel(draws), hdi_prob=level)).ravel()
                np.testing.assert_allclose(tab.loc[name, list(cols)].to_numpy(float), ref, rtol=0, atol=1e-12)
                assert tab.loc[name, "mean"] == pytest.approx(draws.mean(), abs=1e-12)
    pd.testing.assert_frame_equal(res.summary(), res.summary(level=0.95))
    pd.testing.assert_frame_equal(res.summary(), res.diagnostics)   # the fit-time table is the 95 % one
    with pytest.raises(ValueError, match="level must lie in"):
        res.summary(level=0.0)


@pytest.fixture(scope="module")
def lmer_result():
    rng = np.random.default_rng(5)
    n = 240
    spk = rng.integers(0, 12, n)
    y01 = rng.integers(0, 2, n)
    score = np.where(y01 == 1, 2.0, -1.0) + rng.normal(0, 0.7, 12)[spk] + rng.normal(size=n)
    df = pd.DataFrame({"score": score, "label": np.where(y01 == 1, "bonafide", "spoof"),
                       "speaker": np.char.add("s", spk.astype(str)),
                       "sex": np.where(spk % 2 == 0, "f", "m")})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.bayes_lmer("score ~ label + (1|speaker)", df, draws=60, tune=60, chains=2, cores=1, seed=2,
                             progress=False), df


def test_lmer_tables_default_to_the_95_percent_hdi(lmer_result):
    res, _ = lmer_result
    s = res.summary()
    assert {"hdi_2.5%", "hdi_97.5%"} <= set(s.columns)
    draws = res.draws("labelspoof")
    ref = np.asarray(az.hdi(np.ravel(draws), hdi_prob=0.95)).ravel()
    fe = res.fixef
    np.testing.assert_allclose(fe.loc["labelspoof", ["hdi_2.5%", "hdi_97.5%"]].to_numpy(float), ref, atol=1e-12)
    vc = res.varcorr
    assert {"sdcor_hdi_2.5%", "sdcor_hdi_97.5%"} <= set(vc.columns)
    sd = res.draws("sd_speaker__(Intercept)")
    np.testing.assert_allclose(vc.loc[vc["grp"] == "speaker", ["sdcor_hdi_2.5%", "sdcor_hdi_97.5%"]]
                               .to_numpy(float).ravel(), np.asarray(az.hdi(np.ravel(sd), hdi_prob=0.95)).ravel(),
                               atol=1e-12)
    eer = res.model_eer(summary=True, max_draws=20)
    assert {"hdi_2.5%", "hdi_97.5%"} <= set(eer.columns)
    with pytest.warns(FutureWarning, match="hdi_prob= is renamed level="):
        old = res.model_eer(summary=True, max_draws=20, hdi_prob=0.9)
    pd.testing.assert_frame_equal(old, res.model_eer(summary=True, max_draws=20, level=0.9))
    with pytest.raises(TypeError, match="level= only"):
        res.summary(level=0.9, hdi_prob=0.9)
    with pytest.raises(TypeError):
        res.model_eer(None, None, "label")     # options after data are keyword-only


def test_posterior_subgroup_dcf_progress_bar_changes_nothing(lmer_result, capsys):
    res, df = lmer_result
    kw = dict(by=["sex"], positive="bonafide", max_draws=30, n_boot=0, min_speakers=1)
    a = sm.posterior_subgroup_dcf(res, df, progress=False, **kw)
    b = sm.posterior_subgroup_dcf(res, df, progress=True, **kw)
    pd.testing.assert_frame_equal(a.table, b.table)
    err = capsys.readouterr().err
    assert "posterior subgroup DCF" in err
