"""The model specification shared by every mixed-model backend.

A formula plus a data frame becomes a :class:`ModelSpec` (lme4's *model frame* plus
``mkReTrms``): the response ``y``, the dense fixed-effects matrix ``X`` with R's column
names, and one :class:`RandomTerm` per random-effects term.  Backends (native, statsmodels,
lme4, PyMC) consume only this object, so they all fit *the same* model.

The linear mixed model is

.. math::

    y = X\\beta + Z b + \\varepsilon,\\qquad
    b = \\Lambda_\\theta u,\\; u \\sim N(0, \\sigma^2 I_q),\\qquad
    \\varepsilon \\sim N(0, \\sigma^2 W^{-1}),

where ``Z = [Z_1 … Z_K]`` is built from the random terms and ``Λ_θ`` is block diagonal
with, for term ``k``, ``I_{n_k} ⊗ T_k`` and ``T_k`` the ``p_k × p_k`` lower-triangular
relative Cholesky factor whose lower triangle (column-major, lme4's order) is the slice of
``θ`` belonging to the term.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

__all__ = ["RandomTerm", "ModelSpec", "FixedTerms"]


@dataclass
class RandomTerm:
    """One random-effects term ``(expr | group)`` after expansion.

    ``(x || g)`` is expanded into independent terms (one per column, lme4 names them
    ``g``, ``g.1``, …) and ``(1 | g1/g2)`` into ``(1 | g2:g1)`` and ``(1 | g1)``, so every
    ``RandomTerm`` has an unstructured (correlated) ``p × p`` covariance.

    Attributes
    ----------
    group:
        lme4's grouping name as printed by ``VarCorr`` (``"speaker"``, ``"g2:g1"``,
        ``"g.1"`` for the second part of a ``||`` term).
    group_factor:
        the grouping expression without the ``.1`` suffix (``"g"``, ``"g2:g1"``); the
        name under which ``ngrps`` and ``ranef`` are reported.
    term_names:
        R names of the term's columns: ``["(Intercept)", "Days"]``,
        ``['dummy(label, "spoof")']``.
    codes:
        ``int64`` array of length ``n``: level index of every row (0 … n_levels-1).
    levels:
        level labels in R's factor order (sorted), as strings.
    X:
        ``(n, p)`` float64: the raw model-matrix columns of the term for every row.
    """

    group: str
    group_factor: str
    term_names: list[str]
    codes: np.ndarray
    levels: list[str]
    X: np.ndarray
    #: ``"us"`` (unstructured) or lme4 2.0's ``"cs"``, ``"cs_hom"``, ``"ar1"``,
    #: ``"ar1_het"`` (see :mod:`scoremix.lme.covstruct`)
    structure: str = "us"

    @property
    def p(self) -> int:
        return int(self.X.shape[1])

    @property
    def n_levels(self) -> int:
        return len(self.levels)

    @property
    def n_theta(self) -> int:
        return self.p * (self.p + 1) // 2

    @property
    def theta_lower(self) -> np.ndarray:
        """Lower bounds of this term's θ (lme4: 0 on the diagonal, -inf off it),
        lower triangle in column-major order."""
        out = []
        for j in range(self.p):
            for i in range(j, self.p):
                out.append(0.0 if i == j else -np.inf)
        return np.asarray(out)

    @property
    def theta_init(self) -> np.ndarray:
        """lme4's starting value: the identity (1 on the diagonal, 0 off it)."""
        return np.where(self.theta_lower == 0.0, 1.0, 0.0)

    def theta_names(self) -> list[str]:
        """Names like lme4's ``getME(m, 'theta')``: ``g.(Intercept)``,
        ``g.Days.(Intercept)``, ``g.Days`` (named by the grouping factor, so the parts of a
        ``(x || g)`` term are all ``g.…``)."""
        names = []
        for j in range(self.p):
            for i in range(j, self.p):
                if i == j:
                    names.append(f"{self.group_factor}.{self.term_names[i]}")
                else:
                    names.append(
                        f"{self.group_factor}.{self.term_names[i]}.{self.term_names[j]}"
                    )
        return names


@dataclass
class FixedTerms:
    """R's ``terms`` of the fixed part, as lmerTest's F tests use them.

    Attributes
    ----------
    labels:
        ``term.labels``: ``["Product", "Information", "Product:Information"]``.
    intercept:
        whether ``X`` has an intercept column.
    variables:
        per term, the labels of its variables.
    numeric:
        per variable label, whether R's ``dataClasses`` call it ``"numeric"`` (factors,
        logicals and ``dummy()`` indicators are not).
    assign:
        per column of ``X`` (after rank-deficient columns are dropped, as lme4 subsets
        ``attr(X, "assign")``): 0 for the intercept, ``k`` for ``labels[k-1]``.
    treatment:
        every factor of ``X`` is coded by treatment contrasts.
    term_matrix:
        ``label -> (matrix, names)``: ``model.matrix(~ 0 + label)`` on the model frame
        (full indicator coding, R's column names).
    treatment_design:
        ``() -> (X_t, names, assign)``: the fixed-effects matrix with every factor coded by
        treatment contrasts (lmerTest's ``get_model_matrix(type = "remake", contrasts =
        "contr.treatment")``), before rank-deficient columns are dropped.
    """

    labels: list[str]
    intercept: bool
    variables: list[list[str]]
    numeric: dict[str, bool]
    assign: np.ndarray
    treatment: bool = True
    term_matrix: Callable[[str], tuple[np.ndarray, list[str]]] | None = None
    treatment_design: Callable[[], tuple[np.ndarray, list[str], np.ndarray]] | None = None


@dataclass
class ModelSpec:
    """Everything a backend needs to fit one linear mixed model.

    Attributes
    ----------
    formula:
        the formula as given by the user.
    response:
        name of the response column.
    y:
        ``(n,)`` float64 response (minus the offset when the model has one: the model is
        ``y - offset = Xβ + Zb + ε``).
    X:
        ``(n, p)`` float64 fixed-effects model matrix (treatment contrasts, R's column
        order and names), rank-deficient columns already dropped.
    fixef_names:
        R names of the columns of ``X`` (``"(Intercept)"``, ``"labelspoof"``, ``"x1:x2"``).
    terms:
        random terms in lme4's order, which is also the order of ``θ`` and of ``VarCorr``:
        ``lme4::mkReTrms`` reorders by ``rev(order(nlevels))`` — only when the number of
        levels increases somewhere along the formula, and then ties come out reversed.
    weights:
        prior weights (``None`` = all ones).
    data:
        the model frame: the rows of the user's data actually used (after NA removal),
        with the original index.
    n_dropped:
        rows removed because a used column was NA.
    dropped_fixef:
        names of fixed-effect columns dropped as rank-deficient.
    dispersion_codes / dispersion_levels / dispersion_formula:
        for a class-specific residual variance (``dispersion="~ label"``): the level of
        every row and the level names; ``None`` for a homoscedastic model.
    fixed_design:
        ``newdata -> (m, p) X`` with the same encoding (used by ``predict``).
    random_design:
        ``newdata -> list[(codes, X_k)]`` per term, code ``-1`` for a level unseen in
        fitting (its random effect is then 0, as in lme4's ``allow.new.levels=TRUE``).
    offset:
        ``(n,)`` known part of the linear predictor (``offset()`` terms and ``offset=``),
        ``None`` without one; ``fitted`` and ``predict`` add it back.
    offset_design:
        ``newdata -> (m,)`` offset of new rows.
    fixed_terms:
        the fixed part's terms and the column → term map (:class:`FixedTerms`), used by
        the F tests of :func:`scoremix.anova`; ``None`` for a spec built by hand.
    """

    formula: str
    response: str
    y: np.ndarray
    X: np.ndarray
    fixef_names: list[str]
    terms: list[RandomTerm]
    data: pd.DataFrame
    weights: np.ndarray | None = None
    n_dropped: int = 0
    dropped_fixef: list[str] = field(default_factory=list)
    dispersion_formula: str | None = None
    dispersion_codes: np.ndarray | None = None
    dispersion_levels: list[str] | None = None
    fixed_design: Callable[[pd.DataFrame], np.ndarray] | None = None
    random_design: Callable[[pd.DataFrame], list[tuple[np.ndarray, np.ndarray]]] | None = None
    offset: np.ndarray | None = None
    offset_design: Callable[[pd.DataFrame], np.ndarray] | None = None
    fixed_terms: FixedTerms | None = None

    @property
    def n(self) -> int:
        return int(self.y.shape[0])

    @property
    def p(self) -> int:
        return int(self.X.shape[1])

    @property
    def q(self) -> int:
        return int(sum(t.p * t.n_levels for t in self.terms))

    @property
    def n_theta(self) -> int:
        return int(sum(t.n_theta for t in self.terms))

    def theta_lower(self) -> np.ndarray:
        return np.concatenate([t.theta_lower for t in self.terms]) if self.terms else np.zeros(0)

    def theta_init(self) -> np.ndarray:
        return np.concatenate([t.theta_init for t in self.terms]) if self.terms else np.zeros(0)

    def ngrps(self) -> dict[str, int]:
        """Number of levels per grouping factor (lme4's ``ngrps``)."""
        out: dict[str, int] = {}
        for t in self.terms:
            out.setdefault(t.group_factor, t.n_levels)
        return out
