"""Trial tables to arrays: validation, subgroup membership and speaker-cluster codes.

Layer: the first step of every empirical fairness computation; it knows nothing about
measures, resampling or plots.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix.fairness.engine import cluster_codes
from scoremix.fairness.subgroups import SubgroupError, Subgroups, binary_labels, define_subgroups

__all__ = ["Prepared", "prepare_trials"]


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
