"""Layer 3: resampling — cluster and two-way bootstrap weights, weighted counting of a
population of trials, replicates, studentised / expanded / percentile intervals.

Used by metrics' intervals, the predictive layer, the model tables and the fairness
measures; imports only :mod:`scoremix.trials` and :mod:`scoremix.metrics` (layers 1–2).
"""

from scoremix.resampling.bootstrap import (Population, PopulationCounts, TwoWayDesign, draw_cluster_weights,
                                           two_way_pairs)
from scoremix.resampling.intervals import (INTERVAL_METHODS, concat_replicates, expanded_percentile_interval,
                                           measure_intervals, percentile_interval, studentized_interval)
from scoremix.resampling.metric_intervals import Estimate, WeightedReplicates, cluster_bootstrap
from scoremix.resampling.overall import studentized_overall_interval

__all__ = ["Estimate", "INTERVAL_METHODS", "Population", "PopulationCounts", "TwoWayDesign", "WeightedReplicates",
           "cluster_bootstrap", "concat_replicates", "draw_cluster_weights", "expanded_percentile_interval",
           "measure_intervals", "percentile_interval", "studentized_interval", "studentized_overall_interval",
           "two_way_pairs"]
