"""Nakagawa–Schielzeth R² for linear mixed models.

With ``σ²_f = Var(X β̂)`` (sample variance over the fitted rows, ``n - 1`` denominator as in
R's ``var``), the random-effect variance of term ``k`` taken as the mean of
``diag(Z_k Σ_k Z_k')`` over the rows (Johnson 2014, *Methods Ecol. Evol.* 5: 944; equal to
``σ²_k`` for a random intercept), ``σ²_r = Σ_k mean_i x_{ki}' Σ_k x_{ki}``, and the residual
variance ``σ²_ε`` (for a class-specific residual variance the row average
``mean_i σ² ρ_{d(i)}``):

.. math::

    R^2_{marginal} = \\frac{\\sigma^2_f}{\\sigma^2_f + \\sigma^2_r + \\sigma^2_\\varepsilon},\\qquad
    R^2_{conditional} = \\frac{\\sigma^2_f + \\sigma^2_r}{\\sigma^2_f + \\sigma^2_r + \\sigma^2_\\varepsilon}.

This is what ``performance::r2_nakagawa`` reports for linear mixed models.
"""

from __future__ import annotations

import numpy as np
from scoremix.lme.result import LmerResult, register_inference

__all__ = ["r2_nakagawa", "variance_components"]


def variance_components(m) -> dict[str, float]:
    """``var_fixed``, ``var_random`` and ``var_residual`` used by :func:`r2_nakagawa`."""
    spec = m.require_spec("r2")
    eta = spec.X @ m.fixef.to_numpy()
    var_f = float(np.var(eta, ddof=1)) if eta.size > 1 else 0.0
    var_r = 0.0
    for t, S in zip(spec.terms, m.cov_re()):
        Xk = np.asarray(t.X, float)
        var_r += float(np.mean(np.einsum("ia,ab,ib->i", Xk, S, Xk)))
    if m.sigma_by is not None and spec.dispersion_codes is not None:
        var_e = float(np.mean(m.sigma_by.to_numpy()[np.asarray(spec.dispersion_codes)] ** 2))
    else:
        var_e = m.sigma ** 2
    return dict(var_fixed=var_f, var_random=var_r, var_residual=var_e)


def r2_nakagawa(m: LmerResult) -> dict[str, float]:
    """Marginal and conditional R² of a fitted :class:`~scoremix.lme.result.LmerResult`.

    Returns
    -------
    dict
        ``{"marginal": …, "conditional": …}``.
    """
    v = variance_components(m)
    tot = v["var_fixed"] + v["var_random"] + v["var_residual"]
    return dict(marginal=v["var_fixed"] / tot, conditional=(v["var_fixed"] + v["var_random"]) / tot)


register_inference("r2", r2_nakagawa)
