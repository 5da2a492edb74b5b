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
:math:`\mathrm{sd}(d^*)`.  Works for any fit the predictive layer accepts whose
parametric bootstrap is available (native LMM fits; transformation fits on the latent
scale where the EER is the score-scale EER).
"""

from __future__ import annotations

from itertools import combinations
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from scoremix.emm.errors import EmmError

__all__ = ["eer_contrast"]


def eer_contrast(fit: Any, factor: str, *, pairs: Sequence[tuple[str, str]] | None = None,
                 by: str | Sequence[str] | None = None, n_boot: int = 200,
                 seed: int | np.random.Generator | None = 0, level: float = 0.95,
                 label: str = "label", positive: Any = None, data: pd.DataFrame | None = None,
                 conditional: bool = False, progress: bool = False,
                 thresholds: str = "attainable") -> pd.DataFrame:
    """Differences of model EERs between levels of ``factor`` (``pairs``, default every
    pair in level order), within each ``by`` group.

    ``thresholds``: ``"attainable"`` (default) evaluates each model EER at the observed distinct
    scores, as ``sm.model_eer`` does; ``"latent"`` is the smooth crossing of the model curves
    (:mod:`scoremix.predictive.attainable`).

    Returns
    -------
    pandas.DataFrame
        ``by`` columns, ``contrast`` (``"a - b"``), ``eer_a``, ``eer_b``, ``estimate``,
        ``SE``, ``lower``, ``upper``, ``n_boot`` (finite replicates).
    """
    from scoremix.predictive.layer import predictive
    from scoremix.predictive.param_boot import parametric_eer_replicates
    if not 0 < level < 1:
        raise EmmError(f"level must be in (0, 1), got {level!r}")
    by_l = [] if by is None else ([by] if isinstance(by, str) else list(by))
    pred = predictive(fit, data=data, label=label, positive=positive, conditional=conditional)
    frame = pred.frame
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
    masks, rows = [], []
    for gkey, gm in groups:
        for a, b in pairs:
            ma, mb = gm & (fac == a), gm & (fac == b)
            if ma.sum() == 0 or mb.sum() == 0:
                continue
            rows.append((gkey, a, b, len(masks), len(masks) + 1))
            masks += [ma, mb]
    if not masks:
        raise EmmError("no cell has trials of both levels")
    point = np.array([float(pred.eer(m, thresholds=thresholds)[0]) for m in masks])
    reps = parametric_eer_replicates(fit, masks, n_boot, seed, label=label, positive=positive, data=data,
                                     conditional=conditional, progress=progress,
                                     thresholds=thresholds)
    z = stats.norm.ppf(0.5 + level / 2)
    out = []
    for gkey, a, b, ia, ib in rows:
        d = point[ia] - point[ib]
        ds = reps[ia] - reps[ib]
        ds = ds[np.isfinite(ds)]
        sd = float(ds.std(ddof=1)) if ds.size > 1 else np.nan
        centre = 2 * d - float(ds.mean()) if ds.size else np.nan
        row = {c: v for c, v in zip(by_l, gkey)}
        row.update(contrast=f"{a} - {b}", eer_a=point[ia], eer_b=point[ib], estimate=d, SE=sd,
                   lower=centre - z * sd, upper=centre + z * sd, n_boot=int(ds.size))
        out.append(row)
    return pd.DataFrame(out, columns=by_l + ["contrast", "eer_a", "eer_b", "estimate", "SE", "lower",
                                             "upper", "n_boot"])
