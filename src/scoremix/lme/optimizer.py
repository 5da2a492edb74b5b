"""The optimiser of the native engine: minimise the profiled deviance over ``θ`` (and ``log ρ``).

For each candidate ``θ`` the engine evaluates the profiled criterion of
:mod:`scoremix.lme.deviance` (a batched ``p_1 × p_1`` Cholesky and one small dense Cholesky;
nothing that grows with the number of rows) and minimises it with L-BFGS-B under lme4's
bounds (``θ_ii ≥ 0``), with the analytic gradient of
:func:`~scoremix.lme.deviance.profiled_deviance_grad` for homoscedastic models (scalar or
vector-valued random terms, while every diagonal ``θ ≥ 1e-4``) and central
finite-difference gradients otherwise.  L-BFGS-B works on ``θ_i / s_i`` with the column
scales ``s`` of :func:`theta_scale` (``T_k = S_k T̃_k``: the problem whose random-effect
columns have unit mean square) and starts from lme4's identity in those units; with the
exact gradient a run ends once the gap to the optimum estimated from the last decreases is
at rounding level (:class:`SuperlinearStop`), and a non-singular fit is finished by one
Newton step with the Hessian of lme4's convergence check (:func:`newton_polish`).  An
abnormal L-BFGS-B stop is polished by restarts
and, if it persists away from a stationary point, reported as non-convergence.  A class-specific residual
variance ``Var(ε_i) = σ² ρ_{d(i)}`` (``ρ_0 = 1``) adds ``log ρ_d`` (``d ≥ 1``) to the
parameters.  After the optimisation lme4's checks are applied:

* singular fit (``isSingular``): a ``θ`` element with lower bound 0 below ``1e-4``
  → :class:`~scoremix.lme.errors.SingularFitWarning`
  ``"boundary (singular) fit: see help('isSingular')"``;
* convergence (``checkConv``, skipped for singular fits as in lme4): with the gradient ``g``
  and Hessian ``H = R'R`` of the criterion over the interior parameters, lme4's scaled
  gradient ``R^{-1}g`` (R's ``solve(chol(H), g)``); if ``max(min(|R^{-1}g|, |g|)) > 0.002``
  → :class:`~scoremix.lme.errors.ConvergenceWarning`
  ``"Model failed to converge with max|grad| = … (tol = 0.002, component k)"`` (``k`` is the
  offending component; lme4 always prints 1), and lme4's ``checkHess`` on ``H``: negative
  eigenvalues → ``"Model failed to converge: degenerate  Hessian with k negative
  eigenvalues"``, a zero eigenvalue → ``"Hessian is numerically singular: parameters are not
  uniquely determined"``, and on the ``θ`` block (lme4 has no ``ρ``) an eigenvalue above
  ``1e6`` or an eigenvalue ratio below ``1e-6`` → ``"Model is nearly unidentifiable: very
  large eigenvalue\n - Rescale variables?"`` / ``"… large eigenvalue ratio\n - Rescale
  variables?"``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.linalg as sla
from scipy.optimize import OptimizeResult, minimize

from scoremix.lme.crossprod import CrossProducts
from scoremix.lme.deviance import has_analytic_gradient, profiled_deviance, profiled_deviance_grad

__all__ = ["NativeControl", "OptimResult", "optimize_theta", "theta_scale", "SuperlinearStop",
           "fd_grad", "fd_hess", "interior_params", "gradient_hessian", "newton_polish",
           "check_conv", "check_hess", "ray_start"]


@dataclass
class NativeControl:
    """Options of the native optimiser (pass as ``control=dict(...)`` to :func:`scoremix.lmer`).

    Attributes
    ----------
    maxiter:
        maximum L-BFGS-B iterations.
    ftol, gtol:
        L-BFGS-B tolerances (relative reduction of the criterion, projected gradient).
    fd_step:
        relative step of the central finite-difference gradient.
    check_conv_tol:
        lme4's ``check.conv.grad`` tolerance on the scaled gradient.
    singular_tol:
        lme4's ``isSingular`` tolerance.
    check_conv:
        run the convergence checks (gradient and Hessian).
    theta_start:
        starting ``θ`` (default lme4's: 1 on diagonals, 0 off them).
    warn:
        issue the singular-fit and convergence warnings.
    analytic_gradient:
        use the analytic gradient of the profiled criterion where it applies (no dispersion
        model, every diagonal ``θ ≥ 1e-4``; see
        :func:`scoremix.lme.deviance.profiled_deviance_grad`); finite differences otherwise.
    abnormal_gtol:
        when L-BFGS-B stops abnormally (line-search failure, "ABNORMAL") even after two
        polishing restarts, a :class:`~scoremix.lme.errors.ConvergenceWarning` is issued if
        the largest projected-gradient component of the criterion there exceeds this.
    scale_theta:
        optimise over ``θ_i / s_i`` with the column scales ``s`` of :func:`theta_scale` and
        start from ``θ = s`` on the diagonals (lme4's identity start in scaled units)
        instead of lme4's ``θ = 1``; ``False``: lme4's parametrisation and start.
    stop_rtol:
        with the exact gradient, stop an L-BFGS-B run once the gap to the optimum estimated
        from the last two iterations' decreases of the criterion is at most
        ``stop_rtol · max(1, |d|)`` (see :class:`SuperlinearStop`); ``0`` disables the
        rule.
    newton_polish:
        with the exact gradient and a non-singular fit, finish with one Newton step on the
        interior parameters using the Hessian of lme4's convergence check
        (:func:`newton_polish`): the optimiser's criterion gap is at rounding level, but on
        a flat criterion the parameters (and what depends on them: Satterthwaite df,
        p-values) are only accurate to its square root.
    """

    maxiter: int = 5000
    ftol: float = 1e-15
    gtol: float = 1e-10
    fd_step: float = 1e-6
    check_conv_tol: float = 2e-3
    singular_tol: float = 1e-4
    check_conv: bool = True
    theta_start: np.ndarray | None = None
    warn: bool = True
    analytic_gradient: bool = True
    abnormal_gtol: float = 1e-3
    scale_theta: bool = True
    stop_rtol: float = 1e-12
    newton_polish: bool = True

    @classmethod
    def from_any(cls, control: "NativeControl | dict | None") -> "NativeControl":
        if control is None:
            return cls()
        if isinstance(control, NativeControl):
            return control
        if isinstance(control, dict):
            known = set(cls.__dataclass_fields__)
            bad = sorted(set(control) - known)
            if bad:
                raise ValueError(f"unknown control option(s) {bad}; known: {sorted(known)}")
            return cls(**control)
        raise TypeError(f"control must be a dict or NativeControl, not {type(control).__name__}")


@dataclass
class OptimResult:
    """Outcome of :func:`optimize_theta`.

    ``theta`` and ``rho`` are the optimum, ``criterion`` the profiled deviance / REML
    criterion there, ``n_eval`` the number of criterion evaluations, ``messages`` lme4-style
    convergence messages (empty when the checks pass).
    """

    theta: np.ndarray
    rho: np.ndarray | None
    criterion: float
    converged: bool
    singular: bool
    n_eval: int
    messages: list[str] = field(default_factory=list)
    optimizer_message: str = ""


def fd_grad(f, x: np.ndarray, lb: np.ndarray, h: float, f0: float | None = None,
            idx: np.ndarray | None = None) -> np.ndarray:
    """Central finite-difference gradient of ``f`` at ``x`` (one-sided, second order, next to
    a lower bound ``lb``); only the components ``idx`` (default all; the others are 0)."""
    g = np.zeros_like(x) if idx is not None else np.empty_like(x)
    for i in (range(x.size) if idx is None else np.flatnonzero(idx)):
        hi = h * max(1.0, abs(x[i]))
        if x[i] - hi < lb[i]:
            # forward difference at (or next to) a bound
            xp = x.copy(); xp[i] += hi
            xpp = x.copy(); xpp[i] += 2 * hi
            fx = f(x) if f0 is None else f0
            g[i] = (-3 * fx + 4 * f(xp) - f(xpp)) / (2 * hi)
        else:
            xp = x.copy(); xp[i] += hi
            xm = x.copy(); xm[i] -= hi
            g[i] = (f(xp) - f(xm)) / (2 * hi)
    return g


def fd_hess(f, x: np.ndarray, idx: np.ndarray, h: float) -> np.ndarray:
    k = idx.size
    H = np.empty((k, k))
    f0 = f(x)
    for a in range(k):
        i = idx[a]
        hi = h * max(1.0, abs(x[i]))
        xp = x.copy(); xp[i] += hi
        xm = x.copy(); xm[i] -= hi
        H[a, a] = (f(xp) - 2 * f0 + f(xm)) / hi ** 2
        for b in range(a):
            j = idx[b]
            hj = h * max(1.0, abs(x[j]))
            v = []
            for si, sj in ((1, 1), (1, -1), (-1, 1), (-1, -1)):
                xx = x.copy(); xx[i] += si * hi; xx[j] += sj * hj
                v.append(f(xx))
            H[a, b] = H[b, a] = (v[0] - v[1] - v[2] + v[3]) / (4 * hi * hj)
    return H


def optimize_theta(cp: CrossProducts, reml: bool, lower: np.ndarray, start: np.ndarray,
                   control: NativeControl | None = None, n_rho: int = 0,
                   rho_start: np.ndarray | None = None, fixed: dict[int, float] | None = None,
                   theta_scale: np.ndarray | None = None) -> OptimResult:
    """Minimise the profiled criterion over ``θ`` (and ``log ρ_1 … log ρ_{D-1}``).

    Parameters
    ----------
    cp:
        cross-products.
    reml:
        REML criterion or ML deviance.
    lower:
        lower bounds of ``θ`` (0 on diagonals, ``-inf`` elsewhere).
    start:
        starting ``θ``.
    control:
        optimiser options.
    n_rho:
        number of free relative residual variances (``D - 1``).
    rho_start:
        starting ``ρ_1 … ρ_{D-1}`` (default 1).
    fixed:
        ``{index: value}`` of parameters (in the ``[θ, log ρ]`` vector) held fixed.
    theta_scale:
        positive scales ``s`` of the ``θ`` elements (:func:`theta_scale`): L-BFGS-B works on
        ``θ_i / s_i``, which makes a model whose random-effect columns have very different
        magnitudes well conditioned (the optimum does not depend on it).  ``None``: no
        scaling.

    Returns
    -------
    OptimResult
    """
    ctl = control or NativeControl()
    nth = len(start)
    x0_full = np.concatenate([np.asarray(start, float),
                              np.log(rho_start) if rho_start is not None else np.zeros(n_rho)])
    lb_full = np.concatenate([np.asarray(lower, float), np.full(n_rho, -30.0)])
    ub_full = np.concatenate([np.full(nth, np.inf), np.full(n_rho, 30.0)])
    fixed = fixed or {}
    free = np.array([i for i in range(x0_full.size) if i not in fixed], dtype=int)
    n_eval = [0]

    def full(xf: np.ndarray) -> np.ndarray:
        x = x0_full.copy()
        for i, v in fixed.items():
            x[i] = v
        x[free] = xf
        return x

    def crit_full(x: np.ndarray) -> float:
        n_eval[0] += 1
        th = x[:nth]
        rho = np.concatenate([[1.0], np.exp(x[nth:])]) if n_rho else None
        return profiled_deviance(th, cp, reml, rho)

    def f(xf: np.ndarray) -> float:
        return crit_full(full(xf))

    analytic = ctl.analytic_gradient and n_rho == 0 and has_analytic_gradient(cp)
    diag_theta = np.asarray(lower, float) == 0.0   # diagonal elements of the T_k

    def grad_analytic(xf: np.ndarray) -> tuple[float, np.ndarray] | None:
        """Criterion and analytic gradient (every diagonal θ ≥ 1e-4), else ``None``."""
        if not analytic:
            return None
        key = np.asarray(xf, float).tobytes()
        if key in _memo:  # the optimum is re-evaluated by the convergence check
            hit = _memo[key]
            return None if hit is None else (hit[0], hit[1].copy())
        out = _grad_analytic(xf)
        _memo.clear()
        _memo[key] = out
        return None if out is None else (out[0], out[1].copy())

    _memo: dict[bytes, tuple[float, np.ndarray] | None] = {}

    def _grad_analytic(xf: np.ndarray) -> tuple[float, np.ndarray] | None:
        x = full(xf)
        if np.any(x[:nth][diag_theta] < 1e-4):
            return None
        n_eval[0] += 1
        try:
            fx, g = profiled_deviance_grad(x[:nth], cp, reml)
        except np.linalg.LinAlgError:
            return None
        if not np.isfinite(fx):
            return None
        return fx, g[free]

    def grad_partial(xf: np.ndarray) -> tuple[float, np.ndarray] | None:
        """Criterion and gradient with some diagonal θ below 1e-4 (boundary polishing):
        exact for every term with an invertible ``T_k`` and for scalar terms at 0, central
        differences for the components of singular vector-valued terms."""
        x = full(xf)
        n_eval[0] += 1
        try:
            fx, g = profiled_deviance_grad(x[:nth], cp, reml, singular="partial")
        except np.linalg.LinAlgError:
            return None
        if not np.isfinite(fx):
            return None
        g = g[free]
        missing = ~np.isfinite(g)
        if missing.any():
            g[missing] = fd_grad(f, xf, lbf, ctl.fd_step, fx, idx=missing)[missing]
        return fx, g

    lbf = lb_full[free]
    ubf = ub_full[free]
    x0 = np.clip(x0_full[free], lbf, ubf)
    # the optimiser's coordinates are x / D (θ_i / s_i; log ρ unscaled)
    D = np.ones(free.size)
    if theta_scale is not None:
        sc = np.asarray(theta_scale, float)
        if sc.shape != (nth,) or not np.all(np.isfinite(sc) & (sc > 0)):
            raise ValueError(f"theta_scale must be {nth} positive finite numbers, not {sc!r}")
        is_th = free < nth
        D[is_th] = sc[free[is_th]]
    messages: list[str] = []
    rtol_now = [ctl.stop_rtol]
    loose = False
    if free.size == 0:
        xopt = x0
        fopt = f(x0)
        opt_msg = "no free parameters"
        ok = True
    else:
        def fg(xf: np.ndarray) -> tuple[float, np.ndarray]:
            out = grad_analytic(xf)
            if out is not None:
                return out
            if analytic:
                out = grad_partial(xf)
                if out is not None:
                    return out
            f0 = f(xf)
            return f0, fd_grad(f, xf, lbf, ctl.fd_step, f0)

        # an exact gradient converges on the projected gradient; the extremely tight ftol
        # only makes the line search thrash at the optimum (ABNORMAL) with finite differences
        ftol, gtol = (max(ctl.ftol, 1e-13), max(ctl.gtol, 1e-6)) if analytic else (ctl.ftol, ctl.gtol)

        # a large rest block (each evaluation costs several dense factorisations) with the
        # Newton polish to follow stops L-BFGS-B at a loose gap (LARGE_STOP_RTOL): Newton
        # steps with the Hessian that lme4's convergence check needs anyway, BFGS-corrected
        # (newton_polish, max_steps=LARGE_NEWTON_STEPS), finish superlinearly; when they are
        # not taken or do not converge the run is resumed with the strict stop_rtol
        loose = (analytic and ctl.newton_polish and ctl.stop_rtol > 0
                 and cp.Arr.shape[1] >= LARGE_REST)
        if loose:
            rtol_now[0] = max(ctl.stop_rtol, LARGE_STOP_RTOL)

        def run(x_start: np.ndarray, lo: np.ndarray):
            """One L-BFGS-B run from ``x_start`` with lower bounds ``lo`` (θ units), in the
            scaled coordinates ``x / D`` and, with the exact gradient, with the
            superlinear-convergence stop of :class:`SuperlinearStop`."""
            stop = None
            if analytic and rtol_now[0] > 0:
                # the loose stop (a Newton step follows) also accepts a larger last decrease
                loose_now = rtol_now[0] > ctl.stop_rtol
                stop = SuperlinearStop(rtol_now[0], LARGE_STOP_DEC_RTOL if loose_now else 1e-9,
                                       runs=LARGE_STOP_RUNS if loose_now else 1)
            return _lbfgsb_scaled(fg, x_start, lo, ubf, D, ctl.maxiter, ftol, gtol, stop,
                                  newton_follows=ctl.newton_polish)
        near_bound = False
        if analytic:
            # stage 1: keep θ_k ≥ 1e-4 so that every step has the exact gradient; a component
            # that ends on that bound is polished below with the true bound 0 (and the
            # finite-difference gradient there)
            lb1 = np.where(np.isfinite(lbf) & (lbf == 0.0), 1e-4, lbf)
            res = run(np.maximum(x0, lb1), lb1)
            # a component that ends on 1e-4 is polished below with the bound BOUNDARY_EPS · s
            # (every T_k stays invertible, so every gradient is exact; the criterion is even
            # in the last diagonal of T_k, so stopping that close to 0 costs O(ε²)), then
            # set to 0 (below SNAP_TO_ZERO) where that does not raise the criterion
            near_bound = bool(np.any((lbf == 0.0) & (res.x <= 1e-4 * (1 + 1e-8))))
        else:
            res = run(x0, lbf)
        xopt, fopt = res.x, float(res.fun)
        # restart once from the optimum: L-BFGS-B's line search can stop early on a flat ridge
        # (not needed when an exact gradient met the projected-gradient test)
        opt_msg = str(res.message)
        restart = not (analytic and not near_bound and res.success)
        if restart and analytic and not near_bound and _abnormal(opt_msg):
            # an exact gradient that stopped abnormally (line search at rounding level) at a
            # stationary point: a restart cannot improve
            gx = grad_analytic(xopt)
            restart = gx is None or not _stationary(gx[1], xopt, lbf, ubf, fopt)
        if restart:
            lb2 = lbf
            if analytic and near_bound:
                lb2 = np.where(np.isfinite(lbf) & (lbf == 0.0), BOUNDARY_EPS * D, lbf)
            res2 = run(np.maximum(xopt, lb2), lb2)
            if res2.fun <= fopt:
                xopt, fopt = res2.x, float(res2.fun)
            opt_msg = str(res2.message)
            if analytic and near_bound:
                # a diagonal that ended at (or next to) the ε bound, or that never left the
                # stage-1 bound (a zero gradient there: the criterion is flat in it), is 0
                # for lme4
                on_eps = (lbf == 0.0) & ((xopt <= SNAP_TO_ZERO * np.minimum(1.0, D))
                                         | (xopt <= 1e-4 * (1 + 1e-8)))
                if on_eps.any():
                    xs = np.where(on_eps, 0.0, xopt)
                    fs = f(xs)
                    if fs <= fopt + 1e-13 * max(1.0, abs(fopt)):
                        xopt, fopt = xs, min(fopt, float(fs))
        # a diagonal θ on its bound has a zero derivative there (the criterion is even in a
        # 1×1 θ), so a gradient method can stop at a saddle: probe away from the bound and
        # restart when that improves the criterion.
        # "At the bound" and the probe values are in the scaled units θ_i / s_i (a slope
        # on a covariate of magnitude 1e-3 has s_i ≈ 1e3: θ_i = 3e-4 is then a variance of
        # ~0 and the probes must reach θ_i ~ 1e2-1e3).
        for _ in range(3):
            at_bound = [i for i in range(xopt.size) if np.isfinite(lbf[i]) and lbf[i] == 0.0
                        and (xopt[i] < ctl.singular_tol or xopt[i] < ctl.singular_tol * D[i])]
            best = None
            for i in at_bound:
                for v in (1e-3, 1e-2, 0.05, 0.2, 0.5, 1.0, 2.0):
                    xt = xopt.copy()
                    xt[i] = v * D[i]
                    ft = f(xt)
                    if ft < fopt - 1e-10 and (best is None or ft < best[1]):
                        best = (xt, ft)
            if best is None:
                break
            r3 = run(best[0], lbf)
            if r3.fun < fopt:
                xopt, fopt = r3.x, float(r3.fun)
                opt_msg = str(r3.message)
            else:
                break
        # an abnormal stop (L-BFGS-B's line search failing) away from a stationary point:
        # polish by restarting, then warn if it persists with a non-negligible gradient
        if _abnormal(opt_msg) and np.isfinite(fopt):
            gx = fg(xopt)[1]
            gmax = _projected_grad_max(gx, xopt, lbf, ubf)
            tries = 0
            while not _stationary(gx, xopt, lbf, ubf, fopt) and tries < 2:
                r4 = run(xopt, lbf)
                tries += 1
                improved = r4.fun < fopt
                if r4.fun <= fopt:
                    xopt, fopt = r4.x, float(r4.fun)
                opt_msg = str(r4.message)
                gx = fg(xopt)[1]
                gmax = _projected_grad_max(gx, xopt, lbf, ubf)
                if not _abnormal(opt_msg) or not improved:
                    break
            if _abnormal(opt_msg):
                if gmax > ctl.abnormal_gtol:
                    messages.append(f"optimizer (L-BFGS-B) stopped abnormally after polishing "
                                    f"({opt_msg.strip()}) with max|projected gradient| = "
                                    f"{gmax:.3g} (tol = {ctl.abnormal_gtol:g})")
        ok = bool(np.isfinite(fopt))
        if not ok:
            messages.append("optimizer returned a non-finite criterion")
    x = full(xopt)
    theta = x[:nth]
    # lme4's isSingular
    diag_mask = np.asarray(lower, float) == 0.0
    singular = bool(np.any(theta[diag_mask] < ctl.singular_tol))
    # a large rest block makes each gradient cost O(m³): forward differences there
    central = cp.Arr.shape[1] < LARGE_REST
    pre = None
    step = None
    # (only after a converged run: a run stopped by maxiter or abnormally is reported as is)
    if (analytic and ctl.newton_polish and free.size and ok and not singular
            and str(opt_msg).upper().startswith("CONVERGENCE")):
        interior = interior_params(xopt, lbf)
        gh = gradient_hessian(grad_analytic, xopt, interior, 1e-4, central) if interior.size else None
        if gh is not None:
            pre = (interior, gh[1])
            keep = np.where(np.isfinite(lbf) & (lbf == 0.0), ctl.singular_tol, -np.inf)
            step = newton_polish(grad_analytic, xopt, fopt, lbf, ubf, interior, gh[0], gh[1],
                                 keep_above=keep, **(dict(max_steps=LARGE_NEWTON_STEPS,
                                                          dec_rtol=LARGE_NEWTON_DEC_RTOL)
                                                     if loose else {}))
            if step is not None:
                xopt, fopt = step
                x = full(xopt)
                theta = x[:nth]
    if rtol_now[0] > ctl.stop_rtol and step is None and ok:
        # the loose stop was not followed by a Newton step: finish with the strict one
        rtol_now[0] = ctl.stop_rtol
        r5 = run(xopt, lbf)
        if r5.fun <= fopt:
            xopt, fopt = r5.x, float(r5.fun)
            opt_msg = str(r5.message)
            x = full(xopt)
            theta = x[:nth]
            singular = bool(np.any(theta[diag_mask] < ctl.singular_tol))
            pre = None
    if ctl.check_conv and free.size and ok and not singular:  # lme4 skips checkConv when singular
        messages += check_conv(f, xopt, lbf, ctl, grad_analytic if analytic else None,
                               is_theta=free < nth, central=central, precomputed=pre)
    rho = np.concatenate([[1.0], np.exp(x[nth:])]) if n_rho else None
    return OptimResult(theta=theta, rho=rho, criterion=fopt, converged=ok and not messages,
                       singular=singular, n_eval=n_eval[0], messages=messages,
                       optimizer_message=opt_msg)


def ray_start(f, x0: np.ndarray, factors: tuple[float, ...] = (0.3, 0.1, 0.03, 0.01),
              evaluate_vertex: bool = True) -> tuple[np.ndarray, int]:
    """A better start on the ray ``c·x0`` (``c > 0``): the minimiser of a parabola in
    ``log c`` through the best evaluated factor and its neighbours.

    ``f(c·x0)`` is evaluated at ``c = 1`` and then at the ``factors`` (decreasing) while it
    decreases; with a bracket (a lower value between two higher ones) the parabola's
    vertex in ``log c`` is evaluated too, and the best point found is returned with the
    number of evaluations.  Scaling all ``θ`` of lme4's start by one factor keeps its
    correlation structure (none) and bounds; for InstEval's
    ``(1 | s) + (service | d)`` the criterion at ``c = 1`` is 5·10³ above the optimum and
    L-BFGS-B's first steps (on the bounds) cost several exact-gradient evaluations, each
    three dense Cholesky-sized operations; a few criterion evaluations (one each) on the
    ray save them.

    ``evaluate_vertex=False``: the vertex is returned without evaluating it (the caller's
    optimiser evaluates its start anyway, with the gradient): one evaluation fewer, and
    the start differs from the evaluated variant's only where the vertex is not below
    the best evaluated factor.
    """
    x0 = np.asarray(x0, float)
    cs = [1.0]
    fs = [f(x0)]
    for c in factors:
        fc = f(c * x0)
        cs.append(c)
        fs.append(fc)
        if not fc < fs[-2]:
            break
    n = len(fs)
    i = int(np.argmin(fs))
    best_c, best_f = cs[i], fs[i]
    if 0 < i < n - 1 and np.all(np.isfinite(fs[i - 1: i + 2])):
        xs = np.log(cs[i - 1: i + 2])
        ys = np.asarray(fs[i - 1: i + 2])
        den = (xs[0] - xs[1]) * (xs[0] - xs[2]) * (xs[1] - xs[2])
        a = (xs[2] * (ys[1] - ys[0]) + xs[1] * (ys[0] - ys[2]) + xs[0] * (ys[2] - ys[1])) / den
        b = (xs[2] ** 2 * (ys[0] - ys[1]) + xs[1] ** 2 * (ys[2] - ys[0])
             + xs[0] ** 2 * (ys[1] - ys[2])) / den
        if a > 0:
            v = -b / (2 * a)
            if xs.min() < v < xs.max():
                cv = float(np.exp(v))
                if not evaluate_vertex:
                    return cv * x0, n
                fv = f(cv * x0)
                n += 1
                if fv < best_f:
                    best_c, best_f = cv, fv
    return best_c * x0, n


def theta_scale(cp: CrossProducts) -> np.ndarray:
    """Column scales of the relative covariance factors: ``s`` with one entry per ``θ``.

    For column ``a`` of term ``k`` let ``m_{ka} = Σ_i w_i z_{ia}² / n`` (its weighted mean
    square, from the diagonals of ``Z_k'WZ_k``).  With ``T_k = S_k T̃_k``,
    ``S_k = diag(m_{ka}^{-1/2})``, the model in ``T̃_k`` is the model whose random-effect
    columns have unit mean square, so ``θ_{(a,b)} = s_{ka} θ̃_{(a,b)}`` (row ``a`` of
    ``T_k``): an intercept column keeps scale 1, a slope on a covariate of magnitude 30 gets
    ``1/30``.  A column that is zero everywhere keeps scale 1.
    """
    A11 = cp.A11.sum(axis=0)                          # (n_1, p_1, p_1)
    ms = [np.einsum("laa->a", A11)]
    dr = np.diagonal(cp.Arr.sum(axis=0))
    pos = 0
    for k in range(1, len(cp.term_p)):
        pk, nk = cp.term_p[k], cp.term_nlev[k]
        ms.append(dr[pos: pos + pk * nk].reshape(nk, pk).sum(axis=0))
        pos += pk * nk
    out = []
    for k, pk in enumerate(cp.term_p):
        m = np.asarray(ms[k], float) / max(cp.n, 1)
        sk = np.where(m > 0, 1.0 / np.sqrt(np.where(m > 0, m, 1.0)), 1.0)
        for j in range(pk):
            for i in range(j, pk):
                out.append(sk[i])
    return np.asarray(out)


class SuperlinearStop:
    """L-BFGS-B callback that ends a run once it has converged to the criterion's rounding
    level.

    Let ``δ_k`` be the decrease of the criterion ``d`` in iteration ``k`` and
    ``r = δ_k/δ_{k-1}``.  Near the optimum L-BFGS-B with an exact gradient converges
    superlinearly; at a (pessimistic) linear rate ``r`` the remaining gap is
    ``δ_k r/(1 − r)``.  The run is ended (``StopIteration``) once ``r ≤ 1/2``,
    ``δ_k ≤ 10⁻⁹ max(1, |d|)``, that gap estimate is at most ``rtol · max(1, |d|)`` and
    the projected gradient in the scaled coordinates is at most :data:`STOP_GTOL`:
    further iterations would only make the line search thrash on rounding noise (the
    "ABNORMAL" stops).

    It also counts the evaluations of the current line search (:meth:`evaluated`): more
    than :data:`THRASH_EVALS` of them after an iteration that gained at most
    ``10⁻⁹ max(1, |d|)`` is a line search failing on rounding noise, and
    :class:`_Thrashing` ends the run at the best point so far; :meth:`converged_at_thrash`
    tells whether the gap estimate there is at most :data:`THRASH_GAP_RTOL` (otherwise the
    stop is reported as abnormal, which the caller checks as L-BFGS-B's own).
    """

    def __init__(self, rtol: float, dec_rtol: float = 1e-9, runs: int = 1):
        self.rtol = rtol
        self.dec_rtol = dec_rtol
        self.runs = runs
        self.prev: float | None = None
        self.decs: list[float] = []
        self.stopped = False
        self.in_search = 0

    def _gap(self) -> float:
        """Gap estimate ``δ_k r/(1 − r)`` from the last two decreases (``inf`` when it does
        not apply: fewer than two iterations, no decrease, ``r > 1/2`` or ``δ_k`` above
        ``10⁻⁹ max(1, |d|)``)."""
        if len(self.decs) < 2 or self.prev is None:
            return np.inf
        d1, d0 = self.decs[-1], self.decs[-2]
        if not (d0 > 0 and 0 <= d1 <= 0.5 * d0
                and d1 <= self.dec_rtol * max(1.0, abs(self.prev))):
            return np.inf
        # the loose stop (runs > 1) also needs the decreases before to have halved: one
        # small decrease after a large one is a stalled line search, not convergence
        if self.runs > 1:
            if len(self.decs) < self.runs + 1:
                return np.inf
            for k in range(2, self.runs + 1):
                a, b = self.decs[-k], self.decs[-k - 1]
                if not (b > 0 and 0 <= a <= 0.5 * b):
                    return np.inf
        r = d1 / d0
        return d1 * r / (1 - r)

    def __call__(self, intermediate_result) -> None:
        f = float(intermediate_result.fun)
        self.in_search = 0
        if self.prev is not None and np.isfinite(f):
            self.decs.append(self.prev - f)
        self.prev = f
        if self._gap() <= self.rtol * max(1.0, abs(f)) and (
                self.small_gradient(intermediate_result.x)
                or self.interior(intermediate_result.x)):
            self.stopped = True
            raise StopIteration

    #: the last evaluation ``(y, projected gradient max)``, set by the caller
    last: tuple[np.ndarray, float] | None = None
    #: lower bounds of the optimiser's scaled coordinates, set by the caller when a Newton
    #: step (:func:`newton_polish`) follows the run; ``None``: no waiver
    interior_lo: np.ndarray | None = None

    def interior(self, y: np.ndarray) -> bool:
        """Whether the gradient condition is waived at ``y``: a Newton step follows the run
        (:attr:`interior_lo` set) and every diagonal ``θ`` (bound ``≥ 0``) is at least
        :data:`THRASH_MIN_DIAG` in scaled units, far from the saddles at a variance of 0
        that the gradient condition guards against.  There the remaining error in ``θ``
        (the square root of the criterion gap) is removed by the Newton step, which needs the
        exact Hessian of lme4's convergence check anyway."""
        lo = self.interior_lo
        if lo is None:
            return False
        diag = np.isfinite(lo) & (lo >= 0)
        return bool(np.all(np.asarray(y)[diag] >= THRASH_MIN_DIAG))

    def small_gradient(self, y: np.ndarray) -> bool:
        """Whether the projected gradient at the iterate ``y`` (the optimiser's scaled
        coordinates) is at most :data:`STOP_GTOL`: a small decrease with a sizeable
        gradient is slow progress (e.g. next to a saddle at a variance of 0), not
        convergence."""
        return (self.last is not None and np.array_equal(self.last[0], y)
                and self.last[1] <= STOP_GTOL)

    def evaluated(self) -> None:
        """Count one evaluation; raise :class:`_Thrashing` on a line search at rounding
        level."""
        self.in_search += 1
        if (self.in_search > THRASH_EVALS and self.decs and self.prev is not None
                and 0 <= self.decs[-1] <= 1e-9 * max(1.0, abs(self.prev))):
            raise _Thrashing

    def converged_at_thrash(self, pg_max: float, y: np.ndarray, lo: np.ndarray) -> bool:
        """Whether a run ended by :class:`_Thrashing` at ``y`` (scaled coordinates, lower
        bounds ``lo``) is within :data:`THRASH_GAP_RTOL` (gap estimate, relative) of the
        optimum.  Also required: a projected gradient ``pg_max`` of at most
        :data:`STOP_GTOL`, or every diagonal ``θ`` (bound ``≥ 0``) at least
        :data:`THRASH_MIN_DIAG` in scaled units.  A line search can fail with a sizeable
        gradient when the criterion is noisier than its exact gradient (then the Newton
        polish finishes the fit), but also while creeping away from a saddle at a variance
        of 0 (TVbo's ranova model): that is reported as an abnormal stop, which the caller
        checks and restarts."""
        if self.prev is None or self._gap() > THRASH_GAP_RTOL * max(1.0, abs(self.prev)):
            return False
        diag = np.isfinite(lo) & (lo >= 0)
        return bool(pg_max <= STOP_GTOL or np.all(y[diag] >= THRASH_MIN_DIAG))


class _Thrashing(Exception):
    """A line search evaluating on at the criterion's rounding level (see
    :class:`SuperlinearStop`)."""


#: largest projected gradient (in the optimiser's scaled coordinates) at which
#: :class:`SuperlinearStop` may end a run
STOP_GTOL = 1e-4

#: smallest diagonal θ (scaled units) at which a thrashing line search with a sizeable
#: gradient counts as converged (see :meth:`SuperlinearStop.converged_at_thrash`)
THRASH_MIN_DIAG = 0.1

#: a line search ended as thrashing counts as converged when the gap estimate of
#: :class:`SuperlinearStop` is at most this (relative)
THRASH_GAP_RTOL = 1e-10

#: evaluations of one line search after which a search near convergence is ended as thrashing
THRASH_EVALS = 4


def _lbfgsb_scaled(fg, x0: np.ndarray, lb: np.ndarray, ub: np.ndarray, D: np.ndarray,
                   maxiter: int, ftol: float, gtol: float, stop: SuperlinearStop | None,
                   newton_follows: bool = False):
    """L-BFGS-B on ``y = x / D`` for ``fg(x) -> (f, ∂f/∂x)`` under ``lb ≤ x ≤ ub``
    (``∂f/∂y = D ∂f/∂x``); the result's ``x`` is in the original units.  A run ended by
    ``stop`` reports success with the message ``"CONVERGENCE: SUPERLINEAR STOP …"``, one
    ended as thrashing the best point seen with an ``"ABNORMAL …"`` message."""
    best: list = [np.inf, None, None]

    lo = np.where(np.isfinite(lb), lb / D, -np.inf)
    hi = np.where(np.isfinite(ub), ub / D, np.inf)
    if stop is not None and newton_follows:
        stop.interior_lo = lo

    def fgy(y: np.ndarray):
        if stop is not None:
            stop.evaluated()
        f, g = fg(y * D)
        gy = g * D
        if f < best[0]:
            best[:] = [f, y.copy(), gy]
        if stop is not None:
            stop.last = (y.copy(), _projected_grad_max(gy, y, lo, hi))
        return f, gy
    bounds = list(zip(np.where(np.isfinite(lo), lo, None), np.where(np.isfinite(hi), hi, None)))
    y0 = np.clip(np.asarray(x0, float) / D, lo, hi)
    try:
        res = minimize(fgy, y0, jac=True, method="L-BFGS-B", bounds=bounds, callback=stop,
                       options=dict(maxiter=maxiter, ftol=ftol, gtol=gtol, maxcor=20))
    except _Thrashing:
        if stop.converged_at_thrash(_projected_grad_max(best[2], best[1], lo, hi), best[1], lo):
            res = OptimizeResult(x=best[1], fun=best[0], jac=best[2], success=True, status=0,
                                 message="CONVERGENCE: line search at the criterion's "
                                         "rounding level")
        else:
            res = OptimizeResult(x=best[1], fun=best[0], jac=best[2], success=False, status=2,
                                 message="ABNORMAL: line search at the criterion's "
                                         "rounding level")
    x = np.asarray(res.x, float) * D
    # never report a point outside the bounds in θ units (rounding of y · D)
    res.x = np.clip(x, lb, ub)
    if stop is not None and stop.stopped:
        res.success = True
        res.status = 0
        res.message = ("CONVERGENCE: SUPERLINEAR STOP (criterion decrease at rounding level, "
                       f"rtol {stop.rtol:g})")
    return res


#: boundary polishing: a diagonal ``θ_i`` that ends on the stage-1 bound ``1e-4`` is
#: polished with the bound ``BOUNDARY_EPS · s_i`` (``s`` the :func:`theta_scale`), where the
#: exact gradient still applies, and then set to 0 if that does not raise the criterion
BOUNDARY_EPS = 1e-8

#: after boundary polishing a diagonal ``θ_i ≤ SNAP_TO_ZERO · min(1, s_i)`` is set to 0 (as
#: lme4 reports a boundary fit) when that does not raise the criterion beyond rounding
SNAP_TO_ZERO = 1e-6

#: an abnormal L-BFGS-B stop where ``max_i |g_i|·max(|x_i|, 0.01) ≤ STATIONARY_RTOL·max(1, |f|)``
#: (projected gradient ``g``: a 1 % move of any parameter changes the criterion by less than
#: 1e-8 relative) is at a stationary point, the line search having failed at rounding level;
#: it is not restarted
STATIONARY_RTOL = 1e-6


def _stationary(g: np.ndarray, x: np.ndarray, lb: np.ndarray, ub: np.ndarray, f: float) -> bool:
    """Whether the projected gradient ``g`` at ``x`` is negligible on the criterion's scale
    (see :data:`STATIONARY_RTOL`)."""
    gp = np.asarray(g, float).copy()
    with np.errstate(invalid="ignore"):
        at_lo = np.isfinite(lb) & (x <= lb + 1e-12 * np.maximum(1.0, np.abs(lb))) & (gp > 0)
        at_hi = np.isfinite(ub) & (x >= ub - 1e-12 * np.maximum(1.0, np.abs(ub))) & (gp < 0)
    gp[at_lo | at_hi] = 0.0
    if not np.all(np.isfinite(gp)):
        return False
    return bool(np.max(np.abs(gp) * np.maximum(np.abs(x), 0.01), initial=0.0)
                <= STATIONARY_RTOL * max(1.0, abs(f)))

#: rest-block size from which lme4's Hessian check uses forward differences of the exact
#: gradient (each evaluation then costs several dense O(m³) factorisations)
LARGE_REST = 1000

#: with a rest block of at least :data:`LARGE_REST` rows and the Newton polish on, L-BFGS-B
#: stops once the gap estimate of :class:`SuperlinearStop` is at most this (relative); the
#: Newton iteration of :func:`newton_polish` (:data:`LARGE_NEWTON_STEPS`) then converges
#: superlinearly from there with the Hessian that lme4's convergence check needs anyway
LARGE_STOP_RTOL = 1e-7

#: with the loose stop of :data:`LARGE_STOP_RTOL`, the last decrease of the criterion may be
#: up to this (relative; the strict stop: ``1e-9``): near the optimum a Newton step with
#: the finite-difference Hessian gains more than a quasi-Newton iteration at the same cost
#: (InstEval ``(1 | s) + (service | d)``: the last L-BFGS-B iterations decrease the
#: criterion by 8e-6, 6e-7 and 5e-9 relative; one Newton step from the second of these
#: ends as close to the optimum as one from the third)
LARGE_STOP_DEC_RTOL = 1e-6

#: the loose stop also needs this many consecutive decreases, each at most half the one
#: before (:class:`SuperlinearStop` ``runs``): InstEval ``(1 | s) + (1 | d) + (1 | dept)``
#: has a decrease of 4e-7 relative after one of 2e-5, 15 criterion units from its optimum
LARGE_STOP_RUNS = 2

#: Newton steps (BFGS-corrected, see :func:`newton_polish`) after the loose stop at most;
#: without convergence L-BFGS-B resumes with the strict stop
LARGE_NEWTON_STEPS = 5

#: the Newton iteration after the loose stop ends once the predicted decrease of a further
#: step is at most this (relative): a parameter error of ``√(2·1e-13·|d|/λ)``, at the
#: criterion's rounding level (its noise is ≈ 1e-14 relative)
LARGE_NEWTON_DEC_RTOL = 1e-13


def _abnormal(message: str) -> bool:
    """Whether an L-BFGS-B message reports an abnormal stop (line-search failure)."""
    return "ABNORMAL" in str(message).upper()


def _projected_grad_max(g: np.ndarray, x: np.ndarray, lb: np.ndarray, ub: np.ndarray) -> float:
    """``max|P(g)|``: the gradient with the components pushing into an active bound removed
    (L-BFGS-B's projected-gradient test)."""
    g = np.asarray(g, float).copy()
    with np.errstate(invalid="ignore"):   # infinite bounds are never active
        at_lo = np.isfinite(lb) & (x <= lb + 1e-12 * np.maximum(1.0, np.abs(lb))) & (g > 0)
        at_hi = np.isfinite(ub) & (x >= ub - 1e-12 * np.maximum(1.0, np.abs(ub))) & (g < 0)
    g[at_lo | at_hi] = 0.0
    return float(np.max(np.abs(g))) if g.size else 0.0


def interior_params(x: np.ndarray, lb: np.ndarray) -> np.ndarray:
    """Indices of the parameters off their lower bounds (by more than ``1e-4``, relative to
    ``max(1, |lb|)``): those lme4's ``checkConv`` tests."""
    return np.flatnonzero(~(np.isfinite(lb) & (x - lb < 1e-4 * np.maximum(1.0, np.abs(lb)))))


def gradient_hessian(fg, x: np.ndarray, interior: np.ndarray, h: float = 1e-4,
                     central: bool = True) -> tuple[np.ndarray, np.ndarray] | None:
    """The exact gradient ``g`` at ``x`` (all parameters) and the Hessian of the criterion
    over the ``interior`` parameters by central (``central=False``: forward) differences of
    the exact gradient ``fg(x) -> (f, g)`` with steps ``h·max(1, |x_i|)``, symmetrised;
    ``None`` when ``fg`` returns ``None`` somewhere."""
    fgx = fg(x)
    if fgx is None:
        return None
    H = np.empty((interior.size, interior.size))
    for a, i in enumerate(interior):
        hi = h * max(1.0, abs(x[i]))
        xp = x.copy(); xp[i] += hi
        gp = fg(xp)
        if central:
            xm = x.copy(); xm[i] -= hi
            gm = fg(xm)
        else:
            gm = fgx
        if gp is None or gm is None:
            return None
        H[a] = (gp[1][interior] - gm[1][interior]) / ((2 if central else 1) * hi)
    return fgx[1], (H + H.T) / 2


def newton_polish(fg, x: np.ndarray, f0: float, lb: np.ndarray, ub: np.ndarray,
                  interior: np.ndarray, g: np.ndarray, H: np.ndarray,
                  keep_above: np.ndarray | None = None, max_steps: int = 1,
                  dec_rtol: float = 0.0) -> tuple[np.ndarray, float] | None:
    """Newton steps ``x_I ← x_I − H^{-1} g_I`` on the ``interior`` parameters ``I``
    (``H`` positive definite): the new point and its criterion when the steps stay inside
    the bounds (and above ``keep_above`` where that is given) and do not raise the
    criterion by more than its rounding level (``1e-13`` relative); otherwise ``None``.

    Near the optimum the quasi-Newton iterate has a small criterion gap but, on a flat
    criterion, a parameter error of its square root; one Newton step with the Hessian
    that lme4's convergence check needs anyway squares that error.

    ``max_steps > 1`` (the large-rest-block route, whose L-BFGS-B run stops further from
    the optimum): after each accepted step ``s`` with gradient change ``y``, ``H`` is
    updated by BFGS, ``H ← H − Hss'H/(s'Hs) + yy'/(s'y)`` (the finite-difference Hessian
    corrected along the step: superlinear convergence without new Hessians), and the
    iteration ends once the predicted decrease ``½ g_I'H^{-1}g_I`` of a further step is at
    most ``dec_rtol · max(1, |f|)``; ``None`` also when that does not happen within
    ``max_steps`` steps or a step leaves the bounds (the caller then resumes its
    quasi-Newton run); a step that raises the criterion after an accepted one ends the
    iteration at the accepted point (the criterion's rounding level)."""
    best = None
    Hk = np.array(H, float, copy=True)
    xk, fk, gk = x, float(f0), np.asarray(g, float)
    for k in range(max_steps):
        try:
            c = sla.cho_factor(Hk, lower=True)
        except np.linalg.LinAlgError:
            return best if max_steps == 1 else None
        d = -sla.cho_solve(c, gk[interior])
        if not np.all(np.isfinite(d)):
            break
        xn = xk.copy()
        xn[interior] += d
        if np.any(xn < lb) or np.any(xn > ub):
            break
        if keep_above is not None and np.any(xn[interior] < keep_above[interior]):
            break
        out = fg(xn)
        if out is None or not np.isfinite(out[0]):
            break
        if out[0] > fk + 1e-13 * max(1.0, abs(fk)):
            # (after an accepted step: the criterion is at its rounding level there)
            return best
        best = (xn, float(out[0]))
        if max_steps == 1:
            return best
        gn = np.asarray(out[1], float)
        y = gn[interior] - gk[interior]
        sy = float(d @ y)
        if sy > 0:
            Hs = Hk @ d
            Hk = Hk - np.outer(Hs, Hs) / float(d @ Hs) + np.outer(y, y) / sy
        xk, fk, gk = xn, float(out[0]), gn
        try:
            pred = 0.5 * float(gk[interior] @ sla.cho_solve(sla.cho_factor(Hk, lower=True),
                                                            gk[interior]))
        except np.linalg.LinAlgError:
            return None
        if pred <= dec_rtol * max(1.0, abs(fk)):
            return best
    return best if max_steps == 1 else None


def check_conv(f, x: np.ndarray, lb: np.ndarray, ctl: NativeControl, fg=None,
               is_theta: np.ndarray | None = None, central: bool = True,
               precomputed: tuple[np.ndarray, np.ndarray] | None = None) -> list[str]:
    """lme4's ``checkConv`` (gradient and Hessian) on the parameters off their bounds.

    With an analytic gradient ``fg`` (returning ``(f, g)`` or ``None``) the gradient is
    exact and the Hessian the central (``central=False``: forward, half the gradient
    evaluations, for models whose evaluations are expensive) difference of the gradient;
    otherwise both are finite differences of ``f``.  ``is_theta`` marks the ``θ`` parameters
    (the others are ``log ρ``); lme4's eigenvalue-size checks apply to the ``θ`` block
    only.  ``precomputed = (interior, H)``: a Hessian over the same interior parameters
    computed at a point next to ``x`` (by :func:`gradient_hessian` before a
    :func:`newton_polish` step); the gradient is then evaluated at ``x``."""
    interior = interior_params(x, lb)
    if interior.size == 0:
        return []
    h = 1e-4
    H = None
    if fg is not None and precomputed is not None and np.array_equal(precomputed[0], interior):
        fgx = fg(x)
        if fgx is not None:
            g_all, H = fgx[1], precomputed[1]
    if H is None and fg is not None:
        gh = gradient_hessian(fg, x, interior, h, central)
        if gh is not None:
            g_all, H = gh
    if H is None:
        g_all = fd_grad(f, x, lb, h)
        H = fd_hess(f, x, interior, h)
    g = g_all[interior]
    msgs: list[str] = []
    H = (H + H.T) / 2
    try:
        Lc = np.linalg.cholesky(H)          # H = Lc Lc' = R'R with R = Lc'
        scgrad = sla.solve_triangular(Lc.T, g, lower=False)   # R's solve(chol(H), g)
        if not np.all(np.isfinite(scgrad)):
            raise np.linalg.LinAlgError
        mingrad = np.minimum(np.abs(scgrad), np.abs(g))
        mx = float(np.max(mingrad))
        if mx > ctl.check_conv_tol:
            comp = int(np.argmax(mingrad)) + 1
            msgs.append(f"Model failed to converge with max|grad| = {mx:.6g} "
                        f"(tol = {ctl.check_conv_tol:g}, component {comp})")
    except np.linalg.LinAlgError:
        msgs.append("unable to evaluate scaled gradient")
    msgs += check_hess(H, tol=1e-6, theta_block=None if is_theta is None
                        else np.asarray(is_theta, bool)[interior])
    return msgs


def check_hess(H: np.ndarray, tol: float = 1e-6, theta_block: np.ndarray | None = None) -> list[str]:
    """lme4's ``checkHess``: messages for a Hessian ``H`` of the criterion at the optimum.

    Negative eigenvalues (below ``-tol``) → non-convergence; an eigenvalue of size below
    ``tol`` or a failed Cholesky → numerically singular; otherwise, on the ``θ`` block, an
    eigenvalue above ``1/tol`` or a ratio ``min/max`` below ``tol`` → lme4's "nearly
    unidentifiable … Rescale variables?" advice."""
    if not np.all(np.isfinite(H)):
        return ["Problem with Hessian check (infinite or missing values?)"]
    ev = np.linalg.eigvalsh(H)
    nneg = int(np.sum(ev < -tol))
    if nneg:
        return [f"Model failed to converge: degenerate  Hessian with {nneg} negative eigenvalues"]
    try:
        np.linalg.cholesky(H)
        chol_ok = True
    except np.linalg.LinAlgError:
        chol_ok = False
    if np.any(np.abs(ev) < tol) or not chol_ok:
        return ["Hessian is numerically singular: parameters are not uniquely determined"]
    Ht = H if theta_block is None else H[np.ix_(theta_block, theta_block)]
    if Ht.size == 0:
        return []
    evt = np.linalg.eigvalsh(Ht)
    msgs = []
    if evt.max() * tol > 1:
        msgs.append("Model is nearly unidentifiable: very large eigenvalue\n - Rescale variables?")
    if evt.min() / evt.max() < tol:
        msgs.append("Model is nearly unidentifiable: large eigenvalue ratio\n - Rescale variables?")
    return msgs
