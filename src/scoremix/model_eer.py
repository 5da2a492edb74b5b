"""Model-based equal error rates (studies.md A.4).

If negative scores follow :math:`N(\\mu_0, \\sigma_0^2)` and positive scores
:math:`N(\\mu_1, \\sigma_1^2)` (accept when :math:`s \\ge \\tau`), the false negative and
false positive rates are :math:`\\Phi((\\tau-\\mu_1)/\\sigma_1)` and
:math:`\\Phi((\\mu_0-\\tau)/\\sigma_0)`.  They are equal at
:math:`\\tau^* = (\\mu_1\\sigma_0 + \\mu_0\\sigma_1)/(\\sigma_0+\\sigma_1)`, where

.. math::

    \\mathrm{EER} = \\Phi\\!\\left(-\\frac{\\mu_1-\\mu_0}{\\sigma_0+\\sigma_1}\\right)
    \\quad(\\text{tied } \\sigma:\\ \\Phi(-d/(2\\sigma))).

A fitted linear mixed model implies, for every trial, a Gaussian score distribution;
each class's score distribution is then the equal-weight *mixture* of its trials'
Gaussians, and :func:`model_eer` finds the EER of the two mixtures numerically
(:func:`mixture_eer`, Brent's method on :math:`\\mathrm{FNR}(\\tau)=\\mathrm{FPR}(\\tau)`).
The per-trial distributions come from the one predictive layer,
:func:`scoremix.predictive.predictive`; for a transformation model
(``lmer(..., transform="monotone")``) they live on the latent scale :math:`z = h(s)`, where the
EER is the same as on the score scale (``h`` is increasing) and thresholds are reported on
the score scale through ``h⁻¹``; with one transform per stratum
(``transform="monotone-by-class"``) the one score threshold maps to a latent threshold per
stratum and the EER is the root over the layer's common threshold axis
(:mod:`scoremix.predictive.axis`).  Tables (``by=``) show the empirical EER with a
speaker-cluster bootstrap interval beside the model's and warn with
:class:`~scoremix.predictive.gof.ModelFitWarning` when they disagree beyond sampling error.

Bayesian fits: :func:`model_eer` also accepts a
:class:`~scoremix.bayes.result.BayesLmerResult` and returns a :class:`PosteriorEER` (one
EER per posterior draw and subgroup, plus a summary with a credible interval).  Per draw the
class distributions are built exactly as for an ``LmerResult`` (mixtures of the per-trial
Gaussians, from the draw's β, random effects and residual SDs, obtained through the result's
public :meth:`~scoremix.bayes.result.BayesLmerResult.class_moments`); ``method="moments"``
instead uses one moment-matched Gaussian per class and draw (the result's own
:meth:`~scoremix.bayes.result.BayesLmerResult.model_eer`), which is faster on huge tables.
:func:`model_eer_from_moments` is :func:`gaussian_eer` vectorised over any broadcastable
arrays of draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix._deprecate import renamed_kwargs
from scoremix.predictive.attainable import check_thresholds
from scoremix.predictive.gof import (ModelFitWarning, cluster_codes_for, empirical_eer_interval, misfit_hint,
                                     model_eer_interval, score_shape_facts, subgroup_term_note, warn_if_misfit)
from scoremix.resampling import Estimate
from scoremix.predictive.layer import is_bayes_fit, model_frame_with, predictive
from scoremix.predictive.mixture import ModelEERError, gaussian_eer, mixture_eer
from scoremix.predictive.param_boot import (MODEL_INTERVALS, ModelIntervalError, parametric_eer_replicates,
                                            parametric_interval, population_eer, resolve_model_interval)

__all__ = [
    "ModelEERError",
    "ModelIntervalError",
    "gaussian_eer",
    "model_eer_from_moments",
    "mixture_eer",
    "trial_moments",
    "model_eer",
    "model_eer_tables",
    "PosteriorEER",
]


def model_eer_from_moments(mu_neg: Any, mu_pos: Any, sd_neg: Any, sd_pos: Any) -> np.ndarray | float:
    """Model-based EER from class moments, vectorised over draws (for Bayesian fits).

    Identical to :func:`gaussian_eer`; provided under this name as the hook for posterior
    summaries: pass arrays of draws of :math:`(\\mu_0, \\mu_1, \\sigma_0, \\sigma_1)` (any
    broadcastable shapes, e.g. ``(n_draws,)`` or ``(n_draws, n_groups)``) and get
    :math:`\\Phi(-(\\mu_1-\\mu_0)/(\\sigma_0+\\sigma_1))` per draw.
    """
    return gaussian_eer(mean_neg=mu_neg, sd_neg=sd_neg, mean_pos=mu_pos, sd_pos=sd_pos)


def trial_moments(
    fit: Any,
    conditional: bool = True,
    label: str = "label",
    positive: Any = None,
    data: pd.DataFrame | None = None,
    marginal_over: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Per-trial Gaussian (latent) score distribution implied by a fitted linear mixed model.

    For trial :math:`i` with fixed-effects row :math:`x_i` and random-term design rows
    :math:`z_{ik}`:

    * conditional (observed speakers/attacks):
      :math:`z_i \\sim N(x_i^\\top\\hat\\beta + \\sum_k z_{ik}^\\top\\hat b_{k,g_k(i)},\\ \\sigma_{c(i)}^2)`;
    * marginal (new levels of every grouping factor, or of those in ``marginal_over``):
      :math:`z_i \\sim N(x_i^\\top\\hat\\beta,\\ \\sigma_{c(i)}^2 + \\sum_k z_{ik}^\\top\\hat\\Sigma_k z_{ik})`,

    where :math:`\\sigma_{c(i)}` is the residual SD of the trial's dispersion level
    (``fit.sigma_by``) or ``fit.sigma`` (divided by :math:`\\sqrt{w_i}` under prior weights)
    and :math:`\\hat\\Sigma_k` the term's covariance from ``fit.varcorr``.  ``z`` is the
    score itself for a Gaussian fit and :math:`h(s)` for a transformation fit.  Computed by
    :func:`scoremix.predictive.predictive`.

    Parameters
    ----------
    fit:
        an ``LmerResult`` (needs ``spec``, ``predict``, ``sigma``, ``sigma_by``, ``varcorr``).
    conditional:
        conditional on the fitted random effects (True) or marginal (False).
    label:
        class column of ``fit.spec.data`` (or of ``data``).
    positive:
        the positive label value, passed to :func:`scoremix.trials.label_to_binary`.
    data:
        the data frame the model was fitted on; needed only when ``label`` is not a
        column of the model frame (which holds just the formula's variables); rows are
        matched by index label.
    marginal_over:
        grouping factors to marginalise (the others are conditioned on); overrides
        ``conditional``.

    Returns
    -------
    pandas.DataFrame
        index = model-frame index; columns ``y`` (0/1), ``score`` (observed response),
        ``mean``, ``sd``.
    """
    return predictive(fit, data=data, label=label, positive=positive, conditional=conditional,
                      marginal_over=marginal_over).trial_table()


def _eer_of_rows(mom: pd.DataFrame) -> float:
    neg = mom[mom["y"] == 0]
    pos = mom[mom["y"] == 1]
    if neg.empty or pos.empty:
        return float("nan")
    return float(mixture_eer(neg["mean"].to_numpy(), neg["sd"].to_numpy(),
                             pos["mean"].to_numpy(), pos["sd"].to_numpy()))


def _by_keys(frame: pd.DataFrame, by: Any, n: int) -> tuple[list[np.ndarray], list[str]]:
    if isinstance(by, str) or (isinstance(by, (list, tuple)) and all(isinstance(b, str) for b in by)):
        cols = [by] if isinstance(by, str) else list(by)
        return [frame[c].to_numpy() for c in cols], cols
    arr = np.asarray(by)
    if arr.shape[0] != n:
        raise ModelEERError(f"by has {arr.shape[0]} values but the model frame has {n} rows")
    return [arr], [getattr(by, "name", None) or "group"]


def _speaker_column(fit: Any, frame: pd.DataFrame, data: pd.DataFrame | None, speaker: str | None
                    ) -> tuple[pd.DataFrame, str | None]:
    """The cluster column for the empirical bootstrap: ``speaker`` if given, else a column
    named ``speaker``, else the fit's first grouping factor; ``None``: trials."""
    cands = [speaker] if speaker is not None else ["speaker"] + [
        t.group_factor for t in getattr(getattr(fit, "spec", None), "terms", None) or []]
    for c in cands:
        if c in frame.columns:
            return frame, c
        if data is not None and c in data.columns:
            try:
                return frame.assign(**{c: data.loc[frame.index, c].to_numpy()}), c
            except KeyError:
                pass
    if speaker is not None:
        raise ModelEERError(f"speaker column {speaker!r} is neither in the model frame nor in data")
    return frame, None


def empirical_columns(scores: np.ndarray, y: np.ndarray, clusters: np.ndarray | None, n_boot: int,
                      level: float, seed: int) -> dict[str, float]:
    """``eer_empirical``, ``eer_empirical_lo/_hi`` and ``se_logit`` of one cell."""
    ok = np.isfinite(scores) | np.isinf(scores)
    r = empirical_eer_interval(scores[ok], y[ok], None if clusters is None else clusters[ok], n_boot=n_boot,
                               level=level, seed=seed)
    return {"eer_empirical": r["eer"], "eer_empirical_lo": r["lo"], "eer_empirical_hi": r["hi"],
            "se_logit": r["se_logit"]}


# ---------------------------------------------------------------------------------------
# BayesLmerResult → posterior distribution of the model-based EER
# ---------------------------------------------------------------------------------------
@dataclass
class PosteriorEER:
    """Posterior distribution of the model-based EER of a Bayesian fit.

    Attributes
    ----------
    draws:
        long table: the ``by`` columns (if any), ``draw`` (chain-major flat index of the
        posterior draw) and ``eer`` (the model-based EER of that draw).
    summary:
        one row per subgroup (index = the ``by`` columns; a single row labelled ``"all"``
        when ``by`` is None): ``n_neg``, ``n_pos``, ``eer_model`` (posterior mean),
        ``eer_sd``, ``eer_median``, the HDI bounds ``hdi_<lo>%`` / ``hdi_<hi>%`` (highest
        density interval of probability ``hdi_prob``) and ``eer_empirical``
        (:func:`scoremix.metrics.eer` of the observed scores).
    hdi_prob:
        probability of the credible interval.
    method:
        ``"mixture"`` or ``"moments"`` (see :func:`model_eer`).
    conditional:
        whether the random effects were conditioned on.
    """

    draws: pd.DataFrame
    summary: pd.DataFrame
    hdi_prob: float
    method: str
    conditional: bool

    @property
    def interval_columns(self) -> tuple[str, str]:
        """Names of the lower and upper HDI columns of :attr:`summary`."""
        return _hdi_names(self.hdi_prob)

    def __repr__(self) -> str:
        n = self.draws["draw"].nunique()
        return (f"PosteriorEER(method={self.method!r}, conditional={self.conditional}, draws={n}, "
                f"hdi_prob={self.hdi_prob})\n{self.summary!r}")


def _hdi_names(hdi_prob: float) -> tuple[str, str]:
    lo = (1 - hdi_prob) / 2 * 100
    return f"hdi_{lo:g}%", f"hdi_{100 - lo:g}%"


def _summary_rows(long: pd.DataFrame, frame: pd.DataFrame, names: list[str], hdi_prob: float,
                  clusters: np.ndarray | None, n_boot: int, level: float, seed: int) -> pd.DataFrame:
    import arviz as az

    lo, hi = _hdi_names(hdi_prob)
    rows = []
    groups = frame.groupby(names, sort=True) if names else [((), frame)]
    draws_by = dict(iter(long.groupby(names, sort=True))) if names else {(): long}
    for key, g in groups:
        e = draws_by.get(key)
        ev = np.asarray(e["eer"], dtype=np.float64) if e is not None else np.array([np.nan])
        yy = g["_y01"].to_numpy()
        n_pos = int(yy.sum())
        n_neg = int(yy.size - n_pos)
        pos = frame.index.get_indexer(g.index) if clusters is not None else None
        emp = empirical_columns(g["_score"].to_numpy(np.float64), yy,
                                None if clusters is None else clusters[pos], n_boot, level, seed)
        if np.isfinite(ev).all() and ev.size > 1:
            h = np.asarray(az.hdi(ev, hdi_prob=hdi_prob)).ravel()
            stats = (float(ev.mean()), float(ev.std(ddof=1)), float(np.median(ev)), float(h[0]), float(h[1]))
        else:
            stats = (float(np.mean(ev)),) + (float("nan"),) * 4
        key = key if isinstance(key, tuple) else (key,)
        rows.append((*key, n_neg, n_pos, *stats, *emp.values()))
    return pd.DataFrame(rows, columns=[*names, "n_neg", "n_pos", "eer_model", "eer_sd", "eer_median", lo, hi,
                                       "eer_empirical", "eer_empirical_lo", "eer_empirical_hi", "se_logit"])


def _bayes_model_eer(
    fit: Any,
    by: Any,
    conditional: bool,
    label: str,
    positive: Any,
    data: pd.DataFrame | None,
    method: str,
    hdi_prob: float,
    max_draws: int | None,
    progress: bool,
    n_boot: int = 0,
    speaker: str | None = None,
    level: float = 0.95,
    seed: int = 0,
    check_fit: bool = True,
    thresholds: str = "attainable",
) -> PosteriorEER:
    if method not in ("mixture", "moments"):
        raise ModelEERError(f"method must be 'mixture' or 'moments', got {method!r}")
    if not 0 < hdi_prob < 1:
        raise ModelEERError(f"level (the credible interval's probability) must lie in (0, 1), got {hdi_prob!r}")
    spec = fit.spec
    if getattr(spec.data, "index", None) is not None and spec.data.index.has_duplicates:
        raise ModelEERError("the fitted model frame has duplicate index labels; refit on a frame "
                            "with a unique index (e.g. df.reset_index(drop=True))")
    frame = model_frame_with(fit, data, [label])
    if by is None:
        names: list[str] = []
    elif isinstance(by, str) or (isinstance(by, (list, tuple)) and all(isinstance(b, str) for b in by)):
        names = [by] if isinstance(by, str) else list(by)
        frame = model_frame_with(fit, data, [label, *names])
    else:
        arr = np.asarray(by)
        if arr.shape[0] != len(frame):
            raise ModelEERError(f"by has {arr.shape[0]} values but the model frame has {len(frame)} rows")
        names = [getattr(by, "name", None) or "group"]
        frame = frame.assign(**{names[0]: arr})
    random = "conditional" if conditional else "marginal"

    if method == "moments":
        from scoremix.trials import label_to_binary

        y = np.asarray(label_to_binary(frame[label], positive=positive), dtype=np.int8)
        fr = frame.assign(**{spec.response: np.asarray(spec.y, dtype=np.float64), "_y01": y})
        long = fit.model_eer(names or None, data=fr, label="_y01", positive=1,
                             random=random, max_draws=max_draws)
        long = long[[*names, "draw", "eer"]].reset_index(drop=True)
        pred = predictive(fit, data=frame, label=label, positive=positive, conditional=conditional,
                          by=names, max_draws=1)
    else:
        pred = predictive(fit, data=frame, label=label, positive=positive, conditional=conditional,
                          by=names, max_draws=max_draws)
        keys = [pred.frame[c].to_numpy() for c in names]
        codes = (pd.DataFrame({c: k for c, k in zip(names, keys)}).groupby(names, sort=True).ngroup().to_numpy()
                 if names else np.zeros(len(pred.frame), np.int64))
        levels = (pd.DataFrame({c: k for c, k in zip(names, keys)}).drop_duplicates()
                  .sort_values(names).itertuples(index=False, name=None) if names else [()])
        try:
            from tqdm.auto import tqdm
        except ImportError:  # pragma: no cover
            progress = False
        levels = list(levels)
        bar = tqdm(total=len(levels), desc="posterior mixture EER", disable=not progress, leave=False) \
            if progress else None
        parts = []
        for gi, key in enumerate(levels):
            e = pred.eer(codes == gi, thresholds=thresholds)
            parts.append(pd.DataFrame({**{n: [k] * pred.n_draws for n, k in zip(names, key)},
                                       "draw": pred.draws, "eer": e}))
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        long = pd.concat(parts, ignore_index=True)
    frame = frame.assign(_y01=pred.y, _score=pred.score)
    frame, spk = _speaker_column(fit, frame, data, speaker)
    clusters = cluster_codes_for(frame, spk)
    summary = _summary_rows(long, frame, names, hdi_prob, clusters, n_boot, level, seed)
    summary = summary.set_index(names) if names else summary.set_axis(["all"])
    if check_fit and n_boot > 0:
        flags = warn_if_misfit(fit, summary, by=names if (isinstance(by, str) or isinstance(by, (list, tuple)))
                               else [], stacklevel=4)
        summary["fit_ok"] = ~flags
    summary = summary.drop(columns="se_logit")
    if names and (isinstance(by, str) or isinstance(by, (list, tuple))):
        note = subgroup_term_note(fit, names)
        if note:
            summary.attrs["note"] = note
    return PosteriorEER(draws=long, summary=summary, hdi_prob=hdi_prob, method=method,
                        conditional=conditional)


def _model_interval_method(fit: Any, model_interval: str, by: Any, pred: Any) -> str:
    """``"parametric"`` or ``"speakers"`` for a point fit's table (see ``model_eer``'s
    ``model_interval``).  The parametric interval is for the *population* EER of a cell (new
    levels of every grouping factor); a breakdown by a grouping factor the model conditions on
    makes each cell one level's EER, so ``"auto"`` uses ``"speakers"`` there and an explicit
    ``"parametric"`` raises :class:`ModelIntervalError`."""
    how = resolve_model_interval(fit, model_interval)
    cols = [by] if isinstance(by, str) else list(by) if isinstance(by, (list, tuple)) else []
    groups = {t.group_factor for t in (getattr(getattr(fit, "spec", None), "terms", None) or [])}
    own = [c for c in cols if c in groups and c not in pred.marginal_over]
    if how == "parametric" and own:
        if model_interval == "parametric":
            raise ModelIntervalError(
                f"model_interval='parametric' is for the population EER of a cell, but by={own} names a "
                f"grouping factor the model conditions on (each cell is one {own[0]!r} level's EER); use "
                "model_interval='speakers', conditional=False, or marginal_over=")
        return "speakers"
    return how


@renamed_kwargs(hdi_prob="level")  # s6bayes-check: one interval argument, level=, for every fit
def model_eer(
    fit: Any,
    by: str | Sequence[str] | Any | None = None,
    conditional: bool = True,
    label: str = "label",
    positive: Any = None,
    data: pd.DataFrame | None = None,
    *,
    method: str = "mixture",
    max_draws: int | None = None,
    progress: bool = True,
    marginal_over: Sequence[str] | None = None,
    n_boot: int = 200,
    speaker: str | None = None,
    level: float = 0.95,
    seed: int = 0,
    check_fit: bool = True,
    model_interval: str = "auto",
    n_refits: int | None = None,
    thresholds: str = "attainable",
    negative_by: str | None = None,
) -> Estimate | pd.DataFrame | PosteriorEER:
    """EER implied by a fitted linear mixed model, overall or per subgroup.

    Each class's (latent) score distribution is the equal-weight mixture over that class's
    trials of the per-trial Gaussians of :func:`trial_moments` (computed by
    :func:`scoremix.predictive.predictive`); the EER of the two mixtures is found by
    :func:`mixture_eer`.  For a single Gaussian per class this is the closed form
    :math:`\\Phi(-(\\mu_1-\\mu_0)/(\\sigma_0+\\sigma_1))`.  A transformation fit
    (``transform="monotone"``) works the same way on its latent scale; its EER equals the
    EER at the corresponding score threshold because the transform is increasing.

    For a :class:`~scoremix.bayes.result.BayesLmerResult` the same is done for every
    posterior draw ``d`` (β, random effects and residual SDs of that draw) and the result is
    the posterior distribution of the EER, a :class:`PosteriorEER`.

    Goodness of fit: tables (``by`` given, and every posterior summary) carry the empirical
    EER with a speaker-cluster bootstrap interval (``eer_empirical_lo/_hi``) and ``fit_ok``;
    when the model EER disagrees with the empirical EER beyond sampling error (rule in
    :mod:`scoremix.predictive.gof`) a :class:`~scoremix.predictive.gof.ModelFitWarning`
    names the rows and points at ``transform="monotone"`` or at a missing term.  When the
    model has no term for a ``by`` column, ``table.attrs["note"]`` says so.

    Parameters
    ----------
    fit:
        an ``LmerResult`` or a ``BayesLmerResult``; a fit on Dask input
        (:class:`scoremix.distributed.fit.DaskLmerResult`) is evaluated on the cluster from
        merged counts of the distinct per-trial Gaussians (no row is collected).
    by:
        ``None`` (one EER), a column name or list of names of ``fit.spec.data``, or an
        array/Series aligned with the model frame's rows: one EER per subgroup.
    conditional:
        use the fitted random effects (observed levels) or the marginal distribution
        (new levels: random-effect variances added).
    label, positive:
        class column and positive value (see :func:`trial_moments`).
    data:
        the fitted data frame, for ``label``/``by``/``speaker`` columns that are not in the
        model frame (matched by index label).
    method:
        Bayesian fits only. ``"mixture"`` (default): per draw, the exact EER of the two
        class mixtures of per-trial Gaussians (trials with identical design rows are
        merged into one weighted component), as for an ``LmerResult``; ``"moments"``: per
        draw one Gaussian per class with the mixture's mean and variance (the result's own
        ``model_eer``; faster, approximate when the trials' means differ a lot).
    max_draws:
        Bayesian fits only: use at most this many posterior draws (evenly spaced); None
        uses all of them.
    progress:
        show a progress bar: over subgroups (Bayesian fits, ``method="mixture"``) or over the
        refits of the parametric model interval.
    marginal_over:
        ``LmerResult`` only: grouping factors to marginalise (the others are conditioned
        on); overrides ``conditional``.
    n_boot, speaker, level, seed:
        the intervals of tables (model and empirical): bootstrap replicates (0: none, and no check;
        for ``model_interval="parametric"`` the number of refits), cluster column (default:
        ``"speaker"`` if present, else the fit's first grouping factor, else trials), interval
        level and seed.  For a Bayesian fit ``level`` is also the probability of the
        highest-density credible interval of the model EER (``hdi_prob=`` is its deprecated
        name, with a ``FutureWarning``).
    check_fit:
        warn (:class:`~scoremix.predictive.gof.ModelFitWarning`) on disagreement.
    n_refits:
        refits of the parametric model interval (default ``n_boot``): each costs about one fit,
        while an empirical replicate costs microseconds, so large tables may want fewer refits
        than empirical replicates.
    thresholds:
        ``"attainable"`` (default): the ROCCH EER of the model ROC at the observed distinct scores
        (tie cells as steps), the convention of :func:`scoremix.metrics.eer`
        (:mod:`scoremix.predictive.attainable`); ``"latent"``: the smooth crossing of the model's
        FNR and FPR over every latent threshold (what a detector with continuous scores would get).
        A fit on Dask rows always gives the latent value (no rows reach the client).
    negative_by:
        a column (e.g. ``"attack"``): one EER per level of it, all positives of the cell against
        that level's negatives (the per-attack EER of anti-spoofing papers); the level becomes the
        last index level of the table (alone when ``by`` is None).
    model_interval:
        ``LmerResult`` tables: the method of ``eer_model_lo/_hi``.  ``"parametric"``: parametric
        bootstrap (simulate from the fit with new random effects, refit, recompute the model
        EER; bias-corrected normal interval on the logit scale for the population EER of the cell,
        :mod:`scoremix.predictive.param_boot`) — it includes the estimation error of β̂, the
        variances and σ̂.  ``"speakers"``: re-weight the fitted per-trial Gaussians by
        resampled speakers (:func:`scoremix.predictive.gof.model_eer_interval`; the
        parameters are held fixed, so it under-covers with few speakers).  ``"auto"``
        (default): ``"parametric"`` for Gaussian point fits, ``"speakers"`` where no refit is
        available (transformation fits) or where the table breaks down by a grouping factor it
        conditions on (the cell's EER is then that level's, not a population's).  The column
        ``eer_model_interval`` (and ``table.attrs["model_interval"]``) names the method used.
        An explicit ``"parametric"`` that cannot be run raises :class:`ModelIntervalError`;
        a posterior fit accepts only ``"auto"`` (its interval is the credible interval).

    Returns
    -------
    Estimate, pandas.DataFrame or PosteriorEER
        ``LmerResult`` without ``by``: an :class:`~scoremix.resampling.Estimate` (a float: the model
        EER) with ``empirical``, ``empirical_lo/_hi`` (speaker-bootstrap interval with
        ``n_boot > 0``), ``fit_ok`` (False exactly when the model value lies outside that
        interval, or when a class is a point mass the model cannot represent; None without
        ``n_boot``), ``hint`` and, when ``model_interval`` is given explicitly, ``lo/hi`` (the
        model interval, method in ``interval``); a :class:`ModelFitWarning` when not ``fit_ok``.
        With ``by``: index = subgroup, columns
        ``n_neg``, ``n_pos``, ``eer_model``, ``eer_model_lo``, ``eer_model_hi`` (interval of the
        model value, method in ``eer_model_interval``: see ``model_interval``),
        ``eer_empirical`` (:func:`scoremix.metrics.eer` of the observed scores),
        ``eer_empirical_lo``, ``eer_empirical_hi`` and ``fit_ok`` (intervals and ``fit_ok`` with
        ``n_boot > 0``); NaN where a subgroup lacks a class.  ``BayesLmerResult``: a
        :class:`PosteriorEER` (``.draws`` and ``.summary``, the latter with the same
        columns plus ``eer_sd``, ``eer_median`` and the HDI bounds; ``eer_model`` is the
        posterior mean).
    """
    if not (is_bayes_fit(fit) or hasattr(fit, "spec")):
        raise ModelEERError(f"model_eer needs a fitted model (the LmerResult of scoremix.lmer or the "
                            f"BayesLmerResult of scoremix.bayes_lmer), got {type(fit).__name__} {fit!r:.60}")
    dask_eer = getattr(fit, "dask_model_eer", None)
    if callable(dask_eer):  # a fit on Dask rows: merged per-partition cells, no rows collected
        if by is not None and not (isinstance(by, str) or (isinstance(by, (list, tuple))
                                                          and all(isinstance(b, str) for b in by))):
            raise ModelEERError("for a Dask fit, by must name column(s) of the data")
        return dask_eer(by=by, conditional=conditional, label=label, positive=positive)
    check_thresholds(thresholds)
    if is_bayes_fit(fit):
        if negative_by is not None:
            raise ModelEERError("negative_by is for point fits (LmerResult); for a posterior fit subset the "
                                "trials per negative level")
        if model_interval != "auto":
            raise ModelIntervalError(f"model_interval={model_interval!r} is for point fits: a posterior fit's "
                                     "model interval is its credible interval (level); use 'auto'")
        return _bayes_model_eer(fit, by, conditional, label, positive, data, method, level,
                                max_draws, progress, n_boot=n_boot, speaker=speaker, level=level, seed=seed,
                                check_fit=check_fit, thresholds=thresholds)
    if by is None and negative_by is None:
        return _overall_estimate(fit, conditional=conditional, label=label, positive=positive, data=data,
                                 marginal_over=marginal_over, n_boot=n_boot, speaker=speaker, level=level, seed=seed,
                                 check_fit=check_fit, model_interval=model_interval, n_refits=n_refits,
                                 progress=progress, thresholds=thresholds)
    return model_eer_tables(fit, [by], conditional=conditional, label=label, positive=positive, data=data,
                            marginal_over=marginal_over, n_boot=n_boot, speaker=speaker, level=level, seed=seed,
                            check_fit=check_fit, model_interval=model_interval, n_refits=n_refits, progress=progress,
                            stacklevel=5, thresholds=thresholds, negative_by=negative_by)[0]


def _overall_estimate(fit: Any, *, conditional: bool, label: str, positive: Any, data: pd.DataFrame | None,
                      marginal_over: Sequence[str] | None, n_boot: int, speaker: str | None, level: float,
                      seed: int, check_fit: bool, model_interval: str, n_refits: int | None, progress: bool,
                      thresholds: str) -> Estimate:
    """``model_eer(fit)`` of a point fit: the model EER as an :class:`Estimate` with its goodness
    of fit (the one-row table of a constant breakdown; the model interval only when
    ``model_interval`` is given explicitly, as it costs refits)."""
    import warnings

    if model_interval not in MODEL_INTERVALS:
        raise ModelIntervalError(f"model_interval must be one of {MODEL_INTERVALS}, got {model_interval!r}")
    with_model_iv = model_interval != "auto" and n_boot > 0
    const = np.zeros(len(fit.spec.data), dtype=np.int64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ModelFitWarning)
        tab = model_eer_tables(fit, [pd.Series(const, name="all")], conditional=conditional, label=label,
                               positive=positive, data=data, marginal_over=marginal_over, n_boot=n_boot,
                               speaker=speaker, level=level, seed=seed, check_fit=check_fit,
                               model_interval=model_interval if with_model_iv else "auto", n_refits=n_refits,
                               progress=progress, thresholds=thresholds, _model_iv=with_model_iv)[0]
    for w in caught:
        if not issubclass(w.category, ModelFitWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    row = tab.iloc[0]
    fit_ok = bool(row["fit_ok"]) if "fit_ok" in tab.columns and check_fit else None
    hint = str(row.get("fit_hint", "")) if fit_ok is False else ""
    lo = row.get("eer_model_lo", np.nan) if with_model_iv else np.nan
    hi = row.get("eer_model_hi", np.nan) if with_model_iv else np.nan
    how = str(tab.attrs.get("model_interval", "none")) if with_model_iv else "none"
    if with_model_iv and how == "speakers":
        lo, hi = row.get("eer_model_reweight_lo", np.nan), row.get("eer_model_reweight_hi", np.nan)
    n_cl = int(tab.attrs.get("n_clusters", 0))
    est = Estimate(float(row["eer_model"]), lo, hi, level, n_boot if with_model_iv else 0, n_cl, how,
                   empirical=float(row["eer_empirical"]), empirical_lo=float(row.get("eer_empirical_lo", np.nan)),
                   empirical_hi=float(row.get("eer_empirical_hi", np.nan)), fit_ok=fit_ok, hint=hint)
    if fit_ok is False:
        iv = (f" [{100 * est.empirical_lo:.3g}, {100 * est.empirical_hi:.3g}]"
              if np.isfinite(est.empirical_lo) else "")
        warnings.warn(f"model EER {100 * float(est):.3g} % disagrees with the empirical EER "
                      f"{100 * est.empirical:.3g} %{iv}; likely cause: {hint}", ModelFitWarning, stacklevel=3)
    return est


def _sorted(tab: pd.DataFrame) -> pd.DataFrame:
    """``tab.sort_index()``; a level whose values do not compare (e.g. str and int speaker ids
    in one object column) is sorted by its values' text (s7heldout)."""
    try:
        return tab.sort_index()
    except TypeError:
        return tab.sort_index(key=lambda ix: ix.map(str))


def _is_names(by: Any) -> bool:
    return isinstance(by, str) or (isinstance(by, (list, tuple)) and all(isinstance(b, str) for b in by))


@renamed_kwargs(bys="by")
def model_eer_tables(
    fit: Any,
    by: Sequence[Any],
    conditional: bool = True,
    label: str = "label",
    positive: Any = None,
    data: pd.DataFrame | None = None,
    *,
    marginal_over: Sequence[str] | None = None,
    n_boot: int = 200,
    speaker: str | None = None,
    level: float = 0.95,
    seed: int = 0,
    check_fit: bool = True,
    model_interval: str = "auto",
    n_refits: int | None = None,
    progress: bool = True,
    stacklevel: int = 4,
    thresholds: str = "attainable",
    negative_by: str | None = None,
    _model_iv: bool = True,
) -> list[pd.DataFrame]:
    """``[model_eer(fit, by=b, ...) for b in bys]`` for a point fit (``LmerResult``), with one
    parametric-bootstrap refit per replicate shared by every table (the refits are the costly
    part; a study's overall and per-column tables then cost one set of ``n_boot`` refits).
    Arguments as :func:`model_eer` (``stacklevel``: of the
    :class:`~scoremix.predictive.gof.ModelFitWarning`, 4 = the caller of this function); every
    ``b`` must be a breakdown (not ``None``) unless ``negative_by`` is given."""
    bys = by  # the body's name for by= (renamed API argument)
    if is_bayes_fit(fit) or not hasattr(fit, "spec") or callable(getattr(fit, "dask_model_eer", None)):
        raise ModelEERError("model_eer_tables needs a point fit (an LmerResult on in-memory data); call "
                            "model_eer per breakdown for posterior or Dask fits")
    if model_interval not in MODEL_INTERVALS:
        raise ModelIntervalError(f"model_interval must be one of {MODEL_INTERVALS}, got {model_interval!r}")
    check_thresholds(thresholds)
    if any(b is None for b in bys) and negative_by is None:
        raise ModelEERError("model_eer_tables: every breakdown must name column(s) or be an array (got None); "
                            "the overall value is model_eer(fit) or a breakdown by a constant")
    pred = predictive(fit, data=data, label=label, positive=positive, conditional=conditional,
                      marginal_over=marginal_over)
    neg_levels, neg_col = None, None
    if negative_by is not None:
        if not isinstance(negative_by, str):
            raise ModelEERError(f"negative_by must name one column, got {negative_by!r}")
        neg_col = model_frame_with(fit, data, [negative_by])[negative_by].to_numpy()
        neg_levels = sorted(pd.unique(neg_col[pred.y == 0]), key=str)
    plans = []
    for by in bys:
        if by is None:
            frame = model_frame_with(fit, data, [negative_by])
            keys, names = [np.zeros(len(pred.y), np.int64)], []
        else:
            frame = model_frame_with(fit, data, [by] if isinstance(by, str) else list(by)) if _is_names(by) \
                else fit.spec.data
            keys, names = _by_keys(frame, by, len(pred.y))
        frame, spk = _speaker_column(fit, frame, data, speaker)
        clusters = cluster_codes_for(frame, spk)
        key_frame = pd.DataFrame({f"k{j}": k for j, k in enumerate(keys)})
        cells = []
        for key, idx in key_frame.groupby(list(key_frame.columns), sort=True, dropna=False).indices.items():
            base = np.zeros(len(pred.y), bool)
            base[idx] = True
            key = key if isinstance(key, tuple) else (key,)
            key = key if names else ()
            for lv in ([None] if neg_levels is None else neg_levels):
                mask = base if lv is None else base & ((pred.y == 1) | (neg_col == lv))
                k2 = key if lv is None else (*key, lv)
                cells.append((k2, mask, bool(pred.y[mask].any() and not pred.y[mask].all())))
        names = names + ([negative_by] if negative_by is not None else [])
        how = (_model_interval_method(fit, model_interval, by, pred) if n_boot > 0 and _model_iv else None)
        plans.append((by, names, clusters, cells, how))
    masks = [m for *_, cells, how in plans if how == "parametric" for _, m, ok in cells if ok]
    if masks:
        refits = n_boot if n_refits is None else int(n_refits)
        if refits < 2:
            raise ModelIntervalError(f"n_refits must be >= 2 for a parametric model interval, got {n_refits!r}")
        reps = parametric_eer_replicates(fit, masks, refits, seed, label=label, positive=positive, data=data,
                                         conditional=conditional, marginal_over=marginal_over, progress=progress,
                                         thresholds=thresholds)
        truth = population_eer(fit, masks, label=label, positive=positive, data=data, thresholds=thresholds)
    it = iter(range(len(masks)))
    return [_point_table(fit, pred, by, names, clusters, cells, how, reps if masks else None,
                         truth if masks else None, it, n_boot, level, seed, check_fit, stacklevel, thresholds,
                         negative_by)
            for by, names, clusters, cells, how in plans]


def _point_table(fit: Any, pred: Any, by: Any, names: list[str], clusters: np.ndarray | None, cells: list,
                 how: str | None, reps: np.ndarray | None, truth: np.ndarray | None, it: Any, n_boot: int,
                 level: float, seed: int, check_fit: bool, stacklevel: int, thresholds: str = "attainable",
                 negative_by: str | None = None) -> pd.DataFrame:
    """One ``model_eer`` table of a point fit from its cells; ``it`` yields the rows of
    ``reps``/``truth`` of the parametric cells in order.

    Columns: ``eer_model_lo/_hi`` hold refit-based (parametric) intervals only; the speaker
    re-weighting of the fitted Gaussians (parameters fixed: much narrower than the estimation
    error) goes to its own ``eer_model_reweight_lo/_hi``."""
    rows = []
    stratified = getattr(getattr(fit, "transform", None), "levels", None) is not None
    by_cols = [c for c in names if c != negative_by] if (isinstance(by, str) or isinstance(by, (list, tuple))) else []
    for key, mask, ok in cells:
        yy = pred.y[mask]
        n_pos = int(yy.sum())
        n_neg = int(yy.size - n_pos)
        emp = (empirical_columns(pred.score[mask], yy, None if clusters is None else clusters[mask], n_boot,
                                 level, seed) if ok else
               dict.fromkeys(("eer_empirical", "eer_empirical_lo", "eer_empirical_hi", "se_logit"), float("nan")))
        model = float(pred.eer(mask, thresholds=thresholds)[0]) if ok else float("nan")
        m_iv = (float("nan"), float("nan"))
        rw_iv = (float("nan"), float("nan"))
        if ok and how == "parametric":
            j = next(it)
            n_cl = len(np.unique(clusters[mask])) if clusters is not None else int(mask.sum())
            m_iv = parametric_interval(model, reps[j], float(truth[j]), n_cl, level)
        elif ok and how is not None:
            rw_iv = model_eer_interval(pred, mask, clusters, n_boot, level, seed, thresholds=thresholds)
        f = score_shape_facts(pred.score[mask], yy) if ok else {}
        hint = misfit_hint(fit, by_cols, ["eer"], facts=f, thresholds=thresholds, negative_by=negative_by)
        rows.append((*key, n_neg, n_pos, model, *m_iv, *rw_iv, *emp.values(), hint,
                     bool(f.get("point_mass")) and not stratified))
    cols = [*names, "n_neg", "n_pos", "eer_model", "eer_model_lo", "eer_model_hi", "eer_model_reweight_lo",
            "eer_model_reweight_hi", "eer_empirical", "eer_empirical_lo", "eer_empirical_hi", "se_logit",
            "_hint", "_point_mass"]
    out = _sorted(pd.DataFrame(rows, columns=cols).set_index(names))
    hints = out.pop("_hint").tolist()
    point_mass = out.pop("_point_mass").to_numpy(bool)
    if how is None:
        out = out.drop(columns=["eer_model_lo", "eer_model_hi", "eer_model_reweight_lo", "eer_model_reweight_hi"])
    else:
        if how != "parametric":
            out = out.drop(columns=["eer_model_lo", "eer_model_hi"])
        else:
            out = out.drop(columns=["eer_model_reweight_lo", "eer_model_reweight_hi"])
        last = "eer_model_hi" if how == "parametric" else "eer_model_reweight_hi"
        out.insert(out.columns.get_loc(last) + 1, "eer_model_interval", how)
        out.attrs["model_interval"] = how
    out.attrs["n_clusters"] = int(len(np.unique(clusters))) if clusters is not None else int(len(pred.y))
    if n_boot > 0:
        flags = (warn_if_misfit(fit, out, by=by_cols, stacklevel=stacklevel, hints=hints) if check_fit
                 else np.zeros(len(out), bool))
        if check_fit:
            flags = flags | point_mass
        out["fit_ok"] = ~flags
        out["fit_hint"] = np.where(flags, np.asarray(hints, dtype=object), "")
    else:
        out = out.drop(columns=["eer_empirical_lo", "eer_empirical_hi"])
        if check_fit and point_mass.any():
            import warnings
            i = int(np.flatnonzero(point_mass)[0])
            warnings.warn(f"model-based EER of row {out.index[i]!r}: {hints[i]}", ModelFitWarning,
                          stacklevel=stacklevel)
    out = out.drop(columns="se_logit")
    if isinstance(by, str) or isinstance(by, (list, tuple)):  # column names (not an array of codes)
        note = subgroup_term_note(fit, by_cols)
        if note:
            out.attrs["note"] = note
    return out
