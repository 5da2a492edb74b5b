r"""Monotone cutpoints: a piecewise-linear sieve in the rank-based normal score.

The latent cutpoint of edge ``k`` (between cells ``k`` and ``k+1``) is

.. math::

    \alpha_k = \alpha(u_k),\qquad
    \alpha(u) = (1-w)\,c_{m} + w\,c_{m+1},\quad
    u\in[\kappa_m,\kappa_{m+1}],\ w=\frac{u-\kappa_m}{\kappa_{m+1}-\kappa_m},

a linear interpolation of knot values :math:`c_0<\dots<c_J` at knots
:math:`\kappa_0<\dots<\kappa_J` in :math:`u` (:mod:`scoremix.transform.cells`), with the
monotone parametrisation :math:`c_0=\gamma_0`, :math:`c_j=c_{j-1}+e^{\delta_j}`.  Outside
the knots :math:`\alpha` continues linearly (used only to place the location, never for a
cell edge).

* **Free cutpoints** (few distinct scores): the knots are all the edges, so
  :math:`\alpha_k=c_k` — one free, ordered cutpoint per edge, exactly the thresholds of
  ``ordinal::clm`` / the cumulative probability model of ``rms::orm``.
* **Sieve** (many distinct scores): :math:`J+1` knots equally spaced in :math:`u` between
  the extreme edges (so the tails, where error rates live, get as many knots per unit of
  latent scale as the bulk), merged until every segment holds at least ``min_edges`` edges.
  The fit is then the ML fit of a transformation model whose transform is piecewise linear
  in the normal score: a declared model with :math:`J+1` transform parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["CutpointBasis", "make_basis"]


@dataclass
class CutpointBasis:
    """Knots, and per edge the segment ``seg`` and weight ``w`` of its right knot."""

    knots: np.ndarray
    seg: np.ndarray
    w: np.ndarray
    free: bool

    @property
    def n_par(self) -> int:
        """Number of transform parameters ``J + 1``."""
        return int(self.knots.size)

    @property
    def seg_hi(self) -> np.ndarray:
        """Right knot of every edge's segment (its own knot for a single free edge)."""
        return np.minimum(self.seg + 1, max(self.n_par - 1, 0))

    def knot_values(self, par: np.ndarray) -> np.ndarray:
        """``c = γ0 + [0, cumsum(exp δ)]``."""
        par = np.asarray(par, float)
        if par.size == 0:   # a point-mass stratum: no edge, no parameter
            return par.copy()
        return par[0] + np.concatenate([[0.0], np.cumsum(np.exp(par[1:]))])

    def alpha(self, c: np.ndarray) -> np.ndarray:
        """Cutpoints ``α_k`` of every edge from knot values ``c``."""
        return (1.0 - self.w) * c[self.seg] + self.w * c[self.seg_hi]

    def weights_at(self, u: float) -> np.ndarray:
        """Row vector ``a`` with ``α(u) = a'c`` (linear extrapolation outside the knots)."""
        J = self.knots.size - 1
        if J < 1:   # zero or one knot: α is that knot's value (or nothing)
            return np.ones(J + 1)
        m = int(np.clip(np.searchsorted(self.knots, u, side="right") - 1, 0, J - 1))
        w = (u - self.knots[m]) / (self.knots[m + 1] - self.knots[m])
        a = np.zeros(J + 1)
        a[m] += 1.0 - w
        a[m + 1] += w
        return a

    def grad_c(self, g_alpha: np.ndarray) -> np.ndarray:
        """Back-propagate ``∂f/∂α`` (per edge) to ``∂f/∂c`` (per knot)."""
        J1 = self.knots.size
        return (np.bincount(self.seg, g_alpha * (1.0 - self.w), minlength=J1)
                + np.bincount(self.seg_hi, g_alpha * self.w, minlength=J1))

    def grad_par(self, g_c: np.ndarray, par: np.ndarray) -> np.ndarray:
        """``∂f/∂(γ0, δ)`` from ``∂f/∂c``: ``∂c_l/∂γ0 = 1``, ``∂c_l/∂δ_j = e^{δ_j}`` for ``l ≥ j``."""
        if g_c.size == 0:
            return np.zeros(0)
        tail = np.cumsum(g_c[::-1])[::-1]           # Σ_{l ≥ j} g_c[l]
        return np.concatenate([[tail[0]], tail[1:] * np.exp(np.asarray(par[1:], float))])

    def par_from_c(self, c: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`knot_values` (``c`` strictly increasing)."""
        if c.size == 0:
            return np.zeros(0)
        return np.concatenate([[c[0]], np.log(np.diff(c))])

    def jac_par(self, par: np.ndarray) -> np.ndarray:
        """``∂c/∂(γ0, δ)`` (``(J+1) × (J+1)``, lower triangular)."""
        n = self.n_par
        Jc = np.zeros((n, n))
        if n == 0:
            return Jc
        Jc[:, 0] = 1.0
        Jc[1:, 1:] = np.tril(np.ones((n - 1, n - 1))) * np.exp(np.asarray(par[1:], float))[None, :]
        return Jc


def make_basis(u_edge: np.ndarray, max_free: int = 100, n_knots: int = 200,
               min_edges: int = 10) -> CutpointBasis:
    """Free cutpoints when there are at most ``max_free`` edges, else the sieve with at most
    ``n_knots`` segments, each holding at least ``min_edges`` edges."""
    u = np.asarray(u_edge, float)
    E = u.size
    if E <= max_free or E <= 2:
        knots = u.copy()
        seg = np.maximum(np.minimum(np.arange(E), E - 2), 0)   # one edge (a two-value stratum): its own knot
        w = np.zeros(E)
        if E >= 2:
            w[-1] = 1.0
        return CutpointBasis(knots=knots, seg=seg, w=w, free=True)
    cand = np.linspace(u[0], u[-1], n_knots + 1)
    keep = [u[0]]
    last_idx = 0
    for k in cand[1:-1]:
        idx = int(np.searchsorted(u, k, side="left"))
        if idx - last_idx >= min_edges and E - 1 - idx >= min_edges:
            keep.append(k)
            last_idx = idx
    keep.append(u[-1])
    knots = np.asarray(keep)
    J = knots.size - 1
    seg = np.clip(np.searchsorted(knots, u, side="right") - 1, 0, J - 1)
    w = (u - knots[seg]) / (knots[seg + 1] - knots[seg])
    return CutpointBasis(knots=knots, seg=seg, w=np.clip(w, 0.0, 1.0), free=False)
