"""Likelihood-ratio tests (``anova``) and confidence intervals (``confint``) for
:class:`~scoremix.lme.result.LmerResult` fits, following lme4: one import point for
:mod:`scoremix.lme.anova` and :mod:`scoremix.lme.confint`.

* ``anova(m0, m1, …)``: REML fits are first refitted by ML (lme4's message
  ``"refitting model(s) with ML (instead of REML)"``); models are ordered by their number of
  parameters and each is compared with the previous one by
  ``χ² = 2(ℓ_i − ℓ_{i−1})`` on ``npar_i − npar_{i−1}`` degrees of freedom.
* ``confint(m, method="wald")``: ``β̂ ± z_{(1+level)/2}·se``; variance parameters ``NaN``
  (as lme4).
* ``confint(m, method="profile")``: likelihood profile of the ML fit.  The covariance
  parameters are profiled on lme4's scale ``ψ`` = (per term: SDs on the diagonal positions and
  correlations on the off-diagonal positions of ``θ``, named ``.sig01, .sig02, …``; then
  ``.sigma``) with the ML deviance
  ``d(ψ) = log|L_θ|² − Σ log W_ii + r²_θ/σ² + n log(2πσ²)`` (β profiled out); each
  fixed effect ``β_j`` by refitting with ``β_j`` fixed (an offset).  With the signed root
  ``ζ(v) = sign(v − v̂) sqrt(d_min(v) − d̂)``, the interval is where ``|ζ| ≤ z_{(1+level)/2}``
  (0 / ±1 when an SD / a correlation reaches its bound first).
  A model with a class-specific residual variance ``Var(ε_i) = σ² ρ_{d(i)}/w_i`` (``ρ_0 = 1``)
  adds the residual SDs ``σ_d = σ·sqrt(ρ_d)`` of the other levels (``.sigma.<level>``) to
  ``ψ``, and the deviance becomes
  ``d(ψ) = log|L_{θ,ρ}|² − Σ log W_ii + Σ_d n_d log ρ_d + r²_{θ,ρ}/σ² + n log(2πσ²)`` with
  ``ρ_d = (σ_d/σ)²``; the fixed-effect profiles re-optimise ``θ`` and ``log ρ`` jointly.
* ``confint(m, method="boot")``: parametric bootstrap: simulate ``y* = Xβ̂ + Zb* + ε*`` with
  ``b* ~ N(0, Σ̂)``, ``ε*_i ~ N(0, σ̂²ρ̂_{d(i)}/w_i)``, refit (same REML/ML), percentile
  intervals of ``ψ`` and ``β``.
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
