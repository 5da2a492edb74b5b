r"""Model-based error-rate contrasts: the difference of model EERs between levels of a
factor (e.g. female − male), with a parametric-bootstrap interval.

For cells :math:`a, b` (trials of the model frame with the factor at each level, within a
``by`` group) the point estimate is :math:`\hat d = e_a(\hat\vartheta) - e_b(\hat\vartheta)`,
each :math:`e` the model EER of the cell's trials from the one predictive layer
(:func:`scoremix.predictive.predictive`; ``conditional=False`` gives the population EER
with new levels of every grouping factor).  The fit is refitted to ``n_boot`` responses
simulated from it (:func:`scoremix.predictive.param_boot.parametric_eer_replicates`, one
refit shared by every cell, so the replicates :math:`d^*_r` keep the cells' correlation);
the interval is the bias-corrected normal interval
:math:`2\hat d - \bar d^{*} \mp z_{1-\alpha/2}\,\mathrm{sd}(d^{*})` and ``SE`` is
:math:`\mathrm{sd}(d^*)`.  A posterior fit gives the per-draw differences
:math:`d_r = e_a^{(r)} - e_b^{(r)}` (posterior median, SD, equal-tailed credible interval).
Works for any fit the predictive layer accepts whose
parametric bootstrap is available (native LMM fits; transformation fits on the latent
scale where the EER is the score-scale EER).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix.emm.errors import EmmError

__all__ = ["eer_contrast"]


def eer_contrast(fit: Any, factor: str, *, pairs: Sequence[tuple[str, str]] | None = None,
                 by: str | Sequence[str] | None = None, n_boot: int = 200,
                 seed: int | np.random.Generator | None = 0, level: float = 0.95,
                 label: str = "label", positive: Any = None, data: pd.DataFrame | None = None,
                 conditional: bool = False, progress: bool = False,
                 thresholds: str = "attainable", trials: pd.DataFrame | None = None,
                 max_draws: int | None = None) -> pd.DataFrame:
    """Differences of model EERs between levels of ``factor`` (``pairs``, default every
    pair in level order), within each ``by`` group.

    ``thresholds``: ``"attainable"`` (default) evaluates each model EER at the observed distinct
    scores, as ``sm.model_eer`` does; ``"latent"`` is the smooth crossing of the model curves
    (:mod:`scoremix.predictive.attainable`).  A posterior fit (``bayes_lmer``) gives the
    per-draw differences (``trials=``: its trial table when it carries no model frame).

    Returns
    -------
    pandas.DataFrame
        ``by`` columns, ``contrast`` (``"a - b"``), ``eer_a``, ``eer_b``, ``estimate``,
        ``SE``, ``lower``, ``upper``, ``n_rep`` (finite replicates or draws), ``interval``
        (``"parametric"`` or ``"posterior"``).
    """
    from scoremix.emm.dcf_contrast import contrast_cells, summarise_contrasts
    from scoremix.predictive.layer import is_bayes_fit, predictive
    from scoremix.predictive.param_boot import parametric_eer_replicates
    if not 0 < level < 1:
        raise EmmError(f"level must be in (0, 1), got {level!r}")
    by_l = [] if by is None else ([by] if isinstance(by, str) else list(by))
    if is_bayes_fit(fit):
        pred = predictive(fit, trials, data=data, label=label, positive=positive, conditional=conditional,
                          by=[factor] + by_l, max_draws=max_draws)
        rows, masks = contrast_cells(pred.frame, factor, by_l, pairs)
        reps = np.array([np.asarray(pred.eer(m, thresholds=thresholds), float) for m in masks])
        return summarise_contrasts(rows, np.nanmedian(reps, axis=1), reps, True, level, by_l, "eer")
    pred = predictive(fit, trials, data=data, label=label, positive=positive, conditional=conditional)
    rows, masks = contrast_cells(pred.frame, factor, by_l, pairs)
    point = np.array([float(pred.eer(m, thresholds=thresholds)[0]) for m in masks])
    reps = parametric_eer_replicates(fit, masks, n_boot, seed, label=label, positive=positive, data=data,
                                     conditional=conditional, progress=progress,
                                     thresholds=thresholds)
    return summarise_contrasts(rows, point, reps, False, level, by_l, "eer")
