"""The engine's analytic gradient for vector-valued random terms, its optimum against tight
lme4 optima, the abnormal-stop warning and fitting from summed cross-products.

Independent truths:

* the gradient against central finite differences of the profiled criterion (itself checked
  against lme4 and a dense likelihood in ``test_native.py``);
* the optimum against lme4's tight optima stored by ``r_scripts/engine_references.R`` under
  ``tests/data/engine/`` (nloptwrap at tight tolerances, then bobyqa with
  ``rhoend = 1e-12``): the native criterion must not exceed lme4's by more than 1e-10
  relative, and must agree with it to 1e-8;
* InstEval ``y ~ service + (1 | s) + (service | d)`` (exported from R at test time): the
  criterion at lme4's stored optimum equals lme4's, and the analytic gradient (sparse path)
  equals finite differences there; the full fit is timed in ``benchmarks/``;
* summed cross-products of row partitions against the cross-products of all rows.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scoremix.lme import native, optimizer
from scoremix.lme.api import lmer
from scoremix.lme.crossprod import crossproducts, sum_crossproducts
from scoremix.lme.deviance import profiled_deviance, profiled_deviance_grad
from scoremix.lme.errors import ConvergenceWarning
from scoremix.lme.factor import rest_symbolic
from scoremix.lme.model_frame import build_model_spec

DATA = Path(__file__).resolve().parent / "data"
ENGINE = DATA / "engine"
R_DIR = Path(__file__).resolve().parents[1] / "r_scripts"


def _ref(name: str) -> dict:
    return json.loads((ENGINE / f"{name}.json").read_text())


def _data(ref: dict) -> pd.DataFrame:
    d = pd.read_csv(ENGINE / f"{ref['data']}.csv")
    factors = ref["factors"] if isinstance(ref["factors"], list) else [ref["factors"]]
    for c in factors:
        d[c] = d[c].astype(str)
    return d


def _sleep() -> pd.DataFrame:
    d = pd.read_csv(DATA / "reference" / "sleepstudy.csv")
    rng = np.random.default_rng(3)
    d["g2"] = rng.integers(0, 7, len(d)).astype(str)
    d["x2"] = rng.normal(size=len(d))
    return d


GRAD_CASES = [
    ("sleep", "Reaction ~ Days + (Days | Subject)"),
    ("sleep", "Reaction ~ Days + (1 | g2) + (Days | Subject)"),        # vector term 1, scalar rest
    ("sleep", "Reaction ~ Days + (Days + x2 | Subject) + (x2 | g2)"),  # 3×3 term 1, 2×2 rest
    ("sleep", "Reaction ~ Days + (1 | Subject) + (Days + x2 | g2)"),   # scalar term 1, 3×3 rest
    ("orthodont_reml", None),
    ("oxboys_reml", None),
    ("machines_reml", None),
]


def _spec(case: str, formula: str | None):
    if case == "sleep":
        return build_model_spec(formula, _sleep())
    ref = _ref(case)
    return build_model_spec(ref["formula"], _data(ref))


def _fd_grad(theta: np.ndarray, cp, reml: bool, step: float = 1e-6) -> np.ndarray:
    out = np.empty_like(theta)
    for i in range(theta.size):
        h = step * max(1.0, abs(theta[i]))
        e = np.zeros_like(theta)
        e[i] = h
        out[i] = (profiled_deviance(theta + e, cp, reml) - profiled_deviance(theta - e, cp, reml)) / (2 * h)
    return out


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("reml", [True, False], ids=["REML", "ML"])
@pytest.mark.parametrize("case,formula", GRAD_CASES)
def test_analytic_gradient_matches_finite_differences(case, formula, reml, sparse):
    spec = _spec(case, formula)
    cp = crossproducts(spec)
    cp.sparse_ar1 = sparse
    rng = np.random.default_rng(11)
    diag = spec.theta_lower() == 0.0
    for _ in range(2):
        theta = np.where(diag, rng.uniform(0.2, 1.5, spec.n_theta), rng.uniform(-0.5, 0.5, spec.n_theta))
        crit, g = profiled_deviance_grad(theta, cp, reml)
        assert crit == pytest.approx(profiled_deviance(theta, cp, reml), rel=1e-12)
        gn = _fd_grad(theta, cp, reml)
        np.testing.assert_allclose(g, gn, rtol=0, atol=2e-5 * max(1.0, np.max(np.abs(gn))))


def test_analytic_gradient_rejects_singular_T_and_dispersion():
    spec = _spec("sleep", "Reaction ~ Days + (Days | Subject)")
    cp = crossproducts(spec)
    with pytest.raises(ValueError, match="diagonal θ > 0"):
        profiled_deviance_grad(np.array([1.0, 0.2, 0.0]), cp, True)
    disp = build_model_spec("Reaction ~ Days + (Days | Subject)", _sleep(), dispersion="~ g2")
    with pytest.raises(ValueError, match="homoscedastic"):
        profiled_deviance_grad(np.array([1.0, 0.2, 0.5]), crossproducts(disp), True)


@pytest.mark.parametrize("name", ["orthodont_reml", "orthodont_ml", "oxboys_reml", "machines_reml"])
def test_fit_reaches_tight_lme4_optimum(name):
    ref = _ref(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        m = lmer(ref["formula"], _data(ref), REML=ref["REML"])
    crit, crit_ref = -2 * m.loglik, ref["criterion"]
    assert crit <= crit_ref + 1e-10 * abs(crit_ref)
    assert crit == pytest.approx(crit_ref, rel=1e-8)
    # the criterion at lme4's θ is lme4's criterion (the deviance formula for vector terms)
    assert profiled_deviance(np.asarray(ref["theta"]), m.cp, ref["REML"]) == pytest.approx(crit_ref, rel=1e-10)
    for k, v in ref["fixef"].items():
        assert m.fixef[k] == pytest.approx(v, rel=1e-4, abs=1e-4 * m.se[k])
    # an exact gradient: far fewer criterion evaluations than finite differences would need
    assert m.fit_info["n_eval"] < 120


@pytest.fixture(scope="module")
def insteval(rscript: str, tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    out = tmp_path_factory.mktemp("insteval_slopes")
    subprocess.run([rscript, str(R_DIR / "export_datasets.R"), str(out), "insteval"],
                   check=True, capture_output=True, text=True, timeout=300)
    d = pd.read_csv(out / "InstEval.csv")
    d["s"] = d["s"].astype(str)
    d["d"] = d["d"].astype(str)
    return d


@pytest.mark.slow
def test_insteval_slopes_criterion_and_gradient_at_lme4_optimum(insteval):
    ref = _ref("insteval_slopes_reml")
    spec = build_model_spec(ref["formula"], insteval)
    cp = crossproducts(spec)
    assert cp.ar1_sparse() is not None, "InstEval's students × lecturers block should be sparse"
    theta = np.asarray(ref["theta"])
    crit, g = profiled_deviance_grad(theta, cp, True)
    assert crit == pytest.approx(ref["criterion"], rel=1e-10)
    # the criterion (≈ 2.4e5) has a rounding noise of ~2e-9 (n·δr²/r² with n = 73,421, in
    # the dense and the sparse factor alike): a step of 1e-5 keeps the difference quotient's
    # noise at ~1e-4 (1e-6 put it at the 1e-3 tolerance); truncation error is ~1e-6
    np.testing.assert_allclose(g, _fd_grad(theta, cp, True, step=1e-5), rtol=0, atol=1e-3)
    # the sparse (supernodal) and the dense rest factor give the same gradient
    if rest_symbolic(cp) is not None:
        cpd = crossproducts(spec)
        cpd._rest_sym = False
        np.testing.assert_allclose(g, profiled_deviance_grad(theta, cpd, True)[1], rtol=0,
                                   atol=1e-6)
    # lme4's tight optimum is stationary: the gradient is tiny on the criterion's scale
    assert np.max(np.abs(g)) < 1e-2


# ------------------------------------------------------------------- abnormal optimiser stops
def _abnormal_minimize(maxiter: int):
    """scipy's minimize capped at ``maxiter`` iterations and always reporting L-BFGS-B's
    line-search failure, to drive the optimiser's abnormal-stop branch."""
    real = optimizer.minimize

    def fake(*args, **kwargs):
        opts = dict(kwargs.get("options") or {})
        opts["maxiter"] = min(opts.get("maxiter", maxiter), maxiter)
        kwargs["options"] = opts
        res = real(*args, **kwargs)
        res.message = "ABNORMAL_TERMINATION_IN_LNSRCH"
        res.success = False
        return res
    return fake


def test_abnormal_stop_away_from_optimum_warns(monkeypatch):
    spec = _spec("orthodont_reml", None)
    monkeypatch.setattr(optimizer, "minimize", _abnormal_minimize(maxiter=1))
    with pytest.warns(ConvergenceWarning, match="stopped abnormally after polishing"):
        m = native.fit(spec, control=dict(check_conv=False))
    assert not m.converged
    assert "ABNORMAL" in m.fit_info["optimizer_message"]


def test_abnormal_stop_at_optimum_is_silent(monkeypatch):
    spec = _spec("orthodont_reml", None)
    monkeypatch.setattr(optimizer, "minimize", _abnormal_minimize(maxiter=10_000))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        m = native.fit(spec)
    assert m.converged
    assert -2 * m.loglik <= _ref("orthodont_reml")["criterion"] * (1 + 1e-10)


# ------------------------------------------------------------- summed cross-products
def _rows(spec, idx: np.ndarray):
    terms = [dataclasses.replace(t, codes=t.codes[idx], X=t.X[idx]) for t in spec.terms]
    return dataclasses.replace(spec, y=spec.y[idx], X=spec.X[idx], terms=terms,
                               data=spec.data.iloc[idx])


def test_sum_of_partition_crossproducts_fits_like_all_rows():
    spec = _spec("sleep", "Reaction ~ Days + (1 | g2) + (Days | Subject)")
    parts = np.array_split(np.random.default_rng(5).permutation(spec.n), 3)
    total = sum_crossproducts([crossproducts(_rows(spec, np.sort(p))) for p in parts])
    full = crossproducts(spec)
    for name in ("A11", "Ar1", "Arr", "n_by"):
        np.testing.assert_allclose(getattr(total, name), getattr(full, name), rtol=1e-12, atol=1e-9)
    assert total.n == full.n
    a, b = native.fit(spec, cp=total), native.fit(spec)
    np.testing.assert_allclose(a.theta.to_numpy(), b.theta.to_numpy(), rtol=1e-7)
    assert -2 * a.loglik == pytest.approx(-2 * b.loglik, rel=1e-12)
    with pytest.raises(ValueError, match="keep no rows"):
        total.with_response(spec.y)
    with pytest.raises(ValueError, match="part 1 has term_p"):
        other = _spec("sleep", "Reaction ~ Days + (1 | Subject) + (Days + x2 | g2)")
        sum_crossproducts([full, crossproducts(other)])
