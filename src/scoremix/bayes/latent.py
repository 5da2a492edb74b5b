r"""The fast transformation fit: latent points and the collapsed Gaussian sampler.

``bayes_lmer(..., transform="monotone")`` with ``method="collapsed"`` (the default) fits
the transformation model

.. math::

    h(S_i) = x_i^\top\beta + z_i^\top b + \varepsilon_i,\qquad \varepsilon_i\sim N(0,\sigma^2_{d(i)})

with ``h`` **fixed at its maximum-likelihood estimate** (as the exact cell path,
:mod:`scoremix.bayes.transform`), on the *latent points*

.. math::

    \tilde z_i = \hat\eta_i + E[\varepsilon_i \mid h(S_i)\in(\alpha_{k_i-1},\alpha_{k_i}],\ \hat b]

(the ML fit's fitted value plus its generalised residual, ``TransformLmerResult.
latent_gaussian_fit``): the conditional mean of the latent value given the score's cell.
The Gaussian model of :math:`\tilde z` is then fitted by the collapsed sampler
(:mod:`scoremix.bayes.collapsed`: β and b integrated out exactly, only the variance
parameters sampled, on per-cell sufficient statistics), whose cost does not grow with the
number of rows.  For scores with (almost) no ties each cell is a narrow interval and
:math:`\tilde z_i` equals the latent value up to the cell width, so this is the cell
likelihood up to :math:`O(w^2)`; for heavily tied or saturated scores (wide cells) it
replaces the interval by its conditional mean, which understates the within-cell spread —
``method="joint"`` keeps the exact cell likelihood (slow: one latent Gaussian per row).
``tests/test_bayes_latent.py`` compares both on the same data.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

__all__ = ["latent_point_spec"]


def latent_point_spec(formula: Any, data: Any, spec: Any, transform: Any, dispersion: str | None,
                      weights: Any) -> tuple[Any, Any, tuple[np.ndarray, np.ndarray]]:
    """``(spec with y = latent points, h, cells (lo, hi))`` of a one-transform model.

    ``transform``: ``"monotone"`` (``h`` is fitted here by ``lmer``) or a fitted
    ``lmer(..., transform="monotone")`` result (reused).  A bare transform object has no
    fitted values to centre the open end cells on; it is refused by the caller.
    """
    from scoremix.bayes.transform import TransformSpecError, latent_cells
    from scoremix.lme.api import lmer

    if isinstance(transform, str):
        fit = lmer(formula, data, dispersion=dispersion, weights=weights, transform="monotone")
    elif hasattr(transform, "latent_gaussian_fit") and hasattr(transform, "transform"):
        fit = transform
    else:
        raise TransformSpecError("method='collapsed' with a fixed transform needs transform='monotone' or the "
                                 "lmer(..., transform='monotone') fit itself (its fitted values give the latent "
                                 "points); with a bare transform object use method='joint' (exact cells)")
    if getattr(fit, "strata", None) is not None:
        raise TransformSpecError("a transform per stratum: use scoremix.bayes_locscale / bayes_score_model "
                                 "(stratified transformation models)")
    z = (fit.fitted + fit.residuals).to_numpy(dtype=np.float64)
    if z.shape != (spec.n,) or not np.all(np.isfinite(z)):
        raise TransformSpecError(f"the transformation fit gives {z.shape} latent values for {spec.n} rows; "
                                 "pass the fit of the same formula and data")
    tr = fit.transform
    cells = latent_cells(tr, spec.y)
    # the model frame keeps the observed scores (as the exact-cell path does): tables that take
    # data= match it by response, and the predictive layer maps scores through h itself
    return replace(spec, y=z), tr, cells
