"""The native LMM engine against lme4 (stored references) and against dense linear algebra."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import lme_native_helpers as H
from scoremix.lme import native, optimizer
from scoremix.lme.conditional import conditional_estimates
from scoremix.lme.crossprod import crossproducts
from scoremix.lme.deviance import profiled_deviance
from scoremix.lme.relcov import theta_to_T
from scoremix.lme.errors import ConvergenceWarning, SingularFitWarning
from scoremix.lme.spec import ModelSpec, RandomTerm

CASES = [
    ("sleepstudy", H.sleepstudy_spec, "reml"),
    ("sleepstudy", H.sleepstudy_spec, "ml"),
    ("penicillin", H.penicillin_spec, "reml"),
    ("penicillin", H.penicillin_spec, "ml"),
    ("pastes", H.pastes_spec, "reml"),
    ("detector", H.detector_spec, "reml"),
    ("detector", H.detector_spec, "ml"),
    ("detector", lambda: H.detector_spec(slope=True), "slope"),
    ("singular", H.singular_spec, "reml"),
]
IDS = [f"{c[0]}-{c[2]}" for c in CASES]


def dense_Z(spec) -> np.ndarray:
    """Z (n × q), level-major within each term, built row by row from the definition."""
    blocks = []
    for t in spec.terms:
        Zk = np.zeros((spec.n, t.n_levels * t.p))
        for i in range(spec.n):
            Zk[i, t.codes[i] * t.p: (t.codes[i] + 1) * t.p] = t.X[i]
        blocks.append(Zk)
    return np.hstack(blocks)


def dense_Lambda(spec, theta) -> np.ndarray:
    Ts = theta_to_T(np.asarray(theta), [t.p for t in spec.terms])
    return sp.block_diag([sp.kron(sp.eye(t.n_levels), T) for t, T in zip(spec.terms, Ts)]).toarray()


def dense_criterion(spec, theta, reml, rho=None) -> float:
    """-2 log-likelihood profiled over β and σ², from the marginal covariance
    V = σ²(ZΛΛ'Z' + W^{-1}) directly (no Cholesky blocks)."""
    Z = dense_Z(spec)
    Lam = dense_Lambda(spec, theta)
    w = np.ones(spec.n) if spec.weights is None else np.asarray(spec.weights, float)
    if rho is not None:
        w = w / np.asarray(rho)[spec.dispersion_codes]
    V0 = Z @ Lam @ Lam.T @ Z.T + np.diag(1 / w)
    Vi = np.linalg.inv(V0)
    X, y = spec.X, spec.y
    beta = np.linalg.solve(X.T @ Vi @ X, X.T @ Vi @ y)
    r = y - X @ beta
    q = float(r @ Vi @ r)
    n, p = spec.n, spec.p
    ld = np.linalg.slogdet(V0)[1]
    if reml:
        return ld + np.linalg.slogdet(X.T @ Vi @ X)[1] + (n - p) * (1 + np.log(2 * np.pi * q / (n - p)))
    return ld + n * (1 + np.log(2 * np.pi * q / n))


def fit_quiet(spec, REML):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return native.fit(spec, REML=REML)


def crit_of(m):
    return m.reml_criterion if m.REML else m.deviance


# ------------------------------------------------------------------ cross-products
def test_crossproducts_match_dense_products():
    spec = H.detector_spec(slope=True)  # weights, term 2 with a random slope
    cp = crossproducts(spec)
    Z = dense_Z(spec)
    w = spec.weights
    q1 = spec.terms[0].n_levels * spec.terms[0].p
    Z1, Zr = Z[:, :q1], Z[:, q1:]
    R = np.column_stack([Zr, spec.X, spec.y])
    A11 = (Z1 * w[:, None]).T @ Z1
    p1 = spec.terms[0].p
    for l in range(spec.terms[0].n_levels):
        np.testing.assert_allclose(cp.A11[0, l], A11[l * p1:(l + 1) * p1, l * p1:(l + 1) * p1], atol=1e-9)
    np.testing.assert_allclose(cp.Ar1[0], (R * w[:, None]).T @ Z1, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(cp.Arr[0], (R * w[:, None]).T @ R, rtol=1e-12, atol=1e-9)
    assert cp.sum_log_w == pytest.approx(np.sum(np.log(w)))


def test_with_response_and_fix_coefficient_equal_fresh_crossproducts():
    spec = H.sleepstudy_spec()
    cp = crossproducts(spec)
    y2 = np.random.default_rng(3).normal(size=spec.n) * 30 + 250
    fresh = crossproducts(dataclasses.replace(spec, y=y2))
    new = cp.with_response(y2)
    np.testing.assert_allclose(new.Ar1, fresh.Ar1, rtol=1e-12)
    np.testing.assert_allclose(new.Arr, fresh.Arr, rtol=1e-12)
    # β_1 (Days) fixed at 7: offset 7·Days, X without the column
    fixed = dataclasses.replace(spec, X=spec.X[:, :1], fixef_names=["(Intercept)"],
                                y=spec.y - 7 * spec.X[:, 1])
    fc = cp.fix_coefficient(1, 7.0)
    ref = crossproducts(fixed)
    np.testing.assert_allclose(fc.Ar1, ref.Ar1, rtol=1e-10, atol=1e-8)
    np.testing.assert_allclose(fc.Arr, ref.Arr, rtol=1e-10, atol=1e-8)


def test_crossproducts_reject_bad_weights():
    spec = H.sleepstudy_spec()
    w = np.ones(spec.n)
    w[5] = 0.0
    with pytest.raises(ValueError, match="row 5"):
        crossproducts(spec, weights=w)


# ------------------------------------------------------------------ profiled deviance
@pytest.mark.parametrize("name,make,key", CASES, ids=IDS)
def test_profiled_deviance_at_lme4_theta_equals_lme4(name, make, key):
    ref = H.load_ref(name)[key]
    spec = make()
    cp = crossproducts(spec)
    crit = ref["reml_criterion"] if ref["REML"] else ref["deviance"]
    assert profiled_deviance(np.array(ref["theta"]), cp, ref["REML"]) == pytest.approx(crit, rel=1e-10)


@pytest.mark.parametrize("reml", [True, False])
@pytest.mark.parametrize("make", [H.sleepstudy_spec, H.penicillin_spec,
                                  lambda: H.detector_spec(slope=True)], ids=["sleep", "penicillin", "detector"])
def test_profiled_deviance_equals_dense_likelihood(make, reml):
    spec = make()
    if spec.n > 1000:  # keep the dense check small
        keep = np.arange(0, spec.n, 5)
        spec = H.spec(spec.data.iloc[keep].reset_index(drop=True), spec.response, spec.fixef_names,
                      [H.term(spec.data.iloc[keep].reset_index(drop=True), t.group_factor, t.term_names)
                       for t in spec.terms], weights=spec.weights[keep])
    cp = crossproducts(spec)
    rng = np.random.default_rng(11)
    for _ in range(3):
        theta = spec.theta_init() + rng.uniform(-0.3, 0.6, spec.n_theta)
        theta = np.maximum(theta, spec.theta_lower())
        assert profiled_deviance(theta, cp, reml) == pytest.approx(
            dense_criterion(spec, theta, reml), rel=1e-10)


# ------------------------------------------------------------------ fits vs lme4
@pytest.mark.parametrize("name,make,key", CASES, ids=IDS)
def test_fit_matches_lme4(name, make, key):
    ref = H.load_ref(name)[key]
    m = fit_quiet(make(), ref["REML"])
    rc = ref["reml_criterion"] if ref["REML"] else ref["deviance"]
    # the criterion: within 1e-6 relative and never (beyond rounding) worse than lme4's
    assert crit_of(m) == pytest.approx(rc, rel=1e-6)
    assert crit_of(m) <= rc + 1e-9 * abs(rc)
    fx = np.array(list(ref["fixef"].values()))
    assert list(m.fixef.index) == list(ref["fixef"].keys())
    np.testing.assert_allclose(m.fixef.to_numpy(), fx, rtol=1e-4, atol=1e-8)
    np.testing.assert_allclose(m.se.to_numpy(), list(ref["se"].values()), rtol=1e-4)
    np.testing.assert_allclose(m.vcov.to_numpy(), ref["vcov"], rtol=1e-4, atol=1e-10)
    np.testing.assert_allclose(m.varcorr["sdcor"].to_numpy(), [v["sdcor"] for v in ref["varcorr"]],
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(m.varcorr["vcov"].to_numpy(), [v["vcov"] for v in ref["varcorr"]],
                               rtol=2e-4, atol=1e-6)
    assert list(m.varcorr["grp"]) == [v["grp"] for v in ref["varcorr"]]
    assert list(m.varcorr["var1"]) == [v["var1"] for v in ref["varcorr"]]
    assert list(m.varcorr["var2"]) == [v["var2"] for v in ref["varcorr"]]
    np.testing.assert_allclose(m.theta.to_numpy(), ref["theta"], rtol=1e-4, atol=1e-6)
    assert list(m.theta.index) == ref["theta_names"]
    assert m.sigma == pytest.approx(ref["sigma"], rel=1e-4)
    assert m.loglik == pytest.approx(ref["loglik"], rel=1e-6)
    assert m.aic == pytest.approx(ref["aic"], rel=1e-6)
    assert m.bic == pytest.approx(ref["bic"], rel=1e-6)
    assert m.nobs == ref["nobs"]
    assert m.ngrps == ref["ngrps"]
    assert m.singular == ref["singular"]
    for g, r in ref["ranef"].items():
        vals = m.ranef[g].loc[[str(v) for v in r["levels"]], r["terms"]].to_numpy()
        csd = m.ranef_condsd[g].loc[[str(v) for v in r["levels"]], r["terms"]].to_numpy()
        scale = max(1.0, np.max(np.abs(r["values"])))
        np.testing.assert_allclose(vals, r["values"], rtol=1e-4, atol=1e-4 * scale)
        np.testing.assert_allclose(csd, r["condsd"], rtol=1e-4, atol=1e-8)
    np.testing.assert_allclose(m.fitted.to_numpy(), ref["fitted"], rtol=1e-6,
                               atol=1e-4 * np.std(ref["fitted"]))
    np.testing.assert_allclose(m.residuals.to_numpy(), ref["residuals"], atol=1e-4 * np.std(ref["fitted"]))


def test_singular_fit_warns_with_lme4_wording():
    spec = H.singular_spec()
    assert H.load_ref("singular")["reml"]["singular"] is True
    with pytest.warns(SingularFitWarning, match=r"boundary \(singular\) fit: see help\('isSingular'\)"):
        m = native.fit(spec)
    assert m.singular and m.theta.iloc[0] < 1e-4


def test_no_warning_on_regular_fit():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = native.fit(H.sleepstudy_spec())
    assert m.converged and not m.singular


def test_convergence_warning_when_optimizer_is_stopped_early():
    spec = H.sleepstudy_spec()
    with pytest.warns(ConvergenceWarning, match=r"Model failed to converge"):
        m = native.fit(spec, control=dict(maxiter=1))
    assert not m.converged


def test_unknown_control_option_is_named():
    with pytest.raises(ValueError, match="maxiterations"):
        native.fit(H.sleepstudy_spec(), control=dict(maxiterations=3))


def test_dense_criterion_minimum_is_reached():
    """The optimum of the blocked criterion is also a minimum of the dense likelihood:
    moving θ in any coordinate direction does not lower it."""
    spec = H.penicillin_spec()
    m = fit_quiet(spec, True)
    th = m.theta.to_numpy()
    f0 = dense_criterion(spec, th, True)
    assert f0 == pytest.approx(m.reml_criterion, rel=1e-10)
    for i in range(th.size):
        for h in (-1e-3, 1e-3):
            t2 = th.copy()
            t2[i] += h
            assert dense_criterion(spec, t2, True) >= f0 - 1e-9


# ------------------------------------------------------------------ conditional distribution
def test_conditional_covariance_and_draws_match_dense_mixed_model_equations():
    spec = H.penicillin_spec()
    m = fit_quiet(spec, True)
    cp = crossproducts(spec)
    theta = m.theta.to_numpy()
    ce = conditional_estimates(theta, cp)
    # dense: (u, β) | θ, σ has precision [ΛZ'ZΛ + I, ΛZ'X; X'ZΛ, X'X] / σ²
    Z = dense_Z(spec) @ dense_Lambda(spec, theta)
    A = np.block([[Z.T @ Z + np.eye(Z.shape[1]), Z.T @ spec.X], [spec.X.T @ Z, spec.X.T @ spec.X]])
    mean = np.linalg.solve(A, np.concatenate([Z.T @ spec.y, spec.X.T @ spec.y]))
    q = Z.shape[1]
    np.testing.assert_allclose(ce.u, mean[:q], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(ce.beta, mean[q:], rtol=1e-12)
    sigma = m.sigma
    np.testing.assert_allclose(ce.covariance(sigma), sigma ** 2 * np.linalg.inv(A), rtol=1e-8, atol=1e-12)
    # draws: sample mean within 5 standard errors, reproducible with a seed
    beta, u = ce.sample(sigma, 4000, rng=1)
    beta2, _ = ce.sample(sigma, 4000, rng=1)
    np.testing.assert_array_equal(beta, beta2)
    sd = np.sqrt(np.diag(ce.covariance(sigma)))
    assert np.all(np.abs(beta.mean(0) - ce.beta) < 5 * sd[q:] / np.sqrt(4000))
    assert np.all(np.abs(u.mean(0) - ce.u) < 5 * sd[:q] / np.sqrt(4000) + 1e-12)
    np.testing.assert_allclose(beta.std(0), sd[q:], rtol=0.08)
    # b = Λu per term equals the fitted random effects
    b = ce.u_to_b(ce.u, [t.n_levels for t in spec.terms])
    np.testing.assert_allclose(b[0], m.ranef["plate"].to_numpy(), rtol=1e-12)


def test_simulated_truth_is_recovered():
    """Large simulated crossed design: estimates near the true values (simulation check)."""
    rng = np.random.default_rng(5)
    n, ns, na = 60_000, 300, 13
    spk, att = rng.integers(0, ns, n), rng.integers(0, na, n)
    label, x = rng.binomial(1, 0.5, n).astype(float), rng.standard_normal(n)
    y = (-1 + 3 * label + 0.2 * x + rng.normal(0, 0.5, ns)[spk] + rng.normal(0, 2, na)[att]
         + rng.standard_normal(n))
    one = np.ones((n, 1))
    spec = ModelSpec(
        "y ~ label + x + (1 | speaker) + (1 | attack)", "y", y, np.column_stack([np.ones(n), label, x]),
        ["(Intercept)", "label", "x"],
        [RandomTerm("speaker", "speaker", ["(Intercept)"], spk, [str(i) for i in range(ns)], one),
         RandomTerm("attack", "attack", ["(Intercept)"], att, [str(i) for i in range(na)], one)],
        data=None)
    m = fit_quiet(spec, True)
    # standard errors: label ~0.008, x ~0.004, sigma ~0.003, speaker SD ~0.02
    assert m.fixef["label"] == pytest.approx(3.0, abs=0.04)
    assert m.fixef["x"] == pytest.approx(0.2, abs=0.02)
    assert m.sigma == pytest.approx(1.0, abs=0.015)
    sd = dict(zip(m.varcorr["grp"], m.varcorr["sdcor"]))
    assert sd["speaker"] == pytest.approx(0.5, abs=0.08)
    assert 0.9 < sd["attack"] < 3.5  # 13 levels: the SD is only known to ~±20 %


def test_sparse_downdate_and_analytic_gradient_match_dense_and_finite_differences() -> None:
    """The sparse Schur-complement path gives the dense path's criterion and conditional
    estimates; the analytic gradient (scalar terms) matches central differences."""
    import pandas as pd
    from pathlib import Path
    from scoremix.lme.deviance import profiled_deviance_grad
    from scoremix.lme.model_frame import build_model_spec
    ref = Path(__file__).parent / "data" / "reference"
    pen = pd.read_csv(ref / "Penicillin.csv")
    pas = pd.read_csv(ref / "Pastes.csv")
    ss = pd.read_csv(ref / "sleepstudy.csv")
    cases = [("diameter ~ 1 + (1|plate) + (1|sample)", pen, np.array([1.5, 3.0])),
             ("strength ~ 1 + (1|batch/cask)", pas, np.array([0.8, 0.3])),
             ("Reaction ~ Days + (Days|Subject)", ss, np.array([0.9, -0.1, 0.2]))]
    for formula, data, th in cases:
        spec = build_model_spec(formula, data)
        cpd = crossproducts(spec); cpd.sparse_ar1 = False
        cps = crossproducts(spec); cps.sparse_ar1 = True
        for reml in (True, False):
            a, b = profiled_deviance(th, cpd, reml), profiled_deviance(th, cps, reml)
            assert b == pytest.approx(a, rel=1e-12)
        ca, cb = conditional_estimates(th, cpd), conditional_estimates(th, cps)
        np.testing.assert_allclose(cb.beta, ca.beta, rtol=1e-10)
        np.testing.assert_allclose(cb.u, ca.u, rtol=1e-9, atol=1e-10)
        if spec.terms[0].p == 1:
            for cp in (cpd, cps):
                for reml in (True, False):
                    f, g = profiled_deviance_grad(th, cp, reml)
                    h = 1e-5
                    gn = np.array([(profiled_deviance(th + e, cp, reml)
                                    - profiled_deviance(th - e, cp, reml)) / (2 * h)
                                   for e in np.eye(th.size) * h])
                    np.testing.assert_allclose(g, gn, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- lme4's checkConv / checkHess
def test_scaled_gradient_is_lme4s_solve_chol_hessian_gradient():
    """lme4 scales the gradient by ``solve(chol(H), g) = R^{-1} g`` (``H = R'R``), not by
    ``H^{-1} g``.  For ``f(x) = g'x + x'Hx/2`` at 0 with ``H = diag(4, 1)``, ``g = (0.1, 1e-3)``:
    ``R^{-1}g = (0.05, 1e-3)`` (``H^{-1}g`` would give 0.025), ``min(|R^{-1}g|, |g|)`` peaks at
    0.05 in component 1."""
    Hm = np.diag([4.0, 1.0])
    g = np.array([0.1, 1e-3])

    def f(x):
        return float(g @ x + 0.5 * x @ Hm @ x)

    lb = np.full(2, -np.inf)
    msgs = optimizer.check_conv(f, np.zeros(2), lb, optimizer.NativeControl())
    assert len(msgs) == 1
    assert msgs[0].startswith("Model failed to converge with max|grad| = 0.05 (tol = 0.002, component 1)")


@pytest.mark.parametrize("evals, is_theta, expected", [
    ([1.0, 2.0], None, []),
    ([-1.0, 2.0], None, ["Model failed to converge: degenerate  Hessian with 1 negative eigenvalues"]),
    ([1e-7, 2.0], None, ["Hessian is numerically singular: parameters are not uniquely determined"]),
    ([2e7, 3e7], None, ["Model is nearly unidentifiable: very large eigenvalue\n - Rescale variables?"]),
    ([10.0, 5e-6], None, ["Model is nearly unidentifiable: large eigenvalue ratio\n - Rescale variables?"]),
    ([1e-5, 2e7], None, ["Model is nearly unidentifiable: very large eigenvalue\n - Rescale variables?",
                         "Model is nearly unidentifiable: large eigenvalue ratio\n - Rescale variables?"]),
    # the size checks look at the θ block only (lme4 has no log ρ parameters)
    ([1.0, 2e7], [True, False], []),
])
def test_check_hess_follows_lme4(evals, is_theta, expected):
    """lme4's ``checkHess`` rules on a rotated ``H = Q diag(λ) Q'`` with known eigenvalues."""
    c, s = np.cos(0.3), np.sin(0.3)
    Q = np.array([[c, -s], [s, c]]) if is_theta is None else np.eye(2)
    Hm = Q @ np.diag(evals) @ Q.T
    mask = None if is_theta is None else np.array(is_theta)
    assert optimizer.check_hess(Hm, 1e-6, mask) == expected


def test_badly_scaled_slope_gets_lme4_advice_and_the_right_optimum():
    """sleepstudy with ``D = Days/1e4``: lme4 1.1-31 warns "Model is nearly unidentifiable: large
    eigenvalue ratio - Rescale variables?" (and stops short, REML 1734.7).  Rescaling a
    column of X by ``c`` multiplies the slope's θ by ``1/c`` and changes the REML criterion
    only through ``log|R_X|²``, by ``2 log c``: the optimum is lme4's tight criterion for the
    unscaled data minus ``2 log(1e4)``."""
    df = H.load_csv("sleepstudy").assign(D=lambda d: d["Days"] / 1e4)
    from scoremix.lme.api import lmer
    from scoremix.lme.errors import ScaleWarning
    with pytest.warns(ConvergenceWarning, match=r"large eigenvalue ratio\n - Rescale variables\?"):
        with pytest.warns(ScaleWarning, match="consider rescaling"):
            m = lmer("Reaction ~ D + (D | Subject)", df)
    ref = H.load_ref("sleepstudy")["reml"]
    assert m.reml_criterion == pytest.approx(ref["reml_criterion"] - 2 * np.log(1e4), rel=1e-8)
    # θ of the intercept unchanged; the slope's row of the Cholesky factor scaled by 1e4
    np.testing.assert_allclose(m.theta.to_numpy(), np.array(ref["theta"]) * [1, 1e4, 1e4], rtol=1e-3)
    assert not m.converged


def test_singular_fit_skips_convergence_checks_like_lme4():
    """lme4's ``checkConv`` returns right after the singular-fit message: no gradient or
    Hessian warnings on a boundary fit."""
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        m = native.fit(H.singular_spec())
    assert m.singular
    assert not [w for w in rec if issubclass(w.category, ConvergenceWarning)]
    assert m.fit_info["messages"] == []
