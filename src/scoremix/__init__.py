"""scoremix: score modeling for binary detectors.

Linear mixed-effects models of detector scores (lme4 formulas, native REML/ML engine,
statsmodels and lme4 backends, a PyMC counterpart), model-based error rates, nuisance
analysis and subgroup fairness with honest uncertainty.

Conventions used everywhere: positive class = target / bona fide / genuine / real
(``y = 1``); accept = ``score >= threshold``; error rates are fractions in [0, 1].
"""

from scoremix._version import __version__
from scoremix._threads import get_threads, set_threads
from scoremix.trials import (
    LabelError,
    TrialTableError,
    label_to_binary,
    load_trials,
    read_asvspoof_cm,
    read_kaldi_trials,
)
from scoremix.metrics import (
    DetCurve,
    MetricValue,
    MinDCF,
    ScoreDirectionWarning,
    act_dcf,
    auc,
    cllr,
    dcf,
    det_axis_ticks,
    det_curve,
    eer,
    eer_from_counts,
    eer_threshold,
    min_cllr,
    min_dcf,
    min_dcf_from_counts,
    probit,
    rates_at,
)
from scoremix.resampling import Estimate, cluster_bootstrap
from scoremix.simulate import Simulation, SimulationError, simulate_sv_trials, simulate_trials
from scoremix.lme import LmerResult, NativeControl, anova, confint, lmer, ranova
from scoremix.lme.model_frame import build_model_spec, model_matrix
from scoremix.lme.backends.rutil import BackendUnavailableError
from scoremix.bayes import BayesLmerResult, Prior, bayes_lmer
from scoremix.lme.formula import parse_formula
from scoremix.lme.errors import (
    ConvergenceWarning,
    DdfError,
    FormulaError,
    GroupingError,
    MissingValueError,
    NewLevelError,
    RankDeficiencyWarning,
    ResponseError,
    ScaleWarning,
    SingularFitWarning,
    UnknownColumnError,
    UnsupportedModelError,
)
from scoremix.lme.input_checks import ConstantResponseError, EmptyDataError, ResponseScaleError
# --- branch s4glmm: generalised linear mixed models (issue 20) ---
from scoremix.glmm import (FamilyError, GlmerResult, GlmmControl, GlmmError, GlmmResponseError,
                           GlmmUnsupportedError, PirlsError, glmer)
from scoremix.fairness.decision_model import DecisionModelResult, decision_model
# --- end s4glmm ---
from scoremix.nuisance import NuisanceLLR, NuisanceModel, nuisance_model
from scoremix.design import (
    CONFIGURATIONS,
    Configuration,
    class_mean_difference,
    class_means,
    delta_covariates,
    delta_covariates_for,
    partial_bias_grid,
    zscore_by,
)
from scoremix.model_eer import (
    PosteriorEER,
    gaussian_eer,
    mixture_eer,
    model_eer,
    model_eer_tables,
    ModelIntervalError,
    model_eer_from_moments,
)
from scoremix.predictive import (
    ModelFitWarning,
    Predictive,
    PredictiveError,
    model_det_curve,
    predictive,
    stratified_model_eer,
)
from scoremix.study import load_study, run_study
from scoremix.transform import (
    AllScoresTiedError,
    MonotoneTransform,
    SingleClassError,
    TooFewDistinctScoresError,
    TransformControl,
    TransformError,
    TransformLmerResult,
    StratifiedTransform,
)

from scoremix.distributed import DaskInputError, DaskLmerResult
from scoremix.fairness import (
    SubgroupError,
    bootstrap_intervals,
    breakdown,
    compare_subgroup_dcf,
    fairness_index,
    model_subgroup_dcf,
    posterior_subgroup_dcf,
    posterior_subgroup_measures,
    subgroup_dcf,
    subgroup_dcf_replicates,
    with_bootstrap,
)
# --- s4deteval: tandem ASV + CM metrics, system comparisons, binomial intervals ---
from scoremix.tandem import (
    SasvEER,
    TandemCostModel,
    TandemEstimate,
    TandemInputError,
    adcf,
    cascade_scores,
    sasv_eer,
    tdcf,
    teer,
)
from scoremix.binomial import binomial_interval, rate_at, rule_of_30
from scoremix.compare_systems import SystemComparisonError, compare_systems, delong_test
from scoremix.fairness.panel import FairnessPanel, fairness_panel
from scoremix.ape import ape_curve, pav_llrs, plot_ape
# --- s5deteval: fairness over a range of operating points, per-group APE
from scoremix.fairness.panel import operating_point_sweep, plot_group_ape, plot_operating_points

# --- s4robust (issue 24): named errors and atomic table writes
from scoremix.metrics import BootstrapSizeError, min_boot
from scoremix.trials import DuplicateColumnError, MalformedLineError
from scoremix.atomic import write_table
from scoremix.bayes.api import IncompleteSamplingError
# --- s4trust-def: attainable-threshold definitions and goodness of fit (issue 19) ---
from scoremix.metrics import finite_order
from scoremix.predictive.attainable import THRESHOLDS, hull_eer
from scoremix.predictive.gof import misfit_hint, outside_interval
# --- branch s4trust-ls: location-scale score models, automatic specification, held-out validation
from scoremix.locscale import (
    LocScaleError,
    LocScaleFit,
    LocScaleSpec,
    Selection,
    fit_locscale,
    score_model,
)
from scoremix.validation import ValidationError, ValidationResult, validate_model

# ---- s4postfit: after the fit (marginal means, contrasts, joint tests, checks, all_fit)
from scoremix.emm import (ContrastResult, EmmError, EmmGrid, contrast, eer_contrast, emmeans, joint_tests,
                          ref_grid)
from scoremix.lme.allfit import AllFit, all_fit
from scoremix.lme.check import ModelCheck, check_model
# s5postfit: GLMM response scale (regrid) and model-based DCF contrasts
from scoremix.emm import dcf_contrast, regrid  # noqa: E402
# s5postfit2: model checks of Bayesian fits (GLMM and transformation fits: fit.check())
from scoremix.bayes.model_check import BayesModelCheck, bayes_check  # noqa: E402

# s4bayes: posterior checks, LOO, contrasts, memory budget, Ctrl-C (issue 25)
from scoremix.bayes import (  # noqa: E402
    ContrastError,
    LooError,
    MemoryBudgetError,
    PosteriorContrasts,
    SamplingInterrupted,
    posterior_contrasts,
)
from scoremix.bayes import compare as bayes_compare  # noqa: E402
from scoremix.bayes import loo as bayes_loo  # noqa: E402
from scoremix.bayes import waic as bayes_waic  # noqa: E402

# s5bayes-ls: Bayesian location-scale and stratified transformation models (issue 25)
from scoremix.bayes.locscale import (  # noqa: E402
    BayesLocScaleError,
    BayesLocScaleResult,
    bayes_locscale,
    bayes_score_model,
)
# s5bayes-glmer: Bayesian GLMMs and the Bayesian decision model (issue 25)
from scoremix.bayes.decision import BayesDecisionModelResult, bayes_decision_model  # noqa: E402
from scoremix.bayes.glmer import bayes_glmer  # noqa: E402
from scoremix.bayes.glmer_result import BayesGlmerResult  # noqa: E402
# s6bayes-check: dispersion random effects in bayes_lmer (issue 25)
from scoremix.bayes.dispersion_re import DispersionRandomEffectsError  # noqa: E402

__all__ = [
    "ContrastResult", "EmmError", "EmmGrid", "contrast", "eer_contrast", "emmeans", "joint_tests", "ref_grid",
    "AllFit", "all_fit", "ModelCheck", "check_model",  # s4postfit
    "dcf_contrast", "regrid",  # s5postfit
    "BayesModelCheck", "bayes_check",  # s5postfit2
    "__version__",
    # s4trust-def
    "finite_order", "THRESHOLDS", "hull_eer", "misfit_hint", "outside_interval",
    # trials
    "LabelError", "TrialTableError", "label_to_binary", "load_trials", "read_asvspoof_cm",
    "read_kaldi_trials",
    # metrics
    "DetCurve", "Estimate", "MinDCF", "ScoreDirectionWarning", "auc", "act_dcf", "cllr", "dcf",
    "det_axis_ticks", "det_curve", "eer", "eer_threshold", "min_cllr", "min_dcf", "probit",
    "rates_at", "eer_from_counts", "min_dcf_from_counts",
    # simulation
    "Simulation", "SimulationError", "simulate_sv_trials", "simulate_trials",
    # mixed models
    "LmerResult", "NativeControl", "anova", "confint", "lmer", "ranova", "BackendUnavailableError",
    "BayesLmerResult", "Prior", "bayes_lmer",
    "build_model_spec", "model_matrix", "parse_formula", "ConvergenceWarning", "DdfError", "FormulaError", "GroupingError",
    "MissingValueError", "NewLevelError", "RankDeficiencyWarning", "ResponseError", "ScaleWarning",
    "ConstantResponseError", "ResponseScaleError", "EmptyDataError",
    "SingularFitWarning", "UnknownColumnError", "UnsupportedModelError",
    # nuisance, designs, model-based EER
    "NuisanceLLR", "NuisanceModel", "nuisance_model", "CONFIGURATIONS", "Configuration",
    "class_mean_difference", "class_means", "delta_covariates", "delta_covariates_for",
    "partial_bias_grid", "zscore_by", "gaussian_eer", "mixture_eer", "model_eer",
    "model_eer_from_moments", "PosteriorEER", "model_eer_tables", "ModelIntervalError",
    # one predictive layer, model DET curves, goodness of fit
    "ModelFitWarning", "Predictive", "PredictiveError", "model_det_curve", "predictive",
    # studies
    "load_study", "run_study",
    # transformation (latent-Gaussian) mixed models
    "MonotoneTransform", "TransformLmerResult", "TransformControl", "TransformError",
    "AllScoresTiedError", "TooFewDistinctScoresError", "SingleClassError",
    "StratifiedTransform", "stratified_model_eer",

    # Dask input
    "DaskInputError", "DaskLmerResult",
    # subgroup fairness
    "SubgroupError", "breakdown", "compare_subgroup_dcf", "fairness_index", "model_subgroup_dcf",
    "posterior_subgroup_dcf", "posterior_subgroup_measures", "subgroup_dcf",
    "subgroup_dcf_replicates", "with_bootstrap", "bootstrap_intervals",
    # layers, API convention and threads (branch s4layers)
    "MetricValue", "cluster_bootstrap", "get_threads", "set_threads",
    # s4robust (issue 24)
    "BootstrapSizeError", "min_boot", "DuplicateColumnError", "MalformedLineError", "write_table",
    "IncompleteSamplingError",
    # branch s4trust-ls: location-scale score models and held-out validation
    "LocScaleError", "LocScaleFit", "LocScaleSpec", "Selection", "fit_locscale", "score_model",
    "ValidationError", "ValidationResult", "validate_model",
    # s4deteval: tandem metrics, system comparisons, binomial intervals
    "SasvEER", "TandemCostModel", "TandemEstimate", "TandemInputError", "adcf", "cascade_scores",
    "sasv_eer", "tdcf", "teer", "binomial_interval", "rate_at", "rule_of_30",
    "SystemComparisonError", "compare_systems", "delong_test", "FairnessPanel", "fairness_panel",
    "ape_curve", "pav_llrs", "plot_ape",
    # s5deteval
    "operating_point_sweep", "plot_operating_points", "plot_group_ape",
    # generalised linear mixed models (branch s4glmm)
    "glmer", "GlmerResult", "GlmmControl", "GlmmError", "FamilyError", "GlmmResponseError",
    "GlmmUnsupportedError", "PirlsError", "decision_model", "DecisionModelResult",
    # s4bayes (issue 25)
    "ContrastError", "LooError", "MemoryBudgetError", "PosteriorContrasts", "SamplingInterrupted",
    "posterior_contrasts", "bayes_compare", "bayes_loo", "bayes_waic",
    # s5bayes-ls (issue 25)
    "BayesLocScaleError", "BayesLocScaleResult", "bayes_locscale", "bayes_score_model",
    # s5bayes-glmer (issue 25)
    "bayes_glmer", "BayesGlmerResult", "bayes_decision_model", "BayesDecisionModelResult",
    "DispersionRandomEffectsError",  # s6bayes-check (issue 25)
]
