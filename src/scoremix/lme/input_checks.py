r"""Checks of the data handed to :func:`scoremix.lmer` and :func:`scoremix.bayes_lmer`, run
before the model frame is built, so that degenerate input fails with a named error instead of
a numerical failure deep inside the fit.

* the data must be a non-empty ``DataFrame`` (:class:`EmptyDataError`);
* the response :math:`y` must vary: a constant response has no residual variance to estimate
  (:class:`ConstantResponseError`, naming the column);
* :math:`\sum_i (y_i - \bar y)^2` must be finite in float64: a response of order
  :math:`10^{155}` or more overflows the cross-products (:class:`ResponseScaleError`,
  suggesting a rescaling).

Non-numeric, NaN and infinite responses are reported by the model frame itself
(:class:`~scoremix.lme.errors.ResponseError`, :class:`~scoremix.lme.errors.MissingValueError`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from scoremix.lme.errors import LmeError, ResponseError

__all__ = ["EmptyDataError", "ConstantResponseError", "ResponseScaleError", "check_model_input"]


class EmptyDataError(LmeError):
    """The data has no rows (or is not a table)."""


class ConstantResponseError(ResponseError):
    """Every row has the same response value."""


class ResponseScaleError(ResponseError):
    """The response is so large that its squares overflow float64."""


def _response_name(formula: str) -> str | None:
    if not isinstance(formula, str) or "~" not in formula:
        return None
    name = formula.split("~", 1)[0].strip()
    return name or None


def check_model_input(formula: Any, data: Any) -> None:
    """Raise a named error for data that no linear mixed model can be fitted to (see the
    module docstring); silent otherwise (other problems are left to the model frame)."""
    if not isinstance(data, pd.DataFrame):
        raise EmptyDataError(f"data must be a pandas DataFrame of trials, got {type(data).__name__}")
    if len(data) == 0:
        cols = ", ".join(map(repr, data.columns[:12])) or "none"
        raise EmptyDataError(f"data has no rows (columns: {cols}); check the file or the filters that selected it")
    response = _response_name(formula)
    if response is None or response not in data.columns:
        return
    col = data[response]
    if not (pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)):
        return
    y = col.to_numpy(dtype=np.float64)
    y = y[np.isfinite(y)]
    if y.size == 0:
        return
    if y.size > 1 and np.all(y == y[0]):
        raise ConstantResponseError(
            f"response column {response!r} is constant ({y.size} rows, all {float(y[0])!r}): a mixed model needs "
            "a response that varies; check the column, the filters or the subset of the data")
    with np.errstate(over="ignore", invalid="ignore"):
        scale = float(np.max(np.abs(y)))
        ss = float(np.sum((y - np.mean(y)) ** 2)) if np.isfinite(np.mean(y)) else np.inf
    if not np.isfinite(ss) or not np.isfinite(scale * scale * y.size):
        raise ResponseScaleError(
            f"response column {response!r} reaches {scale:.3g}: its squares overflow float64; rescale it "
            f"(e.g. divide by {10.0 ** np.floor(np.log10(scale)):.0e}, or standardise (y - mean)/sd) and fit again")
