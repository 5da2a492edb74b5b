r"""Multiplicity adjustments of p-values and of interval critical values (emmeans's rules).

Within one family (one ``by`` group) of :math:`m` contrasts among :math:`k` means, with
:math:`t_i` the t ratios and :math:`\nu_i` their df:

* ``"tukey"`` (pairwise comparisons only): :math:`p_i = P(Q_{k,\nu_i} > \sqrt2|t_i|)`,
  the studentized range (``scipy.stats.studentized_range``); critical value
  :math:`q_{k,\nu}(1-\alpha)/\sqrt2`;
* ``"sidak"``: :math:`1-(1-p_i)^m`; ``"bonferroni"``, ``"holm"``, ``"hochberg"``,
  ``"hommel"``, ``"fdr"``/``"BH"``, ``"BY"``: R's ``p.adjust`` (via statsmodels'
  ``multipletests``); intervals of the step-wise methods use Bonferroni's critical value;
* ``"scheffe"``: :math:`P(F_{r,\nu} > t_i^2/r)` with :math:`r` the rank of the contrast
  coefficients, critical value :math:`\sqrt{r F_{r,\nu}(1-\alpha)}`;
* ``"dunnettx"``: emmeans's approximation to Dunnett's distribution,
  :math:`F(x) = w\,P(Q_{k',\nu} \le \sqrt2 x) + (1-w)\,F_{1,\nu}(x^2)^m`,
  :math:`k' = (1+\sqrt{1+8m})/2`, :math:`w = (m-1)/m`;
* ``"mvt"``: :math:`p_i = 1 - P(\max_j |T_j| \le |t_i|)`, :math:`T` multivariate t with
  the contrasts' correlation and emmeans's integer df (``floor(ν + 0.25)``, normal when
  :math:`\nu > 9999`), by ``scipy.stats.multivariate_t.cdf`` (Genz–Bretz quasi-Monte
  Carlo, fixed seed; a singular correlation, as of pairwise or ``eff`` contrasts, is
  moved to :math:`(C + 10^{-4}I)/(1+10^{-4})`).  Agrees with mvtnorm at high precision
  to about 5e-5 (emmeans itself uses mvtnorm's randomised default, ``abseps = 1e-3``).

As in emmeans, a family of one contrast is not adjusted (except Scheffé), and Tukey on
contrasts that are not pairwise comparisons becomes Šidák (with a warning).
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy import optimize, stats

from scoremix.emm.errors import EmmError

__all__ = ["ADJUST", "adjust_p", "critical_values", "fix_df", "pmvt_max"]

_P_ADJUST = {"bonferroni": "bonferroni", "holm": "holm", "hochberg": "simes-hochberg",
             "hommel": "hommel", "fdr": "fdr_bh", "BH": "fdr_bh", "BY": "fdr_by"}
ADJUST = ("none", "tukey", "sidak", "scheffe", "dunnettx", "mvt") + tuple(_P_ADJUST)


def normalize_adjust(adjust: str, pairwise: bool, n_contr: int) -> str:
    a = str(adjust)
    if a not in ADJUST:
        raise EmmError(f"unknown adjust {adjust!r}; choose one of {ADJUST}")
    if n_contr == 1 and a != "scheffe":
        return "none"
    if a == "tukey" and not pairwise:
        warnings.warn("adjust='tukey' is only appropriate for one set of pairwise comparisons; "
                      "using 'sidak'", UserWarning, stacklevel=3)
        return "sidak"
    return a


def fix_df(df: np.ndarray) -> np.ndarray:
    """emmeans's integer df for mvtnorm: ``floor(max(1, ν) + 0.25)``, 0 (normal) when
    ``ν`` is infinite or above 9999."""
    out = []
    for d in np.atleast_1d(df):
        if not np.isfinite(d) or d > 9999:
            out.append(0)
        else:
            out.append(int(np.floor(max(1.0, d) + 0.25)))
    return np.asarray(out)


def pmvt_max(c: float, corr: np.ndarray, df: int, seed: int = 20261125,
             maxpts: int = 100_000) -> float:
    """``P(max_j |T_j| ≤ c)`` for a multivariate t with correlation ``corr`` and integer
    ``df`` (0 = normal), by ``scipy.stats.multivariate_t`` (Genz–Bretz quasi-Monte Carlo,
    fixed seed); a singular ``corr`` is first moved to ``(corr + 1e-4 I)/(1 + 1e-4)``."""
    k = corr.shape[0]
    if k == 1:
        return float(1 - 2 * (stats.t.sf(c, df) if df > 0 else stats.norm.sf(c)))
    if c <= 0:
        return 0.0
    if np.linalg.eigvalsh(corr)[0] < 1e-6:
        corr = (corr + 1e-4 * np.eye(k)) / (1 + 1e-4)
    up, lo = np.full(k, c), np.full(k, -c)
    if df == 0:
        return float(stats.multivariate_normal.cdf(up, mean=np.zeros(k), cov=corr, lower_limit=lo,
                                                   maxpts=maxpts * k, abseps=1e-6, releps=0,
                                                   rng=np.random.default_rng(seed)))
    return float(stats.multivariate_t.cdf(up, shape=corr, df=df, lower_limit=lo, maxpts=maxpts * k,
                                          random_state=np.random.default_rng(seed)))


def _f_sf(x: np.ndarray, d1: float, d2: np.ndarray) -> np.ndarray:
    """``P(F_{d1, d2} > x)`` with ``d2 = ∞`` as ``P(χ²_{d1} > d1 x)`` (scipy's F gives NaN)."""
    x, d2 = np.broadcast_arrays(np.asarray(x, float), np.asarray(d2, float))
    fin = np.isfinite(d2)
    return np.where(fin, stats.f.sf(x, d1, np.where(fin, d2, 1.0)), stats.chi2.sf(x * d1, d1))


def _f_ppf(q: float, d1: float, d2: np.ndarray) -> np.ndarray:
    d2 = np.asarray(d2, float)
    fin = np.isfinite(d2)
    return np.where(fin, stats.f.ppf(q, d1, np.where(fin, d2, 1.0)), stats.chi2.ppf(q, d1) / d1)


def _pdunnx(x: np.ndarray, k: int, df: np.ndarray) -> np.ndarray:
    twt = (k - 1) / k
    kk = (1 + np.sqrt(1 + 8 * k)) / 2
    tuk = stats.studentized_range.cdf(np.sqrt(2) * x, kk, df)
    sid = (1 - _f_sf(x ** 2, 1, df)) ** k
    return twt * tuk + (1 - twt) * sid


def adjust_p(t: np.ndarray, df: np.ndarray, adjust: str, *, fam_size: int,
             corr: np.ndarray | None = None, scheffe_rank: int | None = None) -> np.ndarray:
    """Adjusted two-sided p-values of one family (see the module docstring)."""
    t = np.asarray(t, float)
    df = np.where(np.isnan(df), np.inf, np.asarray(df, float))
    p = 2 * stats.t.sf(np.abs(t), df)
    m = t.size
    if adjust == "none":
        return p
    if adjust in _P_ADJUST:
        from statsmodels.stats.multitest import multipletests
        ok = ~np.isnan(p)
        out = np.full(m, np.nan)
        out[ok] = multipletests(p[ok], method=_P_ADJUST[adjust])[1]
        return out
    if adjust == "sidak":
        return 1 - (1 - p) ** m
    if adjust == "tukey":
        return stats.studentized_range.sf(np.sqrt(2) * np.abs(t), fam_size, df)
    if adjust == "scheffe":
        r = int(scheffe_rank)
        return _f_sf(t ** 2 / r, r, df)
    if adjust == "dunnettx":
        return 1 - _pdunnx(np.abs(t), m, df)
    if adjust == "mvt":
        if corr is None:
            raise EmmError("adjust='mvt' needs the correlation of the contrasts")
        d = fix_df(df)
        return np.array([1 - pmvt_max(abs(ti), corr, int(di)) for ti, di in zip(t, d)])
    raise EmmError(f"unknown adjust {adjust!r}")


def critical_values(level: float, df: np.ndarray, adjust: str, *, fam_size: int,
                    corr: np.ndarray | None = None, scheffe_rank: int | None = None) -> np.ndarray:
    """Two-sided critical values of one family's simultaneous intervals."""
    df = np.where(np.isnan(df), np.inf, np.asarray(df, float))
    m = df.size
    if adjust in _P_ADJUST and adjust != "bonferroni":
        adjust = "bonferroni"
    if adjust == "none":
        return stats.t.ppf(0.5 + level / 2, df)
    if adjust == "bonferroni":
        return stats.t.ppf(1 - (1 - level) / m / 2, df)
    if adjust == "sidak":
        return stats.t.ppf(1 - (1 - level ** (1 / m)) / 2, df)
    if adjust == "tukey":
        # one quantile per distinct df (to 9 significant digits: the quantile moves by
        # ~1e-4 per unit df, so this is exact to ~1e-11); scipy's ppf is a slow root search
        key = np.array([float(f"{d:.9g}") for d in df])
        uniq = np.unique(key)
        if uniq.size <= 6 or not np.all(np.isfinite(uniq)):
            cache = {u: float(stats.studentized_range.ppf(level, fam_size, u)) for u in uniq}
            return np.array([cache[k] for k in key]) / np.sqrt(2)
        # many distinct df: the quantile is smooth in 1/ν; interpolate it through 8
        # Chebyshev nodes on [1/ν_max, 1/ν_min] (exact to ~1e-10 here)
        a, b = 1 / uniq.max(), 1 / uniq.min()
        x = (a + b) / 2 + (b - a) / 2 * np.cos(np.pi * (np.arange(8) + 0.5) / 8)
        qv = np.array([float(stats.studentized_range.ppf(level, fam_size, 1 / xi)) for xi in x])
        cheb = np.polynomial.Chebyshev.fit(x, qv, 7, domain=[a, b])
        return cheb(1 / df) / np.sqrt(2)
    if adjust == "scheffe":
        r = int(scheffe_rank)
        return np.sqrt(r * _f_ppf(level, r, df))
    if adjust == "dunnettx":
        out = []
        for d in df:
            lo = stats.t.ppf(0.5 + level / 2, d)
            hi = stats.t.ppf(1 - (1 - level) / m / 2, d) + 1
            out.append(optimize.brentq(lambda x: _pdunnx(np.array([x]), m, np.array([d]))[0] - level,
                                       lo, hi, xtol=1e-10))
        return np.asarray(out)
    if adjust == "mvt":
        d = fix_df(df)
        out = {}
        for di in set(d.tolist()):
            lo = stats.t.ppf(0.5 + level / 2, di if di > 0 else np.inf)
            hi = stats.t.ppf(1 - (1 - level) / m / 2, di if di > 0 else np.inf) + 0.5
            out[di] = optimize.brentq(lambda x: pmvt_max(x, corr, int(di), maxpts=100_000) - level,
                                      lo, hi, xtol=1e-5)
        return np.array([out[di] for di in d.tolist()])
    raise EmmError(f"unknown adjust {adjust!r}")
