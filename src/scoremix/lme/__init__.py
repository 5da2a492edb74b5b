"""Linear mixed-effects models with lme4 formulas (see :func:`scoremix.lmer`).

Pipeline (as in lme4): formula → :func:`~scoremix.lme.model_frame.build_model_spec` (model
frame, fixed and random design) → :func:`~scoremix.lme.crossprod.crossproducts` (cross-products
of ``[Z X y]`` formed once) → profiled deviance over θ → optimizer → :class:`LmerResult`.
"""

from scoremix.lme.api import fit_spec, lmer
from scoremix.lme.crossprod import (
    CrossProducts,
    conditional_estimates,
    crossproducts,
    profiled_deviance,
)
from scoremix.lme.anova_tables import anova, ranova
from scoremix.lme.inference import confint
from scoremix.lme.native import NativeControl
from scoremix.lme.result import LmerResult

__all__ = [
    "CrossProducts", "LmerResult", "NativeControl", "anova", "conditional_estimates", "confint",
    "crossproducts", "fit_spec", "lmer", "profiled_deviance", "ranova",
]
