r"""Contrasts of estimated marginal means (emmeans's ``contrast``).

Within each ``by`` group the :math:`k` means :math:`\hat\mu = L\hat\beta` are combined by a
coefficient matrix :math:`C` (:math:`k \times m`): the estimates are :math:`C'\hat\mu`
with linear functions :math:`C'L`, standard errors
:math:`\sqrt{\mathrm{diag}(C'LVL'C)}`, df per row (:mod:`scoremix.emm.basis`),
:math:`t = \mathrm{estimate}/\mathrm{SE}` and p-values adjusted within the family
(:mod:`scoremix.emm.adjust`).  Methods (emmeans's ``.emmc`` functions; labels as emmeans):

* ``"pairwise"``: :math:`\mu_i - \mu_j`, :math:`i < j` (``"a - b"``); ``"revpairwise"``:
  :math:`\mu_j - \mu_i`;
* ``"trt.vs.ctrl"``: :math:`\mu_j - \mu_{ref}` (``ref`` the first level by default);
* ``"eff"``: :math:`\mu_i - \bar\mu` (``"a effect"``);
* ``"consec"``: :math:`\mu_{i+1} - \mu_i`;
* ``"poly"``: orthogonal polynomial contrasts scaled to integers (``"linear"``, …);
* a dict ``{name: coefficients}`` or a ``k × m`` array.

Default adjustments as emmeans: Tukey (pairwise), ``dunnettx`` (trt.vs.ctrl), ``fdr``
(eff), ``mvt`` (consec), none otherwise.  On the response scale of a log or logit link
the contrasts are back-transformed to ratios (``ratio``/``odds.ratio``, tested against 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from scoremix.emm.adjust import adjust_p, critical_values, normalize_adjust
from scoremix.emm.errors import EmmError
from scoremix.emm.means import EmmGrid

__all__ = ["ContrastResult", "contrast", "contrast_coefficients", "METHODS"]

METHODS = ("pairwise", "revpairwise", "trt.vs.ctrl", "eff", "consec", "poly")
_DEFAULT_ADJUST = {"pairwise": "tukey", "revpairwise": "tukey", "trt.vs.ctrl": "dunnettx",
                   "eff": "fdr", "consec": "mvt", "poly": "none"}


def _poly(k: int, max_degree: int | None = None) -> tuple[np.ndarray, list[str]]:
    """emmeans's ``poly.emmc``: orthogonal polynomials in ``1..k`` rescaled to integers."""
    from scoremix.lme.contrasts import contrast_matrix
    deg = min(6, k - 1) if max_degree is None else min(max_degree, k - 1)
    M, _ = contrast_matrix("contr.poly", [str(i) for i in range(k)])
    M = M[:, :deg]
    out = np.empty_like(M)
    for j in range(deg):
        con = M[:, j].copy()
        pos = con > 0.01
        con = con / con[pos].min()
        z = np.max(np.abs(con - np.round(con)))
        while z > 0.05:
            con = con / z
            z = np.max(np.abs(con - np.round(con)))
        out[:, j] = np.round(con)
    names = ["linear", "quadratic", "cubic", "quartic"] + [f"degree {d}" for d in range(5, 21)]
    return out, names[:deg]


def contrast_coefficients(levels: list[str], method: Any, ref: int | str | None = None,
                          ) -> tuple[np.ndarray, list[str], bool]:
    """``(C, labels, pairwise)``: the ``k × m`` coefficients, row labels, and whether the
    family is a set of pairwise comparisons (Tukey's domain)."""
    k = len(levels)
    cols: list[np.ndarray] = []
    labels: list[str] = []
    if isinstance(method, str):
        if method not in METHODS:
            raise EmmError(f"unknown contrast method {method!r}; choose one of {METHODS}, a dict "
                           "{name: coefficients} or a k x m array")
        if method == "pairwise":
            for i in range(k - 1):
                for j in range(i + 1, k):
                    c = np.zeros(k); c[i], c[j] = 1, -1
                    cols.append(c); labels.append(f"{levels[i]} - {levels[j]}")
        elif method == "revpairwise":
            for i in range(1, k):
                for j in range(i):
                    c = np.zeros(k); c[i], c[j] = 1, -1
                    cols.append(c); labels.append(f"{levels[i]} - {levels[j]}")
        elif method == "trt.vs.ctrl":
            r = 0 if ref is None else (levels.index(ref) if isinstance(ref, str) else int(ref))
            if isinstance(ref, str) and ref not in levels:
                raise EmmError(f"ref level {ref!r} is not among {levels}")
            if not 0 <= r < k:
                raise EmmError(f"ref index {ref} out of range for {k} levels")
            for j in range(k):
                if j != r:
                    c = np.zeros(k); c[j], c[r] = 1, -1
                    cols.append(c); labels.append(f"{levels[j]} - {levels[r]}")
        elif method == "eff":
            for i in range(k):
                c = np.full(k, -1 / k); c[i] += 1
                cols.append(c); labels.append(f"{levels[i]} effect")
        elif method == "consec":
            for i in range(1, k):
                c = np.zeros(k); c[i], c[i - 1] = 1, -1
                cols.append(c); labels.append(f"{levels[i]} - {levels[i - 1]}")
        elif method == "poly":
            P, names = _poly(k)
            return P, names, False
        C = np.column_stack(cols) if cols else np.zeros((k, 0))
        return C, labels, method in ("pairwise", "revpairwise")
    if isinstance(method, Mapping):
        labels = [str(n) for n in method]
        C = np.column_stack([np.asarray(v, float) for v in method.values()])
    else:
        C = np.asarray(method, float)
        if C.ndim == 1:
            C = C[:, None]
        labels = [f"c{j + 1}" for j in range(C.shape[1])]
    if C.shape[0] != k:
        raise EmmError(f"contrast coefficients have {C.shape[0]} rows, the family has {k} means "
                       f"({levels})")
    return C, labels, False


@dataclass
class ContrastResult:
    """Contrasts: ``grid`` (``contrast`` and ``by`` columns), linear functions ``L``,
    per-row family index, and the options used."""

    grid: pd.DataFrame
    L: np.ndarray
    families: list[np.ndarray]
    fam_size: list[int]
    ranks: list[int]
    pairwise: bool
    adjust: str
    emm: EmmGrid

    def _stats(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        b = self.emm.basis
        est = self.L @ b.beta
        V = self.L @ b.V @ self.L.T
        se = np.sqrt(np.maximum(np.diag(V), 0))
        return est, se, b.df(self.L), V

    def summary(self, adjust: str | None = None) -> pd.DataFrame:
        """emmeans's table: ``contrast``, by columns, ``estimate``, ``SE``, ``df``,
        ``t.ratio`` (``z.ratio`` for infinite df), ``p.value``."""
        adjust = self.adjust if adjust is None else adjust
        est, se, df, V = self._stats()
        t = est / se
        p = np.full(est.size, np.nan)
        for rows, k, r in zip(self.families, self.fam_size, self.ranks):
            a = normalize_adjust(adjust, self.pairwise, rows.size)
            sd = np.sqrt(np.diag(V[np.ix_(rows, rows)]))
            corr = V[np.ix_(rows, rows)] / np.outer(sd, sd)
            p[rows] = adjust_p(t[rows], df[rows], a, fam_size=k, corr=corr, scheffe_rank=r)
        out = self.grid.reset_index(drop=True).copy()
        link = self.emm.basis.link
        asym = bool(np.all(~np.isfinite(df)))
        if self.emm.type == "response" and link.ratio_name is not None:
            out[link.ratio_name] = np.exp(est)
            out["SE"] = np.exp(est) * se
            out["df"] = df
            out["null"] = 1.0
        else:
            out["estimate"] = est
            out["SE"] = se
            out["df"] = df
        out["z.ratio" if asym else "t.ratio"] = t
        out["p.value"] = p
        return out

    def confint(self, level: float | None = None, adjust: str | None = None) -> pd.DataFrame:
        """Simultaneous intervals (``lower.CL``, ``upper.CL``) with the family's critical
        values (emmeans's ``confint``)."""
        level = self.emm.level if level is None else level
        adjust = self.adjust if adjust is None else adjust
        est, se, df, V = self._stats()
        cv = np.full(est.size, np.nan)
        for rows, k, r in zip(self.families, self.fam_size, self.ranks):
            a = normalize_adjust(adjust, self.pairwise, rows.size)
            sd = np.sqrt(np.diag(V[np.ix_(rows, rows)]))
            corr = V[np.ix_(rows, rows)] / np.outer(sd, sd)
            cv[rows] = critical_values(level, df[rows], a, fam_size=k, corr=corr, scheffe_rank=r)
        out = self.grid.reset_index(drop=True).copy()
        out["estimate"], out["SE"], out["df"] = est, se, df
        asym = bool(np.all(~np.isfinite(df)))
        lo, hi = est - cv * se, est + cv * se
        link = self.emm.basis.link
        if self.emm.type == "response" and link.ratio_name is not None:
            out = out.rename(columns={"estimate": link.ratio_name})
            out[link.ratio_name] = np.exp(est)
            out["SE"] = np.exp(est) * se
            lo, hi = np.exp(lo), np.exp(hi)
        out["asymp.LCL" if asym else "lower.CL"] = lo
        out["asymp.UCL" if asym else "upper.CL"] = hi
        return out

    def __repr__(self) -> str:
        return f"ContrastResult(adjust={self.adjust!r})\n{self.summary()}"


def contrast(emm: EmmGrid, method: Any = "eff", *, by: str | Sequence[str] | None = ...,  # type: ignore[assignment]
             adjust: str | None = None, ref: int | str | None = None) -> ContrastResult:
    """Contrasts among the marginal means of ``emm`` within each ``by`` group (default:
    the grid's ``by``).  See the module docstring for the methods and adjustments.
    ``ref`` (``trt.vs.ctrl``): the control level's label or 0-based index."""
    if not isinstance(emm, EmmGrid):
        raise EmmError(f"contrast needs an EmmGrid from emmeans(), got {type(emm).__name__}")
    by_l = list(emm.by) if by is ... else ([] if by is None else ([by] if isinstance(by, str) else list(by)))
    cols = [c for c in emm.grid.columns]
    for b in by_l:
        if b not in cols:
            raise EmmError(f"by variable {b!r} is not a column of the marginal means ({cols})")
    inner = [c for c in cols if c not in by_l]
    g = emm.grid.reset_index(drop=True)
    fmt = lambda v: v if isinstance(v, str) else format(float(v), ".15g")  # noqa: E731
    labels_all = g[inner].map(fmt).agg(" ".join, axis=1) if inner else pd.Series(["."] * len(g))
    if by_l:
        keys = g[by_l].map(fmt).agg("\x1f".join, axis=1)
        order = list(dict.fromkeys(keys))
        groups = [np.flatnonzero(keys.to_numpy() == kk) for kk in order]
    else:
        groups = [np.arange(len(g))]
    Ls, rows_out, families, fam_size, ranks = [], [], [], [], []
    pairwise = False
    start = 0
    mname = method if isinstance(method, str) else "custom"
    for grp in groups:
        levels = labels_all.iloc[grp].tolist()
        C, labels, pairwise = contrast_coefficients(levels, method, ref)
        Ls.append(C.T @ emm.L[grp])
        for lab in labels:
            row = {"contrast": lab}
            for b in by_l:
                row[b] = g.loc[grp[0], b]
            rows_out.append(row)
        m = C.shape[1]
        families.append(np.arange(start, start + m))
        fam_size.append(len(grp))
        ranks.append(int(np.linalg.matrix_rank(C)) if m else 0)
        start += m
    L = np.vstack(Ls)
    grid = pd.DataFrame(rows_out, columns=["contrast"] + by_l)
    adj = _DEFAULT_ADJUST.get(mname, "none") if adjust is None else adjust
    normalize_adjust(adj, True, 2)  # validate the name early
    return ContrastResult(grid, L, families, fam_size, ranks, pairwise, adj, emm)
