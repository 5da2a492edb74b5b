r"""Studentised speaker-cluster intervals of the overall EER, minDCF, actDCF and Cllr.

Layer: used by :func:`scoremix.resampling.cluster_bootstrap` (through
:class:`scoremix.resampling.WeightedReplicates`) and by the empirical EER interval of the
model-vs-empirical tables; built on the counting of :mod:`~scoremix.resampling.bootstrap`, the
linearisation of :mod:`~scoremix.resampling.linearize` and the interval formula of
:func:`scoremix.resampling.intervals.studentized_interval` — the method of the subgroup
measures (docs/intervals.md), applied to the whole table as one stratum of ``C`` speakers.

Every one of the four is a weighted sum of two ratio estimators of speaker totals at a
*fixed* operating point,

.. math::

    h = a\,\frac{\sum_c m_c U_c}{\sum_c m_c P_c} + b\,\frac{\sum_c m_c V_c}{\sum_c m_c N_c},

(``m_c``: bootstrap multiplicity of speaker ``c``), whose log has the cluster influence
``Z_c = (a·I^U_c + b·I^V_c)/h`` with ``I^U_c = (U_c − r_U P_c)/Σ m P`` (and ``V`` alike) and
the cluster variance ``C/(C−1)·[Σ m Z² − (Σ m Z)²/C]``:

* **actDCF**: ``U, V`` = misses and false alarms at the Bayes threshold, ``a = c_miss·p``,
  ``b = c_fa·(1−p)`` — no threshold is chosen, so the bootstrap-*t* interval alone;
* **Cllr**: ``U, V`` = the speakers' sums of ``log(1+e^{∓ℓ})``, ``a = b = 1/(2 ln 2)`` —
  bootstrap-*t* (an infinite LLR cost: no standard error, the caller falls back to the
  expanded percentile interval);
* **minDCF**: the cost at the data's minimising threshold ``τ̂`` (its derivative in ``τ``
  vanishes there: envelope theorem), and re-minimising in the replicate is the threshold part
  ``D_b ≤ 0``, reflected with weight :data:`~scoremix.resampling.intervals.MINIMUM_OPTIMISM`;
* **EER** (ROCCH): ``max_α min_τ α·P_miss + (1−α)·P_fa`` — at the data's saddle ``α̂`` it is the
  minimum over ``τ`` of a cost with weights ``(α̂, 1 − α̂)``, so it gets the minDCF treatment
  with those weights (the derivative in ``α`` vanishes at the saddle).

Minima use the tail levels ``Φ(∓z·√(C/(C−1)))``, as in the subgroup tables.  Ends are
capped at the measure's logical maximum (EER ½, minDCF the trivial system's cost).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scoremix.resampling.bootstrap import Population, rocch_eer_from_rates
from scoremix.metrics import CostSpec
from scoremix.resampling.linearize import StratifiedVariance, cluster_counts_at, ratio_influence
from scoremix.resampling.intervals import MINIMUM_OPTIMISM, studentized_interval

__all__ = ["OVERALL_KINDS", "log_se_two_ratios", "studentized_overall_interval"]

#: the overall measures with a studentised interval
OVERALL_KINDS = ("eer", "min_dcf", "dcf", "cllr")


def log_se_two_ratios(U: np.ndarray, P: np.ndarray, V: np.ndarray, N: np.ndarray, a: float, b: float,
                      M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``h = a·ΣmU/ΣmP + b·ΣmV/ΣmN`` and the cluster standard error of ``log h`` (module
    docstring) for weights ``M`` ``(C, B)``; ``U, V``: ``(C,)`` or ``(C, B)``; ``P, N``: ``(C,)``.
    Returns ``(h (B,), se (B,))``."""
    B = M.shape[1]
    U = np.broadcast_to(U.reshape(U.shape[0], -1), (U.shape[0], B))
    V = np.broadcast_to(V.reshape(V.shape[0], -1), (V.shape[0], B))
    r_u, i_u = ratio_influence(U, P, M)
    r_v, i_v = ratio_influence(V, N, M)
    h = a * r_u + b * r_v
    with np.errstate(invalid="ignore", divide="ignore"):
        Z = (a * i_u + b * i_v) / h[None, :]
    var = StratifiedVariance(np.zeros(M.shape[0], np.int64))(Z, M)
    return h, np.sqrt(var)


def studentized_overall_interval(kind: str, scores: np.ndarray, y: np.ndarray, clusters: np.ndarray,
                                 n_clusters: int, M: np.ndarray, reps: np.ndarray, ci: float,
                                 population: Population | None = None, **params: Any) -> tuple[float, float]:
    """Studentised interval of one overall measure (module docstring).

    Parameters
    ----------
    kind:
        ``"eer"``, ``"min_dcf"`` (``params``: ``p_target, c_miss, c_fa, normalize``), ``"dcf"``
        (also ``threshold``; accept ``s ≥ τ``) or ``"cllr"`` (``scores`` are LLRs).
    scores, y, clusters, n_clusters:
        trials (scores already in the higher-is-positive direction), 0/1 labels, cluster
        codes in ``[0, C)``.
    M:
        ``(C, B)`` bootstrap multiplicities.
    reps:
        ``(B,)`` the measure in every replicate (:class:`scoremix.resampling.WeightedReplicates`;
        NaN where a replicate lacks a class).
    ci:
        interval level.
    population:
        the trials' :class:`~scoremix.resampling.bootstrap.Population` when the caller already
        built it (the replicates did); built here otherwise.

    Returns
    -------
    ``(lo, hi)``, NaN where the studentised interval is undefined (an estimate of 0, no
    standard error, an infinite Cllr term) — the caller falls back to another interval.
    """
    if kind not in OVERALL_KINDS:
        raise ValueError(f"kind must be one of {OVERALL_KINDS}, got {kind!r}")
    s = np.asarray(scores, np.float64)
    y = np.asarray(y).astype(bool)
    cl = np.asarray(clusters, np.int64)
    C = int(n_clusters)
    M = np.asarray(M, np.float64)
    ones = np.ones((C, 1))
    P = np.bincount(cl[y], minlength=C).astype(float)
    N = np.bincount(cl[~y], minlength=C).astype(float)
    minimum = kind in ("eer", "min_dcf")
    nan = (float("nan"), float("nan"))
    upper = np.inf
    if kind == "cllr":
        cost = np.where(y, np.logaddexp(0.0, -s), np.logaddexp(0.0, s))
        U = np.bincount(cl[y], weights=cost[y], minlength=C)
        V = np.bincount(cl[~y], weights=cost[~y], minlength=C)
        if not np.isfinite(cost).all():
            return nan
        a = b = 1.0 / (2.0 * np.log(2.0))
        fixed, se_b = log_se_two_ratios(U, P, V, N, a, b, M)
        point, se = log_se_two_ratios(U, P, V, N, a, b, ones)
    else:
        if kind == "eer":
            pop = population if population is not None else Population(s, y, cl, C)
            pm0, pf0 = pop.counts(ones).rates()
            value, alpha = rocch_eer_from_rates(pm0, pf0, return_alpha=True)
            a, b = float(alpha[0]), 1.0 - float(alpha[0])
            upper = 0.5
        else:
            a, b = CostSpec(p_target=params["p_target"], c_miss=params["c_miss"], c_fa=params["c_fa"],
                            normalize=params["normalize"]).weights
        if kind == "dcf":
            values, rank = np.unique(s, return_inverse=True)
            thr = np.array([np.searchsorted(values, params["threshold"], side="left")])
        else:
            if kind == "min_dcf":
                pop = population if population is not None else Population(s, y, cl, C)
                pm0, pf0 = pop.counts(ones).rates()
                upper = min(a, b)
            k_hat = int(np.argmin(a * pm0[:, 0] + b * pf0[:, 0]))
            rank, thr = pop.rank, np.array([pop.cand[k_hat]])
        fn, fp, _, _ = cluster_counts_at(rank, y, cl, C, thr)
        fixed, se_b = log_se_two_ratios(fn[:, 0], P, fp[:, 0], N, a, b, M)
        point, se = log_se_two_ratios(fn[:, 0], P, fp[:, 0], N, a, b, ones)
        if kind == "eer":
            point = value  # equal to the fixed-point cost up to the golden-section tolerance
    with np.errstate(invalid="ignore"):
        empty = (P @ M <= 0) | (N @ M <= 0)
    reps = np.where(empty, np.nan, np.asarray(reps, np.float64))
    fixed = reps if kind in ("dcf", "cllr") else np.where(empty, np.nan, fixed)
    lo, hi = studentized_interval(np.atleast_1d(point), np.atleast_1d(se), reps[None, :], fixed[None, :],
                                  se_b[None, :], ci, reflect_threshold=minimum,
                                  optimism=MINIMUM_OPTIMISM if minimum else 1.0,
                                  n=np.array([float(C)]) if minimum else None)
    return float(np.minimum(lo[0], upper)), float(np.minimum(hi[0], upper))
