r"""SVEva measures per posterior draw of a Bayesian mixed model (a ``BayesLmerResult``).

For posterior draw ``d`` the model implies, for every trial ``i``, a Gaussian score
distribution ``N(μ_{di}, v_{di})``.  Trials are pooled into *components* ``k`` — the
cells of (enrolment-subgroup code, test-subgroup code, ``split_by`` columns, class) — and
each component is summarised by :meth:`BayesLmerResult.class_moments` as one normal
with the component's mixture moments

.. math::

    \mu_{dk} = \overline{\mu_{di}},\qquad
    s_{dk}^2 = \overline{v_{di}} + \overline{(\mu_{di}-\mu_{dk})^2}\qquad (i \in k).

Population ``p`` (overall, or subgroup ``g``) is the mixture of its components weighted
by their trial counts ``n_k``, so

.. math::

    P^p_{fa,d}(\tau) = \frac{\sum_{k\in p,\,y_k=0} n_k\,\Phi((\mu_{dk}-\tau)/s_{dk})}
                            {\sum_{k\in p,\,y_k=0} n_k},\qquad
    P^p_{miss,d}(\tau) = \frac{\sum_{k\in p,\,y_k=1} n_k\,\Phi((\tau-\mu_{dk})/s_{dk})}
                              {\sum_{k\in p,\,y_k=1} n_k},

and every SVEva measure follows per draw exactly as for a point fit
(:func:`scoremix.fairness.gaussian_mixture_measures`): ``τ*_d`` minimises the overall
model DCF of draw ``d``, ``ratio_overall_{gd} = C^g_d(τ*_d) / C^{all}_d(τ*_d)``, …  The
posterior is summarised by medians, equal-tailed credible intervals,
``P(ratio_overall > 1)`` and the Fairness-Index draws.

Splitting by speaker (the default with ``random="conditional"``) keeps each speaker's own
random effect as its own component, so the subgroup distribution is the mixture over its
speakers rather than one moment-matched normal.  With ``random="marginal"`` (new
speakers) the random-effect variances are added to every trial's variance and the mean
is ``x_iᵀβ``, so no split is needed when the fixed effects are constant within a subgroup
and class.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix._deprecate import renamed_kwargs
from scoremix.fairness.model_fit import empirical_beside
from scoremix.fairness.model_measures import PosteriorFairness, gaussian_mixture_measures, summarise_draws
from scoremix.fairness.subgroups import SubgroupError, define_subgroups
from scoremix.predictive.gof import subgroup_term_note
from scoremix.predictive.layer import is_bayes_fit, predictive

__all__ = ["posterior_subgroup_dcf", "is_bayes_fit"]

_E, _T = "__enrol_code__", "__test_code__"


@renamed_kwargs(groups="by", ci="level", random_state="seed")
def posterior_subgroup_dcf(fit: Any, trials: pd.DataFrame | None = None, by: Sequence[str] = (), *,
                           label: str = "label", speaker: str = "speaker", positive: Any = None,
                           p_target: float = 0.05, c_miss: float = 1.0, c_fa: float = 1.0,
                           normalize: bool = False, random: str = "conditional",
                           split_by: Sequence[str] | None = None, max_draws: int | None = 200,
                           level: float = 0.95, min_speakers: int = 5, min_errors: int = 30,
                           membership: str = "enrol", test_speaker: str | None = None,
                           test_groups: Sequence[str] | None = None, speaker_table: pd.DataFrame | None = None,
                           n_grid: int = 256, score: str | None = None, n_boot: int = 200,
                           seed: Any = 0, check_fit: bool = True, progress: bool = False) -> PosteriorFairness:
    """Posterior medians, credible intervals, ``P(ratio_overall > 1)`` and the FI distribution.

    Parameters
    ----------
    fit:
        a :class:`scoremix.bayes.BayesLmerResult` (anything with ``class_moments``).
    trials:
        the trial table holding the ``groups`` columns; ``None`` uses the fitted model
        frame.  Pass the fitted table itself (same index and response) to use attribute
        columns that are not in the formula.
    by:
        subgroup attributes (single or intersectional), as in
        :func:`scoremix.fairness.subgroup_dcf`; empty intersections are rows with NaN.
    label, positive:
        class column and its positive value (guessed from the usual names when ``None``).
    speaker, membership, test_speaker, test_groups, speaker_table:
        subgroup membership, as in :func:`scoremix.fairness.subgroup_dcf`.
    p_target, c_miss, c_fa, normalize:
        detection-cost parameters.
    random:
        ``"conditional"`` (the fitted speakers' random effects) or ``"marginal"`` (new
        speakers: random-effect variances added).
    split_by:
        extra columns whose cells become separate mixture components (default:
        ``[speaker]`` for ``random="conditional"`` when that column exists, else none).
    max_draws:
        thin the posterior to this many evenly spaced draws (``None``: all).
    level:
        level of the equal-tailed credible intervals.
    min_speakers, min_errors:
        reliability rule: ``reliable`` is False when a subgroup has fewer speakers, or when
        its expected number of errors at ``τ*`` (``n_pos·fnr + n_neg·fpr``, posterior
        medians) is below ``min_errors`` (Doddington's rule of 30).
    n_grid:
        grid size of the threshold search before golden-section refinement.
    score, n_boot, seed, check_fit:
        the empirical measures beside the posterior ones (as in
        :func:`scoremix.fairness.model_subgroup_dcf`).
    progress:
        tqdm bars over the posterior draws and over the empirical speaker bootstrap
        (default ``False``).

    Returns
    -------
    PosteriorFairness
        ``table``: grouping columns, ``subgroup, n_speakers, n_pos, n_neg``, per measure
        the posterior median and ``_lo/_hi``, ``p_ratio_overall_gt_1``,
        ``n_errors_expected``, ``reliable``; ``fairness_index`` (median),
        ``fairness_index_ci``, ``draws`` and ``overall`` medians.
    """
    groups = by  # the body's name for by= (renamed API argument)
    ci = level  # the body's name for level= (renamed API argument)
    random_state = seed  # the body's name for seed= (renamed API argument)
    if not is_bayes_fit(fit):
        raise TypeError(f"fit must be a BayesLmerResult (with class_moments), got {type(fit).__name__}")
    if random not in ("conditional", "marginal"):
        raise ValueError(f"random must be 'conditional' or 'marginal', got {random!r}")
    if max_draws is not None and max_draws < 1:
        raise ValueError(f"max_draws must be >= 1 or None, got {max_draws}")
    data = fit.spec.data if trials is None else trials
    if not isinstance(data, pd.DataFrame):
        raise SubgroupError("pass trials= (the fitted trial table): the fit carries no data frame")
    if label not in data.columns:
        raise SubgroupError(f"class column {label!r} not in the trial table")
    sg = define_subgroups(data, groups, membership=membership, speaker=speaker, test_speaker=test_speaker,
                          test_groups=test_groups, speaker_table=speaker_table)
    if split_by is None:
        split = [speaker] if random == "conditional" and speaker in data.columns else []
    else:
        split = list(split_by)
    for c in split:
        if c not in data.columns:
            raise SubgroupError(f"split_by column {c!r} not in the trial table")
    # components: homogeneous in membership (codes of both roles), split columns, design and class
    rows = data.assign(**{_E: sg.code_enrol, _T: sg.code_test})
    try:
        pred = predictive(fit, rows, label=label, positive=positive, conditional=random == "conditional",
                          by=[_E, _T, *split], max_draws=max_draws)
    except ValueError as exc:
        raise SubgroupError(str(exc)) from exc
    y = pred.y.astype(bool)
    G = sg.n_groups
    W = pred.population_weights(sg.mem_trial, sg.mem_group, G)
    res = gaussian_mixture_measures(pred.mean, pred.sd, pred.positive, W, p_target=p_target,
                                    c_miss=c_miss, c_fa=c_fa, normalize=normalize, n_grid=n_grid,
                                    axis=pred.axis, stratum=pred.stratum, progress=progress,
                                    desc="posterior subgroup DCF")
    res["all_threshold"] = pred.to_score(res["all_threshold"])
    res["threshold_own"] = pred.to_score(res["threshold_own"])
    tab = sg.cells.copy()
    tab["n_speakers"] = sg.n_speakers
    tab["n_pos"] = np.bincount(sg.mem_group[y[sg.mem_trial]], minlength=G)
    tab["n_neg"] = np.bincount(sg.mem_group[~y[sg.mem_trial]], minlength=G)
    out = summarise_draws(res, tab, ci)
    t = out.table
    t["n_errors_expected"] = t["n_pos"] * t["fnr"] + t["n_neg"] * t["fpr"]
    t["reliable"] = ((t["n_speakers"] >= min_speakers) & (t["n_errors_expected"] >= min_errors)
                     & (t["n_pos"] > 0) & (t["n_neg"] > 0))
    if n_boot > 0 or score is not None:
        out.overall_empirical = empirical_beside(
            fit, t, data, groups, score, n_boot, random_state, check_fit, label=label, speaker=speaker,
            positive=positive, p_target=p_target, c_miss=c_miss, c_fa=c_fa, normalize=normalize,
            membership=membership, test_speaker=test_speaker, test_groups=test_groups,
            speaker_table=speaker_table, min_speakers=min_speakers, progress=progress)
    note = subgroup_term_note(fit, list(groups))
    out.notes = [note] if note else []
    return out
