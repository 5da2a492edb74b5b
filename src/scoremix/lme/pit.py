r"""Simulation-based scaled residuals for any response (DHARMa, Hartig 2022), shared by the
checks of :mod:`scoremix.lme` and :mod:`scoremix.glmm`.

With :math:`y^*_{1..S}` simulated from the fitted model the scaled residual of
observation :math:`i` is the randomised probability integral transform

.. math::

    r_i = \frac{\#\{s: y^*_{is} < y_i\} + U_i\,(\#\{s: y^*_{is} = y_i\} + 1)}{S + 1},
    \qquad U_i \sim U(0, 1),

which is exactly uniform (discrete responses included: the jitter :math:`U_i` spreads a
tie over its probability) when :math:`y_i` is a draw from the model.

**Exchangeable calibration.**  Observations sharing a random effect are correlated, so a
KS test that treats the :math:`r_i` as independent has the wrong size.  The observed
vector and the :math:`S` simulated vectors are exchangeable under the model (parameters
at their estimates), so every test statistic :math:`T` here is computed for each of the
:math:`S+1` vectors, each ranked against the other :math:`S`, and its p-value is the
rank of the observed one, :math:`p = \#\{k: T_k \ge T_0\}/(S+1)` — an exact Monte-Carlo
test given the parameters, whatever the correlation (Davison & Hinkley 1997, § 4.2).
Estimating the parameters from the same data makes it somewhat conservative.

Statistics: the KS distance of the :math:`r` from :math:`U(0,1)` (uniformity) and the
number of observations outside the range of the other vectors (outliers, two-sided).
:func:`by_tests`: per ``by`` column a Kruskal–Wallis test of the residuals' location
across its levels (a missing term) and a Fligner–Killeen test of their spread.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

__all__ = ["pooled_pit", "exchangeable_tests", "by_tests", "two_sided_sim_p"]


def pooled_pit(y: np.ndarray, sims: np.ndarray, rng: np.random.Generator,
               decimals: int = 10) -> np.ndarray:
    """Randomised PIT of every column of ``[y, sims]`` (``n × (S+1)``) against the other
    ``S`` columns of its row.  Values are rounded to ``decimals`` before comparison, so
    that a simulated proportion ``k/m`` ties with the same observed proportion."""
    pool = np.round(np.column_stack([np.asarray(y, float), np.asarray(sims, float)]), decimals)
    S = pool.shape[1] - 1
    lo = stats.rankdata(pool, axis=1, method="min") - 1.0      # others strictly below
    hi = stats.rankdata(pool, axis=1, method="max") - 1.0      # others at or below (self excluded)
    ties = hi - lo
    return (lo + rng.uniform(size=pool.shape) * (ties + 1)) / (S + 1)


def _ks_columns(R: np.ndarray) -> np.ndarray:
    n = R.shape[0]
    U = np.sort(R, axis=0)
    i = np.arange(1, n + 1)[:, None]
    return np.maximum((i / n - U).max(0), (U - (i - 1) / n).max(0))


def two_sided_sim_p(obs: float, sim: np.ndarray) -> float:
    """DHARMa's two-sided simulation p-value ``2 min(P(T* ≥ t), P(T* ≤ t))`` with the
    observed value counted among the simulations."""
    sim = np.asarray(sim, float)
    k = sim.size
    up = (1 + np.sum(sim >= obs)) / (k + 1)
    down = (1 + np.sum(sim <= obs)) / (k + 1)
    return float(min(1.0, 2 * min(up, down)))


def exchangeable_tests(y: np.ndarray, sims: np.ndarray, rng: np.random.Generator
                       ) -> tuple[np.ndarray, list[tuple[str, float, float]]]:
    """Scaled residuals of ``y`` and the calibrated uniformity and outlier tests (module
    docstring).  Returns ``(r, rows)`` with rows ``(test, statistic, p.value)``."""
    R = pooled_pit(y, sims, rng)
    S = R.shape[1] - 1
    D = _ks_columns(R)
    p_ks = float(np.sum(D >= D[0]) / (S + 1))
    rows = [("uniformity (KS, calibrated)", float(D[0]), p_ks)]
    # strictly outside the other S vectors' range: r < 1/(S+1) with no tie, or r > S/(S+1)
    pool = np.round(np.column_stack([np.asarray(y, float), np.asarray(sims, float)]), 10)
    lo = stats.rankdata(pool, axis=1, method="min") - 1.0
    hi = stats.rankdata(pool, axis=1, method="max") - 1.0
    out = ((hi == 0) | (lo == S)).sum(0)
    rows.append(("outliers (simulated)", float(out[0]) / R.shape[0], two_sided_sim_p(out[0], out[1:])))
    return R[:, 0], rows


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
