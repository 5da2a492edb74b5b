"""Exact weighted error counting at many thresholds for many bootstrap replicates.

Every quantity of the SVEva measures is a function of weighted error counts

.. math::

    \\mathrm{FN}_w(\\tau) = \\sum_{i: y_i = 1} w_i\\,[s_i < \\tau],\\qquad
    \\mathrm{FP}_w(\\tau) = \\sum_{i: y_i = 0} w_i\\,[s_i \\ge \\tau],

with ``w_i = m_{c(i)}`` the bootstrap multiplicity of the cluster (speaker) ``c(i)`` of
trial ``i`` (all ones for the point estimate).  The detection cost
``C(τ) = c_miss·π·FN_w(τ)/P_w + c_fa·(1-π)·FP_w(τ)/N_w`` is minimised over a *candidate*
set of thresholds that is exact for every non-negative weight vector: with the distinct
scores ``v_0 < … < v_{K-1}`` and ``v_K = +∞`` (reject all), threshold ``v_k`` can be
dropped when ``v_k`` holds only negatives (``v_{k+1}`` is never worse) or when
``v_{k-1}`` holds only positives (``v_{k-1}`` is never worse).  What is left are the
starts of the positive runs of the sorted sequence; trials between two candidates form a
*block*, and the weighted count of each block for all replicates is one sparse
(block × cluster) by dense (cluster × replicate) product, followed by a cumulative sum.

The ROC-convex-hull EER uses the identity (minimax over the convex hull)

.. math::

    \\mathrm{EER}_{\\mathrm{ROCCH}} = \\max_{\\alpha\\in[0,1]}\\;\\min_\\tau\\;
    \\alpha P_{\\mathrm{miss}}(\\tau) + (1-\\alpha) P_{\\mathrm{fa}}(\\tau),

maximised by golden-section search over ``α`` (the inner function is concave), which is
exact to ~1e-9 after 45 iterations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = ["Population", "TwoWayDesign", "draw_cluster_weights", "rocch_eer_from_rates", "two_way_pairs",
           "weighted_rates_at"]

_GOLD = (np.sqrt(5.0) - 1.0) / 2.0


def draw_cluster_weights(strata: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Cluster-bootstrap multiplicities, resampling clusters within strata.

    Parameters
    ----------
    strata:
        ``(C,)`` stratum code of every cluster (e.g. the subgroup of a speaker).
    n_boot:
        number of replicates ``B``.
    rng:
        numpy random generator.

    Returns
    -------
    ``(C, B)`` float64 array: how often cluster ``c`` is drawn in replicate ``b``; within
    every stratum of ``n_s`` clusters, ``n_s`` clusters are drawn with replacement, so
    each column sums to ``C``.
    """
    strata = np.asarray(strata)
    C = strata.size
    M = np.zeros((C, n_boot), dtype=np.float64)
    for s in np.unique(strata):
        idx = np.flatnonzero(strata == s)
        ns = idx.size
        draws = rng.integers(0, ns, size=(n_boot, ns))
        flat = (np.arange(n_boot)[:, None] * ns + draws).ravel()
        counts = np.bincount(flat, minlength=n_boot * ns).reshape(n_boot, ns)
        M[idx, :] = counts.T
    return M


@dataclass(frozen=True)
class TwoWayDesign:
    r"""Crossed (two-way, "pigeonhole") resampling of enrolment × test speakers (Owen 2007).

    The resampling *units* are the ``R`` enrolment speakers followed by the ``T`` test speakers;
    a replicate's unit weights ``M`` ``(R + T, B)`` are drawn by :func:`draw_cluster_weights`
    (independent multinomials per side, within strata).  Trials are grouped into *pairs*
    ``p = (e, t)`` (the trials of one enrolment speaker against one test speaker); pair ``p``
    gets the product weight

    .. math::

        W_{pb} = M^{E}_{e(p)b}\,M^{T}_{t(p)b} \quad\text{(nontarget pairs)},\qquad
        W_{pb} = M^{E}_{e(p)b} \quad\text{(target pairs, } t(p) = -1\text{)}:

    in a target trial enrolment and test speaker are the same person, whose dependence the
    enrolment side already resamples.

    Attributes
    ----------
    pair_enrol:
        ``(P,)`` enrolment unit of each pair, in ``[0, R)``.
    pair_test:
        ``(P,)`` test unit of each pair, in ``[0, T)``, or ``-1`` for target pairs.
    n_enrol, n_test:
        ``R`` and ``T``.
    """

    pair_enrol: np.ndarray
    pair_test: np.ndarray
    n_enrol: int
    n_test: int

    @property
    def n_pairs(self) -> int:
        return int(self.pair_enrol.size)

    @property
    def n_units(self) -> int:
        return int(self.n_enrol + self.n_test)

    def side_weights(self, M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(W^E, W^T)`` ``(P, B)``: each pair's enrolment-side and test-side factor (1 for target pairs)."""
        M = np.asarray(M, dtype=np.float64)
        if M.shape[0] != self.n_units:
            raise ValueError(f"two-way weights need {self.n_units} rows (enrolment then test speakers), "
                             f"got {M.shape[0]}")
        we = M[self.pair_enrol]
        wt = np.ones_like(we)
        nt = self.pair_test >= 0
        wt[nt] = M[self.n_enrol + self.pair_test[nt]]
        return we, wt

    def pair_weights(self, M: np.ndarray) -> np.ndarray:
        """``(P, B)`` pair weights ``W`` (class docstring) from unit weights ``M`` ``(R + T, B)``."""
        we, wt = self.side_weights(M)
        return we * wt


def two_way_pairs(enrol: np.ndarray, test: np.ndarray, n_enrol: int, n_test: int
                  ) -> tuple[np.ndarray, TwoWayDesign]:
    """Pair codes of trials for :class:`TwoWayDesign`.

    Parameters
    ----------
    enrol:
        ``(n,)`` enrolment unit of every trial, in ``[0, n_enrol)``.
    test:
        ``(n,)`` test unit of every trial, in ``[0, n_test)``, or ``-1`` where the trial carries
        the enrolment weight only (target trials).
    n_enrol, n_test:
        numbers of units per side.

    Returns
    -------
    ``(pair (n,), design)``: the pair code of every trial (pairs sorted by enrolment, then test
    unit) and the design.
    """
    enrol = np.asarray(enrol, dtype=np.int64)
    test = np.asarray(test, dtype=np.int64)
    key = enrol * (int(n_test) + 1) + (test + 1)
    ukey, pair = np.unique(key, return_inverse=True)
    design = TwoWayDesign(pair_enrol=ukey // (int(n_test) + 1), pair_test=ukey % (int(n_test) + 1) - 1,
                          n_enrol=int(n_enrol), n_test=int(n_test))
    return pair.astype(np.int64), design


def rocch_eer_from_rates(p_miss: np.ndarray, p_fa: np.ndarray, n_iter: int = 45,
                         return_alpha: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """ROCCH EER from miss/false-alarm rates at a sufficient set of thresholds.

    ``p_miss``, ``p_fa``: ``(K, B)``; returns ``(B,)``
    ``max_α min_k α·p_miss[k] + (1-α)·p_fa[k]`` (NaN where a column has NaN): a golden-section
    search for the maximising α of this concave function, then the intersection of the two
    lines active at the final bracket's ends (the hull vertex), so the value is exact up to
    rounding (checked against a linear programme to 1e-12; the returned α is the search's,
    within about 1e-9 of the vertex); with
    ``return_alpha`` also the maximising ``α`` ``(B,)`` (the slope weight of the hull
    segment that meets the diagonal).
    """
    p_miss = np.asarray(p_miss, dtype=float)
    p_fa = np.asarray(p_fa, dtype=float)
    slope = p_miss - p_fa

    def f(alpha: np.ndarray) -> np.ndarray:
        return np.min(p_fa + alpha[None, :] * slope, axis=0)

    B = p_miss.shape[1]
    a = np.zeros(B)
    b = np.ones(B)
    c = b - _GOLD * (b - a)
    d = a + _GOLD * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(n_iter):
        right = fc < fd  # the maximum lies in [c, b]
        a_new = np.where(right, c, a)
        b_new = np.where(right, b, d)
        c_new = np.where(right, d, b_new - _GOLD * (b_new - a_new))
        d_new = np.where(right, a_new + _GOLD * (b_new - a_new), c)
        f_new = f(np.where(right, d_new, c_new))
        fc, fd = np.where(right, fd, f_new), np.where(right, f_new, fc)
        a, b, c, d = a_new, b_new, c_new, d_new
    lo, hi = a, b
    cols = np.arange(B)
    # polish: the lines active at the bracket's two ends meet at the hull vertex where the
    # maximum lies (the bracket is ~1e-9 wide), so their intersection gives it exactly
    k_lo = np.argmin(p_fa + lo[None, :] * slope, axis=0)
    k_hi = np.argmin(p_fa + hi[None, :] * slope, axis=0)
    s_lo, s_hi = slope[k_lo, cols], slope[k_hi, cols]
    denom = s_lo - s_hi
    with np.errstate(divide="ignore", invalid="ignore"):
        cross = np.clip((p_fa[k_hi, cols] - p_fa[k_lo, cols]) / denom, 0.0, 1.0)
    cross = np.where(denom > 0, cross, lo)
    cands = np.stack([c, d, lo, hi])
    vals = np.stack([fc, fd, f(lo), f(hi)])
    best = np.argmax(vals, axis=0)
    # the value: exact at the vertex; α: the search's (within ~1e-9 of the vertex's).  At the
    # vertex two thresholds tie, and callers that take the threshold minimising the saddle at α
    # (the fairness engine's τ̂) rely on the search's side of the tie, as before
    out = np.maximum(vals[best, cols], f(cross))
    bad = np.isnan(p_miss).any(axis=0) | np.isnan(p_fa).any(axis=0)
    out = np.where(bad, np.nan, out)
    if return_alpha:
        return out, np.where(bad, np.nan, cands[best, np.arange(B)])
    return out


@dataclass
class PopulationCounts:
    """Weighted counts of one population at its candidate thresholds, per replicate.

    ``fn``, ``fp``: ``(K_c, B)`` weighted miss / false-alarm counts at the candidates;
    ``n_pos``, ``n_neg``: ``(B,)`` weighted class totals.
    """

    fn: np.ndarray
    fp: np.ndarray
    n_pos: np.ndarray
    n_neg: np.ndarray

    def rates(self) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.fn / self.n_pos[None, :], self.fp / self.n_neg[None, :]


class Population:
    """A set of trials prepared for fast weighted counting (see module docstring).

    Parameters
    ----------
    scores, y:
        ``(n,)`` scores and 0/1 labels.
    clusters:
        ``(n,)`` cluster code of every trial, in ``[0, n_clusters)``.
    n_clusters:
        number of clusters ``C`` (rows of the weight matrix).
    """

    def __init__(self, scores: np.ndarray, y: np.ndarray, clusters: np.ndarray, n_clusters: int) -> None:
        scores = np.asarray(scores, dtype=np.float64)
        y = np.asarray(y).astype(bool)
        self.n = scores.size
        self.n_clusters = int(n_clusters)
        values, rank = np.unique(scores, return_inverse=True)
        K = values.size
        self.values = values
        self.rank = rank.astype(np.int64)
        has_pos = np.zeros(K, dtype=bool)
        has_neg = np.zeros(K, dtype=bool)
        has_pos[self.rank[y]] = True
        has_neg[self.rank[~y]] = True
        k = np.arange(K + 1)
        ok_here = np.append(has_pos, True)  # v_k not negative-only (v_K = +inf always allowed)
        ok_prev = np.insert(has_neg, 0, True)  # v_{k-1} not positive-only
        cand = k[ok_here & ok_prev]
        if cand.size == 0:  # pragma: no cover - K+1 >= 1 and ok for k=K unless v_{K-1} pos-only
            cand = np.array([K])
        self.cand = cand  # value indices (K = reject everything)
        self.thresholds = np.append(values, np.inf)[cand]
        block = np.searchsorted(cand, self.rank, side="right")  # 0 .. len(cand)
        nb = cand.size + 1
        ones = np.ones(self.n)
        cl = np.asarray(clusters, dtype=np.int64)
        self._S_pos = sp.csr_matrix((ones[y], (block[y], cl[y])), shape=(nb, self.n_clusters))
        self._S_neg = sp.csr_matrix((ones[~y], (block[~y], cl[~y])), shape=(nb, self.n_clusters))
        self._S_pos.sum_duplicates()
        self._S_neg.sum_duplicates()

    @property
    def n_candidates(self) -> int:
        return int(self.cand.size)

    def counts(self, M: np.ndarray) -> PopulationCounts:
        """Weighted counts for cluster weights ``M`` of shape ``(C, B)``."""
        cp = np.cumsum(np.asarray(self._S_pos @ M), axis=0)
        cn = np.cumsum(np.asarray(self._S_neg @ M), axis=0)
        n_pos, n_neg = cp[-1], cn[-1]
        return PopulationCounts(fn=cp[:-1], fp=n_neg[None, :] - cn[:-1], n_pos=n_pos, n_neg=n_neg)


def weighted_rates_at(rank: np.ndarray, y: np.ndarray, clusters: np.ndarray, groups: np.ndarray,
                      n_groups: int, thr_rank: np.ndarray, M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted FN and FP counts of several groups at one threshold per replicate.

    Parameters
    ----------
    rank:
        ``(m,)`` value index of each (membership) trial on a common sorted-value scale.
    y, clusters, groups:
        ``(m,)`` labels, cluster codes (rows of ``M``) and group codes.
    thr_rank:
        ``(B,)`` threshold of each replicate as a value index on the same scale
        (accept ``rank >= thr_rank``).
    M:
        ``(C, B)`` cluster weights.

    Returns
    -------
    ``fn, fp``: ``(n_groups, B)`` weighted miss and false-alarm counts.

    Notes
    -----
    With ``U`` the distinct thresholds, the count matrix of rejected trials per
    (threshold, cluster) is built once by a bincount and a cumulative sum over ``U``;
    replicate ``b`` then needs one dot product with its weights.
    """
    y = np.asarray(y).astype(bool)
    B = M.shape[1]
    uniq, inv = np.unique(thr_rank, return_inverse=True)
    nu = uniq.size
    first = np.searchsorted(uniq, rank, side="right")  # rejected for u >= first
    fn = np.zeros((n_groups, B))
    fp = np.zeros((n_groups, B))
    # local cluster numbering per group to keep matrices small
    key = groups * M.shape[0] + clusters
    ukey, kinv = np.unique(key, return_inverse=True)
    kg = ukey // M.shape[0]
    kc = ukey % M.shape[0]
    nk = ukey.size
    # rejected positives / accepted negatives per (u, key)
    rej_pos = np.bincount(first[y] * nk + kinv[y], minlength=(nu + 1) * nk).reshape(nu + 1, nk)
    rej_pos = np.cumsum(rej_pos, axis=0)[:nu]  # (nu, nk)
    neg_all = np.bincount(kinv[~y], minlength=nk)
    rej_neg = np.bincount(first[~y] * nk + kinv[~y], minlength=(nu + 1) * nk).reshape(nu + 1, nk)
    acc_neg = neg_all[None, :] - np.cumsum(rej_neg, axis=0)[:nu]
    W = M[kc, :]  # (nk, B)
    gsum = sp.csr_matrix((np.ones(nk), (kg, np.arange(nk))), shape=(n_groups, nk))
    for u in range(nu):
        cols = np.flatnonzero(inv == u)
        Wu = W[:, cols]
        fn[:, cols] = gsum @ (rej_pos[u][:, None] * Wu)
        fp[:, cols] = gsum @ (acc_neg[u][:, None] * Wu)
    return fn, fp
