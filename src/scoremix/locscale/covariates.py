r"""Per-class covariate location terms of a location-scale score model (``spec.covariates``).

Model (latent scale; trial ``t`` of speaker ``i``, stratum ``s`` of class ``c``):

.. math::

    z_t = \mu_s + x_t^\top\beta_c + b_{ic} + u_{is} + \sigma_s e^{g_{ic}}\varepsilon_t ,

with :math:`x_t` the covariate row (numeric columns as they are; a categorical column as
treatment dummies, its first level — in sorted order — the reference) and one coefficient
vector :math:`\beta_c` per class (``label × covariate``).

Sufficient statistics.  Given :math:`\beta` a cell (speaker × stratum) enters the marginal
likelihood only through the residual sums

.. math::

    \textstyle\sum_t r_t = \sum z - S_x^\top\beta_c ,\qquad
    \sum_t r_t^2 = \sum z^2 - 2 S_{xz}^\top\beta_c + \beta_c^\top S_{xx}\beta_c ,

with the per-cell :math:`S_x=\sum x_t`, :math:`S_{xz}=\sum x_t E[z_t]`,
:math:`S_{xx}=\sum x_t x_t^\top` (expected latent values under interval censoring), so
:class:`CovUnitLikelihood` is the marginal likelihood of
:class:`~scoremix.locscale.likelihood.UnitLikelihood` on those residual statistics, with
:math:`\beta` among the maximised parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from scoremix.locscale.likelihood import CellStats, Params, UnitLikelihood

__all__ = ["CovariateDesign", "CovCellStats", "CovParams", "CovUnitLikelihood", "make_likelihood",
           "covariate_stats", "CovariateError"]

_CLASSES = ("negative", "positive")


class CovariateError(ValueError):
    """A covariate column cannot enter the model (names the column / level / row)."""


@dataclass
class CovariateDesign:
    """How covariate columns become the design row :math:`x_t`.

    ``columns``: the covariates; ``levels``: per categorical column its sorted levels (the
    first is the reference); ``names``: the design's column names (``x`` or ``col[level]``)."""

    columns: tuple[str, ...]
    levels: dict
    names: list

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, columns: Sequence[str]) -> "CovariateDesign":
        levels, names = {}, []
        for c in columns:
            if c not in frame.columns:
                raise CovariateError(f"covariate {c!r} is not in the trial table (columns: {list(frame.columns)})")
            col = frame[c]
            if col.isna().any():
                raise CovariateError(f"covariate {c!r} has missing values (row {frame.index[col.isna()][0]!r})")
            if pd.api.types.is_bool_dtype(col) or not pd.api.types.is_numeric_dtype(col):
                lv = sorted(pd.unique(col.astype(str)))
                if len(lv) < 2:
                    raise CovariateError(f"covariate {c!r} has one level only ({lv[0]!r})")
                levels[c] = lv
                names += [f"{c}[{v}]" for v in lv[1:]]
            else:
                if not np.isfinite(col.to_numpy(np.float64)).all():
                    bad = frame.index[~np.isfinite(col.to_numpy(np.float64))][0]
                    raise CovariateError(f"covariate {c!r} is not finite in row {bad!r}")
                names.append(c)
        return cls(tuple(columns), levels, names)

    def matrix(self, frame: pd.DataFrame) -> np.ndarray:
        """``(n, p)`` design rows of ``frame`` (levels not seen in fitting raise)."""
        cols = []
        for c in self.columns:
            if c not in frame.columns:
                raise CovariateError(f"covariate {c!r} is needed to predict with this model "
                                     f"(columns: {list(frame.columns)})")
            if c in self.levels:
                v = frame[c].astype(str).to_numpy()
                new = sorted(set(v) - set(self.levels[c]))
                if new:
                    raise CovariateError(f"covariate {c!r}: level {new[0]!r} was not seen in fitting "
                                         f"(levels: {self.levels[c]})")
                cols += [(v == lv).astype(np.float64) for lv in self.levels[c][1:]]
            else:
                x = pd.to_numeric(frame[c], errors="coerce").to_numpy(np.float64)
                if not np.isfinite(x).all():
                    raise CovariateError(f"covariate {c!r} is not a finite number in row "
                                         f"{frame.index[~np.isfinite(x)][0]!r}")
                cols.append(x)
        return np.column_stack(cols) if cols else np.zeros((len(frame), 0))

    def coef_names(self) -> list[str]:
        """Names of :math:`\\beta` in :meth:`CovUnitLikelihood.pack` order (class-major)."""
        return [f"{cls}:{n}" for cls in _CLASSES for n in self.names]


@dataclass
class CovCellStats(CellStats):
    """:class:`CellStats` plus the per-cell covariate sums ``sx (C, p)``, ``sxz (C, p)`` and
    ``sxx (C, p, p)`` and the class of every cell ``cell_class (C,)``."""

    sx: np.ndarray = None  # type: ignore[assignment]
    sxz: np.ndarray = None  # type: ignore[assignment]
    sxx: np.ndarray = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        super().__post_init__()
        self.cell_class = self.unit_class[self.unit]
        self.p = int(self.sx.shape[1])

    def subset_units(self, keep_units: np.ndarray) -> "CovCellStats":
        """The cells of the units ``keep_units`` (a boolean mask), units renumbered."""
        cells = keep_units[self.unit]
        new_unit = -np.ones(self.n_units, np.int64)
        new_unit[keep_units] = np.arange(int(keep_units.sum()))
        return CovCellStats(unit=new_unit[self.unit[cells]], stratum=self.stratum[cells], n=self.n[cells],
                            sz=self.sz[cells], szz=self.szz[cells], unit_class=self.unit_class[keep_units],
                            n_strata=self.n_strata, n_classes=self.n_classes, sx=self.sx[cells],
                            sxz=self.sxz[cells], sxx=self.sxx[cells])


def covariate_stats(st: CellStats, X: np.ndarray, ez: np.ndarray, trial_cell: np.ndarray) -> CovCellStats:
    """``st`` with the covariate sums of the informative trials (``trial_cell >= 0``)."""
    idx = np.flatnonzero(trial_cell >= 0)
    c = trial_cell[idx]
    C = st.unit.size
    x = X[idx]
    p = X.shape[1]
    sx = np.zeros((C, p))
    sxz = np.zeros((C, p))
    sxx = np.zeros((C, p, p))
    np.add.at(sx, c, x)
    np.add.at(sxz, c, x * ez[idx][:, None])
    np.add.at(sxx, c, x[:, :, None] * x[:, None, :])
    return CovCellStats(unit=st.unit, stratum=st.stratum, n=st.n, sz=st.sz, szz=st.szz, unit_class=st.unit_class,
                        n_strata=st.n_strata, n_classes=st.n_classes, sx=sx, sxz=sxz, sxx=sxx)


@dataclass
class CovParams(Params):
    """:class:`Params` plus ``beta (2, p)``: the covariate coefficients per class
    ``[negative, positive]``."""

    beta: np.ndarray = None  # type: ignore[assignment]


class CovUnitLikelihood(UnitLikelihood):
    """:class:`UnitLikelihood` on the residual statistics of the covariate terms (module
    docstring); :math:`\\beta` (class-major) is appended to the parameter vector."""

    def __init__(self, stats: CovCellStats, scale: np.ndarray, corr: np.ndarray, omega: np.ndarray,
                 n_nodes: int = 15, tail: np.ndarray | None = None) -> None:
        super().__init__(stats, scale, corr, omega, n_nodes=n_nodes, tail=tail)
        self.p = stats.p

    def pack(self, p: Params) -> np.ndarray:
        beta = getattr(p, "beta", None)
        beta = np.zeros((2, self.p)) if beta is None else np.asarray(beta, np.float64).reshape(2, self.p)
        return np.concatenate([super().pack(p), beta.ravel()])

    def unpack(self, v: np.ndarray) -> CovParams:
        k = 2 * self.p
        base = super().unpack(v[:v.size - k])
        return CovParams(**vars(base), beta=np.asarray(v[v.size - k:]).reshape(2, self.p))

    def bounds(self) -> list[tuple[float, float]]:
        return super().bounds() + [(-50.0, 50.0)] * (2 * self.p)

    def cell_moments(self, p: Params) -> tuple[np.ndarray, np.ndarray]:
        st = self.st
        beta = getattr(p, "beta", None)
        if beta is None:
            return st.zbar, st.ssw
        bc = beta[st.cell_class]                                     # (C, p)
        sz = st.sz - np.einsum("cp,cp->c", st.sx, bc)
        szz = st.szz - 2 * np.einsum("cp,cp->c", st.sxz, bc) + np.einsum("cp,cpq,cq->c", bc, st.sxx, bc)
        return sz / st.n, np.maximum(szz - sz ** 2 / st.n, 0.0)


def make_likelihood(st: CellStats, scale: np.ndarray, corr: np.ndarray, omega: np.ndarray, n_nodes: int = 15,
                    tail: np.ndarray | None = None) -> UnitLikelihood:
    """:class:`CovUnitLikelihood` for statistics with covariate sums, else :class:`UnitLikelihood`."""
    if isinstance(st, CovCellStats):
        return CovUnitLikelihood(st, scale, corr, omega, n_nodes=n_nodes, tail=tail)
    return UnitLikelihood(st, scale, corr, omega, n_nodes=n_nodes, tail=tail)
