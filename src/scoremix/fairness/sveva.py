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
from tqdm.auto import tqdm

from scoremix.fairness.bootstrap import draw_cluster_weights
from scoremix.fairness.engine import MEASURES, CostSpec, Engine, cluster_codes, quiet_runtime_warnings
from scoremix.fairness.subgroups import SubgroupError, Subgroups, binary_labels, define_subgroups

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
class Prepared:
    """Trials converted to arrays, subgroup membership and cluster codes."""

    scores: np.ndarray
    y: np.ndarray
    clusters: np.ndarray
    cluster_labels: np.ndarray
    strata: np.ndarray
    sg: Subgroups


def prepare_trials(trials: pd.DataFrame, groups: Sequence[str], *, score: str = "score", label: str = "label",
                   speaker: str = "speaker", positive: Any = None, membership: str = "enrol",
                   test_speaker: str | None = None, test_groups: Sequence[str] | None = None,
                   speaker_table: pd.DataFrame | None = None, cluster: str | None = None) -> Prepared:
    """Validate a trial table and build subgroups and cluster codes (see :func:`subgroup_dcf`).

    A Dask DataFrame is reduced to the columns used here and collected (exact measures;
    client memory then scales with the number of trials times those few columns)."""
    if hasattr(trials, "__dask_graph__") and hasattr(trials, "columns"):
        from scoremix.distributed.inputs import collect_columns

        gs = [groups] if isinstance(groups, str) else list(groups)
        trials = collect_columns(trials, [score, label, speaker, test_speaker, cluster, *gs,
                                          *(test_groups or [])])
    if not isinstance(trials, pd.DataFrame):
        raise TypeError(f"trials must be a pandas DataFrame, got {type(trials).__name__}")
    for col, what in ((score, "score"), (label, "label")):
        if col not in trials.columns:
            raise SubgroupError(f"{what} column {col!r} not in the trial table (columns: {list(trials.columns)})")
    s = pd.to_numeric(trials[score], errors="coerce").to_numpy(dtype=float)
    if not np.isfinite(s).all():
        i = int(np.flatnonzero(~np.isfinite(s))[0])
        raise SubgroupError(f"score column {score!r} has a missing or non-finite value in row {i}")
    y = binary_labels(trials[label], positive=positive)
    sg = define_subgroups(trials, groups, membership=membership, speaker=speaker, test_speaker=test_speaker,
                          test_groups=test_groups, speaker_table=speaker_table)
    if cluster is None:
        cluster = test_speaker if membership == "test" and test_speaker is not None else speaker
    role_code = sg.code_test if (cluster == test_speaker and test_speaker is not None) else sg.code_enrol
    codes, labels, strata = cluster_codes(trials, cluster, sg, role_code)
    if y.min() == y.max():
        raise SubgroupError(f"label column {label!r} holds only one class; both classes are needed")
    return Prepared(scores=s, y=y, clusters=codes, cluster_labels=labels, strata=strata, sg=sg)


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
        FI and its percentile interval (``(nan, nan)`` without bootstrap).
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

    def plot_det(self, **kwargs: Any):
        """DET curves per subgroup; see :func:`scoremix.fairness.plots.plot_subgroup_det`."""
        from scoremix.fairness.plots import plot_subgroup_det

        return plot_subgroup_det(self, **kwargs)

    def plot_scores(self, **kwargs: Any):
        """Score distributions per subgroup and class; see :func:`scoremix.fairness.plots.plot_score_distributions`."""
        from scoremix.fairness.plots import plot_score_distributions

        return plot_score_distributions(self, **kwargs)

    def plot_forest(self, measure: str = "ratio_overall", **kwargs: Any):
        """Forest plot of a ratio with intervals; see :func:`scoremix.fairness.plots.plot_forest`."""
        from scoremix.fairness.plots import plot_forest

        return plot_forest(self.table, measure=measure, **kwargs)


def _percentiles(x: np.ndarray, ci: float) -> tuple[np.ndarray, np.ndarray]:
    q = (1.0 - ci) / 2.0
    x = np.where(np.isinf(x), np.nan, x) if np.issubdtype(x.dtype, np.floating) else x
    with np.errstate(invalid="ignore"), quiet_runtime_warnings():
        lo = np.nanquantile(x, q, axis=-1)
        hi = np.nanquantile(x, 1.0 - q, axis=-1)
    return lo, hi


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
    merged = []
    for parts in outs:
        merged.append({key: np.concatenate([p[key] for p in parts], axis=-1) for key in parts[0]})
    return merged


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
    empty = (tab["n_pos"] + tab["n_neg"]) == 0
    few_err = tab["n_errors"] < min_errors
    few_spk = tab["n_speakers"] < min_speakers
    one_class = ((tab["n_pos"] == 0) | (tab["n_neg"] == 0)) & ~empty
    tab["reliable"] = ~(empty | few_err | few_spk | one_class)
    notes = []
    for e, oc, fe, fs in zip(empty, one_class, few_err, few_spk):
        parts = []
        if e:
            parts.append("empty subgroup")
        elif oc:
            parts.append("one class only")
        if fe and not e:
            parts.append(f"< {min_errors} errors at tau*")
        if fs:
            parts.append(f"< {min_speakers} speakers")
        notes.append("; ".join(parts))
    tab["note"] = notes
    return tab


def _validate(n_boot: int, ci: float, compat: str | None) -> None:
    if n_boot < 0:
        raise ValueError(f"n_boot must be >= 0, got {n_boot}")
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci must be in (0, 1), got {ci}")
    if compat not in (None, "sveva"):
        raise ValueError(f"compat must be None or 'sveva', got {compat!r}")
    if compat == "sveva" and n_boot > 0:
        raise ValueError("compat='sveva' reproduces the SVEva Fair point estimates only; "
                         "use compat=None (exact counting) for bootstrap intervals")


def subgroup_dcf(trials: pd.DataFrame, groups: Sequence[str], score: str = "score", label: str = "label",
                 speaker: str = "speaker", positive: Any = None, p_target: float = 0.05, c_miss: float = 1.0,
                 c_fa: float = 1.0, normalize: bool = False, n_boot: int = 0, ci: float = 0.95,
                 random_state: int | np.random.Generator | None = None, compat: str | None = None,
                 min_speakers: int = 5, membership: str = "enrol", progress: bool = True, *,
                 test_speaker: str | None = None, test_groups: Sequence[str] | None = None,
                 speaker_table: pd.DataFrame | None = None, cluster: str | None = None,
                 min_errors: int = DEFAULT_MIN_ERRORS, eer: bool = True) -> SubgroupDCFResult:
    """SVEva Fair subgroup measures with optional speaker-level cluster-bootstrap intervals.

    Parameters
    ----------
    trials:
        one row per trial.
    groups:
        attribute column(s) defining subgroups, e.g. ``["sex", "nationality"]``
        (all cells of the level product are reported, empty ones with NaN measures).
    score, label, positive:
        score column (higher = more positive), label column and the positive label value
        (``None``: 0/1, booleans or the usual names target/bonafide/genuine/real).
    speaker:
        the (enrolment) speaker column; the bootstrap resamples these speakers within
        their subgroup (``cluster=`` picks another column).
    p_target, c_miss, c_fa, normalize:
        cost parameters (SVEva defaults: 0.05, 1, 1, unnormalised).
    n_boot, ci, random_state:
        number of bootstrap replicates (0 = none), interval level and seed.  Each
        replicate draws, within every subgroup, as many speakers as it has, with
        replacement; all trials of a drawn speaker enter with its multiplicity, and
        ``τ*`` is re-estimated in every replicate.  Intervals are percentile intervals.
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
    _validate(n_boot, ci, compat)
    cost = CostSpec(p_target=p_target, c_miss=c_miss, c_fa=c_fa, normalize=normalize)
    prep = prepare_trials(trials, groups, score=score, label=label, speaker=speaker, positive=positive,
                          membership=membership, test_speaker=test_speaker, test_groups=test_groups,
                          speaker_table=speaker_table, cluster=cluster)
    settings = dict(groups=list(prep.sg.attrs), p_target=p_target, c_miss=c_miss, c_fa=c_fa, normalize=normalize,
                    n_boot=n_boot, ci=ci, random_state=random_state, compat=compat, membership=membership,
                    min_speakers=min_speakers, min_errors=min_errors)
    if compat == "sveva":
        from scoremix.fairness.compat import sveva_point_measures

        point = sveva_point_measures(prep, cost)
        eng = None
    else:
        eng = Engine(prep.scores, prep.y, prep.clusters, len(prep.cluster_labels), prep.sg, cost, with_eer=eer)
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
        res = with_bootstrap(res, reps, ci)
    return res


# ---------------------------------------------------------------------------------------
# bootstrap in independent pieces (chunks) and their combination
# ---------------------------------------------------------------------------------------

def _as_list(x: Any) -> list[Any]:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def bootstrap_pieces(seeds: Any, counts: Any) -> tuple[list[Any], list[int]]:
    """Validate the ``(seeds, counts)`` of a bootstrap computed in pieces: equal, non-zero
    lengths and at least one replicate per piece."""
    seeds, counts = _as_list(seeds), [int(c) for c in _as_list(counts)]
    if len(seeds) != len(counts) or not seeds:
        raise ValueError(f"seeds and counts must be non-empty and of equal length, got {len(seeds)} and {len(counts)}")
    if min(counts) < 1:
        raise ValueError(f"every piece needs at least one replicate, got counts={counts}")
    return seeds, counts


def subgroup_dcf_replicates(trials: pd.DataFrame, groups: Sequence[str], seeds: Sequence[Any] | Any,
                            counts: Sequence[int] | int, score: str = "score", label: str = "label",
                            speaker: str = "speaker", positive: Any = None, p_target: float = 0.05,
                            c_miss: float = 1.0, c_fa: float = 1.0, normalize: bool = False,
                            membership: str = "enrol", progress: bool = False, *,
                            test_speaker: str | None = None, test_groups: Sequence[str] | None = None,
                            speaker_table: pd.DataFrame | None = None, cluster: str | None = None,
                            eer: bool = True) -> dict[str, np.ndarray]:
    """Cluster-bootstrap replicates of every SVEva measure, in independently seeded pieces.

    Piece ``j`` draws ``counts[j]`` replicates from ``numpy.random.default_rng(seeds[j])``
    exactly as ``subgroup_dcf(..., n_boot=counts[j], random_state=seeds[j])`` does, so its
    replicates equal that call's ``result.replicates``; the pieces are concatenated in the
    order given (``B = Σ_j counts[j]`` replicates).  Pieces computed in different processes
    and joined with :func:`concat_replicates` give the same arrays.

    Parameters
    ----------
    trials, groups, score, label, speaker, positive, p_target, c_miss, c_fa, normalize, membership,
    test_speaker, test_groups, speaker_table, cluster, eer:
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
    seeds, counts = bootstrap_pieces(seeds, counts)
    cost = CostSpec(p_target=p_target, c_miss=c_miss, c_fa=c_fa, normalize=normalize)
    prep = prepare_trials(trials, groups, score=score, label=label, speaker=speaker, positive=positive,
                          membership=membership, test_speaker=test_speaker, test_groups=test_groups,
                          speaker_table=speaker_table, cluster=cluster)
    eng = Engine(prep.scores, prep.y, prep.clusters, len(prep.cluster_labels), prep.sg, cost, with_eer=eer)
    parts = [run_bootstrap([eng], prep.strata, n, np.random.default_rng(sd), progress=progress)[0]
             for sd, n in zip(seeds, counts)]
    return concat_replicates(parts)


def concat_replicates(parts: Sequence[dict[str, np.ndarray]] | dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Join replicate dicts (same keys; arrays ``(…, B_j)``) along the replicate axis, in order."""
    parts = _as_list(parts)
    if not parts:
        raise ValueError("no replicates to combine")
    keys = list(parts[0])
    for j, p in enumerate(parts[1:], start=1):
        if list(p) != keys:
            raise ValueError(f"replicate piece {j} has measures {sorted(p)}, piece 0 has {sorted(keys)}")
    return {k: np.concatenate([np.asarray(p[k]) for p in parts], axis=-1) for k in keys}


def bootstrap_intervals(replicates: Sequence[dict[str, np.ndarray]] | dict[str, np.ndarray], ci: float = 0.95,
                        measures: Sequence[str] = MEASURES) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]],
                                                                     tuple[float, float]]:
    """Percentile intervals of the subgroup measures and of the Fairness Index.

    For replicates :math:`\\hat r^{(1)}_g, …, \\hat r^{(B)}_g` of a measure (infinite values
    treated as missing) the interval is ``[Q_{(1-ci)/2}, Q_{(1+ci)/2}]`` of the finite ones
    (``numpy.nanquantile``, linear interpolation), over *all* ``B`` replicates of all pieces.

    Returns
    -------
    ``({measure: (lo (G,), hi (G,))}, (FI_lo, FI_hi))``
    """
    reps = concat_replicates(replicates)
    iv = {m: _percentiles(reps[m], ci) for m in measures}
    lo, hi = _percentiles(reps["fairness_index"][None, :], ci)
    return iv, (float(lo[0]), float(hi[0]))


def with_bootstrap(result: SubgroupDCFResult, replicates: Sequence[dict[str, np.ndarray]] | dict[str, np.ndarray],
                   ci: float | None = None, **settings: Any) -> SubgroupDCFResult:
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
    ci:
        interval level (default: ``result.settings["ci"]``).
    **settings:
        extra entries for ``result.settings`` (e.g. the seeds of the pieces).

    Returns
    -------
    a new :class:`SubgroupDCFResult` with ``<measure>_lo/_hi`` columns, ``fairness_index_ci``,
    ``replicates`` and ``settings["n_boot"] = B``.
    """
    if result.settings.get("compat") == "sveva":
        raise ValueError("compat='sveva' results are point estimates only; bootstrap with compat=None")
    ci = float(result.settings.get("ci", 0.95) if ci is None else ci)
    _validate(0, ci, None)
    reps = concat_replicates(replicates)
    G = len(result.table)
    for m in MEASURES:
        if m not in reps:
            raise ValueError(f"replicates lack measure {m!r}")
        if reps[m].ndim != 2 or reps[m].shape[0] != G:
            raise ValueError(f"replicates of {m!r} have shape {reps[m].shape}; expected ({G}, B) for {G} subgroups")
    iv, fi_ci = bootstrap_intervals(reps, ci)
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
    st = {**result.settings, "n_boot": int(reps["fairness_index"].shape[-1]), "ci": ci, **settings}
    return replace(result, table=base[cols], fairness_index_ci=fi_ci, settings=st, replicates=reps)
