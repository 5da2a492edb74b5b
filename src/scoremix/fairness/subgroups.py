"""Subgroup definitions from categorical trial or speaker attributes.

A *subgroup* is one cell of the Cartesian product of the levels of one or more
categorical attributes (``["sex"]`` or the intersection ``["sex", "nationality"]``).
Every cell is reported, also when no trial falls into it (an *empty* intersection).

For verification trials a trial has two speakers, the enrolment (claimed) speaker
``e(i)`` and the test speaker ``t(i)``.  With ``a(s)`` the attribute cell of speaker
``s``, trial ``i`` belongs to subgroup ``g`` when

* ``membership="enrol"``: ``a(e(i)) = g`` (the SVEva convention, the default),
* ``membership="test"``:  ``a(t(i)) = g``,
* ``membership="both"``:  ``a(e(i)) = a(t(i)) = g``,
* ``membership="any"``:   ``a(e(i)) = g`` or ``a(t(i)) = g`` (a trial may then be in two
  subgroups).

Countermeasure (CM) trials have a single speaker; then only ``"enrol"`` applies and the
speaker column is simply ``speaker``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

__all__ = ["SubgroupError", "Subgroups", "define_subgroups", "binary_labels"]

MEMBERSHIPS = ("enrol", "test", "both", "any")
_POSITIVE_NAMES = {"target", "bonafide", "bona fide", "bona-fide", "genuine", "real", "positive", "1", "true"}
_NEGATIVE_NAMES = {"nontarget", "non-target", "spoof", "impostor", "fake", "negative", "0", "false"}


class SubgroupError(ValueError):
    """Invalid subgroup specification (unknown column, inconsistent speaker attribute, …)."""


def binary_labels(values: pd.Series | np.ndarray, positive: object | None = None) -> np.ndarray:
    """Class labels to ``int8`` 1 (positive) / 0 (negative).

    Uses :func:`scoremix.trials.label_to_binary` when that module is available;
    otherwise: ``positive`` given → ``values == positive``; booleans and 0/1 numbers are
    taken as they are; strings are matched against the usual names (target / bonafide /
    genuine / real are positive; nontarget / spoof / impostor / fake negative).
    """
    try:  # the project's shared converter, when present
        from scoremix.trials import label_to_binary  # type: ignore[import-not-found]

        return np.asarray(label_to_binary(values, positive=positive), dtype=np.int8)
    except ImportError:
        pass
    arr = np.asarray(values)
    if positive is not None:
        return (arr == positive).astype(np.int8)
    if arr.dtype == bool:
        return arr.astype(np.int8)
    if np.issubdtype(arr.dtype, np.number):
        bad = ~np.isin(arr, [0, 1])
        if bad.any():
            raise SubgroupError(f"numeric labels must be 0/1; row {int(np.flatnonzero(bad)[0])} has {arr[bad][0]!r}")
        return arr.astype(np.int8)
    low = pd.Series(arr).astype(str).str.strip().str.lower()
    pos = low.isin(_POSITIVE_NAMES).to_numpy()
    neg = low.isin(_NEGATIVE_NAMES).to_numpy()
    unknown = ~(pos | neg)
    if unknown.any():
        i = int(np.flatnonzero(unknown)[0])
        raise SubgroupError(
            f"label {arr[i]!r} (row {i}) is neither a known positive nor negative name; pass positive=")
    return pos.astype(np.int8)


@dataclass
class Subgroups:
    """Subgroup membership of trials.

    Attributes
    ----------
    attrs:
        grouping attribute names (the output column names).
    cells:
        one row per subgroup (all cells of the level product), attribute columns plus
        ``subgroup`` (a ``"level_level"`` name).
    mem_trial, mem_group:
        membership pairs: trial row position ``mem_trial[k]`` is in subgroup
        ``mem_group[k]`` (a trial may appear twice with ``membership="any"``).
    n_speakers:
        ``(G,)`` distinct speakers of each subgroup (speakers whose own attribute cell is
        ``g`` in the role(s) used by ``membership``).
    code_enrol, code_test:
        per trial cell code of the enrolment / test speaker (-1 = missing attribute).
    """

    attrs: list[str]
    cells: pd.DataFrame
    mem_trial: np.ndarray
    mem_group: np.ndarray
    n_speakers: np.ndarray
    code_enrol: np.ndarray
    code_test: np.ndarray

    @property
    def n_groups(self) -> int:
        return len(self.cells)

    def members(self, g: int) -> np.ndarray:
        """Trial row positions of subgroup ``g``."""
        return self.mem_trial[self.mem_group == g]


def _require(trials: pd.DataFrame, cols: Sequence[str], what: str) -> None:
    missing = [c for c in cols if c not in trials.columns]
    if missing:
        raise SubgroupError(f"{what} column(s) {missing} not in the trial table (columns: {list(trials.columns)})")


def _levels(values: list[pd.Series]) -> list:
    first = values[0]
    if isinstance(first.dtype, pd.CategoricalDtype):
        return list(first.cat.categories)
    allv = pd.concat([v.astype(object) for v in values], ignore_index=True).dropna().unique()
    try:
        return sorted(allv)
    except TypeError:
        return sorted(allv, key=str)


def _role_attrs(trials: pd.DataFrame, groups: list[str], role_cols: list[str] | None,
                speaker_col: str | None, speaker_table: pd.DataFrame | None) -> pd.DataFrame | None:
    """Attribute values of one speaker role, one row per trial."""
    if speaker_table is not None and speaker_col is not None:
        _require(trials, [speaker_col], "speaker")
        missing = [g for g in groups if g not in speaker_table.columns]
        if missing:
            raise SubgroupError(f"speaker_table lacks attribute column(s) {missing}")
        looked = speaker_table[groups].reindex(trials[speaker_col].to_numpy())
        unknown = looked.isna().all(axis=1).to_numpy() & trials[speaker_col].notna().to_numpy()
        if unknown.any():
            sp = trials[speaker_col].iloc[int(np.flatnonzero(unknown)[0])]
            raise SubgroupError(f"speaker {sp!r} (column {speaker_col!r}) is not in speaker_table")
        looked.index = trials.index
        return looked
    if role_cols is not None:
        _require(trials, role_cols, "attribute")
        out = trials[role_cols].copy()
        out.columns = groups
        return out
    return None


def _codes(attr_df: pd.DataFrame, groups: list[str], levels: list[list]) -> np.ndarray:
    idx = []
    for g, lev in zip(groups, levels):
        s = attr_df[g]
        if isinstance(s.dtype, pd.CategoricalDtype):
            s = s.astype(object)
        c = pd.Categorical(s, categories=lev).codes.astype(np.int64)
        idx.append(c)
    idx_arr = np.vstack(idx)
    bad = (idx_arr < 0).any(axis=0)
    dims = tuple(len(lv) for lv in levels)
    code = np.ravel_multi_index(tuple(np.where(bad, 0, idx_arr)), dims) if idx_arr.size else np.zeros(0, np.int64)
    return np.where(bad, -1, code).astype(np.int64)


def as_columns(cols: str | Sequence[str] | None) -> list[str] | None:
    """A column name or a sequence of names as a list (``"sex"`` → ``["sex"]``; ``None`` stays ``None``)."""
    if cols is None:
        return None
    return [cols] if isinstance(cols, str) else list(cols)


def define_subgroups(trials: pd.DataFrame, groups: str | Sequence[str], *, membership: str = "enrol",
                     speaker: str = "speaker", test_speaker: str | None = None,
                     test_groups: str | Sequence[str] | None = None,
                     speaker_table: pd.DataFrame | None = None) -> Subgroups:
    """Assign trials to subgroups (all cells of the product of attribute levels).

    Parameters
    ----------
    trials:
        trial table.
    groups:
        attribute name(s), e.g. ``"sex"``, ``["sex"]`` or ``["sex", "nationality"]``.  Without
        ``speaker_table`` these are trial columns holding the enrolment speaker's values.
    membership:
        ``"enrol"`` (default), ``"test"``, ``"both"`` or ``"any"`` (see module docstring).
    speaker, test_speaker:
        enrolment (or only) speaker column and the test speaker column.
    test_groups:
        trial columns holding the test speaker's attributes, aligned with ``groups``
        (e.g. ``groups=["claimed_gender"], test_groups=["test_gender"]``).
    speaker_table:
        alternative to attribute columns: a table indexed by speaker id with the
        ``groups`` columns; attributes of both speakers are looked up there.

    Returns
    -------
    Subgroups
    """
    groups = as_columns(groups)
    test_groups = as_columns(test_groups)
    if not groups:
        raise SubgroupError("groups must name at least one attribute")
    if membership not in MEMBERSHIPS:
        raise SubgroupError(f"membership must be one of {MEMBERSHIPS}, got {membership!r}")
    enrol_attrs = _role_attrs(trials, groups, groups if speaker_table is None else None, speaker, speaker_table)
    test_attrs = None
    if membership != "enrol":
        if test_speaker is None:
            raise SubgroupError(f"membership={membership!r} needs test_speaker= (the test speaker column)")
        if speaker_table is None and test_groups is None:
            raise SubgroupError(f"membership={membership!r} needs test_groups= columns or a speaker_table")
        if test_groups is not None and len(test_groups) != len(groups):
            raise SubgroupError(f"test_groups {list(test_groups)} must align with groups {groups}")
        test_attrs = _role_attrs(trials, groups, list(test_groups) if test_groups is not None else None,
                                 test_speaker, speaker_table)
    assert enrol_attrs is not None
    levels = [_levels([enrol_attrs[g]] + ([test_attrs[g]] if test_attrs is not None else [])) for g in groups]
    for g, lev in zip(groups, levels):
        if not lev:
            raise SubgroupError(f"attribute {g!r} has no non-missing value")
    cells = pd.DataFrame(list(itertools.product(*levels)), columns=groups)
    cells["subgroup"] = ["_".join(str(v) for v in row) for row in cells[groups].itertuples(index=False)]
    code_e = _codes(enrol_attrs, groups, levels)
    code_t = _codes(test_attrs, groups, levels) if test_attrs is not None else code_e.copy()
    n = len(trials)
    rows = np.arange(n)
    if membership == "enrol":
        keep = code_e >= 0
        mem_trial, mem_group = rows[keep], code_e[keep]
    elif membership == "test":
        keep = code_t >= 0
        mem_trial, mem_group = rows[keep], code_t[keep]
    elif membership == "both":
        keep = (code_e >= 0) & (code_e == code_t)
        mem_trial, mem_group = rows[keep], code_e[keep]
    else:
        k1 = code_e >= 0
        k2 = (code_t >= 0) & (code_t != code_e)
        mem_trial = np.concatenate([rows[k1], rows[k2]])
        mem_group = np.concatenate([code_e[k1], code_t[k2]])
        order = np.lexsort((mem_trial, mem_group))
        mem_trial, mem_group = mem_trial[order], mem_group[order]
    G = len(cells)
    spk_e = trials[speaker].to_numpy() if speaker in trials.columns else None
    spk_t = trials[test_speaker].to_numpy() if test_speaker is not None and test_speaker in trials.columns else None
    n_spk = np.zeros(G, dtype=np.int64)
    frames = []
    if spk_e is not None and membership in ("enrol", "both", "any"):
        frames.append(pd.DataFrame({"g": code_e, "s": spk_e}))
    if spk_t is not None and membership in ("test", "both", "any"):
        frames.append(pd.DataFrame({"g": code_t, "s": spk_t}))
    if frames:
        member_rows = np.zeros(n, dtype=bool)
        member_rows[mem_trial] = True
        sp = pd.concat([f[member_rows] for f in frames], ignore_index=True)
        sp = sp[sp["g"] >= 0]
        counts = sp.groupby("g")["s"].nunique()
        n_spk[counts.index.to_numpy(dtype=np.int64)] = counts.to_numpy()
    return Subgroups(attrs=groups, cells=cells, mem_trial=mem_trial.astype(np.int64),
                     mem_group=mem_group.astype(np.int64), n_speakers=n_spk,
                     code_enrol=code_e, code_test=code_t)
