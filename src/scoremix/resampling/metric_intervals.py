r"""Speaker-cluster bootstrap intervals of the point metrics of :mod:`scoremix.metrics`.

``sm.eer(..., n_boot=B)``, ``sm.min_dcf``, ``sm.act_dcf`` and ``sm.cllr`` call
:func:`cluster_bootstrap` (installed into :mod:`scoremix.metrics` by
:func:`scoremix.metrics.register_interval_provider` when this module is imported), which
draws cluster weights (:func:`scoremix.resampling.bootstrap.draw_cluster_weights`), computes
the replicates by weighted counting (:class:`WeightedReplicates`) and makes the studentised
interval of :mod:`scoremix.resampling.overall` or the expanded percentile interval of
:mod:`scoremix.resampling.intervals`.  Layer 3: imports metrics (2) and trials (1) only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scoremix._deprecate import renamed_kwargs, warn_renamed
from scoremix.metrics import (BootstrapSizeError, MetricInputError, MetricValue, WeightedSpec, _cost, min_boot,
                              register_interval_provider)
from scoremix.resampling.bootstrap import Population, draw_cluster_weights, rocch_eer_from_rates
from scoremix.resampling.intervals import expanded_percentile_interval, shift_t_interval
from scoremix.resampling.overall import studentized_overall_interval
from scoremix.trials import TrialTableError, label_to_binary

__all__ = ["Estimate", "WeightedReplicates", "cluster_bootstrap"]


class Estimate(MetricValue):
    r"""A metric value with a speaker-cluster bootstrap interval; behaves as the float ``value``.

    Attributes: ``lo``, ``hi`` (interval ends, NaN when not computed), ``level`` (the
    interval's level; ``ci`` is its old name), ``n_boot`` (replicates), ``n_clusters``
    (speakers, or trials without a speaker column) and ``interval`` (the method:
    ``"studentized"``, :mod:`scoremix.resampling.overall`, or ``"expanded"``,
    :mod:`scoremix.resampling.intervals`).
    Arithmetic returns plain floats; ``float(e)`` is the point estimate.

    A *model-based* value (``sm.model_eer(fit)``) also carries its goodness of fit:
    ``empirical`` (the same measure counted on the data), ``empirical_lo``/``empirical_hi`` (its
    speaker-bootstrap interval, the one printed), ``fit_ok`` (False exactly when the model value
    lies outside that interval; None when unchecked) and ``hint`` (the likely cause of a misfit,
    ``""`` when none).
    """

    lo: float
    hi: float
    level: float
    n_boot: int
    n_clusters: int
    interval: str
    empirical: float
    empirical_lo: float
    empirical_hi: float
    fit_ok: bool | None
    hint: str

    def __new__(cls, value: float, lo: float = np.nan, hi: float = np.nan, level: float = 0.95, n_boot: int = 0,
                n_clusters: int = 0, interval: str = "expanded", *, empirical: float = np.nan,
                empirical_lo: float = np.nan, empirical_hi: float = np.nan, fit_ok: bool | None = None,
                hint: str = "") -> "Estimate":
        obj = super().__new__(cls, value)
        obj.lo, obj.hi, obj.level = float(lo), float(hi), float(level)
        obj.n_boot, obj.n_clusters, obj.interval = int(n_boot), int(n_clusters), str(interval)
        obj.empirical, obj.empirical_lo, obj.empirical_hi = float(empirical), float(empirical_lo), float(empirical_hi)
        obj.fit_ok = None if fit_ok is None else bool(fit_ok)
        obj.hint = str(hint)
        return obj

    @property
    def ci(self) -> float:
        """Old name of :attr:`level` (kept for one release)."""
        warn_renamed("Estimate", "ci", "level")
        return self.level

    @property
    def degenerate(self) -> bool:
        """True when the interval has zero width or is missing (it then says nothing)."""
        return not (self.hi > self.lo)

    def __repr__(self) -> str:
        base = (f"Estimate({float(self)!r}, lo={self.lo!r}, hi={self.hi!r}, level={self.level!r}, "
                f"n_boot={self.n_boot}")
        if self.fit_ok is not None or np.isfinite(self.empirical):
            base += (f", empirical={self.empirical!r} [{self.empirical_lo!r}, {self.empirical_hi!r}], "
                     f"fit_ok={self.fit_ok!r}")
            if self.hint:
                base += f", hint={self.hint!r}"
        return base + ")"


class WeightedReplicates:
    r"""Vectorised replicates of a built-in metric under cluster weights.

    A metric of weighted trials, where trial ``i`` counts ``w_i = m_{c(i)}`` times (the
    bootstrap multiplicity of its cluster), computed for all ``B`` columns of a ``(C, B)``
    weight matrix at once instead of re-evaluating the metric on repeated trials — equal to
    that re-evaluation (tested to 1e-9).  ``kind``:

    * ``"eer"``: ROCCH EER, :math:`\max_α \min_τ αP_{miss} + (1-α)P_{fa}` over the exact
      candidate thresholds of :class:`scoremix.resampling.bootstrap.Population`;
    * ``"min_dcf"``: :math:`\min_τ C(τ)` over the same candidates (``+∞`` = reject all
      included);
    * ``"dcf"``: :math:`C(τ)` at the fixed threshold ``params["threshold"]`` (accept
      :math:`s ≥ τ`);
    * ``"cllr"``: :math:`\frac{1}{2\ln 2}[\sum_{y=1} w\ln(1+e^{-ℓ})/\sum_{y=1} w +
      \sum_{y=0} w\ln(1+e^{ℓ})/\sum_{y=0} w]` (an infinite cost stays infinite only in
      replicates that draw its cluster).

    A replicate without a trial of some class is NaN (the re-evaluation would fail).
    """

    def __init__(self, kind: str, scores: np.ndarray, y: np.ndarray, clusters: np.ndarray, n_clusters: int,
                 **params: Any) -> None:
        if kind not in ("eer", "min_dcf", "dcf", "cllr"):
            raise ValueError(f"kind must be 'eer', 'min_dcf', 'dcf' or 'cllr', got {kind!r}")
        self.kind, self.params = kind, params
        self.s = np.asarray(scores, np.float64)
        self.y = np.asarray(y).astype(bool)
        self.cl = np.asarray(clusters, np.int64)
        self.C = int(n_clusters)
        self._population: Any = None

    @property
    def population(self) -> Any:
        """The trials prepared for weighted counting (:class:`scoremix.resampling.bootstrap.Population`),
        built once and shared with the interval of :mod:`scoremix.resampling.overall`."""
        if self._population is None:
            self._population = Population(self.s, self.y, self.cl, self.C)
        return self._population

    def _per_cluster(self, v: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return np.bincount(self.cl[mask], weights=v[mask], minlength=self.C)

    def __call__(self, M: np.ndarray) -> np.ndarray:
        """``(B,)`` metric values for cluster weights ``M`` ``(C, B)``."""
        M = np.asarray(M, np.float64)
        y = self.y
        ones = np.ones(self.s.size)
        n_pos = self._per_cluster(ones, y) @ M
        n_neg = self._per_cluster(ones, ~y) @ M
        empty = (n_pos <= 0) | (n_neg <= 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            if self.kind in ("eer", "min_dcf"):
                pm, pf = self.population.counts(M).rates()
                if self.kind == "eer":
                    out = rocch_eer_from_rates(pm, pf)
                else:
                    pr = self.params
                    out = np.min(_cost(pm, pf, pr["p_target"], pr["c_miss"], pr["c_fa"], pr["normalize"]), axis=0)
            elif self.kind == "dcf":
                pr = self.params
                acc = self.s >= pr["threshold"]
                pm = (self._per_cluster(ones, y & ~acc) @ M) / n_pos
                pf = (self._per_cluster(ones, ~y & acc) @ M) / n_neg
                out = _cost(pm, pf, pr["p_target"], pr["c_miss"], pr["c_fa"], pr["normalize"])
            else:
                cost = np.where(y, np.logaddexp(0.0, -self.s), np.logaddexp(0.0, self.s))
                inf = np.isinf(cost)
                parts = []
                for cls, n in ((y, n_pos), (~y, n_neg)):
                    fin = self._per_cluster(np.where(inf, 0.0, cost), cls) @ M / n
                    bad = self._per_cluster(inf.astype(float), cls) @ M > 0  # a drawn cluster with an infinite cost
                    parts.append(np.where(bad, np.inf, fin))
                out = (parts[0] + parts[1]) / (2 * np.log(2))
        return np.where(empty, np.nan, out)


@renamed_kwargs(ci="level")
def cluster_bootstrap(stat: Any, scores: Any, labels: Any, speaker: Any = None, n_boot: int = 1000,
                      seed: int | np.random.Generator | None = None, level: float = 0.95,
                      minimum: bool = False, weighted: Any = None) -> Estimate:
    r"""Speaker-cluster bootstrap interval of any metric ``stat(scores, labels) -> float``.

    Replicate ``b`` draws the ``C`` speakers (clusters; every trial its own cluster when
    ``speaker`` is None) with replacement and evaluates ``stat`` on the trials of the drawn
    speakers, each repeated as often as its speaker was drawn.  The interval is the
    *expanded percentile* interval of :mod:`scoremix.resampling.intervals` (levels
    :math:`Φ(\mp\sqrt{C/(C-1)}\,t_{C-1}(1-α/2))`); with ``minimum=True`` (a minimum over
    thresholds such as minDCF) it is shifted by twice the bootstrap bias.  Replicates in
    which ``stat`` fails (e.g. one class only) are dropped.  Speakers are numbered in the
    sorted order of their string form (that fixes which speaker gets which draw of ``seed``).

    ``weighted``: a :class:`WeightedReplicates` factory ``(scores, y, clusters, C) -> it``, or a
    :class:`scoremix.metrics.WeightedSpec` naming the built-in metric, for
    ``stat`` — the built-in metrics use it to compute all replicates at once from the same
    weights (the same replicates, orders of magnitude faster on large tables) and get the
    *studentised* interval of :mod:`scoremix.resampling.overall` (the method of the subgroup
    tables; the expanded interval above where it is undefined).  ``Estimate.interval`` says
    which interval was made.
    """
    if isinstance(weighted, WeightedSpec):
        spec = weighted

        def weighted(s: np.ndarray, y: np.ndarray, cl: np.ndarray, C: int) -> WeightedReplicates:
            return WeightedReplicates(spec.kind, spec.sign * s, y, cl, C, **spec.params)
    ci = level
    if int(n_boot) < 1:
        raise MetricInputError(f"n_boot must be >= 1 for an interval, got {n_boot}")
    if not 0.0 < ci < 1.0:
        raise MetricInputError(f"level must be in (0, 1), got {ci}")
    if int(n_boot) < min_boot(ci):
        raise BootstrapSizeError(f"n_boot={int(n_boot)} is too few for a {100 * ci:g} % interval: each tail of "
                                 f"{50 * (1 - ci):g} % needs a replicate, so at least {min_boot(ci)} "
                                 "(1000 or more for stable ends)")
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(label_to_binary(labels, column="labels"))
    n = s.shape[0]
    if speaker is None:
        cl = np.arange(n)
    else:
        spk = np.asarray(speaker, dtype=object).ravel()
        if spk.shape[0] != n:
            raise MetricInputError(f"speaker has {spk.shape[0]} values but scores has {n}")
        miss = np.array([v is None or (isinstance(v, float) and np.isnan(v)) for v in spk])
        if miss.any():
            raise MetricInputError(f"speaker is missing at position(s) {np.flatnonzero(miss)[:5].tolist()}")
        cl = np.unique(spk.astype(str), return_inverse=True)[1]
    C = int(cl.max()) + 1
    point = float(stat(s, y))
    M = draw_cluster_weights(np.zeros(C, np.int64), int(n_boot), np.random.default_rng(seed)).astype(np.int64)
    if weighted is not None:
        w = weighted(s, y, cl, C)
        reps = np.concatenate([w(M[:, b0:b0 + 200]) for b0 in range(0, int(n_boot), 200)])
    else:
        reps = np.empty(int(n_boot))
        for b in range(int(n_boot)):
            idx = np.repeat(np.arange(n), M[cl, b])
            try:
                reps[b] = float(stat(s[idx], y[idx]))
            except TrialTableError:
                reps[b] = np.nan
    if weighted is not None:
        slo, shi = studentized_overall_interval(w.kind, w.s, w.y, w.cl, w.C, M, reps, ci,
                                                population=w.population if w.kind in ("eer", "min_dcf") else None,
                                                **w.params)
        if not (np.isnan(slo) or np.isnan(shi)):
            return Estimate(point, slo, shi, ci, int(n_boot), C, "studentized")
    nn = np.array([float(C)])
    if minimum:
        lo, hi = shift_t_interval(np.array([point]), reps[None, :], nn, ci)
    else:
        lo, hi = expanded_percentile_interval(reps[None, :], nn, ci)
    return Estimate(point, float(lo[0]), float(hi[0]), ci, int(n_boot), C, "expanded")


register_interval_provider(cluster_bootstrap)
