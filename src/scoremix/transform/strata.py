r"""Class-stratified transformation models: one monotone transform per stratum.

Model (``lmer(..., transform="monotone-by-class")``, strata column ``control=dict(strata=...)``,
default ``"label"``):

.. math::

    h_{s(i)}(y_i) = x_i'\beta + z_i'b + \sigma_{d(i)}\varepsilon_i,\qquad
    b\sim N(0,\Sigma_\theta),\ \varepsilon_i\sim N(0,1),

with one strictly increasing :math:`h_s` per level :math:`s` of the strata column (tram's
``| stratum``).  Each stratum has its own cells (distinct scores *within* the stratum) and
its own cutpoint sieve in the stratum's rank-based normal score, so each class's marginal
shape is estimated nonparametrically, while speaker/attack/subgroup effects stay shifts on
the common latent Gaussian scale.

Identifiability.  Within a stratum, :math:`h_s` absorbs any constant: the intercept and
every fixed-effect column constant within strata (e.g. the ``label`` main effect) are
dropped from the fit and reported as 0 (with zero variance).  The scale of :math:`h_s` is
confounded with the stratum's residual SD: in every connected group of strata and
dispersion levels (strata linked by shared levels) the first dispersion level is fixed at
:math:`\sigma=1`, e.g. ``dispersion="~ label"`` ⇒ both classes have latent residual SD 1
(the class's spread is carried by :math:`h_s`), ``dispersion="~ dgrp"`` with one level per
attack inside the spoof class ⇒ attacks' SDs relative to the first attack.  Location:
no stratum intercept — the absorbed columns are 0 and :math:`h_s` is the fitted edges
themselves (``clm``'s class thresholds), so the latent mean of a trial is
:math:`x_i'\beta + z_i'b` exactly as ``fit.predict()`` gives it; :math:`h_s` at the
stratum's median score is in ``fit_info["transform"]["median_latent_by_stratum"]``.

Error rates at a score threshold :math:`\tau` (accept when :math:`S\ge\tau`), per-trial
latent moments :math:`m_i, s_i` (``scoremix.model_eer.trial_moments``):

.. math::

    \mathrm{FNR}(\tau)=\frac1{n_1}\sum_{i\in\text{pos}}\Phi\Big(\frac{h_{s(i)}(\tau)-m_i}{s_i}\Big),\qquad
    \mathrm{FPR}(\tau)=\frac1{n_0}\sum_{i\in\text{neg}}\Big[1-\Phi\Big(\frac{h_{s(i)}(\tau)-m_i}{s_i}\Big)\Big].

No single latent axis carries both classes any more: one score threshold is a different
latent threshold :math:`h_s^-(\tau)` (:meth:`StratifiedTransform.latent_threshold`, the exact
left limit at tied scores) in each stratum.  The predictive layer
(:mod:`scoremix.predictive`, its common threshold axis :mod:`scoremix.predictive.axis`)
computes every model-based measure of these fits — ``sm.model_eer`` (also ``by=``),
``model_subgroup_dcf``, ``model_det_curve`` — and :func:`stratified_model_eer` is a thin
wrapper on it; all depend on the scores only through their ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix.transform.basis import CutpointBasis
from scoremix.transform.errors import TransformError
from scoremix.transform.monotone import MonotoneTransform

__all__ = ["StackedBasis", "StratifiedTransform", "UnknownStratumError", "fixed_dispersion_levels",
           "stratum_confounded_columns"]


class UnknownStratumError(TransformError, KeyError):
    """A stratum level that the stratified transform was not fitted with."""

    def __str__(self) -> str:   # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


@dataclass
class StackedBasis:
    """The cutpoints of several strata side by side: parameters, knot values and edges
    are the strata's concatenated, ``seg`` indexes the concatenated knot values.  Same
    interface as :class:`~scoremix.transform.basis.CutpointBasis`."""

    parts: list[CutpointBasis]
    par_off: np.ndarray = field(init=False)
    edge_off: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.par_off = np.concatenate([[0], np.cumsum([b.n_par for b in self.parts])]).astype(int)
        self.edge_off = np.concatenate([[0], np.cumsum([b.seg.size for b in self.parts])]).astype(int)
        self.knots = np.concatenate([b.knots for b in self.parts])
        self.seg = np.concatenate([b.seg + o for b, o in zip(self.parts, self.par_off)])
        self.seg_hi = np.concatenate([b.seg_hi + o for b, o in zip(self.parts, self.par_off)])
        self.w = np.concatenate([b.w for b in self.parts])
        self.free = all(b.free for b in self.parts)

    @property
    def n_par(self) -> int:
        return int(self.par_off[-1])

    def _sl(self, k: int) -> slice:
        return slice(int(self.par_off[k]), int(self.par_off[k + 1]))

    def knot_values(self, par: np.ndarray) -> np.ndarray:
        return np.concatenate([b.knot_values(par[self._sl(k)]) for k, b in enumerate(self.parts)])

    def alpha(self, c: np.ndarray) -> np.ndarray:
        return (1.0 - self.w) * c[self.seg] + self.w * c[self.seg_hi]

    def grad_c(self, g_alpha: np.ndarray) -> np.ndarray:
        n = self.n_par
        return (np.bincount(self.seg, g_alpha * (1.0 - self.w), minlength=n)
                + np.bincount(self.seg_hi, g_alpha * self.w, minlength=n))

    def grad_par(self, g_c: np.ndarray, par: np.ndarray) -> np.ndarray:
        return np.concatenate([b.grad_par(g_c[self._sl(k)], par[self._sl(k)])
                               for k, b in enumerate(self.parts)])

    def par_from_c(self, c: np.ndarray) -> np.ndarray:
        return np.concatenate([b.par_from_c(c[self._sl(k)]) for k, b in enumerate(self.parts)])

    def jac_par(self, par: np.ndarray) -> np.ndarray:
        from scipy.linalg import block_diag
        return block_diag(*[b.jac_par(par[self._sl(k)]) for k, b in enumerate(self.parts)])

    def weights_at_stratum(self, k: int, u: float) -> np.ndarray:
        """Row vector ``a`` with ``α_k(u) = a'c`` (stratum ``k``'s sieve at normal score ``u``)."""
        a = np.zeros(self.n_par)
        a[self._sl(k)] = self.parts[k].weights_at(u)
        return a


def fixed_dispersion_levels(strata_codes: np.ndarray, disp_codes: np.ndarray,
                            n_disp: int) -> np.ndarray:
    """Boolean mask of dispersion levels whose latent SD is fixed at 1: the first level of
    every connected component of the bipartite graph strata ↔ dispersion levels (levels
    that share a stratum, or strata that share a level, are one component)."""
    parent = list(range(n_disp))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for s in np.unique(strata_codes):
        lv = np.unique(disp_codes[strata_codes == s])
        for d in lv[1:]:
            ra, rb = find(int(lv[0])), find(int(d))
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    used = np.zeros(n_disp, bool)
    used[np.unique(disp_codes)] = True
    fixed = np.zeros(n_disp, bool)
    seen: set[int] = set()
    for d in range(n_disp):
        if used[d] and find(d) not in seen:
            seen.add(find(d))
            fixed[d] = True
    return fixed


def stratum_confounded_columns(X: np.ndarray, strata_codes: np.ndarray, tol: float = 1e-9) -> list[int]:
    """Columns of ``X`` (no intercept) that add no rank to the stratum indicators and the
    columns kept before them: they are absorbed by the strata's transforms."""
    n_s = int(strata_codes.max()) + 1
    base = np.zeros((X.shape[0], n_s))
    base[np.arange(X.shape[0]), strata_codes] = 1.0
    rank = np.linalg.matrix_rank(base, tol=None)
    drop = []
    for j in range(X.shape[1]):
        trial = np.column_stack([base, X[:, j]])
        r = np.linalg.matrix_rank(trial)
        if r > rank:
            base, rank = trial, r
        else:
            drop.append(j)
    return drop


class StratifiedTransform:
    r"""One fitted :class:`~scoremix.transform.monotone.MonotoneTransform` per stratum.

    ``h(scores, stratum)`` maps scores of trials in ``stratum`` (a level, or an array of
    levels, one per score) to the common latent scale; :meth:`latent_threshold` gives the
    latent threshold :math:`h_s^-(\tau)` of a score threshold :math:`\tau` for a stratum, so
    that for a trial of stratum :math:`s` with latent moments :math:`m_i, s_i`:
    :math:`P(S_i<\tau)=\Phi((h_s^-(\tau)-m_i)/s_i)` (FNR for positives) and
    :math:`P(S_i\ge\tau)=1-\Phi((h_s^-(\tau)-m_i)/s_i)` (FPR for negatives).
    See :mod:`scoremix.transform.strata` for the model and its identification.

    Attributes
    ----------
    column:
        the strata column (e.g. ``"label"``).
    levels:
        stratum levels, in fitting order.
    transforms:
        ``{level: MonotoneTransform}``.
    """

    def __init__(self, column: str, levels: Sequence[Any], transforms: Sequence[MonotoneTransform]):
        self.column = column
        self.levels = list(levels)
        self.transforms = dict(zip(self.levels, transforms))

    def __repr__(self) -> str:
        parts = ", ".join(f"{lv!r}: {t.n_cells} cells" for lv, t in self.transforms.items())
        return f"<StratifiedTransform by {self.column!r}: {parts}>"

    def stratum(self, level: Any) -> MonotoneTransform:
        """The transform :math:`h_s` of one stratum."""
        if level in self.transforms:
            return self.transforms[level]
        for k, t in self.transforms.items():     # tolerate str/number mismatch
            if str(k) == str(level):
                return t
        raise UnknownStratumError(f"stratum {level!r} of column {self.column!r} was not seen in "
                                  f"fitting; known strata: {self.levels}")

    def _apply(self, method: str, scores: Any, stratum: Any) -> np.ndarray:
        s = np.asarray(scores, dtype=np.float64)
        if stratum is None:
            raise TypeError(f"a stratified transform needs the stratum ({self.column!r} level) of "
                            "the scores: h(scores, stratum=...)")
        st = np.asarray(stratum, dtype=object)
        if st.ndim == 0:
            return getattr(self.stratum(st.item()), method)(s)
        s, st = np.broadcast_arrays(s, st)
        out = np.empty(s.shape)
        for lv in pd.unique(st.ravel()):
            m = st == lv
            out[m] = getattr(self.stratum(lv), method)(s[m])
        return out

    def __call__(self, scores: Any, stratum: Any = None) -> np.ndarray:
        """Continuous latent value :math:`h_s(\\text{score})` (see ``MonotoneTransform.__call__``)."""
        return self._apply("__call__", scores, stratum)

    def inverse(self, z: Any, stratum: Any = None) -> np.ndarray:
        """Score with :math:`h_s(\\text{score}) = z`."""
        return self._apply("inverse", z, stratum)

    def lower(self, tau: Any, stratum: Any = None) -> np.ndarray:
        """:math:`h_s^-(\\tau)`: ``P(S < τ | stratum s) = Φ((h⁻ − m)/s)``."""
        return self._apply("lower", tau, stratum)

    def upper(self, tau: Any, stratum: Any = None) -> np.ndarray:
        """:math:`h_s^+(\\tau)`: ``P(S ≤ τ | stratum s) = Φ((h⁺ − m)/s)``."""
        return self._apply("upper", tau, stratum)

    def latent_threshold(self, tau: Any, stratum: Any) -> np.ndarray:
        """Latent threshold of score threshold ``tau`` in ``stratum`` (= :meth:`lower`, the
        exact left limit at tied scores)."""
        return self.lower(tau, stratum)

    def to_dict(self) -> dict[str, Any]:
        return dict(kind="monotone-by-class", column=self.column,
                    levels=[str(lv) if not isinstance(lv, (int, float, bool)) else lv
                            for lv in self.levels],
                    transforms=[t.to_dict() for t in self.transforms.values()])

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StratifiedTransform":
        return cls(d["column"], d["levels"], [MonotoneTransform.from_dict(t) for t in d["transforms"]])
