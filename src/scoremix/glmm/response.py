r"""The response of a binomial or Poisson GLMM, as R's ``family()$initialize`` reads it.

Binomial responses (R's rules):

* a 0/1 numeric, logical or two-level factor column: :math:`y_i \in \{0, 1\}` (a factor's
  first level is the failure, the other the success), :math:`m_i = 1`;
* ``cbind(successes, failures)``: :math:`y_i = s_i/(s_i + f_i)`, prior weight
  :math:`w_i (s_i + f_i)`, trials :math:`m_i = s_i + f_i`;
* a proportion :math:`0 \le y_i \le 1` with ``weights=`` the numbers of trials
  (:math:`m_i = w_i`).

Poisson: non-negative counts.

:func:`prepare_response` returns a copy of the data with the numeric response in a new
column and the formula rewritten to use it, so that the Gaussian model frame
(:func:`scoremix.lme.model_frame.build_model_spec`) builds ``X``, the random terms and the
NA handling exactly as for ``lmer``.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from scoremix.glmm.errors import GlmmResponseError
from scoremix.glmm.family import Family
from scoremix.lme.formula import parse_formula
from scoremix.lme.transforms import evaluate

__all__ = ["PreparedResponse", "prepare_response", "split_lhs", "Y_COL", "N_COL"]

Y_COL = ".smx_glmm_y"
N_COL = ".smx_glmm_trials"


@dataclass
class PreparedResponse:
    """The rewritten formula and data, and how the response was given.

    ``trials_col`` names the column of binomial trials ``m_i`` from ``cbind``; ``kind`` is
    ``"binary"``, ``"cbind"``, ``"proportion"`` or ``"count"``; ``levels`` the factor levels
    of a factor response (failure first)."""

    formula: str
    data: pd.DataFrame
    lhs: str
    kind: str
    cbind: bool
    levels: list[str] | None = None


def split_lhs(formula: str) -> tuple[str, str]:
    """``"lhs ~ rhs"`` → ``(lhs, rhs)``, at the first top-level ``~``."""
    depth = 0
    for i, ch in enumerate(formula):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "~" and depth == 0:
            return formula[:i].strip(), formula[i + 1:].strip()
    raise GlmmResponseError(f"formula {formula!r} has no '~'")


def _split_args(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return out


def _eval_column(expr: str, data: pd.DataFrame, what: str) -> np.ndarray:
    """A numeric vector from a column name or an R expression of columns."""
    if expr in data.columns:
        s = data[expr]
        if pd.api.types.is_bool_dtype(s.dtype):
            return s.astype(float).to_numpy()
        if not pd.api.types.is_numeric_dtype(s.dtype):
            raise GlmmResponseError(f"{what} {expr!r} must be numeric counts, got dtype {s.dtype}")
        return s.to_numpy(dtype=float, na_value=np.nan)
    parsed = parse_formula(f"{expr} ~ 1")
    if parsed.response_expr is None:
        raise GlmmResponseError(f"{what}: column {expr!r} is not in the data "
                                f"(columns: {', '.join(map(str, data.columns))})")

    def get(col: str) -> np.ndarray:
        if col not in data.columns:
            raise GlmmResponseError(f"{what}: column {col!r} is not in the data")
        return data[col].to_numpy(dtype=float, na_value=np.nan)

    return evaluate(parsed.response_expr, get, {}, True, len(data)).values[:, 0]


def _factor_levels(s: pd.Series) -> list:
    if isinstance(s.dtype, pd.CategoricalDtype):
        return list(s.cat.categories)
    return sorted(pd.unique(s.dropna()), key=lambda v: str(v))


def prepare_response(formula: str, data: pd.DataFrame, family: Family,
                     weights_given: bool) -> PreparedResponse:
    """Rewrite ``formula``/``data`` so that the response is a numeric column (see the
    module docstring); validates the response against the family."""
    lhs, rhs = split_lhs(formula)
    m = re.fullmatch(r"cbind\s*\((.*)\)", lhs, flags=re.S)
    d = data.copy()
    if m:
        if family.name != "binomial":
            raise GlmmResponseError(f"cbind(successes, failures) is a binomial response, not "
                                    f"{family.name}")
        parts = _split_args(m.group(1))
        if len(parts) != 2:
            raise GlmmResponseError(f"{lhs}: cbind() needs two columns (successes, failures)")
        s = _eval_column(parts[0], d, "successes")
        f = _eval_column(parts[1], d, "failures")
        bad = (s < 0) | (f < 0)
        if np.any(bad & ~np.isnan(s) & ~np.isnan(f)):
            rows = list(d.index[np.where(bad)[0][:5]])
            raise GlmmResponseError(f"{lhs}: negative counts in rows {rows}")
        tot = s + f
        with np.errstate(invalid="ignore", divide="ignore"):
            y = np.where(tot > 0, s / np.where(tot > 0, tot, 1), 0.0)
        y[np.isnan(tot)] = np.nan
        d[Y_COL] = y
        d[N_COL] = np.where(np.isnan(tot), 1.0, tot)
        if np.any(np.abs(np.nan_to_num(s) - np.round(np.nan_to_num(s))) > 1e-3):
            warnings.warn("non-integer counts in a binomial glm!", UserWarning, stacklevel=3)
        return PreparedResponse(f"{Y_COL} ~ {rhs}", d, lhs, "cbind", True)
    if lhs in d.columns:
        s = d[lhs]
        levels = None
        if pd.api.types.is_bool_dtype(s.dtype) or (s.dtype == object and s.dropna().map(
                lambda v: isinstance(v, (bool, np.bool_))).all() and len(s.dropna())):
            y = s.map(lambda v: np.nan if pd.isna(v) else float(bool(v))).to_numpy(float)
            kind = "binary"
        elif isinstance(s.dtype, pd.CategoricalDtype) or not pd.api.types.is_numeric_dtype(s.dtype):
            if family.name != "binomial":
                raise GlmmResponseError(f"response {lhs!r} is a factor; a {family.name} model needs "
                                        "numeric counts")
            levels = _factor_levels(s)
            if len(levels) != 2:
                raise GlmmResponseError(
                    f"response {lhs!r} is a factor with {len(levels)} levels {levels[:6]}; a binomial "
                    "model needs two (the first is the failure) or 0/1 values")
            y = np.where(s.isna(), np.nan, (s != levels[0]).astype(float))
            kind = "binary"
        else:
            y = s.to_numpy(dtype=float, na_value=np.nan)
            kind = "binary"
        d[Y_COL] = y
        out_formula = f"{Y_COL} ~ {rhs}"
    else:
        # an expression response: the model frame evaluates it
        y = _eval_column(lhs, d, "response")
        out_formula, levels, kind = formula, None, "binary"
    ok = ~np.isnan(y)
    yy = y[ok]
    if family.name == "binomial":
        if np.any((yy < 0) | (yy > 1)):
            bad = np.where(ok & ((np.nan_to_num(y) < 0) | (np.nan_to_num(y) > 1)))[0][:5]
            raise GlmmResponseError(
                f"binomial response {lhs!r} must be 0/1, logical, a two-level factor, a proportion "
                f"with weights= or cbind(successes, failures); rows {list(d.index[bad])} are outside "
                "[0, 1]")
        if np.any((yy > 0) & (yy < 1)):
            kind = "proportion"
            if not weights_given:
                warnings.warn("non-integer #successes in a binomial glm! (a proportion response "
                              "needs weights= the numbers of trials)", UserWarning, stacklevel=3)
    else:
        kind = "count"
        if np.any(yy < 0):
            bad = np.where(ok & (np.nan_to_num(y) < 0))[0][:5]
            raise GlmmResponseError(f"Poisson response {lhs!r} has negative values in rows "
                                    f"{list(d.index[bad])}")
        if np.any(np.abs(yy - np.round(yy)) > 1e-8):
            warnings.warn(f"non-integer Poisson response {lhs!r}", UserWarning, stacklevel=3)
    return PreparedResponse(out_formula, d, lhs, kind, False, levels)
