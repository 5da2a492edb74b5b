r"""lme4 2.0's structured covariances of a random term in ``glmer``: ``cs()`` and ``ar1()``.

A term with ``p`` columns has :math:`\Sigma = D R D`, :math:`D = \mathrm{diag}(\sigma_1,
\dots, \sigma_p)` and

* ``cs`` (compound symmetry, lme4's default ``hom = FALSE``): :math:`R_{ij} = \rho`
  (:math:`i \ne j`), :math:`-1/(p-1) < \rho < 1`, ``p`` SDs; ``cs_hom``
  (``cs(…, hom = TRUE)``): one SD;
* ``ar1`` (first-order autoregressive over the ordered columns, lme4's default
  ``hom = TRUE``): :math:`R_{ij} = \rho^{|i-j|}`, :math:`-1 < \rho < 1`, one SD;
  ``ar1_het`` (``hom = FALSE``): ``p`` SDs

(lme4 2.0's ``Covariance.cs`` / ``Covariance.ar1``; glmmTMB's ``cs()`` is lme4's ``cs``,
its ``ar1()`` lme4's ``ar1``).  The fit optimises the structure's parameters
:math:`\varphi` = (SDs, :math:`z`) with :math:`\rho = a + (1-a)\,\mathrm{expit}(z)`,
:math:`a = -1/(p-1)` (``cs``) or :math:`\rho = \tanh z` (``ar1``), so that :math:`\rho`
stays inside its range, and maps them to lme4's unstructured :math:`\theta` (the lower
triangle of :math:`T = \mathrm{chol}(\Sigma)`), which the rest of the engine uses.
:class:`ThetaMap` is :class:`scoremix.lme.covstruct.ThetaMap` (shared with ``lmer``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from scoremix.lme.confint import psi_to_theta, theta_to_psi
from scoremix.lme.covstruct import STRUCTURES, ThetaMap

__all__ = ["ThetaMap", "STRUCTURES", "theta_to_sdcor", "sdcor_to_theta", "sdcor_bounds"]

def theta_to_sdcor(theta: np.ndarray, term_p: Sequence[int]) -> np.ndarray:
    """``θ → ψ``: per term the SDs and correlations of ``T_k T_k'`` in θ's positions: the LMM
    map :func:`scoremix.lme.confint.theta_to_psi` with σ = 1 (a GLMM has no residual scale)."""
    return theta_to_psi(theta, 1.0, term_p)[:-1]


def sdcor_to_theta(psi: np.ndarray, term_p: Sequence[int]) -> np.ndarray:
    """Inverse of :func:`theta_to_sdcor`: ``T_k = D_k chol(R_k)`` (a semi-definite
    Cholesky factor when a correlation is ±1): the LMM map :func:`scoremix.lme.confint.psi_to_theta`
    with σ = 1 (a GLMM has no residual scale)."""
    return psi_to_theta(np.append(np.asarray(psi, float), 1.0), term_p)[0]


def sdcor_bounds(term_p: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Bounds of ``ψ``: SDs in ``[0, ∞)``, correlations in ``[-1, 1]``."""
    lo, hi = [], []
    for p in term_p:
        for j in range(p):
            for i in range(j, p):
                lo.append(0.0 if i == j else -1.0)
                hi.append(np.inf if i == j else 1.0)
    return np.asarray(lo), np.asarray(hi)
