r"""Model error rates where a detector can put a threshold (the *attainable* definition).

A detector accepts a trial when its score is at least a threshold τ.  On a table of scores
only the distinct observed scores :math:`v_1 < \dots < v_K` (and "reject all", τ = +∞)
give different decisions, so the empirical rates are step functions and the empirical
operating points are :math:`(P_\mathrm{fa}(v_k), P_\mathrm{miss}(v_k))`.  The model's
rates are evaluated at exactly the same thresholds,

.. math::

    \mathrm{FNR}(v_k) = \sum_i b_i\,\Phi\!\Big(\frac{h^-_{s(i)}(v_k) - m_i}{s_i}\Big),\qquad
    \mathrm{FPR}(v_k) = \sum_j a_j\,\Big[1 - \Phi\!\Big(\frac{h^-_{s(j)}(v_k) - m_j}{s_j}\Big)\Big],

with :math:`h^-_s` the left limit of stratum ``s``'s transform at the score (``h`` = identity
for a Gaussian fit): with tied scores the model, like the data, can only move a whole tie
cell across the threshold (the cell is a *step*, never interpolated).  The accept-all point
(τ = −∞: FNR 0, FPR 1) and the reject-all point (τ = +∞: FNR 1, FPR 0) are added.  Then

* **model EER** = the ROCCH EER of these points (lower convex hull in
  :math:`(P_\mathrm{fa}, P_\mathrm{miss})`, crossed with the diagonal) — the convention of
  :func:`scoremix.metrics.eer`'s default ``method="rocch"``;
* **model minimum DCF** = the minimum of :math:`c_\mathrm{miss}\pi P_\mathrm{miss} +
  c_\mathrm{fa}(1-\pi)P_\mathrm{fa}` over the same points (:func:`scoremix.metrics.min_dcf`).

So a model that reproduces each stratum's score distribution (one transform per stratum, no
random effects) gives ``sm.eer`` and ``sm.min_dcf`` exactly, ties, saturated (±∞) scores and
non-concave ROCs included.

The *latent* definition (``thresholds="latent"``) is the smooth one: the root of
FNR(t) = FPR(t) and the minimum of the cost over every real latent threshold ``t``.  It
interpolates inside tie cells (a threshold no detector can set) and, on a non-concave model
ROC, crosses the un-hulled curve; it is what a model "would" give if the detector's scores
were continuous.

Thresholds: the distinct scores of the trials evaluated (``Predictive.score``).  The EER and
the minimum DCF of one population (and every SVEva measure of a point fit) are exact over all
of them, found from a coarse subset refined only where a finer point could lie below the hull's
supporting line or below the current minimum cost (:func:`_refined_eer`,
:func:`_refined_min_cost`).  Where many
populations or draws are evaluated at once (SVEva tables, posterior draws, re-weighting
replicates) and there are more than ``max_thresholds`` distinct scores, every ``j``-th is kept
(both ends always), which can only raise the EER and the minimum DCF, by at most the rate mass
between two kept scores (documented in ``docs/predictive.md``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import ndtr

from scoremix.metrics import _lower_hull, hull_eer   # hull_eer re-exported here
from scoremix.predictive.mixture import PredictiveError

__all__ = ["THRESHOLDS", "check_thresholds", "hull_eer", "attainable_scores", "score_rates",
           "attainable_eer", "attainable_measures", "DEFAULT_MAX_THRESHOLDS"]

#: values of ``thresholds=`` of the model-based measures
THRESHOLDS = ("attainable", "latent")
#: thinning limit of the threshold set (distinct scores)
DEFAULT_MAX_THRESHOLDS = 20000


def check_thresholds(thresholds: str) -> str:
    if thresholds not in THRESHOLDS:
        raise PredictiveError(f"thresholds must be one of {THRESHOLDS}, got {thresholds!r}")
    return thresholds


def attainable_scores(score: Any, max_thresholds: int | None = None) -> np.ndarray:
    """Sorted distinct observed scores (``±inf`` kept, NaN dropped), thinned to at most
    ``max_thresholds`` (every ``j``-th, both ends kept)."""
    s = np.asarray(score, dtype=np.float64)
    s = np.unique(s[~np.isnan(s)])
    if s.size == 0:
        raise PredictiveError("the attainable (observed-score) thresholds need the trials' observed scores, "
                              "and these rows carry none; pass trials with the score column or use "
                              "thresholds='latent'")
    cap = DEFAULT_MAX_THRESHOLDS if max_thresholds is None else int(max_thresholds)
    if s.size > cap >= 2:
        keep = np.unique(np.round(np.linspace(0, s.size - 1, cap)).astype(np.int64))
        s = s[keep]
    return s


def _latent_of_scores(pred: Any, tau: np.ndarray) -> np.ndarray:
    """``(S, T)`` latent thresholds of score thresholds (accept ``s ≥ τ``)."""
    lat = np.asarray(pred.axis.from_score(tau), dtype=np.float64)
    return lat.reshape(-1, tau.size)


def score_rates(pred: Any, weights: np.ndarray, tau: np.ndarray, chunk: int = 4_000_000
                ) -> tuple[np.ndarray, np.ndarray]:
    """Model ``FNR, FPR`` ``(P, D, T)`` of populations ``weights`` ``(P, m)`` (trial counts per
    component) at score thresholds ``tau`` ``(T,)`` (exact step rates; NaN rows for a population
    without one class)."""
    W = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    tau = np.asarray(tau, dtype=np.float64)
    lat = _latent_of_scores(pred, tau)                     # (S, T)
    D, T, P = pred.n_draws, tau.size, W.shape[0]
    out = []
    for pos in (True, False):
        idx = np.flatnonzero((pred.positive == pos) & (W.sum(axis=0) > 0))
        acc = np.zeros((P, D, T))
        w = W[:, idx]
        tot = w.sum(axis=1)
        step = max(1, chunk // max(1, D * T))
        for a in range(0, idx.size, step):
            sl = idx[a:a + step]
            z = (lat[pred.stratum[sl]][None, :, :] - pred.mean[:, sl, None]) / pred.sd[:, sl, None]  # (D, k, T)
            phi = ndtr(z) if pos else ndtr(-z)
            acc += np.einsum("pk,dkt->pdt", w[:, a:a + step], phi)
        with np.errstate(invalid="ignore", divide="ignore"):
            acc = acc / tot[:, None, None]
        acc[tot == 0] = np.nan
        out.append(acc)
    return out[0], out[1]


def _eer_rows(pm: np.ndarray, pf: np.ndarray, tau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ROCCH EER and nearer-vertex score threshold of every leading row of ``(…, T)``."""
    shp = pm.shape[:-1]
    pm2, pf2 = pm.reshape(-1, pm.shape[-1]), pf.reshape(-1, pf.shape[-1])
    e = np.full(pm2.shape[0], np.nan)
    t = np.full(pm2.shape[0], np.nan)
    thr = np.concatenate(([-np.inf], tau, [np.inf]))
    for r in range(pm2.shape[0]):
        e[r], k, _ = hull_eer(pf2[r], pm2[r])
        if np.isfinite(e[r]):
            t[r] = thr[k + 1]
    return e.reshape(shp), t.reshape(shp)


def attainable_eer(pred: Any, weights: np.ndarray, max_thresholds: int | None = None, scores: Any = None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``(P, D)`` ROCCH EER of the model ROC at the observed distinct scores (``scores``: those
    of the population's trials; default all of ``pred``'s) and the score threshold of the
    nearer hull vertex (module docstring).

    A single population and draw with many thresholds is solved exactly from a coarse subset
    (:func:`_refined_eer`), without evaluating the rates at every threshold."""
    W = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    single = W.shape[0] == 1
    cap = max_thresholds if max_thresholds is not None else (2 ** 62 if single else None)
    tau = attainable_scores(pred.score if scores is None else scores, cap)
    if single and (tau.size > 4 * _COARSE or pred.n_draws > 1):
        out = [_refined_eer(_DrawView(pred, d), W, tau) if tau.size > 4 * _COARSE else
               tuple(a[0, 0] for a in _eer_rows(*score_rates(_DrawView(pred, d), W, tau), tau))
               for d in range(pred.n_draws)]
        return np.array([[e for e, _ in out]]), np.array([[t for _, t in out]])
    pm, pf = score_rates(pred, weights, tau)
    return _eer_rows(pm, pf, tau)


class _DrawView:
    """Draw ``d`` of a :class:`~scoremix.predictive.layer.Predictive` as a one-draw object with
    what :func:`score_rates` reads (posterior fits: one draw at a time bounds memory)."""

    def __init__(self, pred: Any, d: int) -> None:
        self.mean, self.sd = pred.mean[d:d + 1], pred.sd[d:d + 1]
        self.positive, self.stratum, self.axis, self.score = pred.positive, pred.stratum, pred.axis, pred.score
        self.n_draws = 1


#: size of the coarse threshold subset of :func:`_refined_eer`
_COARSE = 1024


def _refined_eer(pred: Any, W: np.ndarray, tau: np.ndarray) -> tuple[float, float]:
    r"""Exact ROCCH EER over all thresholds ``tau`` from a coarse subset, refined where needed.

    The ROCCH EER is :math:`e = \max_w \min_k [w P_{miss,k} + (1-w) P_{fa,k}]`.  On the coarse
    subset the hull's crossing segment gives ``e`` and the supporting weight ``w``.  Between two
    consecutive coarse thresholds :math:`t_j < t_{j+1}` every finer point has
    :math:`P_{miss} \ge P_{miss}(t_j)` and :math:`P_{fa} \ge P_{fa}(t_{j+1})` (the rates are
    monotone), so none can lie below the supporting line when
    :math:`w P_{miss}(t_j) + (1-w) P_{fa}(t_{j+1}) \ge e`; those gaps are final.  The other gaps'
    thresholds are added and the step repeated until every gap is final: the result is the EER
    over all thresholds (adding points can only lower the hull, and no remaining point lies
    below the final supporting line)."""
    n = tau.size
    have = np.zeros(n, bool)
    have[np.unique(np.round(np.linspace(0, n - 1, _COARSE)).astype(np.int64))] = True
    pm_all = np.full(n, np.nan)
    pf_all = np.full(n, np.nan)
    new = have.copy()
    for _ in range(64):
        idx = np.flatnonzero(new)
        if idx.size:
            pm, pf = score_rates(pred, W, tau[idx])
            pm_all[idx], pf_all[idx] = pm[0, 0], pf[0, 0]
        sel = np.flatnonzero(have)
        e, k, _ = hull_eer(pf_all[sel], pm_all[sel])
        if not np.isfinite(e):
            return float("nan"), float("nan")
        w = _support_weight(pf_all[sel], pm_all[sel], e)
        # gap j between sel[j] and sel[j+1]: the lowest line value a finer point could reach
        low = w * pm_all[sel[:-1]] + (1.0 - w) * pf_all[sel[1:]]
        open_gaps = np.flatnonzero((low < e - 1e-15) & (np.diff(sel) > 1))
        if open_gaps.size == 0:
            thr = np.concatenate(([-np.inf], tau[sel], [np.inf]))
            return float(e), float(thr[k + 1])
        new = np.zeros(n, bool)
        for j in open_gaps:
            a, b = sel[j] + 1, sel[j + 1]
            step = max(1, (b - a) // 32)          # subdivide large gaps, take small ones whole
            new[a:b:step] = True
        new &= ~have
        have |= new
    pm, pf = score_rates(pred, W, tau)             # pragma: no cover - safety net
    e, k, _ = hull_eer(pf[0, 0], pm[0, 0])
    return float(e), float(np.concatenate(([-np.inf], tau, [np.inf]))[k + 1])


def _support_weight(pfa: np.ndarray, pmiss: np.ndarray, e: float) -> float:
    """A weight ``w`` whose line ``w·Pmiss + (1-w)·Pfa = e`` supports the hull of the points
    (accept-all and reject-all added) at its crossing with the diagonal: from the hull segment
    that contains the crossing point ``(e, e)``."""
    pf = np.concatenate(([1.0], pfa, [0.0]))[::-1]
    pm = np.concatenate(([0.0], pmiss, [1.0]))[::-1]
    h = _lower_hull(pf, pm)
    x, y = pf[h], pm[h]
    d = y - x
    k = int(np.flatnonzero(d <= 0)[0])
    k = max(k, 1)
    dx, dy = x[k] - x[k - 1], y[k] - y[k - 1]
    if dx - dy <= 0:
        return 0.5
    return float(np.clip(dx / (dx - dy), 0.0, 1.0))


def W_row(weights: np.ndarray, g: int) -> np.ndarray:
    """Row ``g`` of a population weight matrix as a one-row matrix."""
    return np.atleast_2d(np.asarray(weights, dtype=np.float64))[g:g + 1]


def _cost_weights(p_target: float, c_miss: float, c_fa: float, normalize: bool) -> tuple[float, float]:
    if not 0.0 < p_target < 1.0:
        raise PredictiveError(f"p_target must be in (0, 1), got {p_target}")
    if not (c_miss > 0 and c_fa > 0):
        raise PredictiveError(f"c_miss and c_fa must be positive, got {c_miss}, {c_fa}")
    a, b = c_miss * p_target, c_fa * (1.0 - p_target)
    if normalize:
        m = min(a, b)
        return a / m, b / m
    return a, b


def _refined_min_cost(pred: Any, W: np.ndarray, tau: np.ndarray, a: float, b: float) -> tuple[float, float]:
    r"""Exact :math:`\min_k [a P_{miss}(t_k) + b P_{fa}(t_k)]` over all thresholds ``tau`` and
    reject-all (cost ``a``), for one population and draw, from a coarse subset: between coarse
    thresholds :math:`t_j < t_{j+1}` no finer threshold can cost less than
    :math:`a P_{miss}(t_j) + b P_{fa}(t_{j+1})`, so only gaps whose bound is below the current
    minimum are refined.  Returns ``(min, argmin threshold)`` (``+inf``: reject all)."""
    n = tau.size
    have = np.zeros(n, bool)
    have[np.unique(np.round(np.linspace(0, n - 1, min(n, _COARSE))).astype(np.int64))] = True
    pm_all = np.full(n, np.nan)
    pf_all = np.full(n, np.nan)
    new = have.copy()
    for _ in range(64):
        idx = np.flatnonzero(new)
        if idx.size:
            pm, pf = score_rates(pred, W, tau[idx])
            pm_all[idx], pf_all[idx] = pm[0, 0], pf[0, 0]
        sel = np.flatnonzero(have)
        cost = a * pm_all[sel] + b * pf_all[sel]
        if not np.isfinite(cost).all():
            return float("nan"), float("nan")
        k = int(np.argmin(cost))
        best, thr = (float(cost[k]), float(tau[sel[k]])) if cost[k] <= a else (a, np.inf)
        low = a * pm_all[sel[:-1]] + b * pf_all[sel[1:]]
        gaps = np.flatnonzero((low < best - 1e-15) & (np.diff(sel) > 1))
        if gaps.size == 0:
            return best, thr
        new = np.zeros(n, bool)
        for j in gaps:
            lo_, hi_ = sel[j] + 1, sel[j + 1]
            new[lo_:hi_:max(1, (hi_ - lo_) // 32)] = True
        new &= ~have
        have |= new
    pm, pf = score_rates(pred, W, tau)             # pragma: no cover - safety net
    c = np.append(a * pm[0, 0] + b * pf[0, 0], a)
    k = int(np.argmin(c))
    return float(c[k]), float(np.append(tau, np.inf)[k])


def _exact_measures(pred: Any, weights: np.ndarray, a: float, b: float, members: list[np.ndarray] | None
                    ) -> dict[str, np.ndarray]:
    """:func:`attainable_measures` for a point fit, exact over every distinct score (each
    population's minimum and EER by refinement; rates at τ* directly)."""
    W = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    P = W.shape[0]
    mins, taus, eer = np.full((P, 1), np.nan), np.full((P, 1), np.nan), np.full((P, 1), np.nan)
    sc = np.asarray(pred.score, dtype=np.float64)   # s7heldout: everyone's scores, for every subgroup
    tg = attainable_scores(sc, 2 ** 62) if sc.size and not np.isnan(sc).all() else None
    for g in range(P):
        empty = members is not None and g > 0 and np.asarray(members[g]).size == 0
        if tg is None or empty or not (W[g] > 0).any():
            continue
        Wg = W[g:g + 1]
        has = [(Wg[0] > 0) & pred.positive, (Wg[0] > 0) & ~pred.positive]
        if not (has[0].any() and has[1].any()):
            continue
        mins[g, 0], taus[g, 0] = _refined_min_cost(pred, Wg, tg, a, b)
        e, _ = attainable_eer(pred, Wg, scores=sc)   # the same thresholds tg
        eer[g, 0] = e[0, 0]
    t0 = taus[0, 0]
    if np.isposinf(t0):
        # reject all (also the +inf scores): miss 1, false alarm 0 wherever the class is present
        pm_at = np.where((W * pred.positive[None, :]).sum(axis=1) > 0, 1.0, np.nan)[:, None]
        pf_at = np.where((W * ~pred.positive[None, :]).sum(axis=1) > 0, 0.0, np.nan)[:, None]
    else:
        pm, pf = score_rates(pred, W, np.array([t0]))
        pm_at, pf_at = pm[:, :, 0], pf[:, :, 0]
    return _assemble(mins, taus, eer, pm_at, pf_at, a, b)


def _assemble(mins: np.ndarray, taus: np.ndarray, eer: np.ndarray, pm_at: np.ndarray, pf_at: np.ndarray,
              a: float, b: float) -> dict[str, np.ndarray]:
    with np.errstate(invalid="ignore", divide="ignore"):
        dcf_at = a * pm_at + b * pf_at
        out = {"all_min_dcf": mins[0], "all_threshold": taus[0], "all_fpr": pf_at[0], "all_fnr": pm_at[0],
               "all_eer": eer[0], "dcf_at_overall": dcf_at[1:], "min_dcf": mins[1:], "threshold_own": taus[1:],
               "ratio_overall": dcf_at[1:] / mins[0][None, :], "ratio_own": mins[1:] / dcf_at[1:],
               "fpr": pf_at[1:], "fnr": pm_at[1:], "fpr_ratio": pf_at[1:] / pf_at[0][None, :],
               "fnr_ratio": pm_at[1:] / pm_at[0][None, :], "eer": eer[1:]}
    r = out["ratio_overall"]
    out["fairness_index"] = np.where(r > 1, r, 0.0).sum(axis=0)
    return out


def attainable_measures(pred: Any, weights: np.ndarray, p_target: float = 0.05, c_miss: float = 1.0,
                        c_fa: float = 1.0, normalize: bool = False, max_thresholds: int | None = None,
                        members: list[np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """SVEva measures of populations ``weights`` ``(1 + G, m)`` (row 0: everyone) at attainable
    score thresholds, with the keys of
    :func:`scoremix.fairness.model_measures.gaussian_mixture_measures`; thresholds are on the
    score scale.

    ``τ*`` (``all_threshold``) is the observed score (or ±∞) minimising the overall cost;
    ``min_dcf`` / ``threshold_own`` of a subgroup its own minimum over the same thresholds;
    ``fpr``/``fnr`` the subgroup's model rates at ``τ*``; ``eer`` the ROCCH EER.

    ``members``: the trial indices of every row (row 0 all trials); a row without members gets
    NaN.  Every row's EER and minimum DCF are taken over *all* the evaluated trials' distinct
    scores: a detector's threshold is not limited to a subgroup's own scores, and a model that
    reproduces a subgroup's distribution has no mass between its scores, so the extra thresholds
    leave the empirical value exact (s7heldout; until session 7 a subgroup used only its own
    scores, which made its model values coarser and worse predictors of held-out data).
    """
    a, b = _cost_weights(p_target, c_miss, c_fa, normalize)
    if pred.n_draws == 1 and max_thresholds is None:
        return _exact_measures(pred, weights, a, b, members)
    tau = attainable_scores(pred.score, max_thresholds)
    pm, pf = score_rates(pred, weights, tau)                # (P, D, T)
    P, D, _ = pm.shape
    ones, zeros = np.ones((P, D, 1)), np.zeros((P, D, 1))
    pm_x = np.concatenate((pm, ones), axis=2)               # + reject all (τ = +inf)
    pf_x = np.concatenate((pf, zeros), axis=2)
    thr = np.append(tau, np.inf)
    cost = a * pm_x + b * pf_x
    with np.errstate(invalid="ignore"):
        k = np.argmin(np.where(np.isnan(cost), np.inf, cost), axis=2)   # (P, D)
    mins = np.take_along_axis(cost, k[..., None], 2)[..., 0]
    taus = thr[k]
    taus = np.where(np.isnan(mins), np.nan, taus)
    eer, _ = _eer_rows(pm, pf, tau)
    if members is not None:   # s7heldout: empty rows only (thresholds are everyone's scores)
        for g in range(1, P):
            if np.asarray(members[g]).size == 0:
                mins[g], taus[g], eer[g] = np.nan, np.nan, np.nan
    k0 = k[0]                                               # (D,) overall minimiser
    pm_at = np.take_along_axis(pm_x, np.broadcast_to(k0[None, :, None], (P, D, 1)), 2)[..., 0]
    pf_at = np.take_along_axis(pf_x, np.broadcast_to(k0[None, :, None], (P, D, 1)), 2)[..., 0]
    return _assemble(mins, taus, eer, pm_at, pf_at, a, b)
