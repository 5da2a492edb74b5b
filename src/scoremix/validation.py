r"""Out-of-sample validation of model-based error rates against counting (:func:`validate_model`).

Protocol (issue 19).  Every cell of ``split_by`` (default speaker × class × factors) is split
at random into a fitted share A (``share``) and a held-out share B.  A model fitted on A gives
each group ``g`` (e.g. a speaker) its model-based EER / minimum DCF; the reference is the
group's *empirical* value on B.  Two counting estimators compete:

* counting: the group's own empirical value on A;
* shrunken counting: :math:`\lambda\,\hat e_{g,A} + (1-\lambda)\,\hat e_{A}` (pooled value on
  A), with the *best* :math:`\lambda\in[0,1]` for the held-out data (an oracle, so it favours
  the counts).

Scores are mean absolute errors over groups and their ratio to counting's (below 1: the
model wins).  Split ``"speakers"`` holds out whole speakers instead: groups are then
subgroups (e.g. gender × attack), the model is evaluated marginally over speakers, and
counting is the subgroup's value among the fitted speakers.

Model values are those of the model's ROC at attainable thresholds (the distinct fitted
scores): the model's expected error counts per fitted score cell, then the ROCCH EER and the
minimum DCF of those counts (:func:`rocch_eer`), exactly as the empirical values are defined.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from scoremix.metrics import eer, hull_eer, min_dcf
from scoremix.predictive.layer import predictive

__all__ = ["ValidationError", "split_cells", "heldout_split", "group_masks", "rocch_eer", "model_group_measures", "empirical_group_measures", "shrinkage_mae",
           "ValidationResult", "validate_model"]


class ValidationError(ValueError):
    """Bad input to :func:`validate_model` (names the column or option)."""


def split_cells(trials: pd.DataFrame, share: float, by: Sequence[str], *, seed: int | np.random.Generator = 0
                ) -> np.ndarray:
    """Boolean mask of the fitted share A: in every cell of ``by`` a random
    ``round(share · n)`` trials (at least one, at most ``n − 1`` when ``n ≥ 2``)."""
    if not 0 < share < 1:
        raise ValidationError(f"share must lie in (0, 1), got {share!r}")
    for c in by:
        if c not in trials.columns:
            raise ValidationError(f"split column {c!r} is not in the trial table")
    rng = np.random.default_rng(seed)
    codes = trials.groupby(list(by), sort=True, observed=True).ngroup().to_numpy()
    u = rng.random(len(trials))
    order = np.lexsort((u, codes))
    cs = codes[order]
    start = np.r_[0, np.flatnonzero(np.diff(cs)) + 1]
    n = np.diff(np.r_[start, cs.size])
    rank = np.arange(cs.size) - np.repeat(start, n)
    k = np.clip(np.rint(share * n), 1, np.maximum(n - 1, 1))
    mask = np.zeros(len(trials), bool)
    mask[order] = rank < np.repeat(k, n)
    return mask


def group_masks(frame: pd.DataFrame, y: np.ndarray, by: Sequence[str], negative_by: str | None = None
                ) -> tuple[pd.Index, list[np.ndarray]]:
    """Keys and boolean trial masks of the groups of ``by``; with ``negative_by`` every group
    is split into one cell per level of that column among its negatives (all the group's
    positives against the negatives of one level: the per-attack EER of anti-spoofing)."""
    by = list(by)
    grp = frame.groupby(by if len(by) > 1 else by[0], sort=True, observed=True)
    codes = grp.ngroup().to_numpy()
    keys = list(grp.groups.keys())
    if negative_by is None:
        idx = pd.Index(keys, name=by[0]) if len(by) == 1 else pd.MultiIndex.from_tuples(keys, names=by)
        return idx, [codes == k for k in range(len(keys))]
    if negative_by not in frame.columns:
        raise ValidationError(f"negative_by column {negative_by!r} is not in the trial table")
    nb = frame[negative_by].to_numpy()
    levels = sorted(pd.unique(nb[y == 0]), key=str)
    out_keys, masks = [], []
    for k, key in enumerate(keys):
        g = codes == k
        for lv in levels:
            out_keys.append((*(key if isinstance(key, tuple) else (key,)), lv))
            masks.append(g & ((y == 1) | (nb == lv)))
    return pd.MultiIndex.from_tuples(out_keys, names=[*by, negative_by]), masks


def model_group_measures(fit: Any, by: Sequence[str], *, label: str, positive: Any, p_target: float = 0.05,
                         marginal_over: Sequence[str] | None = None, trials: pd.DataFrame | None = None,
                         thresholds: np.ndarray | None = None, negative_by: str | None = None) -> pd.DataFrame:
    """Model EER and minimum DCF of every cell of :func:`group_masks` at attainable thresholds.

    For the trials of a cell the model's FNR and FPR at every fitted distinct score τ
    (:meth:`scoremix.predictive.Predictive.rates_at`) are its operating points; the ROCCH EER
    (:func:`rocch_eer`) and the minimum DCF (non-normalised, unit costs) are those of the points."""
    pred = predictive(fit, trials, label=label, positive=positive, marginal_over=marginal_over)
    keys, masks = group_masks(pred.frame, pred.y, by, negative_by)
    if thresholds is None:
        thresholds = np.unique(pred.score[np.isfinite(pred.score)])
    tau = np.asarray(thresholds, np.float64)
    rows = []
    for m in masks:
        y = pred.y[m]
        if y.all() or not y.any():
            rows.append((np.nan, np.nan))
            continue
        fnr, fpr = pred.rates_at(tau, mask=m)
        fnr, fpr = np.r_[0.0, fnr[0], 1.0], np.r_[1.0, fpr[0], 0.0]
        fnr, fpr = np.maximum.accumulate(fnr), np.minimum.accumulate(fpr)
        rows.append((rocch_eer(fnr, fpr), float(np.min(p_target * fnr + (1 - p_target) * fpr))))
    return pd.DataFrame(rows, index=keys, columns=["eer", "min_dcf"])


def rocch_eer(pmiss: np.ndarray, pfa: np.ndarray) -> float:
    r"""ROCCH EER of operating points :math:`(P_{fa,k}, P_{miss,k})` (any real-valued rates,
    e.g. a model's expected rates at attainable thresholds, in any order):
    :math:`\max_{w\in[0,1]}\min_k\,[w P_{miss,k} + (1-w) P_{fa,k}]`, the EER of the lower
    convex hull of the points with (1, 0) and (0, 1) — the same definition as
    :func:`scoremix.metrics.eer` (``method="rocch"``) for counts.  Computed exactly by
    :func:`scoremix.metrics.hull_eer` on the points sorted by :math:`P_{fa}` (descending; ties:
    :math:`P_{miss}` ascending); NaN when any rate is NaN."""
    pm, pf = np.asarray(pmiss, np.float64).ravel(), np.asarray(pfa, np.float64).ravel()
    order = np.lexsort((pm, -pf))
    return hull_eer(pf[order], pm[order])[0]


def empirical_group_measures(frame: pd.DataFrame, by: Sequence[str], *, score: str, y: np.ndarray,
                             p_target: float = 0.05, negative_by: str | None = None) -> pd.DataFrame:
    """Empirical (ROCCH) EER and minimum DCF of every cell of :func:`group_masks`."""
    keys, masks = group_masks(frame, y, by, negative_by)
    s = frame[score].to_numpy(np.float64)
    rows = []
    for m in masks:
        yy = y[m]
        if yy.all() or not yy.any():
            rows.append((np.nan, np.nan))
            continue
        rows.append((float(eer(s[m], yy)), float(min_dcf(s[m], yy, p_target=p_target).value)))
    return pd.DataFrame(rows, index=keys, columns=["eer", "min_dcf"])


def shrinkage_mae(own: np.ndarray, pooled: float, truth: np.ndarray) -> tuple[float, float]:
    """MAE of the best linear shrinkage :math:`\\lambda\\,own + (1-\\lambda)\\,pooled`
    (λ on a grid of 101 values in [0, 1]) and the λ attaining it."""
    lam = np.linspace(0, 1, 101)
    est = lam[:, None] * own[None, :] + (1 - lam[:, None]) * pooled
    mae = np.abs(est - truth[None, :]).mean(axis=1)
    k = int(np.argmin(mae))
    return float(mae[k]), float(lam[k])


@dataclass
class ValidationResult:
    """Result of :func:`validate_model`.

    ``summary``: one row per grouping (``cells``) and measure (``eer``, ``min_dcf``): MAE of the model, of counting and
    of the best shrinkage, their ratios to counting, the shrinkage λ and the number of groups.
    ``groups``: per group the held-out truth, the model value and the counts (column
    ``cells`` names the grouping)."""

    summary: pd.DataFrame
    groups: pd.DataFrame
    info: dict = field(default_factory=dict)

    def plot(self, measure: str = "eer", ax: Any = None):
        """Held-out value against the model's and the counting estimate, per group."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(4.5, 4.5))
        g = self.groups
        g = g[g["cells"] == g["cells"].iloc[0]] if "cells" in g else g
        t = g[f"{measure}_heldout"]
        ax.scatter(t, g[f"{measure}_count"], s=12, alpha=0.6, label="counting (A)")
        ax.scatter(t, g[f"{measure}_model"], s=12, alpha=0.8, label="model (A)")
        hi = float(np.nanmax(np.r_[t, g[f"{measure}_count"], g[f"{measure}_model"]]))
        ax.plot([0, hi], [0, hi], color="grey", lw=0.8)
        ax.set_xlabel(f"held-out {measure} (B)")
        ax.set_ylabel("estimate from A")
        ax.legend(frameon=False)
        return ax


_SUMMARY_COLUMNS = ["n_groups", "mae_model", "mae_count", "mae_shrunk", "ratio_model", "ratio_shrunk", "shrink_lambda"]


def _ratio(mae: float, mae_count: float) -> float:
    """``mae / mae_count``; when counting is exact (``mae_count = 0``): NaN if ``mae`` is 0
    too (0/0), ``inf`` otherwise — the estimate is worse than counting, not undefined
    (s9robust: a separable attack gave NaN while the model erred)."""
    if mae_count > 0:
        return mae / mae_count
    return float("inf") if mae > 0 else float("nan")


def _summarise(tab: pd.DataFrame, pooled: dict[str, float]) -> pd.DataFrame:
    """One row per measure; a measure no group can score (no group with both classes in A,
    in B and in the model) gets ``n_groups = 0`` and NaN errors (s9robust: a table with one
    negative trial has no held-out negatives)."""
    rows = []
    for m in ("eer", "min_dcf"):
        t = tab[[f"{m}_heldout", f"{m}_model", f"{m}_count"]].dropna()
        if t.empty:
            rows.append(dict(measure=m, n_groups=0) | {k: np.nan for k in _SUMMARY_COLUMNS[1:]})
            continue
        truth = t[f"{m}_heldout"].to_numpy()
        mae_model = float(np.abs(t[f"{m}_model"] - truth).mean())
        mae_count = float(np.abs(t[f"{m}_count"] - truth).mean())
        mae_shr, lam = shrinkage_mae(t[f"{m}_count"].to_numpy(), pooled[m], truth)
        rows.append(dict(measure=m, n_groups=len(t), mae_model=mae_model, mae_count=mae_count, mae_shrunk=mae_shr,
                         ratio_model=_ratio(mae_model, mae_count), ratio_shrunk=_ratio(mae_shr, mae_count),
                         shrink_lambda=lam))
    return pd.DataFrame(rows).set_index("measure")


def heldout_split(trials: pd.DataFrame, *, score: str = "score", label: str = "label", speaker: str = "speaker",
                  factors: Sequence[str] = (), positive: Any = None, share: float = 0.5, split: str = "trials",
                  seed: int | np.random.Generator = 0) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray, np.ndarray]:
    """:func:`validate_model`'s split, ``(A, B, y_A, y_B)`` with the classes as 0/1: the
    speakers with both classes, then either a random ``share`` of every speaker × class ×
    factor cell (:func:`split_cells`, ``split="trials"``) or of whole speakers
    (``"speakers"``) in A.  The score, speaker and factor columns are checked first, so a bad
    row is named by the caller's index."""
    from scoremix.locscale.fit import check_trial_columns
    from scoremix.trials import label_to_binary

    for c in [score, label, speaker, *factors]:
        if c not in trials.columns:
            raise ValidationError(f"column {c!r} is not in the trial table (columns: {list(trials.columns)})")
    if split not in ("trials", "speakers"):
        raise ValidationError(f"split must be 'trials' or 'speakers', got {split!r}")
    check_trial_columns(trials, score, [speaker, *factors], error=ValidationError)
    y_all = np.asarray(label_to_binary(trials[label], positive=positive), dtype=np.int8)
    both = pd.Series(y_all, index=trials.index).groupby(trials[speaker].to_numpy()).agg(lambda v: 0 < v.mean() < 1)
    keep = trials[speaker].map(both).to_numpy(bool)
    data = trials.loc[keep].reset_index(drop=True)
    y = y_all[keep]
    if split == "trials":
        in_a = split_cells(data.assign(__y=y), share, [speaker, "__y", *factors], seed=seed)
    else:
        rng = np.random.default_rng(seed)
        spk = np.unique(data[speaker].astype(str))
        chosen = set(rng.choice(spk, size=max(1, int(round(share * spk.size))), replace=False))
        in_a = data[speaker].astype(str).isin(chosen).to_numpy()
    return data.loc[in_a].reset_index(drop=True), data.loc[~in_a].reset_index(drop=True), y[in_a], y[~in_a]


def validate_model(trials: pd.DataFrame, *, score: str = "score", label: str = "label", speaker: str = "speaker",
                   factors: Sequence[str] = (), positive: Any = None, by: Sequence[str] | str | None = None,
                   share: float = 0.2, split: str = "trials", p_target: float = 0.05,
                   seed: int | np.random.Generator = 0, fitter: Callable[..., Any] | None = None,
                   also_by: Sequence[Sequence[str] | str] = (), **fit_kwargs: Any) -> ValidationResult:
    """Split, fit on A, and score model vs counting vs shrunken counting on B (module docstring).

    Parameters
    ----------
    trials: the trial table.
    score, label, speaker, factors, positive: as for :func:`scoremix.score_model`.
    by: the groups compared (default: ``speaker`` for ``split="trials"``; ``factors`` — or the
        class only — for ``split="speakers"``).
    share: fitted share A.
    split: ``"trials"`` (within every speaker × class × factor cell) or ``"speakers"``
        (whole speakers).
    p_target: prior of the minimum DCF.
    seed: the split's randomness.
    also_by: further groupings scored from the same fit: column lists, or
        ``dict(by=[...], negative_by="attack")`` (each group's positives against the negatives of
        one level, e.g. gender × attack cells).
    fitter: ``fitter(A, score=, label=, speaker=, factors=, positive=, **fit_kwargs)`` → fit;
        default :func:`scoremix.score_model`.
    """
    from scoremix.locscale.select import score_model

    fitter = score_model if fitter is None else fitter
    A, B, yA, yB = heldout_split(trials, score=score, label=label, speaker=speaker, factors=factors,
                                 positive=positive, share=share, split=split, seed=seed)
    if split == "trials":
        by = [speaker] if by is None else ([by] if isinstance(by, str) else list(by))
    else:
        by = (list(factors) or [label]) if by is None else ([by] if isinstance(by, str) else list(by))
    fit = fitter(A, score=score, label=label, speaker=speaker, factors=list(factors), positive=positive,
                 **fit_kwargs)
    groupings = [(list(by), None)]
    for b in also_by:
        if isinstance(b, dict):
            gb = b["by"]
            groupings.append(([gb] if isinstance(gb, str) else list(gb), b.get("negative_by")))
        else:
            groupings.append(([b] if isinstance(b, str) else list(b), None))
    sA = A[score].to_numpy(np.float64)
    pooled = {"eer": float(eer(sA, yA)), "min_dcf": float(min_dcf(sA, yA, p_target=p_target).value)}
    tabs, summs = [], []
    for gb, nb in groupings:
        if split == "trials":
            mod = model_group_measures(fit, gb, label=label, positive=positive, p_target=p_target, negative_by=nb)
        else:
            mod = model_group_measures(fit, gb, label=label, positive=positive, p_target=p_target, trials=B,
                                       marginal_over=[speaker], negative_by=nb)
        cnt = empirical_group_measures(A, gb, score=score, y=yA, p_target=p_target, negative_by=nb)
        held = empirical_group_measures(B, gb, score=score, y=yB, p_target=p_target, negative_by=nb)
        tab = pd.concat([held.add_suffix("_heldout"), mod.add_suffix("_model"), cnt.add_suffix("_count")], axis=1)
        name = " × ".join(gb + ([nb] if nb else []))
        tabs.append(tab.assign(cells=name))
        summs.append(_summarise(tab, pooled).assign(cells=name).set_index("cells", append=True)
                     .reorder_levels(["cells", "measure"]))
    tab = tabs[0] if len(tabs) == 1 else pd.concat(tabs)
    summ = pd.concat(summs)
    return ValidationResult(summary=summ, groups=tab, info=dict(share=share, split=split, n_fit=len(A), n_heldout=len(B),
                                                                 selection=getattr(fit, "selection", None)))
