"""Linear mixed-effects models with lme4 formulas (see :func:`scoremix.lmer`).

The engine flows one way (as lme4 and MixedModels.jl):

formula (:mod:`~scoremix.lme.formula`) → model frame
(:func:`~scoremix.lme.model_frame.build_model_spec`) → cross-products of ``[Z X y]`` formed
once (:mod:`~scoremix.lme.crossprod`) → blocked Cholesky factorisation at ``θ``
(:mod:`~scoremix.lme.factor`, with :mod:`~scoremix.lme.relcov` and :mod:`~scoremix.lme.pairs`)
→ profiled deviance and its gradient (:mod:`~scoremix.lme.deviance`) → optimiser
(:mod:`~scoremix.lme.optimizer`) → conditional estimates (:mod:`~scoremix.lme.conditional`)
→ :class:`LmerResult` (:mod:`~scoremix.lme.engine`, :mod:`~scoremix.lme.result`,
:mod:`~scoremix.lme.native`, :mod:`~scoremix.lme.api`), with inference on top
(:mod:`~scoremix.lme.confint`, :mod:`~scoremix.lme.anova`).
"""

from scoremix.lme.api import fit_spec, lmer
from scoremix.lme import check as _check, confint as _confint, ddf as _ddf, r2 as _r2  # noqa: F401  (register LmerResult's inference)
from scoremix.lme.crossprod import CrossProducts, crossproducts, sum_crossproducts
from scoremix.lme.conditional import conditional_estimates
from scoremix.lme.deviance import profiled_deviance, profiled_deviance_grad
from scoremix.lme.anova_tables import anova, ranova
from scoremix.lme.inference import confint
from scoremix.lme.model_frame import model_matrix
from scoremix.lme.optimizer import NativeControl
from scoremix.lme.result import LmerResult

__all__ = [
    "CrossProducts", "LmerResult", "NativeControl", "anova", "conditional_estimates", "confint",
    "crossproducts", "fit_spec", "lmer", "model_matrix", "profiled_deviance",
    "profiled_deviance_grad", "ranova", "sum_crossproducts",
]
