r"""Exact and score intervals for error rates at a *fixed* threshold, and Doddington's rule of 30.

A rate at a threshold fixed in advance (not chosen on the same data) is a binomial proportion
:math:`\hat p = k/n` of :math:`k` errors among :math:`n` trials, when trials are independent.
For a level :math:`1-α` and :math:`z = Φ^{-1}(1-α/2)`:

``"wilson"`` (Wilson 1927; R ``prop.test(k, n, correct = FALSE)``)
    :math:`\dfrac{k + z^2/2}{n + z^2} \pm \dfrac{z}{n + z^2}\sqrt{\dfrac{k(n-k)}{n} + \dfrac{z^2}{4}}`.
``"clopper-pearson"`` (Clopper & Pearson 1934; R ``binom.test``)
    :math:`[B_{α/2}(k, n-k+1),\ B_{1-α/2}(k+1, n-k)]` with :math:`B_q(a, b)` the beta quantile,
    0 for :math:`k = 0` and 1 for :math:`k = n`; never below the nominal level (conservative).
``"jeffreys"`` (Brown, Cai & DasGupta 2001)
    :math:`[B_{α/2}(k+\tfrac12, n-k+\tfrac12),\ B_{1-α/2}(k+\tfrac12, n-k+\tfrac12)]`, 0 for
    :math:`k = 0` and 1 for :math:`k = n`: the equal-tailed posterior interval under the Jeffreys prior.

When each is right: all three assume independent trials.  Trials of one speaker are correlated
(the speaker effect), so for speaker-verification or spoofing tables with several trials per
speaker these intervals are too narrow, and the speaker-cluster bootstrap
(``n_boot=``/``speaker=`` of :mod:`scoremix.metrics`) is the honest one; the binomial intervals
are right for one trial per speaker (or per independent unit) and as a lower bound on the
uncertainty otherwise.  Wilson and Jeffreys have coverage close to nominal on average;
Clopper–Pearson guarantees at least the nominal level.

Rule of 30 (Doddington et al. 2000): to be 90 % confident that the true rate is within ±30 % of
the observed one, at least 30 errors are needed; DET plots (BOSARIS) mark the rates
:math:`30/N_\text{tar}` (miss) and :math:`30/N_\text{non}` (false alarm) below which a curve rests on
fewer than 30 errors (:func:`rule_of_30`, :func:`draw_rule_of_30`).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from scipy.stats import beta, norm

from scoremix.metrics import MetricInputError, _prepare
from scoremix.resampling import Estimate

__all__ = ["BINOMIAL_METHODS", "binomial_interval", "draw_rule_of_30", "rate_at", "rule_of_30"]

BinomialMethod = Literal["wilson", "clopper-pearson", "jeffreys"]
BINOMIAL_METHODS: tuple[str, ...] = ("wilson", "clopper-pearson", "jeffreys")


def binomial_interval(k: Any, n: Any, *, level: float = 0.95, method: BinomialMethod = "wilson"
                      ) -> tuple[Any, Any]:
    """``(lo, hi)`` of the proportion ``k/n`` (arrays broadcast) by ``method`` (module docstring).

    >>> lo, hi = binomial_interval(3, 50, method="clopper-pearson")
    >>> round(float(lo), 6), round(float(hi), 6)
    (0.012549, 0.165482)
    """
    if method not in BINOMIAL_METHODS:
        raise MetricInputError(f"method must be one of {BINOMIAL_METHODS}, got {method!r}")
    if not 0.0 < level < 1.0:
        raise MetricInputError(f"level must be in (0, 1), got {level}")
    k = np.asarray(k, float)
    n = np.asarray(n, float)
    if np.any(n <= 0) or np.any(k < 0) or np.any(k > n) or np.any(k != np.round(k)) or np.any(n != np.round(n)):
        raise MetricInputError("k and n must be whole numbers with 0 <= k <= n and n >= 1")
    a = 1.0 - level
    if method == "wilson":
        z = norm.ppf(1 - a / 2)
        centre = (k + z * z / 2) / (n + z * z)
        half = z / (n + z * z) * np.sqrt(k * (n - k) / n + z * z / 4)
        lo = np.where(k == 0, 0.0, np.maximum(centre - half, 0.0))
        hi = np.where(k == n, 1.0, np.minimum(centre + half, 1.0))
    elif method == "clopper-pearson":
        with np.errstate(invalid="ignore"):
            lo = np.where(k == 0, 0.0, beta.ppf(a / 2, np.maximum(k, 1e-300), n - k + 1))
            hi = np.where(k == n, 1.0, beta.ppf(1 - a / 2, k + 1, np.maximum(n - k, 1e-300)))
    else:
        lo = np.where(k == 0, 0.0, beta.ppf(a / 2, k + 0.5, n - k + 0.5))
        hi = np.where(k == n, 1.0, beta.ppf(1 - a / 2, k + 0.5, n - k + 0.5))
    return lo, hi


def rate_at(scores: Any, labels: Any, threshold: float, *, kind: Literal["fpr", "fnr"] = "fpr",
            method: BinomialMethod = "wilson", level: float = 0.95) -> Estimate:
    r"""False-positive (``"fpr"``: negatives with :math:`s ≥ τ`) or false-negative (``"fnr"``:
    positives with :math:`s < τ`) rate at a fixed threshold with a binomial interval.

    >>> e = rate_at([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1], 0.3, kind="fpr")
    >>> float(e), round(e.lo, 4), round(e.hi, 4)
    (0.5, 0.0945, 0.9055)
    """
    s, y = _prepare(scores, labels)
    if kind == "fpr":
        m = y == 0
        k, n = int(np.sum(s[m] >= threshold)), int(m.sum())
    elif kind == "fnr":
        m = y == 1
        k, n = int(np.sum(s[m] < threshold)), int(m.sum())
    else:
        raise MetricInputError(f"kind must be 'fpr' or 'fnr', got {kind!r}")
    lo, hi = binomial_interval(k, n, level=level, method=method)
    return Estimate(k / n, float(lo), float(hi), level, 0, n, method)


def rule_of_30(n_pos: int, n_neg: int, errors: int = 30) -> tuple[float, float]:
    """``(P_miss, P_fa)`` at which a DET curve rests on ``errors`` misses / false alarms:
    ``errors/n_pos`` and ``errors/n_neg`` (1.0 when there are fewer trials than ``errors``)."""
    return min(errors / n_pos, 1.0), min(errors / n_neg, 1.0)


def draw_rule_of_30(ax: Any, n_pos: int, n_neg: int, *, errors: int = 30, color: str = "0.5",
                    label: bool = True) -> None:
    """Dotted lines at :func:`rule_of_30` on a DET axis in probit coordinates (BOSARIS style):
    left of the vertical line fewer than ``errors`` false alarms, below the horizontal fewer misses."""
    from scoremix.metrics import probit

    pm, pf = rule_of_30(n_pos, n_neg, errors)
    kw = dict(ls=":", lw=1.0, color=color, zorder=1)
    ax.axvline(float(probit(pf)), **kw, label=f"rule of {errors} (fewer errors beyond)" if label else None)
    ax.axhline(float(probit(pm)), **kw)
