r"""Model-implied DET curves and their overlay on the empirical ones.

For the trials of a population (all, or one ``by`` cell) the model's DET curve is the set
of points :math:`(\mathrm{FPR}(t), \mathrm{FNR}(t))` of the class mixtures of
:class:`scoremix.predictive.Predictive` over latent thresholds ``t``; each point is
reported with its score threshold :math:`\tau = h^{-1}(t)`.  On probit axes a single
Gaussian per class gives a straight line; a mixture bends it, and a transformation model
reproduces the empirical curve whenever the scores are (conditionally) Gaussian after one
increasing map — which is what the overlay lets a reader judge.  For a posterior fit the
curve is the pointwise posterior median of the rates with an equal-tailed ``ci`` band.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix._deprecate import renamed_kwargs
from scoremix.predictive.layer import Predictive, predictive
from scoremix.predictive.mixture import PredictiveError

__all__ = ["model_det_curve", "det_curve_of", "plot_model_det"]

_EPS = 1e-6


def det_curve_of(pred: Predictive, mask: Any = None, n_points: int = 600, p_min: float = 1e-5,
                 ci: float = 0.95) -> pd.DataFrame:
    """DET points of the trials in ``mask`` of a :class:`Predictive`.

    Returns columns ``latent`` (threshold on the model scale; for a stratified transform the
    point of the common threshold axis, :mod:`scoremix.predictive.axis`), ``threshold`` (score scale),
    ``fnr``, ``fpr`` (posterior medians for a posterior fit) and, for a posterior fit,
    ``fnr_lo/_hi``, ``fpr_lo/_hi``.
    """
    w = pred.counts(mask)
    use = w > 0
    if not (use & pred.positive).any() or not (use & ~pred.positive).any():
        raise PredictiveError("a DET curve needs trials of both classes")
    m, s = pred.mean[:, use], pred.sd[:, use]
    lo, hi = pred.axis.bounds(np.min(m - 9 * s), np.max(m + 9 * s))
    t = np.linspace(float(lo), float(hi), 8 * n_points)
    fnr, fpr = pred.rates_at(t, mask, scale="latent")  # (D, T)
    med_n, med_p = np.median(fnr, axis=0), np.median(fpr, axis=0)
    keep = (med_n >= p_min) & (med_p >= p_min)
    idx = np.flatnonzero(keep)
    if idx.size > n_points:
        # even spacing along the curve in probit space
        from scipy.special import ndtri

        x = ndtri(np.clip(med_p[idx], _EPS, 1 - _EPS))
        yv = ndtri(np.clip(med_n[idx], _EPS, 1 - _EPS))
        arc = np.r_[0.0, np.cumsum(np.hypot(np.diff(x), np.diff(yv)))]
        pick = np.unique(np.searchsorted(arc, np.linspace(0, arc[-1], n_points)).clip(0, idx.size - 1))
        idx = idx[pick]
    out = pd.DataFrame({"latent": t[idx], "threshold": pred.to_score(t[idx]), "fnr": med_n[idx],
                        "fpr": med_p[idx]})
    if pred.n_draws > 1:
        q = (1 - ci) / 2
        out["fnr_lo"], out["fnr_hi"] = np.quantile(fnr[:, idx], [q, 1 - q], axis=0)
        out["fpr_lo"], out["fpr_hi"] = np.quantile(fpr[:, idx], [q, 1 - q], axis=0)
    return out


@renamed_kwargs(ci="level")
def model_det_curve(
    fit: Any,
    data: pd.DataFrame | None = None,
    *,
    trials: pd.DataFrame | None = None,
    by: str | Sequence[str] | None = None,
    conditional: bool = True,
    marginal_over: Sequence[str] | None = None,
    label: str = "label",
    positive: Any = None,
    n_points: int = 600,
    p_min: float = 1e-5,
    max_draws: int | None = 200,
    level: float = 0.95,
) -> pd.DataFrame:
    """Model-implied DET curve of a fit, overall or per ``by`` cell.

    Parameters
    ----------
    fit:
        an ``LmerResult`` (Gaussian, ``transform="monotone"`` or ``"monotone-by-class"``) or a
        ``BayesLmerResult``.
    data:
        the fitted data frame, for ``label``/``by`` columns outside the model frame.
    trials:
        predict these trials instead of the fitted rows.
    by:
        column(s) of the rows: one curve per cell.
    conditional, marginal_over:
        random effects conditioned on or marginalised (see :func:`scoremix.predictive.predictive`).
    label, positive:
        class column and positive value.
    n_points, p_min:
        points per curve (evenly spaced along it on probit axes) and the smallest rate kept.
    max_draws, level:
        posterior fits: draws used and the level of the pointwise band.

    Returns
    -------
    pandas.DataFrame
        the ``by`` columns, ``latent``, ``threshold`` (score scale), ``fnr``, ``fpr`` (and
        ``_lo/_hi`` bands for a posterior fit).
    """
    ci = level  # the body's name for level= (renamed API argument)
    names = [] if by is None else ([by] if isinstance(by, str) else list(by))
    pred = predictive(fit, trials, data=data, label=label, positive=positive, conditional=conditional,
                      marginal_over=marginal_over, by=names, max_draws=max_draws)
    if not names:
        return det_curve_of(pred, None, n_points, p_min, ci)
    missing = [c for c in names if c not in pred.frame.columns]
    if missing:
        raise PredictiveError(f"by column(s) {missing} not in the rows (pass data= with them)")
    parts = []
    for key, idx in pred.frame.reset_index(drop=True).groupby(names, sort=True).indices.items():
        mask = np.zeros(len(pred.frame), bool)
        mask[idx] = True
        if pred.y[mask].min() == pred.y[mask].max():
            continue
        part = det_curve_of(pred, mask, n_points, p_min, ci)
        key = key if isinstance(key, tuple) else (key,)
        for n, k in zip(names, key):
            part[n] = k
        parts.append(part)
    if not parts:
        raise PredictiveError(f"no {names} cell holds both classes")
    out = pd.concat(parts, ignore_index=True)
    return out[[*names] + [c for c in out.columns if c not in names]]


def plot_model_det(model: pd.DataFrame, scores: Any = None, labels: Any = None, ax: Any = None,
                   label: str = "", color: Any = None, p_min: float = 1e-3, p_max: float = 0.5,
                   rule_of_30: bool = True) -> Any:
    """Overlay a model DET curve (``model``: a frame of :func:`model_det_curve`) on the
    empirical DET curve of ``scores``/``labels`` (probit axes); returns the axes.
    ``rule_of_30``: dotted lines where the empirical curve rests on 30 errors
    (:func:`scoremix.binomial.draw_rule_of_30`)."""
    import matplotlib.pyplot as plt

    from scoremix.metrics import det_axis_ticks, det_curve, probit

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 5))
    line = None
    if scores is not None:
        emp = det_curve(scores, labels)
        (line,) = ax.plot(probit(emp.p_fa, _EPS), probit(emp.p_miss, _EPS), lw=1.2, color=color,
                          label=f"{label} empirical".strip())
        if rule_of_30:
            from scoremix.binomial import draw_rule_of_30

            draw_rule_of_30(ax, emp.n_pos, emp.n_neg)
    c = line.get_color() if line is not None else color
    ax.plot(probit(model["fpr"], _EPS), probit(model["fnr"], _EPS), ls="--", lw=1.5, color=c,
            label=f"{label} model".strip())
    if "fnr_lo" in model.columns:
        ax.fill_between(probit(model["fpr"], _EPS), probit(model["fnr_lo"], _EPS), probit(model["fnr_hi"], _EPS),
                        color=c, alpha=0.15, lw=0)
    t = det_axis_ticks(p_min, p_max)
    ax.set_xticks(t.positions, t.labels)
    ax.set_yticks(t.positions, t.labels)
    lim = (float(probit(p_min)), float(probit(p_max)))
    ax.set_xlim(*lim)
    ax.set_ylim(*lim)
    ax.plot(lim, lim, color="0.8", lw=0.8, zorder=0)
    ax.set_xlabel("false positive rate (%)")
    ax.set_ylabel("false negative rate (%)")
    ax.grid(True, alpha=0.3)
    return ax
