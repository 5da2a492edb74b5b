"""Formula + Dask DataFrame → a row-free model spec and the summed cross-products.

Two passes over the partitions, each a tree reduction on the cluster:

1. :func:`scoremix.distributed.levels.scan_levels`: global factor levels, interaction
   combinations, row and missing-value counts;
2. per partition :meth:`~scoremix.distributed.design.PartitionEncoder.sums`: the
   cross-products of ``[Z X y]`` coded with the global levels, summed.

The client then holds only the summed cross-products (size ``O(q·m + m²)``, ``m`` the
rest block of :class:`~scoremix.lme.crossprod.CrossProducts`), applies lme4's rank, scale and
grouping checks to the sums (:mod:`scoremix.distributed.checks`) and returns a
:class:`DaskModelSpec`: a :class:`~scoremix.lme.spec.ModelSpec` whose row arrays are empty,
whose ``n`` is the number of rows used, and which keeps the (lazy) Dask frame of those rows
and the encoders needed to compute per-row quantities on request.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from scoremix.distributed.checks import (
    badly_scaled_from_moments,
    check_groupings,
    keep_columns_from_gram,
)
from scoremix.distributed.design import (
    PartialSums,
    add_folded,
    PartitionEncoder,
    add_partials,
    crossproducts_from_sums,
    prototype_frame,
    prototype_spec,
)
from scoremix.distributed.inputs import DaskInputError, as_dask_frame, tree_reduce
from scoremix.distributed.levels import is_factor_dtype, scan_levels
from scoremix.lme.crossprod import CrossProducts
from scoremix.lme.errors import (
    SCALE_MESSAGE,
    FormulaError,
    MissingValueError,
    RankDeficiencyWarning,
    ResponseError,
    ScaleWarning,
    UnknownColumnError,
    rank_deficient_message,
)
from scoremix.lme.formula import parse_dispersion, parse_formula
from scoremix.lme.spec import ModelSpec, RandomTerm

__all__ = ["DaskModelSpec", "build_dask_model_spec", "add_bayes_statistics"]


@dataclass
class DaskModelSpec(ModelSpec):
    """A :class:`~scoremix.lme.spec.ModelSpec` of Dask rows: no row arrays on the client.

    ``y``, ``X`` and the terms' ``codes``/``X`` are empty; ``n`` is the number of rows used.

    Attributes
    ----------
    n_rows:
        rows used (complete rows).
    frame:
        lazy Dask DataFrame of the used rows (all columns of the input).
    encoder:
        codes a partition with the global encoding (:class:`PartitionEncoder`).
    keep:
        prototype ``X`` columns kept after the rank check.
    cp:
        the summed :class:`~scoremix.lme.crossprod.CrossProducts`.
    bounds:
        maxima of the used values (for the reproducible sums of the Bayesian statistics).
    has_weights:
        whether prior weights are used.
    folded, moments:
        set by :func:`add_bayes_statistics`: the exact fold sums of the Bayesian sufficient
        statistics (:class:`scoremix.bayes.reprosum.FoldedStats`) and the moments the default
        priors read (``ybar``, ``y_sd``, ``x_sd``, ``term_rms``).
    """

    n_rows: int = 0
    frame: Any = None
    encoder: PartitionEncoder | None = None
    keep: np.ndarray | None = None
    cp: CrossProducts | None = None
    bounds: Any = None
    has_weights: bool = False
    folded: Any = None
    moments: dict = field(default_factory=dict)

    @property
    def n(self) -> int:  # type: ignore[override]
        return int(self.n_rows)


def _check_columns(meta: pd.DataFrame, used: list[str]) -> None:
    cols = [str(c) for c in meta.columns]
    for c in used:
        if c not in meta.columns:
            import difflib
            close = difflib.get_close_matches(c, cols, n=3)
            hint = f"; did you mean {', '.join(repr(x) for x in close)}?" if close else ""
            raise UnknownColumnError(f"column {c!r} is not in the data{hint} (available: {cols[:20]})",
                                     c, cols)


_STATEFUL = re.compile(r"\b(scale|poly)\s*\(")


def build_dask_model_spec(formula: str, data: Any, *, weights: str | None = None,
                          dispersion: str | None = None, na_action: str = "omit",
                          contrasts: dict[str, str] | None = None, offset: str | None = None,
                          split_every: int = 8) -> DaskModelSpec:
    """Build the :class:`DaskModelSpec` (with summed cross-products) of ``formula`` on Dask
    ``data`` (a Dask DataFrame or a parquet path/glob).

    Raises
    ------
    UnknownColumnError, FormulaError, ResponseError, MissingValueError, GroupingError
        as :func:`scoremix.lme.model_frame.build_model_spec` (naming column, level or
        partition).
    DaskInputError
        for input only Dask has (an array of weights, a partition with an unseen level).
    """
    import dask
    from dask import delayed

    if na_action not in ("omit", "fail"):
        raise ValueError(f"na_action must be 'omit' or 'fail', got {na_action!r}")
    if weights is not None and not isinstance(weights, str):
        raise DaskInputError("with Dask input, weights must name a column of the data "
                             f"(got a {type(weights).__name__})")
    if offset is not None and not isinstance(offset, str):
        raise DaskInputError("with Dask input, offset must name a column of the data "
                             f"(got a {type(offset).__name__})")
    hit = _STATEFUL.search(formula)
    if hit:
        raise DaskInputError(f"{hit.group(1)}() in {formula!r} is estimated from the whole column "
                             "(centre/scale or orthogonal basis); with Dask input compute it as a "
                             "column first (e.g. ddf.assign(xs=(ddf.x - m) / s))")
    parsed = parse_formula(formula)
    disp_col = parse_dispersion(dispersion) if dispersion is not None else None
    used = list(parsed.columns)
    for extra in (disp_col, weights, offset):
        if extra is not None and extra not in used:
            used.append(extra)
    ddf = as_dask_frame(data)
    meta = ddf._meta if hasattr(ddf, "_meta") else ddf.head(0)
    _check_columns(meta, used)
    for col in getattr(parsed, "response_columns", [parsed.response]):
        if is_factor_dtype(meta[col].dtype):
            raise ResponseError(f"response {parsed.response!r} must be numeric, but column {col!r} "
                                f"has dtype {meta[col].dtype}")
    if disp_col is not None and not is_factor_dtype(meta[disp_col].dtype):
        raise FormulaError(f"dispersion formula {dispersion!r}: column {disp_col!r} must be a factor "
                           f"(string/category/bool), got dtype {meta[disp_col].dtype}")
    factors = [c for c in used if is_factor_dtype(meta[c].dtype)]
    inter = list(dict.fromkeys(c for rp in parsed.random if len(rp.group_columns) > 1
                               for c in rp.group_columns))

    # ---- pass 1: levels
    scan = scan_levels(ddf, used, factors, inter, split_every)
    na_cols = [c for c in used if scan.na_counts[c]]
    n_dropped = scan.n_rows - scan.n_complete
    if na_cols:
        if na_action == "fail":
            c = na_cols[0]
            raise MissingValueError(f"column {c!r} has {scan.na_counts[c]} missing value(s); use "
                                    "na_action='omit' to drop them")
        warnings.warn(f"dropped {n_dropped} rows with missing values in columns "
                      f"[{', '.join(na_cols)}]", UserWarning, stacklevel=3)
    if scan.n_complete == 0:
        raise MissingValueError("no rows left after dropping missing values"
                                + (f" in columns [{', '.join(na_cols)}]" if na_cols else ""))
    for c in factors:
        if c in scan.values and len(scan.values[c]) == 0:
            raise FormulaError(f"factor column {c!r} has no values on the complete rows")

    # ---- the encoding, from a prototype with every level
    proto = prototype_frame(meta, parsed, scan, used, factors, inter, weights)
    # the same model-frame stages as in memory, less lme4's observations-vs-levels checks: the
    # prototype has a few rows per level, and those checks run on the global counts
    # (check_groupings, after the pass below)
    pspec = prototype_spec(formula, proto, weights, dispersion, contrasts, offset)
    disp_values = None
    if disp_col is not None:
        disp_values = pd.Index(_values_for_levels(proto[disp_col], pspec.dispersion_levels or []),
                               dtype=object)
    enc = PartitionEncoder(
        formula=formula, response=parsed.response, used=used, fixed_design=pspec.fixed_design,
        random_design=pspec.random_design, fixef_names=list(pspec.fixef_names),
        terms=[(t.group, t.group_factor, list(t.term_names), list(t.levels)) for t in pspec.terms],
        weight_col=weights, disp_col=disp_col, disp_values=disp_values,
        offset_design=pspec.offset_design, response_expr=getattr(parsed, "response_expr", None))

    # ---- pass 2: cross-products per partition, summed
    leaves = [delayed(enc.sums)(p, i) for i, p in enumerate(ddf.to_delayed())]
    (total,) = dask.compute(tree_reduce(leaves, add_partials, split_every))
    if total is None:
        raise MissingValueError("no rows left after dropping missing values")
    assert isinstance(total, PartialSums)
    n = int(total.n)

    # ---- lme4's checks on the sums
    keep = keep_columns_from_gram(total.xtx)
    names_all = list(pspec.fixef_names)
    names = [names_all[j] for j in keep]
    dropped = [nm for j, nm in enumerate(names_all) if j not in set(keep.tolist())]
    if dropped:
        warnings.warn(rank_deficient_message(len(dropped), dropped), RankDeficiencyWarning,
                      stacklevel=3)
    xsq = np.diag(total.xtx)
    if badly_scaled_from_moments(n, total.xsum[keep], xsq[keep], total.x01[keep]):
        warnings.warn(SCALE_MESSAGE, ScaleWarning, stacklevel=3)
    check_groupings(n, [(t.group, t.group_factor, t.n_levels, t.p) for t in pspec.terms])
    for d in range(len(total.cp.n_by)):
        if total.cp.n_by[d] == 0:
            lev = pspec.dispersion_levels[d] if pspec.dispersion_levels else d
            raise ValueError(f"dispersion level {lev!r} has no rows")
    q_rest = int(sum(t.p * t.n_levels for t in pspec.terms[1:]))
    cp = crossproducts_from_sums(total, [t.p for t in pspec.terms],
                                 [t.n_levels for t in pspec.terms], q_rest, keep)

    frame = ddf.dropna(subset=used) if n_dropped else ddf
    p = len(keep)
    terms = [RandomTerm(group=t.group, group_factor=t.group_factor, term_names=list(t.term_names),
                        codes=np.zeros(0, dtype=np.int64), levels=list(t.levels),
                        X=np.zeros((0, t.p))) for t in pspec.terms]
    fixed_all = pspec.fixed_design
    keep_c = keep.copy()

    def fixed_design(newdata: pd.DataFrame) -> np.ndarray:
        """Fixed-effects matrix of new rows (the kept columns of the global encoding)."""
        return np.ascontiguousarray(np.asarray(fixed_all(newdata))[:, keep_c])

    return DaskModelSpec(
        formula=formula, response=parsed.response, y=np.zeros(0), X=np.zeros((0, p)),
        fixef_names=names, terms=terms, data=meta[list(dict.fromkeys(used))],
        weights=None, n_dropped=int(n_dropped), dropped_fixef=dropped,
        dispersion_formula=dispersion, dispersion_codes=None,
        dispersion_levels=pspec.dispersion_levels, fixed_design=fixed_design,
        random_design=pspec.random_design, n_rows=n, frame=frame, encoder=enc, keep=keep,
        cp=cp, bounds=total.bounds(keep), has_weights=weights is not None)


def _values_for_levels(values: pd.Series, levels: list[str]) -> list:
    """Raw values whose R labels are ``levels`` (in that order)."""
    out = []
    uniq = list(pd.unique(values))
    for lv in levels:
        hit = [v for v in uniq if (("TRUE" if v else "FALSE") if isinstance(v, (bool, np.bool_))
                                   else str(v)) == lv]
        if not hit:
            raise DaskInputError(f"dispersion level {lv!r} has no value in the data")
        out.append(hit[0])
    return out


def add_bayes_statistics(spec: DaskModelSpec, split_every: int = 8) -> DaskModelSpec:
    """A third pass: the exact (reproducible) fold sums of the Bayesian sufficient statistics
    and prior moments, summed over partitions (``spec.folded``, ``spec.moments``)."""
    import dask
    from dask import delayed

    enc = spec.encoder
    leaves = [delayed(enc.folded)(p, i, spec.keep, spec.n, spec.bounds)
              for i, p in enumerate(spec.frame.to_delayed())]
    (fs,) = dask.compute(tree_reduce(leaves, add_folded, split_every))
    spec.folded = fs
    spec.moments = fs.moments()
    return spec
