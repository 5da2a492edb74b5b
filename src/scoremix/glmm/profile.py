r"""Profile-likelihood confidence intervals of a GLMM (lme4's ``profile.merMod`` then
``confint``).

The fitted criterion :math:`d(\theta, \beta)` (Laplace or adaptive Gauss–Hermite, lme4's
``-2 logLik``) is re-expressed in lme4's profile parameters
:math:`\psi` = per random term the standard deviations (diagonal positions of
:math:`\theta`) and correlations (off-diagonal positions) of
:math:`\Sigma_k = T_k T_k'` (named ``.sig01, .sig02, …``; a GLMM has no ``.sigma``), and
the fixed effects :math:`\beta`.  For a parameter :math:`\phi_j` of :math:`(\psi, \beta)`
its profile is

.. math::

    d_j(v) = \min_{\phi_{-j}} d(\phi)\big|_{\phi_j = v},\qquad
    \zeta_j(v) = \mathrm{sign}(v - \hat\phi_j)\sqrt{d_j(v) - d(\hat\phi)},

and the interval at level :math:`1 - \alpha` is :math:`\{v : |\zeta_j(v)| \le z_{1-\alpha/2}\}`
(Bates et al. 2015, § 5.1 of the lme4 paper; the bound 0 for an SD and ±1 for a
correlation when the profile stays below :math:`z` up to it).  Each :math:`d_j(v)` is
minimised by the projected quasi-Newton method of :mod:`scoremix.glmm.fit`, started at the
previous solution with the finite-difference Hessian of :math:`d` at the optimum; the end
points are found by Brent's method on :math:`\zeta_j(v) \mp z`.  lme4 interpolates a
spline through profile points instead, so its limits differ from these exact roots by
its interpolation error (about ``1e-4``).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pandas as pd
from scipy import optimize, stats

from scoremix.glmm.errors import GlmmUnsupportedError
from scoremix.glmm.fit import GlmmControl, _criterion, _hessian, _newton_minimize
from scoremix.glmm.pirls import GlmmData
from scoremix.glmm.structure import sdcor_bounds, sdcor_to_theta, theta_to_sdcor

__all__ = ["profile_confint", "theta_to_sdcor", "sdcor_to_theta", "sdcor_bounds"]


def _end_point(zeta: Callable[[float], float], v0: float, step: float, lo: float, hi: float,
               target: float, direction: int) -> float:
    """``v`` on one side of ``v0`` with ``ζ(v) = direction·target`` (Brent's method once
    bracketed); the bound when ``|ζ|`` stays below the target up to it."""
    goal = direction * target
    prev = v0
    h = step
    for _ in range(40):
        v = min(max(v0 + direction * h, lo), hi)
        zv = zeta(v)
        if np.isfinite(zv) and direction * (zv - goal) >= 0:
            return optimize.brentq(lambda t: zeta(t) - goal, min(prev, v), max(prev, v),
                                   xtol=1e-8 * max(1.0, abs(v0)), rtol=1e-10)
        if v in (lo, hi):
            return v
        prev = v
        h *= 1.6
    return np.nan


def profile_confint(data: GlmmData, theta: np.ndarray, beta: np.ndarray, nAGQ: int,
                    names_beta: Sequence[str], level: float = 0.95,
                    parm: Sequence[str] | None = None,
                    control: GlmmControl | None = None) -> pd.DataFrame:
    """Profile intervals of ``.sig01 …`` (SDs and correlations) and the fixed effects.

    Parameters
    ----------
    data:
        the arrays the model was fitted to (collapsed cells are fine: the criterion then
        differs by a constant, which the profile differences cancel).
    theta, beta:
        the estimates.
    nAGQ:
        1 (Laplace) or the number of quadrature points of the fit.
    names_beta:
        the fixed-effect names.
    level:
        confidence level.
    parm:
        the rows wanted (default all: ``.sig01 …`` then the fixed effects).

    Returns
    -------
    pandas.DataFrame
        columns ``"2.5 %"`` and ``"97.5 %"`` (for ``level = 0.95``).
    """
    if nAGQ < 1:
        raise GlmmUnsupportedError("profile intervals need the Laplace or quadrature "
                                   "criterion: refit with nAGQ >= 1")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    ctl = control or GlmmControl()
    term_p = data.term_p
    psi_hat = theta_to_sdcor(theta, term_p)
    npsi = len(psi_hat)
    sig_names = [f".sig{i + 1:02d}" for i in range(npsi)]
    names = sig_names + list(names_beta)
    want = names if parm is None else list(parm)
    bad = [p for p in want if p not in names]
    if bad:
        raise ValueError(f"unknown parameter(s) {bad}; available: {names}")
    lo_psi, hi_psi = sdcor_bounds(term_p)
    lo = np.concatenate([lo_psi, np.full(len(beta), -np.inf)])
    hi = np.concatenate([hi_psi, np.full(len(beta), np.inf)])
    tol = ctl.pirls_tol

    def dev(phi: np.ndarray) -> float:
        return _criterion(data, sdcor_to_theta(phi[:npsi], term_p), phi[npsi:], nAGQ, tol)[0]

    phi_hat = np.concatenate([psi_hat, np.asarray(beta, float)])
    d0 = dev(phi_hat)
    # the Hessian at the optimum starts every profile's quasi-Newton minimisation; at an SD
    # of 0 the stencil's mirror image is the same criterion (even in θ)
    H, _ = _hessian(dev, np.clip(phi_hat, lo + 1e-4, np.where(np.isfinite(hi), hi - 1e-4, hi)),
                    ctl.hessian_step)
    try:
        V = np.linalg.inv(H / 2)
        se = np.sqrt(np.clip(np.diag(V), 1e-12, None))
    except np.linalg.LinAlgError:
        se = np.full(len(phi_hat), 0.1)
    z = stats.norm.ppf(1 - (1 - level) / 2)
    a = (1 - level) / 2
    cols = [f"{100 * a:.3g} %", f"{100 * (1 - a):.3g} %"]
    out = pd.DataFrame(np.nan, index=names, columns=cols)
    for nm in want:
        j = names.index(nm)
        free = np.array([i for i in range(len(phi_hat)) if i != j])
        H0 = H[np.ix_(free, free)]
        state = {"x": phi_hat[free].copy()}

        def dmin(v: float, j=j, free=free, H0=H0, state=state) -> float:
            def f(xf: np.ndarray) -> float:
                phi = np.empty(len(phi_hat))
                phi[free] = xf
                phi[j] = v
                return dev(phi)
            r = _newton_minimize(f, state["x"], lo[free], ctl, H0=H0, upper=hi[free])
            state["x"] = np.asarray(r.x, float)
            return float(r.fun)

        vhat = phi_hat[j]
        for direction, col in ((-1, cols[0]), (1, cols[1])):
            state["x"] = phi_hat[free].copy()

            def zeta(v: float, vhat=vhat, dmin=dmin) -> float:
                return float(np.sign(v - vhat) * np.sqrt(max(dmin(v) - d0, 0.0)))

            step = z * se[j] if np.isfinite(se[j]) and se[j] > 0 else 0.1
            out.loc[nm, col] = _end_point(zeta, vhat, step, lo[j], hi[j], z, direction)
    return out.loc[want]
