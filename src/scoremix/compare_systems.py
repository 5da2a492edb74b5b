r"""Paired comparison of detection systems that score the same trials.

For every pair of systems :math:`(a, b)` and metric :math:`θ` the table gives
:math:`\hat θ_a − \hat θ_b` and :math:`\hat θ_a / \hat θ_b` with intervals and a p-value for
:math:`H_0: θ_a = θ_b`.

**Paired speaker-cluster bootstrap** (EER, minDCF, actDCF, Cllr; AUC with ``test="bootstrap"``).
Replicate :math:`b` draws the speakers with replacement *once* and gives every trial of a
speaker drawn :math:`m` times the weight :math:`m` in *every* system, so the correlation between
systems (same trials, same speakers) is kept; with ``test_speaker=`` the enrolment and test
speakers are drawn independently and a nontarget trial gets the product of its two speakers'
multiplicities (two-way crossed, Owen 2007; :class:`scoremix.resampling.bootstrap.TwoWayDesign`).
Replicates are computed exactly for all :math:`B` at once by
:class:`scoremix.metrics.WeightedReplicates`.  Interval of :math:`d = θ_a − θ_b` (default
``interval="scaled"``): the percentiles of :math:`d^*` at the levels
:math:`Φ(∓z_{1−α/2}\sqrt{C/(C−1)})`, :math:`C` speakers — the bootstrap's :math:`(C−1)/C` variance of
a sum over clusters corrected, normal tails (the tail levels of the resampling layer's studentised
interval, :func:`scoremix.resampling.intervals.scaled_percentile_interval`); ``"expanded"``:
Hesterberg's expanded percentile interval (levels :math:`Φ(∓\sqrt{C/(C−1)}\,t_{C−1,1−α/2})`, which
also widens the tails to Student's); ``"percentile"``: levels :math:`α/2, 1−α/2`.  The same for the
ratio.  Coverage against closed-form truth (``benchmarks/coverage_compare.py``, 500 data sets per
cell, docs/detection-evaluation.md): ``"scaled"`` 0.93–0.97 for EER and minDCF differences at 15, 30
and 60 speakers; ``"expanded"`` over-covered the EER difference at 15 speakers (0.976).
P-value from the bootstrap standard error with the small-sample expansion,
:math:`p = 2\,T_{C−1}\big(−|\hat d| / (\sqrt{C/(C−1)}\,\mathrm{sd}(d^*))\big)` (Efron & Tibshirani
1993, §16; not limited by :math:`1/B` as a percentile p-value is, so Holm over many pairs works).
``result.attrs["replicates"]`` keeps every :math:`d^*` (key ``(metric, system_a, system_b)``).

**DeLong** (AUC with ``test="auto"``/``"delong"``; DeLong, DeLong & Clarke-Pearson 1988): with
placements :math:`V^{10}_{i} = \frac1n\sum_j ψ(x_i, y_j)` (positives) and
:math:`V^{01}_{j} = \frac1m\sum_i ψ(x_i, y_j)` (negatives), :math:`ψ = 1, ½, 0` for
:math:`x > y, =, <`, and :math:`S^{10}, S^{01}` their sample covariance matrices between the two
systems, :math:`\operatorname{Var}(\hat A_a − \hat A_b) = (S^{10}_{aa} + S^{10}_{bb} − 2S^{10}_{ab})/m
+ (S^{01}_{aa} + S^{01}_{bb} − 2S^{01}_{ab})/n`, :math:`z = (\hat A_a − \hat A_b)/\sqrt{\operatorname{Var}}`,
:math:`p = 2Φ(−|z|)` — R ``pROC::roc.test(method = "delong", paired = TRUE)``.  It treats trials
as independent (no speaker clustering).

**Multiplicity**: within each metric the p-values of all pairs are adjusted by Holm's step-down
method (``p_adjusted``; ``adjust=`` any :func:`statsmodels.stats.multitest.multipletests` method).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import norm
from scipy.stats import t as student_t

from scoremix.metrics import MetricInputError, bayes_threshold
from scoremix.resampling import WeightedReplicates
from scoremix.trials import label_to_binary

__all__ = ["COMPARE_METRICS", "SystemComparisonError", "compare_systems", "delong_test", "paired_table"]

COMPARE_METRICS = ("eer", "min_dcf", "act_dcf", "cllr", "auc")


class SystemComparisonError(MetricInputError):
    """A long table that cannot be compared system by system (names the column, system or trial)."""


# ----------------------------------------------------------------------------- input
def paired_table(trials: pd.DataFrame, *, systems: Sequence[Any] | None, score: str, label: str, system: str,
                 trial: str | None, speaker: str | None, test_speaker: str | None, positive: Any = None
                 ) -> tuple[list[Any], np.ndarray, np.ndarray, pd.DataFrame]:
    """``(systems, S (N, K) scores, y (N,), per-trial columns)`` from a long table (one row per trial × system)."""
    for c in (score, label, system, trial, speaker, test_speaker):
        if c is not None and c not in trials.columns:
            raise SystemComparisonError(f"the trial table has no column {c!r} (columns: {list(trials.columns)})")
    present = list(pd.unique(trials[system]))
    systems = present if systems is None else list(systems)
    missing = [s for s in systems if s not in set(present)]
    if missing:
        raise SystemComparisonError(f"system(s) {missing} are not in column {system!r} (present: {present})")
    if len(systems) < 2:
        raise SystemComparisonError(f"need at least two systems to compare, got {systems}")
    t = trials[trials[system].isin(systems)]
    if trial is None:
        sizes = t.groupby(system, sort=False).size()
        if sizes.nunique() != 1:
            raise SystemComparisonError(f"without trial= every system needs the same number of rows; got {sizes.to_dict()}")
        t = t.assign(_trial=t.groupby(system, sort=False).cumcount())
        trial = "_trial"
    dup = t.duplicated([system, trial])
    if dup.any():
        r = t[dup].iloc[0]
        raise SystemComparisonError(f"trial {r[trial]!r} appears twice for system {r[system]!r}")
    wide = t.pivot(index=trial, columns=system, values=score)
    if wide.isna().any().any():
        col = wide.columns[wide.isna().any()][0]
        tid = wide.index[wide[col].isna()][0]
        raise SystemComparisonError(f"system {col!r} has no score for trial {tid!r}: systems must score the same trials")
    S = wide[systems].to_numpy(np.float64)
    bad = ~np.isfinite(S)
    if bad.any():
        i, k = np.argwhere(bad)[0]
        raise SystemComparisonError(f"system {systems[k]!r} has a non-finite score for trial {wide.index[i]!r}")
    keep = [c for c in (label, speaker, test_speaker) if c is not None]
    per = t.drop_duplicates(trial).set_index(trial).loc[wide.index, keep]
    lab_check = t.groupby(trial)[label].nunique()
    if (lab_check > 1).any():
        raise SystemComparisonError(f"trial {lab_check.index[lab_check > 1][0]!r} has different labels in different systems")
    y = np.asarray(label_to_binary(per[label], positive=positive, column=label)).astype(bool)
    if y.all() or not y.any():
        raise SystemComparisonError(f"column {label!r} has one class only")
    return systems, S, y, per


# ----------------------------------------------------------------------------- DeLong
def _placements(s: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pos, neg = s[y], s[~y]
    ns, ps = np.sort(neg), np.sort(pos)
    v10 = (np.searchsorted(ns, pos, "left") + 0.5 * (np.searchsorted(ns, pos, "right") - np.searchsorted(ns, pos, "left"))) / neg.size
    v01 = ((pos.size - np.searchsorted(ps, neg, "right"))
           + 0.5 * (np.searchsorted(ps, neg, "right") - np.searchsorted(ps, neg, "left"))) / pos.size
    return v10, v01


def delong_test(scores_a: Any, scores_b: Any, labels: Any) -> dict[str, float]:
    """Paired DeLong test of two AUCs on the same trials (module docstring); ``auc_a, auc_b, difference, se, z, p_value``."""
    y = np.asarray(label_to_binary(labels)).astype(bool)
    a, b = np.asarray(scores_a, float), np.asarray(scores_b, float)
    va10, va01 = _placements(a, y)
    vb10, vb01 = _placements(b, y)
    s10 = np.cov(np.vstack([va10, vb10]))
    s01 = np.cov(np.vstack([va01, vb01]))
    m, n = int(y.sum()), int((~y).sum())
    var = (s10[0, 0] + s10[1, 1] - 2 * s10[0, 1]) / m + (s01[0, 0] + s01[1, 1] - 2 * s01[0, 1]) / n
    auc_a, auc_b = float(va10.mean()), float(vb10.mean())
    d = auc_a - auc_b
    se = float(np.sqrt(max(var, 0.0)))
    z = d / se if se > 0 else (0.0 if d == 0 else np.copysign(np.inf, d))
    return {"auc_a": auc_a, "auc_b": auc_b, "difference": d, "se": se, "z": float(z),
            "p_value": float(2 * norm.sf(abs(z)))}


# ----------------------------------------------------------------------------- weighted AUC
class _WeightedAUC:
    r"""AUC of cluster-weighted trials for many replicates: with :math:`K_{cd} = \sum_{i ∈ pos, c(i) = c}
    \sum_{j ∈ neg, c(j) = d} ψ(s_i, s_j)`, :math:`\text{AUC}_b = m_b^\top K m_b / (n^+_b n^-_b)`."""

    def __init__(self, s: np.ndarray, y: np.ndarray, cl: np.ndarray, C: int) -> None:
        pos, neg = s[y], s[~y]
        cp, cn = cl[y], cl[~y]
        K = np.zeros((C, C))
        for d in np.unique(cn):
            nd = np.sort(neg[cn == d])
            lo, hi = np.searchsorted(nd, pos, "left"), np.searchsorted(nd, pos, "right")
            K[:, d] = np.bincount(cp, weights=lo + 0.5 * (hi - lo), minlength=C)
        self.K = K
        self.npos = np.bincount(cp, minlength=C).astype(float)
        self.nneg = np.bincount(cn, minlength=C).astype(float)

    def __call__(self, M: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.sum((self.K @ M) * M, axis=0) / ((self.npos @ M) * (self.nneg @ M))


# ----------------------------------------------------------------------------- bootstrap
def _bootstrap_p(diff: float, d: np.ndarray, C: int) -> float:
    """Two-sided p-value of ``H0: difference = 0`` from the bootstrap standard error (module docstring)."""
    d = d[np.isfinite(d)]
    if d.size < 2 or C < 2:
        return float("nan")
    se = float(np.std(d, ddof=1)) * np.sqrt(C / (C - 1))
    if se == 0:
        return 1.0 if diff == 0 else 0.0
    return float(min(1.0, 2 * student_t.sf(abs(diff) / se, C - 1)))


def _metric_point_and_reps(kind: str, s: np.ndarray, y: np.ndarray, cl: np.ndarray, C: int, M: np.ndarray,
                           params: dict) -> tuple[float, np.ndarray]:
    if kind == "auc":
        w = _WeightedAUC(s, y, cl, C)
    else:
        k = {"eer": "eer", "min_dcf": "min_dcf", "act_dcf": "dcf", "cllr": "cllr"}[kind]
        w = WeightedReplicates(k, s, y, cl, C, **params)
    one = np.ones((C, 1))
    return float(w(one)[0]), np.concatenate([w(M[:, i:i + 200]) for i in range(0, M.shape[1], 200)])


def compare_systems(trials: pd.DataFrame, systems: Sequence[Any] | None = None,
                    metrics: Sequence[str] = ("eer", "min_dcf", "auc"), *, test: str = "auto",
                    speaker: str | None = None, test_speaker: str | None = None, score: str = "score",
                    label: str = "label", system: str = "system", trial: str | None = None, positive: Any = None,
                    p_target: float = 0.05, c_miss: float = 1.0, c_fa: float = 1.0, n_boot: int = 1000,
                    seed: int | np.random.Generator | None = None, level: float = 0.95,
                    adjust: str = "holm", interval: str = "scaled") -> pd.DataFrame:
    r"""Every pair of ``systems`` compared on every metric (module docstring for the methods).

    Parameters
    ----------
    trials
        long table: one row per trial and system (``system``, ``score``, ``label``; ``trial`` ids
        pair the rows of different systems — without it, rows are paired by order within system).
    metrics
        any of ``"eer"`` (ROCCH), ``"min_dcf"``, ``"act_dcf"`` (scores are LLRs, Bayes threshold),
        ``"cllr"``, ``"auc"``; DCFs normalised with ``p_target``, ``c_miss``, ``c_fa``.
    test
        ``"auto"``: DeLong for AUC, paired bootstrap for the rest; ``"bootstrap"``: bootstrap for all;
        ``"delong"``: AUC only, DeLong.
    speaker, test_speaker
        bootstrap clusters: speaker (enrolment) column; with ``test_speaker`` the two-way crossed
        bootstrap (nontarget trials weighted by both speakers).  Without ``speaker`` every trial is
        its own cluster.

    Returns
    -------
    DataFrame with columns ``metric, system_a, system_b, value_a, value_b, difference, lo, hi,
    p_value, ratio, ratio_lo, ratio_hi, p_adjusted, method, n_clusters`` (difference = a − b).
    """
    from statsmodels.stats.multitest import multipletests

    from scoremix.resampling.bootstrap import draw_cluster_weights, two_way_pairs
    from scoremix.resampling.intervals import expanded_percentile_interval

    bad = [m for m in metrics if m not in COMPARE_METRICS]
    if bad or not metrics:
        raise SystemComparisonError(f"metrics must be among {COMPARE_METRICS}, got {list(metrics)}")
    if test not in ("auto", "bootstrap", "delong"):
        raise SystemComparisonError(f"test must be 'auto', 'bootstrap' or 'delong', got {test!r}")
    if test == "delong" and list(metrics) != ["auc"]:
        raise SystemComparisonError("test='delong' applies to metrics=['auc'] only")
    if not 0 < level < 1:
        raise SystemComparisonError(f"level must be in (0, 1), got {level}")
    if interval not in ("expanded", "scaled", "percentile"):
        raise SystemComparisonError(f"interval must be 'expanded', 'scaled' or 'percentile', got {interval!r}")
    if test_speaker is not None and speaker is None:
        raise SystemComparisonError("test_speaker= needs speaker= (the enrolment speaker) for the two-way bootstrap")
    names, S, y, per = paired_table(trials, systems=systems, score=score, label=label, system=system, trial=trial,
                                    speaker=speaker, test_speaker=test_speaker, positive=positive)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    boot_metrics = [m for m in metrics if not (m == "auc" and test in ("auto", "delong"))]
    n = S.shape[0]
    if speaker is None:
        cl, C, n_units = np.arange(n), n, n
        M = draw_cluster_weights(np.zeros(C, np.int64), int(n_boot), rng) if boot_metrics else None
    elif test_speaker is None:
        cl = np.unique(per[speaker].astype(str), return_inverse=True)[1]
        C = n_units = int(cl.max()) + 1
        M = draw_cluster_weights(np.zeros(C, np.int64), int(n_boot), rng) if boot_metrics else None
    else:
        en = np.unique(per[speaker].astype(str), return_inverse=True)[1]
        te_u, te = np.unique(per[test_speaker].astype(str), return_inverse=True)
        te = np.where(y, -1, te)
        cl, design = two_way_pairs(en, te, int(en.max()) + 1, te_u.size)
        C = design.n_pairs
        n_units = min(design.n_enrol, design.n_test)
        U = draw_cluster_weights(np.zeros(design.n_units, np.int64), int(n_boot), rng) if boot_metrics else None
        M = design.pair_weights(U) if boot_metrics else None
    params = {"eer": {}, "auc": {},
              "min_dcf": dict(p_target=p_target, c_miss=c_miss, c_fa=c_fa, normalize=True),
              "act_dcf": dict(p_target=p_target, c_miss=c_miss, c_fa=c_fa, normalize=True,
                              threshold=bayes_threshold(p_target, c_miss, c_fa)),
              "cllr": {}}
    rows = []
    saved: dict[tuple, np.ndarray] = {}

    def iv(x: np.ndarray) -> tuple[float, float]:
        if interval == "percentile":
            from scoremix.resampling.intervals import percentile_interval

            lo_, hi_ = percentile_interval(x[None, :], level)
        elif interval == "scaled":
            from scoremix.resampling.intervals import scaled_percentile_interval

            lo_, hi_ = scaled_percentile_interval(x[None, :], nn, level)
        else:
            lo_, hi_ = expanded_percentile_interval(x[None, :], nn, level)
        return float(np.asarray(lo_).ravel()[0]), float(np.asarray(hi_).ravel()[0])

    nn = np.array([float(n_units)])
    for metric in metrics:
        if metric in boot_metrics:
            pts, reps = zip(*[_metric_point_and_reps(metric, S[:, k], y, cl, C, M, params[metric])
                              for k in range(len(names))])
        for a, b in combinations(range(len(names)), 2):
            row: dict[str, Any] = {"metric": metric, "system_a": names[a], "system_b": names[b]}
            if metric in boot_metrics:
                d = reps[a] - reps[b]
                saved[(metric, names[a], names[b])] = d
                lo, hi = iv(d)
                with np.errstate(divide="ignore", invalid="ignore"):
                    r = reps[a] / reps[b]
                    ratio = pts[a] / pts[b] if pts[b] != 0 else np.nan
                rlo, rhi = iv(np.where(np.isfinite(r), r, np.nan))
                row.update(value_a=pts[a], value_b=pts[b], difference=pts[a] - pts[b], lo=lo, hi=hi,
                           p_value=_bootstrap_p(pts[a] - pts[b], d, n_units), ratio=ratio, ratio_lo=rlo,
                           ratio_hi=rhi,
                           method="paired two-way bootstrap" if test_speaker else "paired cluster bootstrap")
            else:
                dl = delong_test(S[:, a], S[:, b], y)
                z = norm.ppf(0.5 + level / 2)
                row.update(value_a=dl["auc_a"], value_b=dl["auc_b"], difference=dl["difference"],
                           lo=dl["difference"] - z * dl["se"], hi=dl["difference"] + z * dl["se"],
                           p_value=dl["p_value"], ratio=dl["auc_a"] / dl["auc_b"], ratio_lo=np.nan,
                           ratio_hi=np.nan, method="DeLong")
            row["n_clusters"] = n_units
            rows.append(row)
    out = pd.DataFrame(rows)
    out["p_adjusted"] = np.nan
    for metric, g in out.groupby("metric", sort=False):
        p = g["p_value"].to_numpy()
        ok = np.isfinite(p)
        if ok.any():
            adj = np.full(p.shape, np.nan)
            adj[ok] = multipletests(p[ok], method=adjust)[1]
            out.loc[g.index, "p_adjusted"] = adj
    cols = ["metric", "system_a", "system_b", "value_a", "value_b", "difference", "lo", "hi", "p_value",
            "p_adjusted", "ratio", "ratio_lo", "ratio_hi", "method", "n_clusters"]
    out = out[cols]
    out.attrs["replicates"] = saved
    return out
