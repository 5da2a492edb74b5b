"""Atomic file writes: a file is either the complete new content or what was there before.

Every output file of scoremix (``fit --json``, ``simulate``, ``fairness --csv``, the study's
``report.html`` and tables) is written to a hidden temporary file in the target's folder
(``.<name>.tmp-<random>``, same file system), flushed and ``fsync``-ed, then moved over the
target with :func:`os.replace` (atomic on POSIX).  On any error (a full disk: ``ENOSPC``; an
interrupt) the temporary file is removed and the target is left as it was: no partial or
0-byte file, and ``--overwrite`` never destroys a complete earlier result.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pandas as pd

__all__ = ["atomic_path", "atomic_open", "write_text", "write_table", "TABLE_FORMATS", "table_format"]

#: suffix → format of :func:`write_table` (compressed CSV by pandas' inference on the suffix)
TABLE_FORMATS = {".csv": "csv", ".tsv": "tsv", ".txt": "csv", ".gz": "csv", ".bz2": "csv", ".xz": "csv",
                 ".zip": "csv", ".zst": "csv", ".parquet": "parquet", ".pq": "parquet", ".feather": "feather",
                 ".arrow": "feather"}


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; when the block ends normally it replaces ``path``
    (fsync, then ``os.replace``), on an exception it is deleted and ``path`` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)  # mkstemp's 0600 → the usual mode of a new file
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """``open(path, mode)`` that replaces ``path`` only when the block completes."""
    with atomic_path(path) as tmp:
        with open(tmp, mode, encoding=None if "b" in mode else encoding) as fh:
            yield fh


def write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically; returns ``path``."""
    with atomic_open(path, "w", encoding=encoding) as fh:
        fh.write(text)
    return Path(path)


def table_format(path: str | Path) -> str:
    """The format :func:`write_table` uses for ``path`` (by its last suffix); a
    :class:`ValueError` names the supported ones for any other suffix."""
    suffix = Path(path).suffix.lower()
    if suffix not in TABLE_FORMATS:
        raise ValueError(f"{path}: unknown table format {suffix or '(no suffix)'!r}; use one of "
                         f"{', '.join(sorted(TABLE_FORMATS))}")
    return TABLE_FORMATS[suffix]


def write_table(df: pd.DataFrame, path: str | Path) -> Path:
    """Write ``df`` atomically in the format of ``path``'s suffix: CSV (``.csv``, ``.txt``;
    compressed for ``.gz/.bz2/.xz/.zip/.zst``), TSV, parquet or feather (Arrow IPC)."""
    path = Path(path)
    fmt = table_format(path)
    with atomic_path(path) as tmp:
        if fmt == "parquet":
            df.to_parquet(tmp, index=False)
        elif fmt == "feather":
            df.reset_index(drop=True).to_feather(tmp)
        else:
            comp: Any = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd"}.get(path.suffix.lower())
            if path.suffix.lower() == ".zip":  # the member is named after the target, not the temporary file
                comp = {"method": "zip", "archive_name": path.name[:-4]}
            df.to_csv(tmp, index=False, sep="\t" if fmt == "tsv" else ",", compression=comp)
    return path
