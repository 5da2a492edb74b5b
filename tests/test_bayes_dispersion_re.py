"""Dispersion random effects in ``bayes_lmer`` (issue 25): fitted by the Bayesian
location-scale model when the formulas are exactly that model, refused by name otherwise.

* every refused structure raises :class:`DispersionRandomEffectsError` (a ``FormulaError``)
  naming the term and ``bayes_locscale`` / ``bayes_score_model``, before any sampling;
* the formulas map to the ``LocScaleSpec`` they mean (per-class speaker log-SD effects);
* routed fits are exactly ``bayes_locscale`` on that specification (same seed → same draws);
* a fit recovers a simulated truth (slow): every scalar parameter's 99 % interval covers it.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pymc")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import scoremix as sm  # noqa: E402
from scoremix.bayes.dispersion_re import DispersionRandomEffectsError, locscale_spec_from_formulas  # noqa: E402
from scoremix.lme.errors import FormulaError  # noqa: E402

LOC = "score ~ label + diag(0 + label | speaker)"
KW = dict(draws=20, tune=20, chains=1, cores=1, progress=False)


@pytest.fixture(scope="module")
def trials():
    from bayes_locscale_agreement import simulate

    return simulate(6, 8, 1, seed=0, rho_pos=0.0)


@pytest.mark.parametrize("loc, disp, match", [
    (LOC, "~ label + (0 + label | speaker)", r"correlation between the classes"),
    (LOC, "~ label + (0 + label || speaker)", r"correlation between the classes"),
    (LOC, "~ label + (1 | speaker)", r"shared by both classes"),
    (LOC, "~ 1 + (0 + dummy(label, 'spoof') | speaker)", r"fixed part of the dispersion formula"),
    (LOC, "~ label + (0 + dummy(label, 'spoof') | attack)", r"group by 'speaker' but dispersion effects by 'attack'"),
    (LOC, "~ label + (1 | speaker/attack)", r"nested grouping factor"),
    (LOC, "~ label + (0 + dummy(label, 'nope') | speaker)", r"'nope' is not a level of 'label'"),
    ("score ~ label + (1 | speaker)", "~ label + diag(0 + label | speaker)", r"shared by both classes"),
    ("score ~ label + (0 + dummy(label, 'spoof') | speaker)", "~ label + diag(0 + label | speaker)",
     r"every class of 'label' its own speaker location"),
    ("score ~ label + attack + diag(0 + label | speaker)", "~ label + diag(0 + label | speaker)",
     r"fixed part of .* must be the class column alone"),
])
def test_refused_structures_name_the_term_and_the_alternative(trials, loc, disp, match):
    with pytest.raises(DispersionRandomEffectsError, match=match) as ei:
        sm.bayes_lmer(loc, trials, dispersion=disp, **KW)
    assert "bayes_locscale" in str(ei.value) and "bayes_score_model" in str(ei.value)
    assert isinstance(ei.value, FormulaError)


@pytest.mark.parametrize("option", [dict(transform="monotone"), dict(priors={"sigma": sm.bayes.Prior.half_normal(1)}),
                                    dict(method="joint"), dict(posterior_predictive=True),
                                    dict(weights=np.ones(96))])
def test_options_that_do_not_apply_are_refused_by_name(trials, option):
    name = next(iter(option))
    with pytest.raises(DispersionRandomEffectsError, match=f"{name}="):
        sm.bayes_lmer(LOC, trials, dispersion="~ label + diag(0 + label | speaker)", **KW, **option)


def test_formulas_map_to_the_location_scale_specification(trials):
    s = locscale_spec_from_formulas(LOC, "~ label + diag(0 + label | speaker)", trials)
    assert (s.score, s.label, s.speaker, s.transform, s.speaker_location) == ("score", "label", "speaker", False, True)
    assert s.speaker_scale == ("negative", "positive") and s.correlated == () and s.positive is None
    s1 = locscale_spec_from_formulas("score ~ 0 + label + (0 + dummy(label, 'bonafide') | speaker) + "
                                     "(0 + dummy(label, 'spoof') | speaker)",
                                     "~ label + (0 + dummy(label, 'bonafide') | speaker)", trials)
    assert s1.speaker_scale == ("positive",)
    # labels outside the known vocabularies: the non-reference level (R's order) is "positive"
    other = trials.assign(label=trials["label"].map({"bonafide": "zz", "spoof": "aa"}))
    s2 = locscale_spec_from_formulas(LOC, "~ label + (0 + dummy(label, 'aa') | speaker)", other)
    assert s2.positive == "zz" and s2.speaker_scale == ("negative",)


def test_routed_fit_is_bayes_locscale_on_that_specification(trials):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = sm.bayes_lmer(LOC, trials, dispersion="~ label + diag(0 + label | speaker)", seed=4, **KW)
        spec = locscale_spec_from_formulas(LOC, "~ label + diag(0 + label | speaker)", trials)
        b = sm.bayes_locscale(spec, trials, seed=4, draws=20, tune=20, chains=1, cores=1)
    assert isinstance(a, sm.BayesLocScaleResult)
    pd.testing.assert_frame_equal(a.summary(), b.summary())
    np.testing.assert_array_equal(a.draws["g"], b.draws["g"])


@pytest.mark.slow
def test_recovers_a_simulated_truth():
    """40 speakers × 25 trials per class from the model (μ, σ per class; speaker location SD
    τ_b and log-SD SD τ_g per class, uncorrelated): every parameter inside its 99 % interval."""
    from bayes_locscale_agreement import simulate

    df = simulate(40, 25, 1, seed=11, rho_pos=0.0)
    truth = {"mu[+]": 2.0, "mu[-]": -1.0, "sigma[+]": 0.8, "sigma[-]": 0.7, "tau_b[positive]": 0.6,
             "tau_b[negative]": 0.5, "tau_g[positive]": 0.35, "tau_g[negative]": 0.3}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.bayes_lmer("score ~ label + (0 + dummy(label, 'bonafide') | speaker) + "
                            "(0 + dummy(label, 'spoof') | speaker)", df,
                            dispersion="~ label + diag(0 + label | speaker)", draws=400, tune=400, chains=2,
                            cores=1, seed=3, progress=False)
    post = fit.idata.posterior
    for name, t in truth.items():
        d = np.asarray(post[name].values).ravel()
        lo, hi = np.quantile(d, [0.005, 0.995])
        assert lo <= t <= hi, (name, t, lo, hi)
    assert float(fit.max_rhat) < 1.02


def test_a_study_model_with_dispersion_random_effects_is_refused_before_any_work():
    from scoremix.study.config import StudyConfigError, parse_study
    from scoremix.study.validate import check_formulas

    raw = {"study": {"name": "s"}, "data": {"simulate": {"kind": "cm", "n_trials": 100}},
           "models": [{"name": "m", "backend": "bayes", "formula": "score ~ label + (1 | speaker)",
                       "dispersion": "~ label + diag(0 + label | speaker)"}]}
    cfg = parse_study(raw)
    with pytest.raises(StudyConfigError, match=r"models\[0\]\.dispersion.*auto = true"):
        check_formulas(cfg)
