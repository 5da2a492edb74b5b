"""The native optimiser's conditioning and stopping rules (issue 12: no model slower than lme4).

Independent truths:

* ``theta_scale``: the mean squares of the random-effect columns, computed here from the
  data with numpy;
* invariance: an ML fit is the same model after a covariate is divided by 100 (criterion
  equal, the slope rows of ``T`` multiplied by 100), and with θ optimised in scaled units
  both fits need about as many evaluations;
* lme4/lmerTest's tight fits of the battery (``tests/data/battery/refs``): criterion within
  1e-10 relative, θ within 1e-6 relative after the Newton polish, exact zeros at singular
  optima, and ``ranova``'s likelihood-ratio statistic for a reduced model that sits next to
  a saddle at a variance of 0 (a small decrease there is slow progress, not convergence);
* the stop rule on synthetic criterion sequences with known gaps.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import OptimizeResult

from battery_helpers import MODEL_BY_ID, fit_kwargs, load_dataset, load_ref, ref_table
from scoremix.lme import optimizer
from scoremix.lme.api import lmer
from scoremix.lme.crossprod import crossproducts
from scoremix.lme.model_frame import build_model_spec


def _fit(model_id: str, formula: str | None = None, **kw):
    m = MODEL_BY_ID[model_id]
    args = fit_kwargs(m)
    args.update(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return lmer(formula or m["formula"], load_dataset(m["dataset"]), **args)


def test_theta_scale_is_the_inverse_rms_of_each_random_effect_column():
    d = load_dataset("BodyWeight")
    spec = build_model_spec("weight ~ Time * Diet + (Time | Rat)", d)
    s = optimizer.theta_scale(crossproducts(spec))
    t = d["Time"].to_numpy(float)
    s_time = 1.0 / np.sqrt(np.mean(t ** 2))
    # θ = (T_11, T_21, T_22): rows 1, 2, 2 of T
    np.testing.assert_allclose(s, [1.0, s_time, s_time], rtol=1e-13)
    # prior weights enter as Σ w z² / n
    w = np.linspace(0.5, 2.0, len(d))
    spec_w = build_model_spec("weight ~ Time * Diet + (Time | Rat)", d, weights=w)
    s_w = optimizer.theta_scale(crossproducts(spec_w))
    np.testing.assert_allclose(s_w, [1 / np.sqrt(w.mean()), 1 / np.sqrt(np.mean(w * t ** 2)),
                                     1 / np.sqrt(np.mean(w * t ** 2))], rtol=1e-13)


def test_rescaled_covariate_gives_the_same_ml_fit_with_as_few_evaluations():
    a = _fit("bodyweight", REML=False)
    b = _fit("bodyweight", "weight ~ I(Time / 100) * Diet + (I(Time / 100) | Rat)", REML=False)
    assert -2 * b.loglik == pytest.approx(-2 * a.loglik, rel=1e-11)
    ta, tb = a.theta.to_numpy(), b.theta.to_numpy()
    np.testing.assert_allclose(tb, ta * np.array([1.0, 100.0, 100.0]), rtol=1e-5)
    # the optimiser works on θ / s, which is the same problem for both parametrisations
    assert abs(a.fit_info["n_eval"] - b.fit_info["n_eval"]) <= 6
    assert max(a.fit_info["n_eval"], b.fit_info["n_eval"]) <= 40


@pytest.mark.parametrize("model_id, theta_rtol", [
    ("bodyweight", 1e-6), ("pixel", 1e-6), ("orthodont_slope_ml", 1e-6),
    # a flat 6-parameter criterion: scoremix ends 4e-11 (relative) *below* lme4's tight
    # optimum, whose θ is itself only that accurate
    ("oxboys_quad", 1e-4)])
def test_optimum_and_theta_match_tight_lme4(model_id, theta_rtol):
    ref = load_ref(model_id)
    m = _fit(model_id)
    crit = -2 * m.loglik
    assert crit <= ref["criterion"] + 1e-10 * abs(ref["criterion"])
    assert crit == pytest.approx(ref["criterion"], rel=1e-10)
    # the Newton polish makes θ accurate to far better than the square root of the gap
    # (without it bodyweight's θ is 1.4e-5 off)
    np.testing.assert_allclose(m.theta.to_numpy(), ref["theta"], rtol=theta_rtol, atol=0)
    assert m.converged


def test_bodyweight_needs_few_evaluations():
    """The model the brief names: 96 evaluations and an abnormal stop before the θ scaling
    and the stop rule."""
    m = _fit("bodyweight")
    assert m.fit_info["n_eval"] <= 40
    assert "ABNORMAL" not in m.fit_info["optimizer_message"]


@pytest.mark.parametrize("model_id", ["igf", "pbg_log", "orange_scale"])
def test_singular_optimum_has_lme4s_exact_zero(model_id):
    ref = load_ref(model_id)
    assert ref["singular"]
    m = _fit(model_id)
    assert m.singular
    th, want = m.theta.to_numpy(), np.asarray(ref["theta"], float)
    assert np.array_equal(th == 0.0, want == 0.0)
    assert -2 * m.loglik <= ref["criterion"] + 1e-10 * abs(ref["criterion"])


def test_slow_progress_next_to_a_zero_variance_is_not_convergence():
    """tvbo without ``(1 | Assessor)``: L-BFGS-B creeps away from the saddle at
    ``θ_1 = 0`` with tiny decreases; lmerTest's ranova LRT fixes its optimum."""
    full = _fit("tvbo")
    red = _fit("tvbo", "Coloursaturation ~ TVset * Picture + (1 | Assessor:TVset) "
                       "+ (1 | Assessor:Picture)")
    want = ref_table(load_ref("tvbo")["ranova"]).loc["(1 | Assessor)", "LRT"]
    assert (-2 * red.loglik) - (-2 * full.loglik) == pytest.approx(want, rel=1e-6)


def _feed(stop, values, grad=0.0):
    """Feed a sequence of iterates to the stop rule; the index at which it stops (or None)."""
    for k, f in enumerate(values):
        y = np.array([float(k)])
        stop.last = (y, grad)
        try:
            stop(OptimizeResult(fun=f, x=y))
        except StopIteration:
            return k
    return None


def test_stop_rule_on_synthetic_sequences():
    f_opt = 1000.0
    # superlinear: gaps 1e-2, 1e-4, 1e-8, 1e-16 (relative to f: 1e-5 … 1e-19)
    gaps = [1.0, 1e-2, 1e-4, 1e-8, 1e-16, 0.0]
    k = _feed(optimizer.SuperlinearStop(1e-12), [f_opt + g for g in gaps])
    assert k is not None
    assert gaps[k] <= 1e-12 * f_opt
    # linear at rate 0.9: never stops on the gap estimate (r > 1/2)
    lin = [f_opt + 0.9 ** i for i in range(200)]
    assert _feed(optimizer.SuperlinearStop(1e-12), lin) is None
    # the same superlinear sequence with a sizeable projected gradient: no stop
    assert _feed(optimizer.SuperlinearStop(1e-12), [f_opt + g for g in gaps], grad=1e-2) is None


def _tiny_covariate_data(seed: int) -> pd.DataFrame:
    """Random intercepts and slopes on a covariate of magnitude 1e-3 (slope SD 500 in its
    units): lme4's start θ = 1 for the slope is then a variance of ~0."""
    rng = np.random.default_rng(seed)
    G = 20 + seed
    n = G * 8
    g = np.repeat(np.arange(G), 8)
    a = rng.integers(0, 6, n)
    x1 = rng.normal(size=n) * 1e-3
    x2 = rng.uniform(0, 10, n) * 1e-3
    b0 = rng.normal(size=G) * 2
    b1 = rng.normal(size=G) * (0.0 if seed % 3 == 0 else 0.5) / 1e-3
    y = 1 + 300 * x1 + b0[g] + b1[g] * x1 + rng.normal(size=n) + rng.normal(size=6)[a]
    return pd.DataFrame(dict(y=y, x1=x1, x2=x2, g=g.astype(str)))


@pytest.mark.parametrize("seed, formula, scaled", [
    (10, "y ~ x1 + (x1 | g)", "y ~ I(x1 * 1000) + (I(x1 * 1000) | g)"),
    (0, "y ~ x1 + (x1 | g)", "y ~ I(x1 * 1000) + (I(x1 * 1000) | g)"),
    (6, "y ~ x1 + x2 + (x1 + x2 | g)",
     "y ~ I(x1 * 1000) + I(x2 * 1000) + (I(x1 * 1000) + I(x2 * 1000) | g)")])
def test_tiny_covariate_fit_equals_the_rescaled_fit(seed, formula, scaled):
    """A covariate of magnitude 1e-3: the ML fit must equal the fit of the covariate × 1000
    (the same model; criterion invariant, θ of the slope rows × 1e-3).  Before the saddle
    probes worked in scaled units, seeds 10 and 0 stopped at a saddle next to a slope
    variance of 0, 1e-3 and 4e-4 (relative) above the optimum."""
    d = _tiny_covariate_data(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = lmer(formula, d, REML=False)
        b = lmer(scaled, d, REML=False)
    assert -2 * a.loglik == pytest.approx(-2 * b.loglik, rel=1e-10)
    assert a.singular == b.singular
    assert a.converged == b.converged


def test_loose_stop_needs_consecutive_halvings():
    """The large-rest-block stop (``runs = 2``) ignores one small decrease after a large one
    (InstEval ``(1 | s) + (1 | d) + (1 | dept)``: 4e-7 relative after 2e-5, 15 criterion
    units from the optimum) but stops on a superlinear sequence (InstEval slopes: decreases
    1.9, 0.15 after 13)."""
    rtol, dec = optimizer.LARGE_STOP_RTOL, optimizer.LARGE_STOP_DEC_RTOL
    stalled = [237803.617090, 237762.680228, 237756.817940, 237755.332957, 237753.694940,
               237749.375547, 237749.280590]
    assert _feed(optimizer.SuperlinearStop(rtol, dec), stalled) == len(stalled) - 1
    assert _feed(optimizer.SuperlinearStop(rtol, dec, runs=optimizer.LARGE_STOP_RUNS),
                 stalled) is None
    slopes = [237443.947649, 237357.604559, 237344.384546, 237342.458568, 237342.304514]
    assert _feed(optimizer.SuperlinearStop(rtol, dec, runs=optimizer.LARGE_STOP_RUNS),
                 slopes) == len(slopes) - 1
