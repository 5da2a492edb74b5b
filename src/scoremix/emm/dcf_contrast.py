r"""Model-based detection-cost contrasts: the difference of a model DCF between two levels
of a factor (e.g. female − male under each condition), through the predictive layer.

For a cell :math:`c` (the trials of the model frame with the factor at one level, within a
``by`` group) the predictive layer (:func:`scoremix.predictive.predictive`) gives the model
miss and false-alarm rates of the cell's trials at a threshold :math:`\tau` (accept
:math:`s \ge \tau`),
:math:`P^c_\mathrm{miss}(\tau) = \sum_{i\in c^+} \Phi\{(h^-(\tau) - m_i)/s_i\}/n_c^+`,
:math:`P^c_\mathrm{fa}(\tau) = \sum_{j\in c^-} \Phi\{(m_j - h^-(\tau))/s_j\}/n_c^-`, and the
detection cost

.. math::

    C_c(\tau) = \frac{c_\mathrm{miss}\,\pi\,P^c_\mathrm{miss}(\tau) + c_\mathrm{fa}(1-\pi)\,P^c_\mathrm{fa}(\tau)}{Z},
    \qquad Z = \min\{c_\mathrm{miss}\pi,\ c_\mathrm{fa}(1-\pi)\}\ \text{(normalize)}\ \text{or}\ 1

(:func:`scoremix.metrics.dcf`).  Measures:

* ``"min_dcf"``: :math:`\min_\tau C_c(\tau)` over the cell's observed distinct scores and
  reject-all (``thresholds="attainable"``, the convention of :func:`scoremix.min_dcf`) or
  over every real latent threshold (``"latent"``);
* ``"act_dcf"``: :math:`C_c(\tau_0)` at a fixed score threshold, by default the Bayes
  threshold of calibrated log-likelihood-ratio scores
  :math:`\tau_0 = \log\{c_\mathrm{fa}(1-\pi)/(c_\mathrm{miss}\pi)\}`
  (:func:`scoremix.metrics.bayes_threshold`).

The contrast is :math:`\hat d = C_a(\hat\vartheta) - C_b(\hat\vartheta)`.  Intervals:

* point fits (``lmer``, transformation fits): parametric bootstrap, the fit refitted to
  ``n_boot`` responses simulated from it (:func:`scoremix.predictive.param_boot.parametric_refits`,
  one refit shared by every cell so the replicates keep the cells' correlation); the
  bias-corrected normal interval :math:`2\hat d - \bar d^* \mp z_{1-\alpha/2}\,\mathrm{sd}(d^*)`,
  ``SE`` = :math:`\mathrm{sd}(d^*)` (as :func:`scoremix.emm.eer_contrast`);
* posterior fits (``bayes_lmer``): the measure per posterior draw, :math:`d_r = C_a^{(r)} - C_b^{(r)}`;
  ``estimate`` the posterior median, ``SE`` the posterior SD, the equal-tailed credible interval.

Reference: NIST SRE / ASVspoof detection cost (Brümmer & du Preez 2006, *Computer Speech &
Language* 20, 230–275).
"""

from __future__ import annotations

import warnings
from itertools import combinations
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import optimize, stats

from scoremix.emm.errors import EmmError

__all__ = ["dcf_contrast", "cell_dcf", "contrast_cells", "summarise_contrasts", "DCF_MEASURES"]

DCF_MEASURES = ("min_dcf", "act_dcf")


def _cost_weights(p_target: float, c_miss: float, c_fa: float, normalize: bool) -> tuple[float, float]:
    if not 0 < p_target < 1:
        raise EmmError(f"p_target must be in (0, 1), got {p_target!r}")
    if not (c_miss > 0 and c_fa > 0):
        raise EmmError(f"c_miss and c_fa must be positive, got {c_miss!r}, {c_fa!r}")
    a, b = c_miss * p_target, c_fa * (1 - p_target)
    z = min(a, b) if normalize else 1.0
    return a / z, b / z


def _latent_min(pred: Any, mask: np.ndarray, a: float, b: float) -> np.ndarray:
    """Per draw the minimum of ``a P_miss(t) + b P_fa(t)`` over every real latent ``t``
    (a grid over the components' range, refined by a bounded scalar search)."""
    w = pred.counts(mask)
    on = w > 0
    lo = float(np.min(pred.mean[:, on] - 8 * pred.sd[:, on]))
    hi = float(np.max(pred.mean[:, on] + 8 * pred.sd[:, on]))
    grid = np.linspace(lo, hi, 2001)
    pm, pf = pred.rates_at(grid, mask, scale="latent")          # (D, T)
    cost = a * pm + b * pf
    out = np.empty(pred.n_draws)
    step = grid[1] - grid[0]
    for d in range(pred.n_draws):
        k = int(np.argmin(cost[d]))
        f = lambda t, d=d: float(np.dot([a, b], [x[d, 0] for x in pred.rates_at([t], mask, scale="latent")]))  # noqa: E731
        o = optimize.minimize_scalar(f, bounds=(grid[k] - step, grid[k] + step), method="bounded",
                                     options={"xatol": 1e-10})
        # the trivial systems (reject all / accept all) are the limits of the latent cost
        out[d] = min(float(o.fun), float(cost[d, k]), a, b)
    return out


def cell_dcf(pred: Any, mask: np.ndarray, *, measure: str = "min_dcf", p_target: float = 0.05,
             c_miss: float = 1.0, c_fa: float = 1.0, normalize: bool = False,
             threshold: float | None = None, thresholds: str = "attainable") -> np.ndarray:
    """The model DCF of the trials in ``mask`` (one value per draw of ``pred``); see the
    module docstring.  NaN when the cell lacks a class."""
    from scoremix.metrics import bayes_threshold
    from scoremix.predictive.attainable import attainable_scores, check_thresholds, score_rates

    if measure not in DCF_MEASURES:
        raise EmmError(f"measure must be one of {DCF_MEASURES}, got {measure!r}")
    check_thresholds(thresholds)
    a, b = _cost_weights(p_target, c_miss, c_fa, normalize)
    mask = np.asarray(mask, bool)
    w = pred.counts(mask)
    if not ((w > 0) & pred.positive).any() or not ((w > 0) & ~pred.positive).any():
        return np.full(pred.n_draws, np.nan)
    if measure == "act_dcf":
        tau = bayes_threshold(p_target, c_miss, c_fa) if threshold is None else float(threshold)
        pm, pf = pred.rates_at([tau], mask, scale="score")
        return a * pm[:, 0] + b * pf[:, 0]
    if thresholds == "latent":
        return _latent_min(pred, mask, a, b)
    tau = attainable_scores(np.asarray(pred.score, float), 2 ** 62)   # s7heldout: every evaluated score
    pm, pf = score_rates(pred, w[None, :], tau)                  # (1, D, T)
    cost = a * pm[0] + b * pf[0]
    return np.minimum(np.nanmin(cost, axis=1), a)               # + reject all (cost a)


def dcf_contrast(fit: Any, factor: str, *, pairs: Sequence[tuple[str, str]] | None = None,
                 by: str | Sequence[str] | None = None, measure: str = "min_dcf",
                 p_target: float = 0.05, c_miss: float = 1.0, c_fa: float = 1.0,
                 normalize: bool = False, threshold: float | None = None, n_boot: int = 200,
                 seed: int | np.random.Generator | None = 0, level: float = 0.95,
                 label: str = "label", positive: Any = None, data: pd.DataFrame | None = None,
                 trials: pd.DataFrame | None = None, conditional: bool = False,
                 thresholds: str = "attainable", max_draws: int | None = None,
                 progress: bool = False) -> pd.DataFrame:
    """Differences of a model DCF between levels of ``factor`` (``pairs``, default every
    pair in level order) within each ``by`` group; see the module docstring.

    Parameters
    ----------
    measure:
        ``"min_dcf"`` or ``"act_dcf"`` (at ``threshold``, default the Bayes threshold of
        LLR scores).
    p_target, c_miss, c_fa, normalize:
        the cost (:func:`scoremix.metrics.dcf`).
    n_boot, seed:
        parametric-bootstrap replicates of a point fit (ignored for a posterior fit).
    conditional:
        ``False`` (default): the population DCF (new levels of every grouping factor);
        ``True``: conditional on the fitted random effects.
    trials:
        posterior fits without a model frame: the trial table.

    Returns
    -------
    pandas.DataFrame
        ``by`` columns, ``contrast`` (``"a - b"``), ``dcf_a``, ``dcf_b``, ``estimate``,
        ``SE``, ``lower``, ``upper``, ``n_rep`` (finite replicates or draws) and
        ``interval`` (``"parametric"`` or ``"posterior"``).
    """
    from scoremix.predictive.layer import is_bayes_fit, predictive
    from scoremix.predictive.param_boot import ModelIntervalWarning, parametric_refits
    if not 0 < level < 1:
        raise EmmError(f"level must be in (0, 1), got {level!r}")
    _cost_weights(p_target, c_miss, c_fa, normalize)
    if measure not in DCF_MEASURES:
        raise EmmError(f"measure must be one of {DCF_MEASURES}, got {measure!r}")
    by_l = [] if by is None else ([by] if isinstance(by, str) else list(by))
    bayes = is_bayes_fit(fit)
    kw = dict(data=data, label=label, positive=positive, conditional=conditional)
    pred = predictive(fit, trials, by=[factor] + by_l, max_draws=max_draws, **kw) if bayes else \
        predictive(fit, trials, by=[factor] + by_l, **kw)
    rows, masks = contrast_cells(pred.frame, factor, by_l, pairs)
    opts = dict(measure=measure, p_target=p_target, c_miss=c_miss, c_fa=c_fa, normalize=normalize,
                threshold=threshold, thresholds=thresholds)
    vals = np.array([cell_dcf(pred, m, **opts) for m in masks])          # (cells, draws)
    if bayes:
        reps, point = vals, np.nanmedian(vals, axis=1)
    else:
        point = vals[:, 0]
        reps = np.full((len(masks), n_boot), np.nan)
        failed = 0
        for r, refit in enumerate(parametric_refits(fit, n_boot, seed, progress)):
            try:
                pr = predictive(refit, by=[factor] + by_l, **kw)
            except (ValueError, ArithmeticError):
                failed += 1
                continue
            for j, m in enumerate(masks):
                reps[j, r] = float(cell_dcf(pr, m, **opts)[0])
        if failed:
            warnings.warn(f"{failed} of {n_boot} parametric-bootstrap refits gave no predictive distribution "
                          "and were left out of the DCF-contrast interval", ModelIntervalWarning, stacklevel=2)
    return summarise_contrasts(rows, point, reps, bayes, level, by_l, "dcf")


def contrast_cells(frame: pd.DataFrame, factor: str, by_l: list[str],
                   pairs: Sequence[tuple[str, str]] | None) -> tuple[list[tuple], list[np.ndarray]]:
    """The cells of the contrasts: ``rows`` ``(by key, a, b, index of a, index of b)`` and
    the boolean ``masks`` of the trials of every cell over ``frame``'s rows."""
    for c in [factor] + by_l:
        if c not in frame.columns:
            raise EmmError(f"column {c!r} is not in the predictive frame (columns: {list(frame.columns)}); "
                           "pass data= with it")
    fac = frame[factor].astype(str).to_numpy()
    levels = sorted(pd.unique(fac).tolist())
    if pairs is None:
        pairs = list(combinations(levels, 2))
    for a, b in pairs:
        for v in (a, b):
            if v not in levels:
                raise EmmError(f"level {v!r} of {factor!r} not among {levels}")
    groups = [((), np.ones(len(frame), bool))]
    if by_l:
        keys = frame[by_l].astype(str).agg("\x1f".join, axis=1).to_numpy()
        groups = [(tuple(k.split("\x1f")), keys == k) for k in sorted(pd.unique(keys))]
    masks: list[np.ndarray] = []
    rows: list[tuple] = []
    for gkey, gm in groups:
        for a, b in pairs:
            ma, mb = gm & (fac == a), gm & (fac == b)
            if ma.sum() == 0 or mb.sum() == 0:
                continue
            rows.append((gkey, a, b, len(masks), len(masks) + 1))
            masks += [ma, mb]
    if not masks:
        raise EmmError("no cell has trials of both levels")
    return rows, masks


def summarise_contrasts(rows: list[tuple], point: np.ndarray, reps: np.ndarray, bayes: bool, level: float,
                        by_l: list[str], name: str) -> pd.DataFrame:
    """One row per contrast: ``<name>_a``, ``<name>_b``, ``estimate``, ``SE``, ``lower``,
    ``upper``, ``n_rep``, ``interval`` (see the module docstring for the two intervals)."""
    z = stats.norm.ppf(0.5 + level / 2)
    out = []
    for gkey, a, b, ia, ib in rows:
        ds = reps[ia] - reps[ib]
        ds = ds[np.isfinite(ds)]
        sd = float(ds.std(ddof=1)) if ds.size > 1 else np.nan
        row = {c: v for c, v in zip(by_l, gkey)}
        row.update({"contrast": f"{a} - {b}", f"{name}_a": point[ia], f"{name}_b": point[ib]})
        if bayes:
            est = float(np.median(ds)) if ds.size else np.nan
            lo, hi = (np.quantile(ds, [0.5 - level / 2, 0.5 + level / 2]) if ds.size else (np.nan, np.nan))
            row.update(estimate=est, SE=sd, lower=float(lo), upper=float(hi), n_rep=int(ds.size),
                       interval="posterior")
        else:
            d = point[ia] - point[ib]
            centre = 2 * d - float(ds.mean()) if ds.size else np.nan
            row.update(estimate=d, SE=sd, lower=centre - z * sd, upper=centre + z * sd, n_rep=int(ds.size),
                       interval="parametric")
        out.append(row)
    return pd.DataFrame(out, columns=by_l + ["contrast", f"{name}_a", f"{name}_b", "estimate", "SE", "lower",
                                             "upper", "n_rep", "interval"])
