r"""Parametric-bootstrap interval of a point fit's model EER (lme4's ``bootMer`` with new levels).

The model EER of a cell, :math:`\hat e = e(\hat\vartheta)`, is a function of the fitted
parameters :math:`\hat\vartheta = (\hat\beta, \hat\Sigma, \hat\sigma)` (and, with
``conditional=True``, of the fitted random effects :math:`\hat b`).  It estimates the
*population* EER of the cell: the EER of the cell's trials for new levels of every grouping
factor,

.. math::

    e_{\mathrm{pop}}(\vartheta) = \mathrm{EER}\Big(\textstyle\sum_{i\in\text{cell}} N\big(x_i^\top\beta,\;
    \sigma_{c(i)}^2/w_i + \sum_k z_{ik}^\top\Sigma_k z_{ik}\big)\ \text{per class}\Big),

which is the marginal model EER (``conditional=False``) at :math:`\vartheta`.

Replicate :math:`r = 1 \dots R` (:func:`parametric_eer_replicates`):

1. simulate :math:`y^{*}_r = X\hat\beta + Z b^{*}_r + \varepsilon^{*}_r` with new random
   effects :math:`b^{*}_r \sim N(0, \hat\Sigma)` and :math:`\varepsilon^{*}_r \sim N(0, \hat\sigma^2_{c(i)}/w_i)`
   (:func:`scoremix.lme.confint.simulate_response`, one ``numpy`` generator seeded once);
2. refit the same model (same REML/ML) with the native engine, warm-started at
   :math:`\hat\theta`, on the cross-products of the new response;
3. recompute the cell's model EER :math:`\hat e^{*}_r` from the refit exactly as
   :func:`scoremix.model_eer` computes :math:`\hat e` (same ``conditional`` /
   ``marginal_over``, same trials).

In the bootstrap world the truth is :math:`e_{\mathrm{pop}}(\hat\vartheta)` (the original fit's
marginal model EER of the cell), so :math:`\operatorname{logit}\hat e^{*}_r -
\operatorname{logit} e_{\mathrm{pop}}(\hat\vartheta)` imitates the estimation error
:math:`\operatorname{logit}\hat e - \operatorname{logit} e_{\mathrm{pop}}(\vartheta)`, including
the bias of a conditional model EER (finite sample of speakers, shrunken effects) against the
population value.  The interval (:func:`parametric_interval`) is the bias-corrected normal
interval on the logit scale at an expanded small-sample quantile,

.. math::

    \operatorname{logit}^{-1}\Big(\operatorname{logit}\hat e
    - \big(\bar\ell^{*} - \operatorname{logit} e_{\mathrm{pop}}(\hat\vartheta)\big)
    \mp z'\,\mathrm{sd}(\ell^{*})\Big),\qquad
    \ell^{*}_r = \operatorname{logit}\hat e^{*}_r,\quad z' = \sqrt{n/(n-1)}\;t_{n-1}\big((1+\mathrm{level})/2\big),

for the cell's ``n`` speakers (Hesterberg's expanded quantile, as in every expanded interval of
scoremix): the bootstrap spread is computed at :math:`\hat\Sigma`, itself estimated from ``n``
speakers, and a spread plugged in from an estimated variance under-covers like a ``z``
interval.  The mean and SD of the replicates are stable with few refits, unlike the extreme
quantiles a basic or percentile interval at these levels reads (both are available for the
benchmark, ``kind=``).
``docs/intervals.md`` compares it with the basic and percentile intervals and the speaker re-weighting
of :func:`scoremix.predictive.gof.model_eer_interval` (coverage measured in
``benchmarks/coverage_model_eer.py``).

Not available (:class:`ModelIntervalError` when asked for explicitly): posterior fits (their
credible interval is the interval) and fits without a model spec.  Transformation fits
(``transform=``) are refitted from scratch to scores simulated from the fit (latent response
through the fitted transform's cells, :func:`simulate_scores`), each replicate a full
transformation-model fit, so ``model_interval="auto"`` gives them the speaker re-weighting
instead — in its own columns ``eer_model_reweight_lo/_hi`` (it holds the parameters fixed and is
about 7× narrower than the spread of refits on LA) — and ``model_interval="parametric"`` (with
``n_refits=``) the honest refit-based interval.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Sequence

import numpy as np

from scoremix.predictive.layer import fit_transform, is_bayes_fit, predictive
from scoremix.predictive.mixture import ModelEERError

__all__ = ["MODEL_INTERVALS", "PARAMETRIC_KINDS", "ModelIntervalError", "ModelIntervalWarning", "parametric_unavailable",
           "resolve_model_interval", "parametric_refits", "parametric_eer_replicates", "population_eer",
           "parametric_interval"]

#: values of ``model_eer(..., model_interval=)``
MODEL_INTERVALS = ("auto", "parametric", "speakers")
#: interval forms of :func:`parametric_interval` (``"normal"`` is the tables')
PARAMETRIC_KINDS = ("normal", "basic", "percentile")


class ModelIntervalError(ModelEERError):
    """The requested model-EER interval method cannot be computed for this fit."""


class ModelIntervalWarning(UserWarning):
    """Some parametric-bootstrap replicates could not be used (failed refits or EERs)."""


def parametric_unavailable(fit: Any) -> str | None:
    """Why the parametric bootstrap cannot be run for ``fit`` (``None``: it can)."""
    if is_bayes_fit(fit):
        return "a posterior (bayes_lmer) fit has its credible interval instead"
    if fit_transform(fit) is not None and not callable(getattr(fit, "refit_scores", None)):
        return f"the transformation fit ({type(fit).__name__}) cannot be refitted to simulated scores (no refit_scores)"
    spec = getattr(fit, "spec", None)
    if spec is None or getattr(spec, "X", None) is None:
        return "the fit carries no model spec (X, Z, y) to simulate from and refit"
    if not hasattr(fit, "cov_re") or not hasattr(fit, "fixef"):
        return f"{type(fit).__name__} is not an LmerResult (needs fixef, cov_re, sigma)"
    return None


def resolve_model_interval(fit: Any, model_interval: str) -> str:
    """The method that makes the model interval: ``"parametric"`` or ``"speakers"``.

    ``"auto"`` is ``"parametric"`` whenever :func:`parametric_unavailable` allows it, else
    ``"speakers"``; an explicit ``"parametric"`` that cannot be run raises
    :class:`ModelIntervalError` naming the reason."""
    if model_interval not in MODEL_INTERVALS:
        raise ModelIntervalError(f"model_interval must be one of {MODEL_INTERVALS}, got {model_interval!r}")
    why = parametric_unavailable(fit)
    if model_interval == "auto":   # a transformation refit costs a full fit: only on request
        return "speakers" if (why or fit_transform(fit) is not None) else "parametric"
    if model_interval == "parametric" and why:
        raise ModelIntervalError(f"model_interval='parametric' is not available: {why}; use "
                                 "model_interval='speakers' (speaker re-weighting of the fitted Gaussians) "
                                 "or 'auto'")
    return model_interval


def parametric_refits(fit: Any, n_boot: int, seed: int | np.random.Generator | None = 0,
                      progress: bool = True) -> Any:
    """Yield ``n_boot`` refits of ``fit`` to responses simulated from it (steps 1–2 of the
    module docstring): native engine, same REML/ML, warm-started at :math:`\\hat\\theta`,
    without the convergence checks and warnings (counted by the caller through
    ``refit.converged`` if needed)."""
    from tqdm.auto import tqdm

    from scoremix.lme.confint import simulate_response
    from scoremix.lme.crossprod import crossproducts
    from scoremix.lme.native import NativeControl, fit as native_fit

    spec = fit.spec
    if fit_transform(fit) is not None:
        yield from _transform_refits(fit, n_boot, seed, progress)
        return
    cp = getattr(fit, "cp", None)
    if cp is None:
        cp = crossproducts(spec)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    ctl = NativeControl(theta_start=np.asarray(fit.theta, float), check_conv=False, warn=False)
    for _ in tqdm(range(n_boot), desc="parametric bootstrap (model EER)", disable=not progress, leave=False):
        ystar = simulate_response(fit, rng)
        yield native_fit(dataclasses.replace(spec, y=ystar), REML=fit.REML, control=ctl,
                         cp=cp.with_response(ystar))


def simulate_scores(fit: Any, rng: np.random.Generator) -> np.ndarray:
    r"""Scores simulated from a transformation fit: the latent response
    :math:`y^* = X\hat\beta + Zb^* + \sigma_{c(i)}\varepsilon^*` (new random effects,
    :func:`scoremix.lme.confint.simulate_response`) mapped to the observed score whose latent cell
    :math:`(\alpha_{k-1}, \alpha_k]` holds it — per stratum for a stratified transform (a
    point-mass stratum stays at its one score)."""
    from scoremix.lme.confint import simulate_response

    z = simulate_response(fit, rng)
    tr = fit_transform(fit)
    strata = getattr(fit, "strata", None)
    if strata is None or not hasattr(tr, "stratum"):
        return np.asarray(tr.values)[np.searchsorted(tr.alpha, z, side="left")]
    st = np.asarray(strata.loc[fit.spec.data.index].to_numpy(), dtype=object)
    out = np.empty(z.size)
    for lv in tr.levels:
        r = st == lv
        if r.any():
            h = tr.stratum(lv)
            out[r] = np.asarray(h.values)[np.searchsorted(h.alpha, z[r], side="left")]
    return out


def _transform_refits(fit: Any, n_boot: int, seed: Any, progress: bool) -> Any:
    """Refits of a transformation fit to scores simulated from it (:func:`simulate_scores`):
    ``fit.refit_scores`` (same formula, transform kind and strata, from scratch)."""
    import warnings as _w

    from tqdm.auto import tqdm

    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    for _ in tqdm(range(n_boot), desc="parametric bootstrap (transformation refits)", disable=not progress,
                  leave=False):
        ys = simulate_scores(fit, rng)
        with _w.catch_warnings():
            _w.simplefilter("ignore")
            yield fit.refit_scores(ys)


def parametric_eer_replicates(fit: Any, masks: Sequence[np.ndarray], n_boot: int,
                              seed: int | np.random.Generator | None = 0, *, label: str = "label",
                              positive: Any = None, data: Any = None, conditional: bool = True,
                              marginal_over: Sequence[str] | None = None, progress: bool = True,
                              thresholds: str = "attainable") -> np.ndarray:
    """``(len(masks), n_boot)`` replicates :math:`\\hat e^{*}_r` of the model EER of every cell
    (boolean masks over the model frame's rows), one refit per replicate shared by all
    cells; NaN where a refit's EER is not finite.  Warns :class:`ModelIntervalWarning` when a
    refit fails."""
    out = np.full((len(masks), n_boot), np.nan)
    failed = 0
    for r, refit in enumerate(parametric_refits(fit, n_boot, seed, progress)):
        try:
            pred = predictive(refit, data=data, label=label, positive=positive, conditional=conditional,
                              marginal_over=marginal_over)
        except (ValueError, ArithmeticError):
            failed += 1
            continue
        for j, m in enumerate(masks):
            out[j, r] = float(pred.eer(m, thresholds=thresholds)[0])
    if failed:
        warnings.warn(f"{failed} of {n_boot} parametric-bootstrap refits gave no predictive distribution "
                      "and were left out of the model-EER interval", ModelIntervalWarning, stacklevel=3)
    return out


def population_eer(fit: Any, masks: Sequence[np.ndarray], *, label: str = "label", positive: Any = None,
                   data: Any = None, thresholds: str = "attainable") -> np.ndarray:
    """:math:`e_{\\mathrm{pop}}(\\hat\\vartheta)` of every cell: the fit's marginal model EER
    (new levels of every grouping factor) of the cell's trials — the truth of the bootstrap
    world."""
    pred = predictive(fit, data=data, label=label, positive=positive, conditional=False)
    return np.array([float(pred.eer(m, thresholds=thresholds)[0]) for m in masks])


def _logit(p: Any) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.log(p) - np.log1p(-p)


def _expit(x: Any) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64)))


def parametric_interval(point: float, replicates: Any, truth: float, n_clusters: float, level: float = 0.95,
                        kind: str = "normal") -> tuple[float, float]:
    r"""Interval of the model EER from parametric-bootstrap replicates (module docstring).

    With :math:`\ell^{*}_r = \operatorname{logit}\hat e^{*}_r`, :math:`c = \operatorname{logit}\hat e
    + \operatorname{logit} e_{\mathrm{pop}}(\hat\vartheta)` and Hesterberg's expanded quantile
    :math:`z' = \sqrt{n/(n-1)}\,t_{n-1}((1+\mathrm{level})/2)` for the cell's ``n_clusters``
    speakers (:func:`scoremix.resampling.intervals.expanded_z`):

    * ``"normal"`` (the default of ``model_eer``): bias-corrected normal interval on the logit
      scale, :math:`\operatorname{logit}^{-1}\big(c - \bar\ell^{*} \mp z'\,\mathrm{sd}(\ell^{*})\big)`;
    * ``"basic"``: :math:`[\operatorname{logit}^{-1}(c - q_{hi}),\, \operatorname{logit}^{-1}(c - q_{lo})]`
      with :math:`q_{lo}, q_{hi}` the quantiles of :math:`\ell^{*}` at levels :math:`\Phi(\mp z')`
      (:func:`scoremix.resampling.intervals.expanded_percentile_interval`);
    * ``"percentile"``: :math:`[\operatorname{logit}^{-1} q_{lo}, \operatorname{logit}^{-1} q_{hi}]`
      (no bias correction).

    ``(nan, nan)`` with fewer than two finite replicates, fewer than two clusters, or a point /
    truth outside (0, 1)."""
    from scoremix.resampling.intervals import expanded_percentile_interval, expanded_z

    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    if kind not in PARAMETRIC_KINDS:
        raise ValueError(f"kind must be one of {PARAMETRIC_KINDS}, got {kind!r}")
    e = np.asarray(replicates, dtype=np.float64)
    e = e[np.isfinite(e) & (e > 0) & (e < 1)]
    nan = (float("nan"), float("nan"))
    if e.size < 2 or not (0 < point < 1) or not n_clusters >= 2:
        return nan
    ell = _logit(e)
    if kind == "normal":
        if not (0 < truth < 1):
            return nan
        centre = float(_logit(point) + _logit(truth) - ell.mean())
        half = float(expanded_z(np.array([float(n_clusters)]), level)[0]) * float(ell.std(ddof=1))
        return float(_expit(centre - half)), float(_expit(centre + half))
    lo, hi = expanded_percentile_interval(ell[None, :], np.array([float(n_clusters)]), level)
    q_lo, q_hi = float(lo[0]), float(hi[0])
    if kind == "percentile":
        return float(_expit(q_lo)), float(_expit(q_hi))
    if not (0 < truth < 1):
        return nan
    c = float(_logit(point) + _logit(truth))
    return float(_expit(c - q_hi)), float(_expit(c - q_lo))
