"""lme4 2.0's ``cs()`` and ``ar1()`` random-effect covariances in ``lmer`` (issue 20).

References (``tests/data/lmer_structured/``, from ``r_scripts/lmer_structured_reference.R``):

* glmmTMB 1.1.5, REML and ML, for ``cs()`` (its ``cs`` is lme4 2.0's: a SD per column, one
  correlation) and ``ar1()`` (one SD, ``ρ^|i-j|``), alone and crossed with a scalar term
  (the structured term first in the engine, or in its "rest" block); its SE reference is
  lme4's ``(X'V^{-1}X)^{-1}`` computed densely in R at glmmTMB's optimum (glmmTMB's own
  ``vcov`` comes from TMB's joint Hessian and differs by 0.1–0.25 %);
* lme4 + lmerTest for ``cs(0 + time | g, hom = TRUE)``: for ``ρ ≥ 0`` it is the model
  ``(1 | g) + (1 | g:time)`` (``SD² = σ²_g + σ²_gt``, ``ρ = σ²_g/SD²``), so the criterion,
  fixed effects, SEs and Satterthwaite df (invariant to the parametrisation at an interior
  optimum) must agree;
* a dense evaluation of the Gaussian (REML) likelihood in numpy at the fitted parameters
  (every structure, ``ar1(…, hom = FALSE)`` included, which no installed R package fits).

Tolerances: criterion 1e-6 relative (and never above the reference's), fixed effects 1e-4,
SEs 1e-3 relative, SDs/correlations/σ 1e-3, Satterthwaite df 1e-3 relative.
"""

from __future__ import annotations

import json
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import scoremix as sm
from scoremix.lme.anova_tables import AnovaError
from scoremix.lme.covstruct import ThetaMap
from scoremix.lme.ddf import DdfError, structure_map, varpar_deviance, varpar_vcov_beta
from scoremix.lme.errors import UnsupportedModelError
from scoremix.lme.relcov import theta_to_T

DIR = Path(__file__).resolve().parent / "data" / "lmer_structured"
REF_IDS = ["cs_reml", "cs_ml", "ar1_reml", "ar1_ml", "cs_slope_reml", "cs_slope_ml",
           "crossed_ar1_reml", "crossed_ar1_ml",                # structured term first
           "crossed_cs_site_reml", "crossed_cs_site_ml"]        # … in the engine's rest block


@pytest.fixture(scope="module")
def data() -> pd.DataFrame:
    return pd.read_csv(DIR / "structured_lmm.csv")


_FITS: dict = {}


def _fit(data: pd.DataFrame, formula: str, REML: bool) -> sm.LmerResult:
    key = (formula, REML)
    if key not in _FITS:
        _FITS[key] = sm.lmer(formula, data, REML=REML)
    return _FITS[key]


def _cov(m: sm.LmerResult, group: str = "g") -> np.ndarray:
    """``Σ`` of the term of grouping factor ``group``."""
    k = [t.group_factor for t in m.spec.terms].index(group)
    return m.cov_re()[k]


@pytest.mark.parametrize("name", REF_IDS)
def test_matches_glmmtmb(data, name):
    ref = json.loads((DIR / f"{name}.json").read_text())
    m = _fit(data, ref["formula"], ref["REML"])
    crit = -2 * m.loglik
    assert crit == pytest.approx(ref["criterion"], rel=1e-6)
    assert crit <= ref["criterion"] * (1 + 1e-9)
    assert list(m.fixef.index) == list(ref["fixef"])
    np.testing.assert_allclose(m.fixef.to_numpy(), list(ref["fixef"].values()), atol=1e-4)
    np.testing.assert_allclose(m.se.to_numpy(), ref["se"], rtol=1e-3)
    S = _cov(m, ref["group"])
    sd = np.sqrt(np.diag(S))
    np.testing.assert_allclose(sd, ref["sd"], atol=1e-3)
    np.testing.assert_allclose(S / np.outer(sd, sd), np.array(ref["cor"]), atol=1e-3)
    assert m.sigma == pytest.approx(ref["sigma"], abs=1e-3)
    assert m.npar == ref["df"]
    assert m.converged and not m.singular


@pytest.mark.parametrize("name", ["cs_hom_reml", "cs_hom_ml"])
def test_cs_hom_matches_lmertest_equivalent(data, name):
    ref = json.loads((DIR / f"{name}.json").read_text())
    m = _fit(data, ref["formula"], ref["REML"])
    assert -2 * m.loglik == pytest.approx(ref["criterion"], rel=1e-6)
    np.testing.assert_allclose(m.fixef.to_numpy(), list(ref["fixef"].values()), atol=1e-4)
    S = _cov(m)
    sd = np.sqrt(np.diag(S))
    np.testing.assert_allclose(sd, ref["sd"], atol=1e-3)
    np.testing.assert_allclose(S[np.tril_indices(4, -1)] / ref["sd"] ** 2, ref["rho"], atol=1e-3)
    ct = m.coef_table("Satterthwaite")
    np.testing.assert_allclose(ct["Std. Error"].to_numpy(), ref["se"], rtol=1e-3)
    np.testing.assert_allclose(ct["df"].to_numpy(), ref["df_satterthwaite"], rtol=1e-3)
    assert m.npar == len(ref["fixef"]) + 2 + 1


def _dense_criterion(m: sm.LmerResult, S: np.ndarray, sigma: float) -> float:
    """``-2ℓ`` (ML) or ``-2ℓ_REML`` of ``y ~ N(Xβ, Z(I ⊗ S)Z' + σ²W^{-1})`` with β profiled
    (``W`` the prior weights, lme4's convention), by dense linear algebra (one random term)."""
    spec = m.spec
    t = spec.terms[0]
    y, X = np.asarray(spec.y, float), np.asarray(spec.X, float)
    n, p = X.shape
    w = np.ones(n) if spec.weights is None else np.asarray(spec.weights, float)
    Z = np.zeros((n, t.n_levels * t.p))
    for a in range(t.p):
        Z[np.arange(n), t.codes * t.p + a] = t.X[:, a]
    V = Z @ np.kron(np.eye(t.n_levels), S) @ Z.T + sigma ** 2 * np.diag(1 / w)
    C = np.linalg.cholesky(V)
    Xt, yt = np.linalg.solve(C, X), np.linalg.solve(C, y)
    beta = np.linalg.lstsq(Xt, yt, rcond=None)[0]
    r = yt - Xt @ beta
    out = 2 * np.sum(np.log(np.diag(C))) + r @ r + n * np.log(2 * np.pi)
    if m.REML:
        out += np.linalg.slogdet(Xt.T @ Xt)[1] - p * np.log(2 * np.pi)
    return float(out)


@pytest.mark.parametrize("formula", ["y ~ x + time + ar1(0 + time | g, hom = FALSE)",
                                     "y ~ x + time + cs(0 + time | g)",
                                     "y ~ x + time + ar1(0 + time | g)"])
@pytest.mark.parametrize("REML", [True, False])
def test_dense_likelihood_and_optimum(data, formula, REML):
    """The criterion equals the dense likelihood at the fitted (SDs, ρ, σ), and no move of
    ±1e-3 in one of them lowers it."""
    m = _fit(data, formula, REML)
    tmap = ThetaMap.of(m.spec.terms)
    nu = tmap.natural_from_theta(m.theta.to_numpy())
    assert -2 * m.loglik == pytest.approx(_dense_criterion(m, _cov(m), m.sigma), rel=1e-9)

    def crit(nu_, sigma):
        T = theta_to_T(tmap.theta_natural(nu_), tmap.term_p)[0]
        return _dense_criterion(m, sigma ** 2 * T @ T.T, sigma)

    c0 = crit(nu, m.sigma)
    for i in range(nu.size + 1):
        for h in (-1e-3, 1e-3):
            v, s = nu.copy(), m.sigma
            if i < nu.size:
                v[i] += h
            else:
                s += h
            assert crit(v, s) >= c0 - 1e-7


@pytest.mark.parametrize("REML", [True, False])
def test_prior_weights_dense_likelihood(data, REML):
    """Prior weights as lme4 takes them (``Var(ε_i) = σ²/w_i``; glmmTMB weights the
    log-likelihood instead, so it is no reference here): the criterion is the dense one."""
    d = data.assign(w=0.5 + (np.arange(len(data)) % 7) / 6)
    m = sm.lmer("y ~ x + time + ar1(0 + time | g)", d, weights="w", REML=REML)
    assert -2 * m.loglik == pytest.approx(_dense_criterion(m, _cov(m), m.sigma), rel=1e-9)
    unw = _fit(data, "y ~ x + time + ar1(0 + time | g)", REML)
    assert abs(m.loglik - unw.loglik) > 1.0     # the weights matter


@pytest.mark.parametrize("formula", ["y ~ x + time + cs(0 + time | g)",
                                     "y ~ x + time + ar1(0 + time | g)"])
def test_satterthwaite_against_finite_differences(data, formula):
    """Satterthwaite's ν from plain central differences in another parametrisation
    (optimiser's ``φ`` with ``z = logit/atanh ρ``, and ``log σ``) equals the reported df."""
    m = _fit(data, formula, True)
    tmap = structure_map(m)
    cp = m.cp
    phi = tmap.phi_from_natural(tmap.natural_from_theta(m.theta.to_numpy()))
    x0 = np.append(phi, np.log(m.sigma))
    k = tmap.n_phi

    def to_vp(x):
        return np.append(tmap.natural(x[:k]), np.exp(x[k]))

    def dev(x):
        return varpar_deviance(to_vp(x), cp, k, True, tmap)

    def vb(x):
        return varpar_vcov_beta(to_vp(x), cp, k, tmap)

    h = 1e-4
    n = x0.size
    H = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            ei, ej = np.eye(n)[i] * h, np.eye(n)[j] * h
            H[i, j] = (dev(x0 + ei + ej) - dev(x0 + ei - ej) - dev(x0 - ei + ej)
                       + dev(x0 - ei - ej)) / (4 * h * h)
    J = [(vb(x0 + np.eye(n)[i] * h) - vb(x0 - np.eye(n)[i] * h)) / (2 * h) for i in range(n)]
    A = 2 * np.linalg.inv((H + H.T) / 2)
    V = m.vcov.to_numpy()
    ct = m.coef_table("Satterthwaite")
    for b in range(len(m.fixef)):
        l_ = np.eye(len(m.fixef))[b]
        g = np.array([l_ @ Ji @ l_ for Ji in J])
        nu = 2 * (l_ @ V @ l_) ** 2 / (g @ A @ g)
        assert ct["df"].iloc[b] == pytest.approx(nu, rel=1e-3)


def test_kenward_roger_refused_and_ranova(data):
    m = _fit(data, "y ~ x + time + ar1(0 + time | g)", True)
    with pytest.raises(DdfError, match="Satterthwaite"):
        m.coef_table("Kenward-Roger")
    with pytest.raises(AnovaError, match="cs\\(\\)"):
        sm.ranova(m)


def test_anova_counts_structured_parameters(data):
    """LRT of ar1 (2 covariance parameters) within cs (5): Df = 3, Chisq = Δ deviance."""
    m1 = _fit(data, "y ~ x + time + ar1(0 + time | g)", False)
    m2 = _fit(data, "y ~ x + time + cs(0 + time | g)", False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tab = sm.anova(m1, m2)
    assert list(tab["npar"]) == [5 + 2 + 1, 5 + 5 + 1]
    assert tab["Df"].iloc[1] == 3
    assert tab["Chisq"].iloc[1] == pytest.approx(2 * (m2.loglik - m1.loglik), rel=1e-10)
    assert m2.aic == pytest.approx(-2 * m2.loglik + 2 * 11, rel=1e-12)


def test_printing_names_the_structure(data):
    txt = _fit(data, "y ~ x + time + ar1(0 + time | g)", True).summary()
    rho = _cov(_fit(data, "y ~ x + time + ar1(0 + time | g)", True))
    r = rho[1, 0] / rho[0, 0]
    assert f"{r:.2f} (ar1)" in txt
    assert "timet2" not in txt.split("Random effects:")[1].split("Residual")[0]
    txt = _fit(data, "y ~ x + time + cs(0 + time | g)", True).summary()
    assert "(cs)" in txt


def test_predict_and_simulate_use_the_structured_covariance(data):
    """``predict`` at the fitted rows is ``Xβ̂ + Zb̂`` with the dense BLUP
    ``b̂ = G Z'V^{-1}(y − Xβ̂)``; simulated group effects have the fitted ar1 covariance
    (200 × 60 groups: the lag-1 and lag-3 covariances within 0.05)."""
    m = _fit(data, "y ~ x + time + ar1(0 + time | g)", True)
    spec, t = m.spec, m.spec.terms[0]
    n = spec.n
    Z = np.zeros((n, t.n_levels * t.p))
    for a in range(t.p):
        Z[np.arange(n), t.codes * t.p + a] = t.X[:, a]
    G = np.kron(np.eye(t.n_levels), _cov(m))
    V = Z @ G @ Z.T + m.sigma ** 2 * np.eye(n)
    xb = np.asarray(spec.X) @ m.fixef.to_numpy()
    blup = G @ Z.T @ np.linalg.solve(V, np.asarray(spec.y) - xb)
    np.testing.assert_allclose(m.predict(data).to_numpy(), xb + Z @ blup, atol=1e-8)
    sims = m.simulate(200, seed=11).to_numpy()      # re_form = ~0: new random effects
    X = np.asarray(m.spec.X)
    e = sims - (X @ m.fixef.to_numpy())[:, None]
    g, t = data["g"].to_numpy(), data["time"].to_numpy()
    cell = pd.DataFrame(e).groupby([g, t]).mean()     # 3 replicates per (g, time): b + ε̄
    S = _cov(m)
    for lag in (1, 3):
        a = cell.xs("t1", level=1).to_numpy()
        b = cell.xs(f"t{1 + lag}", level=1).to_numpy()
        emp = float(np.mean(a * b))
        assert emp == pytest.approx(S[lag, 0], abs=0.05)


def test_refusals_are_named(data):
    d = data.assign(grp2=np.where(data["x"] > 0, "a", "b"))
    with pytest.raises(UnsupportedModelError, match="dispersion"):
        sm.lmer("y ~ x + time + ar1(0 + time | g)", d, dispersion="~grp2")


@pytest.mark.slow
@pytest.mark.parametrize("structure,rho", [("ar1", 0.6), ("cs", 0.4)])
def test_known_truth_recovered(structure, rho):
    """30 simulated data sets (100 groups × 4 times × 2 replicates, σ_b = 1, σ = 0.5): the
    mean ρ̂ is within 3 Monte-Carlo SEs of the truth, and ρ̂ varies by less than 0.1."""
    rng = np.random.default_rng(2026)
    n_g, n_t = 100, 4
    lag = np.abs(np.subtract.outer(np.arange(n_t), np.arange(n_t)))
    R = rho ** lag if structure == "ar1" else np.where(lag == 0, 1.0, rho)
    L = np.linalg.cholesky(R)
    g = np.repeat(np.arange(n_g), 2 * n_t)
    t = np.tile(np.arange(n_t), 2 * n_g)
    est = []
    for _ in range(30):
        b = rng.standard_normal((n_g, n_t)) @ L.T
        y = 1.0 + b[g, t] + 0.5 * rng.standard_normal(g.size)
        d = pd.DataFrame({"y": y, "g": [f"g{i}" for i in g], "time": [f"t{i}" for i in t]})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = sm.lmer(f"y ~ 1 + {structure}(0 + time | g)", d)
        nu = structure_map(m).natural_from_theta(m.theta.to_numpy())
        est.append(nu[-1])
    est = np.asarray(est)
    assert abs(est.mean() - rho) < 3 * est.std(ddof=1) / np.sqrt(est.size)
    assert est.std(ddof=1) < 0.1


@pytest.mark.r
def test_live_glmmtmb(rscript, data, tmp_path):
    """Re-fit ``ar1`` (REML) with glmmTMB now and compare criterion and ρ."""
    script = (
        "suppressMessages(library(glmmTMB)); d <- read.csv('%s', stringsAsFactors = TRUE);"
        "m <- glmmTMB(y ~ x + time + ar1(0 + time | g), data = d, REML = TRUE);"
        "cat(format(-2 * as.numeric(logLik(m)), digits = 15), "
        "attr(VarCorr(m)$cond$g, 'correlation')[2, 1])" % (DIR / "structured_lmm.csv"))
    try:
        out = subprocess.run([rscript, "-e", script], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.skip("R timed out")
    if out.returncode != 0 or "there is no package" in out.stderr:
        pytest.skip(f"glmmTMB is not usable: {out.stderr[-200:]}")
    crit, rho = map(float, out.stdout.split()[-2:])
    m = _fit(data, "y ~ x + time + ar1(0 + time | g)", True)
    assert -2 * m.loglik == pytest.approx(crit, rel=1e-6)
    S = _cov(m)
    assert S[1, 0] / S[0, 0] == pytest.approx(rho, abs=1e-3)


@pytest.mark.slow
def test_profile_confint_matches_lme4_equivalent(data):
    """Profile intervals of σ and β (invariant to how the other parameters are written) of
    ``cs(…, hom = TRUE)`` equal lme4's for ``(1 | g) + (1 | g:time)`` (ML fits, 1e-4
    relative); the structured rows (SD, ρ) contain the estimate and ρ's lies in (-1/3, 1)."""
    ref = json.loads((DIR / "cs_hom_ml.json").read_text())
    m = _fit(data, ref["formula"], False)
    ci = m.confint(progress=False)
    prof = ref["profile"]
    names = [".sigma" if n == "sigma" else n for n in prof["names"]]
    np.testing.assert_allclose(ci.loc[names].iloc[:, 0].to_numpy(), prof["lower"], rtol=1e-4)
    np.testing.assert_allclose(ci.loc[names].iloc[:, 1].to_numpy(), prof["upper"], rtol=1e-4)
    assert list(ci.index[:3]) == [".sig01", ".sig02", ".sigma"]
    sd, rho = np.sqrt(_cov(m)[0, 0]), _cov(m)[1, 0] / _cov(m)[0, 0]
    assert ci.iloc[0, 0] < sd < ci.iloc[0, 1]
    assert -1 / 3 < ci.iloc[1, 0] < rho < ci.iloc[1, 1] < 1


def test_other_backends_refuse_by_name(data):
    with pytest.raises(UnsupportedModelError, match="backend='native'"):
        sm.lmer("y ~ x + time + ar1(0 + time | g)", data, backend="statsmodels")


def test_all_fit_and_convergence_use_the_structure(data):
    """``all_fit`` optimisers search (SDs, ρ), so they reach the same constrained optimum;
    the convergence check differentiates over them (the θ-gradient is not 0 there)."""
    from scoremix.lme.singularity import convergence
    m = _fit(data, "y ~ x + time + ar1(0 + time | g)", True)
    conv = convergence(m)
    assert conv["ok"] and conv["scaled_grad"] < 1e-4
    af = sm.all_fit(m, optimizers=("native", "L-BFGS-B", "Powell"))
    np.testing.assert_allclose(af.llik.to_numpy(), m.loglik, rtol=1e-9)
    refit = sm.lmer("y ~ x + time + ar1(0 + time | g)", data,
                    control=dict(theta_start=m.theta.to_numpy() * 1.2))
    assert refit.loglik == pytest.approx(m.loglik, rel=1e-10)


def test_transformation_model_refuses_by_name(data):
    from scoremix.transform.fit import TransformError
    with pytest.raises(TransformError, match="cs\\(\\)/ar1\\(\\)"):
        sm.lmer("y ~ x + time + ar1(0 + time | g)", data, transform="monotone")


def test_bayesian_models_refuse_by_name(data):
    """The Bayesian models have no cs()/ar1() prior: a named error, not an LKJ fit."""
    from scoremix.bayes.checks import refuse_structured
    from scoremix.lme.model_frame import build_model_spec
    spec = build_model_spec("y ~ x + time + ar1(0 + time | g)", data)
    with pytest.raises(UnsupportedModelError, match="Bayesian"):
        refuse_structured(spec)
    refuse_structured(build_model_spec("y ~ x + time + (1 | g)", data))   # no error
