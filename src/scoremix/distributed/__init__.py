"""Fits and metrics on data that outgrow one machine: Dask DataFrames and parquet globs.

``sm.lmer``, ``sm.bayes_lmer``, ``sm.eer``, ``sm.min_dcf`` and ``sm.model_eer`` dispatch here
when given Dask input (see ``docs/dask.md``).  Pipeline of a fit: one pass for the factor
levels (:mod:`~scoremix.distributed.levels`), one pass forming the cross-products of
``[Z X y]`` per partition with the global encoding (:mod:`~scoremix.distributed.design`),
summed by tree reduction (:mod:`~scoremix.distributed.inputs`), lme4's checks on the sums
(:mod:`~scoremix.distributed.checks`), and the native optimiser on the client
(:mod:`~scoremix.distributed.fit`).  Exact metrics use score counts range-partitioned on the
cluster (:mod:`~scoremix.distributed.ranges`): the client receives per-range totals and a few
candidate points per range, never every distinct score.
"""

from scoremix.distributed import adapters as _adapters  # noqa: F401  (registers the Dask input adapters)
from scoremix.distributed.fit import DaskLmerResult, lmer_dask
from scoremix.distributed.inputs import DaskInputError, as_dask_frame, is_dask_collection, is_parquet_path
from scoremix.distributed.ranges import RangedCounts, RangeInfo, ranged_counts
from scoremix.distributed.scores import ScoreCounts, score_counts
from scoremix.distributed.spec import DaskModelSpec, build_dask_model_spec

__all__ = ["DaskInputError", "DaskLmerResult", "DaskModelSpec", "RangeInfo", "RangedCounts", "ScoreCounts",
           "as_dask_frame", "build_dask_model_spec", "is_dask_collection", "is_parquet_path", "lmer_dask",
           "ranged_counts", "score_counts"]
