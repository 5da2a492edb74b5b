"""Exact score counts of Dask input for the detection metrics.

Every metric of :mod:`scoremix.metrics` is a function of the operating points at the
distinct scores ``t_1 < … < t_K``: the numbers of positive and negative trials at each
score.  Those are merged exactly over partitions,

.. math::

    c^{\\pm}(t) = \\sum_j \\#\\{i \\in P_j : s_i = t,\\ y_i = \\pm\\},

(per-partition value counts, merged with a tree of sorted unions), so EER, minDCF and the
DET curve computed from them equal the in-memory values exactly.  :func:`score_counts` brings
the merged table (every distinct score, 24 bytes each) to the client; the metrics use
:mod:`scoremix.distributed.ranges` instead, which keeps the tables on the workers split by
score range.  Partitions are never collected.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np
import pandas as pd

from scoremix.distributed.inputs import DaskInputError, is_dask_collection, tree_reduce
from scoremix.trials import NonFiniteScoreError, SingleClassError, label_to_binary

__all__ = ["ScoreCounts", "score_counts", "merge_counts", "count_partition", "count_leaves", "check_totals",
           "partitions_of"]


class ScoreCounts(NamedTuple):
    """Distinct scores ascending and the trials of each class at each score."""

    scores: np.ndarray
    n_pos: np.ndarray
    n_neg: np.ndarray


def count_partition(s: Any, labels: Any, positive: Any = None, index: int = 0) -> ScoreCounts:
    """Counts of one partition (NaN scores raise :class:`NonFiniteScoreError`)."""
    s = np.asarray(s, dtype=np.float64).ravel()
    y = label_to_binary(np.asarray(labels).ravel() if not isinstance(labels, pd.Series) else labels,
                        positive=positive, column="labels")
    if s.shape[0] != y.shape[0]:
        raise DaskInputError(f"partition {index}: scores has {s.shape[0]} values but labels has "
                             f"{y.shape[0]}")
    bad = np.isnan(s)
    if bad.any():
        raise NonFiniteScoreError(f"scores has {int(bad.sum())} NaN value(s) in partition {index} "
                                  f"(position(s) {np.flatnonzero(bad)[:5].tolist()})")
    u, inv = np.unique(s, return_inverse=True)
    inv = inv.ravel()
    pos = np.bincount(inv, weights=y, minlength=u.size).astype(np.int64)
    tot = np.bincount(inv, minlength=u.size).astype(np.int64)
    return ScoreCounts(u, pos, tot - pos)


def merge_counts(parts: Sequence[ScoreCounts]) -> ScoreCounts:
    """Exact union of count tables (sorted distinct scores, summed counts)."""
    parts = [p for p in parts if p is not None and p[0].size]
    if not parts:
        return ScoreCounts(np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64))
    if len(parts) == 1:
        return parts[0]
    u, inv = np.unique(np.concatenate([p[0] for p in parts]), return_inverse=True)
    inv = inv.ravel()
    pos = np.bincount(inv, weights=np.concatenate([p[1] for p in parts]), minlength=u.size)
    neg = np.bincount(inv, weights=np.concatenate([p[2] for p in parts]), minlength=u.size)
    return ScoreCounts(u, pos.astype(np.int64), neg.astype(np.int64))


def partitions_of(x: Any, what: str) -> list:
    """The partitions of a Dask Series/array as delayed objects (``what`` names it in errors)."""
    if not is_dask_collection(x):
        raise DaskInputError(f"{what} must be Dask too when the other one is (got {type(x).__name__})")
    return list(x.to_delayed().ravel()) if hasattr(x.to_delayed(), "ravel") else list(x.to_delayed())


def score_counts(scores: Any, labels: Any, positive: Any = None, allow_posinf: bool = True,
                 split_every: int = 8) -> ScoreCounts:
    """Exact :class:`ScoreCounts` of Dask ``scores`` and ``labels`` (Series or 1-D arrays
    with the same partitions), reduced on the cluster; validated as the in-memory metrics
    validate their input (NaN, ``+inf`` when not allowed, one class only)."""
    import dask
    from dask import delayed

    (c,) = dask.compute(tree_reduce(count_leaves(scores, labels, positive), merge_counts, split_every))
    posinf = (f"{int(c.n_pos[-1] + c.n_neg[-1])} +inf value(s)"
              if not allow_posinf and c.scores.size and c.scores[-1] == np.inf else None)
    check_totals(int(c.n_pos.sum()), int(c.n_neg.sum()), posinf)
    return c


def count_leaves(scores: Any, labels: Any, positive: Any = None) -> list:
    """One delayed :func:`count_partition` per partition of Dask ``scores`` and ``labels``
    (which must have the same number of partitions)."""
    from dask import delayed

    sp = partitions_of(scores, "scores")
    lp = partitions_of(labels, "labels")
    if len(sp) != len(lp):
        raise DaskInputError(f"scores has {len(sp)} partitions but labels has {len(lp)}; take both "
                             "from one Dask DataFrame")
    return [delayed(count_partition)(s, l, positive, i) for i, (s, l) in enumerate(zip(sp, lp))]


def check_totals(n_pos: int, n_neg: int, posinf: str | None = None) -> None:
    """The input checks of the in-memory metrics on class totals: no trials, ``+inf`` scores
    where not allowed (``posinf`` names them, e.g. ``"3 +inf value(s)"``), one class only."""
    if n_pos + n_neg == 0:
        raise DaskInputError("no trials: scores and labels are empty")
    if posinf is not None:
        raise NonFiniteScoreError(
            f"scores has {posinf}; no threshold rejects +inf under accept s >= threshold, "
            "so this metric needs finite (or -inf) scores; clip them to a large finite value")
    if n_pos == 0 or n_neg == 0:
        present = "negative" if n_pos == 0 else "positive"
        raise SingleClassError(f"only {present} trials ({n_pos + n_neg}) were given; the metric "
                               "needs both classes")
