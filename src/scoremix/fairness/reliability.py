"""One reliability rule for every subgroup table (data summary, fairness table, reports).

A subgroup row is **reliable** when its interval can be trusted to about its nominal
level.  That is measured, not assumed: ``benchmarks/coverage_subgroup.py`` simulates data
sets with known truth (:mod:`scoremix.fairness.coverage`) and records, per subgroup size,
the coverage of the default 95 % ``"studentized"`` intervals of each of the six headline
measures (``ratio_overall, fpr, fnr, fpr_ratio, fnr_ratio, dcf_at_overall``) in each of its
three scenarios (600 data sets per cell from two seed sets, binomial SE ≈ 0.009), and keeps
the lowest of the 18: the coverage of the worst measure in the worst scenario at that size.  The fewest
errors at ``τ*`` seen at any size was 71.  :data:`MEASURED_COVERAGE` holds that table; the
rule for a row with ``n`` speakers and ``e`` errors at ``τ*`` is

* use the largest measured size ``n_m ≤ n`` (none: *unreliable, "fewer speakers than any
  measured size"*);
* *unreliable* when the coverage measured at ``n_m`` is below :data:`MIN_COVERAGE` (0.90),
  or when ``e`` is below :data:`MIN_ERRORS` (30; fewer errors than the benchmark ever
  had, so the coverage there is unmeasured);
* *unreliable* when either class has fewer than :data:`MIN_CLASS_ERRORS` (10) errors at ``τ*``
  (misses among the positives, false alarms among the negatives): the rates, their ratios
  and ``ratio_overall`` rest on both counts, and a subgroup with 4 positive trials cannot
  have the 30 errors its FNR needs however many false alarms it has (issue 24);
* *unreliable* when the subgroup is empty, has one class only, or a degenerate
  (zero-width) interval (:func:`flag_degenerate`), or has fewer speakers than a
  user-set ``min_speakers``.

The ``note`` column says which condition tripped.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

__all__ = ["MEASURED_COVERAGE", "MIN_COVERAGE", "MIN_ERRORS", "MIN_CLASS_ERRORS", "measured_coverage", "flag_rows", "flag_degenerate"]

#: threshold on measured coverage below which a row is flagged
MIN_COVERAGE = 0.90
#: fewest errors at τ* for which coverage was measured (rule of 30)
MIN_ERRORS = 30

#: fewest errors of *each* class at τ* (misses, false alarms) for a reliable row; a floor, not a
#: measured value: the coverage benchmark's rows all had more
MIN_CLASS_ERRORS = 10

#: subgroup speakers -> coverage of the worst of the six headline measures in the worst of the
#: three scenarios (95 % "studentized" intervals) in two full runs of benchmarks/coverage_subgroup.py
#: pooled (seed offsets 0 and 1000, 300 data sets each, so 600 per cell, B = 1000;
#: docs/intervals.md).  Pooled the same way, the previous default ("expanded") measured 0.875,
#: 0.900, 0.885, 0.910, 0.918 and SVEva's percentile intervals 0.768, 0.835, 0.847, 0.882, 0.910.
MEASURED_COVERAGE: dict[int, float] = {5: 0.920, 8: 0.925, 15: 0.918, 30: 0.927, 60: 0.938}


def measured_coverage(n_speakers: np.ndarray | Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """``(size, coverage)`` looked up for each row: the largest measured size ``≤ n`` and its
    coverage (``0`` / NaN where ``n`` is below every measured size)."""
    sizes = np.array(sorted(MEASURED_COVERAGE))
    cov = np.array([MEASURED_COVERAGE[k] for k in sizes])
    n = np.asarray(n_speakers, dtype=float)
    k = np.searchsorted(sizes, n, side="right") - 1
    size = np.where(k >= 0, sizes[np.clip(k, 0, None)], 0)
    return size, np.where(k >= 0, cov[np.clip(k, 0, None)], np.nan)


def flag_rows(n_speakers: np.ndarray, n_errors: np.ndarray | None, n_pos: np.ndarray, n_neg: np.ndarray,
              min_speakers: int = 0, min_errors: int = MIN_ERRORS,
              min_class_trials: int = 1, *, n_miss: np.ndarray | None = None,
              n_fa: np.ndarray | None = None,
              min_class_errors: int = MIN_CLASS_ERRORS) -> tuple[np.ndarray, list[str]]:
    """The reliability rule (module docstring): ``(reliable (G,) bool, notes)``.

    ``n_miss``, ``n_fa``: errors of each class at ``τ*`` (with ``n_errors``); a row is
    unreliable when either is below ``min_class_errors``.

    ``n_errors=None`` (a data summary, before any threshold is chosen) skips the error
    condition; ``min_class_trials`` adds a floor on the trials of each class (1: both
    classes present)."""
    n_speakers = np.asarray(n_speakers)
    n_errors = np.full(n_speakers.shape, np.inf) if n_errors is None else np.asarray(n_errors)
    n_pos, n_neg = np.asarray(n_pos), np.asarray(n_neg)
    n_miss = np.full(n_speakers.shape, np.inf) if n_miss is None else np.asarray(n_miss, float)
    n_fa = np.full(n_speakers.shape, np.inf) if n_fa is None else np.asarray(n_fa, float)
    size, cov = measured_coverage(n_speakers)
    smallest = min(MEASURED_COVERAGE)
    reliable = np.ones(n_speakers.shape, dtype=bool)
    notes = []
    for i in range(n_speakers.size):
        parts = []
        empty = n_pos[i] + n_neg[i] == 0
        if empty:
            parts.append("empty subgroup")
        elif n_pos[i] == 0 or n_neg[i] == 0:
            parts.append("one class only")
        elif min(n_pos[i], n_neg[i]) < min_class_trials:
            parts.append(f"fewer than {min_class_trials} trials of a class")
        if not empty:
            if size[i] == 0:
                parts.append(f"{n_speakers[i]} speakers: fewer than any size with measured coverage ({smallest})")
            elif cov[i] < MIN_COVERAGE:
                parts.append(f"measured coverage of 95 % intervals at {size[i]} speakers is {cov[i]:.2f} "
                             f"(< {MIN_COVERAGE:.2f})")
            if n_errors[i] < min_errors:
                parts.append(f"{n_errors[i]} errors at tau* (< {min_errors}; coverage not measured there)")
            for count, what in ((n_miss[i], "misses"), (n_fa[i], "false alarms")):
                if np.isfinite(count) and count < min_class_errors:
                    parts.append(f"{int(count)} {what} at tau* (< {min_class_errors} errors of each class)")
            if n_speakers[i] < min_speakers:
                parts.append(f"< {min_speakers} speakers")
        reliable[i] = not parts
        notes.append("; ".join(parts))
    return reliable, notes


def flag_degenerate(table: pd.DataFrame, measures: Sequence[str]) -> tuple[pd.Series, pd.Series]:
    """Rows whose interval of some measure has zero width (``lo == hi``, e.g. one speaker) while
    its estimate is finite: ``reliable`` becomes False and the note names the measures.
    Such intervals are blanked (set to NaN) in ``table`` in place, so they are never printed
    as intervals.

    An interval with an infinite end (more than α/2 of the replicates have no error, so the
    data cannot bound the measure on that side) is kept — it is honest, and covers — and the
    note names the measures (``unbounded interval: …``) without flagging the row: reports print
    that end as ``unbounded``."""
    reliable = table["reliable"].copy()
    note = table["note"].astype(str).copy()
    for i, idx in enumerate(table.index):
        bad, unbounded = [], []
        for m in measures:
            lo, hi, v = table.at[idx, f"{m}_lo"], table.at[idx, f"{m}_hi"], table.at[idx, m]
            if np.isfinite(v) and np.isfinite(lo) and np.isfinite(hi) and not hi > lo:
                bad.append(m)
                table.at[idx, f"{m}_lo"] = np.nan
                table.at[idx, f"{m}_hi"] = np.nan
            elif np.isfinite(v) and (np.isinf(lo) or np.isinf(hi)):
                unbounded.append(m)
        if bad:
            reliable.iloc[i] = False
        for extra in ([f"degenerate (zero-width) interval: {', '.join(bad)}"] if bad else []) + (
                [f"unbounded interval (too few errors in the resamples to bound it): {', '.join(unbounded)}"]
                if unbounded else []):
            note.iloc[i] = f"{note.iloc[i]}; {extra}" if note.iloc[i] else extra
    return reliable, note
