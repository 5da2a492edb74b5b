"""Independent reference implementations of the tandem metrics, written from the published
definitions (ASVspoof 2019/2021 evaluation plans and their ``eval_metrics.py``, the ASVspoof 5
evaluation package for a-DCF and t-EER, the SASV 2022 ``metrics.py``).  Plain loops and
per-class arrays, deliberately unlike scoremix.tandem's one-sort kernels."""

from __future__ import annotations

import numpy as np
from scipy.interpolate import interp1d
from scipy.optimize import brentq
from sklearn.metrics import roc_curve


def det_curve(target, nontarget):
    """Rates after rejecting the first j of the sorted trials (targets first among ties)."""
    allsc = np.concatenate((target, nontarget))
    lab = np.concatenate((np.ones(target.size), np.zeros(nontarget.size)))
    idx = np.argsort(allsc, kind="mergesort")
    lab = lab[idx]
    tsum = np.cumsum(lab)
    nsum = nontarget.size - (np.arange(1, allsc.size + 1) - tsum)
    frr = np.concatenate(([0], tsum / target.size))
    far = np.concatenate(([1], nsum / nontarget.size))
    thr = np.concatenate(([allsc[idx[0]] - 0.001], allsc[idx]))
    return frr, far, thr


def asv_eer(target, nontarget):
    frr, far, thr = det_curve(target, nontarget)
    i = np.argmin(np.abs(frr - far))
    return np.mean((frr[i], far[i])), thr[i]


def asv_error_rates(tar, non, spf, t):
    return (np.sum(non >= t) / non.size, np.sum(tar < t) / tar.size, np.sum(spf < t) / spf.size,
            np.sum(spf >= t) / spf.size)


def min_tdcf(tar, non, spf, bona_cm, spoof_cm, revision="2019"):
    _, t = asv_eer(tar, non)
    pfa, pmiss, pmiss_spf, pfa_spf = asv_error_rates(tar, non, spf, t)
    pmiss_cm, pfa_cm, _ = det_curve(bona_cm, spoof_cm)
    ps = 0.05
    ptar, pnon = (1 - ps) * 0.99, (1 - ps) * 0.01
    if revision == "2019":
        c1 = ptar * (1 - 1 * pmiss) - pnon * 10 * pfa
        c2 = 10 * ps * (1 - pmiss_spf)
        curve = (c1 * pmiss_cm + c2 * pfa_cm) / np.minimum(c1, c2)
    else:
        c0 = ptar * 1 * pmiss + pnon * 10 * pfa
        c1 = ptar * 1 - (ptar * 1 * pmiss + pnon * 10 * pfa)
        c2 = ps * 10 * pfa_spf
        curve = (c0 + c1 * pmiss_cm + c2 * pfa_cm) / (c0 + np.minimum(c1, c2))
    return float(curve.min()), t


def min_tdcf_over_thresholds(tar, non, spf, bona_cm, spoof_cm, revision="2019"):
    """Brute force over every real threshold (each distinct CM score, and +inf), rates by definition."""
    _, t = asv_eer(tar, non)
    pfa, pmiss, pmiss_spf, pfa_spf = asv_error_rates(tar, non, spf, t)
    taus = np.concatenate((np.unique(np.concatenate((bona_cm, spoof_cm))), [np.inf]))
    b, s = np.sort(bona_cm), np.sort(spoof_cm)
    pm = np.searchsorted(b, taus, side="left") / b.size        # bona fide with s < tau
    pf = (s.size - np.searchsorted(s, taus, side="left")) / s.size  # spoofs with s >= tau
    ps = 0.05
    ptar, pnon = (1 - ps) * 0.99, (1 - ps) * 0.01
    if revision == "2019":
        c1 = ptar * (1 - pmiss) - pnon * 10 * pfa
        c2 = 10 * ps * (1 - pmiss_spf)
        return float(np.min((c1 * pm + c2 * pf) / min(c1, c2)))
    c0 = ptar * pmiss + pnon * 10 * pfa
    c1, c2 = ptar - c0, ps * 10 * pfa_spf
    return float(np.min((c0 + c1 * pm + c2 * pf) / (c0 + min(c1, c2))))


def min_adcf(trg, non, spf, ptrg=0.9, pnon=0.05, pspf=0.05, cmiss=1, cfa=10, cfa_spf=20):
    allsc = np.concatenate((trg, non, spf))
    lab = np.concatenate((np.ones(trg.size), np.zeros(non.size), np.full(spf.size, 2)))
    idx = np.argsort(allsc, kind="mergesort")
    fp_n, fp_s, fn = non.size, spf.size, 0
    best = cfa * pnon + cfa_spf * pspf  # accept all: both false-alarm rates 1
    for lb in lab[idx]:
        if lb == 0:
            fp_n -= 1
        elif lb == 1:
            fn += 1
        else:
            fp_s -= 1
        best = min(best, cmiss * ptrg * fn / trg.size + cfa * pnon * fp_n / non.size + cfa_spf * pspf * fp_s / spf.size)
    return best / min(cfa * pnon + cfa_spf * pspf, cmiss * ptrg)


def teer(tar_asv, non_asv, spf_asv, tar_cm, non_cm, spf_cm):
    """The concurrent t-EER by the published double loop (rho = 0 path)."""
    allsc = np.concatenate((tar_asv, non_asv, spf_asv))
    lab = np.concatenate((np.ones(tar_asv.size), np.zeros(non_asv.size), -np.ones(spf_asv.size)))
    lab = lab[np.argsort(allsc, kind="mergesort")]
    pm_a = np.concatenate(([0], np.cumsum(lab == 1) / tar_asv.size))
    pf_n = np.concatenate(([1], 1 - np.cumsum(lab == 0) / non_asv.size))
    pf_s = np.concatenate(([1], 1 - np.cumsum(lab == -1) / spf_asv.size))
    pmiss_cm, pfa_cm, _ = det_curve(np.concatenate((tar_cm, non_cm)), spf_cm)
    best, out = np.inf, np.nan
    for a in range(pm_a.size):
        pmt = pmiss_cm + (1 - pmiss_cm) * pm_a[a]
        pft = (1 - 0.0) * (1 - pmiss_cm) * pf_n[a] + 0.0 * pfa_cm * pf_s[a]
        c = int(np.argmin(np.abs(pmt - pft)))
        if pm_a[a] < pf_n[a]:
            with np.errstate(divide="ignore", invalid="ignore"):
                crit = abs(pf_n[a] / pf_s[a] - pfa_cm[c] / (1 - pmiss_cm[c]))
            if crit < best:
                best, out = crit, pf_s[a] * pfa_cm[c]
    return out


def sasv_eers(scores, keys):
    keys = np.asarray(keys)
    out = []
    for neg in (("nontarget", "spoof"), ("nontarget",), ("spoof",)):
        m = (keys == "target") | np.isin(keys, neg)
        fpr, tpr, _ = roc_curve((keys[m] == "target").astype(int), scores[m], pos_label=1)
        out.append(brentq(lambda x: 1.0 - x - interp1d(fpr, tpr)(x), 0.0, 1.0, xtol=1e-14))
    return out
