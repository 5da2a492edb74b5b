"""Denominator degrees of freedom for t and F tests of fixed effects (lmerTest's methods).

Satterthwaite (lmerTest's default)
----------------------------------
The variance parameters are ``τ = (θ, σ)`` (lmerTest's ``varpar``; a dispersion model adds
the residual SDs ``σ_d = σ·sqrt(ρ_d)`` of its other levels; lme4 2.0's ``cs()``/``ar1()``
terms contribute their natural parameters, the relative SDs and ``ρ``, instead of their ``θ``
elements, see :mod:`scoremix.lme.covstruct`; at an interior optimum the df are invariant to
that choice of parametrisation).  With β profiled out the
deviance at ``τ`` is

.. math::

    d_{ML}(\\tau) = \\log|L_\\theta|^2 - \\log|W| + r^2_\\theta/\\sigma^2 + n\\log(2\\pi\\sigma^2),
    \\qquad d_{REML}(\\tau) = d_{ML}(\\tau) + \\log|R_X|^2 - p\\log(2\\pi\\sigma^2)

(lmerTest's ``devfun_vp``), and ``Var(β̂)(τ) = σ² (R_X'R_X)^{-1}`` (``get_covbeta``).  At
the estimate ``τ̂``, ``A = 2 H^{-1}`` with ``H`` the Hessian of ``d`` (pseudo-inverse over
eigenvalues ``> 1e-8``, as lmerTest) is the asymptotic covariance of ``τ̂``, and
``J_i = ∂Var(β̂)/∂τ_i``.  For a contrast ``l`` (one row)

.. math::

    \\nu = \\frac{2 (l'Vl)^2}{g'Ag},\\qquad g_i = l' J_i l,

and ``t = l'β̂ / sqrt(l'Vl)`` with ``P(>|t|) = 2 P(T_ν > |t|)``.  For a ``q``-row ``L``
the F statistic is ``F = Σ_m t_m² / q`` over the eigen-decomposition ``LVL' = PDP'``
(rows ``P'L`` with eigenvalues above ``sqrt(eps)·d_1``), each row has its own ``ν_m``, and
the denominator df is ``2E/(E − q)``, ``E = Σ_m ν_m/(ν_m − 2)`` (2 when a ``ν_m ≤ 2``) as
lmerTest's ``get_Fstat_ddf``.  ``H`` and ``J`` are computed as lmerTest computes them,
by numDeriv's Richardson extrapolation (:mod:`scoremix.lme.numderiv`).

Kenward–Roger
-------------
See :mod:`scoremix.lme.kenward_roger`.
"""

from __future__ import annotations

import warnings
import weakref
from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.linalg as sla
from scipy import stats

from scoremix.lme.covstruct import ThetaMap, is_structured
from scoremix.lme.crossprod import CrossProducts, crossproducts
from scoremix.lme.factor import factorize
from scoremix.lme.errors import DdfError
from scoremix.lme.numderiv import richardson_hessian, richardson_jacobian
from scoremix.lme.result import LmerResult, register_inference

# ``LmerResult`` does not import this module: it is registered as the implementation of the
# result's ``coef_table`` / ``summary(ddf=)`` (``register_inference`` at the end).

__all__ = [
    "DDF_METHODS",
    "DdfError",
    "SatterthwaiteInfo",
    "satterthwaite_info",
    "varpar_deviance",
    "varpar_vcov_beta",
    "contest_1d",
    "contest_md",
    "coef_table",
    "normalize_ddf",
    "model_crossproducts",
    "varpar_hat",
    "structure_map",
]

DDF_METHODS = ("Satterthwaite", "Kenward-Roger", "lme4")


def normalize_ddf(ddf: str) -> str:
    """Accept lmerTest's spellings case-insensitively: ``"Satterthwaite"``,
    ``"Kenward-Roger"`` (also ``"KR"``), ``"lme4"``."""
    key = str(ddf).lower().replace("_", "-").replace(" ", "-")
    table = {"satterthwaite": "Satterthwaite", "satt": "Satterthwaite",
             "kenward-roger": "Kenward-Roger", "kr": "Kenward-Roger", "kenwardroger": "Kenward-Roger",
             "lme4": "lme4"}
    if key not in table:
        raise ValueError(f"unknown ddf method {ddf!r}; choose one of {DDF_METHODS}")
    return table[key]


# ------------------------------------------------------------------ deviance in (θ, σ)
def _split(varpar: np.ndarray, n_theta: int,
           tmap: ThetaMap | None = None) -> tuple[np.ndarray, float, np.ndarray | None]:
    theta = varpar[:n_theta] if tmap is None else tmap.theta_natural(varpar[:n_theta])
    sigma = float(varpar[n_theta])
    rho = None
    if varpar.size > n_theta + 1:
        rho = np.concatenate([[1.0], (varpar[n_theta + 1:] / sigma) ** 2])
    return theta, sigma, rho


def varpar_deviance(varpar: np.ndarray, cp: CrossProducts, n_theta: int, reml: bool,
                    tmap: ThetaMap | None = None) -> float:
    """``-2ℓ`` (ML) or ``-2ℓ_REML`` at the variance parameters ``τ = (θ, σ[, σ_2 … σ_D])``
    with β profiled out (the module docstring's ``d(τ)``; the constant ``Σ log w_i`` of
    prior weights is left out, as lmerTest does).  With ``tmap`` (models with
    ``cs()``/``ar1()`` terms) the first ``n_theta`` entries are the natural parameters ``ν``
    of :class:`~scoremix.lme.covstruct.ThetaMap` (SDs and ``ρ``) and ``θ = θ(ν)``."""
    varpar = np.asarray(varpar, dtype=float)
    theta, sigma, rho = _split(varpar, n_theta, tmap)
    f = factorize(theta, cp, rho, need_lr1=False)
    s2 = sigma ** 2
    dev = f.ldL2 - (f.ldW - cp.sum_log_w) + f.pwrss / s2 + cp.n * np.log(2 * np.pi * s2)
    if reml:
        dev += f.ldRX2 - cp.p * np.log(2 * np.pi * s2)
    return float(dev)


def varpar_vcov_beta(varpar: np.ndarray, cp: CrossProducts, n_theta: int,
                     tmap: ThetaMap | None = None) -> np.ndarray:
    """``Var(β̂)(τ) = σ² (R_X'R_X)^{-1}`` at ``τ = (θ, σ[, σ_d])`` (``θ = θ(ν)`` with
    ``tmap``, as :func:`varpar_deviance`)."""
    varpar = np.asarray(varpar, dtype=float)
    theta, sigma, rho = _split(varpar, n_theta, tmap)
    f = factorize(theta, cp, rho, need_lr1=False)
    qr, p = f.q_rest, cp.p
    RX = f.Lrr[qr: qr + p, qr: qr + p]
    RXinv = sla.solve_triangular(RX, np.eye(p), lower=True)
    return sigma ** 2 * RXinv.T @ RXinv


@dataclass
class SatterthwaiteInfo:
    """What Satterthwaite's method needs, computed once per fit.

    Attributes
    ----------
    varpar:
        ``τ̂ = (θ̂, σ̂[, σ̂_d])``.
    names:
        names of ``τ`` (θ names, ``"sigma"``, ``"sigma.<level>"``).
    vcov_beta:
        ``Var(β̂)`` at ``τ̂``.
    hessian:
        Hessian of the deviance ``d(τ)`` at ``τ̂``.
    vcov_varpar:
        ``A = 2 H^+`` (pseudo-inverse over eigenvalues above ``tol``).
    jac:
        ``(k, p, p)``: ``J_i = ∂Var(β̂)/∂τ_i``.
    messages:
        lmerTest's warnings about the Hessian (negative or near-zero eigenvalues).
    """

    varpar: np.ndarray
    names: list[str]
    vcov_beta: np.ndarray
    hessian: np.ndarray
    vcov_varpar: np.ndarray
    jac: np.ndarray
    messages: list[str]


_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def model_crossproducts(m: LmerResult) -> CrossProducts:
    """The fit's cross-products (kept by native fits, recomputed from the spec otherwise)."""
    if m.cp is not None:
        return m.cp
    if m.spec is None:
        raise DdfError("degrees of freedom need the model spec; build the result with "
                       "LmerResult.from_dict(d, spec)")
    return crossproducts(m.spec)


def structure_map(m: LmerResult) -> ThetaMap | None:
    """The fit's :class:`~scoremix.lme.covstruct.ThetaMap` when it has ``cs()``/``ar1()``
    terms, else ``None``."""
    if m.spec is not None and is_structured(m.spec.terms):
        return ThetaMap.of(m.spec.terms)
    return None


def varpar_hat(m: LmerResult) -> tuple[np.ndarray, list[str]]:
    """``τ̂ = (θ̂, σ̂[, σ̂_2 … σ̂_D])`` and its names; with ``cs()``/``ar1()`` terms the
    natural parameters ``ν̂`` (SDs, ``ρ``) replace ``θ̂``."""
    tmap = structure_map(m)
    if tmap is None:
        vals = list(m.theta.to_numpy()) + [m.sigma]
        names = list(m.theta.index) + ["sigma"]
    else:
        vals = list(tmap.natural_from_theta(m.theta.to_numpy())) + [m.sigma]
        names = tmap.natural_names(m.spec.terms) + ["sigma"]
    if m.sigma_by is not None and len(m.sigma_by) > 1:
        vals += list(m.sigma_by.to_numpy()[1:])
        names += [f"sigma.{lev}" for lev in list(m.sigma_by.index)[1:]]
    return np.asarray(vals, dtype=float), names


def satterthwaite_info(m: LmerResult, tol: float = 1e-8) -> SatterthwaiteInfo:
    """Hessian of ``d(τ)`` and Jacobian of ``Var(β̂)(τ)`` at ``τ̂`` (lmerTest's
    ``as_lmerModLmerTest``), cached per fit.

    Warns
    -----
    UserWarning
        lmerTest's ``"Model failed to converge with k negative eigenvalue(s)"`` and
        ``"Model may not have converged with k eigenvalue(s) close to zero"``.
    """
    if m in _CACHE:
        return _CACHE[m]
    cp = model_crossproducts(m)
    vp, names = varpar_hat(m)
    tmap = structure_map(m)
    nt = len(m.theta) if tmap is None else tmap.n_phi
    reml = m.REML
    H = richardson_hessian(lambda x: varpar_deviance(x, cp, nt, reml, tmap), vp)
    H = (H + H.T) / 2
    evals, evecs = np.linalg.eigh(H)
    order = np.argsort(evals)[::-1]
    evals, evecs = evals[order], evecs[:, order]
    msgs = []
    neg = evals < -tol
    zero = (evals > -tol) & (evals < tol)
    if neg.any():
        word = "eigenvalues" if neg.sum() > 1 else "eigenvalue"
        msgs.append(f"Model failed to converge with {int(neg.sum())} negative {word}: "
                    + " ".join(f"{v:.1e}" for v in evals[neg]))
    if zero.any():
        word = "eigenvalues" if zero.sum() > 1 else "eigenvalue"
        msgs.append(f"Model may not have converged with {int(zero.sum())} {word} close to zero: "
                    + " ".join(f"{v:.1e}" for v in evals[zero]))
    for msg in msgs:
        warnings.warn(msg, UserWarning, stacklevel=3)
    pos = evals > tol
    V = evecs[:, pos]
    A = 2 * (V / evals[pos]) @ V.T
    p = len(m.fixef)
    Jflat = richardson_jacobian(lambda x: varpar_vcov_beta(x, cp, nt, tmap).ravel(), vp)
    jac = np.stack([Jflat[:, i].reshape(p, p) for i in range(vp.size)])
    info = SatterthwaiteInfo(varpar=vp, names=names, vcov_beta=m.vcov.to_numpy(), hessian=H,
                             vcov_varpar=A, jac=jac, messages=msgs)
    _CACHE[m] = info
    return info


# ------------------------------------------------------------------ contrasts
def _qform(x: np.ndarray, A: np.ndarray) -> float:
    return float(x @ A @ x)


def _check_fit(m: LmerResult) -> None:
    if m.spec is None and m.cp is None:
        raise DdfError("degrees of freedom need the model spec; build the result with "
                       "LmerResult.from_dict(d, spec)")


def _latent_reference(m: LmerResult, method: str) -> LmerResult | None:
    """For a transformation fit (it has ``latent_gaussian_fit``): the Gaussian model of its
    latent responses, whose df are invariant to monotone maps of the scores; else ``None``."""
    fn = getattr(m, "latent_gaussian_fit", None)
    return fn() if fn is not None and method in ("Satterthwaite", "Kenward-Roger") else None


def contest_1d(m: LmerResult, L: np.ndarray, ddf: str = "Satterthwaite") -> dict[str, float]:
    """t test of ``l'β = 0`` for one contrast row ``l`` (lmerTest's ``contest1D``).

    Returns
    -------
    dict
        ``Estimate``, ``Std. Error``, ``df``, ``t value``, ``Pr(>|t|)``.
    """
    method = normalize_ddf(ddf)
    L = np.asarray(L, dtype=float).ravel()
    beta = m.fixef.to_numpy()
    if L.size != beta.size:
        raise ValueError(f"contrast has {L.size} entries, the model has {beta.size} fixed effects")
    est = float(L @ beta)
    latent = _latent_reference(m, method)
    if latent is not None:
        # transformation fit: its own estimate and SE; df of the latent Gaussian model
        se = float(np.sqrt(_qform(L, m.vcov.to_numpy())))
        df = float(contest_1d(latent, L, method)["df"])
        t = est / se
        return {"Estimate": est, "Std. Error": se, "df": df, "t value": t,
                "Pr(>|t|)": float(2 * stats.t.sf(abs(t), df)) if np.isfinite(df) else np.nan}
    if method == "Kenward-Roger":
        from scoremix.lme.kenward_roger import kr_info, kr_ddf_1d
        kr = kr_info(m)
        var = _qform(L, kr.vcov_adj)
        df = kr_ddf_1d(kr, L)
    elif method == "Satterthwaite":
        info = satterthwaite_info(m)
        var = _qform(L, info.vcov_beta)
        g = np.array([_qform(L, J) for J in info.jac])
        df = 2 * var ** 2 / _qform(g, info.vcov_varpar)
    else:
        var = _qform(L, m.vcov.to_numpy())
        df = np.nan
    se = float(np.sqrt(var))
    t = est / se
    p = float(2 * stats.t.sf(abs(t), df)) if np.isfinite(df) else np.nan
    return {"Estimate": est, "Std. Error": se, "df": float(df), "t value": t, "Pr(>|t|)": p}


def _fstat_ddf(nu: np.ndarray, tol: float = 1e-8) -> float:
    """lmerTest's ``get_Fstat_ddf``: ``2E/(E − q)`` with ``E = Σ ν_m/(ν_m − 2)``."""
    nu = np.asarray(nu, dtype=float)
    if nu.size == 1:
        return float(nu[0])
    if np.all(np.abs(np.diff(nu)) < tol):
        return float(np.mean(nu))
    if np.any(nu <= 2):
        return 2.0
    E = float(np.sum(nu / (nu - 2)))
    return 2 * E / (E - nu.size)


def _ftable(F: float, ndf: float, ddf: float, sigma: float, scale: float = 1.0) -> dict[str, float]:
    ms = F * sigma ** 2
    Fv = F * scale
    p = float(stats.f.sf(Fv, ndf, ddf)) if ndf > 0 and np.isfinite(ddf) else np.nan
    return {"Sum Sq": ms * ndf, "Mean Sq": ms, "NumDF": float(ndf), "DenDF": float(ddf),
            "F value": Fv, "Pr(>F)": p}


def contest_md(m: LmerResult, L: np.ndarray, ddf: str = "Satterthwaite",
               eps: float = float(np.sqrt(np.finfo(float).eps))) -> dict[str, float]:
    """F test of ``Lβ = 0`` (lmerTest's ``contestMD``).

    ``Sum Sq = F·σ̂²·NumDF`` and ``Mean Sq = F·σ̂²`` as lmerTest reports them.  For
    Kenward–Roger the F value is pbkrtest's scaled ``F* = λ·W/q`` with the Wald statistic
    ``W`` of the adjusted covariance (and ``Sum Sq``, ``Mean Sq`` from the unscaled
    ``W/q``).

    Returns
    -------
    dict
        ``Sum Sq``, ``Mean Sq``, ``NumDF``, ``DenDF``, ``F value``, ``Pr(>F)``.
    """
    method = normalize_ddf(ddf)
    L = np.atleast_2d(np.asarray(L, dtype=float))
    beta = m.fixef.to_numpy()
    if L.shape[1] != beta.size:
        raise ValueError(f"contrast has {L.shape[1]} columns, the model has {beta.size} fixed effects")
    nan = {"Sum Sq": np.nan, "Mean Sq": np.nan, "NumDF": np.nan, "DenDF": np.nan,
           "F value": np.nan, "Pr(>F)": np.nan}
    if L.shape[0] == 0:
        return nan
    if method == "lme4":
        raise ValueError("ddf='lme4' has no F tests; use 'Satterthwaite' or 'Kenward-Roger'")
    if method == "Kenward-Roger":
        from scoremix.lme.kenward_roger import kr_ftest
        r = kr_ftest(m, L)
        return _ftable(r["FstatU"], r["ndf"], r["ddf"], m.sigma, r["F.scaling"])
    if L.shape[0] == 1:
        r = contest_1d(m, L[0], method)
        return _ftable(r["t value"] ** 2, 1, r["df"], m.sigma)
    latent = _latent_reference(m, method)
    if latent is not None:
        # transformation fit: Wald F from its own estimate and covariance, DenDF of the latent model
        V = m.vcov.to_numpy()
        Lb = L @ beta
        q = int(np.linalg.matrix_rank(L @ V @ L.T))
        F = float(Lb @ np.linalg.pinv(L @ V @ L.T) @ Lb) / max(q, 1)
        return _ftable(F, q, contest_md(latent, L, method)["DenDF"], m.sigma)
    info = satterthwaite_info(m)
    V = info.vcov_beta
    d, P = np.linalg.eigh(L @ V @ L.T)
    order = np.argsort(d)[::-1]
    d, P = d[order], P[:, order]
    tol = max(eps * d[0], 0.0)
    pos = d > tol
    q = int(pos.sum())
    if q <= 0:
        return nan
    PtL = (P.T @ L)[:q]
    if q == 1:
        r = contest_1d(m, PtL[0], method)
        return _ftable(r["t value"] ** 2, 1, r["df"], m.sigma)
    t2 = (PtL @ beta) ** 2 / d[:q]
    F = float(np.sum(t2) / q)
    nu = np.empty(q)
    for i in range(q):
        g = np.array([_qform(PtL[i], J) for J in info.jac])
        nu[i] = 2 * d[i] ** 2 / _qform(g, info.vcov_varpar)
    return _ftable(F, q, _fstat_ddf(nu), m.sigma)


def coef_table(m: LmerResult, ddf: str = "Satterthwaite") -> pd.DataFrame:
    """The coefficient table of ``summary(m)`` with lmerTest's columns.

    ``ddf="Satterthwaite"`` (default) or ``"Kenward-Roger"``: ``Estimate``, ``Std. Error``,
    ``df``, ``t value``, ``Pr(>|t|)`` (Kenward–Roger uses the adjusted covariance for the
    standard errors, REML fits only); ``"lme4"``: ``Estimate``, ``Std. Error``,
    ``t value`` as lme4 prints them.
    """
    method = normalize_ddf(ddf)
    names = list(m.fixef.index)
    if method == "lme4":
        return pd.DataFrame({"Estimate": m.fixef.to_numpy(), "Std. Error": m.se.to_numpy(),
                             "t value": m.tvalues.to_numpy()}, index=names)
    _check_fit(m)
    p = len(names)
    rows = [contest_1d(m, np.eye(p)[i], method) for i in range(p)]
    cols = ["Estimate", "Std. Error", "df", "t value", "Pr(>|t|)"]
    return pd.DataFrame(rows, index=names, columns=cols)


register_inference("coef_table", coef_table)
register_inference("normalize_ddf", normalize_ddf)
