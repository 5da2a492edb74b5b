r"""Exact detection metrics: DET curve, EER variants, DCF, minDCF, Cllr.

Conventions (shared by all of scoremix): trial :math:`i` has a score :math:`s_i` (higher
= more positive) and a class :math:`y_i \in \{0, 1\}` (1 = target / bona fide / genuine /
real). A trial is *accepted* at threshold :math:`\tau` when :math:`s_i \ge \tau`, so

.. math::

    P_\text{miss}(\tau) = \frac{\#\{i: y_i = 1,\ s_i < \tau\}}{N_1}, \qquad
    P_\text{fa}(\tau) = \frac{\#\{i: y_i = 0,\ s_i \ge \tau\}}{N_0}.

Every function sorts the scores once (:math:`O(N \log N)`) and evaluates all distinct
thresholds with cumulative counts; no value is approximated. Error rates are fractions
in [0, 1].
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
from scipy.optimize import isotonic_regression
from scipy.stats import norm

from scoremix._deprecate import renamed_kwargs, warn_renamed
from scoremix.adapters import adapter_for
from scoremix.trials import NonFiniteScoreError, SingleClassError, TrialTableError, label_to_binary

__all__ = [
    "hull_eer",
    "MetricInputError",
    "BootstrapSizeError",
    "min_boot",
    "ScoreDirectionWarning",
    "MetricValue",
    "WeightedSpec",
    "CostSpec",
    "register_interval_provider",
    "auc",
    "check_direction",
    "DetCurve",
    "MinDCF",
    "Rates",
    "DetTicks",
    "EER_METHODS",
    "det_curve",
    "probit",
    "det_axis_ticks",
    "rates_at",
    "eer",
    "eer_from_counts",
    "range_candidates",
    "eer_threshold",
    "dcf",
    "min_dcf",
    "min_dcf_from_counts",
    "act_dcf",
    "bayes_threshold",
    "cllr",
    "min_cllr",
]

EerMethod = Literal["rocch", "interp", "asvspoof", "voxceleb"]
EER_METHODS: tuple[str, ...] = ("rocch", "interp", "asvspoof", "voxceleb")


class MetricInputError(TrialTableError):
    """Scores / labels / cost parameters that a metric cannot use."""


class BootstrapSizeError(MetricInputError):
    """Too few bootstrap replicates for an interval at the requested level: each tail of a
    ``ci`` interval needs at least one replicate, so ``n_boot ≥ ⌈2/(1 − ci)⌉`` (40 at 95 %)."""


def min_boot(ci: float) -> int:
    """Fewest replicates for a ``ci`` bootstrap interval: ``⌈2/(1 − ci)⌉`` (each tail of
    ``(1 − ci)/2`` holds at least one replicate)."""
    return int(np.ceil(2.0 / (1.0 - ci) - 1e-9))


class ScoreDirectionWarning(UserWarning):
    """The positive class scores *lower* than the negative class (AUC < 0.5): the scores
    probably run the other way (lower = positive), and every error rate computed under
    accept = score >= threshold is then meaningless."""


# ----------------------------------------------------------------------------- results
class MetricValue(float):
    """A metric's value: a float (it compares, formats and computes like ``value``) that
    carries its extras as attributes.  Every metric of scoremix returns one (or a subclass:
    :class:`MinDCF`, :class:`scoremix.resampling.Estimate`); arithmetic gives plain floats."""

    @property
    def value(self) -> float:
        """The point value as a plain float (``float(self)``)."""
        return float(self)


# ----------------------------------------------------------------------------- intervals (registry)
class WeightedSpec(NamedTuple):
    """Which built-in metric a bootstrap replicates by weighted counting: ``kind`` (``"eer"``,
    ``"min_dcf"``, ``"dcf"``, ``"cllr"``), the score ``sign`` (-1 for ``higher_is_positive=False``)
    and the metric's parameters (see :class:`scoremix.resampling.WeightedReplicates`)."""

    kind: str
    sign: float = 1.0
    params: dict[str, Any] = {}


#: The speaker-cluster bootstrap behind ``n_boot > 0``.  It lives in the resampling layer
#: above this one (:func:`scoremix.resampling.cluster_bootstrap`), which installs it here when
#: it is imported (``import scoremix`` does), so that the point metrics import nothing above them.
_INTERVAL_PROVIDER: dict[str, Any] = {}


def register_interval_provider(bootstrap: Any) -> None:
    """Install ``bootstrap(stat, scores, labels, *, speaker, n_boot, seed, level, minimum,
    weighted) -> Estimate`` as the interval of every metric called with ``n_boot > 0``."""
    _INTERVAL_PROVIDER["bootstrap"] = bootstrap


def _bootstrap(stat: Any, scores: Any, labels: Any, **kw: Any) -> Any:
    fn = _INTERVAL_PROVIDER.get("bootstrap")
    if fn is None:  # pragma: no cover - import scoremix installs it
        raise MetricInputError("n_boot > 0 needs the resampling layer: import scoremix.resampling first")
    return fn(stat, scores, labels, **kw)


def _quietly(stat: Any) -> Any:
    """``stat`` without :class:`ScoreDirectionWarning` (bootstrap replicates repeat the point's check)."""
    def run(a: Any, b: Any) -> float:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ScoreDirectionWarning)
            return stat(a, b)

    return run


def _maybe_interval(value: float, stat: Any, scores: Any, labels: Any, n_boot: int, speaker: Any,
                    seed: Any, ci: float, weighted: Any = None) -> float:
    """``value`` unchanged without a bootstrap, else an :class:`Estimate` of ``stat``."""
    if not n_boot:
        if speaker is not None:
            raise MetricInputError("speaker= is only used with n_boot > 0 (the speaker-cluster bootstrap)")
        return value
    est = _bootstrap(stat, scores, labels, speaker=speaker, n_boot=n_boot, seed=seed, level=ci,
                     weighted=weighted)
    return type(est)(value, est.lo, est.hi, est.level, est.n_boot, est.n_clusters, est.interval)


# ----------------------------------------------------------------------------- inputs
def _as_scores(scores: Any) -> np.ndarray:
    """One-dimensional float64 scores; strings and 2-D arrays are named errors."""
    try:
        s = np.asarray(scores, dtype=np.float64)
    except (ValueError, TypeError):
        import pandas as pd

        raw = np.asarray(scores, dtype=object)
        if raw.ndim != 1:
            raise MetricInputError(f"scores must be a one-dimensional array of numbers (one per trial), "
                                   f"got shape {raw.shape}") from None
        num = pd.to_numeric(pd.Series(raw), errors="coerce")
        bad = np.flatnonzero(num.isna().to_numpy() & pd.Series(raw).notna().to_numpy())
        first = int(bad[0]) if bad.size else 0
        raise MetricInputError(
            f"scores must be numbers: {bad.size} value(s) are not, the first at position {first} "
            f"({raw[first]!r}); convert the score column with pd.to_numeric or pick the numeric column"
        ) from None
    if s.ndim != 1:
        hint = " (one column: pass scores.ravel())" if s.ndim == 2 and 1 in s.shape else ""
        raise MetricInputError(f"scores must be one-dimensional (one score per trial), got an array of "
                               f"shape {s.shape}{hint}")
    return s


def finite_order(scores: Any) -> tuple[Any, Any]:
    """Scores with ``±inf`` replaced by finite values just beyond every finite score (``+inf`` →
    the next float above the largest finite score, ``-inf`` → the next float below the smallest;
    ties stay ties), and the map of thresholds back (those two values → ``±inf``).

    Error rates at thresholds depend on the scores only through their order, so every rate,
    EER and DCF is unchanged; this lets the metrics accept saturated scores (logits of
    probabilities 0 and 1).  Dask input and scores without ``±inf`` are returned as given."""
    if adapter_for("metric_candidates", scores) is not None:  # a lazy (Dask) column: left to its adapter
        return scores, (lambda t: t)
    try:
        s = np.asarray(scores, dtype=np.float64)
    except (ValueError, TypeError):
        return scores, (lambda t: t)
    if s.ndim != 1 or not np.isinf(s).any():
        return scores, (lambda t: t)
    fin = np.isfinite(s)
    lo, hi = (float(s[fin].min()), float(s[fin].max())) if fin.any() else (0.0, 0.0)
    up, down = float(np.nextafter(hi, np.inf)), float(np.nextafter(lo, -np.inf))
    out = s.copy()
    out[np.isposinf(s)] = up
    out[np.isneginf(s)] = down

    def back(t: Any) -> Any:
        a = np.asarray(t, dtype=np.float64)
        r = np.where(a == up, np.inf, np.where(a == down, -np.inf, a))
        return float(r) if r.ndim == 0 else r

    return out, back


def _prepare(scores: Any, labels: Any, allow_posinf: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Validated ``(scores float64, labels int8)``; both classes must be present.

    NaN is always an error; ``+inf`` too unless ``allow_posinf`` (no threshold can
    reject a score of ``+inf`` under accept ``s >= τ``, so curves would lack their
    reject-all end). Scores must be numbers in a one-dimensional array.
    """
    s = _as_scores(scores)
    y = label_to_binary(labels, column="labels")
    if s.shape[0] != y.shape[0]:
        raise MetricInputError(f"scores has {s.shape[0]} values but labels has {y.shape[0]}")
    if s.shape[0] == 0:
        raise MetricInputError("no trials: scores and labels are empty")
    bad = np.isnan(s)
    if bad.any():
        rows = np.flatnonzero(bad)[:5].tolist()
        raise NonFiniteScoreError(f"scores has {int(bad.sum())} NaN value(s) at position(s) {rows}")
    if not allow_posinf:
        bad = s == np.inf
        if bad.any():
            rows = np.flatnonzero(bad)[:5].tolist()
            raise NonFiniteScoreError(
                f"scores has {int(bad.sum())} +inf value(s) at position(s) {rows}; no threshold "
                f"rejects +inf under accept s >= threshold, so this metric needs finite (or "
                f"-inf) scores; clip them to a large finite value"
            )
    n_pos = int(np.count_nonzero(y))
    if n_pos == 0 or n_pos == y.shape[0]:
        present = "negative" if n_pos == 0 else "positive"
        raise SingleClassError(
            f"only {present} trials ({y.shape[0]}) were given; the metric needs both classes"
        )
    return s, y


class _Points(NamedTuple):
    """Collapsed operating points at every distinct score, ascending.

    ``pos_below[k] = #{pos: s < thresholds[k]}``, ``neg_below[k] = #{neg: s < thresholds[k]}``.
    """

    thresholds: np.ndarray
    pos_below: np.ndarray
    neg_below: np.ndarray
    n_pos: int
    n_neg: int


def _points(s: np.ndarray, y: np.ndarray) -> _Points:
    """Collapse the trials into operating points with one O(N log N) sort.

    Each class is sorted on its own, then the two sorted runs are merged by a stable
    argsort (timsort finds the two runs and merges them in linear time); a merged
    position ``< N_1`` is a positive trial.
    """
    pos = np.sort(s[y == 1])
    neg = np.sort(s[y == 0])
    merged = np.concatenate((pos, neg))
    order = np.argsort(merged, kind="stable")
    ss = merged[order]
    first = np.flatnonzero(np.concatenate(([True], ss[1:] != ss[:-1])))
    cum = np.concatenate(([0], np.cumsum(order < pos.shape[0], dtype=np.int64)))
    pos_below = cum[first]
    return _Points(ss[first], pos_below, first - pos_below, int(pos.shape[0]), int(neg.shape[0]))


def _with_reject_all(p: _Points) -> _Points:
    """Append the reject-all point at τ = +inf (scores must be below +inf)."""
    return _Points(
        np.append(p.thresholds, np.inf),
        np.append(p.pos_below, p.n_pos),
        np.append(p.neg_below, p.n_neg),
        p.n_pos,
        p.n_neg,
    )


# ----------------------------------------------------------------------------- direction
def _auc(s: np.ndarray, y: np.ndarray) -> float:
    from scipy.stats import rankdata

    r = rankdata(s)  # average ranks: ties count one half
    n1 = int(np.count_nonzero(y))
    n0 = y.shape[0] - n1
    return float((r[y == 1].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def auc(scores: Any, labels: Any) -> float:
    r"""Area under the ROC curve, :math:`P(s^+ > s^-) + \tfrac12 P(s^+ = s^-)` over all
    positive/negative pairs (the Mann–Whitney statistic, from average ranks in
    :math:`O(N \log N)`). 0.5: no separation; below 0.5: positives score lower."""
    s, y = _prepare(scores, labels)
    return _auc(s, y)


def _direction_message(a: float, where: str) -> str:
    return (f"{where}scores look reversed: the positive class scores lower than the negative class "
            f"(AUC = {a:.3f} < 0.5), but accept = score >= threshold assumes higher = positive. If lower "
            f"scores mean positive, pass higher_is_positive=False (or negate the score column, e.g. "
            f"[data] negate in a study); error rates are computed as if higher = positive")


def check_direction(scores: Any, labels: Any, where: str = "", stacklevel: int = 2) -> float:
    """Warn :class:`ScoreDirectionWarning` when AUC < 0.5 (see :func:`auc`); returns the AUC.

    ``where`` prefixes the message (e.g. ``"system LA01: "``)."""
    a = auc(scores, labels)
    if a < 0.5:
        warnings.warn(_direction_message(a, where), ScoreDirectionWarning, stacklevel=stacklevel + 1)
    return a


def _warn_if_reversed(s: np.ndarray, y: np.ndarray, stacklevel: int) -> None:
    """:class:`ScoreDirectionWarning` when the (already oriented) scores give AUC < 0.5."""
    a = _auc(s, y)
    if a < 0.5:
        warnings.warn(_direction_message(a, ""), ScoreDirectionWarning, stacklevel=stacklevel + 1)


# ----------------------------------------------------------------------------- DET curve
@dataclass(frozen=True)
class DetCurve:
    r"""Every distinct operating point of a detector.

    Attributes
    ----------
    thresholds : ndarray
        Ascending: every distinct score, then ``+inf`` (reject all). The first entry
        (the smallest score) accepts every trial.
    p_miss, p_fa : ndarray
        :math:`P_\text{miss}(\tau)` (non-decreasing, 0 → 1) and
        :math:`P_\text{fa}(\tau)` (non-increasing, 1 → 0) at each threshold.
    n_pos, n_neg : int
        Number of positive / negative trials.
    """

    thresholds: np.ndarray
    p_miss: np.ndarray
    p_fa: np.ndarray
    n_pos: int
    n_neg: int

    def __len__(self) -> int:
        return int(self.thresholds.shape[0])


def det_curve(scores: Any, labels: Any) -> DetCurve:
    r"""All operating points :math:`(P_\text{miss}(\tau), P_\text{fa}(\tau))`, ties collapsed.

    Thresholds are the distinct scores :math:`u_1 < \dots < u_K` and :math:`+\infty`; at
    :math:`\tau = u_1` every trial is accepted (:math:`P_\text{miss}=0, P_\text{fa}=1`), at
    :math:`+\infty` none is (:math:`P_\text{miss}=1, P_\text{fa}=0`). Tied scores move
    together, so the curve has only points some threshold can reach. Scores of
    :math:`+\infty` are an error (no threshold could reject them); :math:`-\infty` is fine.

    Parameters
    ----------
    scores : array-like of float
    labels : array-like
        1/0, bool, or anything :func:`scoremix.trials.label_to_binary` accepts.

    Returns
    -------
    DetCurve
    """
    s, y = _prepare(scores, labels, allow_posinf=False)
    p = _with_reject_all(_points(s, y))
    return DetCurve(
        thresholds=p.thresholds,
        p_miss=p.pos_below / p.n_pos,
        p_fa=(p.n_neg - p.neg_below) / p.n_neg,
        n_pos=p.n_pos,
        n_neg=p.n_neg,
    )


def probit(p: Any, eps: float | None = None) -> np.ndarray:
    r"""Probit (normal deviate) :math:`\Phi^{-1}(p)` for DET axes.

    Parameters
    ----------
    p : array-like
        Probabilities in [0, 1]; 0 and 1 map to :math:`\mp\infty` unless ``eps`` is given.
    eps : float, optional
        Clip ``p`` to ``[eps, 1 - eps]`` first (e.g. ``1e-4`` for plotting).
    """
    p = np.asarray(p, dtype=np.float64)
    if eps is not None:
        p = np.clip(p, eps, 1.0 - eps)
    return norm.ppf(p)


class DetTicks(NamedTuple):
    """Tick probabilities, their probit positions and labels (in percent)."""

    probabilities: np.ndarray
    positions: np.ndarray
    labels: list[str]


_TICKS = (1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5,
          0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99)


def det_axis_ticks(p_min: float = 1e-3, p_max: float = 0.5) -> DetTicks:
    r"""Conventional DET-plot ticks between ``p_min`` and ``p_max``.

    Returns the probabilities :math:`p` from the 1-2-5 series (plus 0.3, 0.4, ...)
    within the range, their positions :math:`\Phi^{-1}(p)` and labels in percent, e.g.
    ``"0.1"``, ``"5"``, ``"40"``. Use as ``ax.set_xticks(t.positions, t.labels)``.
    """
    if not 0.0 < p_min < p_max < 1.0:
        raise MetricInputError(f"need 0 < p_min < p_max < 1, got p_min={p_min}, p_max={p_max}")
    probs = np.array([t for t in _TICKS if p_min * (1 - 1e-9) <= t <= p_max * (1 + 1e-9)])
    labels = [f"{100 * t:g}" for t in probs]
    return DetTicks(probs, norm.ppf(probs), labels)


# ----------------------------------------------------------------------------- rates
class Rates(NamedTuple):
    """Miss and false-alarm rates at given thresholds (arrays, or floats for a scalar)."""

    p_miss: Any
    p_fa: Any


def rates_at(scores: Any, labels: Any, thresholds: Any) -> Rates:
    r"""Exact :math:`P_\text{miss}(\tau)` and :math:`P_\text{fa}(\tau)` at many thresholds.

    Sorts each class once and counts with binary search:
    :math:`P_\text{miss}(\tau) = \#\{\text{pos}: s < \tau\}/N_1` and
    :math:`P_\text{fa}(\tau) = \#\{\text{neg}: s \ge \tau\}/N_0`; cost
    :math:`O((N + T)\log N)` for :math:`T` thresholds.

    Parameters
    ----------
    scores, labels : array-like
    thresholds : float or array-like
        Any values, including :math:`\pm\infty`; NaN is an error.

    Returns
    -------
    Rates
        ``(p_miss, p_fa)``, arrays of the shape of ``thresholds`` (floats for a scalar).
    """
    s, y = _prepare(scores, labels)
    tau = np.asarray(thresholds, dtype=np.float64)
    if np.isnan(tau).any():
        raise MetricInputError("thresholds contain NaN")
    pos = np.sort(s[y == 1])
    neg = np.sort(s[y == 0])
    p_miss = np.searchsorted(pos, tau, side="left") / pos.shape[0]
    p_fa = (neg.shape[0] - np.searchsorted(neg, tau, side="left")) / neg.shape[0]
    if tau.ndim == 0:
        return Rates(float(p_miss), float(p_fa))
    return Rates(p_miss, p_fa)


# ----------------------------------------------------------------------------- EER
def _lower_hull(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the lower convex hull of points sorted by x (ties: y descending); of
    repeated (identical, consecutive) points the first.

    Exact in integer arithmetic (the metrics' error counts); the model side
    (:mod:`scoremix.predictive.attainable`) calls it on rates. Repeatedly removes, all at once, every interior point that
    is not a strict left turn (cross product <= 0) with its current neighbours; each such
    point lies on or above a chord between two points of the set, so it is never a hull
    vertex. Stops when the chain is locally, hence globally, convex. Consecutive repeated
    points are merged first (the chord argument needs distinct neighbours).
    """
    if x.shape[0] <= 2:
        return np.arange(x.shape[0])
    # repeated points (a model's rates constant over several thresholds) would each justify
    # dropping the other (cross product 0) and take a hull vertex with them: keep the first
    dup = (x[1:] == x[:-1]) & (y[1:] == y[:-1])
    if dup.any():
        keep = np.flatnonzero(np.concatenate(([True], ~dup)))
        return keep[_lower_hull(x[keep], y[keep])]
    # first pass on views (no gathers): most points of a long curve go here
    cross = (x[1:-1] - x[:-2]) * (y[2:] - y[:-2]) - (y[1:-1] - y[:-2]) * (x[2:] - x[:-2])
    idx = np.flatnonzero(np.concatenate(([True], cross > 0, [True])))
    while idx.shape[0] > 2:
        xa, ya = x[idx[:-2]], y[idx[:-2]]
        xb, yb = x[idx[1:-1]], y[idx[1:-1]]
        xc, yc = x[idx[2:]], y[idx[2:]]
        cross = (xb - xa) * (yc - ya) - (yb - ya) * (xc - xa)
        drop = cross <= 0
        if not drop.any():
            break
        idx = idx[np.concatenate(([True], ~drop, [True]))]
    return idx


def _pav(p: _Points) -> Any:
    """PAV fit of P(y=1 | s) over the distinct scores (weights = trials per score)."""
    pos_in = np.diff(np.append(p.pos_below, p.n_pos)).astype(np.float64)
    neg_in = np.diff(np.append(p.neg_below, p.n_neg)).astype(np.float64)
    w = pos_in + neg_in
    return isotonic_regression(pos_in / w, weights=w, increasing=True), pos_in, neg_in


def hull_eer(pfa: Any, pmiss: Any) -> tuple[float, int, float]:
    """ROCCH EER of operating points ordered by *increasing* threshold (``pfa``
    non-increasing, ``pmiss`` non-decreasing), the accept-all point ``(1, 0)`` and the
    reject-all point ``(0, 1)`` added.

    Returns ``(eer, k, t)``: the EER lies at fraction ``t`` between hull vertices whose
    threshold indices are ``k`` and the next vertex (indices into the input points, ``-1``
    = accept all, ``len`` = reject all); see :func:`scoremix.predictive.attainable.hull_eer_threshold_index`.

    The ROCCH EER of real-valued rates (a model's expected rates at attainable thresholds, the
    speaker-pooling CV's blends): :func:`eer` (``method="rocch"``) for counts is the same
    definition.
    """
    pf = np.concatenate(([1.0], np.asarray(pfa, float), [0.0]))[::-1]
    pm = np.concatenate(([0.0], np.asarray(pmiss, float), [1.0]))[::-1]
    ok = np.isfinite(pf) & np.isfinite(pm)
    if not ok.all():
        return float("nan"), -1, float("nan")
    h = _lower_hull(pf, pm)
    x, y = pf[h], pm[h]
    d = y - x
    k = int(np.flatnonzero(d <= 0)[0])
    n = pf.shape[0]
    to_thr = lambda i: n - 2 - int(h[i])  # position in the input order (−1: accept all)
    if d[k] == 0:
        return float(x[k]), to_thr(k), 0.0
    t = d[k - 1] / (d[k - 1] - d[k])
    e = float(x[k - 1] + t * (x[k] - x[k - 1]))
    # nearer vertex
    return e, (to_thr(k - 1) if t <= 0.5 else to_thr(k)), float(t)


def _rocch_vertices(p: _Points) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ROCCH vertices as (P_fa, P_miss, threshold), P_fa ascending.

    The ROC convex hull is read off pool-adjacent-violators (as in BOSARIS): the PAV
    blocks of the labels sorted by score are the hull segments, so the block starts
    (plus reject-all) are the candidate vertices; an exact integer hull pass on those
    few points then removes any collinear leftovers.
    """
    starts = _pav(p)[0].blocks[:-1]
    thr = np.append(p.thresholds[starts], np.inf)[::-1]
    fa = (p.n_neg - np.append(p.neg_below[starts], p.n_neg))[::-1].astype(np.int64)
    miss = np.append(p.pos_below[starts], p.n_pos)[::-1].astype(np.int64)
    h = _lower_hull(fa, miss)
    return fa[h] / p.n_neg, miss[h] / p.n_pos, thr[h]


def _crossing(x: np.ndarray, y: np.ndarray) -> tuple[int, float, float]:
    """Along a path with d = y − x strictly decreasing from > 0 to < 0 (or hitting 0),
    return (k, t, eer): the EER lies at fraction t of segment k → k+1."""
    d = y - x
    k = int(np.flatnonzero(d <= 0)[0])
    if d[k] == 0:
        return k, 0.0, float(x[k])
    k -= 1
    t = d[k] / (d[k] - d[k + 1])
    return k, float(t), float(x[k] + t * (x[k + 1] - x[k]))


def _nearer(k: int, t: float, thr: np.ndarray) -> float:
    return float(thr[k] if t <= 0.5 else thr[k + 1])


def _eer_rocch(p: _Points) -> tuple[float, float]:
    pfa, pmiss, thr = _rocch_vertices(p)
    k, t, e = _crossing(pfa, pmiss)
    return e, _nearer(k, t, thr)


def _eer_interp(p: _Points) -> tuple[float, float]:
    p = _with_reject_all(p)
    pmiss = p.pos_below / p.n_pos
    pfa = (p.n_neg - p.neg_below) / p.n_neg
    # walk from high to low threshold so that d = pmiss − pfa decreases
    k, t, e = _crossing(pfa[::-1], pmiss[::-1])
    return e, _nearer(k, t, p.thresholds[::-1])


def _eer_asvspoof(p: _Points) -> tuple[float, float]:
    # The script sorts all N trials (stable, positives before negatives among ties),
    # evaluates frr = #pos rejected / N1 and far = #neg accepted / N0 after rejecting
    # the first j = 0..N trials and takes the first argmin of |frr - far|. frr - far
    # rises with every rejected trial, so the argmin lies in the tie group where it
    # changes sign; only that group's per-trial points are built.
    below = p.pos_below + p.neg_below  # trials rejected at each collapsed point
    d = p.pos_below / p.n_pos - (p.n_neg - p.neg_below) / p.n_neg
    b = int(np.flatnonzero(np.append(d, 1.0) >= 0)[0])  # d[0] = -1, so b >= 1
    g = b - 1  # the crossing is inside group g (between points g and b) or at b
    n_g = (p.n_pos + p.n_neg if b == d.shape[0] else int(below[b])) - int(below[g])
    pos_g = (p.n_pos if b == d.shape[0] else int(p.pos_below[b])) - int(p.pos_below[g])
    j = np.arange(n_g + 1)  # trials of group g rejected, positives first
    tar = p.pos_below[g] + np.minimum(j, pos_g)
    non_rej = p.neg_below[g] + np.maximum(j - pos_g, 0)
    frr = tar / p.n_pos
    far = (p.n_neg - non_rej) / p.n_neg
    m = int(np.argmin(np.abs(frr - far)))
    e = float((frr[m] + far[m]) / 2)
    trial = int(below[g]) + m  # trials rejected at the script's argmin
    if trial == 0:
        return e, float(p.thresholds[0])  # script threshold: min score - 0.001 (accept all)
    # script threshold = the trial-th smallest score, meaning "reject s <= threshold"
    thr = p.thresholds[g] if m > 0 else p.thresholds[g - 1]
    return e, float(np.nextafter(thr, np.inf))


def _eer_voxceleb(p: _Points) -> tuple[float, float]:
    # sklearn.metrics.roc_curve(drop_intermediate=True) points, thresholds descending
    tps = (p.n_pos - p.pos_below)[::-1].astype(np.float64)
    fps = (p.n_neg - p.neg_below)[::-1].astype(np.float64)
    thr = p.thresholds[::-1]
    if fps.shape[0] > 2:
        keep = np.concatenate(([True], (np.diff(fps, 2) != 0) | (np.diff(tps, 2) != 0), [True]))
        tps, fps, thr = tps[keep], fps[keep], thr[keep]
    tps = np.concatenate(([0.0], tps))
    fps = np.concatenate(([0.0], fps))
    thr = np.concatenate(([np.inf], thr))
    fnr = 1 - tps / tps[-1]
    fpr = fps / fps[-1]
    i = int(np.nanargmin(np.abs(fnr - fpr)))
    return float(fnr[i]), float(thr[i])


_EER = {"rocch": _eer_rocch, "interp": _eer_interp, "asvspoof": _eer_asvspoof,
        "voxceleb": _eer_voxceleb}


def _points_from_counts(scores: Any, n_pos: Any, n_neg: Any) -> _Points:
    """Operating points from trial counts per distinct score (ascending, unique)."""
    t = np.asarray(scores, dtype=np.float64)
    cp = np.asarray(n_pos, dtype=np.int64)
    cn = np.asarray(n_neg, dtype=np.int64)
    if not (t.shape == cp.shape == cn.shape) or t.ndim != 1:
        raise MetricInputError(f"scores, n_pos and n_neg must be 1-D of one length, got "
                               f"{t.shape}, {cp.shape}, {cn.shape}")
    if t.size > 1 and not np.all(t[1:] > t[:-1]):
        raise MetricInputError("scores of a count table must be distinct and ascending")
    if np.any(np.isnan(t)) or np.any(cp < 0) or np.any(cn < 0):
        raise MetricInputError("count tables need non-NaN scores and non-negative counts")
    pb = np.concatenate(([0], np.cumsum(cp)))
    nb = np.concatenate(([0], np.cumsum(cn)))
    if pb[-1] == 0 or nb[-1] == 0:
        raise SingleClassError("the count table has only one class; the metric needs both")
    return _Points(t, pb[:-1], nb[:-1], int(pb[-1]), int(nb[-1]))


def _dask_candidates(scores: Any, labels: Any, kind: str, params: tuple = ()) -> Any:
    """Candidates of ``kind`` (see :func:`range_candidates`) from the input adapter that claims
    ``scores``/``labels`` (Dask: :mod:`scoremix.distributed.metrics_input`), or None for
    in-memory input."""
    handler = adapter_for("metric_candidates", scores, labels)
    return None if handler is None else handler(scores, labels, kind, params)


def _range_points(c: Any, info: Any) -> _Points:
    """The global operating points at the distinct scores of one range (see
    :mod:`scoremix.distributed.ranges`): counts below each score offset by the trials below
    the range; ``n_pos``/``n_neg`` are the totals of all trials."""
    pb = info.pos_before + np.concatenate(([0], np.cumsum(c.n_pos)[:-1])).astype(np.int64)
    nb = info.neg_before + np.concatenate(([0], np.cumsum(c.n_neg)[:-1])).astype(np.int64)
    return _Points(np.asarray(c.scores, np.float64), pb, nb, info.n_pos, info.n_neg)


def _take(p: _Points, idx: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    idx = np.asarray(idx, dtype=np.int64)
    return p.thresholds[idx], p.pos_below[idx], p.neg_below[idx]


def range_candidates(c: Any, info: Any, kind: str, params: tuple) -> Any:
    r"""The operating points of one score range that the global computation of ``kind`` can
    need; the union over ranges, in order, replaces all points without changing the result.

    * ``"min_dcf"``: the first minimiser of :math:`C(\tau)` in the range (the global first
      minimiser is the first minimiser of the range holding it; costs are computed
      elementwise from the same integers, so they are the same floats).
    * ``"rocch"``: the vertices of the lower convex hull of the range's points and the first
      point above it (PAV blocks, then the exact integer hull). A vertex of the global ROC
      convex hull is the unique minimiser of some :math:`a P_\text{fa} + b P_\text{miss}`,
      :math:`a, b > 0`, over all points, hence over its range's: so it survives there, and the
      hull of the union of the ranges' hull vertices is the global hull.
    * ``"interp"``: the last point with :math:`d = P_\text{miss} - P_\text{fa} \le 0` and the
      first with :math:`d > 0` (:math:`d` rises with the threshold): the global straddling pair
      is among the union.
    * ``"asvspoof"``: the last two points with :math:`d < 0` and the first with :math:`d \ge 0`.
    * ``"voxceleb"``: ``(|fnr − fpr|, fnr, threshold)`` of the first minimiser (thresholds
      descending) among the range's points kept by ``roc_curve(drop_intermediate=True)``;
      keeping a point depends on its counts and those of the next lower score (``prev_counts``).
    """
    p = _range_points(c, info)
    if kind == "min_dcf":
        pm = p.pos_below / p.n_pos
        pf = (p.n_neg - p.neg_below) / p.n_neg
        return _take(p, [int(np.argmin(_cost(pm, pf, *params)))])
    if kind == "rocch":
        end_pb = info.pos_before + int(np.sum(c.n_pos))
        end_nb = info.neg_before + int(np.sum(c.n_neg))
        local = _Points(p.thresholds, p.pos_below, p.neg_below, end_pb, end_nb)
        starts = _pav(local)[0].blocks[:-1]
        # candidates descending in threshold (P_fa ascending), the first point above the range first
        fa = (p.n_neg - np.append(p.neg_below[starts], end_nb))[::-1].astype(np.int64)
        miss = np.append(p.pos_below[starts], end_pb)[::-1].astype(np.int64)
        h = _lower_hull(fa, miss)
        keep = np.sort(starts[::-1][h[h > 0] - 1])
        return _take(p, keep)
    d = p.pos_below / p.n_pos - (p.n_neg - p.neg_below) / p.n_neg
    if kind == "interp":
        lo, hi = np.flatnonzero(d <= 0), np.flatnonzero(d > 0)
        return _take(p, np.concatenate((lo[-1:], hi[:1])))
    if kind == "asvspoof":
        lo, hi = np.flatnonzero(d < 0), np.flatnonzero(d >= 0)
        return _take(p, np.concatenate((lo[-2:], hi[:1])))
    if kind == "voxceleb":
        k = info.index_before + np.arange(p.thresholds.size)
        cp = np.asarray(c.n_pos, np.int64)
        cn = np.asarray(c.n_neg, np.int64)
        prev = info.prev_counts or (-1, -1)
        pp, pn = np.concatenate(([prev[0]], cp[:-1])), np.concatenate(([prev[1]], cn[:-1]))
        keep = (k == 0) | (k == info.n_distinct - 1) | (info.n_distinct <= 2) | (cp != pp) | (cn != pn)
        tps = (p.n_pos - p.pos_below)[keep][::-1].astype(np.float64)
        fps = (p.n_neg - p.neg_below)[keep][::-1].astype(np.float64)
        fnr = 1 - tps / np.float64(p.n_pos)
        fpr = fps / np.float64(p.n_neg)
        e = np.abs(fnr - fpr)
        if e.size == 0:
            return None  # every point of the range is dropped as intermediate
        i = int(np.argmin(e))
        return float(e[i]), float(fnr[i]), float(p.thresholds[keep][::-1][i])
    raise MetricInputError(f"unknown range computation {kind!r}")


def _eer_point(scores: Any, labels: Any, method: str, higher_is_positive: bool = True) -> tuple[float, float]:
    if method not in _EER:
        raise MetricInputError(f"unknown EER method {method!r}; choose one of {EER_METHODS}")
    if adapter_for("metric_candidates", scores, labels) is not None:
        # exact score counts, range-partitioned on the cluster; each range returns the few points
        # the EER can need (no direction check: that needs the rows; scoremix.auc on a sample does it)
        cand = _dask_candidates(scores if higher_is_positive else -scores, labels, method)
        rate, tau = cand if method == "voxceleb" else _EER[method](cand)
    else:
        s, y = _prepare(scores if higher_is_positive else -_as_scores(scores), labels,
                        allow_posinf=False)
        _warn_if_reversed(s, y, stacklevel=3)
        rate, tau = _EER[method](_points(s, y))
    return rate, (tau if higher_is_positive else -tau)


def eer_from_counts(scores: Any, n_pos: Any, n_neg: Any, method: EerMethod = "rocch") -> float:
    """:func:`eer` of trials given as counts: ``n_pos[k]`` positive and ``n_neg[k]`` negative
    trials score ``scores[k]`` (distinct, ascending). Equal to :func:`eer` of the expanded
    trials."""
    if method not in _EER:
        raise MetricInputError(f"unknown EER method {method!r}; choose one of {EER_METHODS}")
    return _EER[method](_points_from_counts(scores, n_pos, n_neg))[0]


@renamed_kwargs(ci="level")
def eer(scores: Any, labels: Any, method: EerMethod = "rocch", higher_is_positive: bool = True, *,
        n_boot: int = 0, speaker: Any = None, seed: int | np.random.Generator | None = None,
        level: float = 0.95) -> float:
    r"""Equal error rate, the rate where :math:`P_\text{miss} = P_\text{fa}`.

    Empirical curves are step functions, so the crossing must be defined:

    ``"rocch"`` (default)
        BOSARIS / pyllr definition. Take the lower convex hull of the operating points
        :math:`(P_\text{fa}, P_\text{miss})` (the ROC convex hull, ROCCH: the points
        reachable by randomising between two thresholds) and return where it meets the
        line :math:`P_\text{miss} = P_\text{fa}`. Equivalently
        :math:`\max_{w\in[0,1]}\min_\tau\,[w P_\text{miss}(\tau) + (1-w) P_\text{fa}(\tau)]`.
        Invariant to strictly increasing score transforms; never above ``"interp"``.
    ``"interp"``
        NIST style: the two consecutive (tie-collapsed) operating points that straddle
        :math:`P_\text{miss} = P_\text{fa}` are joined by a straight line and the EER is
        where it crosses the diagonal (exact when a point lies on it).
    ``"asvspoof"``
        The ASVspoof ``compute_eer`` script: all trials are sorted (stable, positives
        before negatives among tied scores), :math:`P_\text{miss}, P_\text{fa}` are
        evaluated after rejecting the first :math:`j = 0, \dots, N` trials, the point
        minimising :math:`|P_\text{miss} - P_\text{fa}|` is taken (first on ties) and
        :math:`\text{EER} = (P_\text{miss} + P_\text{fa})/2` there. With tied scores
        this includes points no threshold can reach.
    ``"voxceleb"``
        The VoxCeleb / ``sklearn.metrics.roc_curve`` recipe: the points of
        ``roc_curve(labels, scores)`` (default ``drop_intermediate=True``, plus its
        (0, 0) start), :math:`i = \arg\min |\text{fnr} - \text{fpr}|` (first on ties)
        and :math:`\text{EER} = \text{fnr}_i`. (clovaai/voxceleb_trainer reports
        :math:`\max(\text{fnr}_i, \text{fpr}_i)` instead.)

    All four agree when the curve passes through the diagonal at a reachable point;
    they differ by up to a few :math:`1/N` on small samples and with ties (see
    ``docs/metrics.md``).

    Parameters
    ----------
    scores : array-like of float
    labels : array-like
        1/0, bool, or anything :func:`scoremix.trials.label_to_binary` accepts.
    method : {"rocch", "interp", "asvspoof", "voxceleb"}
    higher_is_positive : bool
        ``False`` for scores where lower means positive (distances, some spoofing scores):
        the metric is computed on :math:`-s`. When the positive class scores lower than the
        negative class after this (AUC < 0.5) a :class:`ScoreDirectionWarning` is raised.

    n_boot, speaker, seed, level : optional
        with ``n_boot > 0``: a speaker-cluster bootstrap interval (``speaker``: one id per
        trial; None = trials are independent), see :func:`scoremix.resampling.cluster_bootstrap` (``ci=`` is the old name of ``level=``).

    Returns
    -------
    float
        EER as a fraction in [0, 1]; an :class:`Estimate` (a float with ``lo``, ``hi``)
        when ``n_boot > 0``.
    """
    ci = level  # the body's name for level= (renamed API argument)
    scores, _ = finite_order(scores)          # ±inf: order is all an EER needs
    value = _eer_point(scores, labels, method, higher_is_positive)[0]
    sign = 1.0 if higher_is_positive else -1.0
    fast = WeightedSpec("eer", sign) if method == "rocch" else None
    return _maybe_interval(value, _quietly(lambda a, b: _eer_point(a, b, method, higher_is_positive)[0]), scores,
                           labels, n_boot, speaker, seed, ci, weighted=fast)


def eer_threshold(scores: Any, labels: Any, method: EerMethod = "rocch", higher_is_positive: bool = True) -> float:
    r"""A decision threshold (accept :math:`s \ge \tau`) at the EER of :func:`eer`.

    ``"rocch"``: the threshold of the nearer of the two hull vertices bracketing the
    EER (the EER itself is a randomised mix of those two thresholds). ``"interp"``: the
    threshold of the nearer of the two straddling operating points. ``"asvspoof"``: the
    script's threshold converted to accept :math:`s \ge \tau` (the next float above it);
    when the script's point lies inside a group of tied scores no threshold reaches it
    exactly. ``"voxceleb"``: ``thresholds[i]`` of ``roc_curve`` (:math:`+\infty` for its
    added start point). With ``higher_is_positive=False`` the threshold is on the original
    scores with accept :math:`s \le \tau`.
    """
    scores, back = finite_order(scores)
    return back(_eer_point(scores, labels, method, higher_is_positive)[1])


# ----------------------------------------------------------------------------- DCF
def _check_costs(p_target: float, c_miss: float, c_fa: float) -> None:
    if not 0.0 < p_target < 1.0:
        raise MetricInputError(f"p_target must be in (0, 1), got {p_target}")
    if not (c_miss > 0 and c_fa > 0 and np.isfinite(c_miss) and np.isfinite(c_fa)):
        raise MetricInputError(f"c_miss and c_fa must be positive and finite, got {c_miss}, {c_fa}")


def _cost(p_miss: Any, p_fa: Any, p_target: float, c_miss: float, c_fa: float,
          normalize: bool) -> Any:
    c = c_miss * p_target * p_miss + c_fa * (1 - p_target) * p_fa
    if normalize:
        c = c / min(c_miss * p_target, c_fa * (1 - p_target))
    return c


def dcf(scores: Any, labels: Any, threshold: float, p_target: float = 0.05, c_miss: float = 1,
        c_fa: float = 1, normalize: bool = False) -> float:
    r"""Detection cost at a threshold (accept :math:`s \ge \tau`).

    .. math::

        C(\tau) = C_\text{miss}\,P_\text{tar}\,P_\text{miss}(\tau)
                + C_\text{fa}\,(1 - P_\text{tar})\,P_\text{fa}(\tau),

    divided by :math:`\min(C_\text{miss} P_\text{tar}, C_\text{fa}(1 - P_\text{tar}))`
    (the cost of the better trivial system) when ``normalize`` is True.
    """
    _check_costs(p_target, c_miss, c_fa)
    if np.ndim(threshold) != 0:
        raise MetricInputError("dcf takes one threshold; use rates_at for many")
    r = rates_at(scores, labels, float(threshold))
    return float(_cost(np.float64(r.p_miss), np.float64(r.p_fa), p_target, c_miss, c_fa, normalize))


@dataclass(frozen=True)
class CostSpec:
    """Detection-cost parameters ``C(τ) = c_miss·π·P_miss(τ) + c_fa·(1-π)·P_fa(τ)``,
    divided by ``min(c_miss·π, c_fa·(1-π))`` when ``normalize``."""

    p_target: float = 0.05
    c_miss: float = 1.0
    c_fa: float = 1.0
    normalize: bool = False

    def __post_init__(self) -> None:
        if not 0.0 < self.p_target < 1.0:
            raise ValueError(f"p_target must be in (0, 1), got {self.p_target}")
        if self.c_miss <= 0 or self.c_fa <= 0:
            raise ValueError(f"c_miss and c_fa must be positive, got {self.c_miss}, {self.c_fa}")

    @property
    def weights(self) -> tuple[float, float]:
        a = self.c_miss * self.p_target
        b = self.c_fa * (1.0 - self.p_target)
        if self.normalize:
            m = min(a, b)
            return a / m, b / m
        return a, b

    def upper_bounds(self) -> dict[str, float]:
        """Logical maxima of the cost measures, in this spec's units: a minimum DCF is at most
        the cost of the better trivial system (accept or reject all), ``min(a, b)`` (1 when
        normalised); a DCF at a fixed threshold at most ``a + b``; rates at most 1; ``ratio_own
        = minDCF/C(τ*) ≤ 1``; a ROCCH EER at most ½.  Interval ends are capped at them."""
        a, b = self.weights
        return {"min_dcf": min(a, b), "dcf_at_overall": a + b, "fpr": 1.0, "fnr": 1.0, "ratio_own": 1.0, "eer": 0.5}


class MinDCF(MetricValue):
    r"""Minimum detection cost and where it is attained: a float (``value``) with extras.

    It compares, formats and computes like its value (``sm.min_dcf(s, y) < 0.5``); the
    extras are attributes.

    Attributes
    ----------
    value : float
        :math:`\min_\tau C(\tau)` (normalised if requested).
    threshold : float
        A threshold attaining it: counting with accept :math:`s \ge \tau` at this value
        (:func:`dcf`) reproduces ``value`` exactly. The smallest such score;
        :math:`+\infty` when rejecting everything is optimal.
    p_miss, p_fa : float
        The error rates at ``threshold``.
    p_target, c_miss, c_fa : float
    normalize : bool
    lo, hi, level, n_boot :
        the speaker-cluster bootstrap interval with ``n_boot > 0`` (NaN, NaN, NaN, 0 without);
        ``ci`` is the old name of ``level``.
    """

    threshold: float
    p_miss: float
    p_fa: float
    p_target: float
    c_miss: float
    c_fa: float
    normalize: bool
    lo: float
    hi: float
    level: float
    n_boot: int

    def __new__(cls, value: float, threshold: float, p_miss: float, p_fa: float, p_target: float,
                c_miss: float, c_fa: float, normalize: bool, lo: float = float("nan"), hi: float = float("nan"),
                level: float = float("nan"), n_boot: int = 0) -> "MinDCF":
        obj = super().__new__(cls, value)
        obj.threshold, obj.p_miss, obj.p_fa = float(threshold), float(p_miss), float(p_fa)
        obj.p_target, obj.c_miss, obj.c_fa, obj.normalize = float(p_target), float(c_miss), float(c_fa), bool(normalize)
        obj.lo, obj.hi, obj.level, obj.n_boot = float(lo), float(hi), float(level), int(n_boot)
        return obj

    def __repr__(self) -> str:
        return (f"MinDCF(value={float(self)!r}, threshold={self.threshold!r}, p_miss={self.p_miss!r}, "
                f"p_fa={self.p_fa!r}, p_target={self.p_target!r}, c_miss={self.c_miss!r}, c_fa={self.c_fa!r}, "
                f"normalize={self.normalize!r}, lo={self.lo!r}, hi={self.hi!r}, level={self.level!r}, "
                f"n_boot={self.n_boot!r})")

    def __reduce__(self) -> tuple:
        return (MinDCF, (float(self), self.threshold, self.p_miss, self.p_fa, self.p_target, self.c_miss,
                         self.c_fa, self.normalize, self.lo, self.hi, self.level, self.n_boot))

    @property
    def ci(self) -> float:
        """Old name of :attr:`level` (kept for one release)."""
        warn_renamed("MinDCF", "ci", "level")
        return self.level

    @property
    def normalizer(self) -> float:
        r""":math:`\min(C_\text{miss} P_\text{tar}, C_\text{fa}(1-P_\text{tar}))`, the cost of the better trivial system."""
        return min(self.c_miss * self.p_target, self.c_fa * (1 - self.p_target))

    @property
    def normalized(self) -> float:
        """The normalised minimum cost (``value`` itself when ``normalize`` is True)."""
        return self.value if self.normalize else self.value / self.normalizer

    @property
    def unnormalized(self) -> float:
        """The unnormalised minimum cost."""
        return self.value * self.normalizer if self.normalize else self.value


@renamed_kwargs(ci="level")
def min_dcf(scores: Any, labels: Any, p_target: float = 0.05, c_miss: float = 1, c_fa: float = 1,
            normalize: bool = False, higher_is_positive: bool = True, *, n_boot: int = 0, speaker: Any = None,
            seed: int | np.random.Generator | None = None, level: float = 0.95) -> MinDCF:
    r"""Minimum of :math:`C(\tau)` (see :func:`dcf`) over every distinct threshold.

    The minimum over all real :math:`\tau` is attained at a distinct score or at
    :math:`+\infty` (reject all), because :math:`C` is constant between consecutive
    scores; all of them are evaluated at once from cumulative counts.

    ``higher_is_positive=False``: computed on :math:`-s`; the returned threshold is on the
    original scores with accept :math:`s \le \tau`. A :class:`ScoreDirectionWarning` is
    raised when the positive class scores lower (AUC < 0.5) in the direction used.

    With ``n_boot > 0`` the result's ``lo``, ``hi`` hold a speaker-cluster bootstrap
    interval of ``value`` (see :func:`cluster_bootstrap`; ``speaker``: one id per trial).
    """
    ci = level  # the body's name for level= (renamed API argument)
    _check_costs(p_target, c_miss, c_fa)
    scores, back = finite_order(scores)       # ±inf: order is all a DCF needs
    if n_boot:
        point = min_dcf(scores, labels, p_target, c_miss, c_fa, normalize, higher_is_positive)
        sign = 1.0 if higher_is_positive else -1.0
        fast = WeightedSpec("min_dcf", sign, dict(p_target=p_target, c_miss=c_miss, c_fa=c_fa, normalize=normalize))
        est = _bootstrap(_quietly(lambda a, b: min_dcf(a, b, p_target, c_miss, c_fa, normalize,
                                                              higher_is_positive).value), scores,
                                labels, speaker=speaker, n_boot=n_boot, seed=seed, level=ci, minimum=True,
                         weighted=fast)
        return MinDCF(point.value, point.threshold, point.p_miss, point.p_fa, point.p_target, point.c_miss,
                      point.c_fa, point.normalize, est.lo, est.hi, est.level, est.n_boot)
    if speaker is not None:
        raise MetricInputError("speaker= is only used with n_boot > 0 (the speaker-cluster bootstrap)")
    if adapter_for("metric_candidates", scores, labels) is not None:
        p = _dask_candidates(scores if higher_is_positive else -scores, labels, "min_dcf",
                             (p_target, c_miss, c_fa, normalize))
    else:
        s, y = _prepare(scores if higher_is_positive else -_as_scores(scores), labels,
                        allow_posinf=False)
        _warn_if_reversed(s, y, stacklevel=2)
        p = _points(s, y)
    res = _min_dcf_of(p, p_target, c_miss, c_fa, normalize, higher_is_positive)
    return MinDCF(res.value, back(res.threshold), res.p_miss, res.p_fa, res.p_target, res.c_miss, res.c_fa,
                  res.normalize, res.lo, res.hi, res.level, res.n_boot)


def min_dcf_from_counts(scores: Any, n_pos: Any, n_neg: Any, p_target: float = 0.05,
                        c_miss: float = 1, c_fa: float = 1, normalize: bool = False) -> MinDCF:
    """:func:`min_dcf` of trials given as counts per distinct score (see
    :func:`eer_from_counts`)."""
    _check_costs(p_target, c_miss, c_fa)
    return _min_dcf_of(_points_from_counts(scores, n_pos, n_neg), p_target, c_miss, c_fa, normalize)


def _min_dcf_of(p: _Points, p_target: float, c_miss: float, c_fa: float, normalize: bool,
                higher_is_positive: bool = True) -> MinDCF:
    p = _with_reject_all(p)
    pm = p.pos_below / p.n_pos
    pf = (p.n_neg - p.neg_below) / p.n_neg
    cost = _cost(pm, pf, p_target, c_miss, c_fa, normalize)
    k = int(np.argmin(cost))
    tau = float(p.thresholds[k]) if higher_is_positive else -float(p.thresholds[k])
    return MinDCF(float(cost[k]), tau, float(pm[k]), float(pf[k]),
                  float(p_target), float(c_miss), float(c_fa), bool(normalize))


def bayes_threshold(p_target: float = 0.05, c_miss: float = 1, c_fa: float = 1) -> float:
    r"""Bayes decision threshold for LLRs: :math:`\log\frac{C_\text{fa}(1-P_\text{tar})}{C_\text{miss}P_\text{tar}}`."""
    _check_costs(p_target, c_miss, c_fa)
    return float(np.log(c_fa * (1 - p_target)) - np.log(c_miss * p_target))


@renamed_kwargs(ci="level")
def act_dcf(llrs: Any, labels: Any, p_target: float = 0.05, c_miss: float = 1, c_fa: float = 1,
            normalize: bool = False, *, n_boot: int = 0, speaker: Any = None,
            seed: int | np.random.Generator | None = None, level: float = 0.95) -> float:
    r"""Actual detection cost of calibrated log-likelihood ratios.

    :math:`C(\tau^*)` of :func:`dcf` at the Bayes threshold
    :math:`\tau^* = \log\frac{C_\text{fa}(1-P_\text{tar})}{C_\text{miss}P_\text{tar}}`
    (accept :math:`\ell \ge \tau^*`). Always :math:`\ge` :func:`min_dcf`.
    With ``n_boot > 0`` an :class:`Estimate` with a speaker-cluster bootstrap interval.
    """
    ci = level  # the body's name for level= (renamed API argument)
    thr = bayes_threshold(p_target, c_miss, c_fa)
    value = dcf(llrs, labels, thr, p_target, c_miss, c_fa, normalize)
    fast = WeightedSpec("dcf", 1.0, dict(threshold=thr, p_target=p_target, c_miss=c_miss, c_fa=c_fa,
                                         normalize=normalize))
    return _maybe_interval(value, lambda a, b: dcf(a, b, thr, p_target, c_miss, c_fa, normalize), llrs, labels,
                           n_boot, speaker, seed, ci, weighted=fast)


# ----------------------------------------------------------------------------- Cllr
@renamed_kwargs(ci="level")
def cllr(llrs: Any, labels: Any, *, n_boot: int = 0, speaker: Any = None,
         seed: int | np.random.Generator | None = None, level: float = 0.95) -> float:
    r"""Log-likelihood-ratio cost in bits.

    .. math::

        C_\text{llr} = \frac{1}{2\ln 2}\Big[\frac{1}{N_1}\sum_{y_i=1}\ln(1+e^{-\ell_i})
                      + \frac{1}{N_0}\sum_{y_i=0}\ln(1+e^{\ell_i})\Big]

    1 bit for the uninformative :math:`\ell \equiv 0`; 0 for perfect, infinitely
    confident LLRs. :math:`\pm\infty` LLRs are allowed (a wrong infinite LLR gives
    :math:`+\infty`). With ``n_boot > 0`` an :class:`Estimate` with a speaker-cluster
    bootstrap interval (see :func:`cluster_bootstrap`).
    """
    ci = level  # the body's name for level= (renamed API argument)
    s, y = _prepare(llrs, labels)
    pos = y == 1
    tp = np.logaddexp(0.0, -s[pos]).mean()
    tn = np.logaddexp(0.0, s[~pos]).mean()
    value = float((tp + tn) / (2 * np.log(2)))
    return _maybe_interval(value, cllr, llrs, labels, n_boot, speaker, seed, ci,
                           weighted=WeightedSpec("cllr"))


def min_cllr(llrs: Any, labels: Any) -> float:
    r""":math:`C_\text{llr}` after optimal monotone calibration (PAV), in bits.

    Scores are pooled per distinct value; pool-adjacent-violators
    (``scipy.optimize.isotonic_regression``, weights = trial counts) fits the
    non-decreasing posterior :math:`\hat p_k = P(y=1 \mid s = u_k)` at the empirical
    prior, which is removed to get LLRs
    :math:`\hat\ell_k = \operatorname{logit}\hat p_k - \ln(N_1/N_0)`, and
    :math:`\min C_\text{llr} = C_\text{llr}(\hat\ell)`. Blocks of only negatives get
    :math:`\hat\ell = -\infty` and of only positives :math:`+\infty`; they contribute 0
    (the infinite LLR is only ever applied to trials of the class it favours). Invariant
    to strictly increasing transforms of the scores; :math:`\le` :func:`cllr`.
    """
    s, y = _prepare(llrs, labels)
    p = _points(s, y)
    fit, pos_in, neg_in = _pav(p)
    starts = fit.blocks[:-1]
    pos_b = np.add.reduceat(pos_in, starts)  # trials per PAV block, by class
    neg_b = np.add.reduceat(neg_in, starts)
    with np.errstate(divide="ignore"):
        # logit of the block posterior pos_b / (pos_b + neg_b), minus the prior log odds
        llr = (np.log(pos_b) - np.log(neg_b)) - (np.log(p.n_pos) - np.log(p.n_neg))
    mp = pos_b > 0
    mn = neg_b > 0
    tp = np.sum(pos_b[mp] * np.logaddexp(0.0, -llr[mp])) / p.n_pos
    tn = np.sum(neg_b[mn] * np.logaddexp(0.0, llr[mn])) / p.n_neg
    return float((tp + tn) / (2 * np.log(2)))
