"""The model's encoding with *global* factor levels, and the per-partition sums.

A linear mixed model ``y = Xβ + Zb + ε`` needs, from the rows, only the weighted
cross-products of ``[Z X y]`` (:class:`scoremix.lme.crossprod.CrossProducts`), which are
sums over rows: with the rows split into partitions ``P_1 … P_J``,

.. math::

    [Z\\,X\\,y]'W[Z\\,X\\,y] = \\sum_{j} [Z_j\\,X_j\\,y_j]'W_j[Z_j\\,X_j\\,y_j],

provided every partition codes its factors with the *same* (global) levels.  The encoding
is obtained from the engine itself: :func:`scoremix.lme.model_frame.build_model_spec` is run
on a small *prototype* frame that holds every global level (and every present combination
of an interaction grouping) and random values of the numeric columns, so that its
``fixed_design``/``random_design`` encoders reproduce R's coding; each partition is then
encoded with them (:class:`PartitionEncoder`) and reduced to :class:`PartialSums`:
the cross-products (one slice per dispersion level) plus the column moments used for
lme4's rank and scale checks and for the Bayesian default priors.  Nothing returned from a
partition grows with its number of rows.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from scoremix.bayes.reprosum import FoldedStats, RowBounds, folded_stats, row_bounds
from scoremix.distributed.inputs import DaskInputError
from scoremix.distributed.levels import LevelScan, is_factor_dtype
from scoremix.lme.crossprod import CrossProducts, crossproducts, sum_crossproducts
from scoremix.lme.errors import RankDeficiencyWarning, ResponseError, ScaleWarning
from scoremix.lme.formula import ParsedFormula
from scoremix.lme.model_frame import build_model_spec
from scoremix.lme.spec import ModelSpec, RandomTerm
from scoremix.lme.transforms import evaluate

__all__ = ["PartialSums", "PartitionEncoder", "prototype_frame", "prototype_spec", "add_partials",
           "add_folded", "crossproducts_from_sums"]

_MAX_PROTOTYPE_ROWS = 2_000_000


def _cycle(values: np.ndarray, n: int) -> np.ndarray:
    return values[np.arange(n) % len(values)]


def prototype_frame(meta: pd.DataFrame, parsed: ParsedFormula, scan: LevelScan,
                    used: list[str], factors: list[str], inter: list[str],
                    weight_col: str | None, n_rows: int | None = None, seed: int = 0) -> pd.DataFrame:
    """A small frame with every global level: rows cycle through the interaction tuples, the
    full product of the fixed-effect factors' levels and every other factor's levels;
    numeric columns get standard normal values (weights: 1), so the fixed-effects matrix of
    the prototype has full column rank whenever the global one can."""
    fixed_factors = [v.column for v in parsed.fixed.variables
                     if v.column in factors and v.column not in inter]
    fixed_factors = list(dict.fromkeys(fixed_factors))
    sizes = [len(scan.values[c]) for c in fixed_factors]
    prod = int(np.prod(sizes)) if sizes else 1
    lens = [prod] + [len(v) for v in scan.values.values()]
    if scan.tuples is not None:
        lens.append(len(scan.tuples))
    n = max(max(lens), 8) if n_rows is None else n_rows
    if n > _MAX_PROTOTYPE_ROWS:
        raise DaskInputError(f"the model needs a prototype of {n} rows (levels × combinations); "
                             "too many to encode the design")
    rng = np.random.default_rng(seed)
    cols: dict[str, Any] = {}
    r = np.arange(n)
    radix = r % prod
    for c, k in zip(reversed(fixed_factors), reversed(sizes)):
        cols[c] = scan.values[c][radix % k]
        radix = radix // k
    for c in factors:
        if c in inter or c in cols:
            continue
        cols[c] = _cycle(scan.values[c], n)
    if scan.tuples is not None:
        idx = r % len(scan.tuples)
        for c in inter:
            cols[c] = scan.tuples[c].to_numpy()[idx]
    for c in used:
        if c in cols:
            continue
        cols[c] = np.ones(n) if c == weight_col else rng.standard_normal(n)
    out = pd.DataFrame({c: cols[c] for c in used})
    for c in used:
        dt = meta[c].dtype
        if isinstance(dt, pd.CategoricalDtype):
            cats = scan.categories.get(c) or list(dt.categories)
            if not set(pd.unique(out[c])) <= set(cats):
                cats = sorted(pd.unique(out[c]), key=str)
            out[c] = pd.Categorical(out[c], categories=cats, ordered=dt.ordered)
        elif pd.api.types.is_bool_dtype(dt):
            out[c] = out[c].astype(bool)
        elif not is_factor_dtype(dt):
            out[c] = out[c].astype(np.float64)
    return out


def prototype_spec(formula: str, proto: pd.DataFrame, weight_col: str | None,
                   dispersion: str | None, contrasts: dict[str, str] | None = None,
                   offset_col: str | None = None) -> ModelSpec:
    """The engine's spec of the prototype (rank and scale warnings are the global checks'
    business, so they are silenced here); its encoders code any partition."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankDeficiencyWarning)
        warnings.simplefilter("ignore", ScaleWarning)
        extra = {} if offset_col is None else dict(offset=offset_col)
        if contrasts:
            extra["contrasts"] = contrasts
        spec = build_model_spec(formula, proto, weights=weight_col, dispersion=dispersion,
                                na_action="fail", check_nobs=False, **extra)
    if spec.dropped_fixef:
        raise DaskInputError(
            f"could not build a full-rank prototype of the fixed effects {spec.dropped_fixef}; "
            "fit this model in memory (pandas)")
    return spec


@dataclass
class PartialSums:
    """Sums over some rows: the engine's cross-products with every prototype column of ``X``
    (one slice per dispersion level; summed with
    :func:`scoremix.lme.crossprod.sum_crossproducts`), unweighted ``X'X``, column sums, ``Σy``, ``Σy²``, the sums of
    squares of every random-term column and whether each ``X`` column is only 0/1."""

    n: int
    cp: CrossProducts
    xtx: np.ndarray
    xsum: np.ndarray
    x01: np.ndarray
    ysum: float
    ysq: float
    term_sq: list[np.ndarray] = field(default_factory=list)
    xabs: np.ndarray | None = None
    other_abs: float = 1.0
    wabs: float = 1.0
    logwabs: float = 0.0

    def bounds(self, keep: np.ndarray) -> RowBounds:
        """:class:`~scoremix.bayes.reprosum.RowBounds` of the rows with the kept ``X``
        columns (equal to ``row_bounds`` of the same rows in memory: maxima are exact)."""
        col = max([self.other_abs] + [float(v) for v in np.asarray(self.xabs)[keep]])
        return RowBounds(col, self.wabs, self.logwabs)


def add_folded(parts: list[FoldedStats | None]) -> FoldedStats | None:
    """Exact sum of fold statistics (``None`` = a partition without rows)."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out


def add_partials(parts: list[PartialSums | None]) -> PartialSums | None:
    """Sum partial sums (``None`` = a partition without rows)."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = PartialSums(out.n + p.n, sum_crossproducts([out.cp, p.cp]), out.xtx + p.xtx,
                          out.xsum + p.xsum, out.x01 & p.x01, out.ysum + p.ysum, out.ysq + p.ysq,
                          [a + b for a, b in zip(out.term_sq, p.term_sq)],
                          np.maximum(out.xabs, p.xabs), max(out.other_abs, p.other_abs),
                          max(out.wabs, p.wabs), max(out.logwabs, p.logwabs))
    return out


@dataclass
class PartitionEncoder:
    """Codes one partition with the global encoding and forms its :class:`PartialSums`.

    Attributes
    ----------
    formula, response, used:
        the formula, response column and every used column.
    fixed_design, random_design:
        the prototype spec's encoders (all prototype ``X`` columns).
    fixef_names, terms:
        names of the prototype ``X`` columns; per random term ``(group, group_factor,
        term_names, levels)``.
    weight_col, disp_col, disp_values:
        weights column, dispersion column and its level values (global order).
    offset_design:
        the prototype spec's offset encoder (``offset()`` terms, ``offset=`` column), or
        ``None``; the model is fitted to ``y - offset`` as in memory.
    """

    formula: str
    response: str
    used: list[str]
    fixed_design: Callable[[pd.DataFrame], np.ndarray]
    random_design: Callable[[pd.DataFrame], list[tuple[np.ndarray, np.ndarray]]]
    fixef_names: list[str]
    terms: list[tuple[str, str, list[str], list[str]]]
    weight_col: str | None = None
    disp_col: str | None = None
    disp_values: pd.Index | None = None
    offset_design: Callable[[pd.DataFrame], np.ndarray] | None = None
    response_expr: Any = None

    def response_values(self, part: pd.DataFrame) -> np.ndarray:
        """The response of the rows: the column, or R's expression of it (``log(y)``)."""
        if self.response_expr is None:
            return part[self.response].to_numpy(dtype=np.float64)
        return evaluate(self.response_expr, lambda c: part[c].to_numpy(dtype=np.float64), {}, True,
                        len(part)).values[:, 0]

    @property
    def n_disp(self) -> int:
        return 1 if self.disp_values is None else len(self.disp_values)

    def encode(self, part: pd.DataFrame, index: int = 0
               ) -> tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, np.ndarray]],
                          np.ndarray | None, np.ndarray]:
        """``(y, X, [(codes, X_k)], weights, dispersion codes)`` of the complete rows."""
        part = part.dropna(subset=self.used)
        y = self.response_values(part)
        bad = ~np.isfinite(y)
        if bad.any():
            raise ResponseError(f"response {self.response!r} has {int(bad.sum())} non-finite "
                                f"value(s) (inf) in partition {index} (rows "
                                f"{[str(v) for v in part.index[bad][:5]]})")
        if self.offset_design is not None:
            y = y - np.asarray(self.offset_design(part), dtype=np.float64)
        X = np.asarray(self.fixed_design(part), dtype=np.float64)
        design = self.random_design(part)
        for (codes, _), t in zip(design, self.terms):
            if codes.size and codes.min() < 0:
                raise DaskInputError(f"partition {index} has a level of {t[1]!r} missing from the "
                                     "level scan (did the data change between passes?)")
        w = None
        if self.weight_col is not None:
            w = part[self.weight_col].to_numpy(dtype=np.float64)
            if np.any(~np.isfinite(w)) or np.any(w <= 0):
                i = int(np.flatnonzero(~(np.isfinite(w) & (w > 0)))[0])
                raise DaskInputError(f"weights column {self.weight_col!r} must be finite and "
                                     f"positive; partition {index}, row {part.index[i]!r} has "
                                     f"{w[i]!r}")
        if self.disp_values is None:
            dcodes = np.zeros(len(part), dtype=np.int64)
        else:
            dcodes = self.disp_values.get_indexer(part[self.disp_col]).astype(np.int64)
        return y, X, design, w, dcodes

    def sums(self, part: pd.DataFrame, index: int = 0) -> PartialSums | None:
        """The partition's :class:`PartialSums` (``None`` when no complete row)."""
        y, X, design, w, dcodes = self.encode(part, index)
        n = y.shape[0]
        if n == 0:
            return None
        D = self.n_disp
        A11 = Ar1 = Arr = None
        n_by = np.zeros(D)
        for d in range(D):
            rows = np.flatnonzero(dcodes == d) if D > 1 else None
            if rows is not None and rows.size == 0:
                continue
            sel = (lambda a: a) if rows is None else (lambda a: a[rows])
            terms = [RandomTerm(group=g, group_factor=gf, term_names=list(tn),
                                codes=np.ascontiguousarray(sel(codes)), levels=list(lv),
                                X=np.ascontiguousarray(sel(Xk)))
                     for (codes, Xk), (g, gf, tn, lv) in zip(design, self.terms)]
            spec_d = ModelSpec(formula=self.formula, response=self.response, y=sel(y), X=sel(X),
                               fixef_names=list(self.fixef_names), terms=terms,
                               data=pd.DataFrame(), weights=None if w is None else sel(w))
            cp = crossproducts(spec_d)
            if A11 is None:
                A11 = np.zeros((D,) + cp.A11.shape[1:])
                Ar1 = np.zeros((D,) + cp.Ar1.shape[1:])
                Arr = np.zeros((D,) + cp.Arr.shape[1:])
            A11[d], Ar1[d], Arr[d] = cp.A11[0], cp.Ar1[0], cp.Arr[0]
            n_by[d] = spec_d.n
        sum_log_w = 0.0 if w is None else float(np.sum(np.log(w)))
        cp_part = CrossProducts(n=n, p=X.shape[1], term_p=[Xk.shape[1] for _, Xk in design],
                                term_nlev=[len(t[3]) for t in self.terms], A11=A11, Ar1=Ar1,
                                Arr=Arr, n_by=n_by.astype(np.int64), sum_log_w=sum_log_w)
        x01 = np.all((X == 0.0) | (X == 1.0), axis=0)
        term_sq = [np.einsum("ij,ij->j", Xk, Xk) for _, Xk in design]
        xabs = np.max(np.abs(X), axis=0) if n else np.zeros(X.shape[1])
        rb = row_bounds(y, np.zeros((n, 0)), design, w)
        return PartialSums(n, cp_part, X.T @ X, X.sum(axis=0), x01,
                           float(y.sum()), float(y @ y), term_sq, xabs, rb.col, rb.w, rb.logw)

    def folded(self, part: pd.DataFrame, index: int, keep: np.ndarray, n_total: int,
               bounds: RowBounds) -> FoldedStats | None:
        """Exact fold sums of the Bayesian statistics of the partition (kept ``X`` columns,
        global ``n_total`` and ``bounds``; see :mod:`scoremix.bayes.reprosum`)."""
        y, X, design, w, dcodes = self.encode(part, index)
        if y.shape[0] == 0:
            return None
        return folded_stats(y, np.ascontiguousarray(X[:, keep]), design,
                            [len(t[3]) for t in self.terms], w,
                            None if self.disp_values is None else dcodes, self.n_disp, n_total,
                            bounds)


def crossproducts_from_sums(total: PartialSums, term_p: list[int], term_nlev: list[int],
                            q_rest: int, keep: np.ndarray) -> CrossProducts:
    """The engine's :class:`CrossProducts` of the kept ``X`` columns from summed partials
    (dropping a column of ``X`` deletes its row/column of the rest block)."""
    p_all = total.xtx.shape[0]
    rows = np.concatenate([np.arange(q_rest), q_rest + np.asarray(keep, dtype=np.int64),
                           [q_rest + p_all]])
    c = total.cp
    return CrossProducts(n=int(total.n), p=int(len(keep)), term_p=list(term_p),
                         term_nlev=list(term_nlev), A11=c.A11, Ar1=c.Ar1[:, rows, :],
                         Arr=c.Arr[:, rows][:, :, rows], n_by=np.asarray(c.n_by, dtype=np.int64),
                         sum_log_w=float(c.sum_log_w))
