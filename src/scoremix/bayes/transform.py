r"""Bayesian transformation mixed models: ``bayes_lmer(..., transform="monotone")``.

The model is the one of ``lmer(..., transform="monotone")``:

.. math::

    h(S_i) = x_i^\top\beta + z_i^\top b + \varepsilon_i,\qquad b\sim N(0,\Sigma_\theta),\quad
    \varepsilon_i \sim N(0, \sigma^2_{d(i)}),

with ``h`` strictly increasing.  Its likelihood is that of *cells*: the distinct scores
:math:`s_{(1)} < \dots < s_{(K)}` with latent edges :math:`\alpha_0=-\infty<\alpha_1<\dots<
\alpha_K=+\infty`; score :math:`s_{(k)}` means the latent value lies in
:math:`(\alpha_{k-1}, \alpha_k]`, so row ``i`` contributes
:math:`\Phi((\alpha_{k_i}-\mu_i)/\sigma_i) - \Phi((\alpha_{k_i-1}-\mu_i)/\sigma_i)` — exact for
tied scores and for saturated ones (probabilities of exactly 0 or 1 are the open end cells).

**How the transform's uncertainty enters: it does not.**  ``h`` (the edges α) is *fixed at
its maximum-likelihood estimate* from the frequentist fit; NUTS samples β, the random
effects, their SDs/correlations and the residual SDs given α.  The fixed edges also pin the
latent location and scale, so the intercept and every σ are free parameters.  What this
ignores: the sampling error of ``h`` itself.  It matters little for error rates (the EER
and the DCF depend on ``h`` only through which latent values the class mixtures cross at,
and ``h`` is estimated from all trials of both classes, far more than any effect), but
posterior intervals of β and of error rates are slightly too narrow in small samples; the
coverage simulation in ``tests/test_bayes_transform.py`` and
``benchmarks/bayes_transform_coverage.py`` measures how much.  Sampling ``h`` jointly (a
monotone spline prior on the edges) would remove this at the cost of K−1 more parameters.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

__all__ = ["latent_cells", "latent_spec", "ml_transform", "TransformSpecError"]


class TransformSpecError(ValueError):
    """The transform cannot give the latent cells of the scores (names what is missing)."""


def latent_cells(transform: Any, scores: Any) -> tuple[np.ndarray, np.ndarray]:
    """Latent cell ``(lo_i, hi_i]`` of every score: ``(h⁻(s_i), h⁺(s_i)]`` (the transform's
    ``lower`` and ``upper`` one-sided limits)."""
    if callable(getattr(transform, "stratum", None)) and getattr(transform, "levels", None) is not None:
        raise TransformSpecError(
            f"bayes_lmer does not support a transform per stratum ({type(transform).__name__} by "
            f"{getattr(transform, 'column', None)!r}, from transform='monotone-by-class'): pass the .transform "
            "of an lmer(..., transform='monotone') fit, or fit a transform per stratum with "
            "scoremix.bayes_locscale / bayes_score_model")
    if not (callable(getattr(transform, "lower", None)) and callable(getattr(transform, "upper", None))):
        raise TransformSpecError(f"the transform {type(transform).__name__} has no lower()/upper() cell edges; "
                                 "pass the .transform of an lmer(..., transform='monotone') fit")
    s = np.asarray(scores, dtype=np.float64)
    lo = np.asarray(transform.lower(s), dtype=np.float64)
    hi = np.asarray(transform.upper(s), dtype=np.float64)
    bad = ~(hi > lo)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TransformSpecError(f"score {s[i]!r} (row {i}) is not in a cell of the transform (lower {lo[i]!r}, "
                                 f"upper {hi[i]!r}); was the transform fitted to these scores?")
    return lo, hi


def latent_spec(spec: Any, transform: Any) -> tuple[Any, tuple[np.ndarray, np.ndarray]]:
    """The spec with ``y`` replaced by a latent point inside each row's cell (its midpoint;
    the finite edge ∓ 0.5 for an open end cell) — used only for the automatic prior scales —
    and the cells ``(lo, hi)``."""
    lo, hi = latent_cells(transform, spec.y)
    mid = np.where(np.isfinite(lo) & np.isfinite(hi), 0.5 * (lo + hi),
                   np.where(np.isfinite(lo), lo + 0.5, hi - 0.5))
    return replace(spec, y=mid), (lo, hi)


def ml_transform(formula: Any, data: Any, dispersion: str | None, weights: Any) -> Any:
    """``h`` at its maximum-likelihood estimate: ``lmer(formula, data, transform="monotone")``."""
    from scoremix.lme.api import lmer

    fit = lmer(formula, data, dispersion=dispersion, weights=weights, transform="monotone")
    return fit.transform
