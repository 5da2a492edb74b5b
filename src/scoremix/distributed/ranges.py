r"""Score counts of Dask input, range-partitioned on the cluster: exact metrics with a small client.

The distinct scores :math:`t_1 < \dots < t_K` of all trials are split into contiguous
*ranges* :math:`R_1, \dots, R_M` (every copy of one score value falls in one range), each
held by a worker as an exact count table
:math:`\{(t_k, c^+_k, c^-_k) : t_k \in R_m\}` (:class:`~scoremix.distributed.scores.ScoreCounts`).
The client receives only per-range totals: with them the operating points of range
:math:`m` are

.. math::

    \#\{+ : s < t_k\} = P^+_{m} + \sum_{j < k,\, t_j \in R_m} c^+_j, \qquad
    P^+_m = \sum_{m' < m} \sum_{t \in R_{m'}} c^+(t)

(likewise for negatives), so a worker can evaluate any function of the global operating
points of its own range (:meth:`RangedCounts.map`) and return a few candidates; the client
combines them (:mod:`scoremix.metrics` does this for every EER definition and minDCF).

Pipeline: (1) per input partition, exact value counts (``count_partition``) kept on the
workers, and a sketch (row and class totals, ``4M`` evenly spaced distinct values) sent to
the client; (2) ``M − 1`` splitters at the weighted quantiles of the sketches' values;
(3) each partition's table is cut at the splitters and range :math:`m` merges its pieces
(a shuffle of count tables, no rows move); (4) per-range totals go to the client.

Memory: a worker holds count tables of its partitions and ranges (each about one partition's
distinct scores when ``M`` = number of partitions ``J``; ``J/M`` partitions' worth when ``J``
exceeds the default cap of 64 ranges, which bounds the shuffle to ``64·J`` pieces); the client
holds the sketches (``4·J·M`` numbers) and per-range totals, never anything that grows with
``N`` at fixed ``J``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from scoremix.distributed.inputs import tree_reduce
from scoremix.distributed.scores import ScoreCounts, check_totals, count_leaves, merge_counts

#: default cap on the number of ranges: the shuffle has (partitions × ranges) small pieces
MAX_RANGES = 64

__all__ = ["MAX_RANGES", "RangeInfo", "RangedCounts", "ranged_counts", "split_counts", "sketch_counts",
           "choose_splitters"]


@dataclass(frozen=True)
class RangeInfo:
    """Where one range sits among all distinct scores.

    ``pos_before``/``neg_before``: positive/negative trials scoring below the range;
    ``index_before``: distinct scores below it; ``n_pos``/``n_neg``/``n_distinct``: the totals
    of all trials; ``prev_counts``: ``(c⁺, c⁻)`` of the largest distinct score below the range
    (``None`` for the first non-empty range); ``next_score``: the smallest score above the range
    (``+inf`` for the last)."""

    pos_before: int
    neg_before: int
    index_before: int
    n_pos: int
    n_neg: int
    n_distinct: int
    prev_counts: tuple[int, int] | None
    next_score: float


def sketch_counts(c: ScoreCounts, n_samples: int) -> tuple:
    """``(n_distinct, n_pos, n_neg, samples, max_score)`` of one partition's count table:
    ``samples`` are ``n_samples`` distinct values evenly spaced in rank (each standing for
    ``n_distinct / n_samples`` distinct values)."""
    k = c.scores.size
    if k == 0:
        return 0, 0, 0, np.zeros(0), -np.inf
    idx = np.unique(np.linspace(0, k - 1, min(k, max(1, n_samples))).round().astype(np.int64))
    return k, int(c.n_pos.sum()), int(c.n_neg.sum()), c.scores[idx], float(c.scores[-1])


def choose_splitters(sketches: Sequence[tuple], n_ranges: int) -> np.ndarray:
    r"""``≤ n_ranges − 1`` distinct splitters :math:`σ_1 < σ_2 < …` at the weighted quantiles
    of the sketches' samples (weight of a sample = distinct values it stands for); range
    :math:`m` holds the scores in :math:`[σ_{m}, σ_{m+1})`."""
    vals, wts = [], []
    for k, _, _, samples, _ in sketches:
        if k:
            vals.append(samples)
            wts.append(np.full(samples.size, k / samples.size))
    if not vals or n_ranges <= 1:
        return np.zeros(0)
    v = np.concatenate(vals)
    w = np.concatenate(wts)
    order = np.argsort(v, kind="stable")
    v, cw = v[order], np.cumsum(w[order])
    targets = cw[-1] * np.arange(1, n_ranges) / n_ranges
    sp = v[np.minimum(np.searchsorted(cw, targets, side="left"), v.size - 1)]
    return np.unique(sp)


def split_counts(c: ScoreCounts, splitters: np.ndarray) -> list[ScoreCounts]:
    """Cut one count table at ``splitters``: piece ``m`` holds the scores in
    ``[σ_m, σ_{m+1})`` (``σ_0 = −∞``), so all copies of a value land in one piece."""
    cuts = np.searchsorted(c.scores, splitters, side="left")
    bounds = np.concatenate(([0], cuts, [c.scores.size]))
    return [ScoreCounts(c.scores[a:b].copy(), c.n_pos[a:b].copy(), c.n_neg[a:b].copy())
            for a, b in zip(bounds[:-1], bounds[1:])]


def _range_summary(c: ScoreCounts) -> tuple:
    if c.scores.size == 0:
        return 0, 0, 0, None, None
    return (int(c.scores.size), int(c.n_pos.sum()), int(c.n_neg.sum()),
            (float(c.scores[0]), int(c.n_pos[0]), int(c.n_neg[0])),
            (float(c.scores[-1]), int(c.n_pos[-1]), int(c.n_neg[-1])))


def _apply(c: ScoreCounts, info: RangeInfo, fn: Callable, args: tuple) -> Any:
    return fn(c, info, *args)


class RangedCounts:
    """Exact, range-partitioned score counts held on the cluster (see the module docstring).

    Attributes: ``n_pos``, ``n_neg`` (trials per class), ``n_distinct`` (distinct scores),
    ``infos`` (one :class:`RangeInfo` per non-empty range, ascending), ``max_score`` and
    ``last_counts`` (``(c⁺, c⁻)`` at the largest score).
    """

    def __init__(self, tables: list, summaries: list[tuple]) -> None:
        keep = [i for i, s in enumerate(summaries) if s[0]]
        self._tables = [tables[i] for i in keep]
        sums = [summaries[i] for i in keep]
        self.n_distinct = int(sum(s[0] for s in sums))
        self.n_pos = int(sum(s[1] for s in sums))
        self.n_neg = int(sum(s[2] for s in sums))
        self.max_score = sums[-1][4][0] if sums else -np.inf
        self.last_counts = (sums[-1][4][1], sums[-1][4][2]) if sums else (0, 0)
        infos, pb, nb, ib = [], 0, 0, 0
        for m, s in enumerate(sums):
            prev = (sums[m - 1][4][1], sums[m - 1][4][2]) if m else None
            nxt = sums[m + 1][3][0] if m + 1 < len(sums) else np.inf
            infos.append(RangeInfo(pb, nb, ib, self.n_pos, self.n_neg, self.n_distinct, prev, nxt))
            pb, nb, ib = pb + s[1], nb + s[2], ib + s[0]
        self.infos = infos

    @property
    def n_ranges(self) -> int:
        return len(self.infos)

    def map(self, fn: Callable[..., Any], *args: Any) -> list:
        """``[fn(table_m, info_m, *args) for every range m]``, each evaluated on the worker
        that holds range ``m``; the (small) results come back in ascending range order."""
        import dask
        from dask import delayed

        tasks = [delayed(_apply)(t, info, fn, args) for t, info in zip(self._tables, self.infos)]
        return list(dask.compute(*tasks))


def ranged_counts(scores: Any, labels: Any, positive: Any = None, allow_posinf: bool = True,
                  n_ranges: int | None = None) -> RangedCounts:
    """Range-partitioned exact counts of Dask ``scores`` and ``labels`` (Series or 1-D arrays
    with the same partitions), validated as the in-memory metrics validate their input (NaN,
    ``+inf`` when not allowed, one class only).  ``n_ranges``: number of ranges (default: the
    number of partitions, at most :data:`MAX_RANGES`)."""
    import dask
    from dask import delayed

    leaves = count_leaves(scores, labels, positive)
    M = max(1, int(n_ranges if n_ranges is not None else min(len(leaves), MAX_RANGES)))
    leaves = list(dask.persist(*leaves))
    sketches = dask.compute(*[delayed(sketch_counts)(c, 4 * M) for c in leaves])
    posinf = "+inf value(s)" if not allow_posinf and max(s[4] for s in sketches) == np.inf else None
    check_totals(sum(s[1] for s in sketches), sum(s[2] for s in sketches), posinf)
    splitters = choose_splitters(sketches, M)
    if splitters.size == 0:
        tables = [tree_reduce(leaves, merge_counts)]
    else:
        pieces = [delayed(split_counts, nout=splitters.size + 1)(c, splitters) for c in leaves]
        tables = [delayed(merge_counts)([p[m] for p in pieces]) for m in range(splitters.size + 1)]
    tables = list(dask.persist(*tables))
    summaries = list(dask.compute(*[delayed(_range_summary)(t) for t in tables]))
    del leaves
    return RangedCounts(tables, summaries)
