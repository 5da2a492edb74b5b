r"""The common threshold axis of a fit: one detector threshold → one latent threshold per stratum.

A detector has **one** score threshold τ (accept ``s ≥ τ``).  In a model with a single latent
scale (Gaussian fit: ``h`` = identity; shared transformation model: one increasing ``h``)
τ maps to one latent threshold ``t = h⁻(τ)`` and every error rate is a function of ``t``:
the axis *is* the latent scale (:class:`ThresholdAxis`).  In a stratified transformation
model (``transform="monotone-by-class"``) stratum ``s`` has its own ``h_s``, so τ maps to
latent thresholds :math:`t_s = h_s^-(\tau)` that differ by stratum, and trial ``i`` of
stratum ``s(i)`` has

.. math::

    P(S_i < \tau) = \Phi\big((h^-_{s(i)}(\tau) - m_i)/\sigma_i\big).

:class:`StrataAxis` parametrises the score thresholds by one real coordinate ``u`` on which
every :math:`t_s(u)` is continuous and non-decreasing, so that FNR(u) − FPR(u) is monotone
and EER / minimum DCF / DET curves are found on ``u`` exactly as on the latent scale.

Construction (rank based).  The knots are the distinct scores seen in fitting, pooled over
strata, :math:`v_0 < \dots < v_{K-1}`, plus a sentinel :math:`v_K` above all of them
(reject everything).  At knot ``k`` the exact latent thresholds are
:math:`T_{sk} = h_s^-(v_k)` (``transform.latent_threshold(v_k, s)``; :math:`T_{s0}=-\infty`,
:math:`T_{sK}=+\infty`).  The knots' coordinates advance by the largest latent step of any
stratum,

.. math::

    U_{k+1} - U_k = \max_s\,(T_{s,k+1} - T_{sk})\quad(\text{strata finite at both knots}),
    \qquad U_0=-\infty,\ U_K=+\infty,

(the median step where only strata entering from :math:`-\infty` or leaving to
:math:`+\infty` move), strictly increasing — between two knots the stratum owning
:math:`v_k` moves — and in latent units: on a segment where it is finite at both ends no
stratum's latent threshold moves faster than ``u``, so an even grid in ``u`` is at least as
fine there as an even latent grid.  Between knots each :math:`t_s` is linear in ``u``; a stratum that enters from
:math:`-\infty` (leaves to :math:`+\infty`) on a segment follows
:math:`T_{s,k+1} + \log f` (:math:`T_{sk} - \log(1-f)`), ``f`` the fraction of the segment;
on the two open end segments :math:`t_s = T_{s1} + (u - U_1)` and
:math:`t_s = T_{s,K-1} + (u - U_{K-1})`.  At the knots the rates are the exact step rates of
the model; between them they interpolate continuously, all strata with the same fraction
``f`` of the segment — so the EER and the minimum DCF do not depend on the choice of the
``U_k`` (they set only the spacing of search grids).  Everything depends on the scores
only through their ranks.  When all strata share one transform, :math:`t_s(u) = t(u)` is
one continuous increasing bijection of the real line, so the EER, the minimum DCF and every
rate at the optimum are *exactly* those of the shared model on its latent scale (a monotone
change of variable leaves the root and the minimum unchanged).

Score thresholds are reported as for the shared transform (``h⁻¹``, which maps the latent
edge :math:`h^-(v_k)` to the fitted score :math:`v_{k-1}` below it): ``u`` in segment
:math:`[U_k, U_{k+1}]` is reported as :math:`v_{k-1} + f\,(v_k - v_{k-1})`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from scoremix.predictive.mixture import PredictiveError

__all__ = ["ThresholdAxis", "StrataAxis", "threshold_axis", "is_stratified_transform"]


def is_stratified_transform(transform: Any) -> bool:
    """``True`` for a transform with one map per stratum (``levels``, ``column`` and a
    ``stratum(level)`` accessor, e.g. :class:`scoremix.transform.StratifiedTransform`)."""
    return (transform is not None and callable(getattr(transform, "stratum", None))
            and getattr(transform, "levels", None) is not None and hasattr(transform, "column"))


class ThresholdAxis:
    """The latent scale itself: ``u = t`` (Gaussian fits and the shared transform).

    Attributes
    ----------
    transform:
        the fit's score → latent map (``None``: identity).
    identity:
        ``True``: ``u`` is the latent threshold of every trial.
    n_strata:
        number of strata (1).
    """

    identity = True
    column: str | None = None

    def __init__(self, transform: Any = None) -> None:
        self.transform = transform
        self.levels: list[Any] = [None]

    @property
    def n_strata(self) -> int:
        return len(self.levels)

    def latent(self, u: Any) -> np.ndarray:
        """``(S, *u.shape)`` latent thresholds of axis points ``u``."""
        return np.asarray(u, dtype=np.float64)[None]

    def from_score(self, tau: Any) -> np.ndarray:
        """``(S, *tau.shape)`` latent thresholds of score thresholds τ (accept ``s ≥ τ``):
        ``transform.latent_threshold(τ)`` (the left limit :math:`h^-(\\tau)`), τ itself
        for a Gaussian fit."""
        tau = np.asarray(tau, dtype=np.float64)
        tr = self.transform
        if tr is None:
            return tau[None]
        for name in ("latent_threshold", "lower"):
            f = getattr(tr, name, None)
            if callable(f):
                return np.asarray(f(tau), dtype=np.float64)[None]
        return np.asarray(tr(tau), dtype=np.float64)[None]

    def to_score(self, u: Any) -> np.ndarray:
        """Score thresholds of axis points (``h⁻¹``; identity for a Gaussian fit)."""
        u = np.asarray(u, dtype=np.float64)
        return u if self.transform is None else np.asarray(self.transform.inverse(u), dtype=np.float64)

    def bounds(self, lo: Any, hi: Any) -> tuple[np.ndarray, np.ndarray]:
        """Axis points at which every stratum's latent threshold is ≤ ``lo`` / ≥ ``hi``."""
        return np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)

    def codes(self, strata: Any, n: int) -> np.ndarray:
        """``(n,)`` stratum index of every trial (all 0 here)."""
        return np.zeros(n, dtype=np.int64)


class StrataAxis(ThresholdAxis):
    """The common coordinate ``u`` of a stratified transform (module docstring).

    Parameters
    ----------
    transform:
        a stratified transform: ``levels``, ``column``, ``stratum(level)`` (a transform with
        the fitted distinct scores ``values``) and ``latent_threshold(tau, level)``.
    """

    identity = False

    def __init__(self, transform: Any) -> None:
        super().__init__(transform)
        self.levels = list(transform.levels)
        self.column = getattr(transform, "column", None)
        vals = np.unique(np.concatenate([np.asarray(transform.stratum(lv).values, dtype=np.float64)
                                         for lv in self.levels]))
        self.values = vals                                           # v_0 .. v_{K-1}
        K = vals.size
        T = np.empty((len(self.levels), K + 1))
        for s, lv in enumerate(self.levels):
            T[s, :K] = np.asarray(transform.latent_threshold(vals, lv), dtype=np.float64)
        T[:, K] = np.inf
        T[:, 0] = -np.inf                                            # nothing lies below v_0
        self.T = T
        self.U = _knot_coordinates(T)
        self._pos = {lv: k for k, lv in enumerate(self.levels)}
        self._pos_str = {str(lv): k for k, lv in enumerate(self.levels)}

    # ------------------------------------------------------------------ u → latent
    def _segment(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Segment index ``j`` (``U_j ≤ u ≤ U_{j+1}``) and the fraction ``f`` of ``u`` in it
        (NaN on the two open end segments)."""
        U = self.U
        j = np.clip(np.searchsorted(U, u, side="right") - 1, 0, U.size - 2)
        lo, hi = U[j], U[j + 1]
        with np.errstate(invalid="ignore", divide="ignore"):
            f = np.where(np.isfinite(lo) & np.isfinite(hi), (u - lo) / (hi - lo), np.nan)
        return j, np.clip(f, 0.0, 1.0)

    def latent(self, u: Any) -> np.ndarray:
        u = np.asarray(u, dtype=np.float64)
        j, f = self._segment(u)
        U, T = self.U, self.T
        lo_t, hi_t = T[:, j], T[:, j + 1]                            # (S, *u.shape)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            lin = lo_t + f * (hi_t - lo_t)
            enter = hi_t + np.log(f)                                 # from −∞
            leave = lo_t - np.log1p(-f)                              # to +∞
            both = np.log(f) - np.log1p(-f)
            out = np.where(np.isfinite(lo_t) & np.isfinite(hi_t), lin,
                           np.where(np.isneginf(lo_t) & np.isfinite(hi_t), enter,
                                    np.where(np.isfinite(lo_t) & np.isposinf(hi_t), leave,
                                             np.where(np.isneginf(lo_t) & np.isposinf(hi_t), both,
                                                      lo_t))))
            first = j == 0                                           # (−∞, U_1]
            last = j == U.size - 2                                   # [U_{K-1}, +∞)
            out = np.where(first, hi_t + (u - U[1]), out)
            out = np.where(last & ~first, lo_t + (u - U[-2]), out)
        out = np.where(np.isneginf(u), -np.inf, np.where(np.isposinf(u), np.inf, out))
        return out

    def position(self, t: Any, s: int) -> np.ndarray:
        """Axis point at which stratum ``s``'s latent threshold reaches ``t`` (inverse of
        :meth:`latent`; the smallest such point on flat stretches)."""
        t = np.asarray(t, dtype=np.float64)
        Ts, U = self.T[s], self.U
        j = np.clip(np.searchsorted(Ts, t, side="left") - 1, 0, U.size - 2)
        lo_t, hi_t, lo_u, hi_u = Ts[j], Ts[j + 1], U[j], U[j + 1]
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            f = np.where(np.isfinite(lo_t) & np.isfinite(hi_t), (t - lo_t) / (hi_t - lo_t),
                         np.where(np.isneginf(lo_t) & np.isfinite(hi_t), np.exp(t - hi_t),
                                  np.where(np.isfinite(lo_t) & np.isposinf(hi_t), -np.expm1(-(t - lo_t)),
                                           1.0 / (1.0 + np.exp(-t)))))
            out = lo_u + np.clip(f, 0.0, 1.0) * (hi_u - lo_u)
            out = np.where(j == 0, hi_u + (t - hi_t), out)
            out = np.where((j == U.size - 2) & (j != 0), lo_u + (t - lo_t), out)
        return np.where(np.isneginf(t), -np.inf, np.where(np.isposinf(t), np.inf, out))

    def bounds(self, lo: Any, hi: Any) -> tuple[np.ndarray, np.ndarray]:
        lo = np.asarray(lo, dtype=np.float64)
        hi = np.asarray(hi, dtype=np.float64)
        ulo = np.min([self.position(lo, s) for s in range(self.n_strata)], axis=0)
        uhi = np.max([self.position(hi, s) for s in range(self.n_strata)], axis=0)
        return ulo, uhi

    # ------------------------------------------------------------------ scores
    def from_score(self, tau: Any) -> np.ndarray:
        tau = np.asarray(tau, dtype=np.float64)
        return np.stack([np.asarray(self.transform.latent_threshold(tau, lv), dtype=np.float64)
                         for lv in self.levels])

    def to_score(self, u: Any) -> np.ndarray:
        u = np.asarray(u, dtype=np.float64)
        j, f = self._segment(u)
        v = self.values
        a = v[np.clip(j - 1, 0, v.size - 1)]
        b = v[np.clip(j, 0, v.size - 1)]
        last = j == self.U.size - 2
        with np.errstate(invalid="ignore", over="ignore"):
            f = np.where(last, -np.expm1(-(u - self.U[-2])), f)
            mid = a + f * (b - a)
        out = np.where(np.isfinite(a) & np.isfinite(b), mid, np.where(f < 1.0, a, b))
        out = np.where(j == 0, v[0], out)
        return out

    def codes(self, strata: Any, n: int) -> np.ndarray:
        """``(n,)`` index into :attr:`levels` of every trial's stratum label; unknown levels
        raise :class:`~scoremix.predictive.mixture.PredictiveError` naming them."""
        if strata is None:
            raise PredictiveError(f"the trials' strata (column {self.column!r}) are needed for a fit with one "
                                  "transform per stratum (transform='monotone-by-class')")
        st = pd.Series(np.asarray(strata, dtype=object))
        if len(st) != n:
            raise PredictiveError(f"{len(st)} strata given for {n} trials")
        out = st.map(self._pos)
        miss = out.isna()
        if miss.any():
            out[miss] = st[miss].astype(str).map(self._pos_str)
        miss = out.isna()
        if miss.any():
            raise PredictiveError(f"stratum {st[miss].iloc[0]!r} (column {self.column!r}) was not seen in fitting; "
                                  f"known strata: {self.levels}")
        return out.to_numpy(dtype=np.int64)


def _knot_coordinates(T: np.ndarray) -> np.ndarray:
    """``U_k`` of the knots (module docstring): ``U_0 = −∞``, ``U_K = +∞``,
    ``U_1 = max_s T_s1`` (finite ones) and ``U_{k+1} − U_k`` the largest latent step of a
    stratum that is finite at both knots, or — at a step where only strata enter from −∞ or
    leave to +∞ — the median of those steps.  Strictly increasing: between two knots the
    stratum owning the lower one moves (its edges are strictly increasing)."""
    K1 = T.shape[1]
    with np.errstate(invalid="ignore"):
        step = np.diff(T[:, 1:K1 - 1], axis=1)                      # (S, K-2), knots 1..K-1
    step = np.where(np.isfinite(step), step, -np.inf).max(axis=0)
    pos = step[np.isfinite(step) & (step > 0)]
    fill = float(np.median(pos)) if pos.size else 1.0
    step = np.where(np.isfinite(step) & (step > 0), step, fill)
    first = T[:, 1]
    u1 = float(np.max(first[np.isfinite(first)])) if np.isfinite(first).any() else 0.0
    return np.concatenate([[-np.inf], u1 + np.concatenate([[0.0], np.cumsum(step)]), [np.inf]])


def threshold_axis(transform: Any) -> ThresholdAxis:
    """The threshold axis of a fit's transform: :class:`StrataAxis` for a stratified
    transform, else the latent scale (:class:`ThresholdAxis`)."""
    return StrataAxis(transform) if is_stratified_transform(transform) else ThresholdAxis(transform)

