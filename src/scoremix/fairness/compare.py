"""Paired comparison of two systems' subgroup measures (SVEva Table 5 with uncertainty).

Both systems score the same trials.  For subgroup ``g`` and measure ``r`` (default
``ratio_overall``) the difference ``Δ_g = r_g^{(B)} - r_g^{(A)}`` gets an interval from a
*paired* cluster bootstrap: each replicate draws one set of speaker multiplicities and
evaluates both systems on it, so the speaker sampling variation that the systems share
cancels in ``Δ_g``.  Each system's own measures get the interval of
:func:`scoremix.fairness.subgroup_dcf` (:func:`~scoremix.resampling.intervals.measure_intervals`,
default ``"studentized"``); a difference can be negative, so it gets the ``"expanded"``
percentile interval (small-sample ``t`` levels for the subgroup's speakers), as do the
Fairness Indices and their difference (``n`` as in ``subgroup_dcf``; for the difference, the
smaller of the two systems' ``n``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from scoremix._deprecate import renamed_kwargs
from scoremix.fairness.engine import CostSpec, Engine
from scoremix.fairness.subgroups import SubgroupError
from scoremix.fairness.prepare import prepare_trials
from scoremix.resampling.intervals import (INTERVAL_METHODS, as_list, bootstrap_pieces, concat_replicates,
                                          expanded_percentile_interval, fairness_index_speakers, measure_intervals,
                                          run_bootstrap)

__all__ = ["CompareResult", "compare_subgroup_dcf", "compare_replicates", "compare_with_bootstrap"]


@dataclass
class CompareResult:
    """Result of :func:`compare_subgroup_dcf`.

    ``table``: grouping attributes, ``subgroup, n_speakers`` and per measure ``m``:
    ``m_<A>, m_<A>_lo, m_<A>_hi, m_<B>, …, m_diff, m_diff_lo, m_diff_hi`` (diff = B − A);
    ``fairness_index``: ``{A: (FI, lo, hi), B: …, "diff": (Δ, lo, hi)}``; ``points``: each
    system's engine output for the data (estimates and their standard errors), the input of
    the studentised intervals; ``interval``: the method of the per-system intervals.
    """

    table: pd.DataFrame
    systems: tuple[str, str]
    fairness_index: dict[str, tuple[float, float, float]]
    replicates: dict[str, dict[str, np.ndarray]] | None = None
    points: dict[str, dict[str, np.ndarray]] | None = None
    interval: str = "studentized"
    #: logical maxima of the measures (:meth:`CostSpec.upper_bounds`), where interval ends are capped
    upper: dict[str, float] | None = None


def _split(tables: Mapping[str, pd.DataFrame] | pd.DataFrame, system: str,
           systems: Sequence[str] | None) -> tuple[tuple[str, str], list[pd.DataFrame]]:
    if isinstance(tables, pd.DataFrame):
        if system not in tables.columns:
            raise SubgroupError(f"system column {system!r} not in the trial table")
        names = list(systems) if systems is not None else list(pd.unique(tables[system]))
        if len(names) != 2:
            raise SubgroupError(f"exactly two systems are compared; got {names} (pass systems=(a, b))")
        dfs = []
        for nm in names:
            sub = tables[tables[system] == nm]
            if sub.empty:
                raise SubgroupError(f"system {nm!r} has no rows in column {system!r}")
            dfs.append(sub.reset_index(drop=True))
        return (str(names[0]), str(names[1])), dfs
    names = list(tables) if systems is None else list(systems)
    if len(names) != 2:
        raise SubgroupError(f"exactly two systems are compared; got {names}")
    return (str(names[0]), str(names[1])), [tables[n].reset_index(drop=True) for n in names]


def _setup(tables: Mapping[str, pd.DataFrame] | pd.DataFrame, groups: Sequence[str], system: str,
           systems: Sequence[str] | None, trial_id: str | None, score: str, label: str, speaker: str,
           positive: Any, cost: CostSpec, measures: Sequence[str], membership: str,
           subgroup_kw: Mapping[str, Any]) -> tuple[tuple[str, str], list[Any], list[Engine]]:
    """Split and align the two systems' trials and build one counting engine per system."""
    names, dfs = _split(tables, system, systems)
    if trial_id is not None:
        for nm, d in zip(names, dfs):
            if trial_id not in d.columns:
                raise SubgroupError(f"trial_id column {trial_id!r} not in the table of system {nm!r}")
        dfs[1] = dfs[1].set_index(trial_id).reindex(dfs[0][trial_id]).reset_index()
        if dfs[1][score].isna().any():
            raise SubgroupError(f"system {names[1]!r} lacks trials that system {names[0]!r} has")
    if len(dfs[0]) != len(dfs[1]):
        raise SubgroupError(f"systems {names} have different numbers of trials ({len(dfs[0])}, {len(dfs[1])})")
    preps = [prepare_trials(d, groups, score=score, label=label, speaker=speaker, positive=positive,
                            membership=membership, **subgroup_kw) for d in dfs]
    if not (np.array_equal(preps[0].clusters, preps[1].clusters) and np.array_equal(preps[0].y, preps[1].y)):
        raise SubgroupError("the two systems' trials differ in speakers or labels; align them (trial_id=)")
    with_eer = "eer" in measures
    engines = [Engine(p.scores, p.y, p.clusters, len(p.cluster_labels), p.sg, cost, with_eer=with_eer,
                      strata=p.strata) for p in preps]
    return names, preps, engines


@renamed_kwargs(groups="by", ci="level", random_state="seed")
def compare_subgroup_dcf(tables: Mapping[str, pd.DataFrame] | pd.DataFrame, by: Sequence[str], *,
                         system: str = "system", systems: Sequence[str] | None = None, trial_id: str | None = None,
                         score: str = "score", label: str = "label", speaker: str = "speaker",
                         positive: Any = None, p_target: float = 0.05, c_miss: float = 1.0, c_fa: float = 1.0,
                         normalize: bool = False, measures: Sequence[str] = ("ratio_overall", "ratio_own"),
                         n_boot: int = 1000, level: float = 0.95, seed: int | np.random.Generator | None = None,
                         membership: str = "enrol", progress: bool = True, interval: str = "studentized",
                         **subgroup_kw: Any) -> CompareResult:
    """Per-subgroup differences of SVEva measures between two systems, paired bootstrap.

    Parameters
    ----------
    tables:
        a long table with a ``system`` column, or ``{name: table}`` for two systems; both
        must hold the same trials (aligned on ``trial_id`` when given, else by row order
        after selecting the system).
    by, score, label, speaker, positive, p_target, c_miss, c_fa, normalize, membership:
        as in :func:`scoremix.fairness.subgroup_dcf`.
    measures:
        per-subgroup measures to compare (any of the empirical table's measures).
    n_boot, level, seed, progress:
        paired cluster bootstrap (the same speaker multiplicities for both systems).
    interval:
        ``"studentized"`` (default), ``"expanded"`` or ``"percentile"``: the per-system intervals,
        as in :func:`scoremix.fairness.subgroup_dcf`; differences and Fairness Indices get the
        expanded percentile interval (``"percentile"``: the plain one).

    Returns
    -------
    CompareResult
    """
    groups = by  # the body's name for by= (renamed API argument)
    ci = level  # the body's name for level= (renamed API argument)
    random_state = seed  # the body's name for seed= (renamed API argument)
    if interval not in INTERVAL_METHODS or interval == "bca-t":
        raise ValueError(f"interval must be 'studentized', 'expanded' or 'percentile', got {interval!r}")
    cost = CostSpec(p_target=p_target, c_miss=c_miss, c_fa=c_fa, normalize=normalize)
    names, preps, engines = _setup(tables, groups, system, systems, trial_id, score, label, speaker, positive,
                                   cost, measures, membership, subgroup_kw)
    C = len(preps[0].cluster_labels)
    points = [e.measures(np.ones((C, 1))) for e in engines]
    for m in measures:
        if m not in points[0]:
            raise ValueError(f"unknown measure {m!r}")
    tab = preps[0].sg.cells.copy()
    tab["n_speakers"] = preps[0].sg.n_speakers
    for m in measures:
        for k, nm in enumerate(names):
            tab[f"{m}_{nm}"] = points[k][m][:, 0]
        tab[f"{m}_diff"] = points[1][m][:, 0] - points[0][m][:, 0]
    fi: dict[str, tuple[float, float, float]] = {}
    for k, nm in enumerate(names):
        fi[nm] = (float(points[k]["fairness_index"][0]), np.nan, np.nan)
    fi["diff"] = (float(points[1]["fairness_index"][0] - points[0]["fairness_index"][0]), np.nan, np.nan)
    res = CompareResult(table=tab, systems=names, fairness_index=fi, replicates=None,
                        points=dict(zip(names, points)), interval=interval, upper=cost.upper_bounds())
    if n_boot > 0:
        rng = np.random.default_rng(random_state)
        reps = run_bootstrap(engines, preps[0].strata, n_boot, rng, progress=progress, desc="paired bootstrap")
        res = compare_with_bootstrap(res, {names[0]: reps[0], names[1]: reps[1]}, ci, measures=measures)
    return res


def compare_replicates(tables: Mapping[str, pd.DataFrame] | pd.DataFrame, groups: Sequence[str],
                       seeds: Sequence[Any] | Any, counts: Sequence[int] | int, *, system: str = "system",
                       systems: Sequence[str] | None = None, trial_id: str | None = None, score: str = "score",
                       label: str = "label", speaker: str = "speaker", positive: Any = None,
                       p_target: float = 0.05, c_miss: float = 1.0, c_fa: float = 1.0, normalize: bool = False,
                       measures: Sequence[str] = ("ratio_overall", "ratio_own"), membership: str = "enrol",
                       progress: bool = False, **subgroup_kw: Any) -> dict[str, dict[str, np.ndarray]]:
    """Paired bootstrap replicates of both systems, in independently seeded pieces.

    Piece ``j`` draws ``counts[j]`` replicates (one set of speaker multiplicities per replicate,
    shared by both systems) from ``numpy.random.default_rng(seeds[j])``, exactly as
    ``compare_subgroup_dcf(..., n_boot=counts[j], random_state=seeds[j]).replicates``; pieces
    are concatenated in order.  Arguments as in :func:`compare_subgroup_dcf`.

    Returns
    -------
    ``{system name: replicate dict}`` (see :func:`scoremix.fairness.subgroup_dcf_replicates`).
    """
    seeds, counts = bootstrap_pieces(seeds, counts)
    cost = CostSpec(p_target=p_target, c_miss=c_miss, c_fa=c_fa, normalize=normalize)
    names, preps, engines = _setup(tables, groups, system, systems, trial_id, score, label, speaker, positive,
                                   cost, measures, membership, subgroup_kw)
    parts = [run_bootstrap(engines, preps[0].strata, n, np.random.default_rng(sd), progress=progress,
                           desc="paired bootstrap") for sd, n in zip(seeds, counts)]
    return {nm: concat_replicates([p[k] for p in parts]) for k, nm in enumerate(names)}


def compare_with_bootstrap(result: CompareResult,
                           replicates: Sequence[Mapping[str, dict[str, np.ndarray]]] | Mapping[str, dict[str, np.ndarray]],
                           ci: float = 0.95, measures: Sequence[str] | None = None) -> CompareResult:
    """Attach paired-bootstrap intervals to a point-estimate :class:`CompareResult`.

    For system ``A`` and ``B`` every measure gets the interval of ``result.interval`` (see the
    module docstring), the difference ``Δ = B − A`` (and the Fairness Indices) the expanded
    percentile interval, over all replicates of all pieces (the difference is taken replicate
    by replicate, so the pairing is kept).  ``compare_subgroup_dcf(..., n_boot=B, random_state=s)`` equals
    ``compare_with_bootstrap(compare_subgroup_dcf(..., n_boot=0), compare_replicates(..., [s], [B]))``.

    Parameters
    ----------
    result:
        a result of :func:`compare_subgroup_dcf` (its intervals, if any, are replaced).
    replicates:
        ``{system: replicate dict}`` or a list of such pieces.
    ci:
        interval level.
    measures:
        measures of the table (default: every ``<m>_diff`` column of ``result.table``).
    """
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci must be in (0, 1), got {ci}")
    pieces = as_list(replicates) if not isinstance(replicates, Mapping) else [replicates]
    a, b = result.systems
    for j, p in enumerate(pieces):
        if set(p) != {a, b}:
            raise ValueError(f"replicate piece {j} is for systems {sorted(p)}, the result for {[a, b]}")
    reps = {nm: concat_replicates([p[nm] for p in pieces]) for nm in (a, b)}
    t = result.table
    if measures is None:
        measures = [c[:-5] for c in t.columns if c.endswith("_diff") and f"{c[:-5]}_{a}" in t.columns]
    drop = {f"{m}_{s}{e}" for m in measures for s in (a, b, "diff") for e in ("", "_lo", "_hi")}
    tab = t[[c for c in t.columns if c not in drop]].copy()
    n = t["n_speakers"].to_numpy(float)
    method = result.interval
    if method == "studentized" and result.points is None:
        raise ValueError("interval='studentized' needs the result's points (the engines' output for the data); "
                         "pass a result of compare_subgroup_dcf")
    diff_method = "percentile" if method == "percentile" else "expanded"
    for m in measures:
        if m not in reps[a]:
            raise ValueError(f"replicates lack measure {m!r}")
        for nm in (a, b):
            pt = ({k: np.asarray(v)[:, 0] for k, v in result.points[nm].items() if np.ndim(v) == 2}
                  if result.points is not None else {m: t[f"{m}_{nm}"].to_numpy(float)})
            tab[f"{m}_{nm}"] = t[f"{m}_{nm}"]
            tab[f"{m}_{nm}_lo"], tab[f"{m}_{nm}_hi"] = measure_intervals(reps[nm], pt, n, ci, [m], method,
                                                                         upper=result.upper)[m]
        tab[f"{m}_diff"] = t[f"{m}_diff"]
        d = {m: reps[b][m] - reps[a][m]}
        tab[f"{m}_diff_lo"], tab[f"{m}_diff_hi"] = measure_intervals(d, {m: t[f"{m}_diff"].to_numpy(float)}, n, ci,
                                                                     [m], diff_method)[m]
    fi: dict[str, tuple[float, float, float]] = {}
    n_fi = {}
    for nm in (a, b):
        r = (result.points[nm]["ratio_overall"][:, 0] if result.points is not None
             else np.full(n.shape, np.nan))
        n_fi[nm] = fairness_index_speakers(r, n)
        lo, hi = _fi_interval(reps[nm]["fairness_index"], n_fi[nm], ci, diff_method)
        fi[nm] = (float(result.fairness_index[nm][0]), lo, hi)
    lo, hi = _fi_interval(reps[b]["fairness_index"] - reps[a]["fairness_index"], min(n_fi.values()), ci, diff_method)
    fi["diff"] = (float(result.fairness_index["diff"][0]), lo, hi)
    return replace(result, table=tab, fairness_index=fi, replicates=reps)


def _fi_interval(reps: np.ndarray, n: float, ci: float, method: str) -> tuple[float, float]:
    """Interval of a Fairness Index (or a difference of two) from its ``(B,)`` replicates."""
    if method == "percentile":
        lo, hi = measure_intervals({"fi": reps[None, :]}, {}, np.array([n]), ci, ["fi"], "percentile")["fi"]
    else:
        lo, hi = expanded_percentile_interval(reps[None, :], np.array([n]), ci)
    return float(lo[0]), float(hi[0])
