r"""The fitted monotone transform :math:`h` of a transformation mixed model."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["MonotoneTransform"]


class MonotoneTransform:
    r"""The estimated strictly increasing map from scores to the latent Gaussian scale.

    The fitted model is :math:`h(S_i)=x_i'\beta+z_i'b+\sigma_{d(i)}\varepsilon_i`,
    :math:`\varepsilon_i\sim N(0,1)`.  Its likelihood is that of the *cells*: the distinct
    scores seen in fitting, :math:`s_{(1)}<\dots<s_{(K)}`, with latent edges
    :math:`\alpha_1<\dots<\alpha_{K-1}` (:attr:`alpha`; :math:`\alpha_0=-\infty`,
    :math:`\alpha_K=+\infty`):  :math:`S=s_{(k)}` exactly when the latent variable lies in
    :math:`(\alpha_{k-1},\alpha_k]`.  With latent moments :math:`m_i, s_i` of a trial
    (e.g. ``fit.predict()`` and ``fit.sigma_by``), for any score threshold :math:`\tau`:

    .. math::

        P(S_i\le\tau)=\Phi\!\left(\frac{h^{+}(\tau)-m_i}{s_i}\right),\qquad
        P(S_i<\tau)=\Phi\!\left(\frac{h^{-}(\tau)-m_i}{s_i}\right),

    with :math:`h^{+}(\tau)=\alpha_{\#\{k:\,s_{(k)}\le\tau\}}` (:meth:`upper`) and
    :math:`h^{-}(\tau)=\alpha_{\#\{k:\,s_{(k)}<\tau\}}` (:meth:`lower`).  For a detector that
    accepts (calls positive) when :math:`S\ge\tau`:

    * :math:`\mathrm{FNR}(\tau)=P(S<\tau\mid\text{pos})=\Phi((h^{-}(\tau)-m_i)/s_i)`,
    * :math:`\mathrm{FPR}(\tau)=P(S\ge\tau\mid\text{neg})=1-\Phi((h^{-}(\tau)-m_i)/s_i)`,

    averaged over the class's trials.  :math:`h^{-}` and :math:`h^{+}` differ only at a
    score seen in fitting (a tie cell): there :math:`h^{-}(s_{(k)})=\alpha_{k-1}` is the
    left limit, exactly as the empirical rates count ties (``S ≥ τ`` accepts them).  Error
    rates at a *latent* threshold :math:`t` are :math:`\Phi((t-m_i)/s_i)`; a score threshold
    is the latent threshold :math:`h^{-}(\tau)`, so the latent (model) EER is the EER over
    the continuum of latent thresholds, of which the score thresholds are the points
    :math:`\alpha_k`.

    Calling the object, ``h(s)``, gives a continuous, strictly increasing map defined on
    the whole real line: the piecewise-linear interpolation of the points
    :math:`(s_{(k)},\alpha_k)`, :math:`k=1..K-1` (finite scores), continued linearly beyond
    them with the end slopes; ``±inf`` maps to ``±inf`` and NaN to NaN.  It equals
    :math:`h^{+}` at every fitted score except the largest (where :math:`h^{+}=+\infty`), and
    between fitted scores it interpolates where the cell likelihood says nothing.
    :meth:`inverse` is its inverse (a generalised inverse of :math:`h^{\pm}`: it maps
    :math:`\alpha_k` back to :math:`s_{(k)}`).

    The location of the latent scale is fixed by :math:`h(\text{pooled median score})=0`
    (more precisely :math:`\alpha(u=0)=0` in the rank-based normal score, see
    ``docs/transform-models.md``); its scale by a latent residual SD of 1 in the reference
    dispersion level.

    Attributes
    ----------
    values:
        ``(K,)`` distinct scores seen in fitting (sorted; may include ``±inf``).
    alpha:
        ``(K-1,)`` latent upper edges of cells ``1 … K-1``.
    """

    def __init__(self, values: np.ndarray, alpha: np.ndarray, info: dict[str, Any] | None = None):
        self.values = np.asarray(values, dtype=np.float64)
        self.alpha = np.asarray(alpha, dtype=np.float64)
        if self.alpha.size != self.values.size - 1:
            raise ValueError("alpha must have one edge fewer than values")
        if np.any(np.diff(self.alpha) <= 0):
            raise ValueError("alpha must be strictly increasing")
        self.info = dict(info or {})
        fin = np.isfinite(self.values[:-1])
        self._xs = self.values[:-1][fin]
        self._ys = self.alpha[fin]
        if self._xs.size >= 2:
            self._slope_lo = (self._ys[1] - self._ys[0]) / (self._xs[1] - self._xs[0])
            self._slope_hi = (self._ys[-1] - self._ys[-2]) / (self._xs[-1] - self._xs[-2])
        else:
            self._slope_lo = self._slope_hi = 1.0
        self._edges_ext = np.concatenate([[-np.inf], self.alpha, [np.inf]])

    @property
    def n_cells(self) -> int:
        return int(self.values.size)

    def __repr__(self) -> str:
        return (f"<MonotoneTransform: {self.n_cells} cells, scores "
                f"[{self.values[0]:.4g}, {self.values[-1]:.4g}] -> latent edges "
                f"[{self.alpha[0]:.4g}, {self.alpha[-1]:.4g}]>")

    def upper(self, tau: Any) -> np.ndarray:
        """:math:`h^+(\\tau)`: ``P(S ≤ τ) = Φ((h⁺(τ) − m)/s)``."""
        k = np.searchsorted(self.values, np.asarray(tau, float), side="right")
        return self._edges_ext[k]

    def lower(self, tau: Any) -> np.ndarray:
        """:math:`h^-(\\tau)`: ``P(S < τ) = Φ((h⁻(τ) − m)/s)`` (FNR at threshold τ)."""
        k = np.searchsorted(self.values, np.asarray(tau, float), side="left")
        return self._edges_ext[k]

    def latent_threshold(self, tau: Any, stratum: Any = None) -> np.ndarray:
        """Latent threshold of score threshold ``tau`` (accept ``s ≥ τ``): :meth:`lower`,
        :math:`h^-(\\tau)`.  ``stratum`` is ignored (one transform for all trials): the same
        signature as :meth:`scoremix.transform.StratifiedTransform.latent_threshold`, which
        the predictive layer calls for every fit."""
        return self.lower(tau)

    def __call__(self, scores: Any) -> np.ndarray:
        """Latent value ``h(s)`` (continuous, strictly increasing; see the class docstring)."""
        s = np.asarray(scores, dtype=np.float64)
        xs, ys = self._xs, self._ys
        if xs.size == 0:
            return np.where(np.isnan(s), np.nan, np.sign(s) * np.inf)
        out = np.interp(s, xs, ys)
        below = s < xs[0]
        above = s > xs[-1]
        out = np.where(below, ys[0] + self._slope_lo * (s - xs[0]), out)
        out = np.where(above, ys[-1] + self._slope_hi * (s - xs[-1]), out)
        out = np.where(np.isnan(s), np.nan, out)
        return out if out.ndim else float(out)

    def inverse(self, z: Any) -> np.ndarray:
        """Score ``s`` with ``h(s) = z`` (inverse of :meth:`__call__`)."""
        z = np.asarray(z, dtype=np.float64)
        xs, ys = self._xs, self._ys
        if xs.size == 0:
            return np.full(z.shape, np.nan)
        out = np.interp(z, ys, xs)
        out = np.where(z < ys[0], xs[0] + (z - ys[0]) / self._slope_lo, out)
        out = np.where(z > ys[-1], xs[-1] + (z - ys[-1]) / self._slope_hi, out)
        out = np.where(np.isnan(z), np.nan, out)
        return out if out.ndim else float(out)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``values`` (``±inf`` as strings) and ``alpha``."""
        def enc(v):
            return [("inf" if x > 0 else "-inf") if np.isinf(x) else float(x) for x in v]
        return dict(kind="monotone", values=enc(self.values), alpha=self.alpha.tolist(),
                    info={k: v for k, v in self.info.items()
                          if isinstance(v, (int, float, str, bool, list))})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MonotoneTransform":
        vals = np.array([float(v) for v in d["values"]])
        return cls(vals, np.asarray(d["alpha"], float), d.get("info"))
