r"""Posterior model-based EER and minimum-DCF contrasts between the levels of a factor.

For posterior draw ``d`` the model implies, for the trials of level ``a`` of ``by``, class
score distributions that are mixtures of the trials' Gaussians (:mod:`scoremix.predictive`):
:math:`F^{(a)}_{c,d}(t) = n_{a,c}^{-1}\sum_{i\in a, c(i)=c}\Phi((t-m_{di})/s_{di})`.  Its EER
:math:`E_{a,d}` solves :math:`\mathrm{FNR}_{a,d}(t) = \mathrm{FPR}_{a,d}(t)` and its minimum
detection cost is :math:`\min_t\{P_{tar}C_{miss}\mathrm{FNR}_{a,d}(t) + (1-P_{tar})C_{fa}\mathrm{FPR}_{a,d}(t)\}`
(normalised by :math:`\min(P_{tar}C_{miss}, (1-P_{tar})C_{fa})` when ``normalize=True``).

A contrast ``a − b`` is the posterior of :math:`E_{a,d} - E_{b,d}` (and the ratio
:math:`E_{a,d}/E_{b,d}`) over the same draws, so the uncertainty shared by both levels
(e.g. the label effect) cancels.  Summaries: mean, median, SD, the highest-density interval
of probability ``level`` (``arviz.hdi``) and :math:`P(a - b > 0)`.

``conditional=True`` uses the fitted random effects (the trials' own speakers, attacks);
``False`` marginalises them (a new speaker of level ``a``: its random-effect variance is added).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix.bayes.conventions import LEVEL, UNSET, resolve_level

__all__ = ["ContrastError", "PosteriorContrasts", "posterior_contrasts"]

MEASURES = ("eer", "min_dcf")


class ContrastError(ValueError):
    """Invalid contrast request (names the column, level or measure)."""


@dataclass
class PosteriorContrasts:
    """Posterior contrasts between levels.

    Attributes
    ----------
    table:
        one row per (measure, pair): ``measure, contrast ("a - b"), level_a, level_b, mean,
        median, sd, hdi_lo, hdi_hi, p_gt_0`` (posterior probability that ``a`` is worse) and
        ``ratio_median, ratio_lo, ratio_hi`` (HDI of ``a / b``).
    levels:
        per (measure, level): posterior ``mean, median, hdi_lo, hdi_hi`` and the trial counts.
    draws:
        long table ``measure, level, draw, value``.
    level:
        probability of the HDIs.
    """

    table: pd.DataFrame
    levels: pd.DataFrame
    draws: pd.DataFrame
    level: float
    settings: dict

    def __repr__(self) -> str:
        return f"PosteriorContrasts(level={self.level})\n{self.table!r}"


def _hdi(v: np.ndarray, level: float) -> tuple[float, float]:
    import arviz as az

    v = v[np.isfinite(v)]
    if v.size < 2:
        return float("nan"), float("nan")
    h = np.asarray(az.hdi(v, hdi_prob=level)).ravel()
    return float(h[0]), float(h[1])


def posterior_contrasts(
    fit: Any,
    by: str,
    data: pd.DataFrame | None = None,
    *,
    label: str = "label",
    positive: Any = None,
    pairs: Sequence[tuple[Any, Any]] | str = "all",
    measures: Sequence[str] = MEASURES,
    conditional: bool = True,
    p_target: float = 0.05,
    c_miss: float = 1.0,
    c_fa: float = 1.0,
    normalize: bool = False,
    level: float = LEVEL,
    max_draws: int | None = 1000,
    n_grid: int = 256,
    hdi_prob: float = UNSET,
) -> PosteriorContrasts:
    """EER / min-DCF per level of ``by`` and their pairwise contrasts, per posterior draw.

    Parameters
    ----------
    fit:
        a :class:`~scoremix.bayes.result.BayesLmerResult`.
    by:
        column whose levels are contrasted (e.g. ``"speaker_gender"``); from ``data`` (the
        fitted table, same index and response) or the fitted model frame.
    pairs:
        ``"all"`` (every pair, levels sorted), or a list of ``(a, b)`` for ``a − b``.
    measures:
        any of ``"eer"``, ``"min_dcf"``.
    conditional:
        condition on the fitted random effects (default) or marginalise them (new levels).
    level:
        HDI probability (default 0.95; ``hdi_prob=`` is its deprecated name).
    max_draws:
        evenly spaced posterior draws used (``None``: all).
    """
    from scoremix.fairness.model_measures import gaussian_mixture_measures
    from scoremix.predictive.layer import model_frame_with, predictive

    lev = resolve_level(level, hdi_prob, 0.95, "posterior_contrasts")
    bad = [m for m in measures if m not in MEASURES]
    if bad or not measures:
        raise ContrastError(f"measures must be among {MEASURES}, got {list(measures)}")
    try:
        frame = model_frame_with(fit, data, [label, by])
    except (KeyError, ValueError) as exc:
        raise ContrastError(f"posterior_contrasts(by={by!r}, label={label!r}): {exc}") from exc
    if frame[by].isna().any():
        raise ContrastError(f"column {by!r} has missing values")
    levels = sorted(pd.unique(frame[by]), key=str)
    if len(levels) < 2:
        raise ContrastError(f"column {by!r} has a single level {levels}; nothing to contrast")
    if isinstance(pairs, str):
        if pairs != "all":
            raise ContrastError(f"pairs must be 'all' or a list of (a, b) level pairs, got {pairs!r}")
        pair_list = list(combinations(levels, 2))
    else:
        pair_list = [tuple(p) for p in pairs]
        for p in pair_list:
            if len(p) != 2 or any(x not in levels for x in p):
                raise ContrastError(f"pair {p!r} is not two levels of {by!r}: {levels}")
    pred = predictive(fit, data=frame, label=label, positive=positive, conditional=conditional, by=[by],
                      max_draws=max_draws)
    vals = pred.frame[by].to_numpy()
    W = np.zeros((1 + len(levels), pred.n_components))
    W[0] = pred.counts()
    counts = []
    for g, lv in enumerate(levels):
        mask = vals == lv
        W[1 + g] = pred.counts(mask)
        npos = int(pred.y[mask].sum())
        counts.append((npos, int(mask.sum()) - npos))
        if npos == 0 or npos == mask.sum():
            raise ContrastError(f"level {lv!r} of {by!r} lacks trials of one class")
    res = gaussian_mixture_measures(pred.mean, pred.sd, pred.positive, W, p_target=p_target, c_miss=c_miss,
                                    c_fa=c_fa, normalize=normalize, n_grid=n_grid, axis=pred.axis,
                                    stratum=pred.stratum)
    per = {m: np.asarray(res[m]) for m in measures}  # (G, D)
    draws_rows, lev_rows, rows = [], [], []
    index = {lv: g for g, lv in enumerate(levels)}
    for m in measures:
        for g, lv in enumerate(levels):
            v = per[m][g]
            lo, hi = _hdi(v, lev)
            lev_rows.append((m, lv, counts[g][0], counts[g][1], float(np.mean(v)), float(np.median(v)), lo, hi))
            draws_rows.append(pd.DataFrame({"measure": m, "level": [lv] * v.size, "draw": pred.draws, "value": v}))
        for a, b in pair_list:
            va, vb = per[m][index[a]], per[m][index[b]]
            d = va - vb
            with np.errstate(divide="ignore", invalid="ignore"):
                r = va / vb
            lo, hi = _hdi(d, lev)
            rlo, rhi = _hdi(r, lev)
            rows.append((m, f"{a} - {b}", a, b, float(d.mean()), float(np.median(d)), float(d.std(ddof=1)), lo, hi,
                         float(np.mean(d > 0)), float(np.nanmedian(r)), rlo, rhi))
    table = pd.DataFrame(rows, columns=["measure", "contrast", "level_a", "level_b", "mean", "median", "sd",
                                        "hdi_lo", "hdi_hi", "p_gt_0", "ratio_median", "ratio_lo", "ratio_hi"])
    levels_tab = pd.DataFrame(lev_rows, columns=["measure", by, "n_pos", "n_neg", "mean", "median", "hdi_lo",
                                                 "hdi_hi"])
    settings = dict(by=by, conditional=conditional, p_target=p_target, c_miss=c_miss, c_fa=c_fa,
                    normalize=normalize, max_draws=max_draws, n_draws=int(pred.n_draws))
    return PosteriorContrasts(table=table, levels=levels_tab, draws=pd.concat(draws_rows, ignore_index=True),
                              level=lev, settings=settings)
