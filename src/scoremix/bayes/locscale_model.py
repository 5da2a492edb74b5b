r"""Bayesian location-scale mixed model on per-cell sufficient statistics (the PyMC graph).

The model is the one of :mod:`scoremix.locscale.likelihood` (latent scale, trial ``t`` of
speaker ``i``, stratum ``s`` = class × attack, class ``c = c(s)``):

.. math::

    z_t = \mu_s + b_{ic} + u_{is} + \sigma_s e^{g_{ic}}\varepsilon_t,\qquad
    \begin{pmatrix} b_{ic}\\ g_{ic}\end{pmatrix}\sim N\!\left(0,\begin{pmatrix}\tau_{b,c}^2 &
    \rho_c\tau_{b,c}\tau_{g,c}\\ \cdot & \tau_{g,c}^2\end{pmatrix}\right),\quad
    u_{is}\sim N(0,\omega_c^2)

(or :math:`g_{ic}/\tau_{g,c}\sim t_{\nu_c}` for a heavy-tailed speaker spread), with priors

.. math::

    \mu_s\sim N(m_s, s_\mu^2),\ \log\sigma_s\sim N(l_s, s_\lambda^2),\
    \tau_{b,c}\sim N^+(0,s_b^2),\ \tau_{g,c}\sim N^+(0,s_g^2),\ \omega_c\sim N^+(0,s_\omega^2),\
    (\rho_c+1)/2\sim\mathrm{Beta}(2,2)\ (\text{LKJ}(2)),\ \nu_c\sim\Gamma(2, 0.1).

**What is sampled.**  Given the log-SD effects :math:`g`, every cell (speaker × stratum)
enters through :math:`(n, \bar z, W=\sum(z-\bar z)^2)` only, and the location effects
:math:`u` and :math:`b` are Gaussian, so both are integrated out in closed form (the formula
of :mod:`scoremix.locscale.likelihood`, with :math:`b\mid g\sim N(\rho\tau_b g/\tau_g,
\tau_b^2(1-\rho^2))`).  NUTS samples only :math:`\mu, \log\sigma, \tau, \rho, \omega, \nu` and
one :math:`g` per speaker × class; :math:`b` and :math:`u` are then drawn exactly from their
Gaussian conditionals, once per posterior draw (:func:`conditional_effects`).  A cost per
gradient of :math:`O(\#\text{cells})`, whatever the number of trials.  ``g`` is
non-centred (:math:`g = \tau_g\tilde g`) for small cells and centred when the speakers'
cells are large (the data then pin ``g`` and the non-centred form would mix badly).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["LocScaleCells", "LocScalePriors", "default_locscale_priors", "build_locscale_model",
           "conditional_effects", "CLASSES"]

CLASSES = ("negative", "positive")
_LOG2PI = float(np.log(2 * np.pi))


@dataclass
class LocScaleCells:
    """Per-cell sufficient statistics and the active components of a location-scale model.

    ``unit``, ``stratum``, ``n``, ``sz``, ``szz``: per cell (``C``); ``unit_class``: ``(U,)``
    class (0 negative, 1 positive) of every speaker × class unit; ``stratum_class`` ``(S,)``;
    ``scale``, ``corr``, ``omega``, ``tail``: per class, which components are present.
    """

    unit: np.ndarray
    stratum: np.ndarray
    n: np.ndarray
    sz: np.ndarray
    szz: np.ndarray
    unit_class: np.ndarray
    stratum_class: np.ndarray
    scale: np.ndarray
    corr: np.ndarray
    omega: np.ndarray
    tail: np.ndarray
    strata_levels: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.unit = np.asarray(self.unit, np.int64)
        self.stratum = np.asarray(self.stratum, np.int64)
        self.n = np.asarray(self.n, np.float64)
        self.sz = np.asarray(self.sz, np.float64)
        self.szz = np.asarray(self.szz, np.float64)
        self.unit_class = np.asarray(self.unit_class, np.int64)
        self.stratum_class = np.asarray(self.stratum_class, np.int64)
        for k in ("scale", "corr", "omega", "tail"):
            setattr(self, k, np.asarray(getattr(self, k), bool).reshape(2))
        self.corr = self.corr & self.scale
        self.tail = self.tail & self.scale & ~self.corr
        if not self.strata_levels:
            self.strata_levels = [f"s{k}" for k in range(self.n_strata)]

    @property
    def n_units(self) -> int:
        return int(self.unit_class.size)

    @property
    def n_strata(self) -> int:
        return int(self.stratum_class.size)

    @property
    def zbar(self) -> np.ndarray:
        return self.sz / self.n

    @property
    def ssw(self) -> np.ndarray:
        return np.maximum(self.szz - self.sz ** 2 / self.n, 0.0)

    @property
    def g_units(self) -> np.ndarray:
        """Units with a log-SD effect (their class has ``scale``)."""
        return np.flatnonzero(self.scale[self.unit_class])


@dataclass
class LocScalePriors:
    """Prior hyper-parameters (module docstring); arrays per stratum / scalars."""

    mu_loc: np.ndarray
    mu_scale: float
    lam_loc: np.ndarray
    lam_scale: float
    tb_scale: float
    tg_scale: float = 0.5
    om_scale: float = 0.5
    nu_shape: float = 2.0
    nu_rate: float = 0.1
    lkj_eta: float = 2.0


def default_locscale_priors(cells: LocScaleCells) -> LocScalePriors:
    r"""Weakly informative priors scaled by the data (as rstanarm's auto-scaling): per stratum
    :math:`m_s` = its mean, :math:`s_\mu = 2.5\,\mathrm{SD}`, :math:`l_s = \log\mathrm{SD}_s`,
    :math:`s_\lambda = 1`, :math:`s_b = 2.5\,\mathrm{SD}` (SD: the pooled within-stratum SD),
    :math:`s_g = s_\omega/\mathrm{SD} = 0.5`."""
    S = cells.n_strata
    ns = np.bincount(cells.stratum, weights=cells.n, minlength=S)
    m = np.bincount(cells.stratum, weights=cells.sz, minlength=S) / np.maximum(ns, 1)
    v = np.bincount(cells.stratum, weights=cells.szz, minlength=S) / np.maximum(ns, 1) - m ** 2
    sd_s = np.sqrt(np.maximum(v, 1e-12))
    sd = float(np.sqrt(np.sum(ns * sd_s ** 2) / max(ns.sum(), 1)))
    return LocScalePriors(mu_loc=m, mu_scale=2.5 * sd, lam_loc=np.log(sd_s), lam_scale=1.0, tb_scale=2.5 * sd,
                          tg_scale=0.5, om_scale=0.5 * sd)


def _segsum(pt, idx: np.ndarray, x, size: int):
    return pt.inc_subtensor(pt.zeros((size,), dtype="float64")[idx], x)


def build_locscale_model(cells: LocScaleCells, priors: LocScalePriors, centred: bool):
    """The PyMC model (module docstring); the cell statistics are ``pm.Data`` (``n``,
    ``zbar``, ``ssw``) so that one compiled model serves data of the same structure
    (simulation-based calibration)."""
    import pymc as pm
    import pytensor.tensor as pt

    S, U = cells.n_strata, cells.n_units
    ucls = cells.unit_class
    gu = cells.g_units
    with pm.Model() as model:
        n = pm.Data("n", cells.n)
        zbar = pm.Data("zbar", cells.zbar)
        ssw = pm.Data("ssw", cells.ssw)
        mu = pm.Normal("mu", mu=np.asarray(priors.mu_loc, float), sigma=priors.mu_scale, shape=S)
        lam = pm.Normal("lam", mu=np.asarray(priors.lam_loc, float), sigma=priors.lam_scale, shape=S)
        tau_b = pm.HalfNormal("tau_b", sigma=priors.tb_scale, shape=2)
        one = pt.ones((2,), dtype="float64")
        ks = np.flatnonzero(cells.scale)
        tg = pt.ones((2,), dtype="float64")
        if ks.size:
            tg = pt.set_subtensor(tg[ks], pm.HalfNormal("tau_g", sigma=priors.tg_scale, shape=ks.size))
        # s6bayes-check: a symbolic zero (same value, zero gradient); a constant zeros((2,)) here sends
        # PyMC's rewrite_pregrad into minutes of graph rewriting when no class is correlated
        rho = 0.0 * tau_b
        kc = np.flatnonzero(cells.corr)
        if kc.size:
            r01 = pm.Beta("rho01", alpha=priors.lkj_eta, beta=priors.lkj_eta, shape=kc.size)
            rho = pt.set_subtensor(rho[kc], 2.0 * r01 - 1.0)
        om2 = pt.zeros((2,), dtype="float64")
        ko = np.flatnonzero(cells.omega)
        if ko.size:
            om2 = pt.set_subtensor(om2[ko], pm.HalfNormal("omega", sigma=priors.om_scale, shape=ko.size) ** 2)
        kt = np.flatnonzero(cells.tail)
        nu = one * 1e6
        if kt.size:
            nu = pt.set_subtensor(nu[kt], pm.Gamma("nu", alpha=priors.nu_shape, beta=priors.nu_rate, shape=kt.size))
        g = pt.zeros((U,), dtype="float64")
        if gu.size:
            cls_g = ucls[gu]
            heavy = cells.tail[cls_g]
            if centred:
                gn = np.flatnonzero(~heavy)
                parts = pt.zeros((gu.size,), dtype="float64")
                if gn.size:
                    parts = pt.set_subtensor(parts[gn], pm.Normal("g_c", mu=0.0, sigma=tg[cls_g[gn]], shape=gn.size))
                gt = np.flatnonzero(heavy)
                if gt.size:
                    parts = pt.set_subtensor(parts[gt], pm.StudentT("g_ct", nu=nu[cls_g[gt]], mu=0.0,
                                                                    sigma=tg[cls_g[gt]], shape=gt.size))
                g = pt.set_subtensor(g[gu], parts)
            else:
                gn = np.flatnonzero(~heavy)
                raw = pt.zeros((gu.size,), dtype="float64")
                if gn.size:
                    raw = pt.set_subtensor(raw[gn], pm.Normal("g_raw", 0.0, 1.0, shape=gn.size))
                gt = np.flatnonzero(heavy)
                if gt.size:
                    raw = pt.set_subtensor(raw[gt], pm.StudentT("g_rawt", nu=nu[cls_g[gt]], mu=0.0, sigma=1.0,
                                                                shape=gt.size))
                g = pt.set_subtensor(g[gu], tg[cls_g] * raw)
        pm.Deterministic("g", g)
        pm.Potential("loglik", unit_loglik_graph(cells, n, zbar, ssw, mu, lam, tau_b, tg, rho, om2, g).sum())
    return model


def unit_loglik_graph(cells: LocScaleCells, n, zbar, ssw, mu, lam, tau_b, tg, rho, om2, g):
    r"""``(U,)`` log-likelihood of every unit given ``g`` with ``b`` and ``u`` integrated out."""
    import pytensor.tensor as pt

    U = cells.n_units
    ucls = cells.unit_class
    ccls = ucls[cells.unit]
    s2 = pt.exp(2.0 * (lam[cells.stratum] + g[cells.unit]))
    W = -0.5 * (n - 1.0) * (_LOG2PI + pt.log(s2)) - 0.5 * pt.log(n) - ssw / (2.0 * s2)
    v = s2 / n + om2[ccls]
    d = zbar - mu[cells.stratum]
    iv = 1.0 / v
    A = _segsum(pt, cells.unit, iv, U)
    B = _segsum(pt, cells.unit, d * iv, U)
    C = _segsum(pt, cells.unit, d * d * iv, U)
    D = _segsum(pt, cells.unit, pt.log(v), U)
    Ws = _segsum(pt, cells.unit, W, U)
    ncell = np.bincount(cells.unit, minlength=U).astype(np.float64)
    tb = tau_b[ucls]
    r = rho[ucls]
    a = r * tb / tg[ucls] * g
    t2 = tb ** 2 * (1.0 - r ** 2)
    P = A + 1.0 / t2
    num = B + a / t2
    logb = (-0.5 * ncell * _LOG2PI - 0.5 * D - 0.5 * pt.log(t2) - 0.5 * pt.log(P)
            - 0.5 * (C + a * a / t2 - num * num / P))
    return Ws + logb


def conditional_effects(cells: LocScaleCells, mu: np.ndarray, lam: np.ndarray, tau_b: np.ndarray,
                        tau_g: np.ndarray, rho: np.ndarray, om2: np.ndarray, g: np.ndarray,
                        rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    r"""Exact draws of ``b`` ``(D, U)`` and ``u`` ``(D, C)`` from their Gaussian conditionals
    given every posterior draw of the other parameters (``(D, ·)`` arrays; per class
    ``tau_b``, ``tau_g``, ``rho``, ``om2`` ``(D, 2)``)."""
    U = cells.n_units
    ucls = cells.unit_class
    ccls = ucls[cells.unit]
    Dn = mu.shape[0]
    s2 = np.exp(2.0 * (lam[:, cells.stratum] + g[:, cells.unit]))
    v = s2 / cells.n + om2[:, ccls]
    d = cells.zbar - mu[:, cells.stratum]
    seg = np.zeros((Dn, U))

    def segsum(x: np.ndarray) -> np.ndarray:
        out = seg.copy()
        np.add.at(out, (slice(None), cells.unit), x)
        return out

    A, Bs = segsum(1.0 / v), segsum(d / v)
    tb, r = tau_b[:, ucls], rho[:, ucls]
    tgu = tau_g[:, ucls]
    a = np.where(tgu > 0, r * tb / np.where(tgu > 0, tgu, 1.0), 0.0) * g
    t2 = tb ** 2 * (1.0 - r ** 2)
    P = A + 1.0 / t2
    b = (Bs + a / t2) / P + rng.standard_normal((Dn, U)) / np.sqrt(P)
    om = om2[:, ccls]
    prec = np.where(om > 0, 1.0 / np.where(om > 0, om, 1.0), 0.0) + cells.n / s2
    um = (cells.n / s2) * (d - b[:, cells.unit]) / prec
    u = np.where(om > 0, um + rng.standard_normal(um.shape) / np.sqrt(prec), 0.0)
    return b, u
