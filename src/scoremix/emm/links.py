r"""Link functions for marginal means on the response scale.

A fitted model whose linear predictor :math:`\eta = x'\beta` is on a link scale (a GLMM)
carries a *family* with ``link`` (name), ``linkinv`` (:math:`\mu = g^{-1}(\eta)`) and
``mu_eta`` (:math:`d\mu/d\eta`).  :func:`scoremix.emmeans` with ``type="response"``
reports :math:`g^{-1}(\hat\eta)` with the delta-method standard error
:math:`|d\mu/d\eta|\,\mathrm{SE}(\hat\eta)` and back-transforms the link-scale interval
(emmeans's ``regrid = "none"`` summary).  A linear mixed model has the identity link.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import special, stats

__all__ = ["Link", "IDENTITY", "LOGIT", "PROBIT", "LOG", "CLOGLOG", "link_of"]


@dataclass(frozen=True)
class Link:
    """``g``: name, inverse and derivative of the inverse (R's ``family()$linkinv``,
    ``$mu.eta``); ``response_name`` is emmeans's column for response-scale means and
    ``ratio_name`` its column for back-transformed contrasts (log and logit links only)."""

    link: str
    linkinv: Callable[[np.ndarray], np.ndarray]
    mu_eta: Callable[[np.ndarray], np.ndarray]
    response_name: str = "response"
    ratio_name: str | None = None


IDENTITY = Link("identity", lambda e: np.asarray(e, float), lambda e: np.ones_like(np.asarray(e, float)))
LOGIT = Link("logit", special.expit, lambda e: special.expit(e) * (1 - special.expit(e)), "prob",
             "odds.ratio")
PROBIT = Link("probit", stats.norm.cdf, stats.norm.pdf, "prob")
LOG = Link("log", np.exp, np.exp, "rate", "ratio")
CLOGLOG = Link("cloglog", lambda e: -np.expm1(-np.exp(e)), lambda e: np.exp(e - np.exp(e)), "prob")

_BY_NAME = {lk.link: lk for lk in (IDENTITY, LOGIT, PROBIT, LOG, CLOGLOG)}


def link_of(fit: object) -> Link:
    """The link of a fit: its ``family`` attribute (an object with ``link``,
    ``linkinv``, ``mu_eta``; an object whose ``link`` has ``name``, ``linkinv`` and
    ``mu_eta``, as :class:`scoremix.glmm.Family`; or a link name), identity when it has
    none (an LMM)."""
    fam = getattr(fit, "family", None)
    if fam is None:
        return IDENTITY
    if isinstance(fam, Link):
        return fam
    if isinstance(fam, str):
        if fam not in _BY_NAME:
            raise ValueError(f"unknown link {fam!r}; known: {sorted(_BY_NAME)}")
        return _BY_NAME[fam]
    lk = getattr(fam, "link", "custom")
    if hasattr(lk, "linkinv") and hasattr(lk, "mu_eta"):
        # a family whose ``link`` is itself a link object (scoremix.glmm's Family)
        fam, lk = lk, getattr(lk, "name", getattr(lk, "link", "custom"))
    name = str(lk)
    inv = getattr(fam, "linkinv", None)
    mu_eta = getattr(fam, "mu_eta", None)
    if inv is None or mu_eta is None:
        if name in _BY_NAME:
            return _BY_NAME[name]
        raise ValueError("the fit's family needs linkinv and mu_eta (or a known link name)")
    base = _BY_NAME.get(name)
    return Link(name, inv, mu_eta, base.response_name if base else "response",
                base.ratio_name if base else None)
