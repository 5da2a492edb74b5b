r"""Estimated marginal means (emmeans's ``emmeans``).

For the factors ``specs`` (and ``by``) the reference grid (:mod:`scoremix.emm.grid`) is
averaged over the other factors: the marginal mean of a cell :math:`c` is
:math:`\ell_c'\hat\beta` with :math:`\ell_c = \sum_{r \in c} w_r x_r / \sum_{r\in c} w_r`,
its standard error :math:`\sqrt{\ell_c' V \ell_c}`, its degrees of freedom those of
:math:`\ell_c` (:mod:`scoremix.emm.basis`) and its interval
:math:`\ell_c'\hat\beta \pm t_{\nu, 1-\alpha/2}\,\mathrm{SE}`.

Weights (emmeans's ``weights=``) over the averaged-over factors' combinations :math:`a`
(``n_r`` = ``.wgt.``, fitted rows of grid row :math:`r`):

* ``"equal"``: :math:`w = 1`;
* ``"proportional"``: :math:`w_a = \sum_{r: a(r) = a} n_r` (their joint frequencies in the
  data, over all levels of the kept factors);
* ``"outer"``: the product of the one-way margins of that table;
* ``"cells"``: :math:`w_r = n_r` (each cell's own frequencies);
* ``"flat"``: :math:`w_r = 1\{n_r > 0\}`.

On a link scale (a GLMM), ``type="response"`` reports :math:`g^{-1}(\ell'\hat\beta)`,
delta-method SE :math:`|\mu'(\eta)|\,\mathrm{SE}` and the back-transformed interval.
:func:`regrid` (emmeans's ``regrid``) instead re-bases the grid on the response scale:
the means become :math:`\hat\mu_c = g^{-1}(\ell_c'\hat\beta)` with covariance
:math:`D L V L' D`, :math:`D = \mathrm{diag}\{\mu'(\ell_c'\hat\beta)\}` (delta method),
so their contrasts are differences of probabilities or rates with symmetric intervals.
For a transformation fit the means are on the latent (transformed) scale.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from scoremix.emm.basis import FitBasis, fit_basis
from scoremix.emm.errors import EmmError
from scoremix.emm.grid import RefGrid, ref_grid

__all__ = ["EmmGrid", "emmeans", "regrid", "parse_specs", "WEIGHTS"]

WEIGHTS = ("equal", "proportional", "outer", "cells", "flat")


def parse_specs(specs: str | Sequence[str], by: str | Sequence[str] | None) -> tuple[list[str], list[str]]:
    """``"A"``, ``["A", "B"]``, ``"~ A * B | C"`` → (specs, by)."""
    by_l = [] if by is None else ([by] if isinstance(by, str) else list(by))
    if isinstance(specs, str):
        s = specs.strip()
        if s.startswith("~"):
            s = s[1:]
        if "|" in s:
            s, b = s.split("|", 1)
            by_l = by_l + [x.strip() for x in b.replace("*", "+").replace(":", "+").split("+") if x.strip()]
        sp = [x.strip() for x in s.replace("*", "+").replace(":", "+").split("+") if x.strip()]
    else:
        sp = [str(x) for x in specs]
    sp = [x for x in sp if x != "1"]
    return sp, by_l


@dataclass
class EmmGrid:
    """Marginal means: ``grid`` (label columns ``specs + by``), their linear functions
    ``L`` (rows) and what is needed to summarise and contrast them."""

    grid: pd.DataFrame
    L: np.ndarray
    specs: list[str]
    by: list[str]
    basis: FitBasis
    type: str = "link"
    level: float = 0.95
    ref: RefGrid | None = field(default=None, repr=False)
    est_name: str | None = None

    @property
    def estimate(self) -> np.ndarray:
        return self.L @ self.basis.beta

    @property
    def vcov(self) -> np.ndarray:
        return self.L @ self.basis.V @ self.L.T

    def summary(self, level: float | None = None) -> pd.DataFrame:
        """emmeans's summary: label columns, ``emmean`` (or the link's response name),
        ``SE``, ``df``, ``lower.CL``, ``upper.CL`` (``asymp.LCL``/``asymp.UCL`` when
        ``df`` is infinite)."""
        level = self.level if level is None else level
        est = self.estimate
        se = np.sqrt(np.maximum(np.diag(self.vcov), 0))
        df = self.basis.df(self.L)
        q = np.where(np.isfinite(df), stats.t.ppf(0.5 + level / 2, np.where(np.isfinite(df), df, 1)),
                     stats.norm.ppf(0.5 + level / 2))
        lo, hi = est - q * se, est + q * se
        out = self.grid.reset_index(drop=True).copy()
        link = self.basis.link
        name = self.est_name or "emmean"
        if self.type == "response" and link.link != "identity":
            name = link.response_name
            se = np.abs(link.mu_eta(est)) * se
            est, lo, hi = link.linkinv(est), link.linkinv(lo), link.linkinv(hi)
        asym = bool(np.all(~np.isfinite(df)))
        out[name] = est
        out["SE"] = se
        out["df"] = df
        out["asymp.LCL" if asym else "lower.CL"] = lo
        out["asymp.UCL" if asym else "upper.CL"] = hi
        return out

    def __repr__(self) -> str:
        return f"EmmGrid(specs={self.specs}, by={self.by}, df={self.basis.mode})\n{self.summary()}"


def _weights_for(kind: str, rg: RefGrid, use: list[str], avgd: list[str]) -> np.ndarray:
    """Per grid row its weight within its kept cell (emmeans's rules)."""
    wgt = rg.wgt.copy()
    if np.all(np.isclose(wgt, 0)):
        wgt = wgt + 1
    if kind == "equal" or not avgd:
        return np.ones(len(rg.grid))
    if kind == "cells":
        return wgt
    if kind == "flat":
        return (wgt > 0).astype(float)
    key = rg.grid[avgd].astype(str).agg("\x1f".join, axis=1) if avgd else pd.Series([""] * len(wgt))
    table = pd.Series(wgt).groupby(key.to_numpy()).sum()
    if kind == "proportional":
        return table.reindex(key.to_numpy()).to_numpy(dtype=float)
    if kind == "outer":
        N = float(wgt.sum())
        w = np.full(len(wgt), N)
        for a in avgd:
            marg = pd.Series(wgt).groupby(rg.grid[a].astype(str).to_numpy()).sum() / N
            w = w * marg.reindex(rg.grid[a].astype(str).to_numpy()).to_numpy(dtype=float)
        return w
    raise EmmError(f"unknown weights {kind!r}; choose one of {WEIGHTS}")


def average_grid(rg: RefGrid, facs: list[str], weights: str | Sequence[float] = "equal") -> tuple[pd.DataFrame, np.ndarray]:
    """Average the reference grid over every variable not in ``facs``: the cells (label
    frame, first variable fastest) and their linear functions."""
    for f in facs:
        if f not in rg.variables:
            raise EmmError(f"no variable named {f!r} in the reference grid (variables: {rg.variables})")
    avgd = [v for v in rg.variables if v not in facs and len(rg.levels[v]) > 1]
    if isinstance(weights, str):
        w = _weights_for(weights, rg, facs, avgd)
    else:
        w = np.asarray(weights, dtype=float)
        ncomb = int(np.prod([len(rg.levels[a]) for a in avgd])) if avgd else 1
        if w.size != ncomb:
            raise EmmError(f"weights has {w.size} values, the averaged-over combinations number {ncomb}")
        # numeric weights are in the order of the averaged-over combinations
        sizes = [len(rg.levels[a]) for a in avgd]
        pos = [np.array([rg.levels[a].index(v) for v in rg.grid[a]]) for a in avgd]
        w = w[np.ravel_multi_index(pos, sizes, order="F")] if avgd else np.full(len(rg.grid), w[0])
    sizes = [len(rg.levels[f]) for f in facs]
    if facs:
        pos = [np.array([rg.levels[f].index(v) for v in rg.grid[f]]) for f in facs]
        cell = np.ravel_multi_index(pos, sizes, order="F")
        ncell = int(np.prod(sizes))
    else:
        cell = np.zeros(len(rg.grid), dtype=int)
        ncell = 1
    L = np.zeros((ncell, rg.X.shape[1]))
    for c in range(ncell):
        m = cell == c
        ws = w[m]
        tot = ws.sum()
        L[c] = (ws @ rg.X[m]) / tot if tot > 1e-8 else np.nan
    idx = np.indices(sizes[::-1]).reshape(len(sizes), -1)[::-1] if facs else np.zeros((0, 1), int)
    cells = pd.DataFrame({f: [rg.levels[f][i] for i in idx[j]] for j, f in enumerate(facs)})
    if not facs:
        cells = pd.DataFrame({"1": ["overall"]})
    return cells, L


def emmeans(fit: Any, specs: str | Sequence[str], *, by: str | Sequence[str] | None = None,
            at: Mapping[str, Any] | None = None, type: str = "link",
            weights: str | Sequence[float] = "equal", lmer_df: str = "satterthwaite",
            level: float = 0.95) -> EmmGrid:
    """Estimated marginal means of ``specs`` (optionally ``by`` other factors).

    Parameters
    ----------
    fit:
        an :class:`~scoremix.lme.result.LmerResult` (or any fit described in
        :mod:`scoremix.emm.basis`).
    specs:
        factor name(s), ``"1"`` for the grand mean, or ``"~ A | B"``.
    by:
        factor(s) whose levels define separate families.
    at:
        covariate values / factor levels of the reference grid.
    type:
        ``"link"`` (default) or ``"response"`` (back-transformed through the fit's link;
        the same as ``"link"`` for a linear mixed model).
    weights:
        ``"equal"``, ``"proportional"``, ``"outer"``, ``"cells"``, ``"flat"`` or one
        weight per combination of the averaged-over factors.
    lmer_df:
        ``"satterthwaite"`` (default here; emmeans's default is ``"kenward-roger"`` for up
        to 3000 rows), ``"kenward-roger"`` or ``"asymptotic"``.
    level:
        confidence level of the intervals.

    Returns
    -------
    EmmGrid
        ``.summary()`` gives emmeans's table.
    """
    if type not in ("link", "response"):
        raise EmmError(f"type must be 'link' or 'response', got {type!r}")
    if not 0 < level < 1:
        raise EmmError(f"level must be in (0, 1), got {level!r}")
    sp, by_l = parse_specs(specs, by)
    basis = fit_basis(fit, lmer_df)
    rg = ref_grid(fit, at=at)
    cells, L = average_grid(rg, sp + by_l, weights)
    return EmmGrid(cells, L, sp, by_l, basis, type=type, level=level, ref=rg)


def regrid(emm: EmmGrid) -> EmmGrid:
    r"""The marginal means re-based on the response scale (emmeans's ``regrid``).

    The new "coefficients" are the means :math:`\hat\mu = g^{-1}(L\hat\beta)` with the
    delta-method covariance :math:`D L V L' D` (:math:`D = \mathrm{diag}\,\mu'(L\hat\beta)`)
    and infinite df; the grid's linear functions become the identity.  Contrasts of the
    result are differences (not ratios) of response-scale means; its summary intervals are
    :math:`\hat\mu \pm z\,\mathrm{SE}`.  On an identity link (an LMM) nothing changes.
    """
    from scoremix.emm.basis import FitBasis
    from scoremix.emm.links import IDENTITY
    if not isinstance(emm, EmmGrid):
        raise EmmError(f"regrid needs an EmmGrid from emmeans(), got {type(emm).__name__}")
    link = emm.basis.link
    if link is IDENTITY or link.link == "identity":
        return emm
    eta = emm.estimate
    if np.any(~np.isfinite(eta)):
        raise EmmError("regrid: some marginal means are not estimable (empty cells)")
    D = np.asarray(link.mu_eta(eta), float)
    mu = np.asarray(link.linkinv(eta), float)
    V = D[:, None] * emm.vcov * D[None, :]
    labels = [f"cell{i + 1}" for i in range(mu.size)]
    basis = FitBasis(mu, V, labels, lambda row: np.inf, IDENTITY, "asymptotic", emm.basis.spec)
    return EmmGrid(emm.grid.copy(), np.eye(mu.size), list(emm.specs), list(emm.by), basis,
                   type="link", level=emm.level, ref=emm.ref, est_name=link.response_name)
