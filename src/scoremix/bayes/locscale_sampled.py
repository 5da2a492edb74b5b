r"""Sampled stratum transforms for the Bayesian location-scale model: a monotone Bernstein
deformation of every ML transform, sampled jointly with the location-scale parameters
(``bayes_locscale(..., transform="sampled")``).

The fixed-transform model (:mod:`scoremix.bayes.locscale`) takes every trial's latent value on
the ML transform :math:`\hat h_s` of its stratum.  Here the latent value is
:math:`z_t = h_s(\hat h_s(S_t))` with a monotone map on the ML scale, a Bernstein polynomial
of order :math:`M` as in the most likely transformation models of Hothorn, Möst & Bühlmann
(2018, *Scand. J. Statist.*; R packages mlt/tram):

.. math::

    x = \frac{\hat h - l_s}{r_s - l_s},\qquad
    h_s(\hat h) = l_s + (r_s - l_s) \sum_{k=1}^{M} w_{sk}\, F_{k,M}(x),\qquad
    F_{k,M}(x) = \sum_{j\ge k} \binom{M}{j} x^j (1-x)^{M-j},

with :math:`[l_s, r_s]` the range of the stratum's ML latent values, linear beyond it (the
end slopes), and increments :math:`w_s = \mathrm{softmax}(\tau_h \gamma_s)` (positive, sum
1: :math:`h_s` is strictly increasing and keeps the end points, which with the free
:math:`\mu_s, \sigma_s` of the location-scale part identifies the model; an affine change of
:math:`h_s` is a change of :math:`\mu_s, \sigma_s`).  Shrinkage prior:
:math:`\gamma_s \sim` zero-sum :math:`N(0, I)`, :math:`\tau_h \sim N^+(0, s_h^2)` (one
scale for all strata; :math:`\tau_h = 0` is the ML transform, :math:`w_{sk} = 1/M`,
:math:`h_s(\hat h) = \hat h`).

Likelihood.  The scores' density is the latent density times the Jacobian
:math:`\prod_t h_s'(\hat h_t) = \prod_t M \sum_k w_{sk} B_{k-1,M-1}(x_t)` (the factor
:math:`\hat h'(S)` does not depend on parameters).  The latent values enter the collapsed
location-scale likelihood (:func:`~scoremix.bayes.locscale_model.unit_loglik_graph`) through
their cell statistics, which are linear / quadratic in :math:`w`:
:math:`\sum_{t\in c} z_t = n_c l_s + (r_s-l_s)\, w_s^\top \sum_t F(x_t)` and
:math:`W_c = (r_s-l_s)^2 w_s^\top \big[\sum_t (F_t-\bar F_c)(F_t-\bar F_c)^\top\big] w_s + V_c`
(:math:`V_c`: the E-step variances of tied scores' latent values, taken at the ML transform).
So one gradient costs :math:`O(\#\text{cells}\cdot M^2 + \#\text{trials}\cdot M)`.

The data of the model are ``pm.Data`` (:func:`sampled_model_data`), so one built (or
nutpie-compiled) model refits new data of the same structure; a fixed range
(``sampled_transform_data(..., lo=, hi=)``, values beyond it through the linear tails of
:func:`basis_F`) is what the simulation-based calibration (``benchmarks/sbc_locscale.py
--model sampled``) uses, since a generating map cannot depend on the data's range.

Posterior error rates: for every draw the thresholds' ML latent values are mapped by that
draw's :math:`h_s` (:func:`warp`) and the model rates computed as in
:mod:`scoremix.predictive.attainable`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
from scipy.special import ndtr
from scipy.stats import binom

from scoremix.bayes.locscale_model import (
    LocScaleCells,
    LocScalePriors,
    locscale_effects,
    unit_loglik_graph,
)

__all__ = [
    "DEFAULT_ORDER",
    "SampledTransformData",
    "build_sampled_model",
    "sampled_eer_draws",
    "sampled_model_data",
    "sampled_transform_data",
    "warp",
]

#: default Bernstein order M
DEFAULT_ORDER = 6


@dataclass
class SampledTransformData:
    """Per-stratum ranges ``lo``, ``hi`` ``(S,)``; per cell ``sF`` ``(C, M)``, ``sFFc``
    ``(C, M, M)`` (centred cross-products), ``sV`` ``(C,)``; per trial ``J`` ``(N, M)`` (the
    Jacobian basis :math:`M B_{k-1,M-1}(x_t)`) and ``jstratum`` ``(N,)``; ``order`` M;
    ``tau_h_scale`` :math:`s_h`."""

    lo: np.ndarray
    hi: np.ndarray
    sF: np.ndarray
    sFFc: np.ndarray
    sV: np.ndarray
    J: np.ndarray
    jstratum: np.ndarray
    order: int
    tau_h_scale: float = 1.0


def basis_F(x: np.ndarray, order: int) -> np.ndarray:
    """``(…, M)`` cumulative Bernstein basis :math:`F_{k,M}(x) = P(\\mathrm{Bin}(M, x) \\ge k)`, k = 1..M,
    continued linearly beyond ``[0, 1]`` with the end slopes (:math:`F_{1} = Mx` below 0,
    :math:`F_{M} = 1 + M(x - 1)` above 1, the others constant), so that
    :math:`h = l + (r - l)\\, F w` is the map of :func:`warp` on the whole line."""
    k = np.arange(1, order + 1)
    x = np.asarray(x, float)
    F = binom.sf(k - 1, order, np.clip(x, 0.0, 1.0)[..., None])
    F[..., 0] = np.where(x < 0, order * x, F[..., 0])
    F[..., -1] = np.where(x > 1, 1.0 + order * (x - 1.0), F[..., -1])
    return F


def basis_J(x: np.ndarray, order: int) -> np.ndarray:
    """``(…, M)`` :math:`M B_{k-1,M-1}(x)` (so that :math:`h'(\\hat h) = J \\cdot w`); beyond ``[0, 1]``
    the end values :math:`M e_1`, :math:`M e_M` (the derivative of :func:`basis_F`'s linear tails)."""
    k = np.arange(1, order + 1)
    return order * binom.pmf(k - 1, order - 1, np.clip(np.asarray(x, float), 0.0, 1.0)[..., None])


def sampled_transform_data(cells: LocScaleCells, ez: np.ndarray, ez2: np.ndarray, trial_cell: np.ndarray,
                           order: int = DEFAULT_ORDER, tau_h_scale: float = 1.0, lo: np.ndarray | None = None,
                           hi: np.ndarray | None = None) -> SampledTransformData:
    """The statistics of the sampled-transform likelihood from every trial's ML latent moments
    ``ez``, ``ez2`` and its cell index ``trial_cell`` (−1: left out).  ``lo``, ``hi`` ``(S,)``:
    a fixed range :math:`[l_s, r_s]` of the Bernstein polynomials (default: each stratum's
    range of ``ez``); values outside it enter through the linear tails (:func:`basis_F`),
    as in the simulation-based calibration, whose data-generating map must not depend on the
    data."""
    keep = trial_cell >= 0
    tc = trial_cell[keep]
    z = np.asarray(ez, float)[keep]
    var = np.maximum(np.asarray(ez2, float)[keep] - z ** 2, 0.0)
    st = cells.stratum[tc]
    S, C = cells.n_strata, cells.unit.size
    if lo is None or hi is None:
        lo = np.full(S, np.inf)
        hi = np.full(S, -np.inf)
        np.minimum.at(lo, st, z)
        np.maximum.at(hi, st, z)
    lo, hi = np.asarray(lo, float).reshape(S), np.asarray(hi, float).reshape(S)
    span = np.where(hi > lo, hi - lo, 1.0)
    x = (z - lo[st]) / span[st]
    F = basis_F(x, order)
    n = np.bincount(tc, minlength=C).astype(float)
    sF = np.zeros((C, order))
    np.add.at(sF, tc, F)
    Fc = F - (sF / np.maximum(n, 1)[:, None])[tc]
    sFFc = np.zeros((C, order, order))
    np.add.at(sFFc, tc, Fc[:, :, None] * Fc[:, None, :])
    sV = np.bincount(tc, weights=var, minlength=C)
    return SampledTransformData(lo=lo, hi=lo + span, sF=sF, sFFc=sFFc, sV=sV, J=basis_J(x, order), jstratum=st,
                                order=int(order), tau_h_scale=float(tau_h_scale))


def sampled_model_data(cells: LocScaleCells, tdata: SampledTransformData) -> dict[str, np.ndarray]:
    """The ``pm.Data`` of :func:`build_sampled_model` (names → arrays): set them with
    ``pm.set_data`` or nutpie's ``with_data`` to refit a built model to new data of the same
    structure (same cells, trials per stratum and order; simulation-based calibration)."""
    return dict(n=cells.n, lo=tdata.lo, span=tdata.hi - tdata.lo, sF=tdata.sF, sFFc=tdata.sFFc, sV=tdata.sV,
                J=tdata.J)


def build_sampled_model(cells: LocScaleCells, tdata: SampledTransformData, priors: LocScalePriors,
                        centred: bool):
    """The PyMC model of the location-scale model with sampled transforms (module docstring);
    the data are ``pm.Data`` (:func:`sampled_model_data`)."""
    import pymc as pm
    import pytensor.tensor as pt

    S, M = cells.n_strata, tdata.order
    st = cells.stratum
    with pm.Model() as model:
        dat = {k: pm.Data(k, v) for k, v in sampled_model_data(cells, tdata).items()}
        n, lo, span = dat["n"], dat["lo"], dat["span"]
        mu, lam, tau_b, tg, rho, om2, g = locscale_effects(cells, priors, centred)
        tau_h = pm.HalfNormal("tau_h", sigma=tdata.tau_h_scale)
        graw = pm.ZeroSumNormal("gamma_raw", sigma=1.0, shape=(S, M))
        w = pm.Deterministic("w", pt.special.softmax(tau_h * graw, axis=-1))
        wc = w[st]                                                           # (C, M)
        zbar = lo[st] + span[st] * pt.sum(wc * dat["sF"], axis=1) / n
        quad = pt.sum(wc[:, :, None] * dat["sFFc"] * wc[:, None, :], axis=(1, 2))
        ssw = span[st] ** 2 * quad + dat["sV"]
        jac = pt.sum(pt.log(pt.sum(dat["J"] * w[tdata.jstratum], axis=1)))
        ll = unit_loglik_graph(cells, n, zbar, ssw, mu, lam, tau_b, tg, rho, om2, g).sum()
        pm.Potential("loglik", ll + jac)
    return model


def cell_zbar(cells: LocScaleCells, tdata: SampledTransformData, w: np.ndarray) -> np.ndarray:
    """``(D, C)`` cell means of the latent values under draws ``w`` ``(D, S, M)``."""
    st = cells.stratum
    span = tdata.hi - tdata.lo
    return tdata.lo[st] + span[st] * np.einsum("dcm,cm->dc", w[:, st], tdata.sF) / cells.n


def warp(lat: np.ndarray, tdata: SampledTransformData, w: np.ndarray) -> np.ndarray:
    """``(S, T)`` latent thresholds of one draw: every stratum's ML latent thresholds ``lat``
    ``(S, T)`` mapped by its :math:`h_s` (weights ``w`` ``(S, M)``), linear beyond the range."""
    lo, hi = tdata.lo[:, None], tdata.hi[:, None]
    span = hi - lo
    M = tdata.order
    with np.errstate(invalid="ignore", over="ignore"):
        x = (lat - lo) / span
        inside = lo + span * np.einsum("stm,sm->st", basis_F(np.where(np.isfinite(x), x, 0.5), M), w)
        left = lo + (lat - lo) * M * w[:, :1]
        right = hi + (lat - hi) * M * w[:, -1:]
        out = np.where(x < 0, left, np.where(x > 1, right, inside))
    return np.where(np.isneginf(lat), -np.inf, np.where(np.isposinf(lat), np.inf, out))


def sampled_eer_draws(pred: Any, W: np.ndarray, tdata: SampledTransformData, w: np.ndarray, thresholds: str,
                      max_thresholds: int | None) -> np.ndarray:
    """``(P, D')`` posterior EER (fraction) of populations ``W`` with the draws' transforms
    ``w`` ``(D', S, M)`` (aligned with ``pred``'s draws).  ``"attainable"``: ROCCH EER at the
    observed distinct scores; ``"latent"``: on a fine grid of the common threshold axis (16
    points per knot interval, thinned to 4000), the crossing up to the grid."""
    from scoremix.predictive.attainable import _eer_rows, attainable_scores

    axis = pred.axis
    if thresholds == "attainable":
        tau = attainable_scores(pred.score, max_thresholds)
        lat0 = np.asarray(axis.from_score(tau), float).reshape(-1, tau.size)
    else:
        U = axis.U[1:-1] if hasattr(axis, "U") else np.unique(np.asarray(axis.from_score(pred.score), float))
        U = U[np.isfinite(U)]
        grid = np.concatenate([np.linspace(a, b, 16, endpoint=False) for a, b in pairwise(U)] + [U[-1:]])
        if grid.size > 4000:
            grid = grid[np.unique(np.round(np.linspace(0, grid.size - 1, 4000)).astype(np.int64))]
        tau = grid
        lat0 = np.asarray(axis.latent(grid), float).reshape(-1, grid.size)
    stratum = np.zeros(pred.mean.shape[1], np.int64) if pred.stratum is None else pred.stratum
    Wm = np.atleast_2d(W)
    pos = pred.positive
    tot_p, tot_n = Wm[:, pos].sum(axis=1), Wm[:, ~pos].sum(axis=1)
    out = np.full((Wm.shape[0], w.shape[0]), np.nan)
    for d in range(w.shape[0]):
        lat = warp(lat0, tdata, w[d])
        z = (lat[stratum] - pred.mean[d][:, None]) / pred.sd[d][:, None]        # (m, T)
        with np.errstate(invalid="ignore", divide="ignore"):
            fnr = (Wm[:, pos] @ ndtr(z[pos])) / tot_p[:, None]
            fpr = (Wm[:, ~pos] @ ndtr(-z[~pos])) / tot_n[:, None]
        out[:, d] = _eer_rows(fnr, fpr, tau)[0]
    return out
