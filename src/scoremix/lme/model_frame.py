r"""Model frame and design matrices: formula + data → :class:`~scoremix.lme.spec.ModelSpec`.

This is R's ``model.frame`` + ``model.matrix`` + ``lme4::mkReTrms`` for the linear mixed
model

.. math::

    y = X\beta + \sum_{k=1}^{K} Z_k b_k + \varepsilon,\qquad
    (Z_k)_{i,\,(j, l)} = 1\{g_k(i) = j\}\, (X_k)_{i l},

where ``X`` is the fixed-effects model matrix (treatment contrasts, R's column names and
order, rank-deficient columns dropped as lme4 does), and term ``k`` has grouping factor
``g_k`` and raw model matrix ``X_k`` (``p_k`` columns); ``Z_k`` is the row-wise
Khatri–Rao product of the indicator matrix of ``g_k`` with ``X_k`` (not formed here:
the spec stores ``codes`` and ``X_k``).

Encodings follow R:

* numeric columns are numeric; ``bool``/``object``/``str``/``category`` columns are
  factors.  Levels are the sorted distinct values (code-point order, like R in the C
  locale; numbers numerically), or the category order of a pandas ``Categorical``;
  unused levels are dropped; ``bool`` levels are ``FALSE``/``TRUE``.
* a factor in a term is coded by contrasts (levels 2…K, column ``labelspoof``) when the
  term without that factor is contained in an earlier term (the intercept counts as the
  empty term), otherwise by indicators of all K levels; without an intercept the first
  factor of the first term holding one is coded by all K indicators (R's ``TermCode``).
* an interaction column is the row-wise product, first variable varying fastest
  (``a2:b2, a3:b2, a2:b3, a3:b3``).
* grouping interactions ``g1:g2`` have levels ``"u:v"`` ordered by (level of ``g1``,
  level of ``g2``), unused combinations dropped (lme4's ``%i%``).
* random terms are reordered like ``mkReTrms``: if the numbers of levels ever increase
  along the formula, the order becomes ``rev(order(n_levels))`` (decreasing, ties in
  reverse formula order); grouping names of repeated factors are made unique
  (``g``, ``g.1``) in that final order, as ``VarCorr`` prints them.
"""

from __future__ import annotations

import difflib
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import pandas as pd

from scoremix.lme.errors import (
    FormulaError,
    GroupingError,
    LmeError,
    MissingValueError,
    NewLevelError,
    SCALE_MESSAGE,
    RankDeficiencyWarning,
    ResponseError,
    ScaleWarning,
    UnknownColumnError,
    rank_deficient_message,
)
from scoremix.lme.contrasts import contrast_matrix, normalize_contrast
from scoremix.lme.formula import (
    ParsedFormula,
    RandomPart,
    TermSet,
    Variable,
    parse_dispersion,
    parse_formula,
    parse_one_sided,
)
from scoremix.lme.spec import FixedTerms, ModelSpec, RandomTerm
from scoremix.lme.transforms import Value, evaluate, factor_source

__all__ = ["build_model_spec", "model_matrix", "badly_scaled", "fixed_terms_of", "rank_keep_columns",
           "RANK_TOL"]

#: lme4's tolerance for ``qr(X, tol = 1e-7, LAPACK = FALSE)`` in ``chkRank.drop.cols``.
RANK_TOL = 1e-7


# --------------------------------------------------------------------------- factors
def _r_format(value: Any) -> str:
    """R's ``as.character`` of a factor level value."""
    if isinstance(value, (bool, np.bool_)):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (float, np.floating)):
        f = float(value)
        if f.is_integer() and abs(f) < 1e15:
            return str(int(f))
        return format(f, ".15g")
    return str(value)


def _is_factor_dtype(dtype: Any) -> bool:
    return not (pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype))


@dataclass
class _Factor:
    """A column coded as an R factor on the rows of the model frame.

    ``codes[i]`` is the 0-based level of row ``i``; ``levels`` are R's labels;
    ``uniques`` holds the raw values of the levels (same order) to code new data.
    """

    column: str
    codes: np.ndarray
    levels: list[str]
    uniques: pd.Index
    ordered: bool = False

    @property
    def n_levels(self) -> int:
        return len(self.levels)

    def map(self, values: pd.Series) -> np.ndarray:
        """Codes of new values, ``-1`` for missing or unseen ones."""
        return self.uniques.get_indexer(values).astype(np.int64, copy=False)


def _raw_codes(values: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """Codes (``-1`` = missing) and level values of a column, in R's level order."""
    dtype = values.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        return values.cat.codes.to_numpy().astype(np.int64), pd.Index(values.cat.categories)
    if pd.api.types.is_bool_dtype(dtype):
        na = values.isna().to_numpy()
        b = values.to_numpy(dtype=bool, na_value=False)
        codes = b.astype(np.int64)
        codes[na] = -1
        return codes, pd.Index([False, True], dtype=object)
    try:
        codes, uniques = pd.factorize(values, sort=True)
    except TypeError:  # mixed types that cannot be sorted together
        na = values.isna().to_numpy()
        codes, uniques = pd.factorize(values.astype(str), sort=True)
        codes = np.where(na, -1, codes)
    return np.asarray(codes, dtype=np.int64), pd.Index(uniques)


def _is_ordered(values: pd.Series) -> bool:
    return isinstance(values.dtype, pd.CategoricalDtype) and bool(values.cat.ordered)


def _compact(column: str, codes: np.ndarray, uniques: pd.Index, ordered: bool = False) -> _Factor:
    """Drop unused levels (R's ``drop.unused.levels``); ``codes`` must be NA-free."""
    present = np.bincount(codes, minlength=len(uniques)) > 0
    if not present.all():
        remap = np.cumsum(present) - 1
        codes = remap[codes]
        uniques = uniques[present]
    levels = [_r_format(u) for u in uniques]
    return _Factor(column, codes, levels, uniques, ordered)


# --------------------------------------------------------------------------- frame
class _Frame:
    """Lazy, cached access to the used columns on the kept rows.

    Factor columns are coded once on all rows (their missing values then come for free
    from the codes) and subset to the kept rows on demand.
    """

    def __init__(self, data: pd.DataFrame):
        self.data = data
        self.rows: np.ndarray | None = None  # None = all rows
        self._numeric: dict[str, np.ndarray] = {}
        self._raw: dict[str, tuple[np.ndarray, pd.Index]] = {}
        self._factor: dict[str, _Factor] = {}
        # expression variables evaluated on ALL rows (as R's model.frame, before na.omit)
        self.state: dict[str, object] = {}
        self._expr: dict[str, Value] = {}
        self._expr_factor: dict[str, pd.Series] = {}
        self._ordered: dict[str, bool] = {}

    def full_numeric(self, column: str) -> np.ndarray:
        """A numeric column on all rows, for evaluating an expression."""
        if column not in self.data.columns:
            raise _unknown_column(column, self.data)
        s = self.data[column]
        if pd.api.types.is_bool_dtype(s.dtype):
            return s.astype(float).to_numpy()
        if _is_factor_dtype(s.dtype):
            raise FormulaError(f"column {column!r} is used in an arithmetic expression but is not "
                               f"numeric (dtype {s.dtype})")
        return s.to_numpy(dtype=np.float64, na_value=np.nan)

    def evaluate(self, var: Variable) -> None:
        """Evaluate an ``expr``/``factor`` variable on all rows (once)."""
        if var.label in self._expr or var.label in self._expr_factor:
            return
        if var.kind == "factor":
            src = factor_source(var.expr, self.data, self.full_numeric, self.state, True)
            fname = var.expr[1]  # type: ignore[index]
            self._ordered[var.label] = fname in ("ordered", "as.ordered") or (
                fname == "factor" and _is_ordered(src))
            self._expr_factor[var.label] = src
            self._raw[var.label] = _raw_codes(src)
        else:
            val = evaluate(var.expr, self.full_numeric, self.state, True, len(self.data))
            if val.logical:
                src = pd.Series(pd.array([None if np.isnan(t) else bool(t) for t in val.values[:, 0]],
                                         dtype="boolean"), index=self.data.index)
                self._expr_factor[var.label] = src
                self._raw[var.label] = _raw_codes(src)
                self._ordered[var.label] = False
            else:
                self._expr[var.label] = val

    def expr_missing(self, label: str) -> np.ndarray:
        if label in self._expr:
            return np.isnan(self._expr[label].values).any(axis=1)
        return self._raw[label][0] < 0

    def expr_is_factor(self, label: str) -> bool:
        return label in self._expr_factor

    def expr_value(self, label: str) -> Value:
        v = self._expr[label]
        if self.rows is None:
            return v
        return Value(v.values[self.rows], v.suffixes, v.logical)

    def missing(self, column: str) -> np.ndarray:
        """Boolean mask of missing values of a column on all rows."""
        if self.is_factor(column):
            return self.raw(column)[0] < 0
        return self.data[column].isna().to_numpy()

    def raw(self, column: str) -> tuple[np.ndarray, pd.Index]:
        if column not in self._raw:
            self._raw[column] = _raw_codes(self.data[column])
        return self._raw[column]

    def series(self, column: str) -> pd.Series:
        s = self.data[column]
        return s if self.rows is None else s.iloc[self.rows]

    def numeric(self, column: str) -> np.ndarray:
        if column not in self._numeric:
            s = self.series(column)
            if _is_factor_dtype(s.dtype):
                raise FormulaError(f"column {column!r} is not numeric (dtype {s.dtype})")
            self._numeric[column] = s.to_numpy(dtype=np.float64)
        return self._numeric[column]

    def factor(self, column: str) -> _Factor:
        """The factor of a column, or of an evaluated ``factor(e)``/logical variable
        (keyed by its label)."""
        if column not in self._factor:
            codes, uniques = self.raw(column)
            if self.rows is not None:
                codes = codes[self.rows]
            ordered = (self._ordered[column] if column in self._ordered
                       else _is_ordered(self.data[column]))
            self._factor[column] = _compact(column, codes, uniques, ordered)
        return self._factor[column]

    def is_factor(self, column: str) -> bool:
        return _is_factor_dtype(self.data[column].dtype)


# --------------------------------------------------------------------------- terms → X
@dataclass
class _VarCode:
    """How one variable enters the design: numeric, dummy indicator, or factor."""

    var: Variable
    kind: str  # "numeric" | "dummy" | "factor" | "matrix" (an evaluated expression)
    factor: _Factor | None = None
    level_index: int = -1
    suffixes: list[str] = field(default_factory=list)
    contrast: np.ndarray | None = None  # K x (K-1) contrast matrix of a factor
    contrast_names: list[str] = field(default_factory=list)


@dataclass
class _Design:
    """Everything needed to rebuild a model matrix on new data."""

    termset: TermSet
    codes: dict[str, _VarCode]
    # per term: list of (variable label, coding 1 = contrasts / 2 = indicators / 0 numeric)
    coding: list[list[tuple[str, int]]]
    names: list[str] = field(default_factory=list)
    state: dict[str, object] = field(default_factory=dict)  # poly/scale parameters


def _contrast_for(v: Variable, fac: _Factor, contrasts: dict[str, str] | None) -> tuple[np.ndarray, list[str]]:
    """R's choice: ``contrasts[name]`` if given (by column or label), else
    ``contr.poly`` for an ordered factor and ``contr.treatment`` otherwise."""
    name = None
    if contrasts:
        name = contrasts.get(v.label, contrasts.get(v.column) if v.kind == "column" else None)
    if name is None:
        name = "contr.poly" if fac.ordered else "contr.treatment"
    else:
        name = normalize_contrast(name, f"factor {v.label!r}")
    if fac.n_levels < 2:
        return np.zeros((fac.n_levels, 0)), []
    return contrast_matrix(name, fac.levels)


def _var_codes(termset: TermSet, frame: _Frame,
               contrasts: dict[str, str] | None = None) -> dict[str, _VarCode]:
    out: dict[str, _VarCode] = {}
    for v in termset.variables:
        if v.kind in ("expr", "factor"):
            frame.evaluate(v)
            if frame.expr_is_factor(v.label):
                fac = frame.factor(v.label)
                C, cn = _contrast_for(v, fac, contrasts)
                out[v.label] = _VarCode(v, "factor", fac, contrast=C, contrast_names=cn)
            else:
                out[v.label] = _VarCode(v, "matrix", suffixes=list(frame.expr_value(v.label).suffixes))
            continue
        if v.level is not None:
            fac = frame.factor(v.column)
            if v.level not in fac.levels:
                raise FormulaError(
                    f"{v.label}: level {v.level!r} is not a level of column {v.column!r} "
                    f"(levels: {_short_list(fac.levels)})"
                )
            out[v.label] = _VarCode(v, "dummy", fac, fac.levels.index(v.level))
        elif frame.is_factor(v.column):
            fac = frame.factor(v.column)
            C, cn = _contrast_for(v, fac, contrasts)
            out[v.label] = _VarCode(v, "factor", fac, contrast=C, contrast_names=cn)
        else:
            frame.numeric(v.column)
            out[v.label] = _VarCode(v, "numeric")
    return out


def _term_coding(termset: TermSet, codes: dict[str, _VarCode]) -> list[list[tuple[str, int]]]:
    """R's ``TermCode``: 1 = contrasts, 2 = full indicator coding (0 for numerics)."""
    terms = [frozenset(t) for t in termset.terms]
    coding: list[list[tuple[str, int]]] = []
    for j, t in enumerate(termset.terms):
        row = []
        for i in t:
            label = termset.variables[i].label
            if codes[label].kind != "factor":
                row.append((label, 0))
                continue
            rest = terms[j] - {i}
            contrast = (not rest) or any(rest <= prev for prev in terms[:j])
            row.append((label, 1 if contrast else 2))
        coding.append(row)
    if not termset.intercept:
        for row in coding:
            hit = next((k for k, (_, c) in enumerate(row) if c > 0), None)
            if hit is not None:
                row[hit] = (row[hit][0], 2)
                break
    return coding


def _variable_block(
    vc: _VarCode, coding: int, values: np.ndarray
) -> tuple[np.ndarray, list[str]]:
    """Columns of one variable: ``values`` is the numeric column or the factor codes
    (``-1`` = missing → NaN row)."""
    label = vc.var.label
    if vc.kind == "numeric":
        return values.reshape(-1, 1), [label]
    if vc.kind == "matrix":
        return values, [label + sfx for sfx in vc.suffixes]
    if vc.kind == "dummy":
        col = (values == vc.level_index).astype(np.float64)
        if (values < 0).any():
            col[values < 0] = np.nan
        return col.reshape(-1, 1), [label]
    fac = vc.factor
    assert fac is not None
    start = 1 if coding == 1 else 0
    if coding == 1 and fac.n_levels < 2:
        raise FormulaError(
            f"factor {vc.var.column!r} has only one level ({_short_list(fac.levels)}) among "
            "the used rows: contrasts can be applied only to factors with 2 or more levels"
        )
    if coding == 1 and vc.contrast is not None:
        block = vc.contrast[np.clip(values, 0, None)].astype(np.float64)
        if (values < 0).any():
            block[values < 0] = np.nan
        return block, [label + sfx for sfx in vc.contrast_names]
    lev = np.arange(start, fac.n_levels)
    block = (values[:, None] == lev[None, :]).astype(np.float64)
    if (values < 0).any():
        block[values < 0] = np.nan
    return block, [label + fac.levels[k] for k in lev]


def _build(design: _Design, values: dict[str, np.ndarray], n: int) -> tuple[np.ndarray, list[str]]:
    """Assemble the model matrix (R's column order and names)."""
    blocks: list[np.ndarray] = []
    names: list[str] = []
    if design.termset.intercept:
        blocks.append(np.ones((n, 1)))
        names.append("(Intercept)")
    for row in design.coding:
        block: np.ndarray | None = None
        bnames: list[str] = []
        for label, code in row:
            b, bn = _variable_block(design.codes[label], code, values[label])
            if block is None:
                block, bnames = b, bn
            else:  # first variable varies fastest
                m = block.shape[1]
                block = (b[:, :, None] * block[:, None, :]).reshape(n, b.shape[1] * m)
                bnames = [f"{p}:{q}" for q in bn for p in bnames]
        assert block is not None
        blocks.append(block)
        names.extend(bnames)
    if not blocks:
        return np.zeros((n, 0)), []
    X = np.concatenate(blocks, axis=1) if len(blocks) > 1 else np.ascontiguousarray(blocks[0])
    return X, names


def _fitted_values(design: _Design, frame: _Frame) -> dict[str, np.ndarray]:
    out = {}
    for label, vc in design.codes.items():
        if vc.kind == "numeric":
            out[label] = frame.numeric(vc.var.column)
        elif vc.kind == "matrix":
            out[label] = frame.expr_value(label).values
        else:
            assert vc.factor is not None
            out[label] = vc.factor.codes
    return out


def _new_numeric(newdata: pd.DataFrame) -> Any:
    def get(column: str) -> np.ndarray:
        if column not in newdata.columns:
            raise _unknown_column(column, newdata)
        s = newdata[column]
        if pd.api.types.is_bool_dtype(s.dtype):
            return s.astype(float).to_numpy()
        if _is_factor_dtype(s.dtype):
            raise FormulaError(f"column {column!r} of new data is not numeric (dtype {s.dtype})")
        return s.to_numpy(dtype=np.float64, na_value=np.nan)
    return get


def _new_values(design: _Design, newdata: pd.DataFrame, *, strict: bool) -> dict[str, np.ndarray]:
    out = {}
    for label, vc in design.codes.items():
        for col in vc.var.columns:
            if col not in newdata.columns:
                raise _unknown_column(col, newdata)
        col = vc.var.column
        if vc.kind == "matrix":  # same transform, poly/scale parameters of the fit
            out[label] = evaluate(vc.var.expr, _new_numeric(newdata), design.state, False,
                                  len(newdata)).values
            continue
        if vc.var.kind == "expr":  # a logical expression: FALSE/TRUE factor
            v = evaluate(vc.var.expr, _new_numeric(newdata), design.state, False, len(newdata))
            s = pd.Series(pd.array([None if np.isnan(t) else bool(t) for t in v.values[:, 0]],
                                   dtype="boolean"), index=newdata.index)
        elif vc.var.kind == "factor":
            s = factor_source(vc.var.expr, newdata, _new_numeric(newdata), design.state, False)
        else:
            s = newdata[col]
        if vc.kind == "numeric":
            if _is_factor_dtype(s.dtype):
                raise FormulaError(f"column {col!r} of new data is not numeric (dtype {s.dtype})")
            out[label] = s.to_numpy(dtype=np.float64, na_value=np.nan)
            continue
        assert vc.factor is not None
        codes = vc.factor.map(s)
        if vc.kind == "dummy":  # an unseen level is simply not the dummy's level
            codes = np.where((codes < 0) & ~s.isna().to_numpy(), vc.factor.n_levels, codes)
        elif strict:
            bad = (codes < 0) & ~s.isna().to_numpy()
            if bad.any():
                unseen = pd.unique(s[bad])
                raise NewLevelError(
                    f"column {col!r} of new data has level(s) {_short_list([_r_format(u) for u in unseen])} "
                    f"not seen in fitting (levels: {_short_list(vc.factor.levels)})"
                )
        out[label] = codes
    return out


def _design_matrix(termset: TermSet, frame: _Frame,
                   contrasts: dict[str, str] | None = None) -> tuple[np.ndarray, list[str], _Design]:
    """Model matrix of a term set on the frame (R's ``model.matrix``)."""
    codes = _var_codes(termset, frame, contrasts)
    design = _Design(termset, codes, _term_coding(termset, codes), state=frame.state)
    X, names = _build(design, _fitted_values(design, frame), _frame_n(frame))
    design.names = names
    return X, names, design


def _frame_n(frame: _Frame) -> int:
    return len(frame.data) if frame.rows is None else len(frame.rows)


# --------------------------------------------------------------------------- rank
def badly_scaled(X: np.ndarray, tol: float = 1e3) -> bool:
    """lme4's ``checkScaleX``: among the columns of ``X`` that are not all 0/1, is any
    standard deviation ``s_j`` outside ``[1/tol, tol]`` or any ratio ``s_j/s_k`` outside
    ``[1/tol, tol]``?  (Constant columns other than 0/1 have ``s = 0`` and count as badly
    scaled, as in R.)"""
    if X.shape[1] == 0:
        return False
    cont = ~((X == 0.0) | (X == 1.0)).all(axis=0)
    if not cont.any():
        return False
    sd = X[:, cont].std(axis=0, ddof=1) if X.shape[0] > 1 else np.zeros(int(cont.sum()))
    with np.errstate(divide="ignore"):
        logsd = np.log(sd)
    if np.any(~np.isfinite(logsd)):
        return True
    lim = np.log(tol)
    return bool(np.any(np.abs(logsd) > lim) or (logsd.max() - logsd.min()) > lim)



def gram_clearly_full_rank(G: np.ndarray) -> bool:
    """``True`` when the Gram matrix ``G = X'X`` is clearly of full rank: every column is
    non-zero and finite and the Cholesky factor of the unit-diagonal scaled ``G`` has all
    pivots² > 1e-8 (the quick answer of lme4's rank check; anything else needs the greedy rule)."""
    d = np.diag(G)
    if not (np.all(d > 0) and np.all(np.isfinite(G))):
        return False
    s = 1.0 / np.sqrt(d)
    try:
        L = np.linalg.cholesky(G * s[:, None] * s[None, :])
    except np.linalg.LinAlgError:
        return False
    return bool(np.min(np.diag(L)) ** 2 > 1e-8)


def rank_keep_columns(X: np.ndarray, tol: float = RANK_TOL) -> np.ndarray:
    """Indices of the columns lme4 keeps for a rank-deficient ``X``.

    R's ``qr(X, tol, LAPACK = FALSE)`` (LINPACK ``dqrdc2``) moves a column to the end
    when its norm after orthogonalisation against the columns kept before it falls
    below ``tol`` times its original norm (a zero column always); lme4 keeps the first
    ``rank`` pivots. This is the greedy rule: keep column ``j`` iff

    .. math:: \\lVert (I - P_{K_j}) x_j \\rVert \\ge \\mathrm{tol}\\,\\lVert x_j \\rVert,

    with :math:`P_{K_j}` the projection on the kept columns before ``j``. A Cholesky
    factor of the scaled Gram matrix answers quickly when ``X`` is clearly of full rank;
    otherwise Gram–Schmidt with re-orthogonalisation on ``X`` itself decides.
    """
    n, p = X.shape
    if p == 0:
        return np.arange(0)
    if gram_clearly_full_rank(X.T @ X):
        return np.arange(p)
    keep: list[int] = []
    Q = np.zeros((n, 0))
    for j in range(p):
        x = X[:, j]
        nx = float(np.linalg.norm(x))
        if nx == 0.0 or not np.isfinite(nx):
            continue
        v = x.copy()
        for _ in range(2):
            if Q.shape[1]:
                v -= Q @ (Q.T @ v)
        nv = float(np.linalg.norm(v))
        if nv >= tol * nx:
            keep.append(j)
            Q = np.column_stack([Q, v / nv])
    return np.asarray(keep, dtype=np.int64)


# --------------------------------------------------------------------------- groups
@dataclass
class _Grouping:
    """A grouping factor (a column or an interaction of columns, lme4's ``%i%``)."""

    name: str
    columns: tuple[str, ...]
    factors: list[_Factor]
    steps: list[np.ndarray]  # per combining step: sorted present keys
    codes: np.ndarray
    levels: list[str]

    def map(self, newdata: pd.DataFrame) -> np.ndarray:
        """Codes of new rows (``-1`` for an unseen level or combination, or NA)."""
        for col in self.columns:
            if col not in newdata.columns:
                raise _unknown_column(col, newdata)
        codes = self.factors[0].map(newdata[self.columns[0]])
        for k in range(1, len(self.columns)):
            nb = self.factors[k].n_levels
            c2 = self.factors[k].map(newdata[self.columns[k]])
            key = codes * nb + c2
            present = self.steps[k - 1]
            pos = np.searchsorted(present, key)
            pos_c = np.minimum(pos, len(present) - 1)
            ok = (codes >= 0) & (c2 >= 0) & (present[pos_c] == key)
            codes = np.where(ok, pos_c, -1).astype(np.int64)
        return codes


def _grouping(name: str, columns: tuple[str, ...], frame: _Frame) -> _Grouping:
    factors = [frame.factor(c) for c in columns]
    codes = factors[0].codes
    labels = factors[0].levels
    steps: list[np.ndarray] = []
    n = len(codes)
    for fac in factors[1:]:
        nb = fac.n_levels
        key = codes * nb + fac.codes
        size = len(labels) * nb
        if size <= max(4 * n, 1 << 20):
            present = np.flatnonzero(np.bincount(key, minlength=size))
            remap = np.full(size, -1, dtype=np.int64)
            remap[present] = np.arange(len(present))
            codes = remap[key]
        else:
            present, codes = np.unique(key, return_inverse=True)
            codes = codes.astype(np.int64).ravel()
        steps.append(present)
        a, b = np.divmod(present, nb)
        labels = [f"{labels[i]}:{fac.levels[j]}" for i, j in zip(a.tolist(), b.tolist())]
    return _Grouping(name, columns, factors, steps, np.asarray(codes, dtype=np.int64), list(labels))


def _make_unique(names: list[str]) -> list[str]:
    """R's ``make.unique``: repeated names get ``.1``, ``.2``, …"""
    used = set(names)
    count: dict[str, int] = {}
    seen: set[str] = set()
    out = []
    for nm in names:
        if nm not in seen:
            seen.add(nm)
            out.append(nm)
            continue
        k = count.get(nm, 0)
        while True:
            k += 1
            cand = f"{nm}.{k}"
            if cand not in used:
                break
        count[nm] = k
        used.add(cand)
        out.append(cand)
    return out


# --------------------------------------------------------------------------- helpers
def _short_list(items: Iterable[Any], k: int = 8) -> str:
    items = list(items)
    head = ", ".join(repr(x) if isinstance(x, str) else str(x) for x in items[:k])
    return head + (f", … ({len(items)} in all)" if len(items) > k else "")


def _unknown_column(column: str, data: pd.DataFrame) -> UnknownColumnError:
    cols = [str(c) for c in data.columns]
    close = difflib.get_close_matches(column, cols, n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return UnknownColumnError(
        f"column {column!r} is not in the data{hint} (available: {_short_list(cols, 20)})",
        column,
        cols,
    )


def _row_labels(data: pd.DataFrame, mask: np.ndarray, k: int = 5) -> str:
    idx = np.flatnonzero(mask)
    labels = [str(x) for x in data.index[idx[:k]]]
    return ", ".join(labels) + (f", … ({len(idx)} rows)" if len(idx) > k else "")


# --------------------------------------------------------------------------- main
def _column_or_rows(arg: Any, name: str, n_rows: int) -> tuple[str | None, np.ndarray | None]:
    """A ``weights=``/``offset=`` argument as ``(column name, None)``, ``(None, per-row
    float array)`` or ``(None, None)``; an array must have one entry per data row."""
    if arg is None:
        return None, None
    if isinstance(arg, str):
        return arg, None
    values = np.asarray(arg, dtype=np.float64).ravel()
    if values.shape[0] != n_rows:
        raise ValueError(f"{name} has length {values.shape[0]}, data has {n_rows} rows")
    return None, values


def check_nobs_vs_random_effects(nlevels: dict[str, int], term_q: list[tuple[str, int]], n: int,
                                 glmm: bool = False) -> None:
    """lme4's ``check.nobs.vs.nlev`` and ``check.nobs.vs.nRE`` (``checkNlevels``, ``checkZdims``):
    every grouping factor has fewer levels than the ``n`` observations, and every random term
    has fewer random effects ``q = levels × columns`` than observations; else
    :class:`GroupingError`.  A named stage of :func:`build_model_spec`, skipped with
    ``check_nobs=False`` (the Dask route applies it to the global counts,
    :mod:`scoremix.distributed.checks`, and builds its encoders from a small prototype).
    ``glmm=True`` applies glmer's looser defaults: levels may equal the observations
    (``check.nlev.gtr.1``/``nobs.vs.nlev`` "ignore"-ish for e.g. ``(1|obs)``) and the number of
    random effects is not checked against the observations (no residual variance)."""
    many = [f for f, k in nlevels.items() if (k > n if glmm else k >= n)]
    if many:
        raise GroupingError(
            "number of levels of each grouping factor must be < number of observations "
            f"(problems: {', '.join(many)})"
        )
    for label, q in term_q:
        if n <= q and not glmm:
            raise GroupingError(
                f"number of observations (={n}) <= number of random effects (={q}) for term "
                f"({label}); the random-effects parameters and the residual variance "
                "(or scale parameter) are probably unidentifiable"
            )


def build_model_spec(
    formula: str,
    data: pd.DataFrame,
    *,
    weights: str | np.ndarray | pd.Series | None = None,
    dispersion: str | None = None,
    na_action: str = "omit",
    contrasts: dict[str, str] | None = None,
    offset: str | np.ndarray | pd.Series | None = None,
    check_nobs: bool = True,
    glmm: bool = False,
) -> ModelSpec:
    r"""Build the :class:`~scoremix.lme.spec.ModelSpec` of an lme4 formula on a data frame.

    ``glmm=True`` applies ``glmerControl``'s identifiability checks instead of
    ``lmerControl``'s (a grouping factor may have as many levels as observations, e.g. an
    observation-level random effect, and the number of random effects may reach ``n``).

    The model is :math:`y = X\beta + \sum_k Z_k b_k + \varepsilon` with
    :math:`\varepsilon_i \sim N(0, \sigma^2_{c(i)} / w_i)` (``c(i)`` the dispersion level,
    one level when ``dispersion`` is ``None``; ``w`` the prior weights).

    Parameters
    ----------
    formula:
        lme4 formula, e.g. ``"score ~ label * x + (1 | speaker) + (1 | attack)"``
        (see :func:`scoremix.lme.formula.parse_formula` for the syntax).
    data:
        one row per trial.
    weights:
        prior weights :math:`w_i \ge 0`: a column name or an array of ``len(data)``.
    dispersion:
        one-sided formula with one factor, ``"~ label"``, for a class-specific residual
        variance; ``None`` for a common one.
    na_action:
        ``"omit"`` drops rows with a missing value in any used column (with a
        ``UserWarning``), ``"fail"`` raises :class:`MissingValueError`.
    contrasts:
        ``{factor: coding}`` for the fixed effects, as lme4's ``contrasts=``: codings
        ``"contr.treatment"`` (default for unordered factors), ``"contr.poly"`` (default for
        ordered ones), ``"contr.sum"``, ``"contr.helmert"``, ``"contr.SAS"``.  Keys are
        column names or variable labels (``"factor(x)"``).  Random-effects terms keep the
        defaults, as in lme4.
    offset:
        a known term with coefficient 1 added to the linear predictor (lme4's ``offset=``):
        a column name or an array of ``len(data)``; added to any ``offset()`` terms of the
        formula.  The model is fitted to ``y - offset`` (``spec.y``); fitted values and
        predictions add it back.
    check_nobs:
        lme4's ``check.nobs.vs.nlev`` / ``check.nobs.vs.nRE`` stage
        (:func:`check_nobs_vs_random_effects`); ``False`` skips it (the Dask route builds its
        encoders from a small prototype frame and checks the global counts instead).

    Returns
    -------
    ModelSpec

    Raises
    ------
    FormulaError, UnknownColumnError, GroupingError, MissingValueError, ResponseError
        with messages naming the column, level or rows at fault.

    Warns
    -----
    RankDeficiencyWarning
        when fixed-effect columns are dropped (lme4's message).
    UserWarning
        when rows with missing values are dropped.
    """
    if not isinstance(data, pd.DataFrame):
        raise TypeError(f"data must be a pandas DataFrame, got {type(data).__name__}")
    if na_action not in ("omit", "fail"):
        raise ValueError(f"na_action must be 'omit' or 'fail', got {na_action!r}")
    parsed: ParsedFormula = parse_formula(formula)
    disp_col = parse_dispersion(dispersion) if dispersion is not None else None
    if contrasts is not None and not isinstance(contrasts, dict):
        raise FormulaError(f"contrasts must be a dict {{factor: 'contr.sum', ...}}, got "
                           f"{type(contrasts).__name__}")

    # ---- columns and weights
    used = parsed.columns
    if disp_col is not None and disp_col not in used:
        used = used + [disp_col]
    weight_col, w_all = _column_or_rows(weights, "weights", len(data))
    offset_col, off_arg = _column_or_rows(offset, "offset", len(data))
    for col in (weight_col, offset_col):
        if col is not None and col not in used:
            used = used + [col]
    for col in used:
        if col not in data.columns:
            raise _unknown_column(col, data)
    for col in parsed.response_columns:
        if _is_factor_dtype(data[col].dtype):
            raise ResponseError(
                f"response {parsed.response!r} must be numeric, but column {col!r} has dtype "
                f"{data[col].dtype}"
            )
    if offset_col is not None and _is_factor_dtype(data[offset_col].dtype):
        raise FormulaError(f"offset column {offset_col!r} must be numeric, got dtype "
                           f"{data[offset_col].dtype}")

    # ---- missing values
    n_all = len(data)
    na_cols: list[str] = []
    na_mask = np.zeros(n_all, dtype=bool)
    frame = _Frame(data)
    # R's model.frame evaluates every variable (log(y), poly(x, 2), …) on all rows, then
    # drops the rows where any of them is missing
    for var in _expression_variables(parsed):
        frame.evaluate(var)
    y_all = (frame.full_numeric(parsed.response) if parsed.response_expr is None else
             evaluate(parsed.response_expr, frame.full_numeric, frame.state, True, n_all).values[:, 0])
    off_all: np.ndarray | None = None
    for node in parsed.offsets:
        o = evaluate(node, frame.full_numeric, frame.state, True, n_all).values[:, 0]
        off_all = o if off_all is None else off_all + o
    if offset_col is not None:
        o = frame.full_numeric(offset_col)
        off_all = o if off_all is None else off_all + o
    if off_arg is not None:
        off_all = off_arg if off_all is None else off_all + off_arg
    checks: list[tuple[str, np.ndarray]] = [(c, frame.missing(c)) for c in used]
    if parsed.response_expr is not None:
        checks.append((parsed.response, np.isnan(y_all)))
    for var in _expression_variables(parsed):
        checks.append((var.label, frame.expr_missing(var.label)))
    if off_all is not None:
        checks.append(("(offset)", np.isnan(off_all)))
    for col, m in checks:
        if m.any():
            if na_action == "fail":
                raise MissingValueError(
                    f"column {col!r} has {int(m.sum())} missing value(s) (rows {_row_labels(data, m)}); "
                    "use na_action='omit' to drop them"
                )
            na_cols.append(col)
            na_mask |= m
    if w_all is not None:
        m = np.isnan(w_all)
        if m.any():
            if na_action == "fail":
                raise MissingValueError(
                    f"weights have {int(m.sum())} missing value(s) (rows {_row_labels(data, m)})"
                )
            na_cols.append("(weights)")
            na_mask |= m
    n_dropped = int(na_mask.sum())
    rows: np.ndarray | None = None
    if n_dropped:
        warnings.warn(
            f"dropped {n_dropped} rows with missing values in columns [{', '.join(na_cols)}]",
            UserWarning,
            stacklevel=2,
        )
        rows = np.flatnonzero(~na_mask)
        if rows.size == 0:
            raise MissingValueError(
                f"no rows left after dropping missing values in columns [{', '.join(na_cols)}]"
            )
    frame.rows = rows
    n = _frame_n(frame)

    # ---- response (minus the offset: the model is y - offset = Xβ + Zb + ε)
    y = y_all if rows is None else y_all[rows]
    off: np.ndarray | None = None
    if off_all is not None:
        off = off_all if rows is None else off_all[rows]
        if not np.all(np.isfinite(off)):
            raise LmeError("the offset has non-finite values (inf)")
    bad = ~np.isfinite(y)
    if bad.any():
        full = np.zeros(n_all, dtype=bool)
        full[np.flatnonzero(bad) if rows is None else rows[bad]] = True
        raise ResponseError(
            f"response {parsed.response!r} has {int(bad.sum())} non-finite value(s) (inf) "
            f"at rows {_row_labels(data, full)}"
        )

    # ---- weights
    w: np.ndarray | None = None
    if weight_col is not None:
        w = frame.numeric(weight_col).copy()
    elif w_all is not None:
        w = w_all if rows is None else w_all[rows]
    if w is not None:
        if not np.all(np.isfinite(w)):
            raise LmeError("weights must be finite")
        if np.any(w < 0):
            raise LmeError("negative weights are not allowed")

    # ---- fixed effects
    if off is not None:
        y = y - off
    X_full, names_full, fdesign = _design_matrix(parsed.fixed, frame, contrasts)
    _check_contrast_keys(contrasts, fdesign)
    for j, nm in enumerate(names_full):
        col = X_full[:, j]
        if not np.all(np.isfinite(col)):
            raise LmeError(f"fixed-effect column {nm!r} has non-finite values (NaN/inf)")
    keep = rank_keep_columns(X_full)
    dropped: list[str] = []
    if keep.size < X_full.shape[1]:
        dropped = [names_full[j] for j in range(X_full.shape[1]) if j not in set(keep.tolist())]
        X = np.ascontiguousarray(X_full[:, keep])
        warnings.warn(rank_deficient_message(len(dropped), dropped), RankDeficiencyWarning, stacklevel=2)
    else:
        X = X_full
    fixef_names = [names_full[j] for j in keep]
    if badly_scaled(X):
        warnings.warn(SCALE_MESSAGE, ScaleWarning, stacklevel=2)

    # ---- random effects
    groupings: dict[tuple[str, ...], _Grouping] = {}
    parts = []
    for rp in parsed.random:
        key = rp.group_columns
        if key not in groupings:
            groupings[key] = _grouping(rp.group, key, frame)
        g = groupings[key]
        Xk, knames, kdesign = _design_matrix(rp.lhs, frame)
        if Xk.shape[1] == 0:
            raise FormulaError(f"random-effects term ({rp.label}) has no columns")
        if not np.all(np.isfinite(Xk)):
            raise LmeError(f"random-effects term ({rp.label}) has non-finite values")
        if rp.structure == "diag":
            # lme4 2.0's diag(): one scalar term per model-matrix column (independent
            # variances, no correlations); a column picks its part of the term's matrix
            for j, nm in enumerate(knames):
                lab = "1" if nm == "(Intercept)" else f"0 + {nm}"
                sub = RandomPart(rp.lhs, rp.group_columns, rp.group, f"{lab} | {rp.group}",
                                 "diag")
                parts.append((sub, g, np.ascontiguousarray(Xk[:, [j]]), [nm], (kdesign, j)))
            continue
        parts.append((rp, g, Xk, knames, kdesign))
    nl = np.array([len(p[1].levels) for p in parts], dtype=np.int64)
    if len(nl) > 1 and np.any(np.diff(nl) > 0):
        order = np.argsort(nl, kind="stable")[::-1]
        parts = [parts[i] for i in order]
    group_names = _make_unique([p[0].group for p in parts])

    # lme4's checkNlevels over the distinct grouping factors, then checkZdims per term
    flist: dict[str, int] = {}
    for rp, g, *_ in parts:
        flist.setdefault(rp.group, len(g.levels))
    few = [f for f, k in flist.items() if k < 2]
    if few:
        raise GroupingError(
            f"grouping factors must have > 1 sampled level (problems: {', '.join(few)})"
        )
    if check_nobs:
        check_nobs_vs_random_effects(flist, [(rp.label, len(g.levels) * Xk.shape[1]) for rp, g, Xk, *_ in parts], n,
                                     glmm=glmm)

    terms = [
        RandomTerm(
            group=gname,
            group_factor=rp.group,
            term_names=list(knames),
            codes=g.codes,
            levels=list(g.levels),
            X=Xk,
            structure="us" if rp.structure == "diag" else rp.structure,
        )
        for gname, (rp, g, Xk, knames, _) in zip(group_names, parts)
    ]

    # ---- dispersion
    disp_codes = disp_levels = None
    if disp_col is not None:
        if not frame.is_factor(disp_col):
            raise FormulaError(
                f"dispersion formula {dispersion!r}: column {disp_col!r} must be a factor "
                f"(string/category/bool), got dtype {data[disp_col].dtype}"
            )
        fac = frame.factor(disp_col)
        disp_codes, disp_levels = fac.codes, list(fac.levels)

    # ---- prediction closures
    kept = keep.copy()

    def fixed_design(newdata: pd.DataFrame) -> np.ndarray:
        """Fixed-effects matrix of new rows (same encoding; NA → NaN row)."""
        vals = _new_values(fdesign, newdata, strict=True)
        Xn, _ = _build(fdesign, vals, len(newdata))
        return np.ascontiguousarray(Xn[:, kept])

    random_parts = [(g, kd) for (_, g, _, _, kd) in parts]

    def random_design(newdata: pd.DataFrame) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per random term: (group codes, ``-1`` = unseen level; raw term matrix)."""
        out = []
        for g, kd in random_parts:
            col = None
            if isinstance(kd, tuple):            # one column of a diag() term
                kd, col = kd
            vals = _new_values(kd, newdata, strict=True)
            Xn, _ = _build(kd, vals, len(newdata))
            out.append((g.map(newdata), Xn if col is None else Xn[:, [col]]))
        return out

    off_nodes = parsed.offsets
    off_state = frame.state

    def offset_design(newdata: pd.DataFrame) -> np.ndarray:
        """The offset of new rows (``offset()`` terms and a column ``offset=``)."""
        total = np.zeros(len(newdata))
        for node in off_nodes:
            total = total + evaluate(node, _new_numeric(newdata), off_state, False,
                                     len(newdata)).values[:, 0]
        if offset_col is not None:
            total = total + _new_numeric(newdata)(offset_col)
        if off_arg is not None:
            raise FormulaError("the model was fitted with offset= given as an array; pass it as a "
                               "column name (offset='col') to predict on new data")
        return total

    model_cols = list(dict.fromkeys(used))
    mf = data[model_cols] if rows is None else data.iloc[rows][model_cols]
    return ModelSpec(
        formula=formula,
        response=parsed.response,
        y=y,
        X=X,
        fixef_names=fixef_names,
        terms=terms,
        data=mf,
        weights=w,
        n_dropped=n_dropped,
        dropped_fixef=dropped,
        dispersion_formula=dispersion,
        dispersion_codes=disp_codes,
        dispersion_levels=disp_levels,
        fixed_design=fixed_design,
        random_design=random_design,
        offset=off,
        offset_design=offset_design if off is not None else None,
        fixed_terms=fixed_terms_of(fdesign, frame, keep),
    )


def model_matrix(formula: str, data: pd.DataFrame,
                 contrasts: dict[str, str] | None = None) -> pd.DataFrame:
    """R's ``model.matrix(~ rhs, data, contrasts.arg)``: the full fixed-effects design of a
    one-sided formula (no rank-deficient columns dropped), with R's column names, on the
    rows without missing values (index of ``data``).

    Example: ``model_matrix("~ poly(x, 2) + f", d)`` has columns ``(Intercept)``,
    ``poly(x, 2)1``, ``poly(x, 2)2``, ``fb``, ….
    """
    if not isinstance(data, pd.DataFrame):
        raise TypeError(f"data must be a pandas DataFrame, got {type(data).__name__}")
    ts = parse_one_sided(formula)
    frame = _Frame(data)
    na = np.zeros(len(data), dtype=bool)
    for v in ts.variables:
        for col in v.columns:
            if col not in data.columns:
                raise _unknown_column(col, data)
            na |= frame.missing(col)
        if v.kind in ("expr", "factor"):
            frame.evaluate(v)
            na |= frame.expr_missing(v.label)
    if na.any():
        frame.rows = np.flatnonzero(~na)
    X, names, design = _design_matrix(ts, frame, contrasts)
    _check_contrast_keys(contrasts, design)
    index = data.index if frame.rows is None else data.index[frame.rows]
    return pd.DataFrame(X, index=index, columns=names)


def _expression_variables(parsed: ParsedFormula) -> list[Variable]:
    """The ``expr``/``factor`` variables of the fixed and random parts."""
    out: dict[str, Variable] = {}
    for ts in [parsed.fixed] + [r.lhs for r in parsed.random]:
        for v in ts.variables:
            if v.kind in ("expr", "factor"):
                out.setdefault(v.label, v)
    return list(out.values())


def _check_contrast_keys(contrasts: dict[str, str] | None, design: _Design) -> None:
    """Every key of ``contrasts=`` must name a factor of the fixed part (R ignores others
    with a warning; naming the typo is more useful)."""
    if not contrasts:
        return
    factors = {vc.var.label for vc in design.codes.values() if vc.kind == "factor"}
    factors |= {vc.var.column for vc in design.codes.values()
                if vc.kind == "factor" and vc.var.kind == "column"}
    unknown = [k for k in contrasts if k not in factors]
    if unknown:
        raise FormulaError(f"contrasts given for {', '.join(repr(k) for k in unknown)}, which "
                           f"{'is' if len(unknown) == 1 else 'are'} not a factor of the fixed "
                           f"effects (factors: {_short_list(sorted(factors))})")


# --------------------------------------------------------------------------- terms (F tests)
def fixed_terms_of(design: _Design, frame: _Frame, keep: np.ndarray) -> FixedTerms:
    """R's ``terms`` of the fixed part and ``attr(X, "assign")`` of the kept columns
    (see :class:`~scoremix.lme.spec.FixedTerms`)."""
    ts = design.termset
    labels = ts.term_labels()
    assign = _assign(design)
    variables = [[ts.variables[i].label for i in t] for t in ts.terms]
    numeric = {label: _is_numeric_class(vc) for label, vc in design.codes.items()}
    factors = [label for label, vc in design.codes.items() if vc.kind == "factor"]
    treatment = all(_is_treatment(design.codes[f]) for f in factors)

    def term_matrix(label: str) -> tuple[np.ndarray, list[str]]:
        """``model.matrix(~ 0 + label)`` on the model frame."""
        if label not in labels:
            raise FormulaError(f"{label!r} is not a fixed-effects term (terms: {labels})")
        sub = TermSet(intercept=False, variables=ts.variables, terms=(ts.terms[labels.index(label)],))
        X, names, _ = _design_matrix(sub, frame)
        return X, names

    def treatment_design() -> tuple[np.ndarray, list[str], np.ndarray]:
        """The fixed-effects matrix with treatment contrasts for every factor."""
        X, names, d = _design_matrix(ts, frame, {f: "contr.treatment" for f in factors} or None)
        return X, names, _assign(d)

    return FixedTerms(labels=labels, intercept=ts.intercept, variables=variables, numeric=numeric,
                      assign=assign[keep], treatment=treatment, term_matrix=term_matrix,
                      treatment_design=treatment_design)


def _is_numeric_class(vc: _VarCode) -> bool:
    """R's ``dataClasses`` is ``"numeric"``: a numeric column or a one-column expression
    (``log(x)``, ``I(x^2)``); factors, ``dummy()`` and matrices (``poly(x, 2)``,
    ``scale(x)``: ``"nmatrix.k"``) are not."""
    if vc.kind == "numeric":
        return True
    return vc.kind == "matrix" and list(vc.suffixes) == [""] and not vc.var.label.startswith("scale(")


def _is_treatment(vc: _VarCode) -> bool:
    """The factor is coded by ``contr.treatment``."""
    if vc.contrast is None:
        return True
    assert vc.factor is not None
    return bool(np.array_equal(vc.contrast, contrast_matrix("contr.treatment", vc.factor.levels)[0]))


def _assign(design: _Design) -> np.ndarray:
    """R's ``attr(X, "assign")`` of a design: 0 for the intercept, ``k`` for term ``k``."""
    assign = [0] if design.termset.intercept else []
    for k, row in enumerate(design.coding, start=1):
        width = 1
        for label, code in row:
            vc = design.codes[label]
            if vc.kind == "factor":
                assert vc.factor is not None
                if code == 1:
                    width *= (vc.contrast.shape[1] if vc.contrast is not None
                              else vc.factor.n_levels - 1)
                else:
                    width *= vc.factor.n_levels
            elif vc.kind == "matrix":
                width *= len(vc.suffixes)
        assign.extend([k] * width)
    return np.asarray(assign, dtype=np.int64)
