r"""Simulation-based (DHARMa-style) scaled residuals of a linear mixed model and their tests.

With :math:`y^*_{1..S}` simulated from the fitted model (new random effects each time,
:mod:`scoremix.lme.simulation`) the scaled residual of observation :math:`i` is the
randomised probability integral transform

.. math::

    r_i = \frac{\#\{s: \tilde y^*_{is} < \tilde y_i\} + U_i\,(\#\{s: \tilde y^*_{is} = \tilde y_i\} + 1)}{S + 1},
    \qquad U_i \sim U(0, 1),

which is exactly uniform when :math:`y` is a draw from the model.  Observations sharing a
random effect are correlated, so (as DHARMa's ``rotation = "estimated"``, Hartig 2022)
responses and simulations are first rotated, :math:`\tilde y = L^{-1}(y - X\hat\beta)`
with :math:`LL' = V = \sum_k Z_k\hat\Sigma_k Z_k' + \mathrm{diag}(\hat\sigma^2_{d(i)}/w_i)`,
which makes the residuals of a correct model independent (dense in ``n``; without
rotation above :data:`MAX_ROTATE` rows).

For this Gaussian model the simulated distribution of a rotated residual is
:math:`N(0,1)`, and with :math:`\hat\beta` and :math:`\hat\sigma` fitted to the same data
the rotated residual divided by :math:`\sqrt{1-h_{ii}}` (:math:`h` the leverages of
:math:`L^{-1}X`) and externally studentised is :math:`t_{n-p-1}`: its CDF is used as the
scaled residual (the exact limit of the simulation PIT).

Tests: uniformity (Kolmogorov–Smirnov against :math:`U(0,1)`; with rotation its p-value is
calibrated by simulating the KS statistic of :math:`(I-H)z`, :math:`z \sim N(0, I)`,
rescaled to the observed sum of squares — a Lilliefors correction for the fitted
:math:`\beta` and :math:`\sigma`); dispersion (DHARMa's
simulation test: :math:`\sum_i \tilde y_i^2` against its simulated distribution, two-sided);
outliers (residuals outside the simulation envelope, binomial test against
:math:`2/(S+1)`); and per column of ``by``: a Kruskal–Wallis test of the residuals'
location across its levels (a missing term) and a Fligner–Killeen test of their spread
(a misspecified variance).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import linalg, stats

__all__ = ["ScaledResiduals", "scaled_residuals", "MAX_ROTATE"]

MAX_ROTATE = 6000


@dataclass
class ScaledResiduals:
    """Scaled residuals ``r`` (index of the model frame) and their tests (a data frame:
    ``test``, ``statistic``, ``p.value``)."""

    residuals: pd.Series
    fitted: pd.Series
    tests: pd.DataFrame
    nsim: int
    rotated: bool
    notes: list[str] = field(default_factory=list)


def _marginal_cov(m) -> np.ndarray:
    spec = m.spec
    n = spec.n
    V = np.zeros((n, n))
    for t, S in zip(spec.terms, m.cov_re()):
        codes = np.asarray(t.codes)
        Xk = np.asarray(t.X, float)
        same = codes[:, None] == codes[None, :]
        V += same * (Xk @ S @ Xk.T)
    w = np.ones(n) if spec.weights is None else np.asarray(spec.weights, float)
    s2 = np.full(n, m.sigma ** 2)
    if m.sigma_by is not None and spec.dispersion_codes is not None:
        s2 = m.sigma_by.to_numpy()[np.asarray(spec.dispersion_codes)] ** 2
    V[np.diag_indices(n)] += s2 / w
    return V


def scaled_residuals(m, nsim: int = 250, *, seed: int | np.random.Generator | None = 0,
                     rotate: bool | None = None, by=()) -> ScaledResiduals:
    """Scaled residuals of ``m`` and their tests (see the module docstring).

    Parameters
    ----------
    nsim:
        simulations :math:`S`.
    rotate:
        decorrelate with the model's marginal covariance (default: when ``n`` ≤
        :data:`MAX_ROTATE`).
    by:
        columns of the model frame whose levels are compared (missing term, variance),
        or ``{name: values}`` (a Series aligned on the data's index, or an array of the
        model frame's length) for columns the model does not use.
    """
    spec = m.require_spec("scaled_residuals")
    rng = np.random.default_rng(seed)
    n = spec.n
    rotate = (n <= MAX_ROTATE) if rotate is None else bool(rotate)
    sims = m.simulate(nsim, seed=rng).to_numpy()
    y = np.asarray(spec.y, float) + (0 if getattr(spec, "offset", None) is None else spec.offset)
    mu = spec.X @ m.fixef.to_numpy() + (0 if getattr(spec, "offset", None) is None else spec.offset)
    notes = []
    if rotate:
        L = linalg.cholesky(_marginal_cov(m), lower=True)
        yt = linalg.solve_triangular(L, y - mu, lower=True)
        st = linalg.solve_triangular(L, sims - mu[:, None], lower=True)
        # the observed rotated residuals have covariance I - H (β̂ fitted to these data):
        # standardise by sqrt(1 - h_ii) so that they are comparable with the simulations
        Xt = linalg.solve_triangular(L, np.asarray(spec.X, float), lower=True)
        Q, _ = np.linalg.qr(Xt)
        h = np.sum(Q ** 2, axis=1)
        ss_obs = float(yt @ yt)
        yt = yt / np.sqrt(np.clip(1 - h, 1e-12, None))
    else:
        yt, st = y - mu, sims - mu[:, None]
        if spec.terms:
            notes.append("residuals not rotated: observations sharing a random effect are correlated")
    below = (st < yt[:, None]).sum(1)
    ties = (st == yt[:, None]).sum(1)
    if rotate:
        # Gaussian model: the simulated distribution of a rotated residual is N(0, 1)
        # exactly; with β̂ and σ̂ fitted to the same data the externally studentised
        # residual is t with n - p - 1 df, whose CDF gives the (exact) PIT
        nu = n - spec.X.shape[1]
        t_ext = yt * np.sqrt((nu - 1) / np.clip(nu - yt ** 2, 1e-12, None))
        r = stats.t.cdf(t_ext, nu - 1)
    else:
        r = (below + rng.uniform(size=n) * (ties + 1)) / (nsim + 1)
    rows = []
    ks = stats.kstest(r, "uniform")
    if rotate:
        # Lilliefors-type calibration: β̂ and σ̂ are fitted to the same data, which makes
        # the plain KS p-value conservative; its null distribution is simulated from
        # e = (I - H) z rescaled to the observed sum of squares (θ held at θ̂)
        nu = n - spec.X.shape[1]
        Z = rng.standard_normal((n, nsim))
        E = Z - Q @ (Q.T @ Z)
        E *= np.sqrt(ss_obs / np.sum(E ** 2, axis=0))[None, :]
        E /= np.sqrt(np.clip(1 - h, 1e-12, None))[:, None]
        T = E * np.sqrt((nu - 1) / np.clip(nu - E ** 2, 1e-12, None))
        U = np.sort(stats.t.cdf(T, nu - 1), axis=0)
        i = np.arange(1, n + 1)[:, None]
        D = np.maximum((i / n - U).max(0), (U - (i - 1) / n).max(0))
        p_ks = (1 + np.sum(D >= ks.statistic)) / (nsim + 1)
        rows.append(("uniformity (KS, calibrated)", ks.statistic, float(p_ks)))
    else:
        rows.append(("uniformity (KS)", ks.statistic, ks.pvalue))
    obs = float(np.sum(yt ** 2))
    simstat = np.sum(st ** 2, axis=0)
    p_disp = min(1.0, 2 * min(np.mean(simstat >= obs), np.mean(simstat <= obs)) + 1 / (nsim + 1))
    rows.append(("dispersion (simulated)", obs / float(np.mean(simstat)), p_disp))
    out_n = int(np.sum((below == 0) | (below + ties == nsim)))
    p_out = stats.binomtest(out_n, n, 2 / (nsim + 1)).pvalue
    rows.append(("outliers (binomial)", out_n / n, p_out))
    res = pd.Series(r, index=spec.data.index, name="scaled_residual")
    from scoremix.lme.pit import by_tests
    rows += by_tests(r, spec.data, by)
    tests = pd.DataFrame(rows, columns=["test", "statistic", "p.value"])
    return ScaledResiduals(res, pd.Series(mu, index=spec.data.index, name="fitted"), tests, nsim,
                           rotate, notes)
