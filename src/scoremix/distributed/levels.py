"""Pass 1 over a Dask DataFrame: the global factor levels of a model, in one pass.

For every factor column ``c`` of the formula the levels are the distinct non-missing values
on the *complete* rows (no missing value in any used column, R's ``na.omit``), merged over
partitions: ``L_c = ⋃_j L_{c,j}``.  Grouping interactions ``g1:g2`` need the set of
combinations actually present, so the distinct tuples of the columns of all interaction
groupings are merged the same way.  Row and missing-value counts come with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from scoremix.distributed.inputs import tree_reduce

__all__ = ["LevelScan", "is_factor_dtype", "scan_levels"]


def is_factor_dtype(dtype: Any) -> bool:
    """R's rule as used by the model frame: numeric (not bool) → numeric, all else a factor."""
    return not (pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype))


@dataclass
class LevelScan:
    """What one pass over the data found.

    Attributes
    ----------
    n_rows, n_complete:
        all rows, rows without a missing value in a used column.
    na_counts:
        missing values per used column (all rows).
    values:
        per factor column (outside interaction groupings): its distinct values.
    tuples:
        distinct rows of the interaction-grouping columns (``None`` without such groupings).
    categories:
        per categorical column, the union of the partitions' categories in first-seen order
        (Dask may not know them from the metadata, e.g. after reading parquet).
    """

    n_rows: int
    n_complete: int
    na_counts: dict[str, int]
    values: dict[str, np.ndarray] = field(default_factory=dict)
    tuples: pd.DataFrame | None = None
    categories: dict[str, list] = field(default_factory=dict)


def _union(arrays: list[np.ndarray]) -> np.ndarray:
    return pd.unique(np.concatenate(arrays)) if arrays else np.array([])


def _distinct(s: pd.Series) -> np.ndarray:
    """Distinct values of a column (categoricals through their codes: no object array)."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        codes = s.cat.codes.to_numpy()
        present = np.bincount(codes[codes >= 0], minlength=len(s.cat.categories)) > 0
        return np.asarray(s.cat.categories[present], dtype=object)
    return pd.unique(s).to_numpy() if hasattr(pd.unique(s), "to_numpy") else np.asarray(pd.unique(s))


def _scan_partition(part: pd.DataFrame, used: list[str], factors: list[str],
                    inter: list[str]) -> LevelScan:
    na = part[used].isna()
    complete = ~na.any(axis=1).to_numpy()
    sub = part.loc[complete]
    values = {c: _distinct(sub[c]) for c in factors if c not in inter}
    tuples = sub[inter].drop_duplicates() if inter else None
    cats = {c: list(part[c].cat.categories) for c in factors
            if isinstance(part[c].dtype, pd.CategoricalDtype)}
    return LevelScan(len(part), int(complete.sum()), {c: int(v) for c, v in na.sum().items()},
                     values, tuples, cats)


def _merge(scans: list[LevelScan]) -> LevelScan:
    first = scans[0]
    na = {c: sum(s.na_counts[c] for s in scans) for c in first.na_counts}
    values = {c: _union([s.values[c] for s in scans]) for c in first.values}
    tuples = None
    if first.tuples is not None:
        tuples = pd.concat([s.tuples for s in scans], ignore_index=True).drop_duplicates()
    cats = {c: list(dict.fromkeys(v for s in scans for v in s.categories[c]))
            for c in first.categories}
    return LevelScan(sum(s.n_rows for s in scans), sum(s.n_complete for s in scans), na, values,
                     tuples, cats)


def scan_levels(ddf: Any, used: list[str], factors: list[str], inter: list[str],
                split_every: int = 8) -> LevelScan:
    """Pass 1: levels, interaction tuples and counts of ``ddf`` (tree-reduced over partitions)."""
    import dask
    from dask import delayed

    leaves = [delayed(_scan_partition)(p, used, factors, inter) for p in ddf.to_delayed()]
    (out,) = dask.compute(tree_reduce(leaves, _merge, split_every))
    if out.tuples is not None:
        out.tuples = out.tuples.reset_index(drop=True)
    return out
