r"""SVEva point measures of Dask input without collecting the rows.

Every point measure of :func:`scoremix.fairness.subgroup_dcf` (weights 1) depends on the
trials only through

* the overall minimum cost :math:`\min_τ a P_\text{miss}(τ) + b P_\text{fa}(τ)` and its
  threshold :math:`τ^*`, and each subgroup's own minimum and ROCCH EER: computed from exact
  score counts range-partitioned on the cluster
  (:func:`scoremix.distributed.ranges.ranged_counts`), each range returning the first
  minimiser among the engine's candidate thresholds of its scores and the vertices of its
  local ROC convex hull;
* each subgroup's misses and false alarms at :math:`τ^*`
  (:math:`\#\{+ : s < τ^*\}`, :math:`\#\{- : s \ge τ^*\}`) and class totals: one pass of
  per-partition counts;
* the distinct (speaker, attribute) combinations (subgroup cells, speakers per subgroup,
  speakers with inconsistent attributes): one pass, as small as the speakers.

Client memory: the speakers and a few candidates per range, never the trials.  Equality
with the in-memory engine: the minimum costs, thresholds, rates, counts and ratios are the
same floats (the same integer counts through the same elementwise formulas); the EERs are
the golden-section search of :func:`scoremix.resampling.bootstrap.rocch_eer_from_rates` on the
hull vertices instead of all candidates, whose minimum over the candidates is the same
number in exact arithmetic (a linear function is minimised at a hull vertex) and can differ
only by rounding on collinear points (observed: equal; tests allow ``1e-12``).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix.resampling.bootstrap import rocch_eer_from_rates
from scoremix.fairness.engine import CostSpec, assemble_measures, cluster_codes
from scoremix.fairness.subgroups import SubgroupError, Subgroups, binary_labels, define_subgroups

__all__ = ["DaskPrepared", "dask_point_measures"]


class DaskPrepared:
    """What the point table needs of a prepared trial set: the subgroups (``sg``)."""

    def __init__(self, sg: Subgroups) -> None:
        self.sg = sg


def _combos(part: pd.DataFrame, score: str, speaker: str, groups: list[str], index: int) -> pd.DataFrame:
    s = pd.to_numeric(part[score], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(s)
    if bad.any():
        raise SubgroupError(f"score column {score!r} has a missing or non-finite value in partition {index} "
                            f"(row {int(np.flatnonzero(bad)[0])} of that partition)")
    return part[[speaker, *groups]].drop_duplicates()


def _prepare_partition(part: pd.DataFrame, score: str, label: str, positive: Any, groups: list[str],
                       cells: pd.DataFrame) -> pd.DataFrame:
    """``s`` (float), ``y`` (0/1) and ``code`` (subgroup cell of the enrolment speaker, -1 = none)."""
    key = pd.MultiIndex.from_frame(part[groups].astype(object))
    code = pd.MultiIndex.from_frame(cells[groups].astype(object)).get_indexer(key)
    return pd.DataFrame({"s": pd.to_numeric(part[score], errors="coerce").to_numpy(dtype=float),
                         "y": binary_labels(part[label], positive=positive) if len(part) else
                         np.zeros(0, np.int8),
                         "code": code.astype(np.int64)}, index=part.index)


def _class_counts(part: pd.DataFrame, G: int, tau: float) -> np.ndarray:
    """``(4, G)``: positives, negatives, misses (``s < τ``) and false alarms (``s ≥ τ``) per cell."""
    ok = part["code"].to_numpy() >= 0
    c = part["code"].to_numpy()[ok]
    y = part["y"].to_numpy()[ok] == 1
    s = part["s"].to_numpy()[ok]
    return np.vstack([np.bincount(c[y], minlength=G), np.bincount(c[~y], minlength=G),
                      np.bincount(c[y & (s < tau)], minlength=G),
                      np.bincount(c[~y & (s >= tau)], minlength=G)]).astype(np.float64)


def _range_min_cost(c: Any, info: Any, a: float, b: float) -> tuple | None:
    """First minimiser of ``a·P_miss + b·P_fa`` among the engine's candidate thresholds of one
    range (score ``t_k`` is a candidate when it has a positive trial and ``t_{k-1}`` a negative
    one, see :class:`scoremix.resampling.bootstrap.Population`): ``(cost, τ, P_miss, P_fa)``."""
    cp = np.asarray(c.n_pos, np.int64)
    cn = np.asarray(c.n_neg, np.int64)
    prev_neg = True if info.prev_counts is None else info.prev_counts[1] > 0
    cand = (cp > 0) & np.concatenate(([prev_neg], cn[:-1] > 0))
    if not cand.any():
        return None
    pb = info.pos_before + np.concatenate(([0], np.cumsum(cp)[:-1]))
    nb = info.neg_before + np.concatenate(([0], np.cumsum(cn)[:-1]))
    pm = pb[cand] / np.float64(info.n_pos)
    pf = (info.n_neg - nb[cand]) / np.float64(info.n_neg)
    dcf = a * pm + b * pf
    j = int(np.argmin(dcf))
    return float(dcf[j]), float(np.asarray(c.scores)[cand][j]), float(pm[j]), float(pf[j])


def _population(scores: Any, y: Any, cost: CostSpec, with_eer: bool) -> dict[str, float]:
    """Minimum cost, its threshold and rates, and the ROCCH EER of one population."""
    from scoremix.distributed.ranges import ranged_counts
    from scoremix.metrics import range_candidates

    a, b = cost.weights
    rc = ranged_counts(scores, y, positive=1)
    cands = [q for q in rc.map(_range_min_cost, a, b) if q is not None]
    if rc.last_counts[1] > 0:  # reject everything (τ = +inf) is a candidate when the largest score has a negative
        cands.append((float(a * np.float64(1.0) + b * np.float64(0.0)), np.inf, 1.0, 0.0))
    j = int(np.argmin([q[0] for q in cands]))
    out = {"min_dcf": cands[j][0], "thr": cands[j][1], "fnr": cands[j][2], "fpr": cands[j][3],
           "eer": np.nan}
    if with_eer:
        parts = rc.map(range_candidates, "rocch", ())
        pb = np.append(np.concatenate([q[1] for q in parts]), rc.n_pos)
        nb = np.append(np.concatenate([q[2] for q in parts]), rc.n_neg)
        pm = pb / np.float64(rc.n_pos)
        pf = (rc.n_neg - nb) / np.float64(rc.n_neg)
        out["eer"] = float(rocch_eer_from_rates(pm[:, None], pf[:, None])[0])
    return out


def dask_point_measures(trials: Any, groups: Sequence[str], cost: CostSpec, *, score: str = "score",
                        label: str = "label", speaker: str = "speaker", positive: Any = None,
                        with_eer: bool = True) -> tuple[DaskPrepared, dict[str, np.ndarray]]:
    """Point measures (the engine's dict, ``B = 1``) of a Dask trial table, enrolment membership.

    Raises :class:`~scoremix.fairness.subgroups.SubgroupError` as the in-memory preparation
    does (missing columns, non-finite scores, one class, speakers with two subgroups)."""
    import dask
    from dask import delayed

    groups = [groups] if isinstance(groups, str) else list(groups)
    missing = [c for c in [score, label, speaker, *groups] if c not in trials.columns]
    if missing:
        raise SubgroupError(f"column(s) {missing} not in the trial table (columns: {list(trials.columns)})")
    parts = trials[[score, label, speaker, *groups]].to_delayed()
    combos = dask.compute(*[delayed(_combos)(p, score, speaker, groups, i) for i, p in enumerate(parts)])
    tiny = pd.concat(combos, ignore_index=True).drop_duplicates().reset_index(drop=True)
    sg = define_subgroups(tiny, groups, membership="enrol", speaker=speaker)
    cluster_codes(tiny, speaker, sg, sg.code_enrol)  # a speaker in two subgroups is an error
    G = sg.n_groups
    prep = trials.map_partitions(_prepare_partition, score, label, positive, groups, sg.cells[groups],
                                 meta={"s": "f8", "y": "i1", "code": "i8"})
    n_pos_all, n_all = (int(v) for v in dask.compute(prep["y"].sum(), prep["y"].count()))
    if n_pos_all in (0, n_all):
        raise SubgroupError(f"label column {label!r} holds only one class; both classes are needed")
    ov = _population(prep["s"], prep["y"], cost, with_eer)
    counts = sum(dask.compute(*[delayed(_class_counts)(p, G, ov["thr"]) for p in prep.to_delayed()]))
    res: dict[str, np.ndarray] = {"all_min_dcf": np.array([ov["min_dcf"]]), "all_threshold": np.array([ov["thr"]]),
                                  "all_fpr": np.array([ov["fpr"]]), "all_fnr": np.array([ov["fnr"]]),
                                  "all_eer": np.array([ov["eer"]])}
    own = {k: np.full((G, 1), np.nan) for k in ("min_dcf", "threshold_own", "eer")}
    own["n_pos"] = counts[0][:, None].copy()
    own["n_neg"] = counts[1][:, None].copy()
    for g in range(G):
        if counts[0][g] == 0 or counts[1][g] == 0:
            continue  # empty or one class: NaN measures, as in memory
        sub = prep[prep["code"] == g]
        o = _population(sub["s"], sub["y"], cost, with_eer)
        own["min_dcf"][g, 0], own["threshold_own"][g, 0], own["eer"][g, 0] = o["min_dcf"], o["thr"], o["eer"]
    ovd = {"min_dcf": res["all_min_dcf"], "fpr": res["all_fpr"], "fnr": res["all_fnr"]}
    point = assemble_measures(res, own, counts[2][:, None], counts[3][:, None], ovd, cost)
    return DaskPrepared(sg), point
