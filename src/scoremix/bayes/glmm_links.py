r"""Numerically stable log-likelihood pieces of every ``glmer`` link, in PyTensor and NumPy.

For a binomial cell with summed successes :math:`K` and failures :math:`F` the
log-likelihood is :math:`K\log\mu + F\log(1-\mu)`, written on :math:`\eta` without forming
:math:`\mu`:

=========  ============================  ==================================
link       :math:`\log\mu`               :math:`\log(1-\mu)`
=========  ============================  ==================================
logit      :math:`-\mathrm{softplus}(-\eta)`  :math:`-\mathrm{softplus}(\eta)`
probit     :math:`\log\Phi(\eta)`        :math:`\log\Phi(-\eta)`
cloglog    :math:`\log(1-e^{-e^\eta})`   :math:`-e^\eta`
log        :math:`\eta`                  :math:`\log(1-e^{\eta})` (needs :math:`\eta<0`)
=========  ============================  ==================================

Poisson (summed :math:`Y`, total weight :math:`W`): :math:`Y\log\mu - W\mu` with
:math:`\mu = e^\eta` (log), :math:`\eta` (identity, needs :math:`\eta>0`) or
:math:`\eta^2` (sqrt).
"""

from __future__ import annotations

import numpy as np
from scipy import special

__all__ = ["log_ndtr_graph", "loglik_graph", "loglik_np", "linkinv_np", "linkfun_np"]


def log_ndtr_graph(x):
    r"""Accurate :math:`\log\Phi(x)` in PyTensor: ``log1p(-erfc(x/√2)/2)`` for ``x > -1``,
    ``log(erfcx(-x/√2)/2) - x²/2`` below (each branch sees only its clipped inputs, so
    neither produces a NaN gradient)."""
    import pytensor.tensor as pt

    r2 = np.sqrt(2.0)
    xa = pt.maximum(x, -1.0)
    xb = pt.minimum(x, -1.0)
    upper = pt.log1p(-0.5 * pt.erfc(xa / r2))
    lower = pt.log(0.5 * pt.erfcx(-xb / r2)) - 0.5 * xb**2
    return pt.switch(pt.gt(x, -1.0), upper, lower)


def loglik_graph(eta, k, f, family: str, link: str):
    """PyTensor ``Σ_c`` log-likelihood of the cells (constants dropped)."""
    import pytensor.tensor as pt

    if family == "binomial":
        if link == "logit":
            lm, l1m = -pt.softplus(-eta), -pt.softplus(eta)
        elif link == "probit":
            lm, l1m = log_ndtr_graph(eta), log_ndtr_graph(-eta)
        elif link == "cloglog":
            e = pt.exp(pt.minimum(eta, 30.0))
            lm, l1m = pt.log1mexp(-e), -e
        elif link == "log":
            lm, l1m = eta, pt.log1mexp(pt.minimum(eta, -1e-12))
            # η ≥ 0 is outside the model (μ > 1): -inf makes NUTS reject the step
            l1m = pt.switch(pt.lt(eta, 0.0), l1m, -np.inf)
        else:  # pragma: no cover - checked by make_family
            raise ValueError(link)
        return (pt.switch(pt.gt(k, 0), k * lm, 0.0) + pt.switch(pt.gt(f, 0), f * l1m, 0.0)).sum()
    if link == "log":
        return (k * eta - f * pt.exp(eta)).sum()
    if link == "identity":
        return pt.switch(pt.gt(eta, 0.0), pt.switch(pt.gt(k, 0), k * pt.log(eta), 0.0) - f * eta, -np.inf).sum()
    if link == "sqrt":
        return (pt.switch(pt.gt(k, 0), 2.0 * k * pt.log(pt.abs(eta)), 0.0) - f * eta**2).sum()
    raise ValueError(link)  # pragma: no cover


def _log_ndtr(x):
    return special.log_ndtr(x)


def loglik_np(eta: np.ndarray, k: np.ndarray, f: np.ndarray, family: str, link: str) -> np.ndarray:
    """Elementwise ``K log μ + F log(1−μ)`` (binomial) / ``Y log μ − W μ`` (Poisson), no
    constants; ``eta``, ``k``, ``f`` broadcast."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if family == "binomial":
            if link == "logit":
                lm, l1m = -np.logaddexp(0.0, -eta), -np.logaddexp(0.0, eta)
            elif link == "probit":
                lm, l1m = _log_ndtr(eta), _log_ndtr(-eta)
            elif link == "cloglog":
                e = np.exp(np.minimum(eta, 30.0))
                lm, l1m = np.log(-np.expm1(-e)), -e
            else:
                lm = eta
                l1m = np.where(eta < 0, np.log(-np.expm1(np.minimum(eta, -1e-300))), -np.inf)
            return np.where(k > 0, k * lm, 0.0) + np.where(f > 0, f * l1m, 0.0)
        if link == "log":
            mu, lmu = np.exp(eta), eta
        elif link == "identity":
            mu = eta
            lmu = np.where(eta > 0, np.log(np.where(eta > 0, eta, 1.0)), -np.inf)
        else:
            mu, lmu = eta**2, 2 * np.log(np.abs(eta))
        out = np.where(k > 0, k * lmu, 0.0) - f * mu
        if link == "identity":
            out = np.where(eta > 0, out, -np.inf)
        return out


def linkinv_np(eta: np.ndarray, link: str) -> np.ndarray:
    """``μ = g^{-1}(η)``."""
    with np.errstate(over="ignore"):
        if link == "logit":
            return special.expit(eta)
        if link == "probit":
            return special.ndtr(eta)
        if link == "cloglog":
            return -np.expm1(-np.exp(eta))
        if link == "log":
            return np.exp(eta)
        if link == "identity":
            return np.asarray(eta, float)
        if link == "sqrt":
            return np.asarray(eta, float) ** 2
    raise ValueError(link)  # pragma: no cover


def linkfun_np(mu: np.ndarray, link: str) -> np.ndarray:
    """``η = g(μ)``."""
    mu = np.asarray(mu, float)
    if link == "logit":
        return special.logit(mu)
    if link == "probit":
        return special.ndtri(mu)
    if link == "cloglog":
        return np.log(-np.log1p(-mu))
    if link == "log":
        return np.log(mu)
    if link == "identity":
        return mu
    if link == "sqrt":
        return np.sqrt(mu)
    raise ValueError(link)  # pragma: no cover
