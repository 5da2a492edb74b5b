"""Location-scale transformation mixed models of detector scores (engine layer).

Modules: :mod:`~scoremix.locscale.spec` (the specification, a plain data object),
:mod:`~scoremix.locscale.latent` (stratum transforms, interval-censored latent values),
:mod:`~scoremix.locscale.likelihood` (marginal likelihood by adaptive quadrature on per-cell
sufficient statistics), :mod:`~scoremix.locscale.fit` (the estimator),
:mod:`~scoremix.locscale.select` (automatic specification, :func:`score_model`).
"""

from scoremix.locscale.fit import LocScaleError, LocScaleFit, fit_locscale
from scoremix.locscale.select import Selection, candidate_specs, score_model
from scoremix.locscale.spec import LocScaleSpec

__all__ = ["LocScaleSpec", "LocScaleFit", "LocScaleError", "fit_locscale", "score_model", "Selection",
           "candidate_specs"]
