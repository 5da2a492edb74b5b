"""Confidence intervals for :class:`~scoremix.lme.result.LmerResult` fits, following lme4's
``confint.merMod``.

* ``confint(m, method="wald")``: ``β̂ ± z_{(1+level)/2}·se``; variance parameters ``NaN``
  (as lme4).
* ``confint(m, method="profile")``: likelihood profile of the ML fit.  The covariance
  parameters are profiled on lme4's scale ``ψ`` = (per term: SDs on the diagonal positions and
  correlations on the off-diagonal positions of ``θ``, named ``.sig01, .sig02, …``; then
  ``.sigma``) with the ML deviance
  ``d(ψ) = log|L_θ|² − Σ log W_ii + r²_θ/σ² + n log(2πσ²)`` (β profiled out); each
  fixed effect ``β_j`` by refitting with ``β_j`` fixed (an offset).  With the signed root
  ``ζ(v) = sign(v − v̂) sqrt(d_min(v) − d̂)``, the interval is where ``|ζ| ≤ z_{(1+level)/2}``
  (0 / ±1 when an SD / a correlation reaches its bound first).
  A model with a class-specific residual variance ``Var(ε_i) = σ² ρ_{d(i)}/w_i`` (``ρ_0 = 1``)
  adds the residual SDs ``σ_d = σ·sqrt(ρ_d)`` of the other levels (``.sigma.<level>``) to
  ``ψ``, and the deviance becomes
  ``d(ψ) = log|L_{θ,ρ}|² − Σ log W_ii + Σ_d n_d log ρ_d + r²_{θ,ρ}/σ² + n log(2πσ²)`` with
  ``ρ_d = (σ_d/σ)²``; the fixed-effect profiles re-optimise ``θ`` and ``log ρ`` jointly.
* ``confint(m, method="boot")``: parametric bootstrap: simulate ``y* = Xβ̂ + Zb* + ε*`` with
  ``b* ~ N(0, Σ̂)``, ``ε*_i ~ N(0, σ̂²ρ̂_{d(i)}/w_i)``, refit (same REML/ML), percentile
  intervals of ``ψ`` and ``β``.

This module sits above the engine (cross-products, factorisation, optimiser, conditional
estimates) and works on a result object through its public attributes and ``refit``; it does
not import :mod:`scoremix.lme.result` (whose ``confint`` method calls :func:`confint`).
"""

from __future__ import annotations

import warnings
from typing import Callable, Sequence

import numpy as np
import pandas as pd
from scipy import optimize, stats
from tqdm.auto import tqdm

from scoremix.lme.conditional import estimates_at
from scoremix.lme.covstruct import ThetaMap, is_structured
from scoremix.lme.crossprod import CrossProducts, crossproducts
from scoremix.lme.factor import factorize
from scoremix.lme.optimizer import NativeControl, fd_grad, optimize_theta
from scoremix.lme.relcov import psd_chol as _psd_chol, theta_to_T
from scoremix.lme.result import LmerResult, register_inference
from scoremix.lme.structopt import optimize_structured

__all__ = ["confint", "simulate_response", "profile_names", "dispersion_names", "theta_to_psi", "psi_to_theta"]


# ------------------------------------------------------------------------ ψ parameterisation
def profile_names(m: LmerResult) -> list[str]:
    """lme4's profile names: ``.sig01 … .sigNN`` (θ order; a ``cs()``/``ar1()`` term: its
    SD(s) then ``ρ``) and ``.sigma``."""
    k = m.n_varpar
    return [f".sig{i + 1:02d}" for i in range(k)] + [".sigma"]


def dispersion_names(m: LmerResult) -> list[str]:
    """Names ``.sigma.<level>`` of the residual SDs ``σ·sqrt(ρ_d)`` of the non-reference
    dispersion levels (empty without a dispersion model; ``.sigma`` is the reference level)."""
    if m.sigma_by is None:
        return []
    return [f".sigma.{lev}" for lev in list(m.sigma_by.index)[1:]]


def _term_p(m: LmerResult) -> list[int]:
    return [len(t["term_names"]) for t in m.terms_info]


def theta_to_psi(theta: np.ndarray, sigma: float, term_p: Sequence[int]) -> np.ndarray:
    """``θ, σ → ψ``: per term the SDs (diagonal positions of θ) and correlations
    (off-diagonal positions) of ``Σ_k = σ² T_k T_k'``, then ``σ`` (lme4's ``Cv_to_Sv``)."""
    out = []
    for T in theta_to_T(np.asarray(theta, float), term_p):
        S = sigma ** 2 * T @ T.T
        sd = np.sqrt(np.diag(S))
        p = T.shape[0]
        for j in range(p):
            for i in range(j, p):
                if i == j:
                    out.append(sd[i])
                else:
                    out.append(S[i, j] / (sd[i] * sd[j]) if sd[i] > 0 and sd[j] > 0 else 0.0)
    out.append(sigma)
    return np.asarray(out)


def psi_to_theta(psi: np.ndarray, term_p: Sequence[int]) -> tuple[np.ndarray, float]:
    """Inverse of :func:`theta_to_psi`: ``θ = D_k chol(R_k) / σ`` per term."""
    sigma = float(psi[-1])
    out = []
    pos = 0
    for p in term_p:
        sd = np.zeros(p)
        R = np.eye(p)
        for j in range(p):
            for i in range(j, p):
                if i == j:
                    sd[i] = psi[pos]
                else:
                    R[i, j] = R[j, i] = psi[pos]
                pos += 1
        T = sd[:, None] * _psd_chol(R) / sigma
        for j in range(p):
            for i in range(j, p):
                out.append(T[i, j])
    return np.asarray(out), sigma


def _psi_bounds(term_p: Sequence[int], n_rho: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Bounds of ``ψ`` (SDs ``≥ 0``, correlations in ``[-1, 1]``, ``σ`` and the ``n_rho``
    dispersion-level SDs ``> 0``)."""
    lo, hi = [], []
    for p in term_p:
        for j in range(p):
            for i in range(j, p):
                lo.append(0.0 if i == j else -1.0)
                hi.append(np.inf if i == j else 1.0)
    lo += [1e-12] * (1 + n_rho)
    hi += [np.inf] * (1 + n_rho)
    return np.asarray(lo), np.asarray(hi)


def _structure(m: LmerResult) -> ThetaMap | None:
    """The fit's map of lme4 2.0's ``cs()``/``ar1()`` terms (``None`` without them)."""
    return ThetaMap.of(m.spec.terms) if m.spec is not None and is_structured(m.spec.terms) else None


def _to_psi(theta: np.ndarray, sigma: float, term_p: Sequence[int],
            tmap: ThetaMap | None) -> np.ndarray:
    """``θ, σ → ψ``: :func:`theta_to_psi`; a ``cs()``/``ar1()`` term contributes its SD(s)
    ``σ·s_j`` and ``ρ`` (:class:`~scoremix.lme.covstruct.ThetaMap`'s natural parameters)."""
    if tmap is None:
        return theta_to_psi(theta, sigma, term_p)
    out = []
    for s, p, v in tmap.blocks(tmap.natural_from_theta(theta)):
        out.append(np.append(sigma * v[:-1], v[-1]) if s != "us"
                   else theta_to_psi(v, sigma, [p])[:-1])
    return np.concatenate(out + [[sigma]])


def _from_psi(psi: np.ndarray, term_p: Sequence[int],
              tmap: ThetaMap | None) -> tuple[np.ndarray, float]:
    """Inverse of :func:`_to_psi`."""
    if tmap is None:
        return psi_to_theta(psi, term_p)
    sigma = float(psi[-1])
    nu = []
    for s, p, v in tmap.blocks(psi[:-1]):
        nu.append(np.append(v[:-1] / sigma, v[-1]) if s != "us"
                  else psi_to_theta(np.append(v, sigma), [p])[0])
    return tmap.theta_natural(np.concatenate(nu)), sigma


def _bounds(term_p: Sequence[int], n_rho: int, tmap: ThetaMap | None) -> tuple[np.ndarray, np.ndarray]:
    """Bounds of ``ψ`` (:func:`_psi_bounds`; a ``cs()``/``ar1()`` term: SDs ``≥ 0``, ``ρ`` in
    its range, ``[-1/(p-1), 1]`` for ``cs``)."""
    lo, hi = _psi_bounds(term_p, n_rho)
    if tmap is None:
        return lo, hi
    m = sum(p * (p + 1) // 2 for p in term_p)
    nlo, nhi = tmap.natural_bounds(lo[:m])    # θ-shaped ψ bounds pass through "us" terms …
    upper = [np.full(v.size, np.inf) if st != "us" else np.where(v < 0, 1.0, np.inf)
             for st, _, v in tmap.blocks(nlo)]      # … and correlations ≤ 1 there
    nhi = np.minimum(nhi, np.concatenate(upper))
    return np.concatenate([nlo, lo[m:]]), np.concatenate([nhi, hi[m:]])


def _ml_dev_psi(psi: np.ndarray, cp: CrossProducts, term_p: Sequence[int], n_rho: int = 0,
                tmap: ThetaMap | None = None) -> float:
    """ML deviance at ``ψ`` with β profiled out: ``log|L|² − ldW + r²/σ² + n log(2πσ²)``.

    With ``n_rho > 0`` the last ``n_rho`` entries of ``ψ`` are the residual SDs ``σ_d`` of
    the non-reference dispersion levels, ``ρ_d = (σ_d/σ)²`` (``ldW`` then includes
    ``−Σ_d n_d log ρ_d`` and ``r²`` is weighted by ``1/ρ_{d(i)}``)."""
    npsi = psi.size - n_rho
    theta, sigma = _from_psi(psi[:npsi], term_p, tmap)
    if not sigma > 0:
        return np.inf
    rho = None
    if n_rho:
        sd = psi[npsi:]
        if not np.all(sd > 0):
            return np.inf
        rho = np.concatenate([[1.0], (sd / sigma) ** 2])
    try:
        f = factorize(theta, cp, rho, need_lr1=False)
    except np.linalg.LinAlgError:
        return np.inf
    n = cp.n
    return f.ldL2 - f.ldW + f.pwrss / sigma ** 2 + n * np.log(2 * np.pi * sigma ** 2)


def _minimize(f: Callable[[np.ndarray], float], x0: np.ndarray, lo: np.ndarray, hi: np.ndarray
              ) -> tuple[np.ndarray, float]:
    if x0.size == 0:
        return x0, f(x0)

    def fg(x):
        f0 = f(x)
        g = fd_grad(f, x, lo, 1e-6, f0)
        # one-sided at upper bounds
        return f0, g

    bounds = [(None if not np.isfinite(a) else a, None if not np.isfinite(b) else b) for a, b in zip(lo, hi)]
    x0 = np.clip(x0, lo, hi)
    # keep finite-difference steps inside upper bounds
    x0 = np.where(np.isfinite(hi), np.minimum(x0, hi - 1e-5), x0)
    r = optimize.minimize(fg, x0, jac=True, method="L-BFGS-B", bounds=bounds,
                          options=dict(maxiter=3000, ftol=1e-15, gtol=1e-9))
    return r.x, float(r.fun)


# ------------------------------------------------------------------------------- confint
def confint(m: LmerResult, method: str = "profile", level: float = 0.95,
            parm: Sequence[str] | None = None, n_boot: int = 500, seed: int | None = None,
            progress: bool = True) -> pd.DataFrame:
    """Confidence intervals of the variance parameters and fixed effects (lme4's
    ``confint.merMod``; see the module docstring for the methods).

    Parameters
    ----------
    m:
        the fit (needs its spec for ``"profile"`` and ``"boot"``).
    method:
        ``"profile"`` (default, as lme4's ``confint.merMod``), ``"wald"`` (fixed effects
        only: the variance rows are NaN, as lme4's ``NA``) or ``"boot"``.
    level:
        confidence level.
    parm:
        subset of row names (``.sig01``, ``.sigma``, fixed-effect names); default all.
    n_boot:
        bootstrap replicates (``"boot"``).
    seed:
        seed of the bootstrap simulation.
    progress:
        show a tqdm progress bar (profile and bootstrap).

    Returns
    -------
    pandas.DataFrame
        rows ``.sig01 … .sigma`` (then ``.sigma.<level>`` for the other levels of a
        dispersion model: NaN for ``"wald"``) then the fixed effects;
        columns ``"2.5 %"``, ``"97.5 %"`` (for ``level = 0.95``).
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    a = (1 - level) / 2
    cols = [f"{100 * a:.3g} %", f"{100 * (1 - a):.3g} %"]
    names = profile_names(m) + dispersion_names(m) + list(m.fixef.index)
    want = names if parm is None else list(parm)
    bad = [p for p in want if p not in names]
    if bad:
        raise ValueError(f"unknown parameter(s) {bad}; available: {names}")
    method = method.lower()
    if method == "wald":
        z = stats.norm.ppf(1 - a)
        out = pd.DataFrame(np.nan, index=names, columns=cols)
        out.loc[m.fixef.index, cols[0]] = (m.fixef - z * m.se).to_numpy()
        out.loc[m.fixef.index, cols[1]] = (m.fixef + z * m.se).to_numpy()
    elif method == "profile":
        out = _confint_profile(m, level, want, progress)
        out.columns = cols
    elif method == "boot":
        out = _confint_boot(m, level, n_boot, seed, progress)
        out.columns = cols
    else:
        raise ValueError(f"unknown confint method {method!r}; use 'wald', 'profile' or 'boot'")
    return out.loc[want]


def _ml_fit(m: LmerResult) -> tuple[LmerResult, CrossProducts]:
    """The native ML fit of the model of ``m`` (``m`` itself when it is one) and its
    cross-products."""
    spec = m.require_spec("confint")
    if m.REML or m.backend != "native":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = m.refit(REML=False)
    cp = m.cp if m.cp is not None else crossproducts(spec)
    return m, cp


def _signed_root_search(zeta: Callable[[float], float], v0: float, step: float, lo: float,
                        hi: float, target: float, direction: int) -> float:
    """Find ``v`` on one side of ``v0`` with ``ζ(v) = direction·target``; returns the bound
    when ``|ζ|`` stays below the target up to it."""
    goal = direction * target
    prev_v = v0
    h = step
    for _ in range(60):
        v = v0 + direction * h
        if direction < 0 and v <= lo:
            v = lo
        if direction > 0 and v >= hi:
            v = hi
        zv = zeta(v)
        if direction * (zv - goal) >= 0:
            return optimize.brentq(lambda t: zeta(t) - goal, min(prev_v, v), max(prev_v, v),
                                   xtol=1e-10, rtol=1e-10)
        if v == lo or v == hi:
            return v
        prev_v = v
        h *= 1.6
    return np.nan


def _confint_profile(m: LmerResult, level: float, want: Sequence[str], progress: bool) -> pd.DataFrame:
    mml, cp = _ml_fit(m)
    term_p = _term_p(mml)
    n_rho = cp.n_disp - 1
    dev0 = -2 * mml.loglik
    z = stats.norm.ppf(1 - (1 - level) / 2)
    tmap = _structure(mml)
    psi_hat = _to_psi(mml.theta.to_numpy(), mml.sigma, term_p, tmap)
    rho_hat = None
    if n_rho:
        rho_hat = (mml.sigma_by.to_numpy() / mml.sigma) ** 2
        psi_hat = np.concatenate([psi_hat, mml.sigma_by.to_numpy()[1:]])
    lo_b, hi_b = _bounds(term_p, n_rho, tmap)
    names = profile_names(mml) + dispersion_names(mml) + list(mml.fixef.index)
    out = pd.DataFrame(np.nan, index=names, columns=["lower", "upper"])
    npsi = psi_hat.size
    first_sd = npsi - 1 - n_rho  # index of σ: σ and the dispersion-level SDs are positive scales
    se = mml.se.to_numpy()
    todo = [nm for nm in names if nm in want]
    bar = tqdm(todo, desc="profile", disable=not progress)
    for nm in bar:
        j = names.index(nm)
        if j < npsi:
            free = np.array([i for i in range(npsi) if i != j])
            # the free parameters: ψ without ψ_j, the residual SDs on the log scale
            is_sig = free >= first_sd
            lo_f = np.where(is_sig, -np.inf, lo_b[free])
            hi_f = np.where(is_sig, np.inf, hi_b[free])

            def to_free(psi, free=free, is_sig=is_sig):
                x = psi[free].copy()
                x[is_sig] = np.log(x[is_sig])
                return x

            state = {"x": to_free(psi_hat)}

            def dmin(v, j=j, free=free, is_sig=is_sig, lo_f=lo_f, hi_f=hi_f, state=state):
                def f(xf):
                    psi = psi_hat.copy()
                    xx = xf.copy()
                    xx[is_sig] = np.exp(xx[is_sig])
                    psi[free] = xx
                    psi[j] = v
                    return _ml_dev_psi(psi, cp, term_p, n_rho, tmap)
                x, fv = _minimize(f, state["x"], lo_f, hi_f)
                x2, fv2 = _minimize(f, x, lo_f, hi_f)
                if fv2 < fv:
                    x, fv = x2, fv2
                state["x"] = x
                return fv

            vhat = psi_hat[j]
            scale = max(abs(vhat), 1e-3 * mml.sigma) * 0.25
            if np.isfinite(lo_b[j]) and lo_b[j] < 0:   # a correlation
                scale = 0.1
            for direction, col in ((-1, "lower"), (1, "upper")):
                state["x"] = to_free(psi_hat)

                def zeta(v, direction=direction):
                    d = dmin(v) - dev0
                    return np.sign(v - vhat) * np.sqrt(max(d, 0.0))

                out.loc[nm, col] = _signed_root_search(zeta, vhat, scale, lo_b[j], hi_b[j], z, direction)
        else:
            jb = j - npsi
            bhat = mml.fixef.iloc[jb]
            state = {"theta": mml.theta.to_numpy().copy(), "rho": rho_hat}

            def zeta(v, jb=jb, bhat=bhat, state=state):
                cpj = cp.fix_coefficient(jb, v)
                spec = mml.spec
                if tmap is not None:
                    o, _ = optimize_structured(
                        cpj, False, tmap, spec.theta_lower(), spec.theta_init(),
                        NativeControl(check_conv=False),
                        phi_start=tmap.phi_from_natural(tmap.natural_from_theta(state["theta"])))
                else:
                    o = optimize_theta(cpj, False, spec.theta_lower(), state["theta"],
                                       NativeControl(check_conv=False), n_rho=n_rho,
                                       rho_start=None if state["rho"] is None else state["rho"][1:])
                state["theta"] = o.theta
                state["rho"] = o.rho
                return np.sign(v - bhat) * np.sqrt(max(o.criterion - dev0, 0.0))

            for direction, col in ((-1, "lower"), (1, "upper")):
                state["theta"] = mml.theta.to_numpy().copy()
                state["rho"] = rho_hat
                out.loc[nm, col] = _signed_root_search(zeta, bhat, se[jb], -np.inf, np.inf, z, direction)
    return out


def simulate_response(m: LmerResult, rng: np.random.Generator) -> np.ndarray:
    """One parametric-bootstrap response of a fit (lme4's ``simulate(m)`` with new levels):
    ``y* = Xβ̂ + Zb* + ε*`` with ``b*_k ~ N(0, Σ̂_k)`` for every level of every random term
    (drawn term by term, level-major, from ``rng.standard_normal``) and
    ``ε*_i ~ N(0, σ̂²_{d(i)}/w_i)`` (the residual SD of the row's dispersion level, prior
    weights ``w``).  The offset is left out, as in ``spec.y``."""
    spec = m.require_spec("simulate_response")
    eta = spec.X @ m.fixef.to_numpy()
    for t, S in zip(spec.terms, m.cov_re()):
        Lc = _psd_chol(S)
        bk = rng.standard_normal((t.n_levels, t.p)) @ Lc.T
        eta = eta + np.einsum("ij,ij->i", t.X, bk[t.codes])
    sd = np.full(spec.n, m.sigma)
    if m.sigma_by is not None and spec.dispersion_codes is not None:
        sd = m.sigma_by.to_numpy()[np.asarray(spec.dispersion_codes)]
    if spec.weights is not None:
        sd = sd / np.sqrt(np.asarray(spec.weights, float))
    return eta + sd * rng.standard_normal(spec.n)


def _confint_boot(m: LmerResult, level: float, n_boot: int, seed: int | None,
                  progress: bool) -> pd.DataFrame:
    spec = m.require_spec("bootstrap intervals")
    cp = m.cp if m.cp is not None else crossproducts(spec)
    term_p = _term_p(m)
    rng = np.random.default_rng(seed)
    names = profile_names(m) + dispersion_names(m) + list(m.fixef.index)
    n_rho = cp.n_disp - 1
    rho_hat = None
    if m.sigma_by is not None:
        rho_hat = (m.sigma_by.to_numpy() / m.sigma) ** 2
    draws = np.empty((n_boot, len(names)))
    ctl = NativeControl(check_conv=False, warn=False)
    tmap = _structure(m)
    phi_hat = (None if tmap is None
               else tmap.phi_from_natural(tmap.natural_from_theta(m.theta.to_numpy())))
    for b in tqdm(range(n_boot), desc="bootstrap", disable=not progress):
        ystar = simulate_response(m, rng)
        cpb = cp.with_response(ystar)
        if tmap is not None:
            o, _ = optimize_structured(cpb, m.REML, tmap, spec.theta_lower(), spec.theta_init(),
                                       ctl, phi_start=phi_hat)
        else:
            o = optimize_theta(cpb, m.REML, spec.theta_lower(), m.theta.to_numpy(), ctl,
                               n_rho=n_rho, rho_start=None if rho_hat is None else rho_hat[1:])
        est = estimates_at(cpb, o.theta, m.REML, o.rho)
        sig_by = est["sigma"] * np.sqrt(o.rho[1:]) if o.rho is not None else np.empty(0)
        draws[b] = np.concatenate([_to_psi(o.theta, est["sigma"], term_p, tmap), sig_by,
                                   est["beta"]])
    a = (1 - level) / 2
    q = np.quantile(draws, [a, 1 - a], axis=0).T
    out = pd.DataFrame(q, index=names, columns=["lower", "upper"])
    out.attrs["draws"] = pd.DataFrame(draws, columns=names)
    return out


register_inference("confint", confint)
