"""``scoremix.lmer``: fit a linear mixed model from an lme4 formula."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd

from scoremix.adapters import adapter_for
from scoremix.lme.result import LmerResult
from scoremix.lme.spec import ModelSpec

__all__ = ["lmer", "fit_spec", "BACKENDS", "TRANSFORMS", "register_transform"]

BACKENDS = ("native", "statsmodels", "lme4")

#: ``lmer(..., transform=name)`` fitters: name → ``fit(formula, data, weights=, dispersion=,
#: na_action=, control=)``.  Filled by :mod:`scoremix.transform` when the package is
#: imported (a registry, so that the Gaussian engine does not import the transformation
#: models that build on it).
TRANSFORMS: dict[str, Callable[..., LmerResult]] = {}


def register_transform(name: str, fit: Callable[..., LmerResult]) -> None:
    """Make ``lmer(..., transform=name)`` call ``fit(formula, data, weights=..., dispersion=...,
    na_action=..., control=...)``."""
    TRANSFORMS[name] = fit


def fit_spec(spec: ModelSpec, REML: bool = True, backend: str = "native",
             control: dict | Any | None = None) -> LmerResult:
    """Fit an already-built :class:`~scoremix.lme.spec.ModelSpec` with one backend.

    ``"native"`` is :func:`scoremix.lme.native.fit`; ``"statsmodels"`` and ``"lme4"``
    dispatch to ``scoremix.lme.backends.<name>_backend.fit(spec, REML)`` (imported lazily).
    """
    if backend == "native":
        from scoremix.lme import native
        return native.fit(spec, REML=REML, control=control)
    from scoremix.lme.covstruct import is_structured
    if is_structured(spec.terms):
        from scoremix.lme.errors import UnsupportedModelError
        raise UnsupportedModelError(
            f"backend={backend!r} cannot fit lme4 2.0's cs()/ar1() terms (the installed lme4 "
            "1.1 and statsmodels have none); use backend='native' (glmmTMB's cs()/ar1() "
            "fit the same models)")
    if backend == "statsmodels":
        from scoremix.lme.backends import statsmodels_backend
        return statsmodels_backend.fit(spec, REML)
    if backend == "lme4":
        from scoremix.lme.backends import lme4_backend
        return lme4_backend.fit(spec, REML)
    raise ValueError(f"unknown backend {backend!r}; choose one of {BACKENDS}")


def lmer(formula: str, data: pd.DataFrame, REML: bool = True, backend: str = "native",
         weights: np.ndarray | pd.Series | str | None = None, dispersion: str | None = None,
         na_action: str = "omit", control: dict | Any | None = None,
         contrasts: dict[str, str] | None = None,
         offset: np.ndarray | pd.Series | str | None = None,
         transform: str | None = None) -> LmerResult:
    """Fit ``y = Xβ + Zb + ε`` given by an lme4 formula (REML or ML), like ``lme4::lmer``.

    The model is ``y = Xβ + Zb + ε`` with ``b ~ N(0, Σ_θ)`` (one unstructured covariance per
    random term, or lme4 2.0's ``diag()``, ``cs()`` and ``ar1()`` structures, see
    :mod:`scoremix.lme.covstruct` and ``docs/structured-covariances.md``) and ``ε_i ~ N(0, σ² ρ_{d(i)} / w_i)``: prior ``weights`` ``w`` and, with
    ``dispersion="~ label"``, a relative residual variance ``ρ_d`` per level of ``label``
    (``ρ`` of the first level = 1).

    Parameters
    ----------
    formula:
        lme4 formula, e.g. ``"score ~ label + (1 | speaker) + (1 | attack)"``.
    data:
        the data frame; or a ``dask.dataframe.DataFrame`` or a path/glob of parquet files,
        fitted from cross-products summed over partitions (see ``docs/dask.md``; the
        result's per-row quantities are then lazy).
    REML:
        REML (default) or maximum likelihood.
    backend:
        ``"native"`` (default), ``"statsmodels"`` or ``"lme4"`` (via rpy2).
    weights:
        prior weights (array or column name).
    dispersion:
        one-sided formula of a class-specific residual variance (``"~ label"``).
    na_action:
        ``"omit"`` (drop rows with NA in a used column) or ``"fail"``.
    control:
        native optimiser options (:class:`scoremix.lme.native.NativeControl` fields), or with
        a ``transform`` the options of :class:`scoremix.transform.TransformControl`.
    contrasts:
        fixed-effect factor codings, as lme4's ``contrasts=`` (``{"recipe": "contr.sum"}``;
        ordered factors default to ``contr.poly``).
    offset:
        a known term added to the linear predictor (column name or array), as lme4's
        ``offset=``; ``offset()`` terms in the formula are also understood.
    transform:
        ``None`` (default): the Gaussian model above.  ``"monotone"``: the transformation
        (latent-Gaussian) mixed model ``h(y) = Xβ + Zb + ε`` with ``h`` strictly increasing
        and estimated by maximum likelihood jointly with the rest (probit cumulative-link
        likelihood of the distinct scores, Laplace approximation; always ML); everything in
        the result is on the latent scale and ``result.transform`` maps scores to it (see
        :mod:`scoremix.transform` and ``docs/transform-models.md``).

    Returns
    -------
    LmerResult
    """
    from scoremix.lme.input_checks import check_model_input
    from scoremix.lme.model_frame import build_model_spec

    adapter = adapter_for("lmer", data)
    if adapter is not None:
        # Dask DataFrame or parquet path/glob (registered by scoremix.distributed): cross-products
        # summed over partitions
        return adapter(formula, data, REML=REML, backend=backend, transform=transform, weights=weights,
                       dispersion=dispersion, na_action=na_action, control=control, contrasts=contrasts,
                       offset=offset)
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
    if transform is not None:
        if transform not in TRANSFORMS:
            raise ValueError(f"unknown transform {transform!r}; choose None or one of "
                             f"{sorted(TRANSFORMS)}")
        if backend != "native":
            raise ValueError(f"transform={transform!r} is fitted by the native engine only, "
                             f"not backend={backend!r}")
        return TRANSFORMS[transform](formula, data, weights=weights, dispersion=dispersion,
                                     na_action=na_action, control=control,
                                     contrasts=contrasts, offset=offset)
    # (after the transform dispatch: a transformation model accepts ±inf / saturated scores
    # and has its own named errors for tied scores)
    check_model_input(formula, data)
    if backend == "lme4" and (offset is not None or contrasts is not None):
        from scoremix.lme.errors import UnsupportedModelError
        raise UnsupportedModelError(
            "the lme4 backend re-fits the formula in R and does not pass offset= or contrasts=; "
            "write offset(column) in the formula, or use backend='native'")
    spec = build_model_spec(formula, data, weights=weights, dispersion=dispersion,
                            na_action=na_action, contrasts=contrasts, offset=offset)
    return fit_spec(spec, REML=REML, backend=backend, control=control)
