"""Load the trial table of a study: files (or a simulation), filters, renames, sign flips,
per-system subsampling and standardisation.

The returned table always has the columns ``score`` (float, higher = more positive),
``label`` (the original label values) and ``y`` (1 = positive, 0 = negative), plus every
other input column.  With a ``[data].system`` column the analyses run once per system.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scoremix.study.config import DataConfig

__all__ = ["StudyDataError", "StudyData", "load_study_data", "apply_filters", "read_data_file", "expand_data_files",
           "prepare_partition", "row_steps", "select_partition_rows", "ALL_SYSTEMS"]

#: Probabilities are clipped to ``[LOGIT_EPS, 1 - LOGIT_EPS]`` before ``transform = "logit"``.
LOGIT_EPS = 1e-7

#: Name used for the single "system" of a study without a system column.
ALL_SYSTEMS = "all"


class StudyDataError(ValueError):
    """The study's data cannot be loaded as configured (names the file, key, column or row)."""


@dataclass
class StudyData:
    """The loaded trials, the system names and (for simulated data) the :class:`Simulation`."""

    table: pd.DataFrame
    systems: list[str]
    system_column: str | None
    simulation: Any = None

    def subset(self, system: str) -> pd.DataFrame:
        """Trials of one system (all trials when the study has no system column)."""
        if self.system_column is None:
            return self.table
        return self.table[self.table[self.system_column].astype(str) == system]


#: Filter values that also match missing cells (NaN / None / NA).
MISSING_TOKENS = ("nan", "NaN", "NA", "")


def _matches(series: pd.Series, values: list[Any]) -> pd.Series:
    """``series`` equals one of ``values`` (compared as strings too; ``"nan"``/``"NA"``/``""``
    match missing cells)."""
    missing = series.isna()
    as_str = series.astype(object).where(~missing, "nan").astype(str)
    hit = as_str.isin([str(v) for v in values]) | series.isin(values)
    if any(str(v) in MISSING_TOKENS for v in values):
        hit |= missing
    return hit


def apply_filters(df: pd.DataFrame, filters: dict[str, list[Any]], where: str) -> pd.DataFrame:
    """Keep the rows whose column value is one of the listed values (all filters must hold)."""
    mask = pd.Series(True, index=df.index)
    for col, values in filters.items():
        if col not in df.columns:
            raise StudyDataError(f"{where}: filter column {col!r} not in the table "
                                 f"(columns: {', '.join(map(str, df.columns))})")
        hit = _matches(df[col], values)
        if not hit.any():
            have = sorted(map(str, pd.unique(df[col].astype(str))))[:12]
            raise StudyDataError(f"{where}: filter {col} in {values!r} matches no row (values include {have})")
        mask &= hit
    return df[mask]


def read_data_file(path: Path) -> pd.DataFrame:
    """Read one score table: parquet by extension, else CSV/TSV (optionally gzipped), with the
    named errors of :func:`scoremix.trials.read_table` (corrupt gzip, non-UTF-8 bytes, a wrong
    separator) turned into :class:`StudyDataError`."""
    from scoremix.trials import TrialTableError, read_table

    if not path.is_file():
        raise StudyDataError(f"{path}: no such data file")
    sep = "\t" if any(s in path.name for s in (".tsv", ".tab")) else None
    try:
        return read_table(path, sep=sep, low_memory=False)
    except TrialTableError as exc:
        raise StudyDataError(str(exc)) from None
    except (OSError, ValueError, ImportError) as exc:
        raise StudyDataError(f"{path}: cannot read ({exc})") from None


def expand_data_files(paths: list[Path]) -> list[Path]:
    """``[data] files`` with glob patterns (``trials/*.parquet``, e.g. a partitioned parquet
    data set) replaced by the files they match, sorted; a pattern matching nothing is an error
    naming it."""
    import glob

    out: list[Path] = []
    for p in paths:
        s = str(p)
        if any(c in s for c in "*?["):
            hits = sorted(glob.glob(s))
            if not hits:
                raise StudyDataError(f"{s}: no data file matches this pattern")
            out.extend(Path(h) for h in hits)
        else:
            out.append(p)
    return out


def _simulate(cfg: DataConfig) -> tuple[pd.DataFrame, Any]:
    from scoremix.simulate import simulate_sv_trials, simulate_trials

    sim_cfg = cfg.simulate
    assert sim_cfg is not None
    shift = {g: tuple(v) for g, v in sim_cfg.subgroup_shift.items()} or None
    fn = simulate_trials if sim_cfg.kind == "cm" else simulate_sv_trials
    try:
        sim = fn(n_trials=sim_cfg.n_trials, subgroup_shift=shift, seed=sim_cfg.seed, **sim_cfg.params)
    except TypeError as exc:
        raise StudyDataError(f"data.simulate.params: {exc}") from None
    return sim.table.drop(columns=["y"]), sim


def row_steps(df: pd.DataFrame, cfg: DataConfig, where: str) -> pd.DataFrame:
    """The row-by-row steps of :func:`load_study_data` after the score/label conversion:
    ``transform``, ``indicators`` and ``negate`` (each row's result depends on that row only,
    so they apply to the partitions of a partitioned data set as to the whole table)."""
    if cfg.transform == "logit":
        p = df["score"].to_numpy(float)
        bad = (p < 0) | (p > 1)
        if bad.any():
            raise StudyDataError(f"{where}: data.transform = 'logit' needs probabilities in [0, 1]; row "
                                 f"{int(np.flatnonzero(bad)[0])} has score {p[bad][0]!r}")
        p = np.clip(p, LOGIT_EPS, 1 - LOGIT_EPS)
        df["score"] = np.log(p) - np.log1p(-p)
    for name, conds in cfg.indicators.items():
        if name in df.columns:
            raise StudyDataError(f"{where}: data.indicators.{name}: the table already has a column {name!r}")
        hit = pd.Series(True, index=df.index)
        for col, values in conds.items():
            if col not in df.columns:
                raise StudyDataError(f"{where}: data.indicators.{name}: column {col!r} not in the table")
            hit &= _matches(df[col], values)
        df[name] = hit.astype(float)
    if cfg.negate:
        mask = pd.Series(False, index=df.index)
        for col, values in cfg.negate.items():
            if col not in df.columns:
                raise StudyDataError(f"{where}: data.negate column {col!r} not in the table")
            mask |= _matches(df[col], values)
        df.loc[mask, "score"] = -df.loc[mask, "score"]
    return df


def prepare_partition(df: pd.DataFrame, cfg: DataConfig) -> pd.DataFrame:
    """One partition of ``[data] files`` prepared as :func:`load_study_data` prepares the whole
    table, for the steps that act row by row: ``rename``, ``filters`` (rows of a partition may
    match no filter value), the score/label conversion (``score`` float, ``label``, ``y``) and
    :func:`row_steps`.  The table-wide checks (one class only, bad values) are those of the
    in-memory load, which the study runs first; ``sample_per_system`` and ``standardize`` act on
    the whole table and are not applied here."""
    from scoremix.trials import label_to_binary

    if cfg.rename:
        df = df.rename(columns=cfg.rename)
    for col, values in cfg.filters.items():
        df = df[_matches(df[col], values)]
    df = df.copy()
    score = pd.to_numeric(df[cfg.score], errors="coerce").astype(np.float64)
    y = (np.asarray(label_to_binary(df[cfg.label], positive=cfg.positive, column=cfg.label), dtype=np.int8)
         if len(df) else np.zeros(0, np.int8))
    df = df.rename(columns={cfg.score: "score", cfg.label: "label"})
    df["score"] = score.to_numpy()
    df["y"] = y
    return row_steps(df, cfg, "a partition of " + ", ".join(str(p) for p in cfg.files))


def select_partition_rows(part: pd.DataFrame, system_column: str | None, system: str,
                          filters: dict[str, list[Any]]) -> pd.DataFrame:
    """The rows of one prepared partition in ``system`` (all systems when ``system_column`` is
    None or ``system`` is :data:`ALL_SYSTEMS`) that pass ``filters`` (``column in values``;
    unlike :func:`apply_filters`, a partition may hold no matching row)."""
    if system_column is not None and system != ALL_SYSTEMS:
        part = part[part[system_column].astype(str) == system]
    for col, values in filters.items():
        part = part[_matches(part[col], values)]
    return part


def load_study_data(cfg: DataConfig, seed: int = 0) -> StudyData:
    r"""Load, filter and validate the trials described by ``cfg``.

    Steps, in order: read and concatenate ``files`` (or simulate); ``rename``; ``filters``
    (``column in values``); check and convert score/label with
    :func:`scoremix.trials.load_trials` (row numbers in errors are those after filtering);
    ``transform`` (``"logit"``: :math:`\log(p/(1-p))` after clipping ``p`` to
    ``[1e-7, 1 - 1e-7]``); ``indicators`` (0/1 columns, 1 where every listed condition holds);
    ``negate`` (``score ← −score`` where ``column in values``, for systems whose lower score
    means positive); ``sample_per_system`` (the same row positions in every system, so that
    paired comparisons keep aligned trials; or, with ``sample_by``, that many units — e.g.
    utterances — with all their rows; seeded by the study seed); ``standardize``
    (``score ← (score − mean)/sd`` per system, and per ``standardize_by`` cell).
    """
    from scoremix.trials import TrialTableError, load_trials

    simulation = None
    if cfg.simulate is not None:
        df, simulation = _simulate(cfg)
        where = "data.simulate"
    else:
        frames = []
        for p in expand_data_files(cfg.files):
            f = read_data_file(p)
            frames.append(f)
        df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        where = ", ".join(str(p) for p in cfg.files)
    if cfg.rename:
        missing = [c for c in cfg.rename if c not in df.columns]
        if missing:
            raise StudyDataError(f"{where}: data.rename names column(s) {missing} that the table lacks")
        df = df.rename(columns=cfg.rename)
    if cfg.filters:
        df = apply_filters(df, cfg.filters, where)
    df = df.reset_index(drop=True)
    try:
        df = load_trials(df, score=cfg.score, label=cfg.label, positive=cfg.positive)
    except TrialTableError as exc:
        raise StudyDataError(f"{where}: {exc}") from None
    for col in [cfg.system, *cfg.subgroups] + ([cfg.speaker] if cfg.speaker else []):
        if col and col not in df.columns:
            raise StudyDataError(f"{where}: column {col!r} (named in [data]) not in the table "
                                 f"(columns: {', '.join(map(str, df.columns))})")
    df = row_steps(df, cfg, where)
    sys_col = cfg.system
    if sys_col is not None:
        systems = sorted(map(str, pd.unique(df[sys_col].astype(str))))
    else:
        systems = [ALL_SYSTEMS]
    if cfg.sample_per_system:
        rng = np.random.default_rng(seed)
        if cfg.sample_by is not None:
            if cfg.sample_by not in df.columns:
                raise StudyDataError(f"{where}: data.sample_by column {cfg.sample_by!r} not in the table")
            units = np.sort(pd.unique(df[cfg.sample_by].dropna().astype(str)))
            if cfg.sample_per_system < units.size:
                keep = rng.choice(units, size=cfg.sample_per_system, replace=False)
                df = df[df[cfg.sample_by].astype(str).isin(keep)].reset_index(drop=True)
        else:
            keys = df[sys_col].astype(str) if sys_col else pd.Series(ALL_SYSTEMS, index=df.index)
            pos = keys.groupby(keys).cumcount().to_numpy()
            n_min = int(keys.value_counts().min())
            if cfg.sample_per_system < n_min:
                keep_pos = np.sort(rng.choice(n_min, size=cfg.sample_per_system, replace=False))
                df = df[np.isin(pos, keep_pos)].reset_index(drop=True)
        y = df["y"].to_numpy()
        if y.size == 0 or y.min() == y.max():
            raise StudyDataError(f"{where}: data.sample_per_system = {cfg.sample_per_system} left one class only")
    if cfg.standardize:
        keys = [df[sys_col].astype(str)] if sys_col else [pd.Series(ALL_SYSTEMS, index=df.index)]
        for col in cfg.standardize_by:
            if col not in df.columns:
                raise StudyDataError(f"{where}: data.standardize_by column {col!r} not in the table")
            keys.append(df[col].astype(str))
        g = df.groupby(keys, dropna=False)["score"]
        df["score"] = (df["score"] - g.transform("mean")) / g.transform("std")
    return StudyData(table=df, systems=systems, system_column=sys_col, simulation=simulation)
