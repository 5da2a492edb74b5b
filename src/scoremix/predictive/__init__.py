"""One predictive layer: fitted score models → per-trial latent predictive distributions,
their error rates, model-implied DET curves and goodness-of-fit checks against the
empirical rates.  See :mod:`scoremix.predictive.layer` and ``docs/predictive.md``."""

from scoremix.predictive.mixture import (MixtureRates, ModelEERError, PredictiveError, batch_eer, gaussian_eer,
                                         mixture_eer)
from scoremix.predictive.axis import StrataAxis, ThresholdAxis, is_stratified_transform, threshold_axis
from scoremix.predictive.layer import Predictive, fit_transform, is_bayes_fit, predictive
from scoremix.predictive.gof import ModelFitWarning, empirical_eer_interval, missing_terms
from scoremix.predictive.det import model_det_curve, plot_model_det
from scoremix.predictive.stratified import stratified_model_eer

__all__ = ["PredictiveError", "ModelEERError", "gaussian_eer", "mixture_eer", "MixtureRates", "batch_eer",
           "ThresholdAxis", "StrataAxis", "threshold_axis", "is_stratified_transform", "Predictive", "predictive",
           "is_bayes_fit", "fit_transform", "ModelFitWarning",
           "empirical_eer_interval", "missing_terms", "model_det_curve", "plot_model_det",
           "stratified_model_eer"]
