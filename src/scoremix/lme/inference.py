"""One import point for the inference on :class:`~scoremix.lme.result.LmerResult` fits that
follows lme4: likelihood-ratio tests (:func:`scoremix.lme.anova.anova`: REML fits refitted by
ML, models ordered by their number of parameters, ``χ² = 2(ℓ_i − ℓ_{i−1})``) and confidence
intervals (:func:`scoremix.lme.confint.confint`: Wald, likelihood profile on lme4's ``ψ`` scale,
parametric bootstrap).  The formulas are stated in those two modules.
"""

from __future__ import annotations

from scoremix.lme.anova import REFIT_MESSAGE, RefitMLWarning, anova
from scoremix.lme.confint import (
    confint,
    dispersion_names,
    profile_names,
    psi_to_theta,
    theta_to_psi,
)

__all__ = ["anova", "confint", "RefitMLWarning", "REFIT_MESSAGE", "profile_names",
           "dispersion_names", "theta_to_psi", "psi_to_theta"]
