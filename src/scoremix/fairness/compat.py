"""``compat="sveva"``: the SVEva Fair library's conventions for point estimates.

Established from the library's source (``wiebket/bt4vt``, module ``sveva_fair/evaluate.py``
of 2021, the version behind the paper; later ``bt4vt/metrics.py`` keeps the same
functions).  Differences from scoremix's exact counting, each implemented here:

1. **Curve.**  Costs are evaluated only at the thresholds stored by
   ``sklearn.metrics.det_curve`` as it was before scikit-learn 1.7 (rebuilt in
   :func:`sveva_curve`, so the installed version does not matter): the distinct scores, trimmed to the range from the
   lowest threshold that has the minimal false-alarm count to the first threshold that
   accepts every positive.  There is no "reject all" point (``τ = +∞``).
2. **minDCF** is ``nanargmin`` of ``c_fn·π·FNR + c_fp·(1-π)·FPR`` over those stored
   points (the first, i.e. lowest, threshold on ties).
3. **Cost at the overall threshold.**  ``C^g(τ*)`` is read off the *subgroup's* curve at
   the stored threshold nearest to ``τ*`` (``argmin |t - τ*|``, the lower one on ties),
   not counted at ``τ*`` itself (``fpfn_min_threshold``).  The same reading gives the
   subgroup FPR/FNR at ``τ*``.
4. **EER** is ``max(FPR, FNR)`` at the stored point minimising ``|FNR - FPR|`` (the
   library reports it in percent; here it stays a fraction).
5. The library's own FPR/FNR ratio helper (``fpfn_ratio``) divides by the rate of the
   *last* subgroup of its loop; this is a bug, not a convention, and is **not**
   reproduced: ratios are ``rate_g(τ*) / rate_all(τ*)`` as in the paper.
6. The library has no normalisation, no reliability flags and no speaker counts; those
   columns are still computed (exactly) by scoremix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from scoremix.fairness.engine import CostSpec

if TYPE_CHECKING:  # pragma: no cover
    from scoremix.fairness.prepare import Prepared

__all__ = ["sveva_curve", "sveva_point_measures"]


def sveva_curve(scores: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stored DET curve ``(fpr, fnr, thresholds)`` as the library got it in 2021.

    bt4vt called ``sklearn.metrics.det_curve(y, scores, pos_label=1)`` of scikit-learn
    < 1.7; that function is rebuilt here so that results do not depend on the installed
    version (1.7 added a reject-all point when the top score is a negative).  With the
    distinct scores ``t_0 > t_1 > … > t_{K-1}`` and the counts ``FP_k, TP_k`` of negatives /
    positives with score ``≥ t_k``:

    * keep ``k = k_0 … k_1`` with ``k_0`` the *last* index where ``FP_k = FP_0`` (the lowest
      threshold that still has the minimal false-alarm count) and ``k_1`` the *first* index
      where ``TP_k = P`` (every positive accepted);
    * return ``FP_k / N``, ``(P - TP_k) / P`` and ``t_k`` in increasing-threshold order.

    There is no point for ``τ = +∞`` (reject all).
    """
    s = np.asarray(scores, dtype=float)
    yy = np.asarray(y).astype(bool)
    order = np.argsort(-s, kind="mergesort")
    s_sorted, y_sorted = s[order], yy[order]
    last = np.r_[np.flatnonzero(np.diff(s_sorted) != 0), s_sorted.size - 1]  # end of each distinct score
    tp = np.cumsum(y_sorted)[last].astype(float)
    fp = np.cumsum(~y_sorted)[last].astype(float)
    thr = s_sorted[last]
    P, N = tp[-1], fp[-1]
    k0 = int(np.searchsorted(fp, fp[0], side="right")) - 1
    k1 = int(np.searchsorted(tp, P, side="left"))
    sl = slice(k0, k1 + 1)
    return (fp[sl] / N)[::-1].copy(), ((P - tp[sl]) / P)[::-1].copy(), thr[sl][::-1].copy()


def _nearest(thr: np.ndarray, t: float) -> int:
    return int(np.argmin(np.abs(thr - t)))


def sveva_point_measures(prep: "Prepared", cost: CostSpec) -> dict[str, np.ndarray]:
    """Point estimates in the engine's output format (``(G, 1)`` / ``(1,)`` arrays),
    computed with the SVEva Fair library's conventions listed in the module docstring."""
    a, b = cost.weights
    s, y = prep.scores, prep.y
    fpr, fnr, thr = sveva_curve(s, y)
    dcf = a * fnr + b * fpr
    j = int(np.nanargmin(dcf))
    t_star = float(thr[j])
    all_min = float(dcf[j])
    all_fpr, all_fnr = float(fpr[j]), float(fnr[j])
    k = int(np.nanargmin(np.abs(fnr - fpr)))
    all_eer = float(max(fpr[k], fnr[k]))
    sg = prep.sg
    G = sg.n_groups
    keys = ("n_pos", "n_neg", "n_errors", "dcf_at_overall", "min_dcf", "threshold_own", "ratio_overall",
            "ratio_own", "fpr", "fnr", "fpr_ratio", "fnr_ratio", "eer")
    out = {key: np.full((G, 1), np.nan) for key in keys}
    for g in range(G):
        idx = sg.members(g)
        yg, sgc = y[idx], s[idx]
        npos, nneg = int(yg.sum()), int(idx.size - yg.sum())
        out["n_pos"][g, 0], out["n_neg"][g, 0] = npos, nneg
        if idx.size == 0:
            continue
        # exact error count at tau* (for the reliability flag only)
        out["n_errors"][g, 0] = float(np.sum((sgc < t_star) & (yg == 1)) + np.sum((sgc >= t_star) & (yg == 0)))
        if npos == 0 or nneg == 0:
            continue
        gfpr, gfnr, gthr = sveva_curve(sgc, yg)
        gd = a * gfnr + b * gfpr
        jg = int(np.nanargmin(gd))
        kk = _nearest(gthr, t_star)
        dcf_at = float(gd[kk])
        out["dcf_at_overall"][g, 0] = dcf_at
        out["min_dcf"][g, 0] = gd[jg]
        out["threshold_own"][g, 0] = gthr[jg]
        out["fpr"][g, 0], out["fnr"][g, 0] = gfpr[kk], gfnr[kk]
        ke = int(np.nanargmin(np.abs(gfnr - gfpr)))
        out["eer"][g, 0] = max(gfpr[ke], gfnr[ke])
    with np.errstate(invalid="ignore", divide="ignore"):
        out["ratio_overall"] = out["dcf_at_overall"] / all_min
        out["ratio_own"] = out["min_dcf"] / out["dcf_at_overall"]
        out["fpr_ratio"] = out["fpr"] / all_fpr
        out["fnr_ratio"] = out["fnr"] / all_fnr
    r = out["ratio_overall"][:, 0]
    out.update({"all_min_dcf": np.array([all_min]), "all_threshold": np.array([t_star]),
                "all_fpr": np.array([all_fpr]), "all_fnr": np.array([all_fnr]), "all_eer": np.array([all_eer]),
                "fairness_index": np.array([np.sum(r[np.isfinite(r) & (r > 1)])])})
    return out
