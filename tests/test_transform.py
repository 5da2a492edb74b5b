"""Transformation (latent-Gaussian) mixed models: ``lmer(..., transform="monotone")``.

Independent checks: the cell log-probability against mpmath at 60 digits; every analytic
derivative (the Laplace objective's gradient, the joint information) against finite
differences; ``ordinal::clm`` / ``clmm`` references (tests/data/transform, made by
r_scripts/make_transform_refs.py, live when R has ``ordinal``); exact rank invariance;
recovery of an affine transform on data simulated from a Gaussian LMM; named errors.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import scoremix as sm
from scoremix.transform.basis import make_basis
from scoremix.transform.cells import make_cells
from scoremix.transform.fit import _problem, _start  # noqa: F401  (white-box checks below)
from scoremix.transform.laplace import LaplaceState, laplace
from scoremix.transform.likelihood import log_interval_prob, row_derivs
from scoremix.transform.vcov import joint_information

sys.path.insert(0, str(Path(__file__).resolve().parent))
from transform_helpers import binned_data  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "transform"
LA_FORMULA = 'score ~ label + (1|speaker) + (0 + dummy(label, "spoof")|attack)'


def _sim(n=500, seed=1, rounding=None, n_spk=10, n_att=4):
    rng = np.random.default_rng(seed)
    spk = rng.integers(0, n_spk, n)
    att = rng.integers(0, n_att, n)
    spoof = rng.random(n) < 0.6
    z = (np.where(spoof, -1.5, 0.0) + rng.normal(0, 0.5, n_spk)[spk]
         + np.where(spoof, rng.normal(0, 0.7, n_att)[att], 0.0)
         + rng.normal(0, 1, n) * np.where(spoof, 1.3, 1.0))
    s = np.exp(z / 2)
    if rounding is not None:
        s = np.round(s, rounding)
    return pd.DataFrame(dict(score=s, label=np.where(spoof, "spoof", "bonafide"),
                             speaker=[f"s{i}" for i in spk], attack=[f"A{i}" for i in att],
                             x=rng.normal(size=n)))


# ----------------------------------------------------------------------------- likelihood
def test_log_interval_prob_matches_mpmath_in_both_tails():
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 60
    rng = np.random.default_rng(0)
    a = rng.normal(0, 4, 300)
    b = a + np.exp(rng.normal(-2, 3, 300))
    a = np.r_[a, -np.inf, -np.inf, 38.0, -40.0, 8.2, -8.3, 3.0, -np.inf, 0.1]
    b = np.r_[b, 1.0, np.inf, 39.0, -39.5, 8.2 + 1e-9, -8.3 + 1e-12, np.inf, -37.0, 0.1 + 1e-13]

    def F(x):
        return mp.mpf(1) if x == np.inf else mp.mpf(0) if x == -np.inf else mp.ncdf(mp.mpf(x))

    def D(x, y):   # Φ(y) - Φ(x), exactly (the upper tail through symmetry)
        return F(-x) - F(-y) if x > 0 else F(y) - F(x)

    ref = np.array([float(mp.log(D(x, y))) for x, y in zip(a, b)])
    d = row_derivs(a, b)
    assert np.max(np.abs(d.ll - ref) / np.maximum(1, np.abs(ref))) < 1e-10
    refpa = np.array([float(mp.npdf(mp.mpf(x)) / D(x, y)) if np.isfinite(x) else 0.0
                      for x, y in zip(a, b)])
    ok = refpa > 0
    assert np.max(np.abs(d.pa[ok] - refpa[ok]) / refpa[ok]) < 1e-8
    assert np.all(d.pa[~ok] == 0)
    # the log-space path alone (used in the extreme tails) agrees too
    mid = np.isfinite(ref) & (b - a > 1e-6)
    assert np.allclose(log_interval_prob(a[mid], b[mid]), ref[mid], rtol=1e-10, atol=1e-12)


def test_third_derivatives_match_finite_differences():
    rng = np.random.default_rng(3)
    a = np.r_[rng.normal(0, 2, 50), -np.inf]
    b = np.r_[a[:50] + np.exp(rng.normal(-1, 1, 50)), 0.7]
    d = row_derivs(a, b, third=True)
    h = 1e-6
    fa = np.isfinite(a)
    Ma = np.where(fa, (row_derivs(np.where(fa, a + h, a), b).M - row_derivs(np.where(fa, a - h, a), b).M)
                  / (2 * h), 0.0)
    Mb = (row_derivs(a, b + h).M - row_derivs(a, b - h).M) / (2 * h)
    assert np.allclose(d.Ma, Ma, atol=1e-6)
    assert np.allclose(d.Mb, Mb, atol=1e-6)


# ----------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("formula,disp,kw", [
    (LA_FORMULA, "~ label", dict(max_free=30, n_knots=8, min_edges=5)),       # sieve, 2 scalar terms
    ("score ~ label + x + (1 + x | speaker)", "~ label", dict(max_free=200)),  # free cutpoints, 2×2 term
    ("score ~ label + x", None, dict(max_free=30, n_knots=8, min_edges=5)),   # no random effects
])
def test_laplace_gradient_matches_finite_differences(formula, disp, kw):
    d = _sim(n=300, rounding=1, seed=5)
    spec = sm.build_model_spec(formula, d, dispersion=disp)
    cells = make_cells(spec.y)
    basis = make_basis(cells.u_edge, **kw)
    P, icpt = _problem(spec, cells, basis)
    x = _start(spec, cells, basis, P, icpt)
    x = x + np.random.default_rng(0).normal(0, 0.05, x.size)
    st = LaplaceState(u=np.zeros(P.q))
    f, g = laplace(x, P, st, tol=1e-15)
    gn = np.empty_like(x)
    for i in range(x.size):
        h = 1e-5
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        gn[i] = (laplace(xp, P, st, grad=False, tol=1e-15)
                 - laplace(xm, P, st, grad=False, tol=1e-15)) / (2 * h)
    assert np.max(np.abs(g - gn)) < 1e-5 * max(1.0, np.max(np.abs(g)))


def test_joint_information_matches_finite_difference_hessian():
    """Without random effects the joint information is minus the Hessian of the exact
    log-likelihood in (knot values c, β, ζ)."""
    d = _sim(n=300, rounding=1, seed=2)
    spec = sm.build_model_spec("score ~ label + x", d, dispersion="~ label")
    cells = make_cells(spec.y)
    basis = make_basis(cells.u_edge, max_free=30, n_knots=6, min_edges=5)
    P, icpt = _problem(spec, cells, basis)
    x = _start(spec, cells, basis, P, icpt)
    nt = basis.n_par
    st = LaplaceState(u=np.zeros(0))
    laplace(x, P, st)
    ex = st.extra
    Hj = joint_information(P, ex["alpha"], ex["eta"], ex["sig"], ex["Zt"])

    def f_of(v):   # v = [c, β, ζ] → f
        xx = np.concatenate([basis.par_from_c(v[:nt]), v[nt:]])
        return laplace(xx, P, LaplaceState(u=np.zeros(0)), grad=False)

    v0 = np.concatenate([basis.knot_values(x[:nt]), x[nt:]])
    k = v0.size
    H = np.empty((k, k))
    h = 1e-4
    for i in range(k):
        for j in range(k):
            e_i, e_j = np.eye(k)[i] * h, np.eye(k)[j] * h
            H[i, j] = (f_of(v0 + e_i + e_j) - f_of(v0 + e_i - e_j) - f_of(v0 - e_i + e_j)
                       + f_of(v0 - e_i - e_j)) / (4 * h * h)
    assert np.allclose(Hj, H, rtol=1e-4, atol=1e-3 * np.abs(H).max())


# ----------------------------------------------------------------------------- R ordinal
def _ordinal_fit(kind):
    d = pd.read_csv(DATA / f"{kind}_data.csv")
    if kind == "clm":
        return d, sm.lmer("bin ~ label", d, dispersion="~ label", transform="monotone")
    return d, sm.lmer("bin ~ label + (1|speaker)", d, transform="monotone")


def _compare(kind, fit, ref, tol_par, tol_ll):
    alpha = fit.transform.alpha - fit.fixef["(Intercept)"]      # clm's thresholds
    assert np.max(np.abs(alpha - np.asarray(ref["thresholds"]))) < tol_par
    assert abs(fit.fixef["labelspoof"] - ref["beta"]) < tol_par
    assert abs(fit.loglik - ref["loglik"]) < tol_ll
    if kind == "clm":
        assert abs(np.log(fit.sigma_by["spoof"]) - ref["zeta"]) < tol_par
        assert abs(fit.vcov.loc["labelspoof", "labelspoof"] / ref["vcov_beta"] - 1) < 1e-4
    else:
        assert abs(np.sqrt(fit.varcorr["vcov"].iloc[0]) - ref["sd_speaker"]) < tol_par


def test_equals_clm_on_binned_scores():
    _, fit = _ordinal_fit("clm")
    assert fit.fit_info["transform"]["free"]
    _compare("clm", fit, json.loads((DATA / "clm_ref.json").read_text()), 1e-5, 1e-6)


def test_equals_clmm_with_random_intercepts():
    _, fit = _ordinal_fit("clmm")
    _compare("clmm", fit, json.loads((DATA / "clmm_ref.json").read_text()), 1e-3, 1e-3)


def _r_has_ordinal() -> bool:
    r = shutil.which("Rscript")
    if r is None:
        return False
    out = subprocess.run([r, "-e", "suppressMessages({library(ordinal); library(jsonlite)}); cat('ok')"],
                         capture_output=True, text=True, timeout=120)
    return out.stdout.strip().endswith("ok")


@pytest.mark.parametrize("kind", ["clm", "clmm"])
def test_live_ordinal(kind, tmp_path):
    if not _r_has_ordinal():
        pytest.skip("R with ordinal and jsonlite is not installed (apt-get install r-cran-ordinal)")
    d, fit = _ordinal_fit(kind)
    csv = tmp_path / "d.csv"
    d.to_csv(csv, index=False)
    out = tmp_path / "o.json"
    script = Path(__file__).resolve().parents[1] / "r_scripts" / "fit_clm.R"
    subprocess.run(["Rscript", str(script), str(csv), str(out), kind], check=True, timeout=600)
    _compare(kind, fit, json.loads(out.read_text()), 1e-5 if kind == "clm" else 1e-3,
             1e-6 if kind == "clm" else 1e-3)


# ----------------------------------------------------------------------------- invariance
def test_rank_invariance_of_the_model_eer():
    """logit / probability / rank / sinh(s/3) (and ±inf saturated ends) give one fit."""
    d = _sim(n=400, seed=8)
    z = np.log(d["score"].to_numpy()) * 2          # the latent-ish logit
    z[:5] = np.inf                                  # saturated scores: probabilities of 1
    z[5:9] = -np.inf
    with np.errstate(over="ignore"):
        versions = {"logit": z, "prob": 1 / (1 + np.exp(-z)),
                    "rank": pd.Series(z).rank(method="dense").to_numpy(), "sinh": np.sinh(z / 3)}
    eers, lls = [], []
    for name, s in versions.items():
        fit = sm.lmer(LA_FORMULA, d.assign(score=s), dispersion="~ label", transform="monotone")
        eers.append(sm.model_eer(fit, positive="bonafide"))
        lls.append(fit.loglik)
    assert np.ptp(eers) <= 1e-9
    assert np.ptp(lls) <= 1e-9 * abs(lls[0])


# ----------------------------------------------------------------------------- Gaussian data
def test_gaussian_lmm_data_gives_an_affine_transform_and_lmer_estimates():
    """Scores simulated from a Gaussian LMM: h is affine within sampling error, and after
    that affine map (slope = 1/σ̂_lmer) the estimates equal lmer's (ML) within sampling
    error of the transform (β within 1 SE, variance parameters within a few %) (the transformation model spends its extra knots on
    noise, so the agreement is statistical, not exact)."""
    rng = np.random.default_rng(21)
    n, ns = 3000, 30
    spk = rng.integers(0, ns, n)
    spoof = rng.random(n) < 0.5
    y = 2.0 + 1.5 * spoof + rng.normal(0, 0.6, ns)[spk] + rng.normal(0, 1, n) * np.where(spoof, 0.8, 0.5)
    d = pd.DataFrame(dict(score=y, label=np.where(spoof, "spoof", "bonafide"),
                          speaker=[f"s{i}" for i in spk]))
    f = "score ~ label + (1|speaker)"
    g = sm.lmer(f, d, dispersion="~ label", REML=False)
    t = sm.lmer(f, d, dispersion="~ label", transform="monotone")
    s = t.transform.values[:-1]
    a = t.transform.alpha
    A = np.c_[np.ones_like(s), s]
    coef, *_ = np.linalg.lstsq(A, a, rcond=None)
    # affine: the fitted h deviates from its least-squares line by far less than its range
    inner = (s > np.quantile(y, 0.01)) & (s < np.quantile(y, 0.99))
    resid = a - A @ coef
    assert np.max(np.abs(resid[inner])) < 0.05 * np.ptp(a[inner])
    # the affine map's slope is 1/σ_bonafide of lmer; estimates agree after mapping
    slope = coef[1]
    assert abs(slope * g.sigma_by["bonafide"] - 1) < 0.02
    assert abs(t.fixef["labelspoof"] / slope - g.fixef["labelspoof"]) < 1 * g.se["labelspoof"]
    assert abs(t.sigma_by["spoof"] - g.sigma_by["spoof"] / g.sigma_by["bonafide"]) < 0.03
    sd_t = np.sqrt(t.varcorr["vcov"].iloc[0]) / slope
    sd_g = np.sqrt(g.varcorr["vcov"].iloc[0])
    assert abs(sd_t / sd_g - 1) < 0.05
    r = np.corrcoef(t.ranef["speaker"].iloc[:, 0], g.ranef["speaker"].iloc[:, 0])[0, 1]
    assert r > 0.995


# ----------------------------------------------------------------------------- the transform
def test_monotone_transform_maps_thresholds_with_one_sided_limits():
    d = _sim(n=300, rounding=1, seed=4)
    fit = sm.lmer("score ~ label", d, dispersion="~ label", transform="monotone")
    h = fit.transform
    v, a = h.values, h.alpha
    assert h.n_cells == v.size == a.size + 1 == d["score"].nunique()
    # at a fitted score: upper = α_k, lower = α_{k-1}; between scores both = the next edge below
    k = 3
    assert h.upper(v[k]) == a[k] and h.lower(v[k]) == a[k - 1]
    mid = (v[k] + v[k + 1]) / 2
    assert h.upper(mid) == h.lower(mid) == a[k]
    assert h.lower(v[0]) == -np.inf and h.upper(v[-1]) == np.inf
    # FNR(τ) = P(S < τ | pos) by the model equals the mean of Φ((h⁻(τ) − m)/s) — check the
    # model's cell probabilities sum to one and reproduce P(S ≤ s_k) for each row
    from scipy.special import ndtr
    m = fit.fitted.to_numpy()
    sd = fit.sigma_by.to_numpy()[fit.spec.dispersion_codes]
    cdf = ndtr((h.upper(v)[None, :] - m[:, None]) / sd[:, None])
    assert np.allclose(cdf[:, -1], 1.0) and np.all(np.diff(cdf, axis=1) > 0)
    # the continuous map: strictly increasing, agrees with upper() at fitted scores, inverse
    grid = np.linspace(v[0] - 1, v[-1] + 1, 1001)
    assert np.all(np.diff(h(grid)) > 0)
    assert np.allclose(h(v[:-1]), a)
    assert np.allclose(h.inverse(h(grid)), grid)
    assert h(np.inf) == np.inf and h(-np.inf) == -np.inf and np.isnan(h(np.nan))
    # json round trip
    h2 = sm.MonotoneTransform.from_dict(json.loads(json.dumps(h.to_dict())))
    assert np.array_equal(h2.alpha, h.alpha) and np.array_equal(h2.values, h.values)


def test_result_is_latent_lmer_result():
    d = _sim(n=400, seed=6)
    fit = sm.lmer(LA_FORMULA, d, dispersion="~ label", transform="monotone")
    assert isinstance(fit, sm.LmerResult) and isinstance(fit, sm.TransformLmerResult)
    assert sm.lmer("score ~ label + (1|speaker)", d).transform is None
    assert fit.sigma == 1.0 and fit.sigma_by["bonafide"] == 1.0
    # fitted = Xβ + Zb on the latent scale; predict(newdata) agrees
    assert np.allclose(fit.predict(d), fit.fitted)
    # generalised residuals are finite and centred
    r = fit.residuals
    assert np.all(np.isfinite(r)) and abs(r.mean()) < 0.1
    info = fit.fit_info["transform"]
    assert info["converged"] and info["n_cells"] == d["score"].nunique()
    assert "Transformation" in fit.summary()
    assert fit.to_dict()["transform"]["kind"] == "monotone"
    assert np.all(np.isfinite(fit.vcov.to_numpy()))
    assert fit.ranef_condsd["speaker"].to_numpy().min() > 0


# ----------------------------------------------------------------------------- bad input
def test_all_scores_tied_is_named():
    d = _sim(n=50).assign(score=0.3)
    with pytest.raises(sm.AllScoresTiedError, match="'score'.*tied"):
        sm.lmer("score ~ label", d, transform="monotone")


def test_fewer_than_three_distinct_scores_is_named():
    d = _sim(n=50)
    d["score"] = np.where(d["label"] == "spoof", 0.0, 1.0)
    with pytest.raises(sm.TooFewDistinctScoresError, match="only 2 distinct"):
        sm.lmer("score ~ label", d, transform="monotone")


def test_one_class_is_named():
    d = _sim(n=50).assign(label="spoof")
    with pytest.raises(sm.SingleClassError, match="'label'"):
        sm.lmer("score ~ label", d, transform="monotone")
    d2 = _sim(n=50)
    d2["grp"] = "a"
    with pytest.raises(sm.SingleClassError, match="'grp'"):
        sm.lmer("score ~ label", d2, dispersion="~ grp", transform="monotone")


def test_unknown_transform_backend_and_weights_are_errors():
    d = _sim(n=60)
    with pytest.raises(ValueError, match="unknown transform 'log'"):
        sm.lmer("score ~ label", d, transform="log")
    with pytest.raises(ValueError, match="native engine only"):
        sm.lmer("score ~ label", d, transform="monotone", backend="statsmodels")
    with pytest.raises(sm.TransformError, match="weights"):
        sm.lmer("score ~ label", d.assign(w=1.0), transform="monotone", weights="w")


def test_non_convergence_warns():
    d = _sim(n=300, seed=3)
    with pytest.warns(sm.ConvergenceWarning, match="failed to converge"):
        sm.lmer(LA_FORMULA, d, dispersion="~ label", transform="monotone",
                control=dict(maxiter=2, max_rounds=1))
