r"""Maximum (Laplace / adaptive-quadrature) likelihood estimation of a GLMM, lme4's two
stages:

1. ``nAGQ = 0``: minimise the Laplace criterion over :math:`\theta` with :math:`\beta`
   updated jointly with :math:`u` inside PIRLS;
2. minimise the Laplace (``nAGQ = 1``) or adaptive Gauss–Hermite criterion over
   :math:`(\theta, \beta)` jointly, :math:`u` by PIRLS at each point.

Both stages use L-BFGS-B on central-difference gradients (or, with
``optimizer="cobyqa"``, the derivative-free trust-region method COBYQA, Powell's successor
of lme4's BOBYQA), the diagonal of each :math:`T_k` bounded below by 0, and end with one
Newton step on the finite-difference gradient and Hessian.  The covariance of :math:`\hat\beta` is, as lme4's
default for GLMMs, the :math:`\beta` block of :math:`2H^{-1}` with :math:`H` the
finite-difference Hessian of the criterion in :math:`(\theta, \beta)` (central
differences, step ``1e-4``, lme4's ``deriv12``); with ``nAGQ = 0`` it is
:math:`(R_X'R_X)^{-1}` from the last PIRLS step.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import optimize

from scoremix.glmm.errors import GlmmUnsupportedError
from scoremix.glmm.pirls import GlmmData, PirlsState
from scoremix.glmm.structure import ThetaMap

__all__ = ["GlmmControl", "GlmmFit", "fit_glmm"]


@dataclass
class GlmmControl:
    """Options of the native GLMM fit.

    ``optimizer``: ``"newton"`` (default: stage 1 by L-BFGS-B, stage 2 by a projected
    quasi-Newton method started from the finite-difference Hessian, see
    :func:`_newton_minimize`), ``"lbfgsb"`` (L-BFGS-B on central-difference gradients with
    step ``gradient_step`` in both stages) or ``"cobyqa"`` (derivative-free trust region,
    Powell's successor of lme4's BOBYQA; slower in Python);
    ``tol``: projected-gradient tolerance (L-BFGS-B) or final trust-region radius (COBYQA);
    the optimum is then polished by one Newton step with the finite-difference gradient and
    Hessian; ``maxfun``: evaluations per stage;
    ``pirls_tol``: relative change of the penalised deviance that stops PIRLS;
    ``hessian_step``: finite-difference step of the Hessian (lme4: ``1e-4``);
    ``check_singular_tol``: ``isSingular``'s tolerance on the diagonal of ``T_k``."""

    tol: float = 1e-6
    optimizer: str = "newton"
    gradient_step: float = 1e-5
    maxfun: int = 20000
    pirls_tol: float = 1e-13
    hessian_step: float = 1e-4
    check_singular_tol: float = 1e-4
    calc_derivs: bool = True

    @classmethod
    def from_any(cls, control: "GlmmControl | dict | None") -> "GlmmControl":
        if control is None:
            return cls()
        if isinstance(control, cls):
            return control
        if isinstance(control, dict):
            unknown = set(control) - set(cls.__dataclass_fields__)
            if unknown:
                raise ValueError(f"unknown control option(s) {sorted(unknown)}; choose from "
                                 f"{sorted(cls.__dataclass_fields__)}")
            return cls(**control)
        raise TypeError(f"control must be a dict or GlmmControl, got {type(control).__name__}")


@dataclass
class GlmmFit:
    """Estimates and the state at the optimum."""

    theta: np.ndarray
    beta: np.ndarray
    criterion: float
    state: PirlsState
    vcov: np.ndarray
    hessian: np.ndarray | None
    nAGQ: int
    messages: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


def _criterion(data: GlmmData, theta: np.ndarray, beta: np.ndarray, nAGQ: int,
               tol: float) -> tuple[float, PirlsState]:
    st = data.pirls(theta, beta, tol=tol)
    if nAGQ <= 1:
        return data.laplace(st), st
    return data.agq(theta, st, nAGQ), st


def _minimize(f, x0: np.ndarray, lower: np.ndarray, ctl: GlmmControl,
              forward: bool = False) -> optimize.OptimizeResult:
    """L-BFGS-B (or COBYQA) from ``x0``; ``forward``: forward-difference gradients (half the
    evaluations, for a stage that only has to come near the optimum)."""
    x0 = np.maximum(x0, lower)
    if ctl.optimizer == "cobyqa":
        bounds = optimize.Bounds(lower, np.full_like(lower, np.inf))
        rad = max(0.2 * float(np.max(np.abs(x0), initial=0)), 0.05)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return optimize.minimize(f, x0, method="COBYQA", bounds=bounds,
                                     options={"initial_tr_radius": rad, "final_tr_radius": ctl.tol,
                                              "maxfev": ctl.maxfun})
    # L-BFGS-B with central-difference gradients (the criterion is smooth to ~1e-12 because
    # PIRLS converges on the step; a diagonal of T_k may be evaluated just below 0, where the
    # criterion is the mirror image of its value above)
    h = ctl.gradient_step

    def fg(x: np.ndarray) -> tuple[float, np.ndarray]:
        fx = f(x)
        g = np.empty_like(x)
        for i in range(len(x)):
            e = np.zeros_like(x)
            e[i] = h
            if forward or x[i] - h < lower[i]:
                # at a bound: forward difference (θ = 0 is a stationary point of the even
                # function θ ↦ criterion, where a central difference is 0 whether it is a
                # minimum or a maximum)
                g[i] = (f(x + e) - fx) / h
            else:
                g[i] = (f(x + e) - f(x - e)) / (2 * h)
        return fx, g

    bounds = [(lo if np.isfinite(lo) else None, None) for lo in lower]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return optimize.minimize(fg, x0, jac=True, method="L-BFGS-B", bounds=bounds,
                                 options={"maxfun": ctl.maxfun,
                                          "ftol": 1e-15 if ctl.tol <= 1e-6 else 1e-12,
                                          "gtol": ctl.tol,
                                          "maxcor": 20})


def fit_glmm(data: GlmmData, nAGQ: int = 1, control: GlmmControl | dict | None = None,
             start: dict | None = None) -> GlmmFit:
    """Fit by lme4's two stages (see the module docstring)."""
    ctl = GlmmControl.from_any(control)
    t0 = time.perf_counter()
    # the variance parameters optimised: θ, or φ of structured terms (θ = tmap(φ))
    tmap = ThetaMap.of(data.terms)
    th = tmap.theta if tmap.structured else (lambda v: v)
    lower_t = tmap.lower(np.concatenate([t.theta_lower for t in data.terms]))
    theta0 = tmap.init(np.concatenate([t.theta_init for t in data.terms]))
    if start and "theta" in start:
        if tmap.structured:
            raise GlmmUnsupportedError("start['theta'] is not available with cs()/ar1() terms")
        theta0 = np.asarray(start["theta"], float)
    messages: list[str] = []

    # stage 1: θ with (β, u) jointly in PIRLS
    def f1(ph: np.ndarray) -> float:
        st = data.pirls(th(ph), None, tol=ctl.pirls_tol)
        return data.laplace(st)

    # with a second stage to follow, stage 1 only has to bring θ next to the optimum
    ctl1 = ctl if nAGQ == 0 or ctl.optimizer != "newton" else \
        GlmmControl(**{**ctl.__dict__, "tol": max(ctl.tol, 1e-3)})
    r1 = _minimize(f1, theta0, lower_t, ctl1, forward=ctl1 is not ctl)
    theta1 = np.asarray(r1.x, float)
    st1 = data.pirls(th(theta1), None, tol=ctl.pirls_tol)
    n1 = data.n_eval
    if nAGQ == 0:
        Rinv = np.linalg.inv(st1.RX)
        vc = Rinv.T @ Rinv          # RX is lower: (RX RX')^{-1} = RX^{-T} RX^{-1}
        fit = GlmmFit(theta=th(theta1), beta=st1.beta, criterion=data.laplace(st1), state=st1,
                      vcov=vc, hessian=None, nAGQ=0, messages=messages,
                      info={"stage1_evals": n1, "seconds": time.perf_counter() - t0,
                            "phi": theta1, "n_varpar": len(theta1)})
        return fit
    beta1 = st1.beta.copy()
    if start and "fixef" in start:
        beta1 = np.asarray(start["fixef"], float)
    nt = len(theta1)

    # stage 2: (θ, β) jointly, u by PIRLS
    def f2(x: np.ndarray) -> float:
        return _criterion(data, th(x[:nt]), x[nt:], nAGQ, ctl.pirls_tol)[0]

    lower2 = np.concatenate([lower_t, np.full(data.p, -np.inf)])
    x0 = np.concatenate([theta1, beta1])
    # forward-difference gradients while the steps are large, a loose stop: the Newton step
    # on the final central-difference Hessian and gradient below polishes it
    r2 = (_newton_minimize(f2, x0, lower2, GlmmControl(**{**ctl.__dict__, "tol": max(ctl.tol, 1e-4)}),
                           ftol=1e-7, forward=True) if ctl.optimizer == "newton"
          else _minimize(f2, x0, lower2, ctl))
    x = np.asarray(r2.x, float)
    if not r2.success and "maximum" in str(r2.message).lower():
        messages.append(f"failure to converge in {ctl.maxfun} evaluations")
    crit, st = _criterion(data, th(x[:nt]), x[nt:], nAGQ, ctl.pirls_tol)
    if f2(x0) < crit:  # never return worse than the start
        x, (crit, st) = x0, _criterion(data, th(x0[:nt]), x0[nt:], nAGQ, ctl.pirls_tol)
    theta, beta = th(x[:nt]), x[nt:]
    H = None
    vc = np.full((data.p, data.p), np.nan)
    if ctl.calc_derivs:
        fz = lambda z: _criterion(data, th(z[:nt]), z[nt:], nAGQ, ctl.pirls_tol)[0]  # noqa: E731
        H, g = _hessian(fz, x, ctl.hessian_step)
        # one Newton step on the free parameters (those not held at a bound by the gradient)
        free = ~((x <= lower2 + 1e-12) & (g > 0))
        try:
            dx = np.zeros_like(x)
            dx[free] = -np.linalg.solve(H[np.ix_(free, free)], g[free])
            xn = np.maximum(x + dx, lower2)
            cn, stn = _criterion(data, th(xn[:nt]), xn[nt:], nAGQ, ctl.pirls_tol)
            if cn < crit:
                x, crit, st = xn, cn, stn
                theta, beta = th(x[:nt]), x[nt:]
                if np.max(np.abs(dx)) > 10 * ctl.hessian_step:
                    H, g = _hessian(fz, x, ctl.hessian_step)
        except np.linalg.LinAlgError:
            pass
        data.pirls(theta, beta, u0=st.u, tol=ctl.pirls_tol)  # restore the warm start
        try:
            Vh = 2 * np.linalg.inv(H)
            Vh = (Vh + Vh.T) / 2
            if np.min(np.linalg.eigvalsh(Vh)) <= 0:
                raise np.linalg.LinAlgError("not positive definite")
            vc = Vh[nt:, nt:]
        except np.linalg.LinAlgError:
            messages.append("variance-covariance matrix computed from finite-difference Hessian "
                            "is not positive definite or contains NA values: falling back to "
                            "var-cov estimated from RX")
            vc = _vcov_rx(data, theta, beta, st)
    return GlmmFit(theta=theta, beta=beta, criterion=crit, state=st, vcov=vc, hessian=H,
                   nAGQ=nAGQ, messages=messages,
                   info={"stage1_evals": n1, "evals": data.n_eval,
                         "seconds": time.perf_counter() - t0,
                         "phi": x[:nt].copy(), "n_varpar": nt,
                         "optimizer": ctl.optimizer, "message": str(r2.message)})


def _newton_minimize(f, x0: np.ndarray, lower: np.ndarray, ctl: GlmmControl,
                     max_iter: int = 100, ftol: float = 1e-10, H0: np.ndarray | None = None,
                     upper: np.ndarray | None = None,
                     forward: bool = False) -> optimize.OptimizeResult:
    r"""Projected quasi-Newton minimisation for the (smooth, low-dimensional) stage-2
    criterion, started next to its optimum by stage 1.

    ``H_0`` is the central-difference Hessian at ``x_0`` (the stencil of :func:`_hessian`),
    or ``H0`` when given;
    each iteration takes the Newton step ``-H^{-1}g`` on the free coordinates (those not
    held at a bound by the gradient), with ``H``'s eigenvalues made positive
    (``|\lambda|``, floored), projected onto the bounds and halved until the criterion
    decreases; the gradient at the new point is a central difference with step
    ``gradient_step`` (forward at a bound; with ``forward=True`` a forward difference less
    its first-order bias ``h H_ii / 2``: half the evaluations) and ``H`` is updated by
    BFGS.  ``upper`` bounds (profiles) are handled like the lower ones.  It stops when the
    step and the decrease are negligible (``max|s| < tol`` and ``|Δf| < ftol``).  This
    needs one Hessian and a few gradients where a gradient-only method needs tens of
    gradients; when it cannot decrease the criterion before the gradient is small it hands
    over to L-BFGS-B."""
    upper = np.full(len(lower), np.inf) if upper is None else np.asarray(upper, float)
    x = np.clip(np.asarray(x0, float), lower, upper)
    k = len(x)
    h = ctl.gradient_step
    if k == 0:
        return optimize.OptimizeResult(x=x, fun=f(x), success=True, message="no parameters",
                                       nfev=1)
    n_f = [0]
    fwd = [forward]

    def fc(z: np.ndarray) -> float:
        n_f[0] += 1
        return f(z)

    def grad(z: np.ndarray, fz: float) -> np.ndarray:
        g = np.empty(k)
        for i in range(k):
            e = np.zeros(k)
            e[i] = h
            if z[i] - h < lower[i]:
                g[i] = (fc(z + e) - fz) / h
            elif fwd[0]:
                # forward difference less its first-order bias (h/2) H_ii, H the current
                # curvature estimate
                g[i] = (fc(z + e) - fz) / h - 0.5 * h * H[i, i]
            elif z[i] + h > upper[i]:
                g[i] = (fz - fc(z - e)) / h
            else:
                g[i] = (fc(z + e) - fc(z - e)) / (2 * h)
        return g

    H = _hessian(fc, x, ctl.hessian_step)[0] if H0 is None else np.array(H0, float)
    fx = fc(x)
    g = grad(x, fx)
    message, ok = "maximum number of iterations", False
    for _ in range(max_iter):
        at_bound = ((x <= lower + 1e-12) & (g > 0)) | ((x >= upper - 1e-12) & (g < 0))
        free = ~at_bound
        d = np.zeros(k)
        if free.any():
            Hf = H[np.ix_(free, free)]
            lam, V = np.linalg.eigh((Hf + Hf.T) / 2)
            vg = V.T @ g[free]
            step = -vg / np.maximum(np.abs(lam), 1e-8 * max(1.0, float(np.max(np.abs(lam)))))
            # a direction of negative curvature (e.g. a variance parameter at 0, where the
            # criterion is even in it and the gradient vanishes): go at least 0.1 down it
            neg = lam < 0
            if neg.any():
                sgn = np.where(vg[neg] != 0, -np.sign(vg[neg]),
                               np.where(V[:, neg].sum(axis=0) >= 0, 1.0, -1.0))
                step[neg] = sgn * np.maximum(np.abs(step[neg]), 0.1)
            d[free] = V @ step
        t, accepted = 1.0, False
        for _ in range(40):
            xn = np.clip(x + t * d, lower, upper)
            fn = fc(xn)
            if fn <= fx:
                accepted = True
                break
            t /= 2
        if not accepted:
            message = "no decrease along the Newton direction"
            ok = bool(np.max(np.abs(g[free]), initial=0) < 1e-3)
            break
        s = xn - x
        df = fx - fn
        x, fx = xn, fn
        gn = grad(x, fx)
        yv = gn - g
        g = gn
        sy = float(s @ yv)
        if sy > 1e-12 * float(np.linalg.norm(s) * np.linalg.norm(yv)):
            Hs = H @ s
            H = H + np.outer(yv, yv) / sy - np.outer(Hs, Hs) / float(s @ Hs)
        if np.max(np.abs(s), initial=0) < ctl.tol and df < ftol:
            message, ok = "converged: negligible step and decrease", True
            break
    if not ok and not np.all(np.isinf(upper)):
        # bounded above too (profiles): keep the best point
        return optimize.OptimizeResult(x=x, fun=fx, success=False, message=message,
                                       nfev=n_f[0])
    if not ok:
        # hand over to L-BFGS-B from the best point
        r = _minimize(f, x, lower, ctl)
        r.nfev = int(getattr(r, "nfev", 0)) + n_f[0]
        if r.fun > fx:
            r.x, r.fun = x, fx
        return r
    return optimize.OptimizeResult(x=x, fun=fx, success=True, message=message, nfev=n_f[0])


def _vcov_rx(data: GlmmData, theta: np.ndarray, beta: np.ndarray, st: PirlsState) -> np.ndarray:
    """``(R_X'R_X)^{-1}`` at the mode (the Fisher-information approximation)."""
    import scipy.linalg as sla
    _, _, _, xcross = data._zl_ops(theta)
    mu_eta = data.family.link.mu_eta(st.eta)
    w = data.wt * mu_eta ** 2 / data.family.variance(st.mu)
    L = np.asarray(st.L)
    # L L' = Λ'Z'WZΛ + I (L may be a row permutation of a triangular factor)
    RZX = (sla.solve_triangular(L, xcross(w), lower=True) if np.allclose(L, np.tril(L))
           else np.linalg.solve(L, xcross(w)))
    M = data.X.T @ (data.X * w[:, None]) - RZX.T @ RZX
    return np.linalg.inv(M)


def _hessian(f, x: np.ndarray, h: float) -> tuple[np.ndarray, np.ndarray]:
    """Central-difference Hessian and gradient (lme4's ``deriv12`` stencil)."""
    k = len(x)
    f0 = f(x)
    fp = np.empty(k)
    fm = np.empty(k)
    E = np.eye(k) * h
    for i in range(k):
        fp[i] = f(x + E[i])
        fm[i] = f(x - E[i])
    H = np.empty((k, k))
    for i in range(k):
        H[i, i] = (fp[i] - 2 * f0 + fm[i]) / h ** 2
        for j in range(i):
            fpp = f(x + E[i] + E[j])
            fmm = f(x - E[i] - E[j])
            H[i, j] = H[j, i] = (fpp - fp[i] - fp[j] + 2 * f0 - fm[i] - fm[j] + fmm) / (2 * h ** 2)
    return H, (fp - fm) / (2 * h)
