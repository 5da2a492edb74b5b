r"""Exponential families and links of the generalised linear mixed model.

For the binomial family the response is a proportion :math:`y_i = k_i/m_i` with prior
weight :math:`m_i` (the number of trials; 1 for a 0/1 response), :math:`V(\mu) = \mu(1-\mu)`;
for the Poisson family :math:`V(\mu) = \mu`.  Links :math:`\eta = g(\mu)`: logit, probit,
cloglog (:math:`\log(-\log(1-\mu))`), log; identity and sqrt for the Poisson family.

``dev_resid`` are R's ``family()$dev.resids`` (the unit deviances times the prior weights)
and ``minus2_loglik`` is R's ``family()$aic`` without its ``2p``: the quantity lme4's
Laplace criterion adds (``glmResp::aic``):

* binomial: :math:`-2\sum_i (w_i/m_i)\log\binom{m_i}{m_i y_i}\mu_i^{m_iy_i}(1-\mu_i)^{m_i(1-y_i)}`;
* Poisson: :math:`-2\sum_i w_i \log\{e^{-\mu_i}\mu_i^{y_i}/y_i!\}`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import special

from scoremix.glmm.errors import FamilyError

__all__ = ["Link", "Family", "make_family", "LINKS"]

_EPS = np.finfo(float).eps
_THRESH = 30.0
_MTHRESH = -30.0
_INVEPS = 1 / _EPS


@dataclass(frozen=True)
class Link:
    """A link ``η = g(μ)``: ``linkfun``, ``linkinv`` and ``mu_eta = dμ/dη`` (R's
    ``make.link``, with its clamping)."""

    name: str
    linkfun: Callable[[np.ndarray], np.ndarray]
    linkinv: Callable[[np.ndarray], np.ndarray]
    mu_eta: Callable[[np.ndarray], np.ndarray]


def _logit_inv(eta):
    return special.expit(eta)


def _logit_mu_eta(eta):
    e = np.exp(-np.abs(eta))
    return np.maximum(e / (1 + e) ** 2, _EPS)


_PROBIT_THRESH = -float(special.ndtri(_EPS))


def _probit_inv(eta):
    return special.ndtr(np.clip(eta, -_PROBIT_THRESH, _PROBIT_THRESH))


def _probit_mu_eta(eta):
    return np.maximum(np.exp(-0.5 * np.square(eta)) / np.sqrt(2 * np.pi), _EPS)


def _cloglog_inv(eta):
    return np.clip(-np.expm1(-np.exp(eta)), _EPS, 1 - _EPS)


def _cloglog_mu_eta(eta):
    eta = np.minimum(eta, 700)
    return np.maximum(np.exp(eta) * np.exp(-np.exp(eta)), _EPS)


LINKS: dict[str, Link] = {
    "logit": Link("logit", special.logit, _logit_inv, _logit_mu_eta),
    "probit": Link("probit", special.ndtri, _probit_inv, _probit_mu_eta),
    "cloglog": Link("cloglog", lambda mu: np.log(-np.log1p(-mu)), _cloglog_inv, _cloglog_mu_eta),
    "log": Link("log", np.log, lambda eta: np.maximum(np.exp(eta), _EPS),
                lambda eta: np.maximum(np.exp(eta), _EPS)),
    "identity": Link("identity", lambda mu: mu, lambda eta: eta, lambda eta: np.ones_like(eta)),
    "sqrt": Link("sqrt", np.sqrt, lambda eta: eta ** 2, lambda eta: 2 * eta),
}

_FAMILY_LINKS = {"binomial": ("logit", "probit", "cloglog", "log"),
                 "poisson": ("log", "identity", "sqrt")}


def _ylogy(y: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """``y log(y/μ)`` with ``0 log 0 = 0``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(y > 0, y * np.log(y / mu), 0.0)


@dataclass(frozen=True)
class Family:
    """A GLM family with its link (R's ``binomial(link = "probit")`` etc.)."""

    name: str
    link: Link

    def variance(self, mu: np.ndarray) -> np.ndarray:
        return mu * (1 - mu) if self.name == "binomial" else mu

    def dev_resid(self, y: np.ndarray, mu: np.ndarray, wt: np.ndarray) -> np.ndarray:
        """R's ``dev.resids(y, mu, wt)``."""
        if self.name == "binomial":
            return 2 * wt * (_ylogy(y, mu) + _ylogy(1 - y, 1 - mu))
        return 2 * wt * (_ylogy(y, mu) - (y - mu))

    def minus2_loglik(self, y: np.ndarray, mu: np.ndarray, wt: np.ndarray,
                      n: np.ndarray) -> np.ndarray:
        """Per observation ``-2 log f(y | μ)`` as R's ``family()$aic`` adds it up
        (``n``: the binomial number of trials ``m``)."""
        if self.name == "binomial":
            m = n
            k = np.round(m * y)
            ll = (special.gammaln(m + 1) - special.gammaln(k + 1) - special.gammaln(m - k + 1)
                  + special.xlogy(k, mu) + special.xlog1py(m - k, -mu))
            return -2 * np.where(m > 0, wt / np.where(m > 0, m, 1), 0.0) * ll
        ll = special.xlogy(y, mu) - mu - special.gammaln(y + 1)
        return -2 * wt * ll

    def mustart(self, y: np.ndarray, wt: np.ndarray) -> np.ndarray:
        """R's ``family()$initialize`` starting means."""
        if self.name == "binomial":
            return (wt * y + 0.5) / (wt + 1)
        return y + 0.1

    def valid_mu(self, mu: np.ndarray) -> np.ndarray:
        if self.name == "binomial":
            return np.clip(mu, _EPS, 1 - _EPS)
        return np.maximum(mu, _EPS)

    def __str__(self) -> str:
        return f"{self.name}  ( {self.link.name} )"


def make_family(family: str | Family, link: str | None = None) -> Family:
    """``make_family("binomial", "probit")``; ``link=None`` is the canonical link."""
    if isinstance(family, Family):
        if link is not None and link != family.link.name:
            return make_family(family.name, link)
        return family
    name = str(family).lower()
    if name not in _FAMILY_LINKS:
        raise FamilyError(f"family {family!r} is not supported; choose 'binomial' or 'poisson' "
                          "(a Gaussian response is fitted by scoremix.lmer)")
    link = link or _FAMILY_LINKS[name][0]
    if link not in _FAMILY_LINKS[name]:
        raise FamilyError(f"link {link!r} is not available for the {name} family; choose one of "
                          f"{', '.join(_FAMILY_LINKS[name])}")
    return Family(name, LINKS[link])
