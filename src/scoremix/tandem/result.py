"""Result types of the tandem metrics: a float with an interval, a threshold and provenance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from scoremix.resampling import Estimate

__all__ = ["SasvEER", "TandemEstimate"]


class TandemEstimate(Estimate):
    """A tandem metric (min t-DCF, a-DCF, t-EER, an SASV EER) that behaves as its float value.

    Beyond :class:`scoremix.resampling.Estimate` (``lo``, ``hi``, ``level``, ``n_boot``, ``n_clusters``,
    ``interval``): ``metric`` (its name), ``threshold`` (the minimising CM / SASV threshold as
    accept :math:`s ≥ τ`; NaN where none applies), ``asv_threshold`` (the ASV threshold as accept
    :math:`s ≥ τ`), ``details`` (a dict: the ASV error rates, the cost weights, the cost model,
    the scripts' own threshold values) and ``replicates`` (the bootstrap values, empty without).
    """

    metric: str
    threshold: float
    asv_threshold: float
    details: dict
    replicates: np.ndarray

    def __new__(cls, value: float, lo: float = np.nan, hi: float = np.nan, level: float = 0.95, n_boot: int = 0,
                n_clusters: int = 0, interval: str = "expanded", *, metric: str = "", threshold: float = np.nan,
                asv_threshold: float = np.nan, details: dict | None = None,
                replicates: Any = None) -> TandemEstimate:
        obj = super().__new__(cls, value, lo, hi, level, n_boot, n_clusters, interval)
        obj.metric, obj.threshold, obj.asv_threshold = str(metric), float(threshold), float(asv_threshold)
        obj.details = dict(details or {})
        obj.replicates = np.asarray([] if replicates is None else replicates, float)
        return obj

    def __repr__(self) -> str:
        return (f"TandemEstimate({self.metric}={float(self)!r}, lo={self.lo!r}, hi={self.hi!r}, "
                f"threshold={self.threshold!r}, asv_threshold={self.asv_threshold!r}, n_boot={self.n_boot})")


@dataclass(frozen=True)
class SasvEER:
    """The three EERs of the SASV 2022 challenge on one score (Jung et al. 2022):
    ``sasv`` (targets vs nontargets and spoofs), ``sv`` (targets vs nontargets), ``spf``
    (targets vs spoofs); each a :class:`TandemEstimate`."""

    sasv: TandemEstimate
    sv: TandemEstimate
    spf: TandemEstimate

    def table(self) -> Any:
        """A tidy table ``metric, value, lo, hi``."""
        import pandas as pd

        return pd.DataFrame([{"metric": e.metric, "value": float(e), "lo": e.lo, "hi": e.hi}
                             for e in (self.sasv, self.sv, self.spf)])
