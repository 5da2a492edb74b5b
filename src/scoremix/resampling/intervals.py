r"""Speaker-cluster resampling and the intervals built from it.

Layer: below the user-facing functions (:mod:`~scoremix.fairness.sveva`,
:mod:`~scoremix.fairness.compare`, :mod:`~scoremix.fairness.breakdown`), above the
counting engine (:mod:`~scoremix.fairness.engine`).  Nothing here knows about tables.

Four interval methods are offered for a statistic :math:`\hat\theta` of clusters (speakers)
drawn within strata (subgroups), from bootstrap replicates :math:`\hat\theta^*_1, …,
\hat\theta^*_B` and delete-one-cluster jackknife values :math:`\hat\theta_{(i)}`:

``"percentile"``
    :math:`[Q_{α/2}(\hat\theta^*), Q_{1-α/2}(\hat\theta^*)]` (the method of SVEva and of
    scoremix up to 0.x; it under-covers with few speakers and for minima over thresholds).

``"studentized"`` (default)
    For a measure read at the data's thresholds (``τ*``, or a subgroup's own minimiser) with
    a speaker-cluster standard error of its log (:mod:`~scoremix.resampling.linearize`): the
    speaker part is studentised, ``T_b = (log θ*_b(τ̂) − log θ̂)/ŝ*_b`` at the data's
    thresholds, and re-choosing the threshold in the replicate, ``D_b = log θ*_b − log θ*_b(τ̂)``,
    is added as a percentile term; the interval is ``θ̂·exp(−Q(P))`` at the two tail levels
    of ``P_b = ŝ·T_b − D_b`` (:func:`studentized_interval`).  For minima over thresholds the
    threshold part is reflected and doubled, ``P_b = ŝ·T_b + 2·D_b`` (``D_b ≤ 0`` is the
    optimism of re-minimising; the bootstrap sees about half of the real optimism, see
    :data:`MINIMUM_OPTIMISM`), at the tail levels ``Φ(∓z_{1−α/2}·√(n/(n−1)))``; so are the ROCCH
    ``eer`` (a minimum over thresholds at its saddle) and ``ratio_own`` (a minimum over
    ``C_g(τ*)``, with :func:`ratio_own_threshold_part`).  ``threshold_own``, and rows without
    a standard error, get ``"expanded"``.
    :func:`measure_intervals` applies a method to several measures (the one place).

``"expanded"``
    Hesterberg's (2015) *expanded percentile* interval: the percentile interval at levels
    :math:`q_\pm = Φ(\pm z'_{1-α/2})` with the small-sample quantile
    :math:`z'_{q} = \sqrt{n/(n-1)}\; t_{n-1}(q)` (see below) instead of :math:`α/2`, so that
    the bootstrap's :math:`(n-1)/n` variance and its normal tails are replaced by those of a
    Student ``t`` with ``n − 1`` degrees of freedom.  Minima over thresholds get the
    bias-shifted ``"shift-t"`` interval below.  Its coverage, measured against closed-form
    truth, is in ``docs/intervals.md``.

``"bca-t"``
    bias-corrected and accelerated percentiles (Efron 1987) whose normal quantile is
    replaced by the small-sample *expanded* quantile of Hesterberg (2015),

    .. math::

        z'_{q} = \sqrt{n/(n-1)}\; t_{n-1}(q), \qquad
        \hat z_0 = Φ^{-1}\Big(\frac{\#\{\hat\theta^* < \hat\theta\} + \tfrac12\#\{\hat\theta^*=\hat\theta\}}{B}\Big),

    .. math::

        \hat a = \frac{\sum_i U_i^3}{6\,(\sum_i U_i^2)^{3/2}},\qquad
        U_i = \bar\theta_{(s(i))} - \hat\theta_{(i)},

    and the interval ends are the replicate quantiles at
    :math:`q_\pm = Φ\big(\hat z_0 + (\hat z_0 + z'_\pm)/(1 - \hat a(\hat z_0 + z'_\pm))\big)`.
    ``n`` is the number of speakers of the subgroup the measure belongs to (its variance
    is dominated by them); :math:`\bar\theta_{(s)}` is the mean of the jackknife values of
    the clusters of stratum ``s``.  :math:`\hat z_0` targets median bias and
    :math:`\hat a` skewness; in the coverage benchmark this was no better than
    ``"expanded"`` at 5–30 speakers and worse at 60 (measures read at the estimated
    threshold τ* are not smooth, so their jackknife and :math:`\hat z_0` are erratic),
    hence it is an option, not the default.

``"shift-t"`` (for ``min_dcf`` under both of the above)
    For a *minimum over thresholds* the estimate is optimistic (the minimiser is chosen on the same data), and
    the bootstrap replicates, minimised again on resampled data, are optimistic relative
    to it by about the same amount :math:`\hat b = \overline{\theta^*} - \hat\theta < 0`.
    The percentile interval inherits that optimism twice, so these measures get the
    expanded percentile interval shifted by :math:`-2\hat b` (``"shift-t"``,
    :func:`shift_t_interval`): :math:`[Q_{q_-}(\hat\theta^*) - 2\hat b,\ Q_{q_+}(\hat\theta^*) - 2\hat b]`
    with :math:`q_\pm = Φ(\pm z'_{1-α/2})`.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Iterator, Mapping, Protocol, Sequence

import numpy as np
from scipy.stats import norm, t as student_t
from tqdm.auto import tqdm

from scoremix.resampling.bootstrap import draw_cluster_weights
from scoremix.resampling.linearize import LOG_SE_MEASURES

__all__ = ["INTERVAL_METHODS", "MINIMA", "RATES", "REFLECTED", "MINIMUM_OPTIMISM", "log_threshold_part", "ratio_own_threshold_part", "measure_intervals", "cap_intervals", "fairness_index_speakers", "studentized_interval", "as_list", "bootstrap_pieces", "concat_replicates", "run_bootstrap",
           "percentile_interval", "expanded_percentile_interval", "jackknife_weights", "jackknife_measures", "shift_t_interval", "expanded_z", "bca_t_levels", "bca_t_interval",
           "scaled_percentile_interval"]

INTERVAL_METHODS = ("studentized", "expanded", "bca-t", "percentile")

#: minima over thresholds: bias-shifted (``"shift-t"``) when not studentised; threshold part reflected when studentised
MINIMA = ("min_dcf",)

#: rates (interval ends capped at 1)
RATES = ("fpr", "fnr")

#: measures whose studentised threshold part is reflected with weight :data:`MINIMUM_OPTIMISM` and
#: whose levels are ``√(n/(n−1))``-expanded: minima over thresholds (``eer`` is one at its saddle;
#: ``ratio_own`` has a minimum in its numerator, :func:`ratio_own_threshold_part`)
REFLECTED = ("min_dcf", "ratio_own", "eer")

#: weight of the reflected threshold part of a studentised interval of a minimum over thresholds
#: (``P_b = ŝ·T_b + c·D_b``).  The optimism of a minimum seen by the bootstrap, the mean of
#: ``D_b = log θ*_b − log θ*_b(τ̂)``, is about half the real one, ``E log θ̂ − log θ``: in the 15
#: cells of the coverage benchmark (3 scenarios × 5..60 speakers, 300 data sets each) their ratio
#: is 1.5–2.5, mean 1.85 — the bootstrap's "truth" is the sample curve, whose minimum is already
#: the optimistic one.  ``c = 1`` left ``min_dcf`` intervals below the truth in 5–8 % of data sets
#: with speaker effects (coverage 0.89–0.91); ``c = 2`` with ``√(n/(n−1))``-expanded levels
#: (:func:`studentized_interval`'s ``n``) covers ≥ 0.91 in every cell (docs/intervals.md).
MINIMUM_OPTIMISM = 2.0


class Engine(Protocol):
    """What :func:`run_bootstrap` and :func:`jackknife_measures` need of a counting engine
    (:class:`scoremix.fairness.engine.Engine` is one): measures of a ``(C, B)`` weight matrix."""

    n_candidates: int

    def measures(self, M: np.ndarray) -> dict[str, np.ndarray]: ...


@contextlib.contextmanager
def quiet_runtime_warnings() -> Iterator[None]:
    """Silence numpy's RuntimeWarnings (all-NaN slices, 0/0): empty or one-class subgroups
    give NaN measures on purpose, and the tables say why in their ``note`` column."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def as_list(x: Any) -> list[Any]:
    """``x`` as a list (a list/tuple is copied, anything else wrapped)."""
    return list(x) if isinstance(x, (list, tuple)) else [x]


def bootstrap_pieces(seeds: Any, counts: Any) -> tuple[list[Any], list[int]]:
    """Validate the ``(seeds, counts)`` of a bootstrap computed in pieces: equal, non-zero
    lengths and at least one replicate per piece."""
    seeds, counts = as_list(seeds), [int(c) for c in as_list(counts)]
    if len(seeds) != len(counts) or not seeds:
        raise ValueError(f"seeds and counts must be non-empty and of equal length, got {len(seeds)} and {len(counts)}")
    if min(counts) < 1:
        raise ValueError(f"every piece needs at least one replicate, got counts={counts}")
    return seeds, counts


def concat_replicates(parts: Sequence[dict[str, np.ndarray]] | dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Join replicate dicts (same keys; arrays ``(…, B_j)``) along the replicate axis, in order."""
    parts = as_list(parts)
    if not parts:
        raise ValueError("no replicates to combine")
    keys = list(parts[0])
    for j, p in enumerate(parts[1:], start=1):
        if list(p) != keys:
            raise ValueError(f"replicate piece {j} has measures {sorted(p)}, piece 0 has {sorted(keys)}")
    return {k: np.concatenate([np.asarray(p[k]) for p in parts], axis=-1) for k in keys}


def run_bootstrap(engines: Sequence[Engine], strata: np.ndarray, n_boot: int, rng: np.random.Generator,
                  progress: bool = True, desc: str = "cluster bootstrap") -> list[dict[str, np.ndarray]]:
    """Run the same cluster resamples through one or more engines (paired bootstrap).

    Replicates are processed in chunks sized so that a chunk's count matrices stay below
    about 2·10⁷ numbers per engine.
    """
    n_cand = max(e.n_candidates for e in engines)
    chunk = int(max(1, min(n_boot, 2e7 // max(n_cand, 1))))
    outs: list[list[dict[str, np.ndarray]]] = [[] for _ in engines]
    bar = tqdm(total=n_boot, desc=desc, disable=not progress, unit="rep")
    done = 0
    while done < n_boot:
        nb = min(chunk, n_boot - done)
        M = draw_cluster_weights(strata, nb, rng)
        for k, e in enumerate(engines):
            outs[k].append(e.measures(M))
        done += nb
        bar.update(nb)
    bar.close()
    return [concat_replicates(parts) for parts in outs]


def percentile_interval(x: np.ndarray, ci: float) -> tuple[np.ndarray, np.ndarray]:
    """``[Q_{(1-ci)/2}, Q_{(1+ci)/2}]`` of the finite replicates along the last axis
    (``numpy.nanquantile``, linear interpolation; infinite values count as missing)."""
    q = (1.0 - ci) / 2.0
    x = np.asarray(x)
    x = np.where(np.isinf(x), np.nan, x) if np.issubdtype(x.dtype, np.floating) else x
    with np.errstate(invalid="ignore"), quiet_runtime_warnings():
        lo = np.nanquantile(x, q, axis=-1)
        hi = np.nanquantile(x, 1.0 - q, axis=-1)
    return lo, hi


def jackknife_weights(strata: np.ndarray) -> np.ndarray:
    """``(C, C)`` delete-one-cluster weights: column ``i`` is all ones except cluster ``i``
    (0) — the jackknife of a stratified cluster sample, one column per cluster.  Clusters
    alone in their stratum keep weight 1 (deleting them would empty the stratum)."""
    strata = np.asarray(strata)
    C = strata.size
    W = np.ones((C, C))
    sizes = np.bincount(np.unique(strata, return_inverse=True)[1])
    alone = sizes[np.unique(strata, return_inverse=True)[1]] < 2
    idx = np.flatnonzero(~alone)
    W[idx, idx] = 0.0
    return W


def jackknife_measures(engine: Engine, strata: np.ndarray, chunk: int = 256) -> dict[str, np.ndarray]:
    """Delete-one-cluster values of every measure of ``engine``: arrays ``(G, C)`` / ``(C,)``,
    column ``i`` with cluster ``i`` left out (:func:`jackknife_weights`), evaluated in chunks
    of ``chunk`` clusters so that memory stays ``O(C · chunk)``."""
    strata = np.asarray(strata)
    C = strata.size
    codes = np.unique(strata, return_inverse=True)[1]
    alone = np.bincount(codes)[codes] < 2
    parts = []
    for start in range(0, C, chunk):
        idx = np.arange(start, min(C, start + chunk))
        W = np.ones((C, idx.size))
        keep = ~alone[idx]
        W[idx[keep], np.flatnonzero(keep)] = 0.0
        parts.append(engine.measures(W))
    return concat_replicates(parts)


def bca_t_levels(point: np.ndarray, reps: np.ndarray, jack: np.ndarray, strata: np.ndarray,
                 n: np.ndarray, ci: float) -> tuple[np.ndarray, np.ndarray]:
    """Quantile levels ``(q_lo, q_hi)`` of the ``"bca-t"`` interval (module docstring).

    Parameters
    ----------
    point:
        ``(G,)`` estimates :math:`\\hat\\theta_g`.
    reps:
        ``(G, B)`` bootstrap replicates (NaN/inf = missing).
    jack:
        ``(G, C)`` delete-one-cluster values (NaN = missing).
    strata:
        ``(C,)`` stratum of each cluster.
    n:
        ``(G,)`` number of speakers ``n`` of each measure's subgroup (``n < 2``: NaN levels).
    ci:
        interval level.
    """
    point = np.asarray(point, float)
    reps = np.asarray(reps, float)
    reps = np.where(np.isinf(reps), np.nan, reps)
    ok = np.isfinite(reps)
    nb = ok.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"), quiet_runtime_warnings():
        below = np.sum(ok & (reps < point[:, None]), axis=1)
        equal = np.sum(ok & (reps == point[:, None]), axis=1)
        p0 = (below + 0.5 * equal) / nb
        p0 = np.clip(p0, 0.5 / np.maximum(nb, 1), 1 - 0.5 / np.maximum(nb, 1))
        z0 = norm.ppf(p0)
        # acceleration from the stratified jackknife
        jack = np.asarray(jack, float)
        codes = np.unique(np.asarray(strata), return_inverse=True)[1]
        U = np.zeros_like(jack)
        for s in np.unique(codes):
            cols = codes == s
            js = jack[:, cols]
            U[:, cols] = np.nanmean(js, axis=1, keepdims=True) - js if cols.sum() > 1 else 0.0
        U = np.where(np.isfinite(U), U, 0.0)
        den = 6.0 * np.sum(U ** 2, axis=1) ** 1.5
        acc = np.where(den > 0, np.sum(U ** 3, axis=1) / den, 0.0)
        zq = expanded_z(n, ci)
        levels = []
        for z in (-zq, zq):
            w = z0 + z
            levels.append(norm.cdf(z0 + w / (1.0 - acc * w)))
    return levels[0], levels[1]


def expanded_z(n: np.ndarray, ci: float) -> np.ndarray:
    """Hesterberg's expanded normal quantile ``sqrt(n/(n-1)) · t_{n-1}((1+ci)/2)`` (NaN for ``n < 2``)."""
    n = np.asarray(n, float)
    df = np.where(n >= 2, n - 1, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sqrt(n / df) * student_t.ppf(0.5 + ci / 2.0, df)


def expanded_percentile_interval(reps: np.ndarray, n: np.ndarray, ci: float) -> tuple[np.ndarray, np.ndarray]:
    """Hesterberg's expanded percentile interval ``[Q_{Φ(-z')}, Q_{Φ(z')}]`` of the replicates
    (``z'`` = :func:`expanded_z` of each row's ``n``); ``(lo (G,), hi (G,))``, NaN for ``n < 2``."""
    reps = np.atleast_2d(np.asarray(reps, float))
    q = norm.cdf(-expanded_z(n, ci))
    return _row_quantiles(reps, q), _row_quantiles(reps, 1.0 - q)


def scaled_percentile_interval(reps: np.ndarray, n: np.ndarray, ci: float) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval at the tail levels ``Φ(∓z_{(1+ci)/2}·√(n/(n−1)))`` — the bootstrap's
    ``(n−1)/n`` variance of a mean of ``n`` clusters corrected, normal tails (the tail levels of
    :func:`studentized_interval` with ``n``); ``(lo (G,), hi (G,))``, NaN for ``n < 2``.  Between
    :func:`percentile_interval` and :func:`expanded_percentile_interval` (which also replaces the
    normal tails by Student's ``t_{n−1}``)."""
    reps = np.atleast_2d(np.asarray(reps, float))
    nn = np.asarray(n, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        q = norm.cdf(-norm.ppf(0.5 + ci / 2.0) * np.sqrt(nn / np.where(nn >= 2, nn - 1, np.nan)))
    return _row_quantiles(reps, q), _row_quantiles(reps, 1.0 - q)


def shift_t_interval(point: np.ndarray, reps: np.ndarray, n: np.ndarray, ci: float) -> tuple[np.ndarray, np.ndarray]:
    """Expanded percentile interval shifted by twice the bootstrap bias (module docstring),
    for minima over thresholds; ``(lo (G,), hi (G,))``, NaN where ``point`` or ``n ≥ 2`` is missing."""
    point = np.asarray(point, float)
    reps = np.atleast_2d(np.asarray(reps, float))
    reps = np.where(np.isfinite(reps), reps, np.nan)
    z = expanded_z(n, ci)
    with np.errstate(invalid="ignore"), quiet_runtime_warnings():
        # sorted first: the mean does not depend on the order of the replicates (pieces)
        bias = np.nanmean(np.sort(reps, axis=1), axis=1) - point
    ok = np.isfinite(point) & np.isfinite(z)
    q = np.where(ok, norm.cdf(-z), np.nan)
    lo = _row_quantiles(reps, q) - 2.0 * bias
    hi = _row_quantiles(reps, 1.0 - q) - 2.0 * bias
    return lo, hi


def _row_quantiles(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Per-row ``nanquantile`` at per-row levels (linear interpolation); NaN where ``q`` is."""
    x = np.sort(np.where(np.isfinite(x), x, np.nan), axis=1)  # NaN sort last
    m = np.sum(np.isfinite(x), axis=1)
    out = np.full(x.shape[0], np.nan)
    for g in range(x.shape[0]):
        if m[g] == 0 or not np.isfinite(q[g]):
            continue
        pos = np.clip(q[g], 0.0, 1.0) * (m[g] - 1)
        i = int(np.floor(pos))
        j = min(i + 1, m[g] - 1)
        out[g] = x[g, i] + (pos - i) * (x[g, j] - x[g, i])
    return out


def studentized_interval(point: np.ndarray, se: np.ndarray, reps: np.ndarray, fixed: np.ndarray,
                         se_fixed: np.ndarray, ci: float, reflect_threshold: bool = True,
                         optimism: float = 1.0, n: np.ndarray | None = None,
                         threshold_part: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The studentised interval with a re-estimated threshold (module docstring).

    On the log scale, ``log θ̂ − log θ`` is approximated by the replicates of
    ``P_b = ŝ·T_b + D_b`` with the speaker part studentised,
    ``T_b = (log θ*_b(τ̂) − log θ̂)/ŝ*_b`` (the replicate's measure at the *data's*
    thresholds ``τ̂``, and the standard error of its log there), and the threshold part
    ``D_b = log θ*_b − log θ*_b(τ̂)`` (re-choosing the threshold in the replicate; for a minimum
    over thresholds ``D_b ≤ 0`` is its optimism).  The interval is
    ``[θ̂·exp(−Q_{1−α/2}(P)), θ̂·exp(−Q_{α/2}(P))]``.

    ``reflect_threshold``: ``P_b = ŝ·T_b + optimism·D_b`` (minima; :data:`MINIMUM_OPTIMISM`)
    instead of ``ŝ·T_b − D_b``.  ``n`` (``(G,)`` speakers per row): tail levels
    ``Φ(∓z_{1−α/2}·√(n/(n−1)))`` instead of ``α/2`` — the threshold part is a percentile term
    whose bootstrap variance is ``(n−1)/n`` of the real one (NaN for ``n < 2``).
    ``threshold_part``: ``(G, B)`` the term added to ``ŝ·T_b`` instead of ``±optimism·D_b`` (a
    measure whose threshold part has pieces treated differently, :func:`ratio_own_threshold_part`).

    ``point``, ``se``: ``(G,)``; ``reps`` (``θ*_b``), ``fixed`` (``θ*_b(τ̂)``), ``se_fixed``
    (``ŝ*_b``): ``(G, B)``.  A zero value has log ``−∞``; a replicate with ``ŝ*_b = 0`` (one
    distinct speaker drawn) has ``T_b = ±∞`` (0 when ``θ*_b(τ̂) = θ̂``); NaN replicates are
    missing.  Rows whose ``θ̂ ≤ 0`` or whose ``ŝ`` is not positive get NaN (the caller falls
    back to another interval).
    """
    point = np.asarray(point, float)
    se = np.asarray(se, float)
    reps, fixed, se_fixed = (np.atleast_2d(np.asarray(x, float)) for x in (reps, fixed, se_fixed))
    big = 1e300
    with np.errstate(invalid="ignore", divide="ignore"), quiet_runtime_warnings():
        lf = np.log(fixed)
        d = lf - np.log(point)[:, None]
        t = np.where(se_fixed > 0, d / se_fixed, np.where(d == 0, 0.0, np.sign(d) * np.inf))
        t = np.where(fixed == 0, -np.inf, t)
        shift = np.clip(log_threshold_part(reps, fixed), -big, big)
        weight = float(optimism) if reflect_threshold else -1.0
        part = weight * shift if threshold_part is None else np.clip(np.atleast_2d(threshold_part), -big, big)
        p = np.clip(se[:, None] * np.clip(t, -big, big), -big, big) + part
        p = np.where(np.isnan(reps) | np.isnan(fixed) | np.isinf(reps), np.nan, np.clip(p, -big, big))
        ok = np.isfinite(point) & (point > 0) & np.isfinite(se) & (se > 0)
        if n is None:
            q = np.full(point.shape, (1.0 - ci) / 2.0)
        else:
            nn = np.asarray(n, float)
            q = norm.cdf(-norm.ppf(0.5 + ci / 2.0) * np.sqrt(nn / np.where(nn >= 2, nn - 1, np.nan)))
        p_lo = _row_quantiles(p, np.where(ok, q, np.nan))
        p_hi = _row_quantiles(p, np.where(ok, 1.0 - q, np.nan))
        lo = point * np.exp(-p_hi)
        hi = point * np.exp(-p_lo)
    return np.where(ok, lo, np.nan), np.where(ok, hi, np.nan)


def log_threshold_part(reps: np.ndarray, fixed: np.ndarray) -> np.ndarray:
    """``D_b = log θ*_b − log θ*_b(τ̂)`` (0 where both are 0), the threshold part of a replicate."""
    with np.errstate(invalid="ignore", divide="ignore"):
        reps, fixed = np.asarray(reps, float), np.asarray(fixed, float)
        return np.where((reps == 0) & (fixed == 0), 0.0, np.log(reps) - np.log(fixed))


def ratio_own_threshold_part(reps: dict[str, np.ndarray]) -> np.ndarray:
    r"""Threshold part of ``ratio_own = minDCF_g / C_g(τ*)``: its minimum's part reflected with
    weight :data:`MINIMUM_OPTIMISM` as for ``min_dcf``, its ``C_g(τ*)`` part as for
    ``dcf_at_overall`` (unreflected, entering with the ratio's minus sign):
    ``MINIMUM_OPTIMISM·D^{min}_b + D^{dcf}_b``."""
    return (MINIMUM_OPTIMISM * log_threshold_part(reps["min_dcf"], reps["fix_min_dcf"])
            + log_threshold_part(reps["dcf_at_overall"], reps["fix_dcf_at_overall"]))


def fairness_index_speakers(ratio_overall: np.ndarray, n_speakers: np.ndarray) -> float:
    """Speakers ``n`` that set the small-sample expansion of the Fairness Index interval: those
    of the smallest subgroup whose ``ratio_overall`` exceeds 1 (the terms of the index), else of
    the smallest non-empty subgroup (NaN if none)."""
    r = np.asarray(ratio_overall, float)
    n = np.asarray(n_speakers, float)
    over = np.isfinite(r) & (r > 1)
    if over.any():
        return float(n[over].min())
    return float(n[n > 0].min()) if (n > 0).any() else float("nan")


def cap_intervals(iv: dict[str, tuple[np.ndarray, np.ndarray]], upper: Mapping[str, float] | None
                  ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Interval ends capped at each measure's logical maximum ``upper[m]`` (e.g.
    :meth:`~scoremix.fairness.engine.CostSpec.upper_bounds`); measures without one unchanged."""
    if not upper:
        return iv
    out = {}
    for m, (lo, hi) in iv.items():
        if m in upper:
            with np.errstate(invalid="ignore"):
                lo, hi = np.minimum(lo, upper[m]), np.minimum(hi, upper[m])
        out[m] = (lo, hi)
    return out


def measure_intervals(reps: dict[str, np.ndarray], point: dict[str, np.ndarray], n: np.ndarray, ci: float,
                      measures: Sequence[str], method: str = "studentized",
                      upper: Mapping[str, float] | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Intervals ``{measure: (lo (G,), hi (G,))}`` of several measures by one method — the one
    place where a method is applied (subgroup tables, paired comparisons, breakdowns).

    ``"percentile"``: :func:`percentile_interval`.  ``"expanded"``: :func:`expanded_percentile_interval`
    (:func:`shift_t_interval` for :data:`MINIMA`) with ``n`` speakers per row.  ``"studentized"``:
    :func:`studentized_interval` for the measures of
    :data:`~scoremix.resampling.linearize.LOG_SE_MEASURES` (threshold part reflected for minima
    only), needing ``point["se_log_<m>"]`` and ``reps["fix_<m>"], reps["se_log_<m>"]``; rows where
    it is undefined (an estimate of 0, one speaker) and the other measures get the
    ``"expanded"`` interval.  Ends are capped (:func:`cap_intervals`) at ``upper[m]`` when given
    and rate ends (:data:`RATES`) at 1 in any case.

    ``reps``: ``(G, B)`` replicates per key; ``point``: ``(G,)`` estimates per key; ``n``: ``(G,)``.
    """
    if method not in ("studentized", "expanded", "percentile"):
        raise ValueError(f"method must be 'studentized', 'expanded' or 'percentile', got {method!r}")
    n = np.asarray(n, float)
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for m in measures:
        if method == "percentile":
            out[m] = percentile_interval(reps[m], ci)
            continue
        pm = np.asarray(point[m], float).reshape(-1)
        lo, hi = shift_t_interval(pm, reps[m], n, ci) if m in MINIMA else expanded_percentile_interval(reps[m], n, ci)
        if method == "studentized" and m in LOG_SE_MEASURES:
            key, fix = f"se_log_{m}", f"fix_{m}"
            if key not in reps or fix not in reps or key not in point:
                raise ValueError(f"interval 'studentized' needs {key!r} and {fix!r} in the point estimates and in "
                                 "every replicate piece (engines built with strata=, as subgroup_dcf_replicates does)")
            minimum = m in REFLECTED
            part = ratio_own_threshold_part(reps) if m == "ratio_own" else None
            slo, shi = studentized_interval(pm, np.asarray(point[key], float).reshape(-1), reps[m], reps[fix],
                                            reps[key], ci, reflect_threshold=minimum,
                                            optimism=MINIMUM_OPTIMISM if minimum else 1.0,
                                            n=n if minimum else None, threshold_part=part)
            if m == "eer":
                # the EER is a saddle value bounded by ½; a studentised end at (or past) that bound comes
                # from replicates whose standard error collapsed to 0 (few positives), not from the data:
                # keep the expanded-percentile end there (issue 24: [0.58, 50] % where replicates reach 4 %)
                cap = float((upper or {}).get("eer", 0.5))
                with np.errstate(invalid="ignore"):
                    shi = np.where(np.isnan(shi) | (shi < cap), shi, hi)
                    slo = np.where(np.isneginf(slo), lo, slo)
            ok = ~np.isnan(slo) & ~np.isnan(shi)  # an infinite end is kept: the data cannot bound the measure
            lo, hi = np.where(ok, slo, lo), np.where(ok, shi, hi)
        out[m] = (lo, hi)
    return cap_intervals(out, {**{r: 1.0 for r in RATES}, **(upper or {})})


def bca_t_interval(point: np.ndarray, reps: np.ndarray, jack: np.ndarray, strata: np.ndarray,
                   n: np.ndarray, ci: float) -> tuple[np.ndarray, np.ndarray]:
    """The ``"bca-t"`` interval ``(lo (G,), hi (G,))`` (see the module docstring and
    :func:`bca_t_levels`); NaN where the estimate, the replicates or ``n ≥ 2`` are missing."""
    point = np.asarray(point, float)
    reps = np.atleast_2d(np.asarray(reps, float))
    qlo, qhi = bca_t_levels(point, reps, jack, strata, n, ci)
    bad = ~np.isfinite(point)
    lo = _row_quantiles(reps, np.where(bad, np.nan, qlo))
    hi = _row_quantiles(reps, np.where(bad, np.nan, qhi))
    return lo, hi
