"""The native REML/ML engine: :func:`fit` a :class:`~scoremix.lme.spec.ModelSpec`.

``fit`` is :func:`scoremix.lme.engine.fit_native` (cross-products → factorisation → profiled
deviance → optimiser → estimates) followed by
:meth:`scoremix.lme.result.LmerResult.from_native`.  The optimiser's options and lme4's
convergence checks are in :mod:`scoremix.lme.optimizer`.
"""

from __future__ import annotations

from scoremix._threads import limits_blas
from scoremix.lme.crossprod import CrossProducts
from scoremix.lme.engine import fit_native
from scoremix.lme.optimizer import NativeControl, OptimResult, optimize_theta
from scoremix.lme.result import LmerResult
from scoremix.lme.spec import ModelSpec

__all__ = ["NativeControl", "OptimResult", "fit", "optimize_theta"]


@limits_blas
def fit(spec: ModelSpec, REML: bool = True, control: NativeControl | dict | None = None,
        cp: CrossProducts | None = None) -> LmerResult:
    """Fit a linear mixed model natively.

    Parameters
    ----------
    spec:
        the model (from :func:`scoremix.lme.model_frame.build_model_spec` or built by hand).
    REML:
        REML (default) or maximum likelihood.
    control:
        :class:`~scoremix.lme.optimizer.NativeControl` or a dict of its fields.
    cp:
        precomputed cross-products (``crossproducts(spec)``, or
        :func:`~scoremix.lme.crossprod.sum_crossproducts` of row partitions).

    Returns
    -------
    scoremix.lme.result.LmerResult
    """
    return LmerResult.from_native(fit_native(spec, REML=REML, control=control, cp=cp))
