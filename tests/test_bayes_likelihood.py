"""Exactness of the Bayesian likelihoods (no sampling): suffstats vs rows, collapsed vs dense
multivariate normal, exact conditional draws, priors, checks."""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import scipy.stats as st

from scoremix.lme.spec import ModelSpec, RandomTerm

pytest.importorskip("pymc")


def make_spec(seed=0, n=300, n1=12, n2=5, slope=False, disp=False, weights=False) -> ModelSpec:
    """Crossed spk × att data; optional correlated slope on spk, class dispersion, weights."""
    rng = np.random.default_rng(seed)
    c1 = np.arange(n) % n1
    c2 = rng.integers(0, n2, n)
    c2[:n2] = np.arange(n2)
    lab = rng.integers(0, 2, n)
    x = rng.normal(size=n)
    X = np.column_stack([np.ones(n), lab, x])
    y = (X @ [0.5, 2.0, -0.3] + rng.normal(0, 0.7, n1)[c1] + rng.normal(0, 1.5, n2)[c2]
         + rng.normal(0, 1, n) * np.where(lab == 1, 1.5, 1.0))
    X1 = np.column_stack([np.ones(n), x]) if slope else np.ones((n, 1))
    t1 = RandomTerm("spk", "spk", ["(Intercept)", "x"] if slope else ["(Intercept)"], c1,
                    [f"s{i}" for i in range(n1)], X1)
    t2 = RandomTerm("att", "att", ["(Intercept)"], c2, [f"a{i}" for i in range(n2)], np.ones((n, 1)))
    data = pd.DataFrame(dict(y=y, lab=lab, x=x, spk=c1, att=c2))
    return ModelSpec("y ~ lab + x + (1|spk) + (1|att)", "y", y, X, ["(Intercept)", "lab", "x"], [t1, t2],
                     data, weights=rng.uniform(0.5, 2, n) if weights else None,
                     dispersion_formula="~ lab" if disp else None,
                     dispersion_codes=lab.astype(np.int64) if disp else None,
                     dispersion_levels=["0", "1"] if disp else None)


CASES = [dict(), dict(slope=True, disp=True, weights=True)]


def _dense_parts(spec, sig, Ts):
    """Z, G (prior covariance of b), R (residual covariance) as dense matrices."""
    Z = sp.hstack([sp.csr_matrix((t.X.ravel(), (np.repeat(np.arange(spec.n), t.p),
                                                 (t.codes[:, None] * t.p + np.arange(t.p)).ravel())),
                                 shape=(spec.n, t.n_levels * t.p)) for t in spec.terms]).toarray()
    blocks = []
    for t, T in zip(spec.terms, Ts):
        blocks += [T @ T.T] * t.n_levels
    from scipy.linalg import block_diag

    G = block_diag(*blocks)
    w = np.ones(spec.n) if spec.weights is None else spec.weights
    d = np.zeros(spec.n, int) if spec.dispersion_codes is None else spec.dispersion_codes
    R = np.diag(sig[d] ** 2 / w)
    return Z, G, R


def _random_point(spec, rng):
    L = 1 if spec.dispersion_levels is None else len(spec.dispersion_levels)
    sig = rng.uniform(0.5, 2.0, L)
    Ts = []
    for t in spec.terms:
        T = np.tril(rng.normal(size=(t.p, t.p)))
        T[np.diag_indices(t.p)] = rng.uniform(0.3, 2.0, t.p)
        Ts.append(T)
    return sig, Ts


def _model_values(model, point):
    """Values of all free RVs and deterministics of a PyMC model at a value-space point."""
    import xarray as xr

    outs = model.free_RVs + model.deterministics
    fn = model.compile_fn(model.replace_rvs_by_values(outs), inputs=model.value_vars, on_unused_input="ignore",
                          mode="FAST_COMPILE")
    vals = fn(point)
    return xr.Dataset({rv.name: (("chain", "draw") + tuple(f"{rv.name}_{i}" for i in range(np.ndim(v))),
                                 np.asarray(v)[None, None]) for rv, v in zip(outs, vals)})


@pytest.mark.parametrize("case", CASES)
def test_engine_crossproducts_match_sparse(case):
    from scoremix.bayes.suffstats import blocked_suffstats, blocked_suffstats_sparse

    spec = make_spec(**case)
    a, b = blocked_suffstats(spec), blocked_suffstats_sparse(spec)
    for name in ("D", "B", "A", "n_by"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-12, atol=1e-9)
    assert a.sum_log_w == pytest.approx(b.sum_log_w, rel=1e-12, abs=1e-12)
    assert (a.rest_slices, a.x_start, a.m) == (b.rest_slices, b.x_start, b.m)


@pytest.mark.parametrize("case", CASES)
def test_suffstats_logp_equals_rows_logp(case):
    from scoremix.bayes.joint import build_joint_model
    from scoremix.bayes.priors import resolve_priors
    from scoremix.bayes.suffstats import blocked_suffstats

    spec = make_spec(**case)
    ps = resolve_priors(spec, None)
    # FAST_COMPILE: pure-Python ops, no C compilation (exactness, not speed, is tested here)
    fa = build_joint_model(spec, ps, blocked_suffstats(spec), "suffstats",
                           centred=True).model.compile_logp(mode="FAST_COMPILE")
    jb = build_joint_model(spec, ps, None, "rows", centred=True).model
    fb = jb.compile_logp(mode="FAST_COMPILE")
    rng = np.random.default_rng(5)
    p0 = jb.initial_point()
    for _ in range(4):
        p = {k: v + rng.normal(0, 0.8, np.shape(v)) for k, v in p0.items()}
        a, b = float(fa(p)), float(fb(p))
        assert a == pytest.approx(b, rel=1e-8)


@pytest.mark.parametrize("case", CASES)
def test_collapsed_loglik_equals_dense_mvn(case):
    """Potential of the collapsed PyMC model = log N(y; X m0, X S0 X' + Z G Z' + R)."""
    from scoremix.bayes.joint import beta_prior_arrays, build_collapsed_model
    from scoremix.bayes.params import variance_draws
    from scoremix.bayes.priors import resolve_priors
    from scoremix.bayes.suffstats import blocked_suffstats

    spec = make_spec(**case)
    ps = resolve_priors(spec, None)
    model = build_collapsed_model(spec, ps, blocked_suffstats(spec)).model
    pot = model.compile_fn(model.replace_rvs_by_values([model.potentials[0]])[0], inputs=model.value_vars,
                           on_unused_input="ignore", mode="FAST_COMPILE")
    m0, s0 = beta_prior_arrays(spec, ps)
    rng = np.random.default_rng(11)
    p0 = model.initial_point()
    for _ in range(3):
        p = {k: v + rng.normal(0, 0.6, np.shape(v)) for k, v in p0.items()}
        sig, Ts = variance_draws(spec, _model_values(model, p))
        Z, G, R = _dense_parts(spec, sig[0], [T[0] for T in Ts])
        V = spec.X @ np.diag(s0**2) @ spec.X.T + Z @ G @ Z.T + R
        ref = st.multivariate_normal(spec.X @ m0, V).logpdf(spec.y)
        assert float(pot(p)) == pytest.approx(ref, rel=1e-8)


def test_collapsed_flat_prior_is_restricted_likelihood():
    """With flat β the collapsed likelihood is ∫ N(y; Xβ, V) dβ (closed form, dense)."""
    from scoremix.bayes.collapsed import conditional_draws
    from scoremix.bayes.suffstats import blocked_suffstats

    spec = make_spec(slope=True)
    ss = blocked_suffstats(spec)
    rng = np.random.default_rng(2)
    sig, Ts = _random_point(spec, rng)
    _, _, ll = conditional_draws(ss, sig[None], [T[None] for T in Ts], np.zeros(3), np.full(3, np.inf),
                                 rng, return_loglik=True)
    Z, G, R = _dense_parts(spec, sig, Ts)
    V = Z @ G @ Z.T + R
    Vi = np.linalg.inv(V)
    XtViX = spec.X.T @ Vi @ spec.X
    bhat = np.linalg.solve(XtViX, spec.X.T @ Vi @ spec.y)
    e = spec.y - spec.X @ bhat
    n, p = spec.X.shape
    ref = -0.5 * ((n - p) * np.log(2 * np.pi) + np.linalg.slogdet(V)[1] + np.linalg.slogdet(XtViX)[1]
                  + e @ Vi @ e)
    assert ll[0] == pytest.approx(ref, rel=1e-8)


def test_conditional_draws_match_gaussian_conditional():
    """Draws of (β, b) given (σ, Σ) have the closed-form conditional mean and covariance."""
    from scoremix.bayes.collapsed import conditional_draws
    from scoremix.bayes.suffstats import blocked_suffstats

    spec = make_spec(n=200, n1=6, n2=4, slope=True, disp=True, weights=True)
    ss = blocked_suffstats(spec)
    rng = np.random.default_rng(7)
    sig, Ts = _random_point(spec, rng)
    m0 = np.array([0.2, -0.1, 0.3])
    s0 = np.array([3.0, 2.0, 1.5])
    S = 20000
    beta, bs = conditional_draws(ss.shift_response(m0), np.repeat(sig[None], S, 0),
                                 [np.repeat(T[None], S, 0) for T in Ts], m0, s0, np.random.default_rng(1))
    draws = np.concatenate([beta] + [b.reshape(S, -1) for b in bs], axis=1)
    Z, G, R = _dense_parts(spec, sig, Ts)
    C = np.hstack([spec.X, Z])
    prior_prec = np.linalg.inv(np.block([[np.diag(s0**2), np.zeros((3, G.shape[0]))],
                                         [np.zeros((G.shape[0], 3)), G]]))
    Ri = np.linalg.inv(R)
    H = C.T @ Ri @ C + prior_prec
    cov = np.linalg.inv(H)
    mean = cov @ (C.T @ Ri @ spec.y + prior_prec @ np.concatenate([m0, np.zeros(G.shape[0])]))
    se = np.sqrt(np.diag(cov) / S)
    z = (draws.mean(0) - mean) / se
    assert np.max(np.abs(z)) < 4.5
    emp_sd = draws.std(0, ddof=1)
    # SD of a sample SD ≈ sd / sqrt(2S): 1.5 % at S = 20000; allow 5 σ
    np.testing.assert_allclose(emp_sd, np.sqrt(np.diag(cov)), rtol=5 / np.sqrt(2 * S))


def test_default_priors_scale_with_data():
    from scoremix.bayes.priors import Prior, default_priors

    spec = make_spec()
    ps = default_priors(spec)
    sy = np.std(spec.y, ddof=1)
    # reproducible one-pass sums (scoremix.bayes.reprosum): equal to numpy's two-pass SD up to rounding
    assert ps.fixef["(Intercept)"].family == "normal"
    assert ps.fixef["(Intercept)"].params == pytest.approx(dict(mu=np.mean(spec.y), sigma=2.5 * sy), rel=1e-12)
    assert ps.fixef["x"].params["sigma"] == pytest.approx(2.5 * sy / np.std(spec.X[:, 2], ddof=1))
    assert ps.sigma["sigma"].family == Prior.half_t(3, sy).family
    assert ps.sigma["sigma"].params == pytest.approx(Prior.half_t(3, sy).params, rel=1e-12)
    assert ps.sd["sd_spk__(Intercept)"].params["sigma"] == pytest.approx(sy)
    spec2 = make_spec(slope=True, disp=True)
    ps2 = default_priors(spec2)
    assert set(ps2.sigma) == {"sigma_0", "sigma_1"}
    x = spec2.terms[0].X[:, 1]
    assert ps2.sd["sd_spk__x"].params["sigma"] == pytest.approx(sy * 0 + np.std(spec2.y, ddof=1)
                                                                / np.sqrt(np.mean(x**2)))
    assert ps2.cor["cor_spk"] == Prior.lkj(2.0)


def test_prior_overrides_and_errors():
    from scoremix.bayes.joint import beta_prior_arrays
    from scoremix.bayes.priors import Prior, PriorError, resolve_priors

    spec = make_spec(disp=True)
    ps = resolve_priors(spec, {"sigma": Prior.half_normal(2.0), "lab": ("normal", {"mu": 1.0, "sigma": 0.5}),
                               "sd_att__(Intercept)": {"family": "exponential", "lam": 1.0}})
    assert ps.sigma["sigma_0"] == ps.sigma["sigma_1"] == Prior.half_normal(2.0)
    assert ps.fixef["lab"] == Prior.normal(1.0, 0.5)
    assert ps.sd["sd_att__(Intercept)"] == Prior.exponential(1.0)
    with pytest.raises(PriorError, match="unknown prior key 'sd_nope'"):
        resolve_priors(spec, {"sd_nope": Prior.half_normal(1.0)})
    with pytest.raises(PriorError, match="positive"):
        resolve_priors(spec, {"sigma": Prior.normal(0, 1)})
    with pytest.raises(PriorError, match="needs parameters"):
        Prior("normal", {"mu": 0.0})
    ps_t = resolve_priors(spec, {"x": ("studentt", {"nu": 3, "mu": 0, "sigma": 1})})
    with pytest.raises(PriorError, match="method='joint'"):
        beta_prior_arrays(spec, ps_t)


def test_nested_factor_warning():
    from scoremix.bayes.checks import NestedFactorWarning, warn_nested_factors

    n = 120
    rng = np.random.default_rng(0)
    attack = np.arange(n) % 4  # level 0 = "bonafide"
    lab = (attack != 0).astype(float)  # spoof indicator: bonafide ⇔ attack level 0
    y = rng.normal(size=n)
    X = np.column_stack([np.ones(n), lab])
    t = RandomTerm("attack", "attack", ["(Intercept)"], attack, ["bonafide", "A1", "A2", "A3"], np.ones((n, 1)))
    spec = ModelSpec("y ~ label + (1|attack)", "y", y, X, ["(Intercept)", "labelspoof"], [t], pd.DataFrame())
    with pytest.warns(NestedFactorWarning, match=r"dummy\(label, \"spoof\"\) \| attack"):
        probs = warn_nested_factors(spec)
    assert len(probs) == 1 and "['bonafide']" in probs[0]
    # the recommended term has no intercept column: no warning
    t2 = RandomTerm("attack", "attack", ['dummy(label, "spoof")'], attack, t.levels, lab[:, None])
    spec2 = ModelSpec("y ~ label + (0 + dummy(label, 'spoof')|attack)", "y", y, X,
                      ["(Intercept)", "labelspoof"], [t2], pd.DataFrame())
    with warnings.catch_warnings():
        warnings.simplefilter("error", NestedFactorWarning)
        assert warn_nested_factors(spec2) == []


def test_missing_sampler_package_is_named(monkeypatch):
    from scoremix.bayes import SamplerUnavailableError, bayes_lmer

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("numpyro", "jax")
                        else real(name, *a))
    with pytest.raises(SamplerUnavailableError, match=r"\['numpyro', 'jax'\].*pip install numpyro jax"):
        bayes_lmer(make_spec(), sampler="numpyro")


def test_import_scoremix_bayes_is_lazy():
    import subprocess
    import sys

    code = ("import sys, scoremix, scoremix.bayes; "
            "print(any(m in sys.modules for m in ('pymc', 'pytensor', 'arviz')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
