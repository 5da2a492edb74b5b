r"""The native optimiser for models with lme4 2.0's ``cs()``/``ar1()`` terms.

The profiled REML/ML criterion :math:`d(\theta)` of :mod:`scoremix.lme.deviance` is
minimised over the structured parameters :math:`\varphi` of
:class:`~scoremix.lme.covstruct.ThetaMap` instead of a free lower-triangular
:math:`\theta`: :math:`\tilde d(\varphi) = d(\theta(\varphi))`, with the exact gradient
:math:`\nabla\tilde d = J(\varphi)'\,\nabla d(\theta)` (:math:`\nabla d` the analytic gradient
of :func:`~scoremix.lme.deviance.profiled_deviance_grad`, :math:`J = \partial\theta/\partial\varphi`
by central differences of the cheap map), L-BFGS-B under the bounds SDs ≥ 0, a Newton polish
with the Hessian of lme4's convergence check, and lme4's checks
(:func:`~scoremix.lme.optimizer.check_conv`) on :math:`\varphi`.  A term is singular
(``isSingular``) when a diagonal element of its :math:`T = \mathrm{chol}(DRD)` is below
``1e-4``: an SD at 0 or :math:`\rho` at the edge of its range.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.optimize import minimize

from scoremix.lme.covstruct import ThetaMap
from scoremix.lme.crossprod import CrossProducts
from scoremix.lme.deviance import has_analytic_gradient, profiled_deviance, profiled_deviance_grad
from scoremix.lme.errors import UnsupportedModelError
from scoremix.lme.optimizer import (NativeControl, OptimResult, check_conv, fd_grad,
                                    gradient_hessian, interior_params, newton_polish)

__all__ = ["optimize_structured"]


def optimize_structured(cp: CrossProducts, reml: bool, tmap: ThetaMap, theta_lower: np.ndarray,
                        theta_init: np.ndarray, control: NativeControl | None = None,
                        theta_scale: np.ndarray | None = None,
                        phi_start: np.ndarray | None = None) -> tuple[OptimResult, np.ndarray]:
    """Minimise the profiled criterion over ``φ`` (see the module docstring), from ``ρ = 0``
    and unit (or ``theta_scale``) SDs, or from ``phi_start`` (refits: profiles, bootstrap), or
    from the (SDs, ρ) of ``control.theta_start``.

    Returns
    -------
    (OptimResult, numpy.ndarray)
        the optimum (``theta`` = ``θ(φ̂)``) and ``φ̂``.

    Raises
    ------
    UnsupportedModelError
        for a dispersion model (``dispersion=``) with ``cs()``/``ar1()`` terms.
    """
    ctl = control or NativeControl()
    if cp.n_disp > 1:
        raise UnsupportedModelError("cs()/ar1() random terms with a dispersion model (dispersion=) are not "
                       "supported; use an unstructured (x | g) term or drop dispersion=")
    if phi_start is None and ctl.theta_start is not None:
        # a θ start (e.g. a parametric bootstrap's warm start): its (SDs, ρ)
        phi_start = tmap.phi_from_natural(tmap.natural_from_theta(np.asarray(ctl.theta_start,
                                                                             float)))
    lb = tmap.lower(np.asarray(theta_lower, float))
    ub = np.full(lb.size, np.inf)
    x0 = tmap.init(np.asarray(theta_init, float) * (1.0 if theta_scale is None else theta_scale),
                   sd_init=theta_scale) if phi_start is None else np.asarray(phi_start, float)
    n_eval = [0]
    analytic = ctl.analytic_gradient and has_analytic_gradient(cp)

    def f(phi: np.ndarray) -> float:
        n_eval[0] += 1
        return profiled_deviance(tmap.theta(phi), cp, reml)

    def fg(phi: np.ndarray):
        """Criterion and exact gradient, ``None`` where ``T`` is singular."""
        if not analytic:
            return None
        th = tmap.theta(phi)
        try:
            d, g = profiled_deviance_grad(th, cp, reml)
        except (ValueError, np.linalg.LinAlgError):
            return None
        n_eval[0] += 1
        return float(d), g @ tmap.jacobian(phi)

    def fg_any(phi: np.ndarray) -> tuple[float, np.ndarray]:
        out = fg(phi)
        if out is not None and np.all(np.isfinite(out[1])):
            return out
        f0 = f(phi)
        return f0, fd_grad(f, phi, lb, ctl.fd_step, f0=f0)

    bounds = [(lo if np.isfinite(lo) else None, None) for lo in lb]
    x, crit, msg = x0, fg_any(x0)[0], ""
    for _ in range(3):   # L-BFGS-B, restarted from its own end while that still helps
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = minimize(fg_any, x, jac=True, method="L-BFGS-B", bounds=bounds,
                         options=dict(maxiter=ctl.maxiter, ftol=ctl.ftol, gtol=ctl.gtol,
                                      maxcor=20))
        gain = crit - float(r.fun)
        if float(r.fun) <= crit:
            x, crit, msg = np.asarray(r.x, float), float(r.fun), str(r.message)
        if gain <= 1e-10 * max(1.0, abs(crit)):
            break
    # Newton polish on the interior parameters (exact gradient, differenced Hessian)
    interior = interior_params(x, lb)
    pre = None
    if ctl.newton_polish and analytic and interior.size:
        for _ in range(3):
            gh = gradient_hessian(fg, x, interior)
            if gh is None:
                break
            g, H = gh
            step = newton_polish(fg, x, crit, lb, ub, interior, g, H)
            if step is None:
                break
            dx = np.max(np.abs(step[0] - x))
            x, crit = step
            pre = (interior, H)
            if dx < 1e-10:
                break
    theta = tmap.theta(x)
    diag = np.asarray(theta_lower, float) == 0.0
    singular = bool(np.any(theta[diag] < ctl.singular_tol))
    msgs: list[str] = []
    if ctl.check_conv and not singular:
        msgs = check_conv(f, x, lb, ctl, fg=fg if analytic else None, precomputed=pre)
    opt = OptimResult(theta=theta, rho=None, criterion=float(f(x)), converged=not msgs,
                      singular=singular, n_eval=n_eval[0], messages=msgs,
                      optimizer_message=msg)
    return opt, x
