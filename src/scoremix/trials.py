"""Trial tables: loading, label normalisation and validation.

A *trial* is one detection decision: a score :math:`s_i` (higher = more positive) and a
binary class :math:`y_i \\in \\{0, 1\\}` with :math:`y_i = 1` for the positive class
(target / bona fide / genuine / real) and :math:`y_i = 0` for the negative class
(nontarget / spoof / impostor / fake).

:func:`load_trials` turns a DataFrame or a CSV/TSV/parquet file into a validated table
with a float64 ``score`` column, the original ``label`` values and an int8 ``y`` column.
:func:`read_asvspoof_cm` and :func:`read_kaldi_trials` read the two common key + score
file pairs. Every problem raises a specific :class:`TrialTableError` (a ``ValueError``)
that names the column, the offending values and the first offending rows; nothing is
dropped silently.
"""

from __future__ import annotations

import gzip
import io
import numbers
import re
import zlib
from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "TrialTableError",
    "LabelError",
    "MissingColumnError",
    "ColumnConflictError",
    "NonNumericScoreError",
    "NonFiniteScoreError",
    "SingleClassError",
    "DuplicateTrialError",
    "EmptyTableError",
    "UnmatchedTrialError",
    "CorruptFileError",
    "SeparatorError",
    "MalformedLineError",
    "DuplicateColumnError",
    "label_to_binary",
    "load_trials",
    "read_table",
    "read_asvspoof_cm",
    "read_kaldi_trials",
    "POSITIVE_LABELS",
    "NEGATIVE_LABELS",
]

_SHOW = 5  # how many offending values / rows an error message lists


# ----------------------------------------------------------------------------- errors
class TrialTableError(ValueError):
    """Base class of every trial-table problem (a ``ValueError``)."""


class LabelError(TrialTableError):
    """Label values that cannot be mapped to positive (1) / negative (0)."""


class MissingColumnError(TrialTableError, KeyError):
    """A requested column is not in the table."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ColumnConflictError(TrialTableError):
    """Renaming to ``score`` / ``label`` / ``y`` would clash with an existing column."""


class NonNumericScoreError(TrialTableError):
    """Score values that are not numbers."""


class NonFiniteScoreError(TrialTableError):
    """NaN or infinite scores."""


class SingleClassError(TrialTableError):
    """Only positive or only negative trials are present."""


class DuplicateTrialError(TrialTableError):
    """The same trial id occurs more than once."""


class EmptyTableError(TrialTableError):
    """The table has no rows."""


class UnmatchedTrialError(TrialTableError):
    """Key (protocol) and score files do not contain the same trials."""


# ----------------------------------------------------------------------------- labels
#: Normalised spellings (lower case, spaces / hyphens / underscores removed) of each
#: label vocabulary, as ``(positive values, negative values)``.
_VOCABULARIES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "target/nontarget": (frozenset({"target", "tar"}), frozenset({"nontarget", "nontar"})),
    "bonafide/spoof": (frozenset({"bonafide"}), frozenset({"spoof", "spoofed"})),
    "genuine/impostor": (frozenset({"genuine"}), frozenset({"impostor", "imposter"})),
    "real/fake": (frozenset({"real"}), frozenset({"fake"})),
    "1/0": (frozenset({"1", "1.0", "true"}), frozenset({"0", "0.0", "false"})),
}
#: vocabularies whose words are used together in standard protocols: target/impostor (speaker
#: verification), genuine/spoof (ASVspoof 2017); accepted when there is one positive spelling
_COMPATIBLE_PAIRS: frozenset[frozenset[str]] = frozenset({
    frozenset({"target/nontarget", "genuine/impostor"}),
    frozenset({"genuine/impostor", "bonafide/spoof"}),
})
POSITIVE_LABELS: frozenset[str] = frozenset().union(*(p for p, _ in _VOCABULARIES.values()))
NEGATIVE_LABELS: frozenset[str] = frozenset().union(*(n for _, n in _VOCABULARIES.values()))


def _norm_label(value: Any) -> str | None:
    """Normalised spelling of one label value, or ``None`` for missing values."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, numbers.Number):
        if isinstance(value, float) and np.isnan(value):
            return None
        if value == 1:
            return "1"
        if value == 0:
            return "0"
        if isinstance(value, numbers.Real) and float(value).is_integer():
            return str(int(value))  # 2, 2.0 and np.int64(2) all read "2"
        return repr(value)
    text = str(value).strip().casefold()
    for ch in (" ", "-", "_"):
        text = text.replace(ch, "")
    return text


def _vocabulary_of(norm: str) -> tuple[str, int] | None:
    for name, (pos, neg) in _VOCABULARIES.items():
        if norm in pos:
            return name, 1
        if norm in neg:
            return name, 0
    return None


def _same_value(a: Any, b: Any) -> bool:
    """``a == b`` as a plain bool (False where the comparison is not a bool)."""
    try:
        eq = a == b
    except (TypeError, ValueError):
        return False
    return isinstance(eq, (bool, np.bool_)) and bool(eq)


def _list(values: Sequence[Any], limit: int = _SHOW) -> str:
    shown = ", ".join(repr(v) for v in list(values)[:limit])
    return shown + (f", ... ({len(values)} in all)" if len(values) > limit else "")


def label_to_binary(values: Any, positive: Any = None, column: str = "label") -> np.ndarray:
    """Map class labels to 1 (positive) / 0 (negative).

    Without ``positive`` the values must all come from one of the known vocabularies,
    compared case-insensitively after removing spaces, hyphens and underscores:

    ======================  ===========================  ==========================
    vocabulary              positive (1)                 negative (0)
    ======================  ===========================  ==========================
    target/nontarget        target, tar                  nontarget (non-target), nontar
    bonafide/spoof          bonafide (bona fide, ...)    spoof, spoofed
    genuine/impostor        genuine                      impostor, imposter
    real/fake               real                         fake
    1/0                     1, 1.0, True, "true"         0, 0.0, False, "false"
    ======================  ===========================  ==========================

    With ``positive`` given, :math:`y_i = 1` where the value equals ``positive`` and
    :math:`y_i = 0` for every other value; use this for tables with three or more label
    values (e.g. target / nontarget / spoof). Values are compared by their normalised
    spelling as above (so ``"Bona Fide"`` matches ``"bonafide"``), numbers by value and
    across types (``positive="1"``, as typed on a command line, matches an integer 1 /
    float 1.0 column; ``positive=True`` matches ``"true"``).

    Parameters
    ----------
    values : array-like
        Label values (list, ndarray, Series, Categorical); bool and 0/1 numeric arrays
        take a fast path.
    positive : scalar, optional
        The value that marks the positive class.
    column : str
        Column name used in error messages.

    Returns
    -------
    numpy.ndarray
        int8 array of 1/0, same length as ``values``.

    Raises
    ------
    LabelError
        Missing labels, values outside the known vocabularies, labels mixing two
        vocabularies (e.g. ``target`` with ``spoof``), or a ``positive`` value that
        does not occur.
    """
    if isinstance(values, (pd.Series, pd.Index, pd.Categorical)):
        arr = values
    else:
        arr = np.asarray(values) if not isinstance(values, np.ndarray) else values
        if arr.ndim != 1:
            arr = np.ravel(arr)

    dtype = getattr(arr, "dtype", None)
    if positive is None and dtype is not None:
        if dtype == bool:
            return np.asarray(arr, dtype=np.int8)
        if isinstance(dtype, np.dtype) and dtype.kind in "iuf":
            raw = np.asarray(arr)
            ok = (raw == 0) | (raw == 1)
            if ok.all():
                return raw.astype(np.int8)

    codes, uniques = pd.factorize(arr, use_na_sentinel=True)
    codes = np.asarray(codes)
    uniques = list(np.asarray(uniques, dtype=object))
    missing = np.flatnonzero(codes < 0)
    if missing.size:
        raise LabelError(
            f"column {column!r} has {missing.size} missing label value(s) at row position(s) "
            f"{_list(missing.tolist())}; fill or remove those rows first"
        )
    norms = [_norm_label(u) for u in uniques]
    if any(n is None for n in norms):  # NaN objects that factorize kept as values
        bad = [i for i, n in enumerate(norms) if n is None]
        rows = np.flatnonzero(np.isin(codes, bad))
        raise LabelError(
            f"column {column!r} has {rows.size} missing label value(s) at row position(s) "
            f"{_list(rows.tolist())}; fill or remove those rows first"
        )

    if positive is not None:
        # Compare normalised spellings, so that positive="1" (e.g. from a command line)
        # matches an integer 0/1 column, positive=1 matches "1", and "Bona Fide" matches
        # "bonafide"; True/False normalise to "true"/"false".
        pnorm = _norm_label(positive)
        mapped = np.array(
            [1 if (n == pnorm or _same_value(u, positive)) else 0 for u, n in zip(uniques, norms)],
            dtype=np.int8,
        )
        if mapped.size and not mapped.any():
            raise LabelError(
                f"positive={positive!r} does not occur in column {column!r}; "
                f"values found: {_list(sorted(map(str, uniques)))}"
            )
        return mapped[codes] if codes.size else np.zeros(0, dtype=np.int8)

    found: dict[str, list[Any]] = {}
    mapped_list: list[int] = []
    unknown: list[Any] = []
    for u, n in zip(uniques, norms):
        hit = _vocabulary_of(n)  # type: ignore[arg-type]
        if hit is None:
            unknown.append(u)
            mapped_list.append(0)
        else:
            found.setdefault(hit[0], []).append(u)
            mapped_list.append(hit[1])
    if unknown:
        bad_codes = [i for i, u in enumerate(uniques) if any(u is v for v in unknown)]
        rows = np.flatnonzero(np.isin(codes, bad_codes))
        raise LabelError(
            f"column {column!r} has label value(s) that are not a known positive/negative "
            f"label: {_list(unknown)} ({rows.size} row(s), first at position(s) "
            f"{_list(rows[:_SHOW].tolist())}). Known: target/nontarget, bonafide/spoof, "
            f"genuine/impostor, real/fake, 1/0, True/False (case-insensitive). "
            f"Pass positive=<value> to name the positive class explicitly (every other "
            f"value is then negative), or recode the column."
        )
    positives = {_norm_label(v) for vs in found.values() for v in vs if _vocabulary_of(_norm_label(v))[1] == 1}
    if len(found) > 1 and len(positives) == 1 and frozenset(found) in _COMPATIBLE_PAIRS:
        found = {}  # target/impostor, genuine/spoof: one positive spelling, nothing ambiguous
    if len(found) > 1:
        parts = "; ".join(f"{k}: {_list(v)}" for k, v in found.items())
        raise LabelError(
            f"column {column!r} mixes label vocabularies ({parts}); pass positive=<value> "
            f"to say which value is the positive class (all others become negative)"
        )
    mapped = np.array(mapped_list, dtype=np.int8)
    return mapped[codes] if codes.size else np.zeros(0, dtype=np.int8)


# ----------------------------------------------------------------------------- reading
#: compression suffixes read transparently (pandas infers the same from the name)
_COMPRESSED = (".gz", ".bz2", ".xz", ".zip", ".zst")


def _strip_compression(name: str) -> str:
    for suffix in _COMPRESSED:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _zstandard(path: Any) -> Any:
    """The optional ``zstandard`` module for a ``.zst`` table (pandas needs it too), else a named
    error saying what to install."""
    try:
        import zstandard  # type: ignore[import-not-found]
    except ImportError:
        raise CorruptFileError(f"{path}: reading a .zst table needs the 'zstandard' package "
                               "(pip install zstandard), or decompress the file first") from None
    return zstandard


def _open_binary(path: Path | io.BytesIO) -> Any:
    """The decompressed bytes of ``path`` (by its compression suffix) as a binary stream."""
    if isinstance(path, io.BytesIO):
        path.seek(0)
        return path
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.open(path, "rb")
    if name.endswith(".bz2"):
        import bz2

        return bz2.open(path, "rb")
    if name.endswith(".xz"):
        import lzma

        return lzma.open(path, "rb")
    if name.endswith(".zip"):
        import zipfile

        z = zipfile.ZipFile(path)
        members = [m for m in z.namelist() if not m.endswith("/")]
        if len(members) != 1:
            raise CorruptFileError(f"{path}: a .zip trial table must hold exactly one file; it holds "
                                   f"{len(members)}: {members[:5]}")
        return z.open(members[0])
    if name.endswith(".zst"):
        return _zstandard(path).open(path, "rb")
    return open(path, "rb")


def _open_text(path: Path | io.BytesIO):
    return io.TextIOWrapper(_open_binary(path), encoding="utf-8", errors="replace")


def _sniff_sep(path: Path, data: io.BytesIO | None = None) -> str:
    """Separator from the file name (compression suffix ignored), else from the first non-empty
    line (read from ``data`` when the file was read into memory, e.g. ``/dev/stdin``)."""
    name = _strip_compression(path.name.lower())
    if name.endswith((".tsv", ".tab")):
        return "\t"
    if name.endswith(".csv"):
        return ","
    fh = _open_text(data if data is not None else path)
    try:
        line = ""
        for line in fh:
            if line.strip():
                break
    finally:
        if data is None:
            fh.close()
        else:
            fh.detach()
    if "\t" in line:
        return "\t"
    for sep in (",", ";", "|"):
        if sep in line:
            return sep
    return r"\s+"


class CorruptFileError(TrialTableError):
    """A table file that cannot be decoded: not gzip despite ``.gz``, a truncated or damaged
    gzip stream, or bytes that are not UTF-8; the message names the file and the byte/line."""


class SeparatorError(TrialTableError):
    """A text table that parsed into one column because its separator is another one."""


_GZIP_MAGIC = b"\x1f\x8b"


def _raw_lines(path: Path) -> Any:
    """The (decompressed) bytes of ``path`` line by line."""
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")


def _check_gzip(path: Path) -> None:
    """A ``.gz`` name must hold a gzip stream, and the stream must decompress to its end."""
    with open(path, "rb") as fh:
        head = fh.read(2)
    if head != _GZIP_MAGIC:
        raise CorruptFileError(f"{path}: the name ends in .gz but the file is not gzip-compressed (it starts "
                               f"with {head!r}); rename it without .gz, or compress it with gzip")
    n_bytes, n_lines = 0, 0
    try:
        with gzip.open(path, "rb") as fh:
            while chunk := fh.read1(1 << 16):
                n_bytes += len(chunk)
                n_lines += chunk.count(b"\n")
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
        raise CorruptFileError(f"{path}: the gzip stream is damaged or truncated after {n_bytes} decompressed "
                               f"byte(s) (line {n_lines + 1}): {exc}; the file is incomplete: copy or download "
                               f"it again") from None


def _decode_error(path: Path, encoding: str) -> CorruptFileError:
    """Where ``path`` stops being ``encoding``: 1-based line and 0-based byte offset."""
    offset = 0
    with _raw_lines(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            try:
                line.decode(encoding)
            except UnicodeDecodeError as exc:
                bad = line[exc.start:exc.end]
                return CorruptFileError(
                    f"{path}: line {lineno} (byte {offset + exc.start}) is not valid {encoding}: {bad!r}; "
                    f"pass encoding='latin-1' (or the file's encoding) to read it")
            offset += len(line)
    return CorruptFileError(f"{path}: not valid {encoding}; pass encoding= the file's encoding")


def read_table(source: str | Path, sep: str | None = None, **read_kw: Any) -> pd.DataFrame:
    """Read a table file with named errors: parquet by extension, else CSV/TSV/whitespace text
    (optionally ``.gz``), separator from ``sep``, the extension or the first line (see
    :func:`load_trials`).

    Raises :class:`CorruptFileError` (not gzip despite ``.gz``, truncated gzip, not UTF-8 —
    naming the file and the line/byte), :class:`SeparatorError` (a ``.csv`` whose one column
    holds ``;``, tabs or ``|`` — suggesting ``sep=``), :class:`EmptyTableError`, and
    ``FileNotFoundError``.
    """
    path = Path(source)
    if not path.exists():
        raise FileNotFoundError(f"trial table {str(path)!r} does not exist")
    name = path.name.lower()
    if path.is_dir():
        if not any(p.suffix.lower() in (".parquet", ".pq", ".parq") for p in path.rglob("*") if p.is_file()):
            raise TrialTableError(f"{path}: is a folder without parquet files; give a table file (CSV/TSV, "
                                  "compressed or not, or parquet) or a folder of parquet files (a partitioned "
                                  "data set)")
        pq_kw = {k: v for k, v in read_kw.items() if k in ("columns", "engine", "filters")}
        return pd.read_parquet(path, **pq_kw)
    if name.endswith((".parquet", ".pq", ".parq")):
        # CSV reader options (low_memory, encoding, …) do not apply to parquet
        pq_kw = {k: v for k, v in read_kw.items() if k in ("columns", "engine", "filters")}
        return pd.read_parquet(path, **pq_kw)
    if name.endswith(".gz"):
        _check_gzip(path)
    given = sep is not None
    # a pipe, FIFO or terminal (/dev/stdin) can be read once only: read it into memory, then sniff
    # the separator from the copy and parse the copy (sniffing the stream itself loses its header)
    data = None if path.is_file() else io.BytesIO(path.read_bytes())
    if path.name.lower().endswith(".zst"):
        _zstandard(path)
    if sep is None:
        sep = _sniff_sep(path, data)
    engine = read_kw.pop("engine", None)
    if engine is None:
        engine = "python" if len(sep) > 1 and sep != r"\s+" else "c"
    try:
        if data is not None:
            data.seek(0)
        df = pd.read_csv(data if data is not None else path, sep=sep, engine=engine, **read_kw)
    except pd.errors.EmptyDataError as exc:
        raise EmptyTableError(f"trial table {str(path)!r} is empty") from exc
    except UnicodeDecodeError:
        raise _decode_error(path, read_kw.get("encoding") or "utf-8") from None
    except pd.errors.ParserError as exc:
        raise _parser_error(path, exc) from None
    _check_unique_header(df, path)
    if not given and df.shape[1] == 1:
        header = str(df.columns[0])
        for other, label in ((";", "';'"), ("\t", "'\\t'"), ("|", "'|'")):
            if other in header and other != sep:
                comma = other == ";" and _decimal_commas(path, data)
                extra = ", decimal=','" if comma else ""
                raise SeparatorError(
                    f"{path}: read as a single column {header[:60]!r} with separator {sep!r}, but the header "
                    f"holds {label}: pass sep={label}{extra} (e.g. load_trials(path, sep={label}{extra}))"
                    + (": the values use decimal commas" if comma else ""))
    return df


def _decimal_commas(path: Path, data: io.BytesIO | None) -> bool:
    """Whether the first lines after the header hold numbers with a decimal comma (``0,5``)."""
    fh = _open_text(data if data is not None else path)
    try:
        lines = [ln for _, ln in zip(range(21), fh)][1:]
    finally:
        if data is None:
            fh.close()
        else:
            fh.detach()
    return any(re.search(r"(^|;)\s*[-+]?\d*,\d+\s*(;|$)", ln.strip()) for ln in lines)


class MalformedLineError(TrialTableError):
    """A line of a text table with another number of fields than the header (pandas'
    ``ParserError``), named by file and line number."""


class DuplicateColumnError(TrialTableError):
    """A column name that occurs more than once in the header (or in a DataFrame)."""


_RAGGED = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")


def _parser_error(path: Path, exc: Exception) -> TrialTableError:
    m = _RAGGED.search(str(exc))
    if m is None:
        return MalformedLineError(f"{path}: cannot be parsed as a table: {' '.join(str(exc).split())}")
    want, line, saw = (int(g) for g in m.groups())
    return MalformedLineError(f"{path}: line {line} has {saw} fields, the header has {want}; fix or remove that "
                              f"line (a separator inside a value needs quotes)")


def _check_unique_header(df: pd.DataFrame, path: Path) -> None:
    """pandas renames a repeated header name ``x`` to ``x.1``, ``x.2``: refuse it by name."""
    names = [str(c) for c in df.columns]
    for c in names:
        k = 1
        while f"{c}.{k}" in names:
            k += 1
        if k > 1 and not re.fullmatch(r".*\.\d+", c):
            raise DuplicateColumnError(f"{path}: column {c!r} appears {k} times in the header (pandas renamed the "
                                       f"others to {', '.join(f'{c}.{j}' for j in range(1, k))}); keep one of "
                                       "them or give them distinct names")


def _rows(mask: np.ndarray) -> list[int]:
    return np.flatnonzero(mask)[:_SHOW].tolist()


# ----------------------------------------------------------------------------- validation
def _require_columns(df: pd.DataFrame, columns: Iterable[Hashable], role: str) -> None:
    available = list(df.columns)
    for col in columns:
        if col not in df.columns:
            raise MissingColumnError(
                f"{role} column {col!r} is not in the table; available columns: "
                f"{', '.join(map(repr, available))}"
            )


def _score_to_float(series: pd.Series, column: str) -> np.ndarray:
    numeric = pd.to_numeric(series, errors="coerce")
    values = numeric.to_numpy(dtype=np.float64, na_value=np.nan)
    coerced = np.isnan(values) & series.notna().to_numpy()
    if coerced.any():
        bad = series[coerced].iloc[:_SHOW].tolist()
        comma = all(isinstance(v, str) and re.fullmatch(r"\s*[-+]?\d*,\d+([eE][-+]?\d+)?\s*", v) for v in bad)
        hint = (" — they look like numbers with a decimal comma: pass decimal=',' (e.g. "
                "load_trials(path, sep=';', decimal=','))" if comma else "")
        raise NonNumericScoreError(
            f"score column {column!r} has {int(coerced.sum())} non-numeric value(s), e.g. "
            f"{_list(bad)} at row position(s) {_rows(coerced)}{hint}"
        )
    bad_mask = ~np.isfinite(values)
    if bad_mask.any():
        n_nan = int(np.isnan(values).sum())
        n_inf = int(bad_mask.sum()) - n_nan
        raise NonFiniteScoreError(
            f"score column {column!r} has {int(bad_mask.sum())} non-finite value(s) "
            f"({n_nan} NaN/missing, {n_inf} infinite) at row position(s) {_rows(bad_mask)}"
            f"{' ...' if bad_mask.sum() > _SHOW else ''}; "
            + (f"fix or fill the missing ones{' first; ' if n_inf else ''}" if n_nan else "")
            + ("the infinite ones are saturated scores (e.g. logits of probabilities 0 and 1) and are valid "
               "trials: keep them — error rates depend only on the order of the scores, so replace -inf/+inf by "
               "a value below/above every finite score, or fit a transformation model (transform='monotone'), "
               "which takes them as they are; dropping them biases the error rates" if n_inf else "")
        )
    return values


def _check_classes(y: np.ndarray, labels: pd.Series, column: str) -> None:
    n_pos = int(y.sum())
    n_neg = int(y.size - n_pos)
    if n_pos == 0 or n_neg == 0:
        present = "positive" if n_neg == 0 else "negative"
        missing = "negative" if n_neg == 0 else "positive"
        values = _list(sorted(map(str, pd.unique(labels))))
        raise SingleClassError(
            f"only {present} trials are present ({y.size} trials, label values {values} in "
            f"column {column!r}); no {missing} trials. Detection metrics need both classes"
        )


def _check_duplicates(df: pd.DataFrame, trial_id: str | Sequence[str]) -> None:
    cols = [trial_id] if isinstance(trial_id, str) else list(trial_id)
    _require_columns(df, cols, "trial id")
    dup = df.duplicated(subset=cols, keep=False).to_numpy()
    if dup.any():
        first = df.loc[dup, cols].drop_duplicates().head(_SHOW)
        ids = [tuple(r) if len(cols) > 1 else r[0] for r in first.itertuples(index=False)]
        n_ids = int(df.loc[dup, cols].drop_duplicates().shape[0])
        raise DuplicateTrialError(
            f"trial id {'/'.join(cols)!s} has {n_ids} duplicated value(s) on {int(dup.sum())} "
            f"rows, e.g. {_list(ids)} (row positions {_rows(dup)})"
        )


def load_trials(
    source: pd.DataFrame | str | Path,
    score: str = "score",
    label: str = "label",
    positive: Any = None,
    trial_id: str | Sequence[str] | None = None,
    sep: str | None = None,
    **read_kw: Any,
) -> pd.DataFrame:
    """Load and validate a trial table.

    Parameters
    ----------
    source : DataFrame, str or Path
        A DataFrame (copied, never modified) or a file: CSV / TSV / whitespace separated
        text (optionally ``.gz``), or parquet (``.parquet``, ``.pq``). The separator comes
        from ``sep``, else from the extension (``.csv`` → ``,``; ``.tsv``/``.tab`` → tab),
        else from the first line (tab, ``,``, ``;``, ``|``, else runs of white space).
    score, label : str
        Names of the score and label columns.
    positive : scalar, optional
        Label value of the positive class (see :func:`label_to_binary`).
    trial_id : str or sequence of str, optional
        Column(s) identifying a trial; duplicates are an error.
    sep : str, optional
        Explicit separator for text files.
    **read_kw
        Passed to :func:`pandas.read_csv` / :func:`pandas.read_parquet`.

    Returns
    -------
    pandas.DataFrame
        Every input column, in input order and with the input index, except that the
        score column is renamed ``score`` (float64) and the label column ``label`` (the
        original label values), plus an int8 column ``y``: 1 for positive, 0 for negative
        trials.

    Raises
    ------
    EmptyTableError, MissingColumnError, ColumnConflictError, NonNumericScoreError,
    NonFiniteScoreError, LabelError, SingleClassError, DuplicateTrialError
        All subclasses of :class:`TrialTableError` (a ``ValueError``).
    """
    if isinstance(source, pd.DataFrame):
        if read_kw:
            raise TypeError(f"read options {sorted(read_kw)} only apply when source is a file")
        df = source.copy()
    elif isinstance(source, (str, Path)):
        df = read_table(source, sep, **read_kw)
    else:
        raise TypeError(f"source must be a DataFrame or a path, not {type(source).__name__}")

    dup = df.columns[df.columns.duplicated()]
    if len(dup):
        c = dup[0]
        raise DuplicateColumnError(f"column {c!r} appears {int((df.columns == c).sum())} times in the table; keep "
                                   "one of them or give them distinct names")
    if df.shape[0] == 0:
        raise EmptyTableError(
            f"the trial table has no rows (columns: {', '.join(map(repr, df.columns))})"
        )
    _require_columns(df, [score], "score")
    _require_columns(df, [label], "label")
    if score == label:
        raise ColumnConflictError(f"score and label are the same column {score!r}")
    for new, old in (("score", score), ("label", label)):
        if old != new and new in df.columns:
            raise ColumnConflictError(
                f"cannot rename {old!r} to {new!r}: the table already has a column {new!r}; "
                f"rename or drop it first"
            )
    scores = _score_to_float(df[score], score)
    y = label_to_binary(df[label], positive=positive, column=label)
    _check_classes(y, df[label], label)
    if "y" in df.columns and label != "y":
        # A table written by scoremix (simulate, demo) already carries y: accept it when it
        # agrees with the labels, refuse it when it does not.
        existing = pd.to_numeric(df["y"], errors="coerce").to_numpy()
        if not np.array_equal(existing, y):
            bad = np.flatnonzero(existing != y)[:_SHOW].tolist()
            raise ColumnConflictError(
                "the table already has a column 'y' (the output's binary class column) that "
                f"disagrees with the labels in {label!r} at rows {bad}; rename or drop it first, "
                "or pass label='y'"
            )
    if trial_id is not None:
        _check_duplicates(df, trial_id)

    df = df.rename(columns={score: "score", label: "label"})
    df["score"] = scores
    df["y"] = y
    return df


# ----------------------------------------------------------------------------- readers
def _read_ws(path: str | Path, what: str, names: Sequence[str] | None = None,
             layout: str | None = None) -> pd.DataFrame:
    """Read a whitespace-separated file of strings; with ``names``, require exactly that many
    fields per line (``layout`` describes them in the error) and name the columns."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{what} {str(path)!r} does not exist")
    try:
        df = pd.read_csv(path, sep=r"\s+", header=None, dtype=str, engine="c")
    except pd.errors.EmptyDataError as exc:
        raise EmptyTableError(f"{what} {str(path)!r} is empty") from exc
    if names is not None:
        if df.shape[1] != len(names):
            raise TrialTableError(
                f"{what} {str(path)!r} has {df.shape[1]} fields per line; expected "
                f"{len(names)} ({layout or ' '.join(names)})"
            )
        df.columns = list(names)
    return df


def _unmatched(key: pd.Series, other: pd.Series, what: str, key_name: str, other_name: str) -> None:
    # object dtype: pandas' isin on Arrow-backed strings loops in Python (10x slower)
    miss = ~key.astype(object).isin(other.astype(object))
    if miss.any():
        ids = key[miss].iloc[:_SHOW].tolist()
        raise UnmatchedTrialError(
            f"{int(miss.sum())} {what} in the {key_name} have no line in the {other_name}, "
            f"e.g. {_list(ids)}"
        )


def read_asvspoof_cm(
    protocol_path: str | Path, score_path: str | Path, require_all: bool = True
) -> pd.DataFrame:
    """Read an ASVspoof 2019/2021 countermeasure protocol and a score file.

    Protocol lines are white-space separated. The 2019 format is
    ``speaker utt - attack label``; the wider 2021 keys (``speaker utt codec ...
    attack label ...``) are also accepted: the label is the last field whose values
    are all ``bonafide``/``spoof`` and the attack is the field before it; the remaining fields are kept as ``field3``, ``field4``, ... (1-based position).
    Score files are ``utt score`` or ``utt attack label score``: the first field is the
    utterance id and the last the score; in the 4-field form the label must agree with
    the protocol.

    Parameters
    ----------
    protocol_path, score_path : str or Path
    require_all : bool
        If True (default) every protocol utterance needs a score. If False, protocol
        utterances without a score are left out (e.g. scoring a subset); score lines
        for utterances not in the protocol are always an error.

    Returns
    -------
    pandas.DataFrame
        As :func:`load_trials`: columns ``speaker, utt, attack, label, score, y`` (plus
        extra protocol fields), in protocol order; ``y = 1`` for bona fide.

    Raises
    ------
    UnmatchedTrialError, DuplicateTrialError, LabelError, TrialTableError
    """
    proto = _read_ws(protocol_path, "protocol file")
    if proto.shape[1] < 5:
        raise TrialTableError(
            f"protocol file {str(protocol_path)!r} has {proto.shape[1]} fields per line; "
            f"expected at least 5 (speaker utt - attack label)"
        )
    label_col = None
    for j in range(2, proto.shape[1]):  # the last field holding only bonafide/spoof
        col = proto[j].str.strip().str.casefold().astype(object)
        if col.isin(["bonafide", "spoof"]).all():
            label_col = j
    if label_col is None or label_col < 3:
        raise TrialTableError(
            f"protocol file {str(protocol_path)!r}: no field (from the 4th on) holds only "
            f"'bonafide'/'spoof' labels; expected 'speaker utt - attack label'"
        )
    names = {0: "speaker", 1: "utt", label_col - 1: "attack", label_col: "label"}
    proto = proto.rename(columns={j: names.get(j, f"field{j + 1}") for j in proto.columns})
    if proto.shape[1] == 5 and "field3" in proto.columns:
        proto = proto.drop(columns="field3")  # the 2019 '-' placeholder
    _check_duplicates(proto, "utt")

    sc = _read_ws(score_path, "score file")
    if sc.shape[1] not in (2, 4):
        raise TrialTableError(
            f"score file {str(score_path)!r} has {sc.shape[1]} fields per line; expected "
            f"'utt score' (2) or 'utt attack label score' (4)"
        )
    sc_label = sc[2] if sc.shape[1] == 4 else None
    sc = pd.DataFrame({"utt": sc[0], "score": sc[sc.shape[1] - 1]})
    if sc_label is not None:
        sc["_score_label"] = sc_label
    _check_duplicates(sc, "utt")
    _unmatched(sc["utt"], proto["utt"], "utterance id(s)", "score file", "protocol")
    if require_all:
        _unmatched(proto["utt"], sc["utt"], "utterance id(s)", "protocol", "score file")
    df = proto.merge(sc, on="utt", how="inner", validate="one_to_one")
    if sc_label is not None:
        differ = df["_score_label"].str.casefold() != df["label"].str.casefold()
        if differ.any():
            ids = df.loc[differ, "utt"].iloc[:_SHOW].tolist()
            raise LabelError(
                f"{int(differ.sum())} utterance(s) have a different label in the score file "
                f"than in the protocol, e.g. {_list(ids)}"
            )
        df = df.drop(columns="_score_label")
    order = ["speaker", "utt", "attack", "label", "score"]
    df = df[order + [c for c in df.columns if c not in order]]
    return load_trials(df, trial_id="utt")


def read_kaldi_trials(trials_path: str | Path, scores_path: str | Path) -> pd.DataFrame:
    """Read a Kaldi trials file and its score file.

    Trials lines are ``enrol test target|nontarget`` and score lines ``enrol test score``
    (white-space separated); the two are joined on the pair ``(enrol, test)``.

    Returns
    -------
    pandas.DataFrame
        As :func:`load_trials`: columns ``enrol, test, label, score, y`` in trials-file
        order; ``y = 1`` for target trials.

    Raises
    ------
    UnmatchedTrialError
        A trial without a score, or a score without a trial (ids listed).
    DuplicateTrialError, LabelError, TrialTableError
    """
    tr = _read_ws(trials_path, "trials file", names=("enrol", "test", "label"),
                  layout="enrol test target|nontarget")
    sc = _read_ws(scores_path, "score file", names=("enrol", "test", "score"))
    _check_duplicates(tr, ["enrol", "test"])
    _check_duplicates(sc, ["enrol", "test"])
    key_tr = tr["enrol"] + " " + tr["test"]
    key_sc = sc["enrol"] + " " + sc["test"]
    _unmatched(key_sc, key_tr, "trial(s) (enrol test)", "score file", "trials file")
    _unmatched(key_tr, key_sc, "trial(s) (enrol test)", "trials file", "score file")
    df = tr.merge(sc, on=["enrol", "test"], how="inner", validate="one_to_one")
    return load_trials(df, trial_id=["enrol", "test"])
