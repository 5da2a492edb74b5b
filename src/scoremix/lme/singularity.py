r"""Singularity per random term (lme4's ``rePCA``) and convergence diagnostics.

For term :math:`k` with relative factor :math:`T_k` (:math:`\Sigma_k = \sigma^2 T_kT_k'`),
the singular values :math:`d_1 \ge \dots \ge d_{p_k}` of :math:`T_k` (``sdev``, relative to
:math:`\sigma`) give the proportions of variance :math:`d_j^2/\sum d^2` of its principal
components; the term is singular when :math:`d_{p_k} < 10^{-4}` (lme4's ``isSingular``
tolerance on the relative scale): its covariance has fewer dimensions than columns, so a
simpler term (``||``, dropping a slope) fits as well.

Convergence: at :math:`\hat\theta` the gradient :math:`g` and Hessian :math:`H` of the
profiled criterion over the interior :math:`\theta` (central differences), lme4's scaled
gradient :math:`\max|H^{-1}g|` (``check.conv.grad``: > 2e-3 warns) and the smallest
eigenvalue of :math:`H` (``check.conv.hess``: not positive warns).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from scoremix.lme.relcov import theta_to_T

__all__ = ["re_pca", "convergence"]


def re_pca(m, tol: float = 1e-4) -> pd.DataFrame:
    """One row per principal component of every random term: ``term``, ``component``,
    ``sdev``, ``prop_var``, ``cum_prop``, ``singular`` (of the term)."""
    rows = []
    terms = getattr(m, "terms_info", None)
    if terms is None:   # a GLMM result: its model frame's random terms
        terms = [dict(group=t.group, term_names=t.term_names) for t in m.spec.terms]
    T = theta_to_T(m.theta.to_numpy(), [len(t["term_names"]) for t in terms])
    for t, Tk in zip(terms, T):
        d = np.linalg.svd(Tk, compute_uv=False)
        pv = d ** 2 / np.sum(d ** 2) if np.sum(d ** 2) > 0 else np.full(d.size, np.nan)
        sing = bool(d.min() < tol)
        for j, (dj, pj, cj) in enumerate(zip(d, pv, np.cumsum(pv))):
            rows.append(dict(term=t["group"], columns=len(t["term_names"]), component=j + 1,
                             sdev=float(dj), prop_var=float(pj), cum_prop=float(cj), singular=sing))
    return pd.DataFrame(rows, columns=["term", "columns", "component", "sdev", "prop_var", "cum_prop",
                                       "singular"])


def singularity_advice(sing: pd.DataFrame) -> list[str]:
    """One line of advice per singular term of a :func:`re_pca` table (lmer, glmer and
    transformation fits share it)."""
    return [f"term ({term}) is singular: its covariance has rank < {len(g)}; "
            "drop a random slope or use || (uncorrelated) terms"
            for term, g in sing.groupby("term", sort=False) if g["singular"].iloc[0]]


def convergence(m, h: float = 1e-4) -> dict:
    """Gradient and Hessian of the profiled criterion at ``θ̂`` (see the module
    docstring): ``max_grad``, ``scaled_grad``, ``min_hess_eigen``, ``ok``, ``messages``."""
    from scoremix.lme.ddf import model_crossproducts
    from scoremix.lme.deviance import profiled_deviance
    from scoremix.lme.covstruct import ThetaMap, is_structured
    cp = model_crossproducts(m)
    th = m.theta.to_numpy().astype(float)
    lower = m.spec.theta_lower() if m.spec is not None else np.full(th.size, -np.inf)
    to_theta = lambda x: x  # noqa: E731
    if m.spec is not None and is_structured(m.spec.terms):
        # lme4 2.0's cs()/ar1(): the criterion over their parameters (SDs, ρ)
        tmap = ThetaMap.of(m.spec.terms)
        th, lower = tmap.natural_from_theta(th), tmap.natural_bounds(lower)[0]
        to_theta = tmap.theta_natural
    inner = np.flatnonzero(~((lower == 0) & (th < 1e-6)))
    rho = None
    if m.sigma_by is not None:
        rho = (m.sigma_by.to_numpy() / m.sigma) ** 2
    f = lambda x: profiled_deviance(to_theta(x), cp, m.REML, rho)  # noqa: E731
    k = inner.size
    g = np.zeros(k)
    H = np.zeros((k, k))
    f0 = f(th)
    for a, i in enumerate(inner):
        e = np.zeros_like(th); e[i] = h
        fp, fm = f(th + e), f(th - e)
        g[a] = (fp - fm) / (2 * h)
        H[a, a] = (fp - 2 * f0 + fm) / h ** 2
        for b in range(a):
            j = inner[b]
            e2 = np.zeros_like(th); e2[j] = h
            H[a, b] = H[b, a] = (f(th + e + e2) - f(th + e - e2) - f(th - e + e2) + f(th - e - e2)) / (4 * h * h)
    msgs = list(m.fit_info.get("messages") or [])
    if k:
        ev = np.linalg.eigvalsh(H)
        try:
            sg = float(np.max(np.abs(np.linalg.solve(H, g))))
        except np.linalg.LinAlgError:
            sg = np.inf
        min_ev = float(ev.min())
    else:
        sg, min_ev = 0.0, np.nan
    ok = (sg < 2e-3) and (k == 0 or min_ev > 0) and m.converged
    if sg >= 2e-3:
        msgs.append(f"scaled gradient max|H^-1 g| = {sg:.2g} > 2e-3 (lme4's check.conv.grad)")
    if k and min_ev <= 0:
        msgs.append(f"Hessian has a non-positive eigenvalue ({min_ev:.2g})")
    return dict(max_grad=float(np.max(np.abs(g))) if k else 0.0, scaled_grad=sg,
                min_hess_eigen=min_ev, ok=bool(ok), messages=msgs)
