r"""Error rates of two classes whose scores are Gaussian mixtures (the model's scale).

A population's negative scores follow :math:`\sum_j a_j N(m_j, s_j^2)` and its positive scores
:math:`\sum_i b_i N(m_i, s_i^2)` (weights normalised within class).  Accepting when the score
is at least :math:`t`,

.. math::

    \mathrm{FNR}(t) = \sum_i b_i\,\Phi\!\left(\frac{t-m_i}{s_i}\right),\qquad
    \mathrm{FPR}(t) = \sum_j a_j\,\Phi\!\left(\frac{m_j-t}{s_j}\right).

FNR increases and FPR decreases in :math:`t`, so the EER threshold (their crossing) is
unique.  For one component per class the crossing has the closed form
:math:`t^* = (m_1 s_0 + m_0 s_1)/(s_0+s_1)` and
:math:`\mathrm{EER} = \Phi(-(m_1-m_0)/(s_0+s_1))`.

This module is the only place where these sums are evaluated: :func:`mixture_eer` (one
population, Brent's method), :class:`MixtureRates` (many populations × posterior draws ×
thresholds at once) and :func:`batch_eer` (vectorised bisection).  For a transformation
model :math:`t` is a *latent* threshold; :class:`scoremix.predictive.Predictive` maps it to
and from the score scale.  With one transform per stratum (``transform="monotone-by-class"``)
the thresholds are points ``u`` of the common threshold axis
(:mod:`scoremix.predictive.axis`) and component ``c`` is evaluated at its stratum's latent
threshold :math:`t_{s(c)}(u)`.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from scipy.optimize import brentq
from scipy.special import ndtr

from scoremix._deprecate import renamed_kwargs

__all__ = ["PredictiveError", "ModelEERError", "gaussian_eer", "mixture_eer", "MixtureRates", "batch_eer"]


class PredictiveError(ValueError):
    """Invalid input to a predictive (model-based) computation; names the offending item."""


#: the name model-based EER code has always raised (the same class)
ModelEERError = PredictiveError


@renamed_kwargs(mu_neg="mean_neg", mu_pos="mean_pos")
def gaussian_eer(*legacy: Any, mean_neg: Any = None, sd_neg: Any = None, mean_pos: Any = None,
                 sd_pos: Any = None) -> np.ndarray | float:
    """EER of two Gaussian classes: :math:`\\Phi(-(\\mu_1-\\mu_0)/(\\sigma_0+\\sigma_1))`.

    The arguments are keyword-only, in the order of :func:`mixture_eer`
    (``mean_neg, sd_neg, mean_pos, sd_pos``).  Four positional arguments are still read in the
    old order ``(mu_neg, mu_pos, sd_neg, sd_pos)`` for one release, with a
    :class:`FutureWarning` (so an old call never silently gives another answer); ``mu_neg=``,
    ``mu_pos=`` are the old names of ``mean_neg=``, ``mean_pos=``.

    Parameters
    ----------
    mean_neg, mean_pos:
        class means :math:`\\mu_0` (negative) and :math:`\\mu_1` (positive).
    sd_neg, sd_pos:
        class standard deviations :math:`\\sigma_0, \\sigma_1 > 0`.  All arguments broadcast
        against each other (numpy rules).

    Returns
    -------
    float or numpy.ndarray
        EER as a fraction; a Python float when every input is a scalar.  When
        :math:`\\mu_1 < \\mu_0` the value exceeds 0.5 (the detector is inverted).

    Examples
    --------
    >>> round(gaussian_eer(mean_neg=0.0, sd_neg=1.0, mean_pos=2.0, sd_pos=1.0), 7)
    0.1586553
    """
    if legacy:
        if len(legacy) != 4 or any(v is not None for v in (mean_neg, sd_neg, mean_pos, sd_pos)):
            raise TypeError("gaussian_eer takes keyword arguments mean_neg=, sd_neg=, mean_pos=, sd_pos= "
                            "(the order of mixture_eer)")
        warnings.warn("gaussian_eer(mu_neg, mu_pos, sd_neg, sd_pos) with positional arguments is read in "
                      "this old order for one release only; pass mean_neg=, sd_neg=, mean_pos=, sd_pos= "
                      "by keyword (the order of mixture_eer)", FutureWarning, stacklevel=3)
        mean_neg, mean_pos, sd_neg, sd_pos = legacy
    missing = [k for k, v in (("mean_neg", mean_neg), ("sd_neg", sd_neg), ("mean_pos", mean_pos),
                              ("sd_pos", sd_pos)) if v is None]
    if missing:
        raise TypeError(f"gaussian_eer() missing keyword argument(s): {', '.join(missing)}")
    mu_neg, mu_pos = mean_neg, mean_pos
    m0, m1, s0, s1 = np.broadcast_arrays(
        *(np.asarray(v, dtype=np.float64) for v in (mu_neg, mu_pos, sd_neg, sd_pos))
    )
    bad = ~((s0 > 0) & (s1 > 0) & np.isfinite(s0) & np.isfinite(s1))
    if bad.any():
        idx = np.argwhere(bad)[0].tolist()
        raise ModelEERError(
            f"standard deviations must be positive and finite; got sd_neg={float(s0[tuple(idx)])!r}, "
            f"sd_pos={float(s1[tuple(idx)])!r}" + (f" at index {idx}" if idx else "")
        )
    out = ndtr(-(m1 - m0) / (s0 + s1))
    return float(out) if out.ndim == 0 else out


def _check_components(mean: Any, sd: Any, weight: Any, what: str) -> tuple[np.ndarray, ...]:
    m = np.atleast_1d(np.asarray(mean, dtype=np.float64)).ravel()
    s = np.broadcast_to(np.asarray(sd, dtype=np.float64), m.shape).astype(np.float64)
    if m.size == 0:
        raise ModelEERError(f"the {what} class has no mixture components (no trials)")
    if weight is None:
        w = np.full(m.shape, 1.0 / m.size)
    else:
        w = np.broadcast_to(np.asarray(weight, dtype=np.float64), m.shape).astype(np.float64)
        if (w < 0).any() or not w.sum() > 0:
            raise ModelEERError(f"{what} weights must be non-negative with a positive sum")
        w = w / w.sum()
    if not np.isfinite(m).all():
        raise ModelEERError(f"{what} component means contain NaN/inf "
                            f"(first at {int(np.flatnonzero(~np.isfinite(m))[0])})")
    if not ((s > 0) & np.isfinite(s)).all():
        i = int(np.flatnonzero(~((s > 0) & np.isfinite(s)))[0])
        raise ModelEERError(f"{what} component SDs must be positive and finite; component {i} has {float(s[i])!r}")
    return m, s, w


def mixture_eer(
    mean_neg: Any,
    sd_neg: Any,
    mean_pos: Any,
    sd_pos: Any,
    weight_neg: Any = None,
    weight_pos: Any = None,
    return_threshold: bool = False,
) -> float | tuple[float, float]:
    """EER of two Gaussian mixtures, solved with Brent's method.

    Negative scores follow :math:`\\sum_j a_j N(m_j, s_j^2)`, positive scores
    :math:`\\sum_i b_i N(m_i, s_i^2)` (equal weights by default).  With
    :math:`\\mathrm{FNR}(\\tau) = \\sum_i b_i\\Phi((\\tau-m_i)/s_i)` (increasing) and
    :math:`\\mathrm{FPR}(\\tau) = \\sum_j a_j\\Phi((m_j-\\tau)/s_j)` (decreasing) the
    root :math:`\\tau^*` of :math:`\\mathrm{FNR}-\\mathrm{FPR}` is unique and
    :math:`\\mathrm{EER} = \\mathrm{FNR}(\\tau^*)`.  With one component per class this
    equals :func:`gaussian_eer` (which is then used directly).

    Returns
    -------
    float, or ``(eer, threshold)`` with ``return_threshold=True``.
    """
    m0, s0, a = _check_components(mean_neg, sd_neg, weight_neg, "negative")
    m1, s1, b = _check_components(mean_pos, sd_pos, weight_pos, "positive")

    def fnr(t: float) -> float:
        return float(np.dot(b, ndtr((t - m1) / s1)))

    def fpr(t: float) -> float:
        return float(np.dot(a, ndtr((m0 - t) / s0)))

    if m0.size == 1 and m1.size == 1:
        e = float(ndtr(-(m1[0] - m0[0]) / (s0[0] + s1[0])))
        tau = float((m1[0] * s0[0] + m0[0] * s1[0]) / (s0[0] + s1[0]))
        return (e, tau) if return_threshold else e
    smax = max(float(s0.max()), float(s1.max()))
    lo = min(float(m0.min()), float(m1.min())) - 40.0 * smax
    hi = max(float(m0.max()), float(m1.max())) + 40.0 * smax
    tau = float(brentq(lambda t: fnr(t) - fpr(t), lo, hi, xtol=1e-12 * max(1.0, hi - lo), rtol=1e-14))
    e = 0.5 * (fnr(tau) + fpr(tau))
    return (e, tau) if return_threshold else e


class MixtureRates:
    """Rates of ``P`` populations for ``D`` draws of ``m`` Gaussian components.

    Parameters
    ----------
    mu, sd:
        ``(D, m)`` component means and SDs (a ``(m,)`` array is one draw).
    is_pos:
        ``(m,)`` class of every component.
    weights:
        ``(P, m)`` non-negative weights (trial counts) of the components in each
        population; normalised within class and population.  A population without one
        class gets NaN rates for that class.
    axis, stratum:
        the fit's threshold axis (:mod:`scoremix.predictive.axis`) and the ``(m,)`` stratum
        index of every component.  Thresholds passed to :meth:`rates` are points ``u`` of
        the axis; component ``c`` is evaluated at its stratum's latent threshold
        ``t_{s(c)}(u)``.  ``None`` (or an identity axis): ``u`` is the latent threshold of
        every component.
    """

    def __init__(self, mu: np.ndarray, sd: np.ndarray, is_pos: np.ndarray, weights: np.ndarray,
                 axis: Any = None, stratum: np.ndarray | None = None) -> None:
        self.mu = np.atleast_2d(np.asarray(mu, float))
        self.sd = np.atleast_2d(np.asarray(sd, float))
        if self.mu.shape != self.sd.shape:
            raise PredictiveError(f"mu {self.mu.shape} and sd {self.sd.shape} must have the same shape")
        if np.any(self.sd <= 0):
            raise PredictiveError("all component standard deviations must be positive")
        self.is_pos = np.asarray(is_pos, bool)
        W = np.atleast_2d(np.asarray(weights, float))
        wp = W * self.is_pos[None, :]
        wn = W * (~self.is_pos)[None, :]
        with np.errstate(invalid="ignore", divide="ignore"):
            self.wp = wp / wp.sum(axis=1, keepdims=True)
            self.wn = wn / wn.sum(axis=1, keepdims=True)
        self.P = W.shape[0]
        self.weights = W
        self._pos_idx = np.flatnonzero(self.is_pos)
        self._neg_idx = np.flatnonzero(~self.is_pos)
        self.axis = None if axis is None or getattr(axis, "identity", True) else axis
        m = self.mu.shape[1]
        self.stratum = (np.zeros(m, np.int64) if stratum is None else np.asarray(stratum, np.int64))
        if self.stratum.shape != (m,):
            raise PredictiveError(f"stratum must hold one index per component ({m}), got {self.stratum.shape}")

    def subset_draws(self, sl: slice) -> "MixtureRates":
        """The same populations for the draws ``sl``."""
        return MixtureRates(self.mu[sl], self.sd[sl], self.is_pos, self.weights, self.axis, self.stratum)

    def rates(self, tau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``tau``: ``(P, D, T)`` thresholds (axis points) → ``p_miss, p_fa`` of the same shape."""
        if self.axis is None:
            return self._accumulate(tau.shape, lambda sl: tau[:, :, None, :])
        return self.rates_latent(self.axis.latent(tau))

    def rates_latent(self, lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``lat``: ``(S, P, D, T)`` latent thresholds per stratum (e.g. of score thresholds,
        ``axis.from_score``) → ``p_miss, p_fa`` ``(P, D, T)``: component ``c`` at
        ``lat[stratum[c]]``."""
        lat = np.asarray(lat, dtype=np.float64)
        if lat.shape[0] == 1:
            return self._accumulate(lat.shape[1:], lambda sl: lat[0][:, :, None, :])
        return self._accumulate(lat.shape[1:], lambda sl: np.moveaxis(lat[self.stratum[sl]], 0, 2))

    def _accumulate(self, shape: tuple[int, ...], thr: Any) -> tuple[np.ndarray, np.ndarray]:
        """Σ_c w_pc Φ(±(t_c − μ_c)/σ_c) with ``thr(sl)`` the ``(P, D, k, T)`` (or broadcastable)
        thresholds of components ``sl``."""
        pm = np.zeros(shape)
        pf = np.zeros(shape)
        for idx, out, pos in ((self._pos_idx, pm, True), (self._neg_idx, pf, False)):
            w = (self.wp if pos else self.wn)[:, idx]  # (P, k)
            for start in range(0, idx.size, 256):
                sl = idx[start:start + 256]
                mu = self.mu[:, sl]  # (D, k)
                sd = self.sd[:, sl]
                z = (thr(sl) - mu[None, :, :, None]) / sd[None, :, :, None]  # (P, D, k, T)
                phi = ndtr(z) if pos else ndtr(-z)
                out += np.einsum("pk,pdkt->pdt", np.nan_to_num(w[:, start:start + 256]), phi)
        pm[~np.isfinite(self.wp.sum(axis=1))] = np.nan
        pf[~np.isfinite(self.wn.sum(axis=1))] = np.nan
        return pm, pf

    def bounds(self, width: float) -> tuple[np.ndarray, np.ndarray]:
        """``(D,)`` axis points below / above which every component lies ± ``width`` SDs."""
        lo = np.min(self.mu - width * self.sd, axis=1)
        hi = np.max(self.mu + width * self.sd, axis=1)
        return (lo, hi) if self.axis is None else self.axis.bounds(lo, hi)

    def grid(self, n: int, width: float = 8.0) -> np.ndarray:
        """``(D, n)`` evenly spaced thresholds (axis points) covering every component ± ``width`` SDs."""
        lo, hi = self.bounds(width)
        t = np.linspace(0.0, 1.0, n)
        return lo[:, None] + (hi - lo)[:, None] * t[None, :]


def batch_eer(mix: MixtureRates, n_iter: int = 80, return_threshold: bool = False
              ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """EER of every population and draw, ``(P, D)``, by bisection on ``FNR − FPR``.

    With ``return_threshold=True`` also the EER thresholds (axis points: latent thresholds
    unless the mixture has a stratified axis), ``(P, D)``.  The bracket is every component
    ± 10 SDs; 80 halvings leave an interval below 1e-20 of its width.
    """
    lo, hi = mix.bounds(10.0)
    lo, hi = lo[None, :].repeat(mix.P, 0), hi[None, :].repeat(mix.P, 0)
    for _ in range(n_iter):
        mid = 0.5 * (lo + hi)
        pm, pf = mix.rates(mid[..., None])
        up = (pm - pf)[..., 0] < 0  # p_miss increases with tau
        lo, hi = np.where(up, mid, lo), np.where(up, hi, mid)
    t = 0.5 * (lo + hi)
    pm, pf = mix.rates(t[..., None])
    e = (0.5 * (pm + pf))[..., 0]
    return (e, t) if return_threshold else e
