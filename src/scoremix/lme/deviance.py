"""The profiled REML/ML criterion of a linear mixed model and its gradient over ``θ``.

``d(θ) = -2ℓ(θ)`` with ``β`` and ``σ²`` profiled out (formulas in :mod:`scoremix.lme.factor`),
evaluated from the blocked factor of :func:`~scoremix.lme.factor.factorize`.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla

from scoremix.lme.crossprod import CrossProducts
from scoremix.lme.factor import factorize

__all__ = ["profiled_deviance", "has_analytic_gradient", "profiled_deviance_grad"]


def profiled_deviance(theta: np.ndarray, cp: CrossProducts, reml: bool,
                      rho: np.ndarray | None = None) -> float:
    """Profiled deviance ``-2ℓ_ML(θ)`` or REML criterion ``-2ℓ_REML(θ)`` (σ² and β profiled
    out), see :mod:`scoremix.lme.factor` for the formulas.

    Parameters
    ----------
    theta:
        relative covariance parameters in lme4's order.
    cp:
        cross-products from :func:`~scoremix.lme.crossprod.crossproducts`.
    reml:
        REML criterion (``True``) or ML deviance (``False``).
    rho:
        relative residual variances per dispersion level (``ρ_0 = 1``); ``None`` for a
        homoscedastic model.

    Returns
    -------
    float
        the criterion; ``inf`` where the system is numerically singular.
    """
    try:
        return factorize(theta, cp, rho, need_lr1=False).deviance(reml)
    except np.linalg.LinAlgError:
        return np.inf



def has_analytic_gradient(cp: CrossProducts) -> bool:
    """Whether :func:`profiled_deviance_grad` applies: every random term is scalar
    (``p_k = 1``) and the residual variance is homoscedastic."""
    return cp.n_disp == 1 and all(p == 1 for p in cp.term_p)


def profiled_deviance_grad(theta: np.ndarray, cp: CrossProducts, reml: bool
                           ) -> tuple[float, np.ndarray]:
    """Profiled criterion and its analytic gradient for models with scalar random terms.

    With ``Λ = ⊕_k θ_k I_{q_k}`` and ``θ_k > 0`` the criterion's derivatives are

    .. math::

        \\frac{\\partial d}{\\partial\\theta_k} = \\frac{2}{\\theta_k}\\left(q_k -
        \\operatorname{tr}_k(\\mathcal A^{-1}) - \\nu\\,\\frac{\\lVert\\hat u_k\\rVert^2}
        {r^2_\\theta}\\right),

    where ``tr_k`` is the trace of the term-``k`` diagonal block of the inverse of
    ``𝒜 = Λ'Z'WZΛ + I`` (ML, ``ν = n``) or of the augmented ``[[𝒜, Λ'Z'WX], [X'WZΛ,
    X'WX]]`` (REML, ``ν = n − p``), and ``û_k`` the conditional modes of term ``k``.  (The
    log-determinant part follows from ``∂𝒜/∂θ_k = θ_k^{-1}(E_k(𝒜 − J) + (𝒜 − J)E_k)``; the
    ``r²`` part from the envelope theorem and the normal equations
    ``Λ'Z'W r = û``.)  The traces use ``diag(L⁻ᵀL⁻¹)`` of the blocked factor: for term 1,
    ``Σ_j l_j^{-2} + tr(S^{-1} L_{r1} D^{-2} L_{r1}')``, for the other terms the diagonal of
    ``S^{-1}``, ``S`` the rest block's Schur complement.

    Raises
    ------
    ValueError
        when the model is not covered (see :func:`has_analytic_gradient`) or a ``θ_k ≤ 0``.
    """
    theta = np.atleast_1d(np.asarray(theta, dtype=float))
    if not has_analytic_gradient(cp):
        raise ValueError("the analytic gradient needs scalar random terms and no dispersion model")
    if np.any(theta <= 0):
        raise ValueError("the analytic gradient needs every θ_k > 0")
    f = factorize(theta, cp, need_lr1=False)
    crit = f.deviance(reml)
    n1, qr, p = cp.term_nlev[0], cp.q_rest, cp.p
    l = f.L11[:, 0, 0]
    t1 = theta[0]
    Ar1 = cp.Ar1[0]
    m = Ar1.shape[0]
    lam = np.ones(m)
    pos = 0
    for k in range(1, len(cp.term_p)):
        lam[pos: pos + cp.term_nlev[k]] = theta[k]
        pos += cp.term_nlev[k]
    mz = qr + p  # rows of the factor without the y row
    R = f.Lrr[:mz, :mz]
    # conditional modes: solve L' v = c (c = the y row of the factor)
    c_rest = f.Lrr[-1, :mz]
    x_rest = sla.solve_triangular(R, c_rest, trans="T", lower=True)
    c1 = Ar1[-1] * (t1 / l)
    Bt_x = (t1 / l) * (Ar1[:mz].T @ (lam[:mz] * x_rest))
    u1 = (c1 - Bt_x) / l
    r2 = f.pwrss
    # traces of the inverse
    md = mz if reml else qr
    w4 = t1 * t1 / l ** 4
    ps = cp.pair_structure()
    tr = np.empty(len(cp.term_p))
    tr[0] = float(np.sum(1.0 / l ** 2))
    if md:
        if ps is not None:
            # tr(S⁻¹K) over the structurally non-zero pairs of K (lower triangle, i ≥ j, i < md)
            Kv = ps.P @ w4
            sel = ps.rows < md
            ri, ci = ps.rows[sel], ps.cols[sel]
            Kv = Kv[sel] * lam[ri] * lam[ci]
            Kv[ri != ci] *= 2.0
            # Lrr[:md,:md]' is upper triangular; dpotri gives the upper triangle of S⁻¹
            Sinv, info = sla.lapack.dpotri(np.array(f.Lrr[:md, :md].T, order="F"), lower=0,
                                           overwrite_c=1)
            if info != 0:
                raise np.linalg.LinAlgError("dpotri failed")
            dS = np.diag(Sinv).copy()
            tr[0] += float(np.dot(Sinv[ci, ri], Kv))
        else:
            sparse = cp.ar1_sparse()
            if sparse is not None:
                A = sparse[0]
                K = (A.multiply(w4[None, :]).tocsr() @ A.T.tocsr()).toarray()[:md, :md]
            else:
                K = (Ar1[:md] * w4[None, :]) @ Ar1[:md].T
            K *= lam[:md, None] * lam[None, :md]
            Rm = np.ascontiguousarray(f.Lrr[:md, :md])
            Sinv, info = sla.lapack.dpotri(Rm, lower=1)
            if info != 0:
                raise np.linalg.LinAlgError("dpotri failed")
            Sinv = np.tril(Sinv)
            dS = np.diag(Sinv).copy()
            Sinv = Sinv + Sinv.T - np.diag(dS)
            tr[0] += float(np.sum(Sinv * K))
        pos = 0
        for k in range(1, len(cp.term_p)):
            tr[k] = float(np.sum(dS[pos: pos + cp.term_nlev[k]]))
            pos += cp.term_nlev[k]
    nu = (cp.n - p) if reml else cp.n
    usq = np.empty(len(cp.term_p))
    usq[0] = float(u1 @ u1)
    pos = 0
    for k in range(1, len(cp.term_p)):
        uk = x_rest[pos: pos + cp.term_nlev[k]]
        usq[k] = float(uk @ uk)
        pos += cp.term_nlev[k]
    q = np.asarray(cp.term_nlev, float)
    g = 2.0 / theta * (q - tr - nu * usq / r2)
    return crit, g
