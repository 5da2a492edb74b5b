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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import special

from scoremix.lme.confint import psi_to_theta
from scoremix.lme.relcov import theta_to_T
from scoremix.lme.spec import RandomTerm

__all__ = ["ThetaMap", "STRUCTURES", "theta_to_sdcor", "sdcor_to_theta", "sdcor_bounds"]

STRUCTURES = ("us", "cs", "cs_hom", "ar1", "ar1_het")


def theta_to_sdcor(theta: np.ndarray, term_p: Sequence[int]) -> np.ndarray:
    """``θ → ψ``: per term the SDs and correlations of ``T_k T_k'`` in θ's positions."""
    out: list[float] = []
    for T in theta_to_T(np.asarray(theta, float), term_p):
        S = T @ T.T
        sd = np.sqrt(np.diag(S))
        p = T.shape[0]
        for j in range(p):
            for i in range(j, p):
                if i == j:
                    out.append(sd[i])
                else:
                    out.append(S[i, j] / (sd[i] * sd[j]) if sd[i] > 0 and sd[j] > 0 else 0.0)
    return np.asarray(out)


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


def _n_sd(structure: str, p: int) -> int:
    return 1 if structure in ("cs_hom", "ar1") else p


def _rho(structure: str, z: float, p: int) -> float:
    if structure.startswith("cs"):
        a = -1.0 / (p - 1)
        return float(a + (1 - a) * special.expit(z))
    return float(np.tanh(z))


def _z0(structure: str, p: int) -> float:
    """``z`` with ``ρ = 0``."""
    return float(special.logit(1.0 / p)) if structure.startswith("cs") else 0.0


@dataclass
class ThetaMap:
    """``φ ↦ θ`` for the terms of a model (identity on unstructured terms)."""

    term_p: list[int]
    structures: list[str]

    @classmethod
    def of(cls, terms: Sequence[RandomTerm]) -> "ThetaMap":
        return cls([t.p for t in terms], [getattr(t, "structure", "us") for t in terms])

    @property
    def structured(self) -> bool:
        return any(s != "us" and p > 1 for s, p in zip(self.structures, self.term_p))

    def _sizes(self) -> list[int]:
        out = []
        for s, p in zip(self.structures, self.term_p):
            if s == "us" or p == 1:
                out.append(p * (p + 1) // 2)
            else:
                out.append(_n_sd(s, p) + 1)
        return out

    @property
    def n_phi(self) -> int:
        return int(sum(self._sizes()))

    def lower(self, theta_lower: np.ndarray) -> np.ndarray:
        out, pos = [], 0
        for s, p, k in zip(self.structures, self.term_p, self._sizes()):
            m = p * (p + 1) // 2
            if s == "us" or p == 1:
                out.append(theta_lower[pos:pos + m])
            else:
                out.append(np.concatenate([np.zeros(k - 1), [-np.inf]]))
            pos += m
        return np.concatenate(out) if out else np.zeros(0)

    def init(self, theta_init: np.ndarray) -> np.ndarray:
        out, pos = [], 0
        for s, p, k in zip(self.structures, self.term_p, self._sizes()):
            m = p * (p + 1) // 2
            if s == "us" or p == 1:
                out.append(theta_init[pos:pos + m])
            else:
                out.append(np.concatenate([np.ones(k - 1), [_z0(s, p)]]))
            pos += m
        return np.concatenate(out) if out else np.zeros(0)

    def theta(self, phi: np.ndarray) -> np.ndarray:
        """``θ`` (lme4's unstructured lower triangles) at ``φ``."""
        out, pos = [], 0
        for s, p, k in zip(self.structures, self.term_p, self._sizes()):
            ph = phi[pos:pos + k]
            if s == "us" or p == 1:
                out.append(ph)
            else:
                sd = np.full(p, ph[0]) if k == 2 else ph[:p]
                rho = _rho(s, float(ph[-1]), p)
                psi = []
                for j in range(p):
                    for i in range(j, p):
                        if i == j:
                            psi.append(abs(sd[i]))
                        else:
                            psi.append(rho if s.startswith("cs") else rho ** (i - j))
                out.append(sdcor_to_theta(np.asarray(psi), [p]))
            pos += k
        return np.concatenate(out) if out else np.zeros(0)

    def describe(self, phi: np.ndarray) -> list[dict]:
        """Per structured term: its structure, SDs (relative) and ``ρ``."""
        out, pos = [], 0
        for s, p, k in zip(self.structures, self.term_p, self._sizes()):
            ph = phi[pos:pos + k]
            if s != "us" and p > 1:
                sd = np.full(p, ph[0]) if k == 2 else ph[:p]
                out.append({"structure": s, "sd": np.abs(sd), "rho": _rho(s, float(ph[-1]), p)})
            pos += k
        return out
