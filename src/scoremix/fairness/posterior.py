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

from scoremix.fairness.model_based import PosteriorFairness, gaussian_mixture_measures, summarise_draws
from scoremix.fairness.subgroups import SubgroupError, binary_labels, define_subgroups

__all__ = ["posterior_subgroup_dcf", "is_bayes_fit"]

_CELL = "__fairness_cell__"


def is_bayes_fit(fit: Any) -> bool:
    """``True`` for a posterior fit (has ``class_moments`` and posterior draws)."""
    return hasattr(fit, "class_moments") and hasattr(fit, "idata")


def posterior_subgroup_dcf(fit: Any, trials: pd.DataFrame | None = None, groups: Sequence[str] = (), *,
                           label: str = "label", speaker: str = "speaker", positive: Any = None,
                           p_target: float = 0.05, c_miss: float = 1.0, c_fa: float = 1.0,
                           normalize: bool = False, random: str = "conditional",
                           split_by: Sequence[str] | None = None, max_draws: int | None = 200,
                           ci: float = 0.95, min_speakers: int = 5, min_errors: int = 30,
                           membership: str = "enrol", test_speaker: str | None = None,
                           test_groups: Sequence[str] | None = None, speaker_table: pd.DataFrame | None = None,
                           n_grid: int = 256) -> PosteriorFairness:
    """Posterior medians, credible intervals, ``P(ratio_overall > 1)`` and the FI distribution.

    Parameters
    ----------
    fit:
        a :class:`scoremix.bayes.BayesLmerResult` (anything with ``class_moments``).
    trials:
        the trial table holding the ``groups`` columns; ``None`` uses the fitted model
        frame.  Pass the fitted table itself (same index and response) to use attribute
        columns that are not in the formula.
    groups:
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
    ci:
        level of the equal-tailed credible intervals.
    min_speakers, min_errors:
        reliability rule: ``reliable`` is False when a subgroup has fewer speakers, or when
        its expected number of errors at ``τ*`` (``n_pos·fnr + n_neg·fpr``, posterior
        medians) is below ``min_errors`` (Doddington's rule of 30).
    n_grid:
        grid size of the threshold search before golden-section refinement.

    Returns
    -------
    PosteriorFairness
        ``table``: grouping columns, ``subgroup, n_speakers, n_pos, n_neg``, per measure
        the posterior median and ``_lo/_hi``, ``p_ratio_overall_gt_1``,
        ``n_errors_expected``, ``reliable``; ``fairness_index`` (median),
        ``fairness_index_ci``, ``draws`` and ``overall`` medians.
    """
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
    y = binary_labels(data[label], positive=positive).astype(bool)
    sg = define_subgroups(data, groups, membership=membership, speaker=speaker, test_speaker=test_speaker,
                          test_groups=test_groups, speaker_table=speaker_table)
    if split_by is None:
        split = [speaker] if random == "conditional" and speaker in data.columns else []
    else:
        split = list(split_by)
    for c in split:
        if c not in data.columns:
            raise SubgroupError(f"split_by column {c!r} not in the trial table")
    # components: homogeneous in membership (codes of both roles) and split columns
    key = pd.DataFrame({"_e": sg.code_enrol, "_t": sg.code_test}, index=data.index)
    for c in split:
        key[c] = data[c].to_numpy()
    cell_id = key.groupby(list(key.columns), sort=True, dropna=False).ngroup().to_numpy()
    cell_codes = key.assign(_c=cell_id).drop_duplicates("_c").set_index("_c")[["_e", "_t"]]
    if not y.any() or y.all():
        raise SubgroupError(f"class column {label!r} must hold both classes")
    pos_value = data[label].to_numpy()[np.flatnonzero(y)[0]]  # the positive value as stored
    mom = fit.class_moments(groups=[_CELL], data=data.assign(**{_CELL: cell_id}), label=label,
                            positive=pos_value, random=random, max_draws=max_draws)
    wide_mu = mom.pivot(index="draw", columns=[_CELL, "class"], values="mean")
    wide_sd = mom.pivot(index="draw", columns=[_CELL, "class"], values="sd")
    counts = mom.drop_duplicates([_CELL, "class"]).set_index([_CELL, "class"])["n"].reindex(wide_mu.columns)
    comp_cell = wide_mu.columns.get_level_values(0).to_numpy()
    is_pos = wide_mu.columns.get_level_values(1).to_numpy() == 1
    n = counts.to_numpy(dtype=float)
    G = sg.n_groups
    W = np.zeros((1 + G, n.size))
    W[0] = n
    ce = cell_codes.loc[comp_cell, "_e"].to_numpy()
    ct = cell_codes.loc[comp_cell, "_t"].to_numpy()
    cols = np.arange(n.size)
    if membership == "enrol":
        hits = [(ce, ce >= 0)]
    elif membership == "test":
        hits = [(ct, ct >= 0)]
    elif membership == "both":
        hits = [(ce, (ce >= 0) & (ce == ct))]
    else:
        hits = [(ce, ce >= 0), (ct, (ct >= 0) & (ct != ce))]
    for code, ok in hits:
        W[1 + code[ok], cols[ok]] += n[ok]
    res = gaussian_mixture_measures(wide_mu.to_numpy(), wide_sd.to_numpy(), is_pos, W, p_target=p_target,
                                    c_miss=c_miss, c_fa=c_fa, normalize=normalize, n_grid=n_grid)
    tab = sg.cells.copy()
    tab["n_speakers"] = sg.n_speakers
    tab["n_pos"] = np.bincount(sg.mem_group[y[sg.mem_trial]], minlength=G)
    tab["n_neg"] = np.bincount(sg.mem_group[~y[sg.mem_trial]], minlength=G)
    out = summarise_draws(res, tab, ci)
    t = out.table
    t["n_errors_expected"] = t["n_pos"] * t["fnr"] + t["n_neg"] * t["fpr"]
    t["reliable"] = ((t["n_speakers"] >= min_speakers) & (t["n_errors_expected"] >= min_errors)
                     & (t["n_pos"] > 0) & (t["n_neg"] > 0))
    return out
