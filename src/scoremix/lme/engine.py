"""One native fit, from a :class:`~scoremix.lme.spec.ModelSpec` to the estimates.

The engine flows one way::

    spec → crossproducts (crossprod) → factorize (factor) → profiled deviance (deviance)
         → optimize_theta (optimizer) → estimates at θ̂ (conditional)

:func:`fit_native` runs that pipeline and returns a :class:`NativeFit`;
:meth:`scoremix.lme.result.LmerResult.from_native` turns it into the user-facing result (and
:func:`scoremix.lme.native.fit` does both).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scoremix.lme.conditional import estimates_at
from scoremix.lme.covstruct import ThetaMap
from scoremix.lme.crossprod import CrossProducts, crossproducts
from scoremix.lme.errors import SINGULAR_FIT_MESSAGE, ConvergenceWarning, SingularFitWarning
from scoremix.lme.deviance import profiled_deviance
from scoremix.lme.optimizer import (LARGE_REST, NativeControl, OptimResult, optimize_theta,
                                    ray_start, theta_scale)
from scoremix.lme.spec import ModelSpec
from scoremix.lme.structopt import optimize_structured

__all__ = ["NativeFit", "fit_native"]


@dataclass
class NativeFit:
    """The outcome of :func:`fit_native`.

    Attributes
    ----------
    spec, cp:
        the model and its cross-products.
    REML:
        REML (``True``) or ML.
    opt:
        the optimiser's :class:`~scoremix.lme.optimizer.OptimResult` (``θ̂``, ``ρ̂``,
        criterion, convergence messages).
    estimates:
        :func:`~scoremix.lme.conditional.estimates_at` at the optimum (without
        ``condvar`` where that is left to :func:`~scoremix.lme.conditional.condvar_at`).
    info:
        timings (``time_crossproducts``, ``time_optimize``, ``time_finalize``), ``n_eval``,
        ``optimizer_message`` and ``messages``.
    """

    spec: ModelSpec
    cp: CrossProducts
    REML: bool
    opt: OptimResult
    estimates: dict[str, Any]
    info: dict[str, Any] = field(default_factory=dict)


def fit_native(spec: ModelSpec, REML: bool = True, control: NativeControl | dict | None = None,
               cp: CrossProducts | None = None) -> NativeFit:
    """Fit a linear mixed model with the native engine (see the module docstring).

    Parameters
    ----------
    spec:
        the model.
    REML:
        REML (default) or maximum likelihood.
    control:
        :class:`~scoremix.lme.optimizer.NativeControl` or a dict of its fields; with
        ``warn=True`` (default) lme4's singular-fit and convergence warnings are issued.
    cp:
        precomputed cross-products (``crossproducts(spec)`` or a
        :func:`~scoremix.lme.crossprod.sum_crossproducts` of partitions).

    Raises
    ------
    ValueError
        REML with no more rows than fixed effects.
    """
    ctl = NativeControl.from_any(control)
    t0 = time.perf_counter()
    if cp is None:
        cp = crossproducts(spec)
    t1 = time.perf_counter()
    if spec.n - spec.p <= 0 and REML:
        raise ValueError(f"REML needs more rows ({spec.n}) than fixed effects ({spec.p})")
    n_rho = (cp.n_disp - 1)
    scale = theta_scale(cp) if ctl.scale_theta else None
    if ctl.theta_start is not None:
        start = np.asarray(ctl.theta_start, float)
    else:   # lme4's start (identity T_k), in the scaled units when θ is scaled
        start = spec.theta_init() if scale is None else spec.theta_init() * scale
    n_ray = 0
    tmap = ThetaMap.of(spec.terms)
    if tmap.structured:   # lme4 2.0's cs()/ar1(): optimise over their parameters φ
        opt, phi = optimize_structured(cp, REML, tmap, spec.theta_lower(), spec.theta_init(),
                                       ctl, theta_scale=scale)
    elif (ctl.theta_start is None and n_rho == 0 and cp.Arr.shape[1] >= LARGE_REST
            and ctl.analytic_gradient):
        # a large rest block: each exact-gradient evaluation costs three dense Cholesky-sized
        # operations; start L-BFGS-B at the best scaling of lme4's start instead
        # (L-BFGS-B's first evaluation, with the gradient, is at the parabola's vertex)
        start, n_ray = ray_start(lambda th: profiled_deviance(th, cp, REML), start,
                                 evaluate_vertex=False)
    if not tmap.structured:
        opt = optimize_theta(cp, REML, spec.theta_lower(), start, ctl, n_rho=n_rho,
                             theta_scale=scale)
    opt.n_eval += n_ray
    t2 = time.perf_counter()
    # the conditional variances only when asked for (LmerResult computes them on first use)
    est = estimates_at(cp, opt.theta, REML, opt.rho, condvar=False)
    sym = cp._rest_sym
    if sym:   # the supernodal factor's work arrays are not kept with the result
        sym.release_workspaces()
    t3 = time.perf_counter()
    info = dict(time_crossproducts=t1 - t0, time_optimize=t2 - t1, time_finalize=t3 - t2,
                n_eval=opt.n_eval, optimizer_message=opt.optimizer_message,
                messages=list(opt.messages))
    if tmap.structured:
        info["structure_params"] = tmap.natural(phi).tolist()   # (relative SDs, ρ) per term
    if ctl.warn:
        for m in opt.messages:
            warnings.warn(m, ConvergenceWarning, stacklevel=3)
        if opt.singular:
            warnings.warn(SINGULAR_FIT_MESSAGE, SingularFitWarning, stacklevel=3)
    return NativeFit(spec=spec, cp=cp, REML=bool(REML), opt=opt, estimates=est, info=info)
