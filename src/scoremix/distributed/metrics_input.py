"""Exact metrics of Dask input: the ``"metric_candidates"`` input adapter of :mod:`scoremix.metrics`.

Registered by :mod:`scoremix.distributed.adapters`; the metrics call it through
:func:`scoremix.adapters.adapter_for` and never import this layer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scoremix.distributed.ranges import ranged_counts
from scoremix.metrics import _Points, range_candidates

__all__ = ["dask_candidates", "is_dask_array"]


def is_dask_array(x: Any) -> bool:
    """A Dask collection with partitions (array, series or frame)."""
    return hasattr(x, "__dask_graph__") and hasattr(x, "npartitions")


def dask_candidates(scores: Any, labels: Any, kind: str, params: tuple = ()) -> Any:
    """Candidates of ``kind`` (see :func:`scoremix.metrics.range_candidates`) of Dask input, from exact score
    counts range-partitioned on the cluster (:func:`scoremix.distributed.ranges.ranged_counts`):
    the client receives per-range totals and a few points per range, never all distinct scores.
    Returns the union of the candidate points as :class:`_Points` (``"voxceleb"``: the EER and
    its threshold)."""
    rc = ranged_counts(scores, labels, allow_posinf=False)
    parts = rc.map(range_candidates, kind, params)
    if kind == "voxceleb":
        # roc_curve's added start point (0, 0) at threshold +inf comes first, then the ranges with
        # thresholds descending; the first minimum of |fnr - fpr| wins
        cands = [(abs(np.float64(1.0) - np.float64(0.0)), 1.0, np.inf)] + [q for q in parts[::-1] if q]
        i = int(np.argmin([c[0] for c in cands]))
        return cands[i][1], cands[i][2]
    thr, pb, nb = (np.concatenate([q[j] for q in parts]) for j in range(3))
    return _Points(thr, pb, nb, rc.n_pos, rc.n_neg)
