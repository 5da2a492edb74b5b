"""Trial tables to arrays: validation, subgroup membership and speaker-cluster codes.

Layer: the first step of every empirical fairness computation; it knows nothing about
measures, resampling or plots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix.adapters import adapter_for
from scoremix.resampling.bootstrap import TwoWayDesign, two_way_pairs
from scoremix.fairness.engine import cluster_codes
from scoremix.fairness.subgroups import SubgroupError, Subgroups, binary_labels, define_subgroups
from scoremix.metrics import finite_order

__all__ = ["Prepared", "prepare_trials", "two_way_units", "RESAMPLING"]

#: resampling designs: ``"one-way"`` (one speaker column, the default) or ``"two-way"`` (enrolment × test speakers)
RESAMPLING = ("one-way", "two-way")


@dataclass
class Prepared:
    """Trials converted to arrays, subgroup membership and cluster codes.

    One-way: ``clusters`` ``(n,)`` codes the speaker of every trial, ``cluster_labels`` and
    ``strata`` describe those speakers.  Two-way (``two_way`` set): ``clusters`` codes the
    (enrolment, test) pair of every trial, ``cluster_labels`` ``(R + T,)`` are the resampling
    units (enrolment speakers, then test speakers) and ``strata`` their strata.
    """

    scores: np.ndarray
    y: np.ndarray
    clusters: np.ndarray
    cluster_labels: np.ndarray
    strata: np.ndarray
    sg: Subgroups
    two_way: TwoWayDesign | None = field(default=None)
    #: maps thresholds of the (finite) scores back to the given ones (±inf scores were replaced
    #: by values just beyond the finite ones, :func:`scoremix.metrics.finite_order`)
    threshold_back: Any = field(default=None, repr=False)

    @property
    def n_clusters(self) -> int:
        """Cluster codes an engine counts with: speakers (one-way) or pairs (two-way)."""
        return len(self.cluster_labels) if self.two_way is None else self.two_way.n_pairs


def prepare_trials(trials: pd.DataFrame, groups: Sequence[str], *, score: str = "score", label: str = "label",
                   speaker: str = "speaker", positive: Any = None, membership: str = "enrol",
                   test_speaker: str | None = None, test_groups: Sequence[str] | None = None,
                   speaker_table: pd.DataFrame | None = None, cluster: str | None = None,
                   resample: str = "one-way") -> Prepared:
    """Validate a trial table and build subgroups and cluster codes (see :func:`subgroup_dcf`).

    ``resample="two-way"`` builds the crossed design of :func:`two_way_units` (enrolment side:
    ``cluster`` or ``speaker``; test side: ``test_speaker``).

    A Dask DataFrame is reduced to the columns used here and collected (exact measures;
    client memory then scales with the number of trials times those few columns)."""
    if resample not in RESAMPLING:
        raise SubgroupError(f"resample must be one of {RESAMPLING}, got {resample!r}")
    if resample == "two-way" and test_speaker is None:
        raise SubgroupError("resample='two-way' needs test_speaker= (the test speaker column of the trial table)")
    collect = adapter_for("collect_columns", trials)
    if collect is not None:
        # a Dask DataFrame (adapter registered by scoremix.distributed)
        gs = [groups] if isinstance(groups, str) else list(groups)
        trials = collect(trials, [score, label, speaker, test_speaker, cluster, *gs, *(test_groups or [])])
    if not isinstance(trials, pd.DataFrame):
        raise TypeError(f"trials must be a pandas DataFrame, got {type(trials).__name__}")
    for col, what in ((score, "score"), (label, "label")):
        if col not in trials.columns:
            raise SubgroupError(f"{what} column {col!r} not in the trial table (columns: {list(trials.columns)})")
    s = pd.to_numeric(trials[score], errors="coerce").to_numpy(dtype=float)
    if np.isnan(s).any():
        i = int(np.flatnonzero(np.isnan(s))[0])
        raise SubgroupError(f"score column {score!r} has a missing or non-numeric value in row {i}")
    s, back = finite_order(s)   # ±inf (saturated logits): order is all the measures need
    y = binary_labels(trials[label], positive=positive)
    sg = define_subgroups(trials, groups, membership=membership, speaker=speaker, test_speaker=test_speaker,
                          test_groups=test_groups, speaker_table=speaker_table)
    if y.min() == y.max():
        raise SubgroupError(f"label column {label!r} holds only one class; both classes are needed")
    if resample == "two-way":
        assert test_speaker is not None
        prep = two_way_units(trials, s, y, sg, cluster or speaker, test_speaker, membership)
        prep.threshold_back = back
        return prep
    if cluster is None:
        cluster = test_speaker if membership == "test" and test_speaker is not None else speaker
    role_code = sg.code_test if (cluster == test_speaker and test_speaker is not None) else sg.code_enrol
    codes, labels, strata = cluster_codes(trials, cluster, sg, role_code)
    return Prepared(scores=s, y=y, clusters=codes, cluster_labels=labels, strata=strata, sg=sg, threshold_back=back)


def two_way_units(trials: pd.DataFrame, scores: np.ndarray, y: np.ndarray, sg: Subgroups, enrol: str,
                  test: str, membership: str) -> Prepared:
    """The crossed (two-way) resampling design of a trial table.

    Units: the enrolment speakers (column ``enrol``), stratified by their subgroup as in the
    one-way bootstrap, and the test speakers of the *nontarget* trials (column ``test``),
    stratified by their own subgroup when ``membership`` uses the test speaker's attributes
    (``"test"``, ``"both"``, ``"any"``), else one stratum.  A nontarget trial gets the product
    of its two speakers' weights; a target trial the enrolment weight only (the test speaker
    is the enrolment speaker's own voice; see :class:`~scoremix.resampling.bootstrap.TwoWayDesign`).
    Test speakers that appear only in target trials are not units.
    """
    if enrol == test:
        raise SubgroupError(f"resample='two-way' needs two different speaker columns; both sides are {enrol!r}")
    if test not in trials.columns:
        raise SubgroupError(f"test speaker column {test!r} (test_speaker=) not in the trial table "
                            f"(columns: {list(trials.columns)})")
    miss = trials[test].isna().to_numpy()
    if miss.any():
        raise SubgroupError(f"test speaker column {test!r} is missing in row {int(np.flatnonzero(miss)[0])}; "
                            "resample='two-way' needs the test speaker of every trial")
    e_codes, e_labels, e_strata = cluster_codes(trials, enrol, sg, sg.code_enrol)
    G = sg.n_groups
    non = np.flatnonzero(y == 0)
    t_role = sg.code_test[non] if membership != "enrol" else np.zeros(non.size, np.int64)
    t_codes, t_labels, t_strata = cluster_codes(trials.iloc[non], test, sg, t_role)
    test_unit = np.full(len(trials), -1, dtype=np.int64)
    test_unit[non] = t_codes
    pair, design = two_way_pairs(e_codes, test_unit, len(e_labels), len(t_labels))
    labels = np.empty(len(e_labels) + len(t_labels), dtype=object)  # ("enrol" | "test", speaker id)
    for i, v in enumerate([("enrol", v) for v in e_labels] + [("test", v) for v in t_labels]):
        labels[i] = v
    strata = np.concatenate([e_strata, G + 1 + t_strata]).astype(np.int64)  # test strata after every enrolment one
    return Prepared(scores=scores, y=y, clusters=pair, cluster_labels=labels, strata=strata, sg=sg, two_way=design)
