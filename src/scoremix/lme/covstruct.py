r"""lme4 2.0's structured covariances of a random term: ``cs()`` and ``ar1()``.

A term with ``p`` columns has the relative covariance :math:`T T' = D R D`,
:math:`D = \mathrm{diag}(s_1, \dots, s_p)` (``s_j = σ_j/σ`` in an LMM, ``σ_j`` in a GLMM) and

* ``cs`` (compound symmetry, lme4's default ``hom = FALSE``): :math:`R_{ij} = \rho`
  (:math:`i \ne j`), :math:`-1/(p-1) < \rho < 1`, ``p`` SDs; ``cs_hom``
  (``cs(…, hom = TRUE)``): one SD;
* ``ar1`` (first-order autoregressive over the ordered columns, lme4's default
  ``hom = TRUE``): :math:`R_{ij} = \rho^{|i-j|}`, :math:`-1 < \rho < 1`, one SD;
  ``ar1_het`` (``hom = FALSE``): ``p`` SDs

(lme4 2.0's ``Covariance.cs`` / ``Covariance.ar1``; glmmTMB's ``cs()`` is lme4's ``cs``,
its ``ar1()`` lme4's ``ar1``).  Two parametrisations of a structured term are used:

* the optimiser's ``φ`` = (SDs, :math:`z`) with :math:`\rho = a + (1-a)\,\mathrm{expit}(z)`,
  :math:`a = -1/(p-1)` (``cs``) or :math:`\rho = \tanh z` (``ar1``), so that :math:`\rho`
  stays inside its range;
* the *natural* ``ν`` = (SDs, :math:`\rho`), the variance parameters that inference
  (Satterthwaite's df, the profile) differentiates with respect to.

Both map to lme4's unstructured :math:`\theta` (the lower triangle of
:math:`T = \mathrm{chol}(D R D)`), which the rest of the engine uses; unstructured terms pass
through unchanged.  :meth:`ThetaMap.natural_from_theta` recovers ``ν`` from ``θ``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import special

from scoremix.lme.relcov import psd_chol, theta_to_T
from scoremix.lme.spec import RandomTerm

__all__ = ["ThetaMap", "STRUCTURES", "STRUCTURE_LABEL", "is_structured"]

STRUCTURES = ("us", "cs", "cs_hom", "ar1", "ar1_het")

#: the name lme4 2.0 / glmmTMB print for a structure (``vcmat_<label>``)
STRUCTURE_LABEL = {"cs": "cs", "cs_hom": "homcs", "ar1": "ar1", "ar1_het": "hetar1"}


def is_structured(terms: Sequence[RandomTerm]) -> bool:
    """Whether some term has a ``cs``/``ar1`` structure (with more than one column)."""
    return any(getattr(t, "structure", "us") != "us" and t.p > 1 for t in terms)


def _n_sd(structure: str, p: int) -> int:
    return 1 if structure in ("cs_hom", "ar1") else p


def _rho(structure: str, z: float, p: int) -> float:
    if structure.startswith("cs"):
        a = -1.0 / (p - 1)
        return float(a + (1 - a) * special.expit(z))
    return float(np.tanh(z))


def _z(structure: str, rho: float, p: int) -> float:
    """Inverse of :func:`_rho` (``ρ`` first moved ``1e-10`` inside its range)."""
    lo, hi = _rho_range(structure, p)
    rho = float(np.clip(rho, lo + 1e-10, hi - 1e-10))
    if structure.startswith("cs"):
        a = -1.0 / (p - 1)
        return float(special.logit((rho - a) / (1 - a)))
    return float(np.arctanh(rho))


def _rho_range(structure: str, p: int) -> tuple[float, float]:
    return (-1.0 / (p - 1), 1.0) if structure.startswith("cs") else (-1.0, 1.0)


def _z0(structure: str, p: int) -> float:
    """``z`` with ``ρ = 0``."""
    return float(special.logit(1.0 / p)) if structure.startswith("cs") else 0.0


def _term_theta(structure: str, p: int, sd: np.ndarray, rho: float) -> np.ndarray:
    """``θ`` of one structured term: the lower triangle (column-major) of ``D chol(R)``
    (a semi-definite factor when ``R`` is singular)."""
    lag = np.abs(np.subtract.outer(np.arange(p), np.arange(p)))
    R = np.where(lag == 0, 1.0, rho) if structure.startswith("cs") else float(rho) ** lag
    T = np.abs(np.asarray(sd, float))[:, None] * psd_chol(R)
    return np.concatenate([T[j:, j] for j in range(p)])


@dataclass
class ThetaMap:
    """``φ ↦ θ`` (and ``ν ↦ θ``) for the terms of a model (identity on unstructured terms)."""

    term_p: list[int]
    structures: list[str]

    @classmethod
    def of(cls, terms: Sequence[RandomTerm]) -> "ThetaMap":
        return cls([t.p for t in terms], [getattr(t, "structure", "us") for t in terms])

    def _is_struct(self, s: str, p: int) -> bool:
        return s != "us" and p > 1

    @property
    def structured(self) -> bool:
        return any(self._is_struct(s, p) for s, p in zip(self.structures, self.term_p))

    def _sizes(self) -> list[int]:
        return [(_n_sd(s, p) + 1) if self._is_struct(s, p) else p * (p + 1) // 2
                for s, p in zip(self.structures, self.term_p)]

    @property
    def n_phi(self) -> int:
        """Number of variance parameters (``φ`` and ``ν`` have the same length)."""
        return int(sum(self._sizes()))

    def blocks(self, v: np.ndarray):
        """``(structure, p, slice of v)`` per term of a ``φ``- or ``ν``-shaped vector; the
        structure is ``"us"`` for terms mapped unchanged."""
        pos = 0
        for s, p, k in zip(self.structures, self.term_p, self._sizes()):
            yield (s if self._is_struct(s, p) else "us"), p, np.asarray(v[pos:pos + k], float)
            pos += k

    # ----------------------------------------------------------------- optimiser's φ
    def lower(self, theta_lower: np.ndarray) -> np.ndarray:
        """Lower bounds of ``φ`` (SDs ≥ 0, ``z`` free; ``θ``'s own on unstructured terms)."""
        out, pos = [], 0
        for s, p, k in zip(self.structures, self.term_p, self._sizes()):
            m = p * (p + 1) // 2
            out.append(np.concatenate([np.zeros(k - 1), [-np.inf]]) if self._is_struct(s, p)
                       else theta_lower[pos:pos + m])
            pos += m
        return np.concatenate(out) if out else np.zeros(0)

    def init(self, theta_init: np.ndarray, sd_init: np.ndarray | None = None) -> np.ndarray:
        """Start of ``φ``: ``θ_init`` on unstructured terms; ``ρ = 0`` and SDs 1 (or the
        diagonal ``θ`` elements of ``sd_init``, a ``θ``-shaped vector) on structured ones."""
        out, pos = [], 0
        for s, p, k in zip(self.structures, self.term_p, self._sizes()):
            m = p * (p + 1) // 2
            if self._is_struct(s, p):
                if sd_init is None:
                    sd = np.ones(k - 1)
                else:
                    d = np.asarray(sd_init, float)[pos:pos + m][_diag_index(p)]
                    sd = np.full(1, float(np.exp(np.mean(np.log(d))))) if k == 2 else d
                out.append(np.concatenate([sd, [_z0(s, p)]]))
            else:
                out.append(np.asarray(theta_init[pos:pos + m], float))
            pos += m
        return np.concatenate(out) if out else np.zeros(0)

    def natural(self, phi: np.ndarray) -> np.ndarray:
        """``φ → ν``: ``z`` replaced by ``ρ`` (SDs as absolute values)."""
        out = []
        for s, p, ph in self.blocks(phi):
            if self._is_struct(s, p):
                out.append(np.append(np.abs(ph[:-1]), _rho(s, float(ph[-1]), p)))
            else:
                out.append(ph)
        return np.concatenate(out) if out else np.zeros(0)

    def phi_from_natural(self, nu: np.ndarray) -> np.ndarray:
        """``ν → φ`` (``ρ`` strictly inside its range)."""
        out = []
        for s, p, v in self.blocks(nu):
            out.append(np.append(v[:-1], _z(s, float(v[-1]), p)) if self._is_struct(s, p) else v)
        return np.concatenate(out) if out else np.zeros(0)

    def theta(self, phi: np.ndarray) -> np.ndarray:
        """``θ`` (lme4's unstructured lower triangles) at ``φ``."""
        return self.theta_natural(self.natural(phi))

    # ----------------------------------------------------------------- natural ν
    def theta_natural(self, nu: np.ndarray) -> np.ndarray:
        """``θ`` at the natural parameters ``ν`` (SDs, ``ρ``)."""
        out = []
        for s, p, v in self.blocks(nu):
            if self._is_struct(s, p):
                sd = np.full(p, v[0]) if v.size == 2 else v[:p]
                out.append(_term_theta(s, p, sd, float(v[-1])))
            else:
                out.append(v)
        return np.concatenate(out) if out else np.zeros(0)

    def natural_from_theta(self, theta: np.ndarray) -> np.ndarray:
        """``θ → ν``: the SDs of ``T T'`` (one common SD: the first column's) and ``ρ`` read
        from its correlations (``cs``: their mean; ``ar1``: the lag-one correlation of the
        first two columns).  Exact when ``θ`` is in the range of :meth:`theta_natural`."""
        out, pos = [], 0
        for s, p, k in zip(self.structures, self.term_p, self._sizes()):
            m = p * (p + 1) // 2
            th = np.asarray(theta[pos:pos + m], float)
            pos += m
            if not self._is_struct(s, p):
                out.append(th)
                continue
            T = theta_to_T(th, [p])[0]
            S = T @ T.T
            sd = np.sqrt(np.diag(S))
            with np.errstate(invalid="ignore", divide="ignore"):
                R = S / np.outer(sd, sd)
            if s.startswith("cs"):
                rho = float(np.mean(R[np.tril_indices(p, -1)]))
            else:
                rho = float(R[1, 0])
            rho = 0.0 if not np.isfinite(rho) else rho
            out.append(np.append(sd[:1] if k == 2 else sd, rho))
        return np.concatenate(out) if out else np.zeros(0)

    def natural_bounds(self, theta_lower: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bounds of ``ν``: SDs in ``[0, ∞)``, ``ρ`` in its range; ``θ``'s on unstructured
        terms."""
        lo, hi, pos = [], [], 0
        for s, p, k in zip(self.structures, self.term_p, self._sizes()):
            m = p * (p + 1) // 2
            if self._is_struct(s, p):
                a, b = _rho_range(s, p)
                lo.append(np.append(np.zeros(k - 1), a))
                hi.append(np.append(np.full(k - 1, np.inf), b))
            else:
                lo.append(np.asarray(theta_lower[pos:pos + m], float))
                hi.append(np.full(m, np.inf))
            pos += m
        return (np.concatenate(lo) if lo else np.zeros(0), np.concatenate(hi) if hi else np.zeros(0))

    def natural_names(self, terms: Sequence[RandomTerm]) -> list[str]:
        """Names of ``ν``: lme4's ``θ`` names on unstructured terms; ``<group>.sd`` (one
        SD) or ``<group>.sd.<column>`` and ``<group>.rho`` on structured ones."""
        out: list[str] = []
        for t, s, p in zip(terms, self.structures, self.term_p):
            if self._is_struct(s, p):
                g = t.group_factor
                if _n_sd(s, p) == 1:
                    out.append(f"{g}.sd")
                else:
                    out += [f"{g}.sd.{nm}" for nm in t.term_names]
                out.append(f"{g}.rho")
            else:
                out += list(t.theta_names())
        return out

    def describe(self, phi: np.ndarray) -> list[dict]:
        """Per structured term: its structure, SDs (relative) and ``ρ``."""
        out = []
        for s, p, ph in self.blocks(phi):
            if self._is_struct(s, p):
                sd = np.full(p, ph[0]) if ph.size == 2 else ph[:p]
                out.append({"structure": s, "sd": np.abs(sd), "rho": _rho(s, float(ph[-1]), p)})
        return out

    def jacobian(self, phi: np.ndarray, h: float = 1e-6) -> np.ndarray:
        """``∂θ/∂φ`` by central differences (the map is smooth; error ``O(h²)``)."""
        phi = np.asarray(phi, float)
        cols = []
        for i in range(phi.size):
            hi = h * max(1.0, abs(phi[i]))
            xp, xm = phi.copy(), phi.copy()
            xp[i] += hi
            xm[i] -= hi
            cols.append((self.theta(xp) - self.theta(xm)) / (2 * hi))
        return np.stack(cols, axis=1)


def _diag_index(p: int) -> np.ndarray:
    """Positions of the diagonal of ``T`` in a term's column-major lower triangle."""
    idx, pos = [], 0
    for j in range(p):
        idx.append(pos)
        pos += p - j
    return np.asarray(idx)
