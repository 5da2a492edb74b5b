r"""Influential levels of a grouping factor (leave-one-level-out refits, as the R package
influence.ME).

For level :math:`j` of grouping factor :math:`g`, :math:`\hat\beta_{(-j)}` is the estimate
without its rows, and Cook's distance is

.. math::

    D_j = \frac{(\hat\beta - \hat\beta_{(-j)})'\,\widehat{\mathrm{Var}}(\hat\beta)^{-1}
          (\hat\beta - \hat\beta_{(-j)})}{p},

flagged above the customary :math:`4/n_g` (:math:`n_g` levels).  A fixed effect that
cannot be estimated without the level (a factor level only that group has) gives
``NaN``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

__all__ = ["influential_levels"]


def influential_levels(m, group: str | None = None, max_levels: int = 60) -> pd.DataFrame:
    """Cook's distance of every level of ``group`` (default: the first grouping factor
    with at most ``max_levels`` levels): ``group``, ``level``, ``cooks_d``, ``influential``
    and the largest change of one fixed effect in SEs (``max_dfbetas``)."""
    from scoremix.lme.engine import fit_native
    from scoremix.lme.model_frame import build_model_spec
    spec = m.require_spec("influential_levels")
    groups = [t.group_factor for t in spec.terms if ":" not in t.group_factor]
    if group is None:
        cand = [g for g in dict.fromkeys(groups) if m.ngrps.get(g, 0) <= max_levels]
        if not cand:
            return pd.DataFrame(columns=["group", "level", "cooks_d", "max_dfbetas", "influential"])
        group = cand[0]
    if group not in spec.data.columns:
        raise ValueError(f"grouping column {group!r} is not in the model frame")
    data = spec.data
    beta = m.fixef.to_numpy()
    Vinv = np.linalg.pinv(m.vcov.to_numpy())
    se = m.se.to_numpy()
    levels = pd.unique(data[group])
    rows = []
    for lev in levels:
        sub = data[data[group] != lev]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sp = build_model_spec(m.formula, sub, dispersion=m.dispersion,
                                      weights=None if spec.weights is None else
                                      np.asarray(spec.weights)[(data[group] != lev).to_numpy()])
                nf = fit_native(sp, REML=m.REML, control=dict(warn=False))
            b = pd.Series(nf.estimates["beta"], index=sp.fixef_names).reindex(m.fixef.index).to_numpy()
        except Exception:  # noqa: BLE001 - a refit that cannot be formed has no distance
            b = np.full(beta.size, np.nan)
        d = beta - b
        D = float(d @ Vinv @ d / beta.size) if np.all(np.isfinite(d)) else np.nan
        rows.append(dict(group=group, level=str(lev), cooks_d=D,
                         max_dfbetas=float(np.nanmax(np.abs(d) / se)) if np.any(np.isfinite(d)) else np.nan))
    out = pd.DataFrame(rows)
    out["influential"] = out["cooks_d"] > 4 / len(levels)
    return out.sort_values("cooks_d", ascending=False, na_position="first").reset_index(drop=True)
