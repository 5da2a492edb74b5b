r"""Evaluate the R expressions of a formula (``log(x)``, ``I(x^2)``, ``poly(x, 2)``, …) on a
data frame, the way R's ``model.frame`` does, and again on new data the way ``predict``
does (R's ``makepredictcall``).

An expression is a node of :mod:`scoremix.lme.formula`'s syntax tree.  Supported:

* arithmetic ``+ - * / ^ %% %/%``, unary ``-``, comparisons ``< <= > >= == !=`` (a logical
  result becomes a factor with levels ``FALSE``/``TRUE``, as in R), numbers, ``pi``,
  ``TRUE``/``FALSE``;
* ``I(e)``; elementwise ``log(x)`` / ``log(x, base)``, ``log2``, ``log10``, ``log1p``,
  ``exp``, ``expm1``, ``sqrt``, ``abs``, ``sin``, ``cos``, ``tan``, ``asin``, ``acos``,
  ``atan``, ``sinh``, ``cosh``, ``tanh``, ``floor``, ``ceiling``, ``trunc``, ``sign``;
* **stateful** transforms whose parameters are computed once on the fitting data and
  re-used on new data:

  - ``scale(x, center = TRUE, scale = TRUE)``: :math:`(x - c)/s` with :math:`c = \bar x`,
    :math:`s` the standard deviation (``center = FALSE``: :math:`s = \sqrt{\sum x^2/(n-1)}`);
  - ``poly(x, degree = 1, raw = FALSE)``: ``raw = TRUE`` gives :math:`x, x^2, …`;
    otherwise R's orthogonal polynomials: on the fitting data column :math:`d` is the part
    of :math:`(x-\bar x)^d` orthogonal to the lower powers, divided by its norm; R stores
    the three-term recurrence coefficients :math:`\alpha_d = \sum x P_d^2 / \sum P_d^2`
    and :math:`\nu_d = \sum P_d^2`, and new data are evaluated with
    :math:`P_{d+1}(x) = (x - \alpha_{d+1}) P_d(x) - (\nu_{d+1}/\nu_d) P_{d-1}(x)`.

  - ``bs(x, df, knots, degree = 3, intercept = FALSE, Boundary.knots)`` and
    ``ns(x, df, knots, intercept = FALSE, Boundary.knots)``: R's B-spline and natural cubic
    spline bases (:mod:`scoremix.lme.splines`); the knots are stored and re-used on new data;

* **data-dependent summaries** ``mean``, ``sd``, ``var``, ``median``, ``min``, ``max``,
  ``sum`` (optionally ``na.rm = TRUE``), e.g. ``I(conc - mean(conc))``: evaluated over the
  whole data frame given to the fit, as R's ``model.frame`` evaluates them (so a missing
  value makes the summary missing unless ``na.rm = TRUE``; scoremix then stops with a
  :class:`FormulaError` instead of dropping every row).  On new data the value computed
  on the fitting data is re-used (R re-evaluates the call on ``newdata``, which centres new
  data on their own mean: a well-known pitfall that scoremix does not reproduce).

As in R, the parameters are computed on every row of the data where the variable itself is
not missing (before rows with a missing value elsewhere are dropped).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from scoremix.lme.contrasts import gram_schmidt_powers
from scoremix.lme.errors import FormulaError
from scoremix.lme.rsyntax import deparse
from scoremix.lme.splines import fit_basis

__all__ = ["Value", "ELEMENTWISE", "STATEFUL", "SUMMARIES", "FACTOR_FUNCTIONS", "CONSTANTS",
           "expression_columns", "validate_expression", "evaluate", "deparse_expr"]

ELEMENTWISE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "exp": np.exp, "expm1": np.expm1,
    "sqrt": np.sqrt, "abs": np.abs, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
    "tanh": np.tanh, "floor": np.floor, "ceiling": np.ceil, "trunc": np.trunc, "sign": np.sign,
}
STATEFUL = ("scale", "poly", "bs", "ns")

def _r_sd(x: np.ndarray) -> float:
    return float(np.std(x, ddof=1)) if len(x) > 1 else float("nan")


def _r_var(x: np.ndarray) -> float:
    return float(np.var(x, ddof=1)) if len(x) > 1 else float("nan")


#: data-dependent summaries (one number from a whole column), R's ``mean``, ``sd``, …
SUMMARIES: dict[str, Callable[[np.ndarray], float]] = {
    "mean": lambda x: float(np.mean(x)), "sd": _r_sd, "var": _r_var,
    "median": lambda x: float(np.median(x)), "min": lambda x: float(np.min(x)),
    "max": lambda x: float(np.max(x)), "sum": lambda x: float(np.sum(x)),
}
#: summaries that take several vectors (``min(x, y)``) like R's ``...``
_VARIADIC = ("min", "max", "sum")
FACTOR_FUNCTIONS = ("factor", "as.factor", "ordered", "as.ordered")
CONSTANTS = {"pi": np.pi, "TRUE": 1.0, "FALSE": 0.0, "T": 1.0, "F": 0.0}
_COMPARE = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
            "==": np.equal, "!=": np.not_equal}
_ARITH = ("+", "-", "*", "/", "^", "%%", "%/%")


@dataclass
class Value:
    """An evaluated variable: ``values`` is ``(n, k)`` float (NaN = missing); ``suffixes``
    are R's column-name suffixes (``[""]`` for a vector, ``["1", "2"]`` for ``poly``);
    ``logical`` marks a comparison (a FALSE/TRUE factor in the model matrix)."""

    values: np.ndarray
    suffixes: list[str]
    logical: bool = False


def deparse_expr(node: object) -> str:
    """R's label of an expression (``poly(x, 2)``)."""
    return deparse(node)


def expression_columns(node: object) -> list[str]:
    """The data columns an expression reads (names that are not constants or argument
    names), in order of appearance."""
    kind = node[0]  # type: ignore[index]
    if kind == "name":
        return [] if node[1] in CONSTANTS else [node[1]]  # type: ignore[index]
    if kind in ("num", "str"):
        return []
    if kind == "paren":
        return expression_columns(node[1])  # type: ignore[index]
    if kind == "unary":
        return expression_columns(node[2])  # type: ignore[index]
    if kind == "named":
        return expression_columns(node[2])  # type: ignore[index]
    if kind == "call":
        out: list[str] = []
        for a in node[2]:  # type: ignore[index]
            out.extend(expression_columns(a))
        return list(dict.fromkeys(out))
    out = expression_columns(node[2]) + expression_columns(node[3])  # type: ignore[index]
    return list(dict.fromkeys(out))


def _supported_text() -> str:
    return ("supported in expressions: I(), log(x[, base]), " + ", ".join(sorted(ELEMENTWISE))
            + ", scale(x, center, scale), poly(x, degree, raw), bs(x, df, knots, degree, "
            "intercept, Boundary.knots), ns(x, df, knots, intercept, Boundary.knots), "
            + ", ".join(SUMMARIES) + " (with na.rm), arithmetic + - * / ^ %% %/%, "
            "comparisons, pi, TRUE/FALSE")


def _args(node: object, fname: str, names: tuple[str, ...], text: str) -> dict[str, object]:
    """Match a call's arguments to ``names`` as R does (by name, then by position)."""
    args = node[2]  # type: ignore[index]
    out: dict[str, object] = {}
    positional = []
    for a in args:
        if a[0] == "named":
            nm = a[1]
            match = [n for n in names if n == nm] or [n for n in names if n.startswith(nm)]
            if len(match) != 1:
                raise FormulaError(f"in {text!r}: {fname}() has no argument {nm!r} "
                                   f"(arguments: {', '.join(names)})")
            out[match[0]] = a[2]
        else:
            positional.append(a)
    free = [n for n in names if n not in out]
    if len(positional) > len(free):
        raise FormulaError(f"in {text!r}: too many arguments to {fname}() "
                           f"(arguments: {', '.join(names)})")
    out.update(zip(free, positional))
    return out


def validate_expression(node: object, text: str) -> None:
    """Raise :class:`FormulaError` for anything the evaluator cannot compute."""
    kind = node[0]  # type: ignore[index]
    if kind in ("name", "num"):
        return
    if kind == "str":
        raise FormulaError(f"in {text!r}: a quoted string {deparse_expr(node)} cannot be used "
                           f"in an expression; {_supported_text()}")
    if kind in ("paren", "unary"):
        validate_expression(node[-1], text)  # type: ignore[index]
        return
    if kind == "named":
        raise FormulaError(f"in {text!r}: unexpected named argument {node[1]!r}")  # type: ignore[index]
    if kind == "bin":
        op = node[1]  # type: ignore[index]
        if op not in _ARITH and op not in _COMPARE:
            raise FormulaError(f"in {text!r}: operator {op!r} cannot be used inside "
                               f"{deparse_expr(node)!r}; {_supported_text()}")
        validate_expression(node[2], text)  # type: ignore[index]
        validate_expression(node[3], text)  # type: ignore[index]
        return
    fname = node[1]  # type: ignore[index]
    if fname == "I":
        a = _args(node, "I", ("x",), text)
        if "x" not in a:
            raise FormulaError(f"in {text!r}: I() needs one argument")
        validate_expression(a["x"], text)
        return
    if fname == "log":
        a = _args(node, "log", ("x", "base"), text)
    elif fname in ELEMENTWISE:
        a = _args(node, fname, ("x",), text)
    elif fname == "scale":
        a = _args(node, "scale", ("x", "center", "scale"), text)
        for k in ("center", "scale"):
            if k in a and not (a[k][0] == "name" and a[k][1] in ("TRUE", "FALSE", "T", "F")):  # type: ignore[index]
                raise FormulaError(f"in {text!r}: scale(): {k} must be TRUE or FALSE")
    elif fname == "poly":
        a = _args(node, "poly", ("x", "degree", "coefs", "raw"), text)
        if "coefs" in a:
            raise FormulaError(f"in {text!r}: poly(coefs = ) is not supported")
        if "degree" in a and (a["degree"][0] != "num" or not float(a["degree"][1]).is_integer()  # type: ignore[index]
                              or float(a["degree"][1]) < 1):  # type: ignore[index]
            raise FormulaError(f"in {text!r}: poly(): degree must be a positive whole number")
        if "raw" in a and not (a["raw"][0] == "name" and a["raw"][1] in ("TRUE", "FALSE", "T", "F")):  # type: ignore[index]
            raise FormulaError(f"in {text!r}: poly(): raw must be TRUE or FALSE")
    elif fname in ("bs", "ns"):
        names = (("x", "df", "knots", "degree", "intercept", "Boundary.knots") if fname == "bs"
                 else ("x", "df", "knots", "intercept", "Boundary.knots"))
        a = _args(node, fname, names, text)
        for k in ("df", "degree"):
            if k in a:
                v = _numbers(a[k], text, f"{fname}(): {k}")
                if len(v) != 1 or not float(v[0]).is_integer() or v[0] < (1 if k == "degree" else 0):
                    raise FormulaError(f"in {text!r}: {fname}(): {k} must be a whole number")
        if "knots" in a:
            _numbers(a["knots"], text, f"{fname}(): knots")
        if "Boundary.knots" in a and len(_numbers(a["Boundary.knots"], text,
                                                  f"{fname}(): Boundary.knots")) != 2:
            raise FormulaError(f"in {text!r}: {fname}(): Boundary.knots must be two numbers")
        if "intercept" in a and not (a["intercept"][0] == "name"  # type: ignore[index]
                                     and a["intercept"][1] in ("TRUE", "FALSE", "T", "F")):  # type: ignore[index]
            raise FormulaError(f"in {text!r}: {fname}(): intercept must be TRUE or FALSE")
        if "x" not in a:
            raise FormulaError(f"in {text!r}: {fname}() needs an argument x")
        validate_expression(a["x"], text)
        return
    elif fname in SUMMARIES:
        xs, _ = _summary_args(node, fname, text)
        for v in xs:
            validate_expression(v, text)
        return
    else:
        raise FormulaError(f"in {text!r}: function {fname}() is not supported; {_supported_text()}; "
                           "compute other columns in the data frame first")
    if "x" not in a:
        raise FormulaError(f"in {text!r}: {fname}() needs an argument x")
    for v in a.values():
        validate_expression(v, text)


def _numbers(node: object, text: str, what: str) -> list[float]:
    """A literal number or ``c(n1, n2, …)`` (with unary minus) as floats."""
    kind = node[0]  # type: ignore[index]
    if kind == "num":
        return [float(node[1])]  # type: ignore[index]
    if kind == "unary" and node[1] == "-":  # type: ignore[index]
        return [-v for v in _numbers(node[2], text, what)]  # type: ignore[index]
    if kind == "paren":
        return _numbers(node[1], text, what)  # type: ignore[index]
    if kind == "call" and node[1] == "c":  # type: ignore[index]
        out: list[float] = []
        for a in node[2]:  # type: ignore[index]
            out.extend(_numbers(a, text, what))
        return out
    raise FormulaError(f"in {text!r}: {what} must be a number or c() of numbers, "
                       f"got {deparse_expr(node)}")


def _summary_args(node: object, fname: str, text: str) -> tuple[list[object], bool]:
    """The vectors and the ``na.rm`` flag of ``mean(x, na.rm = TRUE)`` etc."""
    xs: list[object] = []
    na_rm = False
    for a in node[2]:  # type: ignore[index]
        if a[0] == "named":
            if a[1] == "na.rm" and a[2][0] == "name" and a[2][1] in ("TRUE", "FALSE", "T", "F"):
                na_rm = a[2][1] in ("TRUE", "T")
                continue
            if a[1] == "x" and fname not in _VARIADIC:
                xs.append(a[2])
                continue
            raise FormulaError(f"in {text!r}: {fname}(): only the data and na.rm = TRUE/FALSE "
                               f"are supported, not {a[1]!r}")
        xs.append(a)
    if not xs:
        raise FormulaError(f"in {text!r}: {fname}() needs an argument")
    if len(xs) > 1 and fname not in _VARIADIC:
        raise FormulaError(f"in {text!r}: {fname}() takes one vector here "
                           f"(extra arguments such as trim= are not supported)")
    return xs, na_rm


def _flag(node: object | None, default: bool) -> bool:
    if node is None:
        return default
    return node[1] in ("TRUE", "T")  # type: ignore[index]


def evaluate(node: object, get: Callable[[str], np.ndarray], state: dict[str, object],
             fit: bool, n: int) -> Value:
    """Evaluate ``node`` with ``get(column) -> float array`` on ``n`` rows.

    ``state`` holds the parameters of stateful transforms keyed by their R label: filled
    when ``fit`` is true, re-used otherwise (prediction on new data).
    """
    kind = node[0]  # type: ignore[index]
    if kind == "name":
        nm = node[1]  # type: ignore[index]
        if nm in CONSTANTS:
            return Value(np.full((n, 1), CONSTANTS[nm]), [""], nm in ("TRUE", "FALSE", "T", "F"))
        return Value(np.asarray(get(nm), dtype=float).reshape(n, 1), [""])
    if kind == "num":
        return Value(np.full((n, 1), float(node[1])), [""])  # type: ignore[index]
    if kind == "paren":
        return evaluate(node[1], get, state, fit, n)  # type: ignore[index]
    if kind == "unary":
        v = evaluate(node[2], get, state, fit, n)  # type: ignore[index]
        return Value(-v.values if node[1] == "-" else v.values, v.suffixes)  # type: ignore[index]
    if kind == "bin":
        op = node[1]  # type: ignore[index]
        a = evaluate(node[2], get, state, fit, n).values  # type: ignore[index]
        b = evaluate(node[3], get, state, fit, n).values  # type: ignore[index]
        with np.errstate(all="ignore"):
            if op in _COMPARE:
                r = _COMPARE[op](a, b).astype(float)
                r[np.isnan(a) | np.isnan(b)] = np.nan
                return Value(r[:, :1], [""], True)
            if op == "+":
                r = a + b
            elif op == "-":
                r = a - b
            elif op == "*":
                r = a * b
            elif op == "/":
                r = a / b
            elif op == "^":
                r = np.power(a, b)
            elif op == "%%":
                r = a - np.floor(a / b) * b
            else:  # %/%
                r = np.floor(a / b)
        return Value(r[:, :1], [""])
    fname = node[1]  # type: ignore[index]
    label = deparse_expr(node)
    if fname == "I":
        a = _args(node, "I", ("x",), label)
        return evaluate(a["x"], get, state, fit, n)
    if fname == "log":
        a = _args(node, "log", ("x", "base"), label)
        x = evaluate(a["x"], get, state, fit, n).values
        with np.errstate(all="ignore"):
            r = np.log(x)
            if "base" in a:
                r = r / np.log(evaluate(a["base"], get, state, fit, n).values)
        return Value(r, [""])
    if fname in ELEMENTWISE:
        a = _args(node, fname, ("x",), label)
        with np.errstate(all="ignore"):
            return Value(ELEMENTWISE[fname](evaluate(a["x"], get, state, fit, n).values), [""])
    if fname == "scale":
        a = _args(node, "scale", ("x", "center", "scale"), label)
        x = evaluate(a["x"], get, state, fit, n).values[:, 0]
        if fit:
            ok = ~np.isnan(x)
            center = bool(_flag(a.get("center"), True))
            c = float(np.mean(x[ok])) if center else 0.0
            s = 1.0
            if _flag(a.get("scale"), True):
                xc = x[ok] - c
                s = float(np.sqrt(np.sum(xc ** 2) / max(ok.sum() - 1, 1)))
            state[label] = (c, s)
        c, s = state[label]  # type: ignore[misc]
        return Value(((x - c) / s).reshape(n, 1), [""])
    if fname == "poly":
        a = _args(node, "poly", ("x", "degree", "coefs", "raw"), label)
        x = evaluate(a["x"], get, state, fit, n).values[:, 0]
        degree = int(float(a["degree"][1])) if "degree" in a else 1  # type: ignore[index]
        names = [str(d) for d in range(1, degree + 1)]
        if _flag(a.get("raw"), False):
            return Value(np.column_stack([x ** d for d in range(1, degree + 1)]), names)
        if fit:
            if np.isnan(x).any():
                raise FormulaError(f"{label}: missing values are not allowed in poly() (as in R)")
            if len(np.unique(x)) <= degree:
                raise FormulaError(f"{label}: 'degree' must be less than the number of unique "
                                   f"points ({len(np.unique(x))})")
            xbar = float(x.mean())
            xc = x - xbar
            Z = gram_schmidt_powers(xc, degree)
            norm2 = (Z ** 2).sum(axis=0)
            alpha = ((xc[:, None] * Z ** 2).sum(axis=0) / norm2 + xbar)[:degree]
            norm2 = np.concatenate([[1.0], norm2])
            state[label] = (alpha, norm2)
            return Value(Z[:, 1:] / np.sqrt(norm2[2:])[None, :], names)
        alpha, norm2 = state[label]  # type: ignore[misc]
        Z = np.ones((n, degree + 1))
        Z[:, 1] = x - alpha[0]
        for i in range(1, degree):
            Z[:, i + 1] = (x - alpha[i]) * Z[:, i] - (norm2[i + 1] / norm2[i]) * Z[:, i - 1]
        Z = Z / np.sqrt(norm2[1:])[None, :]
        return Value(Z[:, 1:], names)
    if fname in ("bs", "ns"):
        names = (("x", "df", "knots", "degree", "intercept", "Boundary.knots") if fname == "bs"
                 else ("x", "df", "knots", "intercept", "Boundary.knots"))
        a = _args(node, fname, names, label)
        x = evaluate(a["x"], get, state, fit, n).values[:, 0]
        if fit:
            num = lambda k: _numbers(a[k], label, k) if k in a else None  # noqa: E731
            df = num("df")
            deg = num("degree")
            bnd = num("Boundary.knots")
            state[label] = fit_basis(
                fname, x, df=None if df is None else int(df[0]), knots=num("knots"),
                degree=3 if deg is None else int(deg[0]), intercept=_flag(a.get("intercept"), False),
                boundary=None if bnd is None else (bnd[0], bnd[1]))
        basis = state[label].basis(x)  # type: ignore[attr-defined]
        return Value(basis, [str(j) for j in range(1, basis.shape[1] + 1)])
    if fname in SUMMARIES:
        if fit:
            xs, na_rm = _summary_args(node, fname, label)
            vals = np.concatenate([evaluate(v, get, state, fit, n).values[:, 0] for v in xs])
            if na_rm:
                vals = vals[~np.isnan(vals)]
            elif np.isnan(vals).any():
                cols = ", ".join(repr(c) for v in xs for c in expression_columns(v))
                raise FormulaError(f"{label} is NA because {cols} has missing values (R would then "
                                   f"drop every row); write {fname}(..., na.rm = TRUE)")
            if len(vals) == 0:
                raise FormulaError(f"{label}: no non-missing values")
            state[label] = SUMMARIES[fname](vals)
        return Value(np.full((n, 1), float(state[label])), [""])  # type: ignore[arg-type]
    raise FormulaError(f"function {fname}() is not supported; {_supported_text()}")  # pragma: no cover


def factor_source(node: object, data: pd.DataFrame, get: Callable[[str], np.ndarray],
                  state: dict[str, object], fit: bool) -> pd.Series:
    """The values that ``factor(e)`` / ``ordered(e)`` turns into a factor: the column
    itself for ``factor(column)`` (strings stay strings, numbers sort numerically),
    otherwise the evaluated expression (a comparison gives booleans)."""
    arg = node[2][0]  # type: ignore[index]
    while arg[0] == "paren":  # type: ignore[index]
        arg = arg[1]  # type: ignore[index]
    if arg[0] == "name" and arg[1] not in CONSTANTS:  # type: ignore[index]
        return data[arg[1]]  # type: ignore[index]
    v = evaluate(arg, get, state, fit, len(data))
    vals = v.values[:, 0]
    if v.logical:
        return pd.Series(pd.array([None if np.isnan(t) else bool(t) for t in vals], dtype="boolean"),
                         index=data.index)
    return pd.Series(vals, index=data.index)
