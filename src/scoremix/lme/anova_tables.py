"""F tests of fixed-effect terms (lmerTest's ``anova(m, type = …)``) and likelihood-ratio
tests of random-effect terms (lmerTest's ``ranova``).

Every row of the F table tests ``L_t β = 0`` for one term ``t`` with the hypothesis matrix
``L_t`` lmerTest builds (``X`` the fixed-effects matrix, ``term(j)`` the term of column
``j``):

* **type I** (sequential): rows of ``t(doolittle(X'X)$L)`` (the unit lower-triangular
  factor of the ``LU`` decomposition of ``X'X``) belonging to the term's columns;
* **type II**: a term contained in no other term is tested marginally (the identity rows of
  its columns); otherwise its columns and those of the terms containing it are moved last
  and the type I rows of the term are taken in that order (adjusted for every term that
  does not contain it);
* **type III**: with the full indicator coding ``X_r = [1, ~0+t_1, ~0+t_2, …]``,
  ``L = (X⁺ X_r)'`` (``X⁺`` the Moore–Penrose inverse), then, from the highest-order
  term down, the columns of a term are replaced by their residuals after regression on the
  columns of the terms that contain it; the term's rows are the non-zero columns of ``L``
  restricted to ``X``'s column names.  A term ``t₁`` *contains* ``t₂`` when the variables
  of ``t₂`` are a proper subset of those of ``t₁`` and both have the same numeric
  variables (lmerTest's ``containment``).  For treatment-coded factors these are the
  hypotheses of SAS's type III tests.

The F statistic, numerator and denominator df come from
:func:`scoremix.lme.ddf.contest_md` (Satterthwaite or Kenward–Roger).

``ranova`` drops each random term in turn (a term ``(1 + x | g)`` is reduced to ``(1 | g)``,
i.e. each term of its left-hand side that no other contains is removed, as lmerTest's
``reduce.terms = TRUE``), refits with the same REML/ML and the same fixed part (``y``,
``X``, weights, offsets, dispersion of the original spec), and reports ``LRT = 2(ℓ − ℓ_0)`` on
``Df = npar − npar_0`` degrees of freedom.  When no random term is left the model is an
ordinary linear model, and its (REML) log-likelihood is ``logLik.lm``'s.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from scoremix.lme.ddf import contest_md, normalize_ddf
from scoremix.lme.errors import LmeError
from scoremix.lme.formula import parse_formula
from scoremix.lme.model_frame import rank_keep_columns
from scoremix.lme.anova import anova as anova_models
from scoremix.lme.result import LmerResult
from scoremix.lme.spec import FixedTerms

__all__ = [
    "AnovaError",
    "anova",
    "anova_table",
    "lme4_anova",
    "ranova",
    "term_contrasts",
    "doolittle",
    "zapsmall",
]

F_COLUMNS = ["Sum Sq", "Mean Sq", "NumDF", "DenDF", "F value", "Pr(>F)"]
RANOVA_COLUMNS = ["npar", "logLik", "AIC", "LRT", "Df", "Pr(>Chisq)"]


#: lmerTest's ``ensure_full_rank`` tolerance (``qr(X, tol = 1e-7)``)
ENSURE_FULL_RANK_TOL = 1e-7


class AnovaError(LmeError):
    """An F or likelihood-ratio table cannot be built for this fit (the message says why)."""


# ------------------------------------------------------------------ small R helpers
def zapsmall(x: np.ndarray, digits: int = 7) -> np.ndarray:
    """R's ``zapsmall``: round to ``digits`` significant digits of the largest entry."""
    x = np.asarray(x, dtype=float)
    if x.size == 0:
        return x.copy()
    mx = float(np.max(np.abs(x)))
    if not mx > 0:
        return np.round(x, digits)
    return np.round(x, max(0, digits - int(np.ceil(np.log10(mx)))))


def doolittle(x: np.ndarray, eps: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """lmerTest's ``doolittle``: ``x = L U`` with unit lower-triangular ``L`` (columns with a
    pivot ``|U_ii| < eps`` are zeroed, as are entries below ``eps``)."""
    x = np.asarray(x, dtype=float)
    n = x.shape[0]
    L = np.eye(n)
    U = np.zeros((n, n))
    for i in range(n):
        U[i, :] = x[i, :] - L[i, :i] @ U[:i, :]
        if i + 1 < n:
            col = x[i + 1:, i] - L[i + 1:, :i] @ U[:i, i]
            L[i + 1:, i] = 0.0 if abs(U[i, i]) < eps else col / U[i, i]
    L[np.abs(L) < eps] = 0.0
    U[np.abs(U) < eps] = 0.0
    return L, U


def _pinv(X: np.ndarray) -> np.ndarray:
    """``MASS::ginv``: singular values above ``sqrt(eps)·d_1``."""
    return np.linalg.pinv(X, rcond=float(np.sqrt(np.finfo(float).eps)))


def _terms(m: LmerResult) -> FixedTerms:
    spec = m.spec
    if spec is None or spec.fixed_terms is None:
        raise AnovaError("F tests need the model's terms; fit with scoremix.lmer (or build the "
                         "result with LmerResult.from_dict(d, spec) from build_model_spec)")
    return spec.fixed_terms


def _col_terms(ft: FixedTerms) -> dict[str, np.ndarray]:
    """lmerTest's ``term2colX``: columns of ``X`` per term (``"(Intercept)"`` included)."""
    names = ["(Intercept)"] + ft.labels
    return {nm: np.flatnonzero(ft.assign == k) for k, nm in enumerate(names)
            if k > 0 or ft.intercept}


def _containment(ft: FixedTerms) -> dict[str, list[str]]:
    """For every term, the terms that contain it (lmerTest's ``containment``)."""
    vars_ = {lab: set(v) for lab, v in zip(ft.labels, ft.variables)}
    nums = {lab: {x for x in v if ft.numeric.get(x, False)} for lab, v in vars_.items()}
    out = {}
    for t in ft.labels:
        out[t] = [u for u in ft.labels
                  if vars_[t] <= vars_[u] and vars_[u] - vars_[t] and nums[t] == nums[u]]
    return out


# ------------------------------------------------------------------ hypothesis matrices
def _type1(X: np.ndarray, cols: dict[str, np.ndarray], ft: FixedTerms) -> dict[str, np.ndarray]:
    p = X.shape[1]
    if p == 0 or (p == 1 and ft.intercept):
        return {}
    L = np.ones((1, 1)) if p == 1 else doolittle(X.T @ X)[0].T
    return {t: L[cols[t]] for t in ft.labels}


def _type2(X: np.ndarray, cols: dict[str, np.ndarray], ft: FixedTerms) -> dict[str, np.ndarray]:
    p = X.shape[1]
    if p <= 1 or len(ft.labels) <= 1:
        return _type1(X, cols, ft)
    contained = _containment(ft)
    out = {}
    col_term = np.empty(p, dtype=object)
    for t, c in cols.items():
        col_term[c] = t
    for t in ft.labels:
        if not contained[t]:
            out[t] = np.eye(p)[cols[t]]
            continue
        move = np.concatenate([cols[u] for u in [t] + contained[t]]).astype(int)
        rest = np.array([j for j in range(p) if j not in set(move.tolist())], dtype=int)
        order = np.concatenate([rest, move])
        Xn = X[:, order]
        Lc = doolittle(Xn.T @ Xn)[0].T
        rows = Lc[col_term[order] == t]
        back = np.empty(p, dtype=int)
        back[order] = np.arange(p)
        out[t] = rows[:, back]
    return out


def _factor_columns_are_indicators(X: np.ndarray, ft: FixedTerms) -> bool:
    """Treatment coding shows in ``X``: every column of a term made only of factors is a
    0/1 indicator (``contr.poly``, ``contr.sum`` … columns are not)."""
    for k, vars_ in enumerate(ft.variables, start=1):
        if any(ft.numeric.get(v, False) for v in vars_):
            continue
        cols = X[:, ft.assign == k]
        if cols.size and not np.all((cols == 0.0) | (cols == 1.0)):
            return False
    return True


def _type3_treatment(X: np.ndarray, cols: dict[str, np.ndarray], ft: FixedTerms,
                     names: list[str]) -> dict[str, np.ndarray]:
    """lmerTest's ``extract_contrasts_type3`` for a treatment-coded ``X``."""
    if ft.term_matrix is None:
        raise AnovaError("type III tests need the spec's term_matrix (build it with build_model_spec)")
    blocks, rd_names = [], []
    if ft.intercept:
        blocks.append(np.ones((X.shape[0], 1)))
        rd_names.append("(Intercept)")
    for t in ft.labels:
        B, bn = ft.term_matrix(t)
        blocks.append(B)
        rd_names.extend(bn)
    rdX = np.concatenate(blocks, axis=1)
    missing = [rd_names[j] for j in range(rdX.shape[1]) if np.all(rdX[:, j] == 0)]
    if missing:
        warnings.warn(f"Missing cells for: {', '.join(missing)}. Interpret type III hypotheses "
                      "with care.", UserWarning, stacklevel=4)
    L = zapsmall((_pinv(X) @ rdX).T)        # rows: full-coding columns, columns: X's
    contained = _containment(ft)
    order = sorted(range(len(ft.labels)), key=lambda k: -len(ft.variables[k]))
    for k in order:
        t = ft.labels[k]
        if contained[t] and cols[t].size:
            xc = np.concatenate([cols[u] for u in contained[t]]).astype(int)
            if xc.size:
                A = L[:, xc]
                Y = L[:, cols[t]]
                coef = np.linalg.lstsq(A, Y, rcond=None)[0]
                L[:, cols[t]] = zapsmall(Y - A @ coef)
    pos = {nm: i for i, nm in enumerate(rd_names)}
    try:
        L = L[[pos[nm] for nm in names]]
    except KeyError as e:
        raise AnovaError(f"column {e.args[0]!r} of X is not among the full-coding columns "
                         f"of its term ({rd_names})") from None
    out = {}
    for t in ft.labels:
        Lt = L[:, cols[t]].T
        out[t] = Lt[np.sum(np.abs(Lt), axis=1) > 1e-8]
    return out


def _type3(X: np.ndarray, cols: dict[str, np.ndarray], ft: FixedTerms,
           names: list[str]) -> dict[str, np.ndarray]:
    """lmerTest's ``get_contrasts_type3``: directly for treatment contrasts; otherwise the
    hypotheses of the treatment-coded ``X_t`` (rank-reduced as lmerTest's
    ``ensure_full_rank``) mapped to ``X``'s coefficients by ``zapsmall(X_t⁺ X)``."""
    p = X.shape[1]
    if p <= 1 or len(ft.labels) <= 1:
        return _type1(X, cols, ft)
    if ft.treatment and _factor_columns_are_indicators(X, ft):
        return _type3_treatment(X, cols, ft, names)
    if ft.treatment_design is None:
        raise AnovaError("type III tests of factors coded by other than treatment contrasts "
                         "need the spec's treatment_design (build it with build_model_spec)")
    Xt, names_t, assign_t = ft.treatment_design()
    keep = rank_keep_columns(Xt, ENSURE_FULL_RANK_TOL)
    Xt, names_t, assign_t = Xt[:, keep], [names_t[j] for j in keep], assign_t[keep]
    ft_t = dataclasses.replace(ft, assign=assign_t)
    cols_t = _col_terms(ft_t)
    for t in ft.labels:
        cols_t.setdefault(t, np.zeros(0, dtype=int))
    Ls = _type3_treatment(Xt, cols_t, ft_t, names_t)
    M = zapsmall(_pinv(Xt) @ X)
    return {t: L @ M for t, L in Ls.items()}


def term_contrasts(m: LmerResult, type: int | str = 3) -> dict[str, np.ndarray]:
    """lmerTest's hypothesis matrices ``L_t`` (one per fixed term) for type 1, 2 or 3
    (see the module docstring); columns follow ``m.fixef``."""
    ft = _terms(m)
    X = np.asarray(m.spec.X, dtype=float)
    tp = _normalize_type(type)
    cols = _col_terms(ft)
    for t in ft.labels:
        cols.setdefault(t, np.zeros(0, dtype=int))
    if tp == 1:
        return _type1(X, cols, ft)
    if tp == 2:
        return _type2(X, cols, ft)
    return _type3(X, cols, ft, list(m.fixef.index))


def _normalize_type(type: int | str) -> int:
    table = {"1": 1, "i": 1, "2": 2, "ii": 2, "3": 3, "iii": 3}
    key = str(type).strip().lower()
    if key not in table:
        raise ValueError(f"unknown anova type {type!r}; use 1, 2 or 3 (or 'I', 'II', 'III')")
    return table[key]


# ------------------------------------------------------------------ tables
def anova_table(m: LmerResult, type: int | str = 3, ddf: str = "Satterthwaite") -> pd.DataFrame:
    """F tests of the fixed-effect terms (lmerTest's ``anova(m, type=, ddf=)``).

    Parameters
    ----------
    m:
        a fit with its spec (``scoremix.lmer``).
    type:
        1, 2 or 3 (``"I"``, ``"II"``, ``"III"``).
    ddf:
        ``"Satterthwaite"`` (default), ``"Kenward-Roger"`` (REML fits only) or ``"lme4"``
        (lme4's table without df, :func:`lme4_anova`; ``type`` is then ignored, as lmerTest
        does).

    Returns
    -------
    pandas.DataFrame
        rows named by term, columns ``Sum Sq``, ``Mean Sq``, ``NumDF``, ``DenDF``,
        ``F value``, ``Pr(>F)``; ``attrs["heading"]`` holds lmerTest's title and
        ``attrs["hypotheses"]`` the matrices ``L_t``.
    """
    method = normalize_ddf(ddf)
    if method == "lme4":
        return lme4_anova(m)
    if method == "Kenward-Roger" and not m.REML:
        raise AnovaError("Kenward-Roger's method is only available for REML model fits")
    tp = _normalize_type(type)
    Ls = term_contrasts(m, tp)
    rows, names, empty = [], [], []
    for t, L in Ls.items():
        if L.shape[0] == 0:
            empty.append(t)
            continue
        rows.append(contest_md(m, L, method))
        names.append(t)
    tab = pd.DataFrame(rows, index=names, columns=F_COLUMNS)
    if empty:
        tab = pd.concat([tab, pd.DataFrame(np.nan, index=empty, columns=F_COLUMNS)])
    roman = {1: "I", 2: "II", 3: "III"}[tp]
    word = "Satterthwaite's" if method == "Satterthwaite" else "Kenward-Roger's"
    tab.attrs["heading"] = f"Type {roman} Analysis of Variance Table with {word} method"
    tab.attrs["hypotheses"] = Ls
    return tab


def lme4_anova(m: LmerResult) -> pd.DataFrame:
    """lme4's single-model ``anova(m)``: sequential sums of squares without df.

    With ``R_X`` the fixed-effects block of the Cholesky factor (``R_X'R_X = X'V^{-1}X σ²``),
    the effects ``e = R_X β̂`` are orthogonal; a term's ``Sum Sq`` is the sum of ``e_j²``
    over its columns, ``Mean Sq = Sum Sq / npar`` and ``F value = Mean Sq / σ̂²``.
    """
    from scoremix.lme.ddf import model_crossproducts
    from scoremix.lme.factor import factorize

    ft = _terms(m)
    cp = model_crossproducts(m)
    rho = None
    if m.sigma_by is not None and len(m.sigma_by) > 1:
        rho = (m.sigma_by.to_numpy() / m.sigma) ** 2
    f = factorize(m.theta.to_numpy(), cp, rho, need_lr1=False)
    qr, p = f.q_rest, cp.p
    LX = f.Lrr[qr: qr + p, qr: qr + p]
    e2 = (LX.T @ m.fixef.to_numpy()) ** 2
    rows, names = [], []
    for k in np.unique(ft.assign):
        if k == 0:
            continue
        sel = ft.assign == k
        ss = float(e2[sel].sum())
        npar = int(sel.sum())
        rows.append({"npar": npar, "Sum Sq": ss, "Mean Sq": ss / npar,
                     "F value": ss / npar / m.sigma ** 2})
        names.append(ft.labels[k - 1])
    tab = pd.DataFrame(rows, index=names, columns=["npar", "Sum Sq", "Mean Sq", "F value"])
    tab.attrs["heading"] = "Analysis of Variance Table"
    return tab


def anova(*models: LmerResult, type: int | str | None = None, ddf: str = "Satterthwaite",
          names: Sequence[str] | None = None, refit: bool = True) -> pd.DataFrame:
    """``anova`` as lmerTest dispatches it.

    * one model: F tests of its fixed-effect terms, :func:`anova_table` (``type`` defaults
      to 3);
    * two or more models: likelihood-ratio tests of nested models, lme4's
      ``anova(m0, m1, …)`` (:func:`scoremix.lme.inference.anova`; ``type`` must not be
      given).
    """
    if len(models) == 1:
        return anova_table(models[0], 3 if type is None else type, ddf)
    if type is not None:
        raise ValueError("type= applies to the F tests of one model; several models are "
                         "compared by likelihood-ratio tests")
    return anova_models(*models, names=names, refit=refit)


# ------------------------------------------------------------------ ranova
def _fixed_rhs(ft_labels: list[str], intercept: bool) -> str:
    if not ft_labels:
        return "1" if intercept else "0"
    return ("" if intercept else "0 + ") + " + ".join(ft_labels)


def _reduced_lhs(lhs_labels: list[str], lhs_intercept: bool, variables: list[set]) -> list[tuple[str, str]]:
    """lmerTest's ``get_newforms`` for one ``(lhs | g)``: ``(scope term, new lhs)`` pairs;
    an empty list when the term is removed as a whole."""
    if not lhs_labels:
        return []
    scope = [t for k, t in enumerate(lhs_labels)
             if not any(variables[k] < variables[j] for j in range(len(lhs_labels)) if j != k)]
    out = []
    for s in scope:
        rest = [t for t in lhs_labels if t != s]
        if set(lhs_labels) == {s}:
            new = "1"
        elif lhs_intercept:
            new = " + ".join(rest)
        else:
            new = "0 + " + " + ".join(rest) if rest else "1"
        out.append((s, new))
    return out


def _lm_loglik(m: LmerResult, reml: bool) -> tuple[int, float]:
    """``logLik.lm`` (REML or ML) of the fixed part alone: ``(df, logLik)``."""
    spec = m.spec
    # ``spec.y`` is already ``y - offset`` (the model frame removes the offset once)
    X, y = np.asarray(spec.X, float), np.asarray(spec.y, float)
    w = np.ones_like(y) if spec.weights is None else np.asarray(spec.weights, float)
    sw = np.sqrt(w)
    Q, R = np.linalg.qr(X * sw[:, None]) if X.shape[1] else (np.zeros((len(y), 0)), np.zeros((0, 0)))
    res = y * sw - Q @ (Q.T @ (y * sw))
    p = X.shape[1]
    N = len(y) - (p if reml else 0)
    val = 0.5 * (np.sum(np.log(w)) - N * (np.log(2 * np.pi) + 1 - np.log(N) + np.log(np.sum(res ** 2))))
    if reml and p:
        val -= np.sum(np.log(np.abs(np.diag(R))))
    return p + 1, float(val)


def _refit_random(m: LmerResult, lhs_text: str, fixed: str, terms: list[str],
                  weights: np.ndarray | None) -> LmerResult:
    """Refit ``m`` with other random terms and the same fixed part: the random terms are
    built from ``lhs ~ 1 + (terms)`` on the model frame, everything else (``y``, ``X``,
    weights, offsets, contrasts, dispersion) is the original spec's."""
    from scoremix.lme.api import fit_spec
    from scoremix.lme.model_frame import build_model_spec

    spec = m.spec
    bars = " + ".join(f"({t})" for t in terms)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        new = build_model_spec(f"{lhs_text} ~ 1 + {bars}", spec.data, weights=weights,
                               dispersion=spec.dispersion_formula)
        reduced = dataclasses.replace(spec, formula=f"{lhs_text} ~ {fixed} + {bars}",
                                      terms=new.terms, random_design=new.random_design)
        return fit_spec(reduced, REML=m.REML)


def ranova(m: LmerResult, reduce_terms: bool = True, progress: bool = False) -> pd.DataFrame:
    """Likelihood-ratio tests of the random-effect terms (lmerTest's ``ranova``).

    Parameters
    ----------
    m:
        a fit from :func:`scoremix.lmer` (REML or ML; the reduced models are fitted the
        same way).
    reduce_terms:
        reduce ``(1 + x | g)`` to ``(1 | g)`` (lmerTest's default) instead of removing the
        whole term.
    progress:
        show a progress bar over the refits.

    Returns
    -------
    pandas.DataFrame
        rows ``<none>`` then one per reduced model (``(1 | g)`` or ``x in (1 + x | g)``),
        columns ``npar``, ``logLik``, ``AIC``, ``LRT``, ``Df``, ``Pr(>Chisq)``.
    """
    from tqdm.auto import tqdm

    spec = m.spec
    if spec is None:
        raise AnovaError("ranova refits the model and needs its spec; fit with scoremix.lmer")
    parsed = parse_formula(m.formula)
    lhs_text = m.formula.split("~", 1)[0].strip()
    fixed = _fixed_rhs(parsed.fixed.term_labels(), parsed.fixed.intercept)
    labels = [rp.label for rp in parsed.random]
    if any(rp.structure != "us" for rp in parsed.random):
        raise AnovaError("ranova does not handle structured covariance terms (diag(), cs(), "
                         "ar1()); "
                         "compare explicitly refitted models with anova(m1, m2)")
    if not labels:
        raise AnovaError("Model should have at least one random-effects term")
    new_models: dict[str, list[str]] = {}
    for k, rp in enumerate(parsed.random):
        others = labels[:k] + labels[k + 1:]
        lhs_vars = [set(t) for t in rp.lhs.terms]
        reduced = (_reduced_lhs(rp.lhs.term_labels(), rp.lhs.intercept, lhs_vars)
                   if reduce_terms else [])
        if not reduced:
            new_models[f"({rp.label})"] = others
        for scope, new_lhs in reduced:
            group = rp.label.split("|", 1)[1].strip()
            terms = list(others)
            terms.insert(k, f"{new_lhs} | {group}")
            new_models[f"{scope} in ({rp.label})"] = terms
    weights = None if spec.weights is None else np.asarray(spec.weights, float)
    rows = [(m.npar, m.loglik)]
    for name, terms in tqdm(new_models.items(), desc="ranova", disable=not progress):
        uniq = list(dict.fromkeys(re.sub(r"\s+", " ", t) for t in terms))
        if not uniq:
            rows.append(_lm_loglik(m, m.REML))
            continue
        fit = _refit_random(m, lhs_text, fixed, uniq, weights)
        if fit.nobs != m.nobs:
            raise AnovaError("number of rows in use has changed: remove missing values?")
        rows.append((fit.npar, fit.loglik))
    npar = np.array([r[0] for r in rows], dtype=float)
    ll = np.array([r[1] for r in rows])
    tab = pd.DataFrame({"npar": npar.astype(int), "logLik": ll, "AIC": -2 * ll + 2 * npar},
                       index=["<none>"] + list(new_models))
    lrt = np.full(len(rows), np.nan)
    df = np.full(len(rows), np.nan)
    lrt[1:] = 2 * (ll[0] - ll[1:])
    df[1:] = npar[0] - npar[1:]
    pv = np.full(len(rows), np.nan)
    ok = df > 0
    pv[ok] = stats.chi2.sf(lrt[ok], df[ok])
    tab["LRT"], tab["Df"], tab["Pr(>Chisq)"] = lrt, df, pv
    tab.attrs["heading"] = "ANOVA-like table for random-effects: Single term deletions"
    return tab

