r"""Simulation-based scaled residuals for any response (DHARMa, Hartig 2022), shared by the
checks of :mod:`scoremix.lme` and :mod:`scoremix.glmm`.

With :math:`y^*_{1..S}` simulated from the fitted model the scaled residual of
observation :math:`i` is the randomised probability integral transform

.. math::

    r_i = \frac{\#\{s: y^*_{is} < y_i\} + U_i\,(\#\{s: y^*_{is} = y_i\} + 1)}{S + 1},
    \qquad U_i \sim U(0, 1),

which is exactly uniform (discrete responses included: the jitter :math:`U_i` spreads a
tie over its probability) when :math:`y_i` is a draw from the model.

When the simulations are drawn *given* a vector of random effects :math:`\tilde b` and
the :math:`y_i` are conditionally independent given it, the :math:`r_i` are independent
and a plain KS test applies.

Outliers: residuals outside the simulation envelope, :math:`r_i < 1/(S+1)` or
:math:`r_i > S/(S+1)`, whose count is :math:`\mathrm{Binomial}(n, 2/(S+1))` under the
model (exactly, because :math:`r_i` is exactly uniform).
:func:`by_tests`: per ``by`` column a Kruskal–Wallis test of the residuals' location
across its levels (a missing term) and a Fligner–Killeen test of their spread.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

__all__ = ["sim_pit", "uniformity_outlier_tests", "by_tests", "two_sided_sim_p"]


def sim_pit(y: np.ndarray, sims: np.ndarray, rng: np.random.Generator,
            decimals: int = 10) -> np.ndarray:
    """Randomised PIT of ``y`` (``n``) among the rows of ``sims`` (``n × S``), module
    docstring.  Values are rounded to ``decimals`` before comparison, so that a simulated
    proportion ``k/m`` ties with the same observed proportion."""
    yy = np.round(np.asarray(y, float), decimals)[:, None]
    ss = np.round(np.asarray(sims, float), decimals)
    below = (ss < yy).sum(1)
    ties = (ss == yy).sum(1)
    return (below + rng.uniform(size=yy.shape[0]) * (ties + 1)) / (ss.shape[1] + 1)


def two_sided_sim_p(obs: float, sim: np.ndarray) -> float:
    """DHARMa's two-sided simulation p-value ``2 min(P(T* ≥ t), P(T* ≤ t))`` with the
    observed value counted among the simulations."""
    sim = np.asarray(sim, float)
    k = sim.size
    up = (1 + np.sum(sim >= obs)) / (k + 1)
    down = (1 + np.sum(sim <= obs)) / (k + 1)
    return float(min(1.0, 2 * min(up, down)))


def uniformity_outlier_tests(r: np.ndarray, nsim: int) -> list[tuple[str, float, float]]:
    """KS test of independent scaled residuals ``r`` against :math:`U(0,1)` and the
    outlier test (module docstring): rows ``(test, statistic, p.value)``."""
    r = np.asarray(r, float)
    ks = stats.kstest(r, "uniform")
    out = int(np.sum((r < 1 / (nsim + 1)) | (r > nsim / (nsim + 1))))
    p_out = stats.binomtest(out, r.size, 2 / (nsim + 1)).pvalue
    return [("uniformity (KS)", float(ks.statistic), float(ks.pvalue)),
            ("outliers (binomial)", out / r.size, float(p_out))]


def by_tests(r: np.ndarray, data: pd.DataFrame, by) -> list[tuple[str, float, float]]:
    """Kruskal–Wallis (location) and Fligner–Killeen (spread) tests of ``r`` across the
    levels of every ``by`` column: names of ``data``'s columns or ``{name: values}`` (a
    Series aligned on ``data``'s index, or an array of its length)."""
    n = len(r)
    rows = []
    items = by.items() if isinstance(by, dict) else [(c, None) for c in by]
    for col, values in items:
        if values is None:
            if col not in data.columns:
                raise ValueError(f"by column {col!r} is not in the model frame "
                                 f"({list(data.columns)}); pass by={{{col!r}: values}}")
            vals = data[col].to_numpy()
        elif isinstance(values, pd.Series):
            vals = values.reindex(data.index).to_numpy()
        else:
            vals = np.asarray(values)
            if vals.shape[0] != n:
                raise ValueError(f"by[{col!r}] has {vals.shape[0]} values, the model frame {n} rows")
        groups = [r[vals == v] for v in pd.unique(vals)]
        groups = [g for g in groups if g.size > 1]
        if len(groups) < 2:
            continue
        kw = stats.kruskal(*groups)
        rows.append((f"location by {col} (Kruskal-Wallis)", float(kw.statistic), float(kw.pvalue)))
        fk = stats.fligner(*groups)
        rows.append((f"spread by {col} (Fligner-Killeen)", float(fk.statistic), float(fk.pvalue)))
    return rows
