"""Casual-Conversations style breakdowns of a detector by trial attributes.

For each attribute (or intersection of attributes) and each of its values ``v``, with
``w_i`` the trial weights (1, or bootstrap multiplicities) and accept ``s_i ≥ τ``:

* ``n``, ``share = n_v / n`` and the class shares ``pos_share = P_v / P``,
  ``neg_share = N_v / N``;
* ``precision = TP_v / (TP_v + FP_v)`` at ``τ``;
* ``log_loss = -(1/n_v) Σ_{i∈v} [y_i log p_i + (1-y_i) log(1-p_i)]`` when the scores are
  probabilities ``p_i ∈ [0, 1]`` (clipped to ``[1e-15, 1-1e-15]``);
* ``fn_share = FN_v / FN`` and ``fp_share = FP_v / FP`` — the share of all false
  negatives (false positives) that fall in ``v``, to compare with ``pos_share``
  (``neg_share``); ``fn_share_ratio = fn_share / pos_share``, ``fp_share_ratio = fp_share / neg_share``;
* ``eer`` (ROC convex hull) and ``min_dcf`` of the value's trials.

Intervals come from a cluster bootstrap over speakers (or over trials when no speaker
column is given), resampling the whole table, so shares vary too.  They are the
``"expanded"`` intervals of :func:`scoremix.resampling.intervals.measure_intervals` (the
method of :func:`scoremix.fairness.subgroup_dcf` for measures without a studentised form:
percentile at small-sample ``t`` levels for the value's ``n`` speakers, bias-shifted for the
minimum ``min_dcf``).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
import scipy.sparse as sp
from tqdm.auto import tqdm

from scoremix._deprecate import renamed_kwargs
from scoremix.resampling.bootstrap import Population, draw_cluster_weights, rocch_eer_from_rates
from scoremix.fairness.engine import CostSpec
from scoremix.fairness.subgroups import SubgroupError, binary_labels
from scoremix.resampling.intervals import measure_intervals

__all__ = ["breakdown", "BREAKDOWN_MEASURES"]

BREAKDOWN_MEASURES = ("share", "precision", "log_loss", "fn_share", "fp_share", "fn_share_ratio",
                      "fp_share_ratio", "eer", "min_dcf")


def _sparse(rows: np.ndarray, cols: np.ndarray, data: np.ndarray, shape: tuple[int, int]) -> sp.csr_matrix:
    m = sp.csr_matrix((data, (rows, cols)), shape=shape)
    m.sum_duplicates()
    return m


class _Breakdown:
    def __init__(self, codes: np.ndarray, V: int, s: np.ndarray, y: np.ndarray, cl: np.ndarray, C: int,
                 thr: float, probs: bool, cost: CostSpec) -> None:
        ok = codes >= 0
        self.V = V
        self.cost = cost
        self.probs = probs
        r, c = codes[ok], cl[ok]
        yy, ss = y[ok].astype(bool), s[ok]
        acc = ss >= thr
        shp = (V, C)
        one = np.ones(r.size)
        self.A_n = _sparse(r, c, one, shp)
        self.n_clusters = np.asarray((self.A_n > 0).sum(axis=1)).ravel().astype(float)
        self.A_pos = _sparse(r[yy], c[yy], one[yy], shp)
        self.A_tp = _sparse(r[yy & acc], c[yy & acc], one[yy & acc], shp)
        self.A_fp = _sparse(r[~yy & acc], c[~yy & acc], one[~yy & acc], shp)
        if probs:
            p = np.clip(ss, 1e-15, 1 - 1e-15)
            loss = -(yy * np.log(p) + (~yy) * np.log1p(-p))
            self.A_loss = _sparse(r, c, loss, shp)
        self.pops = []
        for v in range(V):
            m = r == v
            self.pops.append(Population(ss[m], yy[m], c[m], C) if m.any() and yy[m].any() and (~yy[m]).any()
                             else None)

    def measures(self, M: np.ndarray) -> dict[str, np.ndarray]:
        n = self.A_n @ M
        pos = self.A_pos @ M
        neg = n - pos
        tp = self.A_tp @ M
        fp = self.A_fp @ M
        fn = pos - tp
        B = M.shape[1]
        with np.errstate(invalid="ignore", divide="ignore"):
            out = {"n": n, "n_pos": pos, "n_neg": neg,
                   "share": n / n.sum(0), "pos_share": pos / pos.sum(0), "neg_share": neg / neg.sum(0),
                   "precision": tp / (tp + fp), "fn_share": fn / fn.sum(0), "fp_share": fp / fp.sum(0)}
            out["fn_share_ratio"] = out["fn_share"] / out["pos_share"]
            out["fp_share_ratio"] = out["fp_share"] / out["neg_share"]
            out["log_loss"] = (self.A_loss @ M) / n if self.probs else np.full((self.V, B), np.nan)
        a, b = self.cost.weights
        eer = np.full((self.V, B), np.nan)
        mind = np.full((self.V, B), np.nan)
        for v, pop in enumerate(self.pops):
            if pop is None:
                continue
            cnt = pop.counts(M)
            pm, pf = cnt.rates()
            dcf = a * pm + b * pf
            mind[v] = np.nanmin(np.where(np.isnan(dcf), np.inf, dcf), axis=0)
            mind[v][~np.isfinite(mind[v])] = np.nan
            eer[v] = rocch_eer_from_rates(pm, pf)
        out["eer"], out["min_dcf"] = eer, mind
        return out


@renamed_kwargs(ci="level", random_state="seed")
def breakdown(trials: pd.DataFrame, by: Sequence[str | Sequence[str]], score: str = "score", label: str = "label",
              threshold: float | None = None, *, positive: Any = None, speaker: str | None = None,
              p_target: float = 0.05, c_miss: float = 1.0, c_fa: float = 1.0, normalize: bool = False,
              n_boot: int = 0, level: float = 0.95, seed: int | np.random.Generator | None = None,
              progress: bool = True) -> pd.DataFrame:
    """Per-value breakdown of a detector for one or more categorical attributes.

    Parameters
    ----------
    trials:
        trial table.
    by:
        attributes; a string is one attribute, a list/tuple an intersection
        (e.g. ``["skin", ("gender", "age")]``).
    score, label, positive:
        score column (higher = more positive), label column, positive label value.
    threshold:
        decision threshold (accept ``score >= threshold``); default 0.5 when all scores
        lie in ``[0, 1]`` (probabilities), else the overall minimum-DCF threshold.
    speaker:
        cluster column for the bootstrap (``None``: resample trials).
    p_target, c_miss, c_fa, normalize:
        cost parameters of ``min_dcf``.
    n_boot, level, seed, progress:
        bootstrap replicates, interval level, seed and progress bar.

    Returns
    -------
    DataFrame: ``attribute, value, n, n_pos, n_neg, share, pos_share, neg_share,
    precision, log_loss, fn_share, fp_share, fn_share_ratio, fp_share_ratio, eer, min_dcf``
    (+ ``_lo/_hi`` of :data:`BREAKDOWN_MEASURES` when ``n_boot > 0``) and ``threshold``.
    """
    ci = level  # the body's name for level= (renamed API argument)
    random_state = seed  # the body's name for seed= (renamed API argument)
    for col in (score, label):
        if col not in trials.columns:
            raise SubgroupError(f"column {col!r} not in the trial table")
    s = pd.to_numeric(trials[score], errors="coerce").to_numpy(float)
    if not np.isfinite(s).all():
        raise SubgroupError(f"score column {score!r} has a missing or non-finite value in row "
                            f"{int(np.flatnonzero(~np.isfinite(s))[0])}")
    y = binary_labels(trials[label], positive=positive)
    cost = CostSpec(p_target=p_target, c_miss=c_miss, c_fa=c_fa, normalize=normalize)
    probs = bool(s.min() >= 0.0 and s.max() <= 1.0)
    if threshold is None:
        if probs:
            threshold = 0.5
        else:
            a, b = cost.weights
            pop = Population(s, y, np.zeros(s.size, np.int64), 1)
            pm, pf = pop.counts(np.ones((1, 1))).rates()
            threshold = float(pop.thresholds[int(np.argmin((a * pm + b * pf)[:, 0]))])
    if speaker is None:
        cl = np.arange(s.size, dtype=np.int64)
    else:
        if speaker not in trials.columns:
            raise SubgroupError(f"speaker column {speaker!r} not in the trial table")
        cl = pd.factorize(trials[speaker], sort=True)[0].astype(np.int64)
    C = int(cl.max()) + 1
    specs = []
    for item in by:
        cols = [item] if isinstance(item, str) else list(item)
        missing = [c for c in cols if c not in trials.columns]
        if missing:
            raise SubgroupError(f"attribute column(s) {missing} not in the trial table")
        key = trials[cols].astype(object).apply(lambda r: "×".join(map(str, r)), axis=1) if len(cols) > 1 \
            else trials[cols[0]]
        codes, values = pd.factorize(key, sort=True)
        specs.append(("×".join(cols), codes.astype(np.int64), list(values)))
    bds = [_Breakdown(codes, len(vals), s, y, cl, C, threshold, probs, cost) for _, codes, vals in specs]
    ones = np.ones((C, 1))
    points = [bd.measures(ones) for bd in bds]
    reps: list[list[dict[str, np.ndarray]]] = [[] for _ in bds]
    if n_boot > 0:
        rng = np.random.default_rng(random_state)
        chunk = max(1, min(n_boot, int(2e7 // max(C, s.size // 10 + 1))))
        done = 0
        with tqdm(total=n_boot, desc="breakdown bootstrap", disable=not progress, unit="rep") as bar:
            while done < n_boot:
                nb = min(chunk, n_boot - done)
                M = draw_cluster_weights(np.zeros(C, np.int64), nb, rng)
                for k, bd in enumerate(bds):
                    reps[k].append(bd.measures(M))
                done += nb
                bar.update(nb)
    frames = []
    for k, (name, _, vals) in enumerate(specs):
        pt = points[k]
        df = pd.DataFrame({"attribute": name, "value": vals})
        for key in ("n", "n_pos", "n_neg"):
            df[key] = pt[key][:, 0].astype(np.int64)
        for key in ("share", "pos_share", "neg_share", "precision", "log_loss", "fn_share", "fp_share",
                    "fn_share_ratio", "fp_share_ratio", "eer", "min_dcf"):
            df[key] = pt[key][:, 0]
            if n_boot > 0 and key in BREAKDOWN_MEASURES:
                allr = {key: np.concatenate([r[key] for r in reps[k]], axis=1)}
                df[f"{key}_lo"], df[f"{key}_hi"] = measure_intervals(allr, {key: pt[key][:, 0]}, bds[k].n_clusters,
                                                                     ci, [key], "expanded")[key]
        df["threshold"] = threshold
        frames.append(df)
    return pd.concat(frames, ignore_index=True)
