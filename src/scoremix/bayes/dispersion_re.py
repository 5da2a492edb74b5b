r"""Dispersion random effects in ``bayes_lmer``: routed to the Bayesian location-scale model.

``bayes_lmer(formula, data, dispersion="~ label + (0 + dummy(label, 'bonafide') | speaker) + …")``
asks for a per-speaker log-SD effect. The model with these effects is the Gaussian
location-scale mixed model of :mod:`scoremix.bayes.locscale_model` with
``LocScaleSpec(transform=False)``. For trial :math:`t` of speaker :math:`i` and class
:math:`c`:

.. math::

    y_t = \mu_c + b_{ic} + \sigma_c\,e^{g_{ic}}\varepsilon_t,\qquad
    b_{ic}\sim N(0,\tau_{b,c}^2),\quad g_{ic}\sim N(0,\tau_{g,c}^2),\quad \varepsilon_t\sim N(0,1).

Its location effects are independent per class, and so are its log-SD effects. The location
and log-SD effects of one class are uncorrelated, because separate lme4-style formulas cannot
express a correlation between them. The model is fitted by
:func:`scoremix.bayes.locscale.bayes_locscale`, which returns a ``BayesLocScaleResult``.

A formula pair is routed only when it is exactly this model:

* **location:** ``y ~ label`` (or ``0 + label``), plus one location effect per class and
  speaker. Write it as ``(0 + dummy(label, "a") | speaker) + (0 + dummy(label, "b") | speaker)``
  or as ``diag(0 + label | speaker)``;
* **dispersion:** ``~ label`` (one σ per class), plus a log-SD effect per speaker for one or
  both classes. The terms are ``(0 + dummy(label, "a") | speaker)`` or
  ``diag(0 + label | speaker)``.

Every other random-effects structure in a dispersion formula raises
:class:`DispersionRandomEffectsError`, which names the term and what to use instead. Examples:

* ``(0 + label | speaker)`` and ``(0 + label || speaker)``: for a factor, lme4 expands both to
  a 2 × 2 covariance with a correlation between the classes;
* ``(1 | speaker)``: one effect shared by the two classes;
* slopes, other grouping factors, other fixed terms.

For specifications beyond this, use :func:`scoremix.bayes_locscale` with a ``LocScaleSpec``
or :func:`scoremix.bayes_score_model`. Those cover correlated location/log-SD effects, strata
with their own transforms, speaker × stratum effects and heavy-tailed log-SD effects.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from scoremix.lme.errors import FormulaError

__all__ = ["DispersionRandomEffectsError", "has_dispersion_random_effects", "locscale_spec_from_formulas"]

_ADVICE = ("use scoremix.bayes_locscale(LocScaleSpec(...), trials) or scoremix.bayes_score_model(score_model(...)) "
           "for location-scale models beyond independent per-class speaker effects")


class DispersionRandomEffectsError(FormulaError):
    """A dispersion formula with random effects that ``bayes_lmer`` cannot fit exactly.

    The message names the term and the reason, and says to use
    ``sm.bayes_locscale`` / ``sm.bayes_score_model``."""


def has_dispersion_random_effects(dispersion: Any) -> bool:
    """Whether a dispersion formula has random-effects terms (a ``|``)."""
    return isinstance(dispersion, str) and "|" in dispersion


def _refuse(what: str) -> DispersionRandomEffectsError:
    return DispersionRandomEffectsError(f"bayes_lmer: {what}; bayes_lmer fits dispersion random effects only as "
                                       f"independent per-class speaker log-SD effects (docs/bayes.md); {_ADVICE}")


def _classes_of_parts(parts: Any, label: str, levels: list[str], where: str) -> tuple[str | None, list[str]]:
    """The grouping column and the label levels that carry an effect, from ``RandomPart``s of
    the allowed forms; anything else is refused."""
    group: str | None = None
    got: list[str] = []
    for rp in parts:
        if len(rp.group_columns) != 1:
            raise _refuse(f"{where} term ({rp.label}) has an interaction or nested grouping factor")
        g = rp.group_columns[0]
        if group is not None and g != group:
            raise _refuse(f"{where} terms group by {group!r} and {g!r}; the location-scale model has one speaker "
                          "factor")
        group = g
        vs = rp.lhs.variables
        if rp.lhs.intercept:
            raise _refuse(f"{where} term ({rp.label}) has an intercept, i.e. one effect shared by both classes of "
                          f"{label!r}; write one term per class, (0 + dummy({label}, \"<level>\") | {g})")
        if rp.structure == "diag" and len(vs) == 1 and vs[0].kind == "column" and vs[0].column == label:
            got.extend(levels)
            continue
        if len(vs) == 1 and vs[0].kind == "dummy" and vs[0].column == label and rp.structure == "us":
            if str(vs[0].level) not in levels:
                raise _refuse(f"{where} term ({rp.label}): {vs[0].level!r} is not a level of {label!r} "
                              f"(levels {levels})")
            got.append(str(vs[0].level))
            continue
        if len(vs) == 1 and vs[0].kind == "column" and vs[0].column == label:
            raise _refuse(f"{where} term ({rp.label}) is a 2 × 2 covariance with a correlation between the classes "
                          f"(lme4 does not split a factor with ||); for independent per-class effects write "
                          f"(0 + dummy({label}, \"{levels[0]}\") | {g}) + (0 + dummy({label}, \"{levels[1]}\") | {g}) "
                          f"or diag(0 + {label} | {g})")
        raise _refuse(f"{where} term ({rp.label}) is not a per-class speaker effect of {label!r}")
    if len(set(got)) != len(got):
        raise _refuse(f"{where}: a class of {label!r} has two effects for the same speaker")
    return group, got


def locscale_spec_from_formulas(formula: str, dispersion: str, data: pd.DataFrame) -> Any:
    """The ``LocScaleSpec(transform=False)`` of a ``bayes_lmer`` location formula and a
    dispersion formula with random effects (module docstring), or
    :class:`DispersionRandomEffectsError`."""
    from scoremix.lme.formula import parse_formula
    from scoremix.locscale import LocScaleSpec
    from scoremix.trials import label_to_binary

    if not isinstance(formula, str):
        raise _refuse("a dispersion formula with random effects needs the location formula as a string")
    if not dispersion.strip().startswith("~"):
        raise FormulaError(f"dispersion formula {dispersion!r} must be one-sided, as in '~ label'")
    loc = parse_formula(formula)
    disp = parse_formula("dispersion__response " + dispersion.strip())
    if loc.response_expr is not None or loc.offsets:
        raise _refuse(f"the response of {formula!r} must be a column, with no offset")
    fixed_vars = loc.fixed.variables
    if len(fixed_vars) != 1 or fixed_vars[0].kind != "column" or loc.fixed.terms != ((0,),):
        raise _refuse(f"the fixed part of {formula!r} must be the class column alone ('~ label' or '~ 0 + label'): "
                      "one mean per class")
    label = fixed_vars[0].column
    dv = disp.fixed.variables
    if len(dv) != 1 or dv[0].kind != "column" or dv[0].column != label or disp.fixed.terms != ((0,),):
        raise _refuse(f"the fixed part of the dispersion formula {dispersion!r} must be '~ {label}' (one residual SD "
                      "per class, as the location-scale model has)")
    missing = [c for c in [loc.response, label] if c not in data.columns]
    if missing:
        raise FormulaError(f"column(s) {missing} of the formula are not in the data")
    levels = sorted(pd.unique(data[label].dropna().astype(str)).tolist())
    if len(levels) != 2:
        raise _refuse(f"the class column {label!r} has {len(levels)} levels {levels[:5]}; the location-scale model "
                      "needs two classes")
    group, loc_cls = _classes_of_parts(loc.random, label, levels, "location")
    dgroup, disp_cls = _classes_of_parts(disp.random, label, levels, "dispersion")
    if sorted(loc_cls) != levels:
        raise _refuse(f"the location formula {formula!r} must give every class of {label!r} its own speaker location "
                      f"effect (e.g. diag(0 + {label} | speaker)); got {loc_cls or 'none'}")
    if group != dgroup:
        raise _refuse(f"location effects group by {group!r} but dispersion effects by {dgroup!r}")
    try:
        label_to_binary(data[label].astype(str), None, column=label)
        positive: Any = None
    except Exception:  # a vocabulary without a known positive class: R's non-reference level
        positive = levels[1]
    y = np.asarray(label_to_binary(pd.Series(levels), positive, column=label), dtype=np.int64)
    cls_name = {lv: ("positive" if yy == 1 else "negative") for lv, yy in zip(levels, y)}
    return LocScaleSpec(score=loc.response, label=label, speaker=str(group), positive=positive,
                        speaker_location=True, speaker_scale=tuple(sorted({cls_name[c] for c in disp_cls})),
                        transform=False)


def fit_dispersion_re(formula: Any, data: Any, dispersion: str, *, priors: Any, draws: int, tune: int, chains: int,
                      sampler: str, method: str, seed: Any, progress: bool, cores: int | None, centred: Any,
                      target_accept: float | None, transform: Any, weights: Any, posterior_predictive: Any) -> Any:
    """``bayes_lmer`` with a dispersion formula that has random effects: the location-scale
    model of :func:`locscale_spec_from_formulas`, sampled by ``bayes_locscale``.

    Options that do not apply are refused by name, never ignored."""
    from scoremix.bayes.locscale import bayes_locscale

    if not isinstance(data, pd.DataFrame):
        raise _refuse("dispersion random effects need the trial table as a pandas DataFrame (not a ModelSpec or "
                      "Dask input)")
    for name, value, ok in (("transform", transform, transform is None),
                            ("weights", weights, weights is None),
                            ("priors", priors, priors is None),
                            ("posterior_predictive", posterior_predictive, not posterior_predictive),
                            ("method", method, method == "collapsed"),
                            ("centred", centred, centred is None or isinstance(centred, bool)),
                            ("sampler", sampler, sampler in ("pymc", "nutpie"))):
        if not ok:
            raise _refuse(f"{name}={value!r} is not available with dispersion random effects (the location-scale "
                          "sampler integrates the location effects out and has its own priors, LocScalePriors)")
    spec = locscale_spec_from_formulas(formula, dispersion, data)
    return bayes_locscale(spec, data, draws=draws, tune=tune, chains=chains, seed=seed, progress=progress,
                          cores=cores, target_accept=0.9 if target_accept is None else target_accept,
                          centred=centred, sampler=sampler)
