r"""Joint F tests of every model term from the reference grid (emmeans's ``joint_tests``).

Covariates are put at their mean :math:`\pm 1` (emmeans's ``meanint``), so they act as
two-level factors.  For every set :math:`S` of predictors that some model term contains,
the marginal means over :math:`S` (equal weights) are contrasted by the interaction of
consecutive-difference contrasts (first variable fastest), giving rows :math:`L`.  With
:math:`L' = QR` (Householder QR of the non-zero rows, rank :math:`r`; rows of :math:`Q'`
as :math:`\tilde L`):

.. math::

    F = \frac{(\tilde L\hat\beta)'(\tilde L V \tilde L')^{-1}(\tilde L\hat\beta)}{r},
    \qquad \nu_2 = \min_i \nu(\tilde\ell_i),

:math:`F \sim F_{r, \nu_2}` (``df2`` and ``F.ratio`` are rounded to 2 and 3 decimals as
emmeans does; the p-value uses the unrounded values).
"""

from __future__ import annotations

from itertools import combinations
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from scoremix.emm.basis import fit_basis
from scoremix.emm.errors import EmmError
from scoremix.emm.grid import grid_variables, ref_grid
from scoremix.emm.means import average_grid
from scoremix.lme.formula import parse_formula

__all__ = ["joint_tests", "joint_test_rows"]


def _consec(k: int) -> np.ndarray:
    C = np.zeros((k, k - 1))
    for i in range(1, k):
        C[i, i - 1], C[i - 1, i - 1] = 1, -1
    return C


def _qr_rows(LL: np.ndarray, tol: float = 1e-7) -> np.ndarray:
    """Orthonormal rows spanning ``LL``'s rows, in order, skipping dependent rows (R's
    LINPACK ``qr`` with its limited pivoting)."""
    Q: list[np.ndarray] = []
    for row in LL:
        v = row.astype(float).copy()
        nrm0 = np.linalg.norm(v)
        if nrm0 == 0:
            continue
        for _ in range(2):
            for q in Q:
                v -= (q @ v) * q
        if np.linalg.norm(v) > tol * nrm0:
            Q.append(v / np.linalg.norm(v))
    return np.array(Q) if Q else np.zeros((0, LL.shape[1]))


def joint_test_rows(L: np.ndarray, basis: Any) -> dict[str, float]:
    """The joint F test of ``Lβ = 0`` as emmeans's ``test(..., joint = TRUE)``."""
    LL = np.where(np.abs(L) < 1e-7, 0.0, L)
    LL = LL[~np.all(LL == 0, axis=1)]
    tQ = _qr_rows(LL)
    r = tQ.shape[0]
    if r == 0:
        return {"df1": 0.0, "df2": np.nan, "F.ratio": np.nan, "p.value": np.nan}
    z = tQ @ basis.beta
    zcov = tQ @ basis.V @ tQ.T
    F = float(z @ np.linalg.solve(zcov, z)) / r
    df2 = float(np.min(basis.df(tQ)))
    p = float(stats.f.sf(F, r, df2)) if np.isfinite(df2) else float(stats.chi2.sf(F * r, r))
    return {"df1": float(r), "df2": round(df2, 2), "F.ratio": round(F, 3), "p.value": p}


def joint_tests(fit: Any, *, by: str | Sequence[str] | None = None,
                lmer_df: str = "satterthwaite") -> pd.DataFrame:
    """Type-III-like F tests of every model term from the reference grid
    (columns ``model term``, by columns, ``df1``, ``df2``, ``F.ratio``, ``p.value``)."""
    basis = fit_basis(fit, lmer_df)
    spec = basis.spec
    by_l = [] if by is None else ([by] if isinstance(by, str) else list(by))
    roles = grid_variables(spec)
    cov = {c: float(np.mean(spec.data[c].to_numpy(dtype=float))) for c, r in roles if r == "covariate"}
    rg = ref_grid(fit, cov_reduce={c: [m - 1, m + 1] for c, m in cov.items()})
    for b in by_l:
        if b not in rg.variables:
            raise EmmError(f"by variable {b!r} is not a predictor ({rg.variables})")
    facs = [v for v in rg.variables if v not in by_l]
    parsed = parse_formula(spec.formula)
    term_vars = [set(c for i in t for c in parsed.fixed.variables[i].columns) for t in parsed.fixed.terms]
    rows = []
    for size in range(1, len(facs) + 1):
        for these in combinations(facs, size):
            if not any(set(these) <= tv for tv in term_vars):
                continue
            cells, L = average_grid(rg, list(these) + by_l, "equal")
            sizes = [len(rg.levels[f]) for f in these]
            C = np.ones((1, 1))
            for k in sizes:  # first variable fastest: kron(C_last, ..., C_first)
                C = np.kron(_consec(k), C)
            nin = int(np.prod(sizes))
            nby = L.shape[0] // nin
            for j in range(nby):
                Lb = C.T @ L[j * nin:(j + 1) * nin]
                res = joint_test_rows(Lb, basis)
                row = {"model term": ":".join(these)}
                for b in by_l:
                    row[b] = cells.iloc[j * nin][b]
                row.update(res)
                rows.append(row)
    out = pd.DataFrame(rows, columns=["model term"] + by_l + ["df1", "df2", "F.ratio", "p.value"])
    return out[out["df1"] > 0].reset_index(drop=True)
