r"""Applied probability of error (APE) / Bayes error-rate curves with the PAV-optimal minimum
(Brümmer & du Preez 2006, *Application-independent evaluation of speaker detection*; Ramos &
González-Rodríguez 2008, ECE plots).

For log-likelihood-ratio scores :math:`ℓ` and prior log-odds :math:`η = \log\frac{π}{1−π}`, the
Bayes decision accepts when :math:`ℓ ≥ −η`, and its error rate is

.. math::

    P_e(η) = σ(η)\,P_\text{miss}(−η) + (1 − σ(η))\,P_\text{fa}(−η),

drawn against the error of the default decision :math:`\min(σ(η), 1−σ(η))`.  The *minimum*
curve replaces :math:`ℓ` by the PAV-calibrated LLRs: isotonic regression of the labels on the
scores (pool-adjacent-violators; :class:`sklearn.isotonic.IsotonicRegression`) gives posteriors
:math:`\hat p_i`, and :math:`ℓ^\text{PAV}_i = \operatorname{logit}\hat p_i − \log(N_1/N_0)`; its
Bayes error at every :math:`η` equals the minimum over thresholds of the unnormalised DCF
(:func:`scoremix.metrics.min_dcf` with :math:`p_\text{target} = σ(η)`), i.e. the discrimination
part; the gap between the two curves is the calibration loss.  The area under :math:`P_e`
over :math:`η` weighted as Brümmer shows is :math:`C_\text{llr}`'s integrand; here only the curves
are drawn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import expit

from scoremix.metrics import _prepare

__all__ = ["ape_curve", "pav_llrs", "plot_ape"]


def pav_llrs(scores: Any, labels: Any) -> np.ndarray:
    """PAV-calibrated LLRs of the scores (±inf where the isotonic posterior is 0 or 1)."""
    from sklearn.isotonic import IsotonicRegression

    s, y = _prepare(scores, labels)
    p = IsotonicRegression(increasing=True, out_of_bounds="clip").fit_transform(s, y.astype(float))
    n1 = float(y.sum())
    n0 = float(y.size - n1)
    with np.errstate(divide="ignore"):
        return np.log(p) - np.log1p(-p) - np.log(n1 / n0)


def _bayes_error(l: np.ndarray, y: np.ndarray, eta: np.ndarray) -> np.ndarray:
    pos, neg = np.sort(l[y == 1]), np.sort(l[y == 0])
    thr = -eta
    pmiss = np.searchsorted(pos, thr, side="left") / pos.size
    pfa = (neg.size - np.searchsorted(neg, thr, side="left")) / neg.size
    pi = expit(eta)
    return pi * pmiss + (1 - pi) * pfa


def ape_curve(llrs: Any, labels: Any, *, prior_log_odds: Any = None) -> pd.DataFrame:
    """Bayes error rates ``actual`` (the LLRs as given), ``minimum`` (PAV) and ``default`` at each
    prior log-odds (default −7..7 in steps of 0.05), with ``p_target = σ(η)``.

    >>> import numpy as np
    >>> c = ape_curve(np.array([-2.0, -1.0, 0.5, 1.0, 3.0]), np.array([0, 0, 1, 0, 1]), prior_log_odds=[0.0])
    >>> float(c["actual"].iloc[0]), float(c["minimum"].iloc[0]), float(c["default"].iloc[0])
    (0.16666666666666666, 0.16666666666666666, 0.5)
    """
    l, y = _prepare(llrs, labels, allow_posinf=True)
    eta = np.linspace(-7, 7, 281) if prior_log_odds is None else np.asarray(prior_log_odds, float)
    pi = expit(eta)
    return pd.DataFrame({"prior_log_odds": eta, "p_target": pi, "actual": _bayes_error(l, y, eta),
                         "minimum": _bayes_error(pav_llrs(l, y), y, eta), "default": np.minimum(pi, 1 - pi)})


def plot_ape(curves: Mapping[str, pd.DataFrame], ax: Any = None, *, title: str | None = None) -> Any:
    """Draw :func:`ape_curve` tables (one per system or per group): solid = actual, dashed = PAV
    minimum (same colour), dotted black = default; returns the axis."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    first = None
    for name, c in curves.items():
        (line,) = ax.plot(c["prior_log_odds"], c["actual"], lw=1.5, label=f"{name} (actual)")
        ax.plot(c["prior_log_odds"], c["minimum"], lw=1.2, ls="--", color=line.get_color(), label=f"{name} (PAV minimum)")
        first = c if first is None else first
    if first is not None:
        ax.plot(first["prior_log_odds"], first["default"], ":", color="black", lw=1, label="default (no detector)")
    ax.set_xlabel("prior log-odds  log(π/(1−π))")
    ax.set_ylabel("Bayes error rate")
    if title:
        ax.set_title(title)
    ax.legend(fontsize=7)
    return ax
