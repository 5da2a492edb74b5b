"""Likelihood-ratio tests of nested linear mixed models (lme4's ``anova(m0, m1, …)``).

REML fits are first refitted by ML with their own backend (lme4's message ``"refitting
model(s) with ML (instead of REML)"``); models are ordered by their number of parameters and
each is compared with the previous one by ``χ² = 2(ℓ_i − ℓ_{i−1})`` on
``npar_i − npar_{i−1}`` degrees of freedom.
"""

from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from scoremix.lme.api import BACKENDS, fit_spec
from scoremix.lme.result import LmerResult

__all__ = ["anova", "RefitMLWarning", "REFIT_MESSAGE"]

REFIT_MESSAGE = "refitting model(s) with ML (instead of REML)"


class RefitMLWarning(UserWarning):
    """lme4's message that REML fits were refitted with ML before a likelihood-ratio test."""


# ---------------------------------------------------------------------------------------- anova
def _refit_ml(m: LmerResult) -> LmerResult:
    spec = m.require_spec("anova's ML refit")
    backend = m.backend if m.backend in BACKENDS else "native"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit_spec(spec, REML=False, backend=backend)


def anova(*models: LmerResult, names: Sequence[str] | None = None, refit: bool = True) -> pd.DataFrame:
    """Likelihood-ratio tests of nested models, like lme4's ``anova(m0, m1, …)``.

    Parameters
    ----------
    models:
        two or more fits of the same response on the same rows.
    names:
        row names (default ``m0, m1, …`` in the order given).
    refit:
        refit REML fits with ML first (lme4's default; a
        :class:`RefitMLWarning` with lme4's message is issued).

    Returns
    -------
    pandas.DataFrame
        columns ``npar AIC BIC logLik deviance Chisq Df Pr(>Chisq)``, rows ordered by
        ``npar``.
    """
    if len(models) < 2:
        raise ValueError("anova needs at least two models")
    names = list(names) if names is not None else [f"m{i}" for i in range(len(models))]
    if len(names) != len(models):
        raise ValueError(f"{len(names)} names for {len(models)} models")
    nobs = {m.nobs for m in models}
    if len(nobs) != 1:
        raise ValueError(f"models were fitted to different numbers of rows: {sorted(nobs)}")
    ms = list(models)
    if refit and any(m.REML for m in ms):
        warnings.warn(REFIT_MESSAGE, RefitMLWarning, stacklevel=2)
        ms = [_refit_ml(m) if m.REML else m for m in ms]
    order = sorted(range(len(ms)), key=lambda i: ms[i].npar)
    rows = []
    prev = None
    for i in order:
        m = ms[i]
        dev = -2 * m.loglik
        if prev is None:
            chisq, df, pval = np.nan, np.nan, np.nan
        else:
            chisq = max(0.0, 2 * (m.loglik - prev.loglik))
            df = m.npar - prev.npar
            pval = float(stats.chi2.sf(chisq, df)) if df > 0 else np.nan
        rows.append(dict(npar=m.npar, AIC=m.aic, BIC=m.bic, logLik=m.loglik, deviance=dev,
                         Chisq=chisq, Df=df, **{"Pr(>Chisq)": pval}))
        prev = m
    return pd.DataFrame(rows, index=[names[i] for i in order])
