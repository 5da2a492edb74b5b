r"""Marginal likelihood of the Gaussian location-scale mixed model on per-cell sufficient statistics.

Model (latent scale; trial ``t`` of speaker ``i``, stratum ``s``, class ``c = c(s)``):

.. math::

    z_t = \mu_s + b_{ic} + u_{is} + \sigma_s e^{g_{ic}}\,\varepsilon_t,\qquad \varepsilon_t\sim N(0,1),

    \begin{pmatrix} b_{ic}\\ g_{ic}\end{pmatrix}\sim N\!\left(0,\begin{pmatrix}\tau_{b,c}^2 &
    \rho_c\tau_{b,c}\tau_{g,c}\\ \rho_c\tau_{b,c}\tau_{g,c} & \tau_{g,c}^2\end{pmatrix}\right),\qquad
    u_{is}\sim N(0,\omega_c^2),

(or, with a heavy-tailed speaker spread, :math:`g_{ic}/\tau_{g,c}\sim t_{\nu_c}` independent of
:math:`b_{ic}`: a few speakers — Doddington's goats — far wider than the rest)

independent over speakers, classes and cells: a per-speaker *location* effect :math:`b` and
*log-SD* effect :math:`g` per class (Doddington's goats and lambs differ in both), optionally
correlated, and a speaker × stratum location effect :math:`u` (``(1 | speaker:attack)``).
In glmmTMB terms: ``z ~ 0 + stratum + (0 + class | speaker) + (1 | speaker:stratum)``,
``dispformula = ~ 0 + stratum + (0 + class | speaker)`` (random effects in the dispersion
formula, which glmmTMB 1.1 cannot fit; brms: ``sigma ~ 0 + stratum + (0 + class | p | speaker)``).

Sufficient statistics.  A cell (speaker × stratum) of :math:`n` trials enters only through
:math:`n`, :math:`\bar z` and the within-cell sum of squares :math:`W=\sum(z-\bar z)^2`:
with :math:`\sigma^2=\sigma_s^2e^{2g}`,

.. math::

    \prod_t \phi(z_t; m+u, \sigma^2)\,\text{integrated over } u
      = (2\pi\sigma^2)^{-(n-1)/2} n^{-1/2} e^{-W/(2\sigma^2)}\;
        \phi\big(\bar z;\ m,\ \sigma^2/n+\omega^2\big).

Given :math:`g`, the unit's cells are Gaussian in :math:`b` with prior
:math:`b\mid g\sim N(\rho\tau_b g/\tau_g,\ \tau_b^2(1-\rho^2))`, so :math:`b` (and every
:math:`u`) is integrated in closed form; the remaining one-dimensional integral over
:math:`g` is done by adaptive Gauss–Hermite quadrature (nodes centred at the mode
:math:`\hat g` with scale :math:`(-f''(\hat g))^{-1/2}`; one node is the Laplace
approximation).  The log-likelihood is exact up to the quadrature error, which is checked
against brute-force two-dimensional quadrature in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.special import gammaln, logsumexp

__all__ = ["CellStats", "Params", "UnitLikelihood"]

_LOG2PI = float(np.log(2 * np.pi))


@dataclass
class CellStats:
    """Sufficient statistics of the informative cells (speaker × stratum).

    ``unit``: ``(C,)`` unit (speaker × class) of each cell; ``stratum``: ``(C,)``;
    ``n``, ``sz``, ``szz``: count, :math:`\\sum z`, :math:`\\sum z^2` (expected values under
    interval censoring); ``unit_class``: ``(U,)`` class code of each unit."""

    unit: np.ndarray
    stratum: np.ndarray
    n: np.ndarray
    sz: np.ndarray
    szz: np.ndarray
    unit_class: np.ndarray
    n_strata: int
    n_classes: int

    def __post_init__(self) -> None:
        self.n_units = int(self.unit_class.size)
        self.M = sparse.csr_matrix((np.ones(self.unit.size), (self.unit, np.arange(self.unit.size))),
                                   shape=(self.n_units, self.unit.size))
        self.zbar = self.sz / self.n
        self.ssw = np.maximum(self.szz - self.sz ** 2 / self.n, 0.0)
        self.n_cells_unit = np.bincount(self.unit, minlength=self.n_units).astype(np.float64)


@dataclass
class Params:
    """Model parameters: per stratum ``mu``, ``lam`` (log SD); per class ``log_tb``, ``log_tg``,
    ``z_rho`` (atanh ρ), ``log_om``.  Inactive components are held at their off values."""

    mu: np.ndarray
    lam: np.ndarray
    log_tb: np.ndarray
    log_tg: np.ndarray
    z_rho: np.ndarray
    log_om: np.ndarray
    log_nu: np.ndarray


class UnitLikelihood:
    """Log marginal likelihood of every unit for a model with the active components given by
    ``scale``, ``corr``, ``omega`` (booleans per class)."""

    OFF = -30.0

    def __init__(self, stats: CellStats, scale: np.ndarray, corr: np.ndarray, omega: np.ndarray,
                 n_nodes: int = 15, tail: np.ndarray | None = None) -> None:
        self.st = stats
        self.scale = np.asarray(scale, bool)
        self.corr = np.asarray(corr, bool) & self.scale
        self.tail = (np.zeros(2, bool) if tail is None else np.asarray(tail, bool)) & self.scale & ~self.corr
        self.omega = np.asarray(omega, bool)
        self.n_nodes = int(n_nodes)
        x, w = np.polynomial.hermite.hermgauss(self.n_nodes)
        self.x, self.logw = x, np.log(w) + x ** 2
        self.u_scale = self.scale[stats.unit_class]
        self.center = np.zeros(stats.n_units)
        self.spread = np.full(stats.n_units, 0.3)

    # ---------------------------------------------------------------- packing
    def pack(self, p: Params) -> np.ndarray:
        c = np.arange(self.st.n_classes)
        return np.concatenate([p.mu, p.lam, p.log_tb, p.log_tg[self.scale], p.z_rho[self.corr],
                               p.log_om[self.omega], p.log_nu[self.tail]]) if c.size else np.zeros(0)

    def unpack(self, v: np.ndarray) -> Params:
        S, K = self.st.n_strata, self.st.n_classes
        i = 0
        mu = v[i:i + S]; i += S
        lam = v[i:i + S]; i += S
        tb = v[i:i + K]; i += K
        tg = np.full(K, self.OFF); k = int(self.scale.sum()); tg[self.scale] = v[i:i + k]; i += k
        zr = np.zeros(K); k = int(self.corr.sum()); zr[self.corr] = v[i:i + k]; i += k
        om = np.full(K, self.OFF); k = int(self.omega.sum()); om[self.omega] = v[i:i + k]; i += k
        nu = np.full(K, np.log(1e6)); k = int(self.tail.sum()); nu[self.tail] = v[i:i + k]; i += k
        return Params(mu, lam, tb, tg, zr, om, nu)

    def bounds(self) -> list[tuple[float, float]]:
        S, K = self.st.n_strata, self.st.n_classes
        return ([(-20, 20)] * S + [(-6, 4)] * S + [(-8, 3)] * K + [(-6, 2)] * int(self.scale.sum())
                + [(-3, 3)] * int(self.corr.sum()) + [(-8, 3)] * int(self.omega.sum())
                + [(np.log(0.5), np.log(100.0))] * int(self.tail.sum()))

    # ---------------------------------------------------------------- integrand
    def _parts(self, p: Params, g: np.ndarray) -> dict:
        """For unit nodes ``g`` ``(U, Q)``: the log integrand ``f`` and the posterior pieces."""
        st = self.st
        cls = st.unit_class
        tb, tg = np.exp(p.log_tb[cls])[:, None], np.exp(p.log_tg[cls])[:, None]
        rho = np.tanh(p.z_rho[cls])[:, None]
        om2 = np.where(self.omega, np.exp(2 * p.log_om), 0.0)
        gc = g[st.unit]                                               # (C, Q)
        s2 = np.exp(2 * (p.lam[st.stratum][:, None] + gc))
        n = st.n[:, None]
        zbar, ssw = self.cell_moments(p)
        W = -0.5 * (n - 1) * (_LOG2PI + np.log(s2)) - 0.5 * np.log(n) - ssw[:, None] / (2 * s2)
        v = s2 / n + om2[st.unit_class[st.unit]][:, None]
        d = (zbar - p.mu[st.stratum])[:, None]
        iv = 1.0 / v
        M = st.M
        A, B, C = M @ iv, M @ (d * iv), M @ (d * d * iv)
        D, Ws = M @ np.log(v), M @ W
        us = self.u_scale[:, None]
        beta = np.where(us, rho * tb / tg, 0.0)
        t2 = np.where(us, tb ** 2 * (1 - rho ** 2), tb ** 2)
        a = beta * g
        P = A + 1.0 / t2
        num = B + a / t2
        logb = (-0.5 * st.n_cells_unit[:, None] * _LOG2PI - 0.5 * D - 0.5 * np.log(t2) - 0.5 * np.log(P)
                - 0.5 * (C + a * a / t2 - num * num / P))
        nu = np.exp(p.log_nu[cls])[:, None]
        tl = self.tail[cls][:, None]
        gauss = -0.5 * _LOG2PI - np.log(tg) - 0.5 * (g / tg) ** 2
        student = (gammaln((nu + 1) / 2) - gammaln(nu / 2) - 0.5 * np.log(nu * np.pi) - np.log(tg)
                   - (nu + 1) / 2 * np.log1p((g / tg) ** 2 / nu))
        prior = np.where(us, np.where(tl, student, gauss), 0.0)
        return dict(f=Ws + logb + prior, bmean=num / P, bvar=1.0 / P, v=v, d=d, om2=om2)

    def cell_moments(self, p: Params) -> tuple[np.ndarray, np.ndarray]:
        """Per-cell mean and within-cell sum of squares of the latent values the likelihood
        sees (here the data's; :class:`~scoremix.locscale.covariates.CovUnitLikelihood`
        subtracts the covariate terms)."""
        return self.st.zbar, self.st.ssw

    def _f(self, p: Params, g: np.ndarray) -> np.ndarray:
        return self._parts(p, g)["f"]

    def recentre(self, p: Params, iters: int = 30) -> None:
        """Mode :math:`\\hat g` and scale of every unit's integrand (Newton, numerical
        derivatives); units without a scale effect are centred at 0."""
        g = self.center.copy()
        h = 1e-4
        for _ in range(iters):
            G = np.c_[g - h, g, g + h]
            f = self._f(p, G)
            d1 = (f[:, 2] - f[:, 0]) / (2 * h)
            d2 = (f[:, 2] - 2 * f[:, 1] + f[:, 0]) / h ** 2
            step = np.where(d2 < 0, -d1 / np.minimum(d2, -1e-8), np.sign(d1) * 0.5)
            step = np.clip(step, -1.0, 1.0)
            g = np.where(self.u_scale, g + step, 0.0)
            if np.max(np.abs(step[self.u_scale]), initial=0.0) < 1e-7:
                break
        G = np.c_[g - 1e-3, g, g + 1e-3]
        f = self._f(p, G)
        d2 = (f[:, 2] - 2 * f[:, 1] + f[:, 0]) / 1e-6
        self.center = g
        self.spread = np.where(d2 < 0, 1.0 / np.sqrt(np.maximum(-d2, 1e-8)), 0.3)

    def nodes(self) -> np.ndarray:
        return self.center[:, None] + np.sqrt(2.0) * self.spread[:, None] * self.x[None, :]

    def unit_loglik(self, p: Params) -> np.ndarray:
        """``(U,)`` log marginal likelihood of every unit (adaptive Gauss–Hermite over g;
        the nodes' centres and scales are those of the last :meth:`recentre`)."""
        g = self.nodes()
        f = self._f(p, g)
        ll = logsumexp(f + self.logw[None, :], axis=1) + np.log(np.sqrt(2.0) * self.spread)
        if self.u_scale.all():
            return ll
        g0 = self._f(p, np.zeros((self.st.n_units, 1)))[:, 0]
        return np.where(self.u_scale, ll, g0)

    def posterior(self, p: Params) -> dict:
        """Posterior means of :math:`g`, :math:`e^{2g}`, :math:`b` per unit and of
        :math:`u` per cell."""
        g = self.nodes()
        parts = self._parts(p, g)
        lw = parts["f"] + self.logw[None, :]
        w = np.exp(lw - lw.max(axis=1, keepdims=True))
        w /= w.sum(axis=1, keepdims=True)
        g0 = np.zeros_like(g)
        w0 = np.zeros_like(w); w0[:, 0] = 1.0
        us = self.u_scale[:, None]
        parts0 = self._parts(p, g0)
        W = np.where(us, w, w0)
        bm = np.where(us, parts["bmean"], parts0["bmean"])
        bv = np.where(us, parts["bvar"], parts0["bvar"])
        gg = np.where(us, g, g0)
        Eg = (W * gg).sum(1)
        Eb = (W * bm).sum(1)
        Vb = (W * (bv + bm ** 2)).sum(1) - Eb ** 2
        Ee2g = (W * np.exp(2 * gg)).sum(1)
        st = self.st
        om2 = parts["om2"][st.unit_class[st.unit]][:, None]
        v = np.where(us[st.unit], parts["v"], parts0["v"])
        k = om2 / v
        Eu = (W[st.unit] * k * (parts["d"] - bm[st.unit])).sum(1)
        return dict(g=Eg, e2g=Ee2g, b=Eb, b_var=Vb, u=Eu)
