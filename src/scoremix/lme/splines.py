r"""R's ``splines::bs`` and ``splines::ns`` bases (B-splines and natural cubic splines).

With order :math:`o = d + 1` (degree :math:`d`; ``ns`` is cubic, :math:`o = 4`), boundary
knots :math:`(a, b)` (the range of ``x`` unless given) and interior knots :math:`\kappa`
(given, or the quantiles of ``x`` at :math:`j/(K+1)`, :math:`j = 1..K`, R's type-7
quantiles, with :math:`K = \mathrm{df} - o + 1 - \mathrm{intercept}` for ``bs`` and
:math:`K = \mathrm{df} - 1 - \mathrm{intercept}` for ``ns``), the augmented knot vector is
:math:`t = (a^{\times o}, \kappa, b^{\times o})` and

* ``bs``: the B-spline basis :math:`B_j(x)` of order :math:`o` on :math:`t` (``splineDesign``),
  without :math:`B_1` unless ``intercept = TRUE``; outside :math:`[a, b]` (new data only)
  each :math:`B_j` is continued by its Taylor polynomial of degree :math:`d` at the pivot
  :math:`(1-e)a + e\,t_{o+1}` (resp. :math:`(1-e)b + e\,t_{m-o}`), :math:`e = 1/4`, as R ≥ 3.2.3;
* ``ns``: the cubic B-spline basis (without :math:`B_1` unless ``intercept``) projected onto
  the null space of the second derivatives at :math:`a` and :math:`b`: with
  :math:`C = (B''(a), B''(b))` and the Householder QR :math:`C' = QR` (full :math:`Q`), the
  basis is the columns ``3..`` of :math:`(Q' B(x)')'`; outside :math:`[a, b]` the basis is
  continued linearly (value and first derivative at the boundary).

The knots are computed once on the fitting data and re-used for new data, as R's
``makepredictcall`` does.  Reference: R Core Team, ``splines`` package sources
(``bs.R``, ``ns.R``); de Boor (1978), *A Practical Guide to Splines*.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
from scipy.interpolate import BSpline

__all__ = ["SplineBasis", "spline_design", "fit_basis"]


def spline_design(knots: np.ndarray, x: np.ndarray, order: int, deriv: int = 0) -> np.ndarray:
    """R's ``splineDesign(knots, x, ord, derivs)``: ``(len(x), len(knots) - order)`` matrix
    of the B-splines of order ``order`` (or their ``deriv``-th derivatives) at ``x`` (inside
    ``[knots[order-1], knots[-order]]``; the right end belongs to the last interval)."""
    knots = np.asarray(knots, float)
    x = np.asarray(x, float)
    nb = len(knots) - order
    spl = BSpline(knots, np.eye(nb), order - 1, extrapolate=True)
    if deriv:
        spl = spl.derivative(deriv)
    return np.atleast_2d(spl(x)).reshape(len(x), nb)


def _r_quantile(x: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """R's default (type 7) quantiles."""
    return np.quantile(x, probs, method="linear")


@dataclass
class SplineBasis:
    """The parameters that R's ``makepredictcall`` stores for ``bs()``/``ns()``."""

    kind: str                    # "bs" or "ns"
    degree: int
    knots: np.ndarray
    boundary: tuple[float, float]
    intercept: bool

    @property
    def order(self) -> int:
        return self.degree + 1

    @property
    def all_knots(self) -> np.ndarray:
        a, b = self.boundary
        return np.sort(np.concatenate([np.full(self.order, a), self.knots, np.full(self.order, b)]))

    def _raw(self, x: np.ndarray) -> np.ndarray:
        """The B-spline basis (all columns), continued outside the boundary knots."""
        t, o, d = self.all_knots, self.order, self.degree
        a, b = self.boundary
        out = np.zeros((len(x), len(t) - o))
        lo, hi = x < a, x > b
        inside = ~(lo | hi)
        if inside.any():
            out[inside] = spline_design(t, x[inside], o)
        if self.kind == "bs":
            e = 0.25
            scale = np.array([float(np.prod(np.arange(1, j + 1))) for j in range(o)])
            for mask, pivot in ((lo, (1 - e) * a + e * t[o]), (hi, (1 - e) * b + e * t[len(t) - o - 1])):
                if mask.any():
                    tt = np.vstack([spline_design(t, [pivot], o, j) for j in range(o)])
                    xl = (x[mask] - pivot)[:, None] ** np.arange(o)[None, :]
                    out[mask] = xl @ (tt / scale[:, None])
        else:
            for mask, pivot in ((lo, a), (hi, b)):
                if mask.any():
                    tt = np.vstack([spline_design(t, [pivot], 4, j) for j in range(2)])
                    out[mask] = np.column_stack([np.ones(mask.sum()), x[mask] - pivot]) @ tt
        return out

    def basis(self, x: np.ndarray) -> np.ndarray:
        """The model-matrix columns at ``x`` (NaN rows stay NaN)."""
        x = np.asarray(x, float)
        ok = ~np.isnan(x)
        xs = x[ok]
        B = self._raw(xs)
        if self.kind == "ns":
            t = self.all_knots
            C = np.vstack([spline_design(t, [self.boundary[0]], 4, 2),
                           spline_design(t, [self.boundary[1]], 4, 2)])
            if not self.intercept:
                C, B = C[:, 1:], B[:, 1:]
            Q, _ = sla.qr(C.T, mode="full")
            B = (Q.T @ B.T).T[:, 2:]
        elif not self.intercept:
            B = B[:, 1:]
        out = np.full((len(x), B.shape[1]), np.nan)
        out[ok] = B
        return out


def fit_basis(kind: str, x: np.ndarray, *, df: int | None = None, knots: np.ndarray | None = None,
              degree: int = 3, intercept: bool = False,
              boundary: tuple[float, float] | None = None) -> SplineBasis:
    """Knots of ``bs(x, df, knots, degree, intercept, Boundary.knots)`` or
    ``ns(x, df, knots, intercept, Boundary.knots)`` on the fitting data ``x``, as R computes
    them (missing values ignored)."""
    x = np.asarray(x, float)
    x = x[~np.isnan(x)]
    if kind == "ns":
        degree = 3
    order = degree + 1
    if boundary is None:
        bnd = (float(np.min(x)), float(np.max(x)))
        inside = np.ones(len(x), bool)
    else:
        bnd = (float(min(boundary)), float(max(boundary)))
        inside = (x >= bnd[0]) & (x <= bnd[1])
    if knots is None:
        if df is not None:
            k = df - order + (1 - int(intercept)) if kind == "bs" else df - 1 - int(intercept)
            k = max(int(k), 0)
            probs = np.linspace(0, 1, k + 2)[1:-1]
            knots = _r_quantile(x[inside], probs) if k > 0 else np.zeros(0)
        else:
            knots = np.zeros(0)
    return SplineBasis(kind=kind, degree=degree, knots=np.sort(np.asarray(knots, float)),
                       boundary=bnd, intercept=bool(intercept))
