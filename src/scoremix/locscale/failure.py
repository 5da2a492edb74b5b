r"""Per-speaker failure mixture of a location-scale score model (a two-part, hurdle model).

A few speakers of a strong detector have a handful of *catastrophic* trials: bona fide
trials scored where spoofs live, or spoofs scored where bona fide trials live.  A speaker's
score distribution is then bimodal, which no location-scale latent Gaussian represents.
This module splits every class at a *failure cut* and models the two parts separately.

Cuts (on the fitted scores): with :math:`q` the ``quantile`` (default 0.99) and
:math:`Q_\pm` the pooled quantile functions of the classes,

.. math::

    c_+ = \min\{Q_-(q),\ Q_+(1-q)\},\qquad c_- = \max\{Q_+(1-q),\ Q_-(q)\},

a positive (bona fide) trial with :math:`S < c_+` and a negative (spoof) trial with
:math:`S \ge c_-` is a *failure*: it lies beyond the other class's pooled q-quantile *and*
in its own class's (1−q)-tail, so at most a share 1−q of a class are failures (a weak
detector's ordinary overlap is not called failure).

Model.  For a cell :math:`j` (speaker × stratum, e.g. speaker × attack for spoofs; the
speaker's bona fide trials) of class :math:`c`,

.. math::

    F_j(t) = (1-\pi_j)\,F^{\text{core}}_j(t) + \pi_j\,G_c(t),\qquad
    \pi_j \sim \mathrm{Beta}\big(M_c\,\bar\pi_{s(j)},\ M_c(1-\bar\pi_{s(j)})\big),

where :math:`F^{\text{core}}_j` is the location-scale transformation mixed model of the
non-failure trials (:mod:`scoremix.locscale.fit`; its strata hold only scores beyond the cut),
:math:`G_c` the pooled distribution of the class's failures (one stratum of its own, fitted
freely), :math:`\bar\pi_s` the failure share of stratum :math:`s` pooled over speakers, and
the concentration :math:`M_c` is estimated by maximum marginal (beta-binomial) likelihood of
the cells' failure counts :math:`k_j \sim \mathrm{BetaBin}(n_j, M_c\bar\pi_s, M_c(1-\bar\pi_s))`.
The cell's share is its posterior mean
:math:`\hat\pi_j = (k_j + M_c\bar\pi_s)/(n_j + M_c)`: partial pooling of the counts, with
:math:`M_c\to\infty` meaning no speaker differences (every cell at the pooled share) and
small :math:`M_c` the cell's own share.

Whether the failure part is worth having is decided by speaker-grouped cross-validation
(:func:`failure_cv`): the held-out speakers' failure counts under the beta-binomial with
the training speakers' :math:`(\bar\pi, M)` against the binomial with :math:`\bar\pi` alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar
from scipy.special import betaln, expit, gammaln

__all__ = ["FailureCuts", "failure_cuts", "failure_flags", "FailureShares", "fit_shares", "betabinom_loglik",
           "zinb_loglik",
           "failure_cv", "FAILURE_LEVEL"]

#: stratum suffix of the failure strata ("+:failure", "-:failure")
FAILURE_LEVEL = "failure"


@dataclass(frozen=True)
class FailureCuts:
    """The failure cuts :math:`c_+` (positives below are failures) and :math:`c_-`
    (negatives at or above are failures), and the quantile ``q`` that set them."""

    pos: float
    neg: float
    quantile: float


def failure_cuts(score: np.ndarray, y: np.ndarray, quantile: float = 0.99) -> FailureCuts:
    """Cuts of the module docstring from fitted scores ``score`` and classes ``y`` (1 positive)."""
    if not 0.5 < quantile < 1:
        raise ValueError(f"failure quantile must lie in (0.5, 1), got {quantile!r}")
    s = np.asarray(score, np.float64)
    y = np.asarray(y).astype(bool)
    qn, qp = float(np.quantile(s[~y], quantile)), float(np.quantile(s[y], 1 - quantile))
    return FailureCuts(pos=min(qn, qp), neg=max(qn, qp), quantile=float(quantile))


def failure_flags(score: np.ndarray, y: np.ndarray, cuts: FailureCuts) -> np.ndarray:
    """``True`` for failure trials: positives below :math:`c_+`, negatives at or above :math:`c_-`."""
    s = np.asarray(score, np.float64)
    y = np.asarray(y).astype(bool)
    return np.where(y, s < cuts.pos, s >= cuts.neg)


def betabinom_loglik(k: np.ndarray, n: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    r"""Beta-binomial log probability :math:`\log\binom{n}{k} + \log B(k+a, n-k+b) - \log B(a, b)`;
    ``a = ∞`` style limits are not handled (use :func:`binom_loglik`)."""
    k, n = np.asarray(k, np.float64), np.asarray(n, np.float64)
    comb = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)
    return comb + betaln(k + a, n - k + b) - betaln(a, b)


def binom_loglik(k: np.ndarray, n: np.ndarray, p: np.ndarray) -> np.ndarray:
    k, n = np.asarray(k, np.float64), np.asarray(n, np.float64)
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1) + k * np.log(p) + (n - k) * np.log1p(-p)


@dataclass
class FailureShares:
    r"""Fitted failure shares.

    ``pooled``: :math:`\bar\pi_s` per stratum key; ``concentration``: :math:`M_c` per class
    (0 negative, 1 positive; ``inf`` = no speaker differences); ``cells``: per cell
    (speaker, stratum key) the counts and the posterior share ``pi``."""

    pooled: dict
    concentration: dict
    cells: pd.DataFrame
    info: dict = field(default_factory=dict)

    def share(self, speaker: np.ndarray, key: np.ndarray, cls: np.ndarray) -> np.ndarray:
        """:math:`\\hat\\pi` of every (speaker, stratum key) pair; a cell not seen in fitting
        gets the prior mean :math:`\\bar\\pi_s` (0 for a stratum not seen)."""
        pooled = np.array([self.pooled.get(k, 0.0) for k in key], np.float64)
        idx = pd.MultiIndex.from_arrays([np.asarray(speaker, object), np.asarray(key, object)])
        pos = self.cells.index.get_indexer(idx)
        pi = np.where(pos >= 0, self.cells["pi"].to_numpy()[np.maximum(pos, 0)], pooled)
        return pi


def _fit_concentration(k: np.ndarray, n: np.ndarray, pbar: np.ndarray) -> float:
    """ML concentration ``M`` of the beta-binomial with prior means ``pbar`` (fixed); ``inf``
    when the binomial (no over-dispersion) is at least as likely."""
    ok = (pbar > 0) & (pbar < 1)
    if not ok.any():
        return float("inf")
    k, n, pb = k[ok], n[ok], pbar[ok]

    def nll(lm: float) -> float:
        m = np.exp(lm)
        return -float(betabinom_loglik(k, n, m * pb, m * (1 - pb)).sum())

    res = minimize_scalar(nll, bounds=(np.log(1e-2), np.log(1e6)), method="bounded", options=dict(xatol=1e-4))
    if -res.fun <= float(binom_loglik(k, n, pb).sum()) + 1e-9 or res.x > np.log(1e6) - 1e-3:
        return float("inf")
    return float(np.exp(res.x))


def zinb_loglik(K: np.ndarray, E: np.ndarray, w: float, M: float) -> np.ndarray:
    r"""Log probability of failure counts :math:`K` with expectations :math:`E` under the
    zero-inflated gamma–Poisson speaker multiplier: :math:`K\mid r\sim\mathrm{Poisson}(E r)`,
    :math:`r \sim w\,\delta_0 + (1-w)\,\mathrm{Gamma}(M, \beta)`, :math:`\beta = M(1-w)`
    (so that :math:`E[r]=1`)."""
    K, E = np.asarray(K, np.float64), np.asarray(E, np.float64)
    beta = M * (1 - w)
    nb = (gammaln(K + M) - gammaln(M) - gammaln(K + 1) + M * (np.log(beta) - np.log(beta + E))
          + K * (np.log(np.maximum(E, 1e-300)) - np.log(beta + E)))
    nb = np.where(K == 0, M * (np.log(beta) - np.log(beta + E)), nb)
    if w <= 0:
        return nb
    return np.where(K == 0, np.logaddexp(np.log(w), np.log1p(-w) + nb), np.log1p(-w) + nb)


def _fit_zinb(K: np.ndarray, E: np.ndarray) -> tuple[float, float]:
    """ML ``(w, M)`` of :func:`zinb_loglik`; ``(0, inf)`` when the Poisson (every speaker at
    the pooled rates) is at least as likely."""
    from scipy.optimize import minimize
    from scipy.stats import poisson

    if K.sum() == 0 or E.sum() <= 0:
        return 0.0, float("inf")
    ll0 = float(poisson.logpmf(K, E).sum())

    def nll(v: np.ndarray) -> float:
        w = 0.98 * float(expit(v[0]))
        return -float(zinb_loglik(K, E, w, float(np.exp(min(v[1], np.log(1e6))))).sum())

    best = None
    for v0 in ([-4.0, 0.0], [0.0, 0.0], [-4.0, 3.0]):
        r = minimize(nll, np.array(v0), method="Nelder-Mead", options=dict(xatol=1e-5, fatol=1e-8, maxiter=2000))
        best = r if best is None or r.fun < best.fun else best
    w, M = 0.98 * float(expit(best.x[0])), float(min(np.exp(best.x[1]), 1e6))
    if -best.fun <= ll0 + 1e-9:
        return 0.0, float("inf")
    return float(w), M      # M at its cap with w > 0: a zero-inflated Poisson


def _speaker_shares(df: pd.DataFrame, cells: pd.DataFrame, pooled: dict) -> tuple[np.ndarray, dict]:
    r"""Shares :math:`\hat\pi_{ja} = \bar\pi_a\,\hat r_i` of the speaker-multiplier model."""
    pbar = cells.index.get_level_values("key").map(pooled).to_numpy(np.float64)
    cells = cells.assign(e=cells["n"] * pbar)
    spk = cells.index.get_level_values("speaker").to_numpy(object)
    pi = pbar.copy()
    par = {}
    for cl in (0, 1):
        m = cells["cls"].to_numpy() == cl
        if not m.any():
            par[cl] = (0.0, float("inf"))
            continue
        g = cells[m].groupby(level="speaker", sort=True)[["k", "e"]].sum()
        w, M = _fit_zinb(g["k"].to_numpy(np.float64), g["e"].to_numpy(np.float64))
        par[cl] = (w, M)
        if not np.isfinite(M):
            continue
        K, E = g["k"].to_numpy(np.float64), g["e"].to_numpy(np.float64)
        beta = M * (1 - w)
        p0 = (beta / (beta + E)) ** M
        wpost = np.where(K == 0, w / (w + (1 - w) * p0), 0.0) if w > 0 else np.zeros_like(K)
        r = pd.Series((1 - wpost) * (M + K) / (beta + E), index=g.index)
        pi[m] = np.minimum(pbar[m] * r.reindex(spk[m]).to_numpy(), 1.0)
    return pi, par


def fit_shares(speaker: np.ndarray, key: np.ndarray, cls: np.ndarray, fail: np.ndarray, pooling: str = "speaker"
               ) -> FailureShares:
    """Partial pooling of the failure shares of every (speaker, stratum key) cell (module
    docstring); ``cls`` the class (0/1) of every trial, ``key`` its core stratum (the stratum
    it would have without the cut).  ``pooling="speaker"`` (default): the zero-inflated
    gamma–Poisson speaker multiplier (:func:`zinb_loglik`); ``"cell"``: a beta-binomial per
    cell."""
    if pooling not in ("speaker", "cell"):
        raise ValueError(f"pooling must be 'speaker' or 'cell', got {pooling!r}")
    df = pd.DataFrame({"speaker": np.asarray(speaker, object), "key": np.asarray(key, object),
                       "cls": np.asarray(cls, np.int64), "fail": np.asarray(fail, bool)})
    cells = df.groupby(["speaker", "key"], sort=True).agg(n=("fail", "size"), k=("fail", "sum"), cls=("cls", "first"))
    tot = df.groupby("key").agg(n=("fail", "size"), k=("fail", "sum"))
    pooled = (tot["k"] / tot["n"]).to_dict()
    pbar = cells.index.get_level_values("key").map(pooled).to_numpy(np.float64)
    if pooling == "speaker":
        pi, par = _speaker_shares(df, cells, pooled)
        return FailureShares(pooled=pooled, concentration={c: par[c][1] for c in par},
                             cells=cells.assign(pooled=pbar, pi=pi), info=dict(pooling=pooling, zero_share={
                                 c: par[c][0] for c in par}))
    k, n, c = cells["k"].to_numpy(np.float64), cells["n"].to_numpy(np.float64), cells["cls"].to_numpy()
    conc = {}
    pi = pbar.copy()
    for cl in (0, 1):
        m = c == cl
        M = _fit_concentration(k[m], n[m], pbar[m]) if m.any() else float("inf")
        conc[cl] = M
        if np.isfinite(M):
            pi[m] = (k[m] + M * pbar[m]) / (n[m] + M)
    cells = cells.assign(pooled=pbar, pi=pi)
    return FailureShares(pooled=pooled, concentration=conc, cells=cells, info=dict(pooling=pooling))


def failure_cv(speaker: np.ndarray, key: np.ndarray, cls: np.ndarray, fail: np.ndarray, n_folds: int = 4,
               seed: int = 0, pooling: str = "speaker") -> dict:
    """Speaker-grouped CV log-likelihood of the held-out speakers' failure counts: the
    beta-binomial (shares vary by speaker) against the binomial (pooled shares); returns the
    two totals and their difference (positive: the speaker-varying failure share wins)."""
    df = pd.DataFrame({"speaker": np.asarray(speaker, object), "key": np.asarray(key, object),
                       "cls": np.asarray(cls, np.int64), "fail": np.asarray(fail, bool)})
    spk = np.unique(df["speaker"].astype(str))
    rng = np.random.default_rng(seed)
    fold_of = dict(zip(spk, rng.permutation(np.arange(spk.size) % n_folds)))
    fold = df["speaker"].astype(str).map(fold_of).to_numpy()
    ll_bb = ll_b = 0.0
    for f in range(n_folds):
        tr, te = fold != f, fold == f
        if not te.any() or not tr.any():
            continue
        sh = fit_shares(df["speaker"][tr].to_numpy(), df["key"][tr].to_numpy(), df["cls"][tr].to_numpy(),
                        df["fail"][tr].to_numpy(), pooling=pooling)
        if pooling == "speaker":
            cells = df[te].groupby(["speaker", "key"], sort=True).agg(n=("fail", "size"), k=("fail", "sum"),
                                                                      cls=("cls", "first"))
            pb = cells.index.get_level_values("key").map(lambda v: sh.pooled.get(v, 0.0)).to_numpy(np.float64)
            cells = cells.assign(e=cells["n"] * pb).reset_index()
            g = cells.groupby(["speaker", "cls"])[["k", "e"]].sum().reset_index()
            from scipy.stats import poisson
            for cl in (0, 1):
                gg = g[g["cls"] == cl]
                K, E = gg["k"].to_numpy(np.float64), gg["e"].to_numpy(np.float64)
                w, M = sh.info["zero_share"][cl], sh.concentration[cl]
                pois = poisson.logpmf(K, np.maximum(E, 1e-300)).sum()
                ll_b += float(pois)
                ll_bb += float(zinb_loglik(K, E, w, M).sum()) if np.isfinite(M) else float(pois)
            continue
        cells = df[te].groupby(["speaker", "key"], sort=True).agg(n=("fail", "size"), k=("fail", "sum"),
                                                                  cls=("cls", "first"))
        pb = np.clip(cells.index.get_level_values("key").map(lambda v: sh.pooled.get(v, 0.0)).to_numpy(np.float64),
                     1e-6, 1 - 1e-6)
        k, n = cells["k"].to_numpy(np.float64), cells["n"].to_numpy(np.float64)
        M = cells["cls"].map(sh.concentration).to_numpy(np.float64)
        fin = np.isfinite(M)
        bb = binom_loglik(k, n, pb)
        bb[fin] = betabinom_loglik(k[fin], n[fin], M[fin] * pb[fin], M[fin] * (1 - pb[fin]))
        ll_bb += float(bb.sum())
        ll_b += float(binom_loglik(k, n, pb).sum())
    return dict(cv_mixture=ll_bb, cv_pooled=ll_b, delta=ll_bb - ll_b)
