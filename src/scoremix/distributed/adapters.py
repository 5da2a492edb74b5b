"""The Dask input adapters: how Dask collections and parquet paths enter the lower layers.

Imported by :mod:`scoremix.distributed` (so by ``import scoremix``); registers one handler per
operation of :mod:`scoremix.adapters`.  The engines, metrics and fairness measures ask that
registry and never import this package.
"""

from __future__ import annotations

from typing import Any

from scoremix.adapters import register_adapter
from scoremix.distributed.inputs import DaskInputError, collect_columns, is_dask_collection, is_parquet_path
from scoremix.distributed.metrics_input import dask_candidates, is_dask_array

__all__ = ["lmer_adapter", "bayes_spec_adapter", "subgroup_point_adapter"]


def _dask_or_parquet(data: Any) -> bool:
    return is_dask_collection(data) or is_parquet_path(data)


def _dask_frame(data: Any) -> bool:
    return hasattr(data, "__dask_graph__") and hasattr(data, "columns")


def _dask_graph(data: Any) -> bool:
    return hasattr(data, "__dask_graph__")


def lmer_adapter(formula: str, data: Any, *, REML: bool, backend: str, transform: str | None,
                 **kwargs: Any) -> Any:
    """``sm.lmer`` of a Dask DataFrame or parquet path/glob: cross-products summed over partitions
    (:func:`scoremix.distributed.fit.lmer_dask`)."""
    from scoremix.distributed.fit import lmer_dask

    if backend != "native":
        raise ValueError(f"Dask input is fitted by the native engine only, not {backend!r}")
    if transform is not None:
        raise DaskInputError(
            f"transform={transform!r} is not available for Dask input: the transformation "
            "model's likelihood needs every row's cell (it has no cross-product reduction); "
            "fit it on an in-memory DataFrame (e.g. ddf.compute() or a sample)")
    return lmer_dask(formula, data, REML=REML, **kwargs)


def bayes_spec_adapter(formula: str, data: Any, *, weights: Any, dispersion: Any, method: str,
                       likelihood: str, posterior_predictive: bool) -> Any:
    """The model spec of ``sm.bayes_lmer`` on Dask rows: the collapsed likelihood needs only
    cross-products summed over partitions."""
    from scoremix.distributed.spec import add_bayes_statistics, build_dask_model_spec

    if method != "collapsed" and likelihood == "rows":
        raise ValueError("likelihood='rows' needs the rows in memory; Dask input works with "
                         "likelihood='suffstats'")
    if posterior_predictive:
        raise ValueError("posterior_predictive=True would materialise a replicate of every "
                         "row; not available for Dask input")
    return add_bayes_statistics(build_dask_model_spec(formula, data, weights=weights, dispersion=dispersion))


def subgroup_point_adapter(trials: Any, groups: Any, cost: Any, **kwargs: Any) -> Any:
    """SVEva point measures of Dask trials from per-partition counts
    (:func:`scoremix.distributed.fairness_point.dask_point_measures`)."""
    from scoremix.distributed.fairness_point import dask_point_measures

    return dask_point_measures(trials, groups, cost, **kwargs)


register_adapter("lmer", _dask_or_parquet, lmer_adapter)
register_adapter("bayes_spec", _dask_or_parquet, bayes_spec_adapter)
register_adapter("metric_candidates", is_dask_array, dask_candidates)
register_adapter("collect_columns", _dask_frame, collect_columns)
register_adapter("subgroup_point", _dask_graph, subgroup_point_adapter)
