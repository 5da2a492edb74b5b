"""Empirical SVEva Fair measures per subgroup, with speaker-level cluster-bootstrap intervals.

With the detection cost (NIST SRE 2019 form)

.. math::

    C^g(\\tau) = c_{miss}\\,\\pi\\,P^g_{miss}(\\tau) + c_{fa}\\,(1-\\pi)\\,P^g_{fa}(\\tau),
    \\qquad \\text{accept} \\iff s \\ge \\tau,

(divided by ``min(c_miss·π, c_fa·(1-π))`` when ``normalize=True``), the overall minimiser
``τ* = argmin_τ C^{all}(τ)`` (the smallest minimising score; ``+∞`` = reject all) and
``minDCF_g = min_τ C^g(τ)``, every subgroup ``g`` gets

* ``dcf_at_overall = C^g(τ*)``, ``min_dcf = minDCF_g``, ``threshold_own = argmin C^g``;
* ``ratio_overall = C^g(τ*) / minDCF_all`` (> 1: the subgroup is worse off);
* ``ratio_own = minDCF_g / C^g(τ*)`` (< 1: a subgroup threshold would help);
* ``fpr, fnr`` at ``τ*`` and their ratios to the overall rates at ``τ*``;
* ``eer`` (ROC-convex-hull EER of the subgroup), ``n_errors`` (misses + false alarms at τ*).

The Fairness Index is ``FI = Σ_{g: ratio_overall(g) > 1} ratio_overall(g)``.
Counting at ``τ*`` is exact (no interpolation, no nearest stored threshold) unless
``compat="sveva"`` is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix._deprecate import renamed_kwargs
from scoremix.adapters import adapter_for
from scoremix.fairness.engine import MEASURES, CostSpec, Engine
from scoremix.fairness.prepare import RESAMPLING, Prepared, prepare_trials
from scoremix.fairness.reliability import flag_degenerate, flag_rows
from scoremix.resampling.intervals import (INTERVAL_METHODS, MINIMA, bca_t_interval, bootstrap_pieces, cap_intervals,
                                          concat_replicates, fairness_index_speakers,
                                          expanded_percentile_interval, jackknife_measures, percentile_interval,
                                          measure_intervals, run_bootstrap, shift_t_interval)

__all__ = ["SubgroupDCFResult", "subgroup_dcf", "fairness_index", "prepare_trials", "DEFAULT_MIN_ERRORS",
           "subgroup_dcf_replicates", "concat_replicates", "bootstrap_intervals", "with_bootstrap"]


#: Doddington's rule of 30: fewer errors than this make a rate unreliable
DEFAULT_MIN_ERRORS = 30


def fairness_index(ratios: Sequence[float] | np.ndarray) -> float:
    """SVEva Fairness Index ``FI = Σ_{g: r_g > 1} r_g`` (NaN ratios are ignored).

    Examples
    --------
    >>> round(fairness_index([0.8, 1.5, 2.0]), 6)
    3.5
    """
    r = np.asarray(ratios, dtype=float)
    return float(np.sum(r[np.isfinite(r) & (r > 1)]))


@dataclass
class SubgroupDCFResult:
    """Result of :func:`subgroup_dcf`.

    Attributes
    ----------
    table:
        one row per subgroup: the grouping attributes, ``subgroup``, ``n_speakers, n_pos,
        n_neg, dcf_at_overall, min_dcf, threshold_own, ratio_overall, ratio_own, fpr, fnr,
        fpr_ratio, fnr_ratio, eer, n_errors, reliable`` (``<measure>_lo/_hi`` with a
        bootstrap) and ``note`` (why a row is unreliable or empty).
    min_dcf, threshold:
        overall minDCF and its minimiser ``τ*``.
    fairness_index, fairness_index_ci:
        FI and its interval (``(nan, nan)`` without bootstrap or when the interval is degenerate);
        report FI with :attr:`n_subgroups` and :attr:`share_above_one`.
    overall:
        overall measures (``min_dcf, threshold, fpr, fnr, eer``) as a dict.
    replicates:
        bootstrap replicates (dict of arrays ``(G, B)`` / ``(B,)``) or ``None``.
    """

    table: pd.DataFrame
    min_dcf: float
    threshold: float
    fairness_index: float
    fairness_index_ci: tuple[float, float]
    overall: dict[str, float]
    settings: dict[str, Any]
    replicates: dict[str, np.ndarray] | None = None
    _prepared: Prepared | None = field(default=None, repr=False)

    @property
    def n_subgroups(self) -> int:
        """Subgroups with a finite ``ratio_overall`` (the terms the Fairness Index could sum)."""
        return int(np.isfinite(self.table["ratio_overall"].to_numpy(float)).sum())

    @property
    def share_above_one(self) -> float:
        """Share of those subgroups whose ``ratio_overall`` interval lies above 1 (NaN without
        intervals).  The Fairness Index grows with the number of subgroups; this share does not."""
        if "ratio_overall_lo" not in self.table.columns or self.n_subgroups == 0:
            return float("nan")
        lo = self.table["ratio_overall_lo"].to_numpy(float)
        return float(np.sum(lo > 1) / self.n_subgroups)

    def plot_det(self, **kwargs: Any):
        """DET curves per subgroup; see :func:`scoremix.fairness.plots.plot_subgroup_det`."""
        from scoremix.fairness.plots import plot_subgroup_det

        return plot_subgroup_det(self, **kwargs)

    def plot_scores(self, **kwargs: Any):
        """Score distributions per subgroup and class; see :func:`scoremix.fairness.plots.plot_score_distributions`."""
        from scoremix.fairness.plots import plot_score_distributions

        return plot_score_distributions(self, **kwargs)

    def panel(self, operating_points: Any = ("eer", *[{"fpr": f} for f in (0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
                                                                              0.1, 0.2)]),
              skip_one_class: bool = False, **kwargs: Any):
        """The demographic-fairness panel (:func:`scoremix.fairness.panel.fairness_panel`: Max/GeoMean,
        GARBE, FDR, max/min ratios, with ``llr=True`` per-group actDCF and Cllr) of the same trials and
        subgroups (a trial's subgroup is its enrolment speaker's cell), speakers as bootstrap clusters,
        at the overall EER and over a range of overall-FPR operating points (default
        :data:`scoremix.fairness.panel.FPR_GRID`).  ``kwargs``: ``n_boot, seed, level, llr, alpha,
        interval, p_target, c_miss, c_fa`` of :func:`~scoremix.fairness.panel.fairness_panel`.
        ``skip_one_class``: leave out subgroups whose trials are of one class (named in
        ``settings["skipped"]``) instead of raising :class:`~scoremix.fairness.subgroups.SubgroupError`."""
        from scoremix.fairness.panel import fairness_panel
        from scoremix.fairness.subgroups import SubgroupError

        p = self._prepared
        if p is None or p.two_way is not None:
            raise SubgroupError("panel() needs a one-way subgroup_dcf result computed in this session "
                                "(two-way resampling is not supported by the panel)")
        code = p.sg.code_enrol
        keep = code >= 0
        names = p.sg.cells["subgroup"].astype(str).to_numpy()
        trials = pd.DataFrame({"score": p.scores[keep], "label": p.y[keep].astype(int),
                               "subgroup": names[code[keep]],
                               "speaker": np.asarray(p.cluster_labels).astype(str)[p.clusters[keep]]})
        skipped: list[str] = []
        if skip_one_class:
            one = trials.groupby("subgroup")["label"].nunique()
            skipped = sorted(one.index[one < 2].astype(str))
            trials = trials[~trials["subgroup"].isin(skipped)]
        out = fairness_panel(trials, "subgroup", score="score", label="label", speaker="speaker", positive=1,
                             operating_points=operating_points, **kwargs)
        out.settings["skipped"] = skipped
        return out

    def plot_forest(self, measure: str = "ratio_overall", **kwargs: Any):
        """Forest plot of a ratio with intervals; see :func:`scoremix.fairness.plots.plot_forest`."""
        from scoremix.fairness.plots import plot_forest

        return plot_forest(self.table, measure=measure, **kwargs)


def ratio_upper_bounds(dcf_max: float, min_dcf: float, overall: dict[str, float]) -> dict[str, float]:
    """Largest values the ratio measures can take given the overall estimates they divide by:
    ``ratio_overall = C_g(τ*)/minDCF ≤ (a + b)/minDCF``, ``fpr_ratio ≤ 1/fpr``,
    ``fnr_ratio ≤ 1/fnr`` (∞ where the denominator is 0).  Interval ends are capped at them: a
    studentised end beyond is a breakdown of the approximation, not an uncertainty."""
    def inv(num: float, den: float) -> float:
        return float(num / den) if np.isfinite(den) and den > 0 else float("inf")

    return {"ratio_overall": inv(dcf_max, min_dcf), "fpr_ratio": inv(1.0, overall.get("fpr", np.nan)),
            "fnr_ratio": inv(1.0, overall.get("fnr", np.nan))}


def _point_table(prep: Prepared, point: dict[str, np.ndarray], min_speakers: int, min_errors: int) -> pd.DataFrame:
    sg = prep.sg
    tab = sg.cells.copy()
    tab["n_speakers"] = sg.n_speakers
    tab["n_pos"] = point["n_pos"][:, 0].astype(np.int64)
    tab["n_neg"] = point["n_neg"][:, 0].astype(np.int64)
    for m in MEASURES:
        tab[m] = point[m][:, 0]
    ne = point["n_errors"][:, 0]
    tab["n_errors"] = np.where(np.isnan(ne), 0, ne).astype(np.int64)
    with np.errstate(invalid="ignore"):  # errors of each class at τ*: fnr·n_pos misses, fpr·n_neg false alarms
        n_miss = np.nan_to_num(np.rint(point["fnr"][:, 0] * tab["n_pos"].to_numpy()), nan=0.0)
        n_fa = np.nan_to_num(np.rint(point["fpr"][:, 0] * tab["n_neg"].to_numpy()), nan=0.0)
    tab["reliable"], notes = flag_rows(tab["n_speakers"].to_numpy(), tab["n_errors"].to_numpy(),
                                       tab["n_pos"].to_numpy(), tab["n_neg"].to_numpy(),
                                       min_speakers=min_speakers, min_errors=min_errors, n_miss=n_miss, n_fa=n_fa)
    tab["note"] = notes
    return tab


def _validate(n_boot: int, ci: float, compat: str | None, interval: str = "studentized",
              resample: str = "one-way") -> None:
    if resample not in RESAMPLING:
        raise ValueError(f"resample must be one of {RESAMPLING}, got {resample!r}")
    if resample == "two-way" and interval == "bca-t":
        raise ValueError("interval='bca-t' (delete-one-speaker jackknife) is not available with "
                         "resample='two-way'; use 'studentized' (two-way standard errors), 'expanded' or 'percentile'")
    if interval not in INTERVAL_METHODS:
        raise ValueError(f"interval must be one of {INTERVAL_METHODS}, got {interval!r}")
    if n_boot < 0:
        raise ValueError(f"n_boot must be >= 0, got {n_boot}")
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci must be in (0, 1), got {ci}")
    if compat not in (None, "sveva"):
        raise ValueError(f"compat must be None or 'sveva', got {compat!r}")
    if compat == "sveva" and n_boot > 0:
        raise ValueError("compat='sveva' reproduces the SVEva Fair point estimates only; "
                         "use compat=None (exact counting) for bootstrap intervals")


@renamed_kwargs(groups="by", ci="level", random_state="seed")
def subgroup_dcf(trials: pd.DataFrame, by: Sequence[str], score: str = "score", label: str = "label",
                 speaker: str = "speaker", positive: Any = None, p_target: float = 0.05, c_miss: float = 1.0,
                 c_fa: float = 1.0, normalize: bool = False, n_boot: int = 0, level: float = 0.95,
                 seed: int | np.random.Generator | None = None, compat: str | None = None,
                 min_speakers: int = 5, membership: str = "enrol", progress: bool = True, *,
                 test_speaker: str | None = None, test_groups: Sequence[str] | None = None,
                 speaker_table: pd.DataFrame | None = None, cluster: str | None = None,
                 min_errors: int = DEFAULT_MIN_ERRORS, eer: bool = True,
                 interval: str = "studentized", resample: str = "one-way") -> SubgroupDCFResult:
    """SVEva Fair subgroup measures with optional speaker-level cluster-bootstrap intervals.

    Parameters
    ----------
    trials:
        one row per trial.
    by:
        attribute column(s) defining subgroups, e.g. ``["sex", "nationality"]``
        (all cells of the level product are reported, empty ones with NaN measures).
    score, label, positive:
        score column (higher = more positive), label column and the positive label value
        (``None``: 0/1, booleans or the usual names target/bonafide/genuine/real).
    speaker:
        the (enrolment) speaker column; the bootstrap resamples these speakers within
        their subgroup (``cluster=`` picks another column).
    resample:
        ``"one-way"`` (default): resample the speakers of one column (``cluster``, else
        ``speaker``; the test speaker with ``membership="test"``).  ``"two-way"``: Owen's (2007)
        crossed "pigeonhole" bootstrap of enrolment speakers (``speaker`` or ``cluster``, within
        their subgroups) × test speakers (``test_speaker=``, all together, or within their
        subgroups when ``membership`` uses the test speaker's attributes): independent
        multinomial weights per side, a nontarget trial weighted by the product of its two
        speakers' weights, a target trial by its enrolment speaker's weight only; the
        studentised interval then uses the two-way standard error of
        :mod:`scoremix.resampling.linearize`.  Use it when test speakers appear in nontarget
        trials of several enrolment speakers (a crossed design); see ``docs/intervals.md``.
    p_target, c_miss, c_fa, normalize:
        cost parameters (SVEva defaults: 0.05, 1, 1, unnormalised).
    n_boot, level, seed:
        number of bootstrap replicates (0 = none), interval level and seed.  Each
        replicate draws, within every subgroup, as many speakers as it has, with
        replacement; all trials of a drawn speaker enter with its multiplicity, and
        ``τ*`` is re-estimated in every replicate.
    interval:
        ``"studentized"`` (default: log-scale bootstrap-``t`` in the speakers with the threshold
        re-chosen in every replicate, see :func:`scoremix.resampling.intervals.studentized_interval`;
        its coverage is measured in ``docs/intervals.md``), ``"expanded"`` (percentile interval at
        levels expanded with Student's ``t_{n-1}`` for a subgroup of ``n`` speakers, shifted by
        twice the bootstrap bias for ``min_dcf``), ``"bca-t"`` (the same
        expansion on bias-corrected, accelerated levels; needs a jackknife pass) or
        ``"percentile"`` (the SVEva method, which under-covers with few speakers); see
        :mod:`scoremix.resampling.intervals`.
    compat:
        ``None`` (exact counting) or ``"sveva"`` (the SVEva Fair library's reading of
        costs off stored DET-curve thresholds; see :mod:`scoremix.fairness.compat`).
    min_speakers, min_errors:
        rows with fewer speakers, or fewer errors at ``τ*`` (Doddington's rule of 30),
        get ``reliable = False``.
    membership, test_speaker, test_groups, speaker_table:
        subgroup membership of verification trials (see
        :func:`scoremix.fairness.subgroups.define_subgroups`).
    progress:
        show a tqdm progress bar for the bootstrap.
    eer:
        compute EERs (set ``False`` to save time in large bootstraps).

    Returns
    -------
    SubgroupDCFResult
    """
    groups = by  # the body's name for by= (renamed API argument)
    ci = level  # the body's name for level= (renamed API argument)
    random_state = seed  # the body's name for seed= (renamed API argument)
    _validate(n_boot, ci, compat, interval, resample)
    cost = CostSpec(p_target=p_target, c_miss=c_miss, c_fa=c_fa, normalize=normalize)
    point_adapter = adapter_for("subgroup_point", trials)
    if (point_adapter is not None and n_boot == 0 and compat is None and membership == "enrol"
            and resample == "one-way"
            and test_speaker is None and test_groups is None and speaker_table is None
            and cluster in (None, speaker)):
        # point measures of Dask input from per-partition counts; nothing row-sized is collected
        dprep, point = point_adapter(trials, groups, cost, score=score, label=label, speaker=speaker,
                                     positive=positive, with_eer=eer)
        settings = dict(groups=list(dprep.sg.attrs), p_target=p_target, c_miss=c_miss, c_fa=c_fa,
                        normalize=normalize, n_boot=0, ci=ci, random_state=random_state, compat=None,
                        membership=membership, min_speakers=min_speakers, min_errors=min_errors,
                        interval=interval, eer=eer, resample=resample)
        overall = {k: float(point[f"all_{k}"][0]) for k in ("min_dcf", "threshold", "fpr", "fnr", "eer")}
        return SubgroupDCFResult(table=_point_table(dprep, point, min_speakers, min_errors),
                                 min_dcf=overall["min_dcf"], threshold=overall["threshold"],
                                 fairness_index=float(point["fairness_index"][0]),
                                 fairness_index_ci=(np.nan, np.nan), overall=overall, settings=settings,
                                 replicates=None, _prepared=None)
    prep = prepare_trials(trials, groups, score=score, label=label, speaker=speaker, positive=positive,
                          membership=membership, test_speaker=test_speaker, test_groups=test_groups,
                          speaker_table=speaker_table, cluster=cluster, resample=resample)
    settings = dict(groups=list(prep.sg.attrs), p_target=p_target, c_miss=c_miss, c_fa=c_fa, normalize=normalize,
                    n_boot=n_boot, ci=ci, random_state=random_state, compat=compat, membership=membership,
                    min_speakers=min_speakers, min_errors=min_errors, interval=interval, eer=eer, resample=resample)
    if compat == "sveva":
        from scoremix.fairness.compat import sveva_point_measures

        point = sveva_point_measures(prep, cost)
        eng = None
    else:
        eng = make_engine(prep, cost, with_eer=eer, with_se=n_boot > 0 and interval == "studentized")
        point = eng.measures(np.ones((len(prep.cluster_labels), 1)))
    table = _point_table(prep, point, min_speakers, min_errors)
    overall = {k: float(point[f"all_{k}"][0]) for k in ("min_dcf", "threshold", "fpr", "fnr", "eer")}
    res = SubgroupDCFResult(table=table, min_dcf=overall["min_dcf"], threshold=overall["threshold"],
                            fairness_index=float(point["fairness_index"][0]), fairness_index_ci=(np.nan, np.nan),
                            overall=overall, settings=settings, replicates=None, _prepared=prep)
    if n_boot > 0:
        assert eng is not None
        rng = np.random.default_rng(random_state)
        reps = run_bootstrap([eng], prep.strata, n_boot, rng, progress=progress)[0]
        res = with_bootstrap(res, reps, ci, interval=interval, engine=eng)
    return _thresholds_back(res, prep.threshold_back)


def _thresholds_back(res: SubgroupDCFResult, back: Any) -> SubgroupDCFResult:
    """Thresholds of a table computed on ``finite_order``-ed scores, reported on the given
    scores (the stand-ins of ±inf scores become ±inf again)."""
    if back is None:
        return res
    t = res.table
    for c in ("threshold_own", "threshold_own_lo", "threshold_own_hi"):
        if c in t.columns:
            t[c] = back(t[c].to_numpy(dtype=float))
    res.overall["threshold"] = float(back(res.overall["threshold"]))
    res.threshold = float(back(res.threshold))
    return res


# ---------------------------------------------------------------------------------------
# bootstrap in independent pieces (chunks) and their combination
# ---------------------------------------------------------------------------------------

@renamed_kwargs(groups="by")
def subgroup_dcf_replicates(trials: pd.DataFrame, by: Sequence[str], seeds: Sequence[Any] | Any,
                            counts: Sequence[int] | int, score: str = "score", label: str = "label",
                            speaker: str = "speaker", positive: Any = None, p_target: float = 0.05,
                            c_miss: float = 1.0, c_fa: float = 1.0, normalize: bool = False,
                            membership: str = "enrol", progress: bool = False, *,
                            test_speaker: str | None = None, test_groups: Sequence[str] | None = None,
                            speaker_table: pd.DataFrame | None = None, cluster: str | None = None,
                            eer: bool = True, resample: str = "one-way") -> dict[str, np.ndarray]:
    """Cluster-bootstrap replicates of every SVEva measure, in independently seeded pieces.

    Piece ``j`` draws ``counts[j]`` replicates from ``numpy.random.default_rng(seeds[j])``
    exactly as ``subgroup_dcf(..., n_boot=counts[j], seed=seeds[j])`` does, so its
    replicates equal that call's ``result.replicates``; the pieces are concatenated in the
    order given (``B = Σ_j counts[j]`` replicates).  Pieces computed in different processes
    and joined with :func:`concat_replicates` give the same arrays.

    Parameters
    ----------
    trials, by, score, label, speaker, positive, p_target, c_miss, c_fa, normalize, membership,
    test_speaker, test_groups, speaker_table, cluster, eer, resample:
        as in :func:`subgroup_dcf`.
    seeds:
        one seed (int, ``numpy.random.SeedSequence`` or anything ``default_rng`` accepts) per piece.
    counts:
        replicates per piece (same length as ``seeds``; each >= 1).
    progress:
        tqdm bar per piece.

    Returns
    -------
    dict of arrays: ``(G, B)`` per subgroup measure (``MEASURES``, ``n_pos``, ``n_neg``,
    ``n_errors``, …) and ``(B,)`` for overall ones (``fairness_index``, ``all_*``).
    """
    groups = by  # the body's name for by= (renamed API argument)
    seeds, counts = bootstrap_pieces(seeds, counts)
    cost = CostSpec(p_target=p_target, c_miss=c_miss, c_fa=c_fa, normalize=normalize)
    prep = prepare_trials(trials, groups, score=score, label=label, speaker=speaker, positive=positive,
                          membership=membership, test_speaker=test_speaker, test_groups=test_groups,
                          speaker_table=speaker_table, cluster=cluster, resample=resample)
    eng = make_engine(prep, cost, with_eer=eer)
    parts = [run_bootstrap([eng], prep.strata, n, np.random.default_rng(sd), progress=progress)[0]
             for sd, n in zip(seeds, counts)]
    return concat_replicates(parts)


@renamed_kwargs(ci="level")
def bootstrap_intervals(replicates: Sequence[dict[str, np.ndarray]] | dict[str, np.ndarray], level: float = 0.95,
                        measures: Sequence[str] = MEASURES, *, method: str = "percentile",
                        point: dict[str, np.ndarray] | None = None, jackknife: dict[str, np.ndarray] | None = None,
                        strata: np.ndarray | None = None, n_speakers: np.ndarray | None = None,
                        upper: dict[str, float] | None = None
                        ) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], tuple[float, float]]:
    """Intervals of the subgroup measures and of the Fairness Index from bootstrap replicates.

    ``method="percentile"``: for replicates :math:`\\hat r^{(1)}_g, …, \\hat r^{(B)}_g` of a
    measure (infinite values treated as missing) the interval is ``[Q_{(1-ci)/2}, Q_{(1+ci)/2}]``
    of the finite ones (``numpy.nanquantile``, linear interpolation), over *all* ``B``
    replicates of all pieces.

    ``method="expanded"``: the expanded percentile interval (bias-shifted for ``min_dcf``) of
    :mod:`scoremix.resampling.intervals`; needs ``point`` and ``n_speakers``.

    ``method="bca-t"``: the bias-corrected, accelerated, small-sample expanded interval of
    :mod:`scoremix.resampling.intervals` (for the minimum ``min_dcf``: the expanded percentile
    interval shifted by twice the bootstrap bias); needs the point estimates ``point`` (engine output
    with weights 1), the delete-one-speaker values ``jackknife``, the speakers' ``strata``
    and the number of speakers of every subgroup ``n_speakers``.  The Fairness Index uses
    the speaker count of the smallest subgroup whose ratio exceeds 1.

    ``upper``: logical maxima of the measures (:meth:`CostSpec.upper_bounds`), at which every
    method's interval ends are capped.

    Returns
    -------
    ``({measure: (lo (G,), hi (G,))}, (FI_lo, FI_hi))``
    """
    ci = level  # the body's name for level= (renamed API argument)
    if method not in INTERVAL_METHODS:
        raise ValueError(f"interval method must be one of {INTERVAL_METHODS}, got {method!r}")
    reps = concat_replicates(replicates)
    if method == "percentile":
        iv = {m: percentile_interval(reps[m], ci) for m in measures}
        lo, hi = percentile_interval(reps["fairness_index"][None, :], ci)
        return cap_intervals(iv, upper), (float(lo[0]), float(hi[0]))
    if point is None or n_speakers is None:
        raise ValueError(f"method={method!r} needs point and n_speakers")
    n = np.asarray(n_speakers, float)
    n_fi = fairness_index_speakers(point["ratio_overall"][:, 0], n)
    if method in ("expanded", "studentized"):
        pt = {k: np.asarray(v)[:, 0] for k, v in point.items() if np.ndim(v) == 2}
        iv = measure_intervals(reps, pt, n, ci, measures, method, upper=upper)
        lo, hi = expanded_percentile_interval(reps["fairness_index"][None, :], np.array([n_fi]), ci)
        return iv, (float(lo[0]), float(hi[0]))
    if jackknife is None or strata is None:
        raise ValueError("method='bca-t' needs jackknife and strata")
    iv = {m: (shift_t_interval(point[m][:, 0], reps[m], n, ci) if m in MINIMA
              else bca_t_interval(point[m][:, 0], reps[m], jackknife[m], strata, n, ci)) for m in measures}
    lo, hi = bca_t_interval(point["fairness_index"], reps["fairness_index"][None, :],
                            jackknife["fairness_index"][None, :], strata, np.array([n_fi]), ci)
    return cap_intervals(iv, upper), (float(lo[0]), float(hi[0]))


def make_engine(prep: Prepared, cost: CostSpec, with_eer: bool = True, with_se: bool = True) -> Engine:
    """The counting engine of prepared trials (one-way or two-way, :attr:`Prepared.two_way`); with
    ``with_se`` it also returns the standard errors the studentised interval needs."""
    return Engine(prep.scores, prep.y, prep.clusters, prep.n_clusters, prep.sg, cost, with_eer=with_eer,
                  strata=prep.strata if with_se else None, two_way=prep.two_way)


def _engine_for(result: SubgroupDCFResult) -> Engine:
    prep = result._prepared
    if prep is None:
        raise ValueError("interval='bca-t' needs the result's prepared trials; pass interval='percentile' "
                         "for a result rebuilt without them")
    st = result.settings
    cost = CostSpec(p_target=st["p_target"], c_miss=st["c_miss"], c_fa=st["c_fa"], normalize=st["normalize"])
    return make_engine(prep, cost, with_eer=bool(st.get("eer", True)))


@renamed_kwargs(ci="level")
def with_bootstrap(result: SubgroupDCFResult, replicates: Sequence[dict[str, np.ndarray]] | dict[str, np.ndarray],
                   level: float | None = None, *, interval: str | None = None, engine: Engine | None = None,
                   **settings: Any) -> SubgroupDCFResult:
    """Attach bootstrap intervals to a point-estimate :class:`SubgroupDCFResult`.

    ``subgroup_dcf(..., n_boot=B, random_state=s)`` equals
    ``with_bootstrap(subgroup_dcf(..., n_boot=0), subgroup_dcf_replicates(..., [s], [B]), ci)``;
    with several pieces the intervals come from all their replicates together.

    Parameters
    ----------
    result:
        a result of :func:`subgroup_dcf` (exact counting; its own intervals, if any, are replaced).
    replicates:
        one replicate dict or a list of pieces (see :func:`subgroup_dcf_replicates`).
    level:
        interval level (default: ``result.settings["ci"]``).
    interval:
        ``"expanded"``, ``"bca-t"`` or ``"percentile"`` (default: ``result.settings["interval"]``,
        else ``"expanded"``).
        ``"bca-t"`` evaluates the delete-one-speaker jackknife (one engine pass with as
        many columns as speakers).
    engine:
        the counting engine of ``result`` (rebuilt from the result when omitted).
    **settings:
        extra entries for ``result.settings`` (e.g. the seeds of the pieces).

    Returns
    -------
    a new :class:`SubgroupDCFResult` with ``<measure>_lo/_hi`` columns, ``fairness_index_ci``,
    ``replicates`` and ``settings["n_boot"] = B``.  Rows whose interval is degenerate
    (zero width) are flagged unreliable (see :mod:`scoremix.fairness.reliability`).
    """
    ci = level  # the body's name for level= (renamed API argument)
    if result.settings.get("compat") == "sveva":
        raise ValueError("compat='sveva' results are point estimates only; bootstrap with compat=None")
    ci = float(result.settings.get("ci", 0.95) if ci is None else ci)
    interval = str(result.settings.get("interval", "studentized") if interval is None else interval)
    _validate(0, ci, None, interval, str(result.settings.get("resample", "one-way")))
    reps = concat_replicates(replicates)
    st0 = result.settings
    upper = CostSpec(p_target=st0["p_target"], c_miss=st0["c_miss"], c_fa=st0["c_fa"],
                     normalize=st0["normalize"]).upper_bounds()
    upper.update(ratio_upper_bounds(upper["dcf_at_overall"], result.min_dcf, result.overall))
    G = len(result.table)
    for m in MEASURES:
        if m not in reps:
            raise ValueError(f"replicates lack measure {m!r}")
        if reps[m].ndim != 2 or reps[m].shape[0] != G:
            raise ValueError(f"replicates of {m!r} have shape {reps[m].shape}; expected ({G}, B) for {G} subgroups")
    if interval == "bca-t":
        eng = engine if engine is not None else _engine_for(result)
        prep = result._prepared
        assert prep is not None
        point = eng.measures(np.ones((len(prep.cluster_labels), 1)))
        jack = jackknife_measures(eng, prep.strata)
        n_cl = np.bincount(prep.strata[prep.strata >= 0], minlength=G)[:G]
        iv, fi_ci = bootstrap_intervals(reps, ci, method="bca-t", point=point, jackknife=jack,
                                        strata=prep.strata, n_speakers=n_cl, upper=upper)
    elif interval == "studentized":
        eng = engine if engine is not None and engine.has_se else _engine_for(result)
        prep = result._prepared
        assert prep is not None
        point = eng.measures(np.ones((len(prep.cluster_labels), 1)))
        iv, fi_ci = bootstrap_intervals(reps, ci, method="studentized", point=point,
                                        n_speakers=result.table["n_speakers"].to_numpy(float), upper=upper)
    elif interval == "expanded":
        t = result.table
        point = {m: t[m].to_numpy(float)[:, None] for m in MEASURES}
        iv, fi_ci = bootstrap_intervals(reps, ci, method="expanded", point=point,
                                        n_speakers=t["n_speakers"].to_numpy(float), upper=upper)
    else:
        iv, fi_ci = bootstrap_intervals(reps, ci, upper=upper)
    old_iv = {f"{m}_{e}" for m in MEASURES for e in ("lo", "hi")}
    base = result.table[[c for c in result.table.columns if c not in old_iv]].copy()
    for m in MEASURES:
        base[f"{m}_lo"], base[f"{m}_hi"] = iv[m]
    fixed = {"n_speakers", "n_pos", "n_neg", "n_errors", "reliable", "note", *MEASURES, *old_iv}
    cells = (list(result._prepared.sg.cells.columns) if result._prepared is not None
             else [c for c in base.columns if c not in fixed])
    cols = cells + ["n_speakers", "n_pos", "n_neg"]
    for m in MEASURES:
        cols += [m, f"{m}_lo", f"{m}_hi"]
    cols += ["n_errors", "reliable", "note"]
    base["reliable"], base["note"] = flag_degenerate(base, MEASURES)
    if not fi_ci[1] > fi_ci[0]:  # a zero-width interval is no interval
        fi_ci = (np.nan, np.nan)
    st = {**result.settings, "n_boot": int(reps["fairness_index"].shape[-1]), "ci": ci, "interval": interval,
          **settings}
    return replace(result, table=base[cols], fairness_index_ci=fi_ci, settings=st, replicates=reps)
