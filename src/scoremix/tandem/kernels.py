r"""Point kernels of the tandem metrics on trials sorted once in the ASVspoof order.

The official ASVspoof scripts concatenate the classes (targets, then nontargets, then spoofs;
or bona fide, then spoofs), sort with a stable merge sort and evaluate the error rates after
*rejecting the first* :math:`j = 0, …, N` trials.  Every kernel here takes the trials in that
order (:class:`SortedTrials`); a bootstrap replicate that repeats trial :math:`i` :math:`w_i`
times is the same order with each trial repeated (``np.repeat``), so no replicate sorts again.

Rates at rejected position :math:`j` for a class :math:`c` with :math:`N_c` trials, of which
:math:`R_c(j)` are among the first :math:`j`:
:math:`P_\text{miss}(j) = R_\text{tar}(j)/N_\text{tar}`,
:math:`P_\text{fa}(j) = (N_c - R_c(j))/N_c` for a negative class.  Threshold at :math:`j`:
the :math:`j`-th smallest score (``min − 0.001`` for :math:`j = 0`) in the scripts' "reject
:math:`s ≤ τ`" sense; :func:`accept_threshold` converts it to scoremix's accept :math:`s ≥ τ`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "SortedTrials",
    "accept_threshold",
    "asv_eer_threshold",
    "asv_rates",
    "interp_eer",
    "min_adcf",
    "tdcf_curve",
    "teer_concurrent",
]


@dataclass(frozen=True)
class SortedTrials:
    """Scores ascending in the scripts' order; ``cls`` codes ``0..K-1`` in concatenation order."""

    s: np.ndarray
    cls: np.ndarray
    n_classes: int

    @classmethod
    def build(cls_, scores: np.ndarray, codes: np.ndarray, n_classes: int) -> SortedTrials:
        perm = np.concatenate([np.flatnonzero(codes == c) for c in range(n_classes)])
        order = perm[np.argsort(scores[perm], kind="stable")]
        return cls_(scores[order], codes[order], n_classes)

    def repeat(self, w: np.ndarray) -> SortedTrials:
        """The same trials with sorted trial ``i`` repeated ``w[i]`` times (still sorted)."""
        return SortedTrials(np.repeat(self.s, w), np.repeat(self.cls, w), self.n_classes)

    def counts(self) -> tuple[np.ndarray, np.ndarray]:
        """``(R (N+1, K) rejected per class after j trials, N_c (K,))``."""
        onehot = self.cls[:, None] == np.arange(self.n_classes)[None, :]
        R = np.vstack([np.zeros((1, self.n_classes), np.int64), np.cumsum(onehot, axis=0, dtype=np.int64)])
        return R, R[-1]

    def thresholds(self) -> np.ndarray:
        """The scripts' thresholds (reject :math:`s ≤ τ_j`), ``(N+1,)``."""
        return np.concatenate(([self.s[0] - 0.001], self.s))


def accept_threshold(script_threshold: float, j: int) -> float:
    """A script threshold at rejected position ``j`` as accept :math:`s ≥ τ` (the next float up; ``j = 0``: as is)."""
    return float(script_threshold) if j == 0 else float(np.nextafter(script_threshold, np.inf))


def asv_eer_threshold(tn: SortedTrials) -> tuple[float, float, int]:
    r"""``compute_eer`` of the ASVspoof scripts on target (class 0) / nontarget (class 1) trials:
    :math:`j^* = \arg\min_j |P_\text{miss}(j) − P_\text{fa}(j)|` (first), returns
    ``(EER, τ_{j*}, j*)``.  The scripts then *apply* :math:`τ_{j^*}` as accept :math:`s ≥ τ`."""
    R, N = tn.counts()
    n_t, n_n = int(N[0]), int(N[1])
    j = np.arange(R.shape[0])
    frr = R[:, 0] / n_t
    far = (n_n - (j - R[:, 0])) / n_n
    k = int(np.argmin(np.abs(frr - far)))
    return float(np.mean((frr[k], far[k]))), float(tn.thresholds()[k]), k


def asv_rates(s: np.ndarray, cls: np.ndarray, threshold: float) -> tuple[float, float, float, float]:
    """``(P_fa nontarget, P_miss target, P_miss spoof, P_fa spoof)`` of the ASV at accept
    :math:`s ≥ τ` (classes 0 target, 1 nontarget, 2 spoof)."""
    acc = s >= threshold
    tar, non, spf = cls == 0, cls == 1, cls == 2
    n_s = int(np.sum(spf))
    return (int(np.sum(acc & non)) / int(np.sum(non)), int(np.sum(~acc & tar)) / int(np.sum(tar)),
            int(np.sum(~acc & spf)) / n_s, int(np.sum(acc & spf)) / n_s)


def tdcf_curve(cm: SortedTrials, pfa_asv: float, pmiss_asv: float, pmiss_spoof_asv: float,
               pfa_spoof_asv: float, p_tar: float,
               p_non: float, p_spoof: float, c_miss: float, c_fa: float, c_fa_spoof: float, c_miss_cm: float,
               revision: str) -> tuple[np.ndarray, float, float, float]:
    r"""Normalised t-DCF at every CM position (bona fide = class 0, spoof = class 1) and ``(C0, C1, C2)``.

    2019 (Kinnunen et al. 2018):
    :math:`C_1 = π_\text{tar}(C^\text{cm}_\text{miss} − C^\text{asv}_\text{miss} P^\text{asv}_\text{miss})
    − π_\text{non} C^\text{asv}_\text{fa} P^\text{asv}_\text{fa}`,
    :math:`C_2 = C^\text{cm}_\text{fa} π_\text{spoof} (1 − P^\text{asv}_\text{miss,spoof})`,
    :math:`t\text{-DCF}(τ) = [C_1 P^\text{cm}_\text{miss}(τ) + C_2 P^\text{cm}_\text{fa}(τ)]/\min(C_1, C_2)`.

    2021 (Kinnunen et al. 2020):
    :math:`C_0 = π_\text{tar} C_\text{miss} P^\text{asv}_\text{miss} + π_\text{non} C_\text{fa} P^\text{asv}_\text{fa}`,
    :math:`C_1 = π_\text{tar} C_\text{miss} − C_0`,
    :math:`C_2 = π_\text{spoof} C_\text{fa,spoof} P^\text{asv}_\text{fa,spoof}`,
    :math:`t\text{-DCF}(τ) = [C_0 + C_1 P^\text{cm}_\text{miss}(τ) + C_2 P^\text{cm}_\text{fa}(τ)]/[C_0 + \min(C_1, C_2)]`.
    """
    R, N = cm.counts()
    j = np.arange(R.shape[0])
    pmiss_cm = R[:, 0] / N[0]
    pfa_cm = (N[1] - (j - R[:, 0])) / N[1]
    if revision == "2019":
        c0 = 0.0
        c1 = p_tar * (c_miss_cm - c_miss * pmiss_asv) - p_non * c_fa * pfa_asv
        c2 = c_fa_spoof * p_spoof * (1 - pmiss_spoof_asv)
        curve = (c1 * pmiss_cm + c2 * pfa_cm) / np.minimum(c1, c2)
    else:
        c0 = p_tar * c_miss * pmiss_asv + p_non * c_fa * pfa_asv
        c1 = p_tar * c_miss - (p_tar * c_miss * pmiss_asv + p_non * c_fa * pfa_asv)
        c2 = p_spoof * c_fa_spoof * pfa_spoof_asv
        curve = (c0 + c1 * pmiss_cm + c2 * pfa_cm) / (c0 + np.minimum(c1, c2))
    return curve, float(c0), float(c1), float(c2)


def min_adcf(t: SortedTrials, p_tar: float, p_non: float, p_spoof: float, c_miss: float, c_fa: float,
             c_fa_spoof: float) -> tuple[float, float, int]:
    r"""Minimum normalised a-DCF over positions (classes 0 target, 1 nontarget, 2 spoof):
    :math:`[C_\text{miss}π_\text{tar}P_\text{miss} + C_\text{fa}π_\text{non}P_\text{fa,non}
    + C_\text{fa,spoof}π_\text{spoof}P_\text{fa,spoof}] / \min(C_\text{fa}π_\text{non} +
    C_\text{fa,spoof}π_\text{spoof},\ C_\text{miss}π_\text{tar})`; ``(value, τ_j, j)``."""
    R, N = t.counts()
    frr = R[:, 0] / N[0]
    fa_non = (N[1] - R[:, 1]) / N[1]
    fa_spf = (N[2] - R[:, 2]) / N[2]
    a = c_miss * p_tar * frr + c_fa * p_non * fa_non + c_fa_spoof * p_spoof * fa_spf
    a = a / min(c_fa * p_non + c_fa_spoof * p_spoof, c_miss * p_tar)
    k = int(np.argmin(a))
    return float(a[k]), float(t.thresholds()[k]), k


def teer_concurrent(asv: SortedTrials, cm: SortedTrials) -> tuple[float, int, int]:
    r"""Concurrent t-EER (Kinnunen et al. 2023, TPAMI), placed as the ASVspoof 5 package places it.

    ``asv``: ASV scores of target (0), nontarget (1), spoof (2) trials; ``cm``: the CM scores of
    the same trials with targets and nontargets as bona fide (0) and spoofs as spoof (1).  With
    :math:`P^\text{tdm}_\text{miss} = P^\text{cm}_\text{miss} + (1 − P^\text{cm}_\text{miss})P^\text{asv}_\text{miss}`
    and :math:`P^\text{tdm}_\text{fa,non} = (1 − P^\text{cm}_\text{miss})P^\text{asv}_\text{fa,non}`,
    every ASV position :math:`a` with :math:`P^\text{asv}_\text{miss}(a) < P^\text{asv}_\text{fa,non}(a)`
    takes the CM position :math:`c^*(a) = \arg\min_c |P^\text{tdm}_\text{miss} − P^\text{tdm}_\text{fa,non}|`
    (first); the t-EER is :math:`P^\text{asv}_\text{fa,spoof}(a)P^\text{cm}_\text{fa}(c^*)` at the first
    :math:`a` minimising :math:`|P^\text{asv}_\text{fa,non}/P^\text{asv}_\text{fa,spoof} −
    P^\text{cm}_\text{fa}/(1 − P^\text{cm}_\text{miss})|`, where all three tandem error rates
    (nearly) coincide.  ``(t-EER, a, c*)``; NaN when no position qualifies.

    :math:`h(c)` is non-decreasing in :math:`c` and constant where :math:`P^\text{cm}_\text{miss}`
    is, so :math:`c^*` is found for all :math:`a` at once near the exact root
    :math:`1 − P^\text{cm}_\text{miss} = 1/(1 − P^\text{asv}_\text{miss} + P^\text{asv}_\text{fa,non})`
    (a window of ±3 bona fide counts absorbs rounding), O(N) instead of the script's O(N²).
    """
    Ra, Na = asv.counts()
    pm_a = Ra[:, 0] / Na[0]
    pf_non = 1 - (Ra[:, 1] / Na[1])
    pf_spf = 1 - (Ra[:, 2] / Na[2])
    Rc, Nc = cm.counts()
    nb, ns = int(Nc[0]), int(Nc[1])
    jc = np.arange(Rc.shape[0])
    pmiss_cm = Rc[:, 0] / nb
    pfa_cm = (ns - (jc - Rc[:, 0])) / ns
    # first CM position of every bona fide count k (cum counts rise by 0 or 1)
    first = np.searchsorted(Rc[:, 0], np.arange(nb + 1), side="left")
    with np.errstate(divide="ignore", invalid="ignore"):
        q = 1.0 / (1.0 - pm_a + pf_non)
        kstar = np.floor(nb * (1.0 - q))
    kstar = np.where(np.isfinite(kstar), kstar, 0).astype(np.int64)
    cand = np.clip(kstar[:, None] + np.arange(-3, 4)[None, :], 0, nb)
    pmc = cand / nb  # equals the script's cumsum / size value bit for bit
    h = (pmc + (1 - pmc) * pm_a[:, None]) - ((1 - 0.0) * (1 - pmc) * pf_non[:, None] + 0.0)
    ah = np.abs(h)
    best = ah.min(axis=1, keepdims=True)
    kbest = np.where(ah == best, cand, nb + 1).min(axis=1)
    cstar = first[kbest]
    allowed = pm_a < pf_non
    with np.errstate(divide="ignore", invalid="ignore"):
        crit = np.abs(pf_non / pf_spf - pfa_cm[cstar] / (1 - pmiss_cm[cstar]))
    crit = np.where(allowed & ~np.isnan(crit), crit, np.inf)
    finite = np.isfinite(crit)
    if not finite.any():
        return float("nan"), -1, -1
    a = int(np.argmin(crit))
    return float(pf_spf[a] * pfa_cm[cstar[a]]), a, int(cstar[a])


def interp_eer(s: np.ndarray, pos: np.ndarray, w: np.ndarray | None = None) -> float:
    r"""EER where the linearly interpolated ROC (through the tie-collapsed operating points)
    meets :math:`P_\text{miss} = P_\text{fa}` (the SASV 2022 ``brentq``/``interp1d`` recipe);
    ``pos``: positive-class mask, ``w``: trial weights."""
    w = np.ones(s.shape[0]) if w is None else np.asarray(w, float)
    order = np.argsort(-s, kind="stable")
    ss, pp, ww = s[order], pos[order], w[order]
    tp = np.cumsum(ww * pp)
    fp = np.cumsum(ww * ~pp)
    last = np.concatenate((ss[1:] != ss[:-1], [True]))
    tpr = np.concatenate(([0.0], tp[last] / tp[-1]))
    fpr = np.concatenate(([0.0], fp[last] / fp[-1]))
    g = fpr + tpr - 1.0
    k = int(np.flatnonzero(g >= 0)[0])
    if g[k] == 0:
        return float(fpr[k])
    t = -g[k - 1] / (g[k] - g[k - 1])
    return float(fpr[k - 1] + t * (fpr[k] - fpr[k - 1]))
