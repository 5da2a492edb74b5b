r"""``scoremix.glmer``: fit a binomial or Poisson GLMM from an lme4 formula.

Model: :math:`\eta = o + X\beta + Zb`, :math:`b \sim N(0, \Lambda_\theta\Lambda_\theta')`,
:math:`g(E[y \mid b]) = \eta` (Bates et al. 2015, *J. Stat. Softw.* 67(1), §§ 5–6 of the
lme4 GLMM vignette).  Estimation maximises the Laplace (``nAGQ = 1``) or adaptive
Gauss–Hermite (``nAGQ > 1``) approximation of the marginal likelihood
(:mod:`scoremix.glmm.pirls`, :mod:`scoremix.glmm.fit`).

**Collapsing.** A binomial model of 0/1 rows with unit weights depends on the data only
through the successes and trials of each distinct row of ``(X, Z, offset)``: such rows are
collapsed into one ``cbind(k, m - k)`` row per cell before fitting (``collapse="auto"``).
The fit (estimates, conditional modes, Hessian) is identical; the log-likelihood differs by
:math:`\sum_c \log\binom{m_c}{k_c}` (Laplace) or by the saturated deviance of the cells
(``nAGQ > 1``), which is added back so that ``logLik`` is the one of the 0/1 rows, as lme4
reports it.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd
from scipy import special

from scoremix.glmm.errors import GlmmUnsupportedError
from scoremix.glmm.family import Family, make_family
from scoremix.glmm.fit import GlmmControl, fit_glmm
from scoremix.glmm.pirls import GlmmData
from scoremix.glmm.response import N_COL, prepare_response
from scoremix.glmm.result import GlmerResult
from scoremix.lme.errors import ConvergenceWarning, SINGULAR_FIT_MESSAGE, SingularFitWarning
from scoremix.lme.relcov import theta_to_T
from scoremix.lme.spec import ModelSpec, RandomTerm

__all__ = ["glmer", "GLMER_BACKENDS", "glmm_arrays", "collapse_cells"]

GLMER_BACKENDS = ("native", "lme4")


def _spec_for(formula: str, data: pd.DataFrame, family: Family, weights, offset, na_action,
              contrasts) -> tuple[ModelSpec, str, bool]:
    from scoremix.lme.input_checks import check_model_input
    from scoremix.lme.model_frame import build_model_spec
    pr = prepare_response(formula, data, family, weights is not None)
    w = weights
    if pr.cbind:
        base = pr.data[N_COL].to_numpy(float)
        if weights is not None:
            wu = (pr.data[weights].to_numpy(float) if isinstance(weights, str)
                  else np.asarray(weights, float))
            base = base * wu
        w = base
    check_model_input(pr.formula, pr.data)
    spec = build_model_spec(pr.formula, pr.data, weights=w, na_action=na_action,
                            contrasts=contrasts, offset=offset, glmm=True)
    return spec, pr.lhs, pr.cbind


def glmm_arrays(spec: ModelSpec, family: Family, cbind: bool) -> GlmmData:
    """The :class:`GlmmData` of a model frame built for a GLMM."""
    off = spec.offset if spec.offset is not None else np.zeros(spec.n)
    y = spec.y + off          # the Gaussian frame stores y - offset
    wt = spec.weights if spec.weights is not None else np.ones(spec.n)
    # R's binomial()$aic: m = n (cbind totals) when any n > 1, else the prior weights
    trials = wt
    if cbind and spec.weights is not None:
        tot = spec.data[N_COL].to_numpy(float) if N_COL in spec.data.columns else wt
        trials = tot if np.any(tot > 1) else wt
    return GlmmData(y, spec.X, spec.terms, family, wt, trials, off)


def collapse_cells(d: GlmmData) -> tuple[GlmmData, np.ndarray, float] | None:
    """Collapse 0/1 binomial rows with unit weights into one row per distinct
    ``(X, Z, offset)`` cell: ``(collapsed data, row → cell index, log-likelihood constant
    Σ log C(m_c, k_c))``; ``None`` when the rows are not 0/1 with unit weights or nothing
    collapses."""
    if d.family.name != "binomial" or not np.all(d.wt == 1) or not np.all(np.isin(d.y, (0.0, 1.0))):
        return None
    cols = [d.X, d.offset[:, None]]
    for t in d.terms:
        cols.append(np.asarray(t.codes, float)[:, None])
        cols.append(np.asarray(t.X, float))
    key = pd.DataFrame(np.hstack(cols))
    inv = key.groupby(list(key.columns), sort=False).ngroup().to_numpy()   # hashing, O(n)
    nc = int(inv.max()) + 1 if len(inv) else 0
    first = np.full(nc, -1)
    first[inv[::-1]] = np.arange(len(inv))[::-1]
    if nc > 0.8 * d.n:
        return None
    m = np.bincount(inv, minlength=nc).astype(float)
    k = np.bincount(inv, weights=d.y, minlength=nc)
    terms = [RandomTerm(group=t.group, group_factor=t.group_factor, term_names=t.term_names,
                        codes=np.asarray(t.codes)[first], levels=t.levels,
                        X=np.asarray(t.X)[first], structure=t.structure) for t in d.terms]
    cd = GlmmData(k / m, d.X[first], terms, d.family, m, m, d.offset[first])
    const = float(np.sum(special.gammaln(m + 1) - special.gammaln(k + 1) - special.gammaln(m - k + 1)))
    return cd, inv, const


def _saturated_dev(y: np.ndarray, m: np.ndarray) -> float:
    """``2 Σ [k log(k/m) + (m-k) log((m-k)/m)]``: the deviance-residual sum of a cell's
    saturated model, the difference between the cell and 0/1-row deviance residuals."""
    k = y * m
    return float(-2 * np.sum(special.xlogy(k, y) + special.xlogy(m - k, 1 - y)))


def glmer(formula: str, data: pd.DataFrame, family: str | Family = "binomial", *,
          link: str | None = None, weights: np.ndarray | pd.Series | str | None = None,
          offset: np.ndarray | pd.Series | str | None = None, nAGQ: int = 1,
          control: GlmmControl | dict | None = None, backend: str = "native",
          na_action: str = "omit", contrasts: dict[str, str] | None = None,
          collapse: str | bool = "auto", start: dict | None = None) -> GlmerResult:
    """Fit a generalised linear mixed model like ``lme4::glmer``.

    Parameters
    ----------
    formula:
        lme4 formula; the response is 0/1, logical, a two-level factor,
        ``cbind(successes, failures)``, a proportion with ``weights=`` the trials
        (binomial), or counts (Poisson).
    data:
        the data frame.
    family, link:
        ``"binomial"`` (links logit (default), probit, cloglog, log) or ``"poisson"``
        (log (default), identity, sqrt).
    weights, offset:
        prior weights and a known part of the linear predictor (column names or arrays);
        ``offset()`` terms in the formula are understood too.
    nAGQ:
        0 (lme4's fast first stage only), 1 (Laplace, default) or the number of adaptive
        Gauss–Hermite points (``> 1``: one scalar random-effects term only, as lme4).
    control:
        :class:`scoremix.glmm.fit.GlmmControl` fields (native backend); with
        ``backend="lme4"``: ``None`` (lme4's defaults) or ``"tight"`` (converged PIRLS,
        ``tolPwrss = 1e-12``, and a tight bobyqa).
    backend:
        ``"native"`` or ``"lme4"`` (R through rpy2, same result type).
    collapse:
        ``"auto"``/``True``: fit 0/1 binomial rows as per-cell counts (identical result,
        faster); ``False``: fit the rows as given.
    start:
        ``{"theta": …, "fixef": …}`` starting values.

    Returns
    -------
    GlmerResult

    Raises
    ------
    FamilyError, GlmmResponseError, GlmmUnsupportedError, FormulaError
    """
    fam = make_family(family, link)
    if backend not in GLMER_BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {GLMER_BACKENDS}")
    if not isinstance(nAGQ, (int, np.integer)) or nAGQ < 0 or nAGQ > 100:
        raise GlmmUnsupportedError(f"nAGQ must be a whole number from 0 to 100, got {nAGQ!r}")
    spec, lhs, cbind = _spec_for(formula, data, fam, weights, offset, na_action, contrasts)
    if not spec.terms:
        raise GlmmUnsupportedError("no random effects terms specified in formula "
                                   "(use a GLM, e.g. statsmodels, for a model without them)")
    if nAGQ > 1 and not (len(spec.terms) == 1 and spec.terms[0].p == 1):
        raise GlmmUnsupportedError(
            "nAGQ > 1 is only available for models with a single, scalar random-effects term "
            f"(this model has {len(spec.terms)} term(s) with {[t.p for t in spec.terms]} columns); "
            "use nAGQ=1 (Laplace)")
    if backend == "lme4":
        from scoremix.glmm.lme4_backend import fit_lme4
        return fit_lme4(spec, fam, formula, data, weights=weights, offset=offset, nAGQ=nAGQ,
                        lhs=lhs, tight=control == "tight")
    full = glmm_arrays(spec, fam, cbind)
    work, inv, const = full, None, 0.0
    if collapse not in (False, "no", None):
        c = collapse_cells(full)
        if c is not None:
            work, inv, const = c
    fit = fit_glmm(work, nAGQ=nAGQ, control=control, start=start)
    crit = fit.criterion
    if inv is not None:
        # back to the 0/1 rows' likelihood
        crit = crit + 2 * const if nAGQ <= 1 else crit + _saturated_dev(work.y, work.wt)
    st = fit.state
    mu_rows = full.family.link.linkinv(
        full.offset + full.X @ fit.beta + full.Z @ (full.lambda_matrix(fit.theta) @ st.u))
    mu_rows = full.family.valid_mu(mu_rows)
    deviance = float(np.sum(full.family.dev_resid(full.y, mu_rows, full.wt)))
    # conditional covariances of b: Λ (L L')^{-1} Λ' blocks per level
    condvar = _condvar(work, fit.theta, st.L)
    names = [nm for t in spec.terms for nm in t.theta_names()]
    res = GlmerResult(
        spec, fam, backend="native", nAGQ=nAGQ,
        fixef=pd.Series(fit.beta, index=spec.fixef_names),
        vcov=pd.DataFrame(fit.vcov, index=spec.fixef_names, columns=spec.fixef_names),
        theta=pd.Series(fit.theta, index=names), criterion=crit, deviance=deviance,
        u=st.u, condvar=condvar, formula=formula, response_text=lhs, data=full,
        messages=fit.messages, fit_info={**fit.info, "collapsed_rows": None if inv is None
                                         else int(work.n)}, nobs=spec.n)
    res.work_data = work      # the (collapsed) arrays fitted, for profiles
    _warn(res)
    return res


def _condvar(d: GlmmData, theta: np.ndarray, L) -> list[np.ndarray]:
    """lme4's ``postVar``: per term and level the ``p_k × p_k`` block of
    ``Λ (LL')^{-1} Λ'``."""
    T = theta_to_T(theta, d.term_p)
    return [np.einsum("ab,lbc,dc->lad", Tk, S, Tk) for Tk, S in zip(T, d.ainv_blocks(L))]


def _warn(res: GlmerResult) -> None:
    if res.singular:
        warnings.warn(SINGULAR_FIT_MESSAGE, SingularFitWarning, stacklevel=3)
    for m in res.messages:
        warnings.warn(m, ConvergenceWarning, stacklevel=3)
