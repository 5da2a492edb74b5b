r"""Interval probabilities of the latent Gaussian and their derivatives, stable in both tails.

A row whose score falls in cell ``k`` has latent bounds :math:`(\alpha_{k-1}, \alpha_k]`
(:math:`\alpha_0=-\infty`, :math:`\alpha_K=+\infty`), linear predictor :math:`\eta_i` and
latent SD :math:`\sigma_i`.  With :math:`a=(\alpha_{k-1}-\eta_i)/\sigma_i` and
:math:`b=(\alpha_k-\eta_i)/\sigma_i` its log-likelihood is

.. math::

    \ell_i = G(a, b) = \log\{\Phi(b) - \Phi(a)\}.

With :math:`D=\Phi(b)-\Phi(a)`, :math:`p_a=\varphi(a)/D`, :math:`p_b=\varphi(b)/D`:

.. math::

    G_a=-p_a,\quad G_b=p_b,\quad G_{aa}=a p_a-p_a^2,\quad G_{ab}=p_a p_b,\quad
    G_{bb}=-b p_b-p_b^2 .

The Newton weight of the row (minus the second derivative in :math:`\eta`) is
:math:`W=-M/\sigma^2` with :math:`M=G_{aa}+2G_{ab}+G_{bb}=a p_a-b p_b-(p_b-p_a)^2`; its
derivatives (needed by the gradient of the Laplace log-determinant) use
:math:`\partial_a p_a=-a p_a+p_a^2`, :math:`\partial_b p_a=-p_a p_b`,
:math:`\partial_a p_b=p_a p_b`, :math:`\partial_b p_b=-b p_b-p_b^2`.
At an open end (:math:`a=-\infty` or :math:`b=+\infty`) the corresponding
:math:`p` is exactly 0 and every product :math:`a^j p_a` is its limit 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import log_ndtr, ndtr

__all__ = ["log_interval_prob", "RowDerivs", "row_derivs", "add_third"]

_LOG_SQRT_2PI = 0.5 * np.log(2 * np.pi)
_INV_SQRT_2PI = 1.0 / np.sqrt(2 * np.pi)


def _log1mexp(x: np.ndarray) -> np.ndarray:
    """``log(1 - exp(x))`` for ``x ≤ 0`` (Mächler's switch at ``-log 2``)."""
    x = np.minimum(x, -1e-300)
    return np.where(x > -0.6931471805599453, np.log(-np.expm1(x)), np.log1p(-np.exp(x)))


def log_interval_prob(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    r"""``log(Φ(b) − Φ(a))`` for ``a < b`` (``a`` may be ``-inf``, ``b`` may be ``+inf``).

    Both tails are exact: for ``a ≥ 0`` the symmetric form ``Φ(-a) − Φ(-b)`` is used, and
    the difference of two logs is taken with ``log1mexp``."""
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    out = np.empty(np.broadcast(a, b).shape)
    upper = a > 0            # both in the upper tail: Φ(-a) - Φ(-b)
    lower = b < 0            # both in the lower tail
    mid = ~(upper | lower)
    if np.any(lower):
        lb, la = log_ndtr(b[lower]), log_ndtr(a[lower])
        out[lower] = lb + _log1mexp(la - lb)
    if np.any(upper):
        la, lb = log_ndtr(-a[upper]), log_ndtr(-b[upper])
        out[upper] = la + _log1mexp(lb - la)
    if np.any(mid):
        # Φ(b) - Φ(a) = 1 - Φ(a) - Φ(-b), both terms ≤ 1/2
        out[mid] = np.log1p(-(np.exp(log_ndtr(a[mid])) + np.exp(log_ndtr(-b[mid]))))
    return out


@dataclass
class RowDerivs:
    """Per-row quantities at ``(a, b)``; see the module docstring for the formulas.

    ``ll`` = ``G``; ``pa``, ``pb``; ``af``/``bf`` are ``a``/``b`` with infinite ends set to
    0 (so products with ``p`` take their limits); ``M`` and, when requested, ``Ma``, ``Mb``.
    """

    ll: np.ndarray
    pa: np.ndarray
    pb: np.ndarray
    af: np.ndarray
    bf: np.ndarray
    M: np.ndarray
    Ma: np.ndarray | None = None
    Mb: np.ndarray | None = None

    @property
    def Gaa(self) -> np.ndarray:
        return self.af * self.pa - self.pa ** 2

    @property
    def Gab(self) -> np.ndarray:
        return self.pa * self.pb

    @property
    def Gbb(self) -> np.ndarray:
        return -self.bf * self.pb - self.pb ** 2


def _interval(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``log D``, ``φ(a)/D``, ``φ(b)/D``.

    Very narrow cells (``b − a < 1e-4 / max(1, |a|)``; most cells of a continuous score) use
    the midpoint expansion ``∫φ = φ(m) w (1 + (m²−1) w²/24 + O(w⁴))``.  Other rows: ``D`` as
    a difference of ``ndtr`` on the side where both are ≤ 1/2 (each term has full relative
    precision), kept where ``D`` is not below ``1e-9`` times the larger term (at most ~1e-7
    relative cancellation error) and ``φ`` does not underflow; the remaining rows use the
    log-space form :func:`log_interval_prob`."""
    fa = np.isfinite(a)
    fb = np.isfinite(b)
    af = np.where(fa, a, 0.0)
    bf = np.where(fb, b, 0.0)
    w = bf - af
    narrow = fa & fb & (w < 1e-4 / np.maximum(1.0, np.abs(af)))
    ll = np.empty(a.shape)
    pa = np.empty(a.shape)
    pb = np.empty(a.shape)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        if np.any(narrow):
            an, wn = af[narrow], w[narrow]
            m = an + wn / 2
            lln = -0.5 * m * m - _LOG_SQRT_2PI + np.log(wn) + np.log1p((m * m - 1) * wn * wn / 24)
            ll[narrow] = lln
            pa[narrow] = np.exp(-0.5 * an * an - _LOG_SQRT_2PI - lln)
            pb[narrow] = np.exp(-0.5 * bf[narrow] ** 2 - _LOG_SQRT_2PI - lln)
        wide = ~narrow
        if np.any(wide):
            aw, bw, faw, fbw = a[wide], b[wide], fa[wide], fb[wide]
            afw, bfw = af[wide], bf[wide]
            flip = aw > 0
            lo = np.where(flip, -bw, aw)
            hi = np.where(flip, -aw, bw)
            Fhi = ndtr(hi)
            D = Fhi - ndtr(lo)
            phia = np.where(faw, np.exp(-0.5 * afw * afw), 0.0) * _INV_SQRT_2PI
            phib = np.where(fbw, np.exp(-0.5 * bfw * bfw), 0.0) * _INV_SQRT_2PI
            llw = np.log(D)
            paw = phia / D
            pbw = phib / D
            bad = ~((D > 1e-9 * Fhi) & (D > 1e-250) & (np.abs(afw) < 35) & (np.abs(bfw) < 35))
            if np.any(bad):
                llb = log_interval_prob(aw[bad], bw[bad])
                llw[bad] = llb
                paw[bad] = np.where(faw[bad], np.exp(-0.5 * afw[bad] ** 2 - _LOG_SQRT_2PI - llb), 0.0)
                pbw[bad] = np.where(fbw[bad], np.exp(-0.5 * bfw[bad] ** 2 - _LOG_SQRT_2PI - llb), 0.0)
            ll[wide] = llw
            pa[wide] = paw
            pb[wide] = pbw
    return ll, pa, pb


def row_derivs(a: np.ndarray, b: np.ndarray, third: bool = False) -> RowDerivs:
    """``G(a, b)`` and the derivatives of the module docstring (``third=True`` adds
    ``M_a``, ``M_b``, i.e. the third derivatives of ``G``)."""
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    ll, pa, pb = _interval(a, b)
    af = np.where(np.isfinite(a), a, 0.0)
    bf = np.where(np.isfinite(b), b, 0.0)
    d = pb - pa
    M = af * pa - bf * pb - d * d
    out = RowDerivs(ll=ll, pa=pa, pb=pb, af=af, bf=bf, M=M)
    if third:
        add_third(out)
    return out


def add_third(out: RowDerivs) -> RowDerivs:
    """Fill ``M_a``, ``M_b`` (third derivatives of ``G``) from ``p_a, p_b, a, b``."""
    pa, pb, af, bf = out.pa, out.pb, out.af, out.bf
    d = pb - pa
    dpa_a = -af * pa + pa * pa
    dpa_b = -pa * pb
    dpb_a = pa * pb
    dpb_b = -bf * pb - pb * pb
    out.Ma = pa + af * dpa_a - bf * dpb_a - 2 * d * (dpb_a - dpa_a)
    out.Mb = af * dpa_b - pb - bf * dpb_b - 2 * d * (dpb_b - dpa_b)
    return out
