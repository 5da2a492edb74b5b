"""Recognising Dask input, opening parquet paths/globs, and tree reductions.

Everything here is independent of the models: it turns what the user passed (a
``dask.dataframe.DataFrame``, a path or glob of parquet files) into a Dask DataFrame, and
combines per-partition summaries with a tree of ``split_every``-ary reductions

.. math::

    S = \\bigoplus_{j=1}^{P} s_j,\\qquad \\text{depth } \\lceil\\log_{k} P\\rceil,

so that no task ever holds more than ``k`` summaries and the client receives one.
"""

from __future__ import annotations

import glob as _glob
import os
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["DaskInputError", "is_dask_collection", "is_parquet_path", "as_dask_frame", "tree_reduce",
           "collect_columns"]


class DaskInputError(ValueError):
    """Dask/parquet input that cannot be used (names the path, column or partition)."""


def is_dask_collection(obj: Any) -> bool:
    """Whether ``obj`` is a Dask collection (DataFrame, Series, Array), by duck typing."""
    return hasattr(obj, "__dask_graph__") and hasattr(obj, "npartitions")


def is_parquet_path(obj: Any) -> bool:
    """Whether ``obj`` is a ``str``/``Path`` naming parquet data (a file, folder or glob)."""
    if not isinstance(obj, (str, os.PathLike)):
        return False
    s = str(obj)
    return s.endswith(".parquet") or s.endswith(".pq") or any(c in s for c in "*?[") or Path(s).is_dir()


def as_dask_frame(data: Any, columns: Sequence[str] | None = None) -> Any:
    """A ``dask.dataframe.DataFrame`` from a Dask DataFrame or a parquet path/glob/folder.

    Raises
    ------
    DaskInputError
        when the path matches no file, or ``data`` is neither.
    """
    import dask.dataframe as dd

    if is_dask_collection(data):
        if not hasattr(data, "columns"):
            raise DaskInputError(f"expected a Dask DataFrame, got a {type(data).__name__}")
        return data
    if isinstance(data, (str, os.PathLike)):
        s = str(data)
        if any(c in s for c in "*?["):
            if not _glob.glob(s):
                raise DaskInputError(f"no parquet file matches {s!r}")
        elif not Path(s).exists():
            raise DaskInputError(f"parquet path {s!r} does not exist")
        return dd.read_parquet(s, columns=list(columns) if columns else None)
    raise DaskInputError(f"expected a Dask DataFrame or a parquet path/glob, got {type(data).__name__}")


def tree_reduce(leaves: list, combine: Callable[[list], Any], split_every: int = 8) -> Any:
    """Combine delayed ``leaves`` with a tree of ``combine(list)`` tasks; returns one delayed."""
    from dask import delayed

    if not leaves:
        raise DaskInputError("no partitions to reduce")
    level = list(leaves)
    k = max(2, int(split_every))
    while len(level) > 1:
        level = [delayed(combine)(level[i:i + k]) if len(level[i:i + k]) > 1 else level[i]
                 for i in range(0, len(level), k)]
    return level[0]


def collect_columns(ddf: Any, columns: Sequence[str | None]) -> Any:
    """The named columns of a Dask DataFrame (those it has; ``None`` skipped) as one pandas
    DataFrame with a fresh ``RangeIndex`` (rows in partition order)."""
    cols = [c for c in dict.fromkeys(columns) if c is not None and c in ddf.columns]
    return ddf[cols].compute().reset_index(drop=True)
