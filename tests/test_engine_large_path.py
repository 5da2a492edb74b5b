"""The native engine's route for large rest blocks (issue 20, engine speed).

For a rest block of at least ``optimizer.LARGE_REST`` rows (e.g. InstEval's
``(1 | s) + (service | d)``: 2,259) the engine starts L-BFGS-B on the ray ``c·θ₀`` of lme4's
start (:func:`~scoremix.lme.optimizer.ray_start`), stops it at a loose gap and lets Newton
steps with the convergence check's Hessian, BFGS-corrected, finish (resuming L-BFGS-B when
they are not taken or do not converge);
the conditional variances of a large, sparse model come from ``S^{-1}`` by per-level
quadratic forms.  Independent truths:

* lme4's tight optima stored under ``tests/data/engine/`` (``r_scripts/engine_references.R``):
  with the large-block route forced on small models (threshold patched to 1) the criterion
  must not exceed lme4's by more than 1e-10 relative and must agree with it to 1e-8, also
  when the Newton step is refused;
* ``ray_start`` on a criterion that is an exact parabola in ``log c``: its vertex;
* the Newton iteration on a smooth convex function with a known minimiser;
* the conditional variances of the sparse route against the dense triangular-solve route
  (itself checked against lme4's ``condVar`` in ``test_native.py``).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scoremix.lme import conditional, engine, optimizer
from scoremix.lme.api import lmer
from scoremix.lme.crossprod import crossproducts
from scoremix.lme.errors import ConvergenceWarning
from scoremix.lme.model_frame import build_model_spec

ENGINE = Path(__file__).resolve().parent / "data" / "engine"


def _ref(name: str) -> dict:
    return json.loads((ENGINE / f"{name}.json").read_text())


def _data(ref: dict) -> pd.DataFrame:
    d = pd.read_csv(ENGINE / f"{ref['data']}.csv")
    factors = ref["factors"] if isinstance(ref["factors"], list) else [ref["factors"]]
    for c in factors:
        d[c] = d[c].astype(str)
    return d


@pytest.fixture
def large_route(monkeypatch):
    """Every model takes the large-rest-block route."""
    monkeypatch.setattr(optimizer, "LARGE_REST", 1)
    monkeypatch.setattr(engine, "LARGE_REST", 1)


@pytest.mark.parametrize("name", ["orthodont_reml", "orthodont_ml", "oxboys_reml", "machines_reml"])
@pytest.mark.parametrize("refuse_newton", [False, True])
def test_large_route_reaches_tight_lme4_optimum(name, refuse_newton, large_route, monkeypatch):
    if refuse_newton:   # the loose L-BFGS-B stop must then be resumed with the strict one
        monkeypatch.setattr(optimizer, "newton_polish", lambda *a, **k: None)
    ref = _ref(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        m = lmer(ref["formula"], _data(ref), REML=ref["REML"])
    crit, crit_ref = -2 * m.loglik, ref["criterion"]
    assert crit <= crit_ref + 1e-10 * abs(crit_ref)
    assert crit == pytest.approx(crit_ref, rel=1e-8)
    np.testing.assert_allclose(m.theta.to_numpy(), ref["theta"], rtol=2e-3, atol=2e-4)
    for k, v in ref["fixef"].items():
        assert m.fixef[k] == pytest.approx(v, rel=1e-4, abs=1e-4 * m.se[k])
    if refuse_newton:   # the last run used the strict stop, not the loose one
        assert f"rtol {optimizer.LARGE_STOP_RTOL:g}" not in m.fit_info["optimizer_message"]


@pytest.mark.parametrize("name", ["orthodont_reml", "oxboys_reml", "machines_reml"])
def test_large_route_equals_the_strict_quasi_newton_path(name, large_route):
    """The loose stop with the Newton iteration reaches the optimum of the strict L-BFGS-B
    path (``newton_polish=False``: no loose stop, no Newton steps): criterion to 1e-10
    relative (not above it by more), θ to 1e-4."""
    ref = _ref(name)
    data = _data(ref)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        new = lmer(ref["formula"], data, REML=ref["REML"])
        old = lmer(ref["formula"], data, REML=ref["REML"], control=dict(newton_polish=False))
    cn, co = -2 * new.loglik, -2 * old.loglik
    assert cn <= co + 1e-10 * abs(co)
    assert cn == pytest.approx(co, rel=1e-10)
    np.testing.assert_allclose(new.theta.to_numpy(), old.theta.to_numpy(), rtol=0, atol=1e-4)


def test_ray_start_finds_the_vertex_of_a_parabola_in_log_c():
    x0 = np.array([2.0, -1.0, 0.5])
    calls = []

    def f(x):
        c = x[0] / 2.0
        calls.append(c)
        return (np.log(c) - np.log(0.2)) ** 2 + 7.0

    x, n = optimizer.ray_start(f, x0)
    np.testing.assert_allclose(x, 0.2 * x0, rtol=1e-12)
    # c = 1, 0.3, 0.1 (higher than 0.3: stop), then the vertex
    assert n == 4 and calls[:3] == pytest.approx([1.0, 0.3, 0.1])
    # the vertex returned without evaluating it (the optimiser's first evaluation)
    calls.clear()
    x, n = optimizer.ray_start(f, x0, evaluate_vertex=False)
    np.testing.assert_allclose(x, 0.2 * x0, rtol=1e-12)
    assert n == 3 and calls == pytest.approx([1.0, 0.3, 0.1])


def test_ray_start_keeps_the_start_when_smaller_factors_are_worse():
    x0 = np.array([1.0, 1.0])
    x, n = optimizer.ray_start(lambda x: (x[0] - 1.5) ** 2, x0)
    np.testing.assert_array_equal(x, x0)
    assert n == 2


def _smooth_convex():
    """``f(x) = Σ_i exp(a_i x_i) + ½ x'Bx − c'x`` (convex, not quadratic) with its exact
    gradient and its minimiser by a tight Newton iteration on the exact Hessian."""
    a = np.array([0.7, -0.4, 0.9, 0.3])
    B = np.array([[4.0, 1.0, 0.5, 0.0], [1.0, 3.0, 0.2, 0.4], [0.5, 0.2, 2.0, 0.3],
                  [0.0, 0.4, 0.3, 1.5]])
    c = np.array([1.0, -2.0, 0.5, 3.0])

    def fg(x):
        e = np.exp(a * x)
        return float(e.sum() + 0.5 * x @ B @ x - c @ x), a * e + B @ x - c

    x = np.zeros(4)
    for _ in range(50):
        g = fg(x)[1]
        x = x - np.linalg.solve(B + np.diag(a * a * np.exp(a * x)), g)
    return fg, x


def test_newton_iteration_converges_superlinearly_from_a_distant_hessian():
    """The large route's Newton iteration (BFGS-corrected finite-difference Hessian of the
    loose-stop point) reaches the exact minimiser; one plain step does not."""
    fg, xstar = _smooth_convex()
    x0 = xstar + np.array([0.05, -0.04, 0.03, 0.06])
    idx = np.arange(4)
    g0, H0 = optimizer.gradient_hessian(fg, x0, idx, 1e-4, central=False)
    lb, ub = np.full(4, -np.inf), np.full(4, np.inf)
    f0 = fg(x0)[0]
    one = optimizer.newton_polish(fg, x0, f0, lb, ub, idx, g0, H0)
    many = optimizer.newton_polish(fg, x0, f0, lb, ub, idx, g0, H0, max_steps=5,
                                   dec_rtol=1e-20)
    assert np.max(np.abs(one[0] - xstar)) > 1e-5
    np.testing.assert_allclose(many[0], xstar, atol=1e-9)
    assert many[1] == pytest.approx(fg(xstar)[0], rel=1e-15, abs=1e-14)
    # without convergence within max_steps: None (the caller resumes L-BFGS-B)
    assert optimizer.newton_polish(fg, x0, f0, lb, ub, idx, g0, H0, max_steps=2,
                                   dec_rtol=1e-30) is None
    # a step that would leave the bounds is refused
    assert optimizer.newton_polish(fg, x0, f0, x0 - 1e-6, ub, idx, g0, H0, max_steps=5,
                                   dec_rtol=1e-20) is None


def _crossed(seed: int = 5) -> pd.DataFrame:
    """Students × lecturers, each student rating 5 of 120 lecturers (a sparse crossing)."""
    rng = np.random.default_rng(seed)
    ns, nd = 400, 120
    s = np.repeat(np.arange(ns), 5)
    d = np.concatenate([rng.choice(nd, 5, replace=False) for _ in range(ns)])
    service = rng.integers(0, 2, s.size)
    y = (3 + 0.3 * service + rng.normal(0, 0.5, ns)[s] + rng.normal(0, 0.4, nd)[d]
         + rng.normal(0, 0.3, nd)[d] * service + rng.normal(0, 1, s.size))
    return pd.DataFrame({"y": y, "service": service.astype(str), "s": s.astype(str),
                         "d": d.astype(str)})


def test_sparse_conditional_variances_equal_the_dense_route(monkeypatch):
    spec = build_model_spec("y ~ service + (1 | s) + (service | d)", _crossed())
    cp = crossproducts(spec)
    theta = np.array([0.5, 0.4, 0.1, 0.3])
    dense = conditional.estimates_at(cp, theta, True)["condvar"]
    monkeypatch.setattr(conditional, "_SPARSE_MIN_SIZE", 0)
    f = conditional.factorize(theta, cp)
    assert np.count_nonzero(f.Lr1[: cp.q_rest]) <= 0.1 * f.Lr1[: cp.q_rest].size
    sparse = conditional.estimates_at(cp, theta, True)["condvar"]
    for a, b in zip(sparse, dense):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)
