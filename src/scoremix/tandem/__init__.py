"""Tandem (ASV + countermeasure) metrics: min t-DCF, a-DCF, t-EER and the SASV EERs, with
speaker-cluster bootstrap intervals (layer 6: uses :mod:`scoremix.metrics` and the resampling
helpers)."""

from scoremix.tandem.api import (
    TandemInputError,
    adcf,
    cascade_scores,
    sasv_eer,
    tdcf,
    teer,
)
from scoremix.tandem.costs import ADCF_COST_MODELS, TDCF_COST_MODELS, TandemCostModel
from scoremix.tandem.result import SasvEER, TandemEstimate

__all__ = [
    "ADCF_COST_MODELS",
    "TDCF_COST_MODELS",
    "SasvEER",
    "TandemCostModel",
    "TandemEstimate",
    "TandemInputError",
    "adcf",
    "cascade_scores",
    "sasv_eer",
    "tdcf",
    "teer",
]
