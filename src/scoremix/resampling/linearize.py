r"""Speaker-cluster (delta-method) standard errors of the log of the subgroup measures.

Layer: used by the counting engine (:mod:`~scoremix.fairness.engine`) so that every
bootstrap replicate carries its own standard error, the input of the studentised
(bootstrap-``t``) interval of :mod:`~scoremix.resampling.intervals`.  It knows nothing about
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
the difference of the two ``dcf`` influences (own minimiser minus ``τ*``).  The ROCCH ``eer``
of a subgroup is, at the data's saddle ``α̂``, the minimum over thresholds of the cost with
weights ``(α̂, 1 − α̂)`` and gets that cost's influence at its minimiser.  For speakers drawn within strata
(subgroups) ``s`` of ``n_s`` speakers the variance of the log measure is

.. math::

    \widehat{\mathrm{Var}} = \sum_s \frac{n_s}{n_s-1}\Big[\sum_{c\in s} m_c Z_c^2
      - \frac{1}{n_s}\Big(\sum_{c\in s} m_c Z_c\Big)^2\Big],\qquad Z_c = A_{gc} - J_c,

the usual stratified cluster (sandwich) variance; strata of one speaker contribute 0.
The threshold is held fixed: the variability of ``τ*`` is left to the bootstrap, whose
``t`` distribution absorbs it.

**Crossed (two-way) resampling.**  When enrolment speakers ``e`` and test speakers ``t``
are both resampled (:class:`~scoremix.resampling.bootstrap.TwoWayDesign`, pair weights
``W_p = m^E_e m^T_t``), the same influences are computed per *pair* ``p = (e, t)``
(``Z_p``) and summed to each side, a drawn copy of a speaker carrying the other side's
multiplicities: ``Z^E_e = Σ_{p∋e} m^T_{t(p)} Z_p`` and ``Z^T_t = Σ_{p∋t} m^E_{e(p)} Z_p``.
With ``V_E``, ``V_T`` the stratified sandwiches above of ``Z^E`` (enrolment strata) and
``Z^T`` (test strata), and the pair part ``V_P = Σ_{p:\,t(p)≥0} W_p Z_p^2``, the variance
is Owen's (2007) two-way estimate

.. math::

    \widehat{\mathrm{Var}}_2 = \max\big(V_E + V_T - V_P,\; V_E,\; V_T\big).

For ``Z_{et} = α_e + β_t + ε_{et}`` (``R`` enrolment × ``T`` test speakers)
``E V_E ≈ σ_α²/R + σ_ε²/(RT)``, ``E V_T ≈ σ_β²/T + σ_ε²/(RT)`` and
``E V_P ≈ (σ_α² + σ_β² + σ_ε²)/(RT)``: the pair-level noise counted in both sides is
subtracted once.  The difference can fall below one side's sandwich when the other side
has no effect of its own (it is then that side's sandwich minus noise); each side's
one-way sandwich is a consistent estimate of the variance that side alone causes, so the
larger of the two is kept as a floor.  Target pairs (``t(p) = -1``, enrolment weight only)
enter ``Z^E`` alone.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from scoremix.resampling.bootstrap import TwoWayDesign

__all__ = ["LOG_SE_MEASURES", "cluster_counts_at", "StratifiedVariance", "CrossedVariance", "ratio_influence"]

#: measures that get a log-scale standard error per replicate (key ``se_log_<measure>``)
LOG_SE_MEASURES = ("dcf_at_overall", "min_dcf", "ratio_overall", "fpr", "fnr", "fpr_ratio", "fnr_ratio",
                   "ratio_own", "eer")


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


class CrossedVariance:
    """The two-way variance ``max(V_E + V_T − V_P, V_E, V_T)`` of the module docstring.

    Parameters
    ----------
    design:
        the pairs (enrolment unit, test unit or ``-1`` for a target pair) and unit counts.
    enrol_strata, test_strata:
        ``(R,)`` and ``(T,)`` strata of the units of each side.
    """

    def __init__(self, design: TwoWayDesign, enrol_strata: np.ndarray, test_strata: np.ndarray) -> None:
        pe = np.asarray(design.pair_enrol, dtype=np.int64)
        pt = np.asarray(design.pair_test, dtype=np.int64)
        self.design = design
        self.R, self.T = int(design.n_enrol), int(design.n_test)
        if np.asarray(enrol_strata).size != self.R or np.asarray(test_strata).size != self.T:
            raise ValueError(f"strata of {self.R} enrolment and {self.T} test speakers expected, got "
                             f"{np.asarray(enrol_strata).size} and {np.asarray(test_strata).size}")
        P = pe.size
        nt = pt >= 0
        cols = np.arange(P)
        self._Ae = sp.csr_matrix((np.ones(P), (pe, cols)), shape=(self.R, P))
        self._At = sp.csr_matrix((np.ones(int(nt.sum())), (pt[nt], cols[nt])), shape=(self.T, P))
        self._ve = StratifiedVariance(enrol_strata)
        self._vt = StratifiedVariance(test_strata)

    def pair_weights(self, M: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(w^E, w^T, W)`` ``(P, B)``: each pair's enrolment factor, test factor (1 for target
        pairs) and their product, for unit weights ``M`` ``(R + T, B)`` (computed once per batch)."""
        we, wt = self.design.side_weights(M)
        return we, wt, we * wt

    def parts(self, Z: np.ndarray, M: np.ndarray,
              weights: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(V_E, V_T, V_P)`` ``(B,)`` each, for pair influences ``Z`` ``(P, B)`` and unit weights
        ``M`` ``(R + T, B)`` (enrolment units first); ``weights``: :meth:`pair_weights` of ``M``."""
        we, wt, W = self.pair_weights(M) if weights is None else weights
        Z0 = np.where(W > 0, Z, 0.0)
        ve = self._ve(np.asarray(self._Ae @ (wt * Z0)), M[:self.R])
        vt = self._vt(np.asarray(self._At @ (we * Z0)), M[self.R:]) if self.T else np.zeros(M.shape[1])
        Z0 *= Z0
        Z0 *= W
        vp = np.asarray(self._At @ Z0).sum(axis=0) if self.T else np.zeros(M.shape[1])  # nontarget pairs only
        return ve, vt, vp

    def __call__(self, Z: np.ndarray, M: np.ndarray,
                 weights: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """``(B,)`` variance estimates (``weights``: :meth:`pair_weights` of ``M``, to reuse)."""
        ve, vt, vp = self.parts(Z, M, weights)
        return np.maximum(np.maximum(ve + vt - vp, ve), vt)
