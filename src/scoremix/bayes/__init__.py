"""Bayesian linear mixed models of detector scores (PyMC), see :func:`bayes_lmer`.

Importing this package is cheap: PyMC, PyTensor and ArviZ are imported only when a model
is built or sampled.
"""

from scoremix.bayes.api import SamplerUnavailableError, SamplingInterrupted, bayes_lmer, bayes_lmer_spec
from scoremix.bayes.contrasts import ContrastError, PosteriorContrasts, posterior_contrasts
from scoremix.bayes.elpd import LooError, compare, loo, waic
from scoremix.bayes.memory import MemoryBudgetError
from scoremix.bayes.pointwise import PointwiseError
from scoremix.bayes.checks import NestedFactorWarning
from scoremix.bayes.diagnostics import BayesConvergenceWarning, Diagnostics
from scoremix.bayes.priors import Prior, PriorError, default_priors, resolve_priors
from scoremix.bayes.result import BayesLmerResult, ClassMomentsError
from scoremix.bayes import locscale_pool as _locscale_pool  # noqa: F401  (s5bayes-ls2: registers transform_uncertainty)

__all__ = [
    "bayes_lmer",
    "bayes_lmer_spec",
    "BayesLmerResult",
    "Prior",
    "PriorError",
    "default_priors",
    "resolve_priors",
    "Diagnostics",
    "BayesConvergenceWarning",
    "NestedFactorWarning",
    "SamplerUnavailableError",
    "ClassMomentsError",
    "SamplingInterrupted",
    "MemoryBudgetError",
    "PointwiseError",
    "LooError",
    "loo",
    "waic",
    "compare",
    "ContrastError",
    "PosteriorContrasts",
    "posterior_contrasts",
]
