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

Model.  For speaker :math:`i` and core stratum :math:`a` (e.g. bona fide; spoof × attack) of
class :math:`c`,

.. math::

    F_{ia}(t) = (1-\pi_{ia})\,F^{\text{core}}_{ia}(t) + \pi_{ia}\,G_a(t),\qquad
    \pi_{ia} = \bar\pi_a\,r_{ic},

where :math:`F^{\text{core}}_{ia}` is the location-scale transformation mixed model of the
non-failure trials (:mod:`scoremix.locscale.fit`; its strata hold only scores beyond the cut),
:math:`\bar\pi_a` the failure share of stratum :math:`a` pooled over speakers, and
:math:`G_a` the pooled distribution of the failures of stratum :math:`a` when it has at least
``failure_min_count`` of them (:func:`own_failure_keys`), else of the whole class
(:math:`G_c`; one stratum of its own, fitted freely).  The speaker multiplier :math:`r_{ic}`
is zero-inflated gamma: :math:`K_{ic}\mid r\sim\mathrm{Poisson}(r E_{ic})`,
:math:`E_{ic}=\sum_a n_{ia}\bar\pi_a`,
:math:`r\sim w\,\delta_0 + (1-w)\,\mathrm{Gamma}(M, M(1-w))` (:func:`zinb_loglik`); a
speaker's share uses the posterior mean of :math:`r` averaged over the posterior of
:math:`(w, M)` on a grid (:func:`zinb_grid`, :func:`multiplier_posterior`), so that a
maximum on the boundary :math:`M\to\infty` (a zero-inflated Poisson: every speaker with a
failure at the same share) does not fix the shrinkage.  ``fit_shares(pooling="cell")``: a
beta-binomial per speaker × stratum cell instead, :math:`\hat\pi_j = (k_j + M_c\bar\pi_s)/(n_j + M_c)`.

Whether the failure part is worth having is decided by speaker-grouped cross-validation
(:func:`failure_cv`): the held-out speakers' failure counts under the posterior predictive of
the training speakers against the Poisson at the pooled shares; whether strata get failure
distributions of their own, by the CV CRPS of the held-out failure trials
(:func:`failure_shape_cv`, :func:`choose_failure_min_count`; both with the one-standard-error
rule).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar
from scipy.special import betaln, expit, gammainc, gammaln

__all__ = ["FailureCuts", "failure_cuts", "failure_flags", "FailureShares", "fit_shares", "betabinom_loglik",
           "zinb_loglik", "zinb_grid", "multiplier_posterior", "multiplier_quantile", "SHARE_ESTIMATES",
           "zinb_predictive",
           "failure_cv", "FAILURE_LEVEL",
           "FAILURE_MIN_GRID", "own_failure_keys", "failure_strata", "failure_shape_cv",
           "choose_failure_min_count"]

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


#: hyper-parameter grid of the speaker multiplier (uniform prior on logit w and log M)
W_GRID = np.r_[0.0, 0.98 * expit(np.linspace(-6.0, 4.0, 21))]
M_GRID = np.exp(np.linspace(np.log(0.05), np.log(1e4), 31))


def zinb_grid(K: np.ndarray, E: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Posterior of the hyper-parameters :math:`(w, M)` of :func:`zinb_loglik` on the grid
    ``W_GRID × M_GRID`` (uniform prior on :math:`\mathrm{logit}(w/0.98)` and :math:`\log M`):
    returns ``(w, M, post)``, flattened, ``post`` summing to 1.  Averaging over this posterior
    instead of plugging in the maximum (which sits on the boundary :math:`M\to\infty` when a
    few speakers hold a few failures each, a zero-inflated Poisson: every speaker with a
    failure then gets the same share whatever its count) keeps the shrinkage that the data
    support: the posterior mean of a speaker's multiplier grows with its own count."""
    w, M = np.meshgrid(W_GRID, M_GRID, indexing="ij")
    w, M = w.ravel(), M.ravel()
    ll = np.array([float(zinb_loglik(K, E, wi, Mi).sum()) for wi, Mi in zip(w, M)])
    post = np.exp(ll - ll.max())
    return w, M, post / post.sum()


def multiplier_posterior(K: np.ndarray, E: np.ndarray, w: np.ndarray, M: np.ndarray, post: np.ndarray
                         ) -> np.ndarray:
    r"""Posterior mean of every speaker's multiplier :math:`r_i` given its count :math:`K_i`
    and expectation :math:`E_i`, averaged over the hyper-parameter posterior ``post``:
    :math:`E[r_i\mid K] = \sum_\theta p(\theta\mid K)\,(1-\hat w_{i\theta})(M+K_i)/(\beta+E_i)`,
    :math:`\beta=M(1-w)`, :math:`\hat w_{i\theta}` the posterior probability of the zero
    component (:math:`K_i=0` only)."""
    K, E = np.asarray(K, np.float64)[:, None], np.asarray(E, np.float64)[:, None]
    beta = M * (1 - w)
    logp0 = M * (np.log(beta) - np.log(beta + E))
    with np.errstate(divide="ignore"):
        lw = np.log(w)
    wpost = np.where(K == 0, np.exp(lw - np.logaddexp(lw, np.log1p(-w) + logp0)), 0.0)
    r = (1 - wpost) * (M + K) / (beta + E)
    return r @ post


def multiplier_quantile(K: np.ndarray, E: np.ndarray, w: np.ndarray, M: np.ndarray, post: np.ndarray,
                        q: float = 0.5, *, tol: float = 1e-10) -> np.ndarray:
    r"""Posterior :math:`q`-quantile (default the median) of every speaker's multiplier
    :math:`r_i`, the hyper-parameters integrated over their grid posterior ``post``.

    Given :math:`\theta=(w, M)` the posterior of :math:`r_i` is a point mass at 0 with
    probability :math:`\hat w_{i\theta}` (only when :math:`K_i=0`) and otherwise
    :math:`\mathrm{Gamma}(M+K_i,\ \beta+E_i)`, :math:`\beta=M(1-w)`, so

    .. math::

        P(r_i\le x\mid K) = \sum_\theta p(\theta\mid K)\,\big[\hat w_{i\theta}
        + (1-\hat w_{i\theta})\,P\big(M+K_i,\ (\beta+E_i)\,x\big)\big]

    (:math:`P` the regularised lower incomplete gamma function).  The quantile is the smallest
    :math:`x` with :math:`P(r_i\le x\mid K)\ge q`: 0 when the zero component alone carries
    posterior mass :math:`\ge q`, else the root found by bisection (relative tolerance ``tol``).

    Why the median: a speaker's error rate is increasing in its failure share, so the posterior
    median of the rate is the rate at the posterior median of :math:`r_i` (medians are
    equivariant under increasing maps), and the median minimises the expected *absolute*
    error — the loss of the per-speaker comparison of :func:`scoremix.validation.validate_model`.
    The posterior mean (:func:`multiplier_posterior`) minimises squared error; for the
    right-skewed posterior of a speaker without failures it gives every such speaker a floor
    of failure mass that the typical such speaker does not have."""
    if not 0 < q < 1:
        raise ValueError(f"quantile q must lie in (0, 1), got {q!r}")
    K, E = np.asarray(K, np.float64)[:, None], np.asarray(E, np.float64)[:, None]
    keep = post > 1e-14
    w, M, post = w[keep], M[keep], post[keep] / post[keep].sum()
    beta = M * (1 - w)
    logp0 = M * (np.log(beta) - np.log(beta + E))
    with np.errstate(divide="ignore"):
        lw = np.log(w)
    wpost = np.where(K == 0, np.exp(lw - np.logaddexp(lw, np.log1p(-w) + logp0)), 0.0)
    shape, rate = M + K, beta + E                       # (n, G)

    def cdf(x: np.ndarray) -> np.ndarray:
        return (wpost + (1 - wpost) * gammainc(shape, rate * x[:, None])) @ post

    out = np.zeros(K.shape[0])
    todo = (wpost @ post) < q
    if todo.any():
        # bracket: the gamma components' means + 20 SDs bound the quantile from above
        hi = np.max((shape + 20 * np.sqrt(shape)) / rate, axis=1)
        lo = np.zeros_like(hi)
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            below = cdf(mid) < q
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
            if np.all((hi - lo)[todo] <= tol * np.maximum(hi[todo], 1e-300)):
                break
        out[todo] = hi[todo]
    return out


#: how a speaker's failure multiplier is summarised: its posterior mean or median
SHARE_ESTIMATES = ("mean", "median")


def _speaker_shares(df: pd.DataFrame, cells: pd.DataFrame, pooled: dict, estimate: str = "mean"
                    ) -> tuple[np.ndarray, dict]:
    r"""Shares :math:`\hat\pi_{ja} = \bar\pi_a\,\hat r_i` of the speaker-multiplier model, the
    multiplier's posterior mean (``estimate="mean"``, :func:`multiplier_posterior`) or median
    (``"median"``, :func:`multiplier_quantile`), the hyper-parameters integrated over their grid
    posterior (:func:`zinb_grid`)."""
    pbar = cells.index.get_level_values("key").map(pooled).to_numpy(np.float64)
    cells = cells.assign(e=cells["n"] * pbar)
    spk = cells.index.get_level_values("speaker").to_numpy(object)
    pi = pbar.copy()
    par = {}
    for cl in (0, 1):
        m = cells["cls"].to_numpy() == cl
        if not m.any():
            par[cl] = (0.0, float("inf"), None)
            continue
        g = cells[m].groupby(level="speaker", sort=True)[["k", "e"]].sum()
        K, E = g["k"].to_numpy(np.float64), g["e"].to_numpy(np.float64)
        if K.sum() == 0 or E.sum() <= 0:
            par[cl] = (0.0, float("inf"), None)
            continue
        wg, Mg, post = zinb_grid(K, E)
        j = int(np.argmax(post))
        par[cl] = (float(wg[j]), float(Mg[j]), (wg, Mg, post))
        rr = (multiplier_posterior(K, E, wg, Mg, post) if estimate == "mean"
              else multiplier_quantile(K, E, wg, Mg, post, 0.5))
        r = pd.Series(rr, index=g.index)
        pi[m] = np.minimum(pbar[m] * r.reindex(spk[m]).to_numpy(), 1.0)
    return pi, par


def zinb_predictive(K: np.ndarray, E: np.ndarray, hyper: tuple | None) -> np.ndarray:
    """Log predictive probability of new speakers' counts ``K`` (expectations ``E``) under the
    hyper-parameter posterior ``hyper = (w, M, post)`` of :func:`zinb_grid` (Poisson at the
    pooled rates when ``None``)."""
    from scipy.special import logsumexp
    from scipy.stats import poisson

    K, E = np.asarray(K, np.float64), np.asarray(E, np.float64)
    if hyper is None:
        return poisson.logpmf(K, np.maximum(E, 1e-300))
    w, M, post = hyper
    keep = post > 1e-12
    ll = np.stack([zinb_loglik(K, E, wi, Mi) for wi, Mi in zip(w[keep], M[keep])], axis=1)
    return logsumexp(ll + np.log(post[keep]), axis=1)


def fit_shares(speaker: np.ndarray, key: np.ndarray, cls: np.ndarray, fail: np.ndarray, pooling: str = "speaker",
               estimate: str = "mean") -> FailureShares:
    """Partial pooling of the failure shares of every (speaker, stratum key) cell (module
    docstring); ``cls`` the class (0/1) of every trial, ``key`` its core stratum (the stratum
    it would have without the cut).  ``pooling="speaker"`` (default): the zero-inflated
    gamma–Poisson speaker multiplier (:func:`zinb_loglik`); ``"cell"``: a beta-binomial per
    cell."""
    if pooling not in ("speaker", "cell"):
        raise ValueError(f"pooling must be 'speaker' or 'cell', got {pooling!r}")
    if estimate not in SHARE_ESTIMATES:
        raise ValueError(f"estimate must be one of {SHARE_ESTIMATES}, got {estimate!r}")
    df = pd.DataFrame({"speaker": np.asarray(speaker, object), "key": np.asarray(key, object),
                       "cls": np.asarray(cls, np.int64), "fail": np.asarray(fail, bool)})
    cells = df.groupby(["speaker", "key"], sort=True).agg(n=("fail", "size"), k=("fail", "sum"), cls=("cls", "first"))
    tot = df.groupby("key").agg(n=("fail", "size"), k=("fail", "sum"))
    pooled = (tot["k"] / tot["n"]).to_dict()
    pbar = cells.index.get_level_values("key").map(pooled).to_numpy(np.float64)
    if pooling == "speaker":
        pi, par = _speaker_shares(df, cells, pooled, estimate)
        return FailureShares(pooled=pooled, concentration={c: par[c][1] for c in par},
                             cells=cells.assign(pooled=pbar, pi=pi), info=dict(pooling=pooling, estimate=estimate, zero_share={
                                 c: par[c][0] for c in par}, hyper={c: par[c][2] for c in par}))
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
    two totals, their difference (positive: the speaker-varying failure share wins) and ``se``,
    the standard error of that difference (paired over the held-out speaker × class units;
    s6failure: ``score_model`` uses the mixture when ``delta > se``, the one-standard-error
    rule)."""
    df = pd.DataFrame({"speaker": np.asarray(speaker, object), "key": np.asarray(key, object),
                       "cls": np.asarray(cls, np.int64), "fail": np.asarray(fail, bool)})
    spk = np.unique(df["speaker"].astype(str))
    rng = np.random.default_rng(seed)
    fold_of = dict(zip(spk, rng.permutation(np.arange(spk.size) % n_folds)))
    fold = df["speaker"].astype(str).map(fold_of).to_numpy()
    ll_bb = ll_b = 0.0
    diffs = []                          # per held-out unit: mixture minus pooled log-likelihood
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
                pois = poisson.logpmf(K, np.maximum(E, 1e-300))
                mix = zinb_predictive(K, E, sh.info["hyper"][cl])
                ll_b += float(pois.sum())
                ll_bb += float(mix.sum())
                diffs.append(mix - pois)
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
        diffs.append(bb - binom_loglik(k, n, pb))
    dd = np.concatenate(diffs) if diffs else np.zeros(0)
    se = float(np.sqrt(dd.size) * dd.std(ddof=1)) if dd.size > 1 else 0.0
    return dict(cv_mixture=ll_bb, cv_pooled=ll_b, delta=ll_bb - ll_b, se=se)


# ----------------------------------------------------------------------------------------------
# s6failure: stratum-aware failure distributions (one per core stratum with enough failures)
# ----------------------------------------------------------------------------------------------

#: the thresholds ``m`` compared by :func:`failure_shape_cv` (``None``: one distribution per class)
FAILURE_MIN_GRID = (1, 3, 10, 30, None)


def class_failure_level(lab: np.ndarray) -> np.ndarray:
    """The class failure stratum (``"+:failure"``, ``"-:failure"``) of class signs ``lab``."""
    return (pd.Series(np.asarray(lab, object)) + ":" + FAILURE_LEVEL).to_numpy(dtype=object)


def own_failure_keys(key: np.ndarray, fail: np.ndarray, min_count: int | None) -> frozenset:
    r"""Core strata that get a failure distribution of their own: those with at least
    ``min_count`` failures (``None``: none, one pooled failure distribution per class)."""
    if min_count is None:
        return frozenset()
    k = pd.Series(np.asarray(fail, bool)).groupby(np.asarray(key, object)).sum()
    return frozenset(k.index[k.to_numpy() >= int(min_count)])


def failure_strata(key: np.ndarray, lab: np.ndarray, own: frozenset | set) -> np.ndarray:
    r"""Failure stratum of every trial (to be used where it is a failure): ``"<key>:failure"``
    (its core stratum's own failure distribution :math:`G_a`) when ``key`` is in ``own``, else
    the class's pooled ``"±:failure"`` (:math:`G_c`)."""
    key = np.asarray(key, object)
    cls = class_failure_level(lab)
    if not own:
        return cls
    mine = pd.Series(key).isin(list(own)).to_numpy()
    return np.where(mine, (pd.Series(key) + ":" + FAILURE_LEVEL).to_numpy(dtype=object), cls)


def _crpss(x: np.ndarray, train: np.ndarray, v: np.ndarray, mass: np.ndarray) -> np.ndarray:
    r"""Threshold-weighted CRPS :math:`\sum_k m_k (F(v_k) - 1\{x\le v_k\})^2` of every ``x``
    against the empirical CDF ``F`` of ``train``, weight masses ``mass`` at ``v``."""
    F = np.searchsorted(np.sort(train), v, side="right") / train.size
    ind = (x[:, None] <= v[None, :]).astype(np.float64)
    return ((F[None, :] - ind) ** 2 * mass[None, :]).sum(axis=1)


def failure_shape_cv(speaker: np.ndarray, key: np.ndarray, cls: np.ndarray, score: np.ndarray, fail: np.ndarray,
                     grid: tuple = FAILURE_MIN_GRID, n_folds: int = 4, seed: int = 0) -> pd.DataFrame:
    r"""Speaker-grouped CV of the failure distributions: for every threshold ``m`` of ``grid``
    (:func:`own_failure_keys`, on the training speakers) every held-out failure trial :math:`x`
    of core stratum :math:`a` is scored by the threshold-weighted CRPS (Gneiting & Ranjan 2011)
    :math:`\int (\hat G(u) - 1\{x\le u\})^2\,dG_c(u)` of the training failures' empirical
    distribution :math:`\hat G` of its group (:math:`a`'s own when :math:`a` has at least
    ``m`` training failures, the class's otherwise); the weight measure :math:`G_c` is the
    class's pooled failure distribution, so the score does not depend on increasing
    re-scalings of the scores.  Returns one row per ``m`` (``"class"`` for ``None``) with the
    summed CRPS (lower is better) and ``delta`` from the best."""
    spk = np.asarray(speaker, object).astype(str)
    key, cls = np.asarray(key, object), np.asarray(cls, np.int64)
    s, fail = np.asarray(score, np.float64), np.asarray(fail, bool)
    us = np.unique(spk)
    rng = np.random.default_rng(seed)
    fold_of = dict(zip(us, rng.permutation(np.arange(us.size) % n_folds)))
    fold = pd.Series(spk).map(fold_of).to_numpy()
    per = []                                  # per held-out failure trial: CRPS of every candidate
    for cl in (0, 1):
        mcl = fail & (cls == cl) & np.isfinite(s)
        if mcl.sum() < 2:
            continue
        v, cnt = np.unique(s[mcl], return_counts=True)
        mass = cnt / cnt.sum()
        for f in range(n_folds):
            tr, te = mcl & (fold != f), mcl & (fold == f)
            if not te.any() or not tr.any():
                continue
            ktr = pd.Series(key[tr]).value_counts()
            for a in np.unique(key[te]):
                x = s[te & (key == a)]
                own_tr = s[tr & (key == a)]
                c_own = _crpss(x, own_tr, v, mass) if own_tr.size else np.full(x.size, np.nan)
                c_cls = _crpss(x, s[tr], v, mass)
                per.append(np.column_stack([c_own if (m is not None and own_tr.size and ktr.get(a, 0) >= m)
                                            else c_cls for m in grid]))
    per = np.vstack(per) if per else np.zeros((0, len(grid)))
    tot = per.sum(axis=0)
    # standard error of each candidate's total minus the class model's (paired over held-out trials)
    ref = [j for j, m in enumerate(grid) if m is None]
    diff = per - per[:, ref[0]][:, None] if ref and per.shape[0] > 1 else np.zeros_like(per)
    se = np.sqrt(per.shape[0]) * diff.std(axis=0, ddof=1) if per.shape[0] > 1 else np.zeros(len(grid))
    out = pd.DataFrame(dict(min_count=["class" if m is None else m for m in grid], crps=tot, se_vs_class=se))
    out["delta"] = out["crps"] - out["crps"].min()
    return out


def choose_failure_min_count(cv: pd.DataFrame) -> int | None:
    r"""The threshold chosen from :func:`failure_shape_cv`'s table by the one-standard-error
    rule: per-stratum failure distributions (the lowest CV CRPS among ``m``) only when they
    beat one distribution per class by more than one standard error of the paired difference
    (Hastie, Tibshirani & Friedman 2009, §7.10); ``None`` (per class) otherwise."""
    cls = cv[cv["min_count"] == "class"]
    own = cv[cv["min_count"] != "class"]
    if cls.empty or own.empty:
        return None
    j = int(np.argmin(own["crps"].to_numpy()))
    gain = float(cls["crps"].iloc[0] - own["crps"].iloc[j])
    return int(own["min_count"].iloc[j]) if gain > float(own["se_vs_class"].iloc[j]) and gain > 0 else None
