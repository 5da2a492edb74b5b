r"""Speaker-cluster (delta-method) standard errors of the log of the subgroup measures.

Layer: used by the counting engine (:mod:`~scoremix.fairness.engine`) so that every
bootstrap replicate carries its own standard error, the input of the studentised
(bootstrap-``t``) interval of :mod:`~scoremix.fairness.resampling`.  It knows nothing about
tables or intervals.

At a fixed threshold ``τ`` every rate is a ratio of cluster totals,
``fpr_g = Σ_c m_c FP_{gc} / Σ_c m_c N_{gc}`` (``m_c``: bootstrap multiplicity of speaker
``c``; ``FP_{gc}``, ``N_{gc}``: false alarms and nontarget trials of speaker ``c`` in
subgroup ``g``), and its log has the cluster influence (linearisation)

.. math::

    A^{fpr}_{gc} = \frac{FP_{gc} - fpr_g\,N_{gc}}{fpr_g\,N_g},\qquad
    A^{fnr}_{gc} = \frac{FN_{gc} - fnr_g\,P_{gc}}{fnr_g\,P_g},\qquad
    A^{dcf}_{gc} = \frac{a\,fnr_g A^{fnr}_{gc} + b\,fpr_g A^{fpr}_{gc}}{a\,fnr_g + b\,fpr_g}

(``C = a·P_miss + b·P_fa``).  The overall rates at ``τ*`` have the same form over all
trials (``J_c``); a ratio to an overall quantity has the influence ``A_{gc} − J_c``
(``ratio_overall``: ``dcf`` over the overall minDCF, whose derivative in ``τ`` vanishes at
``τ*``; ``fpr_ratio``, ``fnr_ratio``).  ``min_dcf`` of a subgroup is the ``dcf`` influence at
its own minimising threshold (envelope theorem), and ``ratio_own = minDCF_g / C_g(τ*)`` has
the difference of the two ``dcf`` influences (own minimiser minus ``τ*``).  For speakers drawn within strata
(subgroups) ``s`` of ``n_s`` speakers the variance of the log measure is

.. math::

    \widehat{\mathrm{Var}} = \sum_s \frac{n_s}{n_s-1}\Big[\sum_{c\in s} m_c Z_c^2
      - \frac{1}{n_s}\Big(\sum_{c\in s} m_c Z_c\Big)^2\Big],\qquad Z_c = A_{gc} - J_c,

the usual stratified cluster (sandwich) variance; strata of one speaker contribute 0.
The threshold is held fixed: the variability of ``τ*`` is left to the bootstrap, whose
``t`` distribution absorbs it.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["LOG_SE_MEASURES", "cluster_counts_at", "StratifiedVariance", "ratio_influence"]

#: measures that get a log-scale standard error per replicate (key ``se_log_<measure>``)
LOG_SE_MEASURES = ("dcf_at_overall", "min_dcf", "ratio_overall", "fpr", "fnr", "fpr_ratio", "fnr_ratio",
                   "ratio_own")


def cluster_counts_at(rank: np.ndarray, y: np.ndarray, clusters: np.ndarray, n_clusters: int,
                      thr_rank: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Unweighted miss and false-alarm counts of every cluster at one threshold per replicate.

    Parameters
    ----------
    rank:
        ``(m,)`` value index of each trial on a sorted-value scale.
    y, clusters:
        ``(m,)`` 0/1 labels and cluster codes in ``[0, n_clusters)``.
    thr_rank:
        ``(B,)`` threshold of each replicate on the same scale (accept ``rank ≥ thr_rank``).

    Returns
    -------
    ``fn, fp``: ``(C, B)`` misses (targets with ``rank < thr``) and false alarms (nontargets
    with ``rank ≥ thr``) of each cluster; ``pos, neg``: ``(C,)`` its target and nontarget trials.
    """
    y = np.asarray(y).astype(bool)
    cl = np.asarray(clusters, dtype=np.int64)
    C = int(n_clusters)
    uniq, inv = np.unique(np.asarray(thr_rank), return_inverse=True)
    nu = uniq.size
    first = np.searchsorted(uniq, np.asarray(rank), side="right")  # rejected at thresholds u >= first
    rej_pos = np.bincount(first[y] * C + cl[y], minlength=(nu + 1) * C).reshape(nu + 1, C)
    rej_neg = np.bincount(first[~y] * C + cl[~y], minlength=(nu + 1) * C).reshape(nu + 1, C)
    rej_pos = np.cumsum(rej_pos, axis=0)[:nu]
    rej_neg = np.cumsum(rej_neg, axis=0)[:nu]
    pos = np.bincount(cl[y], minlength=C).astype(float)
    neg = np.bincount(cl[~y], minlength=C).astype(float)
    fn = rej_pos[inv].T.astype(float)
    fp = (neg[None, :] - rej_neg)[inv].T.astype(float)
    return fn, fp, pos, neg


def ratio_influence(count: np.ndarray, total: np.ndarray, M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rate ``r = Σ m·count / Σ m·total`` ``(B,)`` and the influence of each cluster on it,
    ``(count − r·total) / Σ m·total`` ``(C, B)`` (``count``: ``(C, B)``; ``total``: ``(C,)``)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        den = total @ M
        r = np.sum(M * count, axis=0) / den
        return r, (count - r[None, :] * total[:, None]) / den[None, :]


class StratifiedVariance:
    """The stratified cluster variance of the module docstring for influences ``Z`` ``(C, B)``
    under cluster weights ``M`` ``(C, B)``; ``strata``: ``(C,)`` stratum of each cluster."""

    def __init__(self, strata: np.ndarray) -> None:
        codes, inv = np.unique(np.asarray(strata), return_inverse=True)
        C = inv.size
        self._S = sp.csr_matrix((np.ones(C), (inv, np.arange(C))), shape=(codes.size, C))
        n = np.bincount(inv, minlength=codes.size).astype(float)
        self._n = n
        self._f = np.where(n > 1, n / np.maximum(n - 1, 1), 0.0)

    def __call__(self, Z: np.ndarray, M: np.ndarray) -> np.ndarray:
        """``(B,)`` variance estimates (NaN where ``Z`` has a NaN at a drawn cluster)."""
        Z = np.where(M > 0, Z, 0.0)
        s1 = np.asarray(self._S @ (M * Z))
        s2 = np.asarray(self._S @ (M * Z * Z))
        v = self._f[:, None] * (s2 - s1 ** 2 / self._n[:, None])
        return np.maximum(np.sum(v, axis=0), 0.0)
