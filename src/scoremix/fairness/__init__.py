"""Subgroup fairness of detectors: SVEva DCF measures with cluster-bootstrap intervals,
model-based and posterior measures, paired two-system comparisons, Casual-Conversations
style breakdowns and plots.  See ``docs/fairness.md``."""

from scoremix.fairness.breakdown import breakdown
from scoremix.fairness.compare import CompareResult, compare_replicates, compare_subgroup_dcf, compare_with_bootstrap
from scoremix.fairness.model_based import (ModelSubgroupDCFResult, PosteriorFairness, gaussian_mixture_measures,
                                           model_subgroup_dcf, posterior_subgroup_measures)
from scoremix.fairness.posterior import posterior_subgroup_dcf
from scoremix.fairness.subgroups import SubgroupError, Subgroups, define_subgroups
from scoremix.fairness.sveva import (SubgroupDCFResult, bootstrap_intervals, concat_replicates, fairness_index,
                                     subgroup_dcf, subgroup_dcf_replicates, with_bootstrap)

__all__ = [
    "SubgroupError", "Subgroups", "define_subgroups",
    "SubgroupDCFResult", "subgroup_dcf", "fairness_index",
    "subgroup_dcf_replicates", "concat_replicates", "bootstrap_intervals", "with_bootstrap",
    "CompareResult", "compare_subgroup_dcf", "compare_replicates", "compare_with_bootstrap",
    "ModelSubgroupDCFResult", "PosteriorFairness", "gaussian_mixture_measures", "model_subgroup_dcf",
    "posterior_subgroup_measures", "posterior_subgroup_dcf",
    "breakdown",
]
