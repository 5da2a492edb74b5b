r"""emmeans's reference grid of a fitted model.

Every predictor of the fixed part takes a set of values: a factor all its levels (in the
model frame's level order), a numeric covariate its mean over the rows used in fitting
(emmeans's ``cov.reduce = mean``) unless it takes at most two distinct values, which it
keeps (emmeans's ``cov.keep = "2"``: a 0/1 indicator is averaged over like a factor) — or
the values given in ``at=``.  The grid is their
Cartesian product with the first variable varying fastest (R's ``expand.grid``), and row
:math:`r` of the grid gets the linear function :math:`x_r` (the model-matrix row of that
combination, same contrasts), so the prediction there is :math:`x_r'\hat\beta`.  Each row
also carries ``.wgt.``: the number of fitted rows with that combination of factor levels
(used by ``weights="proportional"`` etc.).  A numeric variable used only as
``factor(x)`` is a factor with its sorted distinct values.

Reference: Lenth, R. V. (2016) Least-squares means: the R package lsmeans. *J. Stat. Softw.*
69(1); emmeans's ``ref_grid``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pandas as pd

from scoremix.emm.errors import EmmError
from scoremix.lme.formula import parse_formula
from scoremix.lme.model_frame import _compact, _is_factor_dtype, _r_format, _raw_codes

__all__ = ["RefGrid", "ref_grid", "grid_variables", "COV_KEEP"]

#: emmeans's ``cov.keep = "2"``: covariates with at most this many distinct values keep them
COV_KEEP = 2


@dataclass
class RefGrid:
    """The reference grid.

    Attributes
    ----------
    variables:
        predictor names in formula order.
    levels:
        per variable the labels of its grid values (factor level labels; covariate
        values as floats).
    is_factor:
        per variable whether it is a factor.
    grid:
        one row per combination (first variable fastest), label columns.
    X:
        ``(n_grid, p)`` linear functions of ``β``.
    wgt:
        ``.wgt.``: fitted rows per combination of the factors.
    """

    variables: list[str]
    levels: dict[str, list[Any]]
    is_factor: dict[str, bool]
    grid: pd.DataFrame
    X: np.ndarray
    wgt: np.ndarray


def grid_variables(spec: Any) -> list[tuple[str, str]]:
    """``(column, role)`` of the fixed part's predictors, ``role`` ``"factor"`` or
    ``"covariate"``."""
    parsed = parse_formula(spec.formula)
    uses: dict[str, list[str]] = {}
    for v in parsed.fixed.variables:
        for col in v.columns:
            uses.setdefault(col, []).append(v.kind)
    out = []
    for col, kinds in uses.items():
        if col not in spec.data.columns:
            raise EmmError(f"predictor column {col!r} is not in the model frame")
        if _is_factor_dtype(spec.data[col].dtype) or all(k == "factor" for k in kinds):
            out.append((col, "factor"))
        else:
            out.append((col, "covariate"))
    return out


def _factor_levels(values: pd.Series) -> tuple[list[str], pd.Index, np.ndarray]:
    codes, uniques = _raw_codes(values)
    fac = _compact(str(values.name), codes[codes >= 0], uniques)
    full = np.full(len(values), -1, dtype=np.int64)
    full[codes >= 0] = fac.codes
    return fac.levels, fac.uniques, full


def _as_list(v: Any) -> list:
    if isinstance(v, (list, tuple, np.ndarray, pd.Series, pd.Index)):
        return list(v)
    return [v]


def ref_grid(fit: Any, at: Mapping[str, Any] | None = None,
             cov_reduce: Mapping[str, Any] | None = None) -> RefGrid:
    """The reference grid of ``fit`` (see the module docstring).

    Parameters
    ----------
    at:
        ``{variable: value or values}``: covariate values, or a subset of a factor's
        levels (by label).
    cov_reduce:
        ``{covariate: values}`` used instead of the mean where ``at`` says nothing
        (``joint_tests`` puts covariates at mean ± 1, emmeans's ``meanint``).
    """
    spec = getattr(fit, "spec", fit)
    data = spec.data
    at = dict(at or {})
    roles = grid_variables(spec)
    names = [c for c, _ in roles]
    unknown = [k for k in at if k not in names]
    if unknown:
        raise EmmError(f"at= names {unknown} that are not predictors of the fixed part "
                       f"(predictors: {names})")
    levels: dict[str, list[Any]] = {}
    raw: dict[str, list[Any]] = {}
    is_factor: dict[str, bool] = {}
    codes: dict[str, np.ndarray] = {}
    kept: dict[str, np.ndarray] = {}
    for col, role in roles:
        s = data[col]
        if role == "factor":
            labels, uniques, cd = _factor_levels(s)
            codes[col] = cd
            idx = list(range(len(labels)))
            if col in at:
                want = [_r_format(v) for v in _as_list(at[col])]
                bad = [w for w in want if w not in labels]
                if bad:
                    raise EmmError(f"at[{col!r}]: level(s) {bad} not among the levels {labels}")
                idx = [labels.index(w) for w in want]
            levels[col] = [labels[i] for i in idx]
            raw[col] = [uniques[i] for i in idx]
            is_factor[col] = True
        else:
            uniq = np.unique(s.to_numpy(dtype=float)[np.isfinite(s.to_numpy(dtype=float))])
            if col in at:
                vals = [float(v) for v in _as_list(at[col])]
            elif uniq.size <= COV_KEEP:
                # emmeans's cov.keep = "2": a covariate with at most two distinct values
                # (a 0/1 indicator) keeps them, and is averaged over like a factor
                vals = [float(v) for v in uniq]
                kept[col] = np.searchsorted(uniq, s.to_numpy(dtype=float))
            elif cov_reduce is not None and col in cov_reduce:
                vals = [float(v) for v in _as_list(cov_reduce[col])]
            else:
                vals = [float(np.mean(s.to_numpy(dtype=float)))]
            levels[col] = vals
            raw[col] = vals
            is_factor[col] = False
    # expand.grid: first variable fastest
    sizes = [len(levels[c]) for c in names]
    n = int(np.prod(sizes)) if names else 1
    idx = np.indices(sizes).reshape(len(sizes), -1) if names else np.zeros((0, 1), int)
    # np.indices is C order (last fastest); reorder so the first varies fastest
    if names:
        idx = np.indices(sizes[::-1]).reshape(len(sizes), -1)[::-1]
    grid = pd.DataFrame({c: [levels[c][i] for i in idx[j]] for j, c in enumerate(names)})
    newdata = pd.DataFrame({c: pd.Series([raw[c][i] for i in idx[j]],
                                         dtype=data[c].dtype if is_factor[c] and
                                         isinstance(data[c].dtype, pd.CategoricalDtype) else None)
                            for j, c in enumerate(names)})
    if not names:
        newdata = pd.DataFrame(index=range(1))
        grid = pd.DataFrame(index=range(1))
    if getattr(spec, "offset", None) is not None:
        raise EmmError("marginal means of a model with an offset are not supported")
    X = np.asarray(spec.fixed_design(newdata), dtype=float)
    # .wgt.: fitted rows per combination of the factors
    facs = [c for c in names if is_factor[c] or c in kept]
    wgt = np.zeros(n)
    if facs:
        full_labels = {c: (_factor_levels(data[c])[0] if is_factor[c] else levels[c]) for c in facs}
        sub_sizes = [len(full_labels[c]) for c in facs]
        flat = np.ravel_multi_index([codes[c] if is_factor[c] else kept[c] for c in facs], sub_sizes,
                                    order="F")
        counts = np.bincount(flat, minlength=int(np.prod(sub_sizes)))
        pos = [np.array([full_labels[c].index(v) for v in grid[c]]) for c in facs]
        wgt = counts[np.ravel_multi_index(pos, sub_sizes, order="F")].astype(float)
    else:
        wgt[:] = len(data)
    return RefGrid(names, levels, is_factor, grid, X, wgt)
