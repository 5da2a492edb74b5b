r"""What the post-fit layer needs from a fitted model: :math:`\hat\beta`, its covariance,
degrees of freedom for a linear function :math:`\ell'\beta`, the link, and the model's
design (to build a reference grid).

Degrees of freedom (emmeans's ``lmer.df``) for a linear mixed model
-------------------------------------------------------------------
* ``"satterthwaite"``: :math:`\nu = 2(\ell'V\ell)^2 / (g'Ag)`, :math:`g_i = \ell' J_i \ell`
  (lmerTest's ``contest1D``; :mod:`scoremix.lme.ddf`), standard errors from
  :math:`V = \widehat{\mathrm{Var}}(\hat\beta)`;
* ``"kenward-roger"``: pbkrtest's ``Lb_ddf`` with the adjusted covariance :math:`\Phi_A`,
  which also gives the standard errors (:mod:`scoremix.lme.kenward_roger`; REML fits);
* ``"asymptotic"``: :math:`\nu = \infty` (z tests).

A model on a link scale (a GLMM) has :math:`\nu = \infty` and a :class:`~scoremix.emm.links.Link`.
A transformation fit (``lmer(..., transform="monotone")``, a ``transform`` attribute) is
summarised on its latent scale :math:`h(s) = X\beta + Zb + \varepsilon` with
:math:`\nu = \infty` (z tests; its covariance includes the transform's parameters, which
the LMM's Satterthwaite and Kenward–Roger derivatives do not describe).

Plugging in another model class
-------------------------------
Any object with ``fixef`` (a pandas Series), ``vcov`` (DataFrame), ``spec`` (a
:class:`~scoremix.lme.spec.ModelSpec` with ``data``, ``fixed_design``, ``fixed_terms``,
``formula``) and, for a GLMM, ``family`` (``link``, ``linkinv``, ``mu_eta``) works;
it may also define ``emm_df(L, method) -> ndarray`` to supply its own degrees of freedom.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np

from scoremix.emm.errors import EmmError
from scoremix.emm.links import IDENTITY, Link, link_of

__all__ = ["FitBasis", "fit_basis", "LMER_DF"]

LMER_DF = ("satterthwaite", "kenward-roger", "asymptotic")


@dataclass
class FitBasis:
    """``β̂``, the covariance used for standard errors, the df function of one row
    ``ℓ`` and the link.  ``mode`` is the df method actually used."""

    beta: np.ndarray
    V: np.ndarray
    names: list[str]
    df_row: Callable[[np.ndarray], float]
    link: Link
    mode: str
    spec: object

    def df(self, L: np.ndarray) -> np.ndarray:
        """Degrees of freedom of every row of ``L`` (``NaN`` for an all-zero row)."""
        L = np.atleast_2d(L)
        out = np.full(L.shape[0], np.nan)
        for i, row in enumerate(L):
            if np.any(row != 0):
                out[i] = self.df_row(row)
        return out


def _normalize_df(lmer_df: str) -> str:
    key = str(lmer_df).lower().replace("_", "-").replace(" ", "-")
    table = {"satterthwaite": "satterthwaite", "satt": "satterthwaite",
             "kenward-roger": "kenward-roger", "kr": "kenward-roger", "kenwardroger": "kenward-roger",
             "asymptotic": "asymptotic", "asymp": "asymptotic", "inf": "asymptotic"}
    if key not in table:
        raise EmmError(f"unknown lmer_df {lmer_df!r}; choose one of {LMER_DF}")
    return table[key]


def fit_basis(fit: object, lmer_df: str = "satterthwaite") -> FitBasis:
    """The :class:`FitBasis` of a fit for the df method ``lmer_df``."""
    mode = _normalize_df(lmer_df)
    spec = getattr(fit, "spec", None)
    if spec is None or getattr(spec, "fixed_design", None) is None:
        raise EmmError("marginal means need the fitted model's spec (a fit from scoremix.lmer, or "
                       "LmerResult.from_dict(d, spec))")
    if getattr(spec, "dropped_fixef", None):
        raise EmmError(f"the model is rank deficient (dropped columns {spec.dropped_fixef}); "
                       "marginal means of rank-deficient fits (emmeans's estimability check) are "
                       "not supported: remove the empty cells or the redundant terms")
    beta = np.asarray(fit.fixef, dtype=float)
    names = list(fit.fixef.index)
    V = np.asarray(fit.vcov, dtype=float)
    link = link_of(fit)
    own = getattr(fit, "emm_df", None)
    if own is not None:
        return FitBasis(beta, V, names, lambda row: float(np.asarray(own(row[None, :], mode))[0]),
                        link, mode, spec)
    if getattr(fit, "transform", None) is not None and mode != "asymptotic":
        # a transformation fit: vcov includes the transform's parameters and the LMM's
        # Satterthwaite/KR derivatives do not describe its likelihood, so z tests (documented)
        warnings.warn(f"lmer_df={mode!r} is not available for a transformation fit; using asymptotic "
                      "(z) tests on the latent scale", UserWarning, stacklevel=3)
        return FitBasis(beta, V, names, lambda row: np.inf, link, "asymptotic", spec)
    if link is not IDENTITY or mode == "asymptotic" or getattr(fit, "family", None) is not None:
        return FitBasis(beta, V, names, lambda row: np.inf, link,
                        "asymptotic" if link is not IDENTITY else mode, spec)
    if mode == "kenward-roger":
        from scoremix.lme.kenward_roger import kr_ddf_1d, kr_info
        kr = kr_info(fit)
        return FitBasis(beta, kr.vcov_adj, names, lambda row: kr_ddf_1d(kr, row), link, mode, spec)
    from scoremix.lme.ddf import satterthwaite_info
    info = satterthwaite_info(fit)

    def satt(row: np.ndarray) -> float:
        var = float(row @ info.vcov_beta @ row)
        g = np.array([float(row @ J @ row) for J in info.jac])
        return 2 * var ** 2 / float(g @ info.vcov_varpar @ g)
    return FitBasis(beta, V, names, satt, link, mode, spec)
