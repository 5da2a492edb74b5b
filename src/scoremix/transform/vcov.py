r"""Observed information of the joint (penalised) likelihood at the optimum.

Conditional on :math:`\hat\theta` (as lme4's ``vcov`` and ``condVar``), the covariance of
the knot values :math:`c`, :math:`\beta` and :math:`\zeta` is the corresponding block of
:math:`\mathcal H^{-1}`, where :math:`\mathcal H` is minus the Hessian of
:math:`\ell(c,\beta,\zeta,u)-\tfrac12u'u` over all of them jointly (for a Gaussian model
this block equals the profiled-out :math:`(X'V^{-1}X)^{-1}`; without random effects it is
the exact observed information, as ``ordinal::clm``'s).  Each row's likelihood depends on
four quantities :math:`r=(\alpha_{lo},\alpha_{hi},\eta,\log\sigma)`, all linear in the
parameters, so :math:`\mathcal H=\sum_i J_i'N_iJ_i+\mathrm{diag}(0,\dots,0,I_q)` with
:math:`N_i=-\nabla^2_r\ell_i` from :math:`G(a,b)` and the chain rule through
:math:`a=(\alpha_{lo}-\eta)/\sigma`, :math:`b=(\alpha_{hi}-\eta)/\sigma`.
"""

from __future__ import annotations

import numpy as np

from scoremix.transform.laplace import TransformProblem
from scoremix.transform.likelihood import row_derivs

__all__ = ["joint_information"]


def _row_neg_hessian(a: np.ndarray, b: np.ndarray, sig: np.ndarray, wt: np.ndarray) -> np.ndarray:
    """``(n, 4, 4)`` ``N_i`` in the order ``(α_lo, α_hi, η, log σ)``."""
    d = row_derivs(a, b)
    n = a.size
    inv = 1.0 / sig
    Ja = np.zeros((n, 2, 4))
    Ja[:, 0, 0] = inv
    Ja[:, 0, 2] = -inv
    Ja[:, 0, 3] = -d.af
    Ja[:, 1, 1] = inv
    Ja[:, 1, 2] = -inv
    Ja[:, 1, 3] = -d.bf
    G = np.empty((n, 2, 2))
    G[:, 0, 0] = d.Gaa
    G[:, 0, 1] = G[:, 1, 0] = d.Gab
    G[:, 1, 1] = d.Gbb
    Hl = np.einsum("nri,nrs,nsj->nij", Ja, G, Ja)
    Ga, Gb = -d.pa, d.pb
    # second derivatives of a and b in (lo, hi, η, t)
    Hl[:, 0, 3] += Ga * (-inv)
    Hl[:, 3, 0] += Ga * (-inv)
    Hl[:, 1, 3] += Gb * (-inv)
    Hl[:, 3, 1] += Gb * (-inv)
    Hl[:, 2, 3] += (Ga + Gb) * inv
    Hl[:, 3, 2] += (Ga + Gb) * inv
    Hl[:, 3, 3] += Ga * d.af + Gb * d.bf
    return -wt[:, None, None] * Hl


def joint_information(P: TransformProblem, alpha: np.ndarray, eta: np.ndarray, sig: np.ndarray,
                      Zt: np.ndarray) -> np.ndarray:
    """:math:`\\mathcal H` over ``[c (J+1), β (p), ζ (D-1), u (q)]``."""
    basis = P.basis
    n = P.n
    wt = np.ones(n) if P.weights is None else P.weights
    lo = np.where(P.lo >= 0, alpha[np.maximum(P.lo, 0)], -np.inf)
    hi = np.where(P.hi >= 0, alpha[np.maximum(P.hi, 0)], np.inf)
    N = _row_neg_hessian((lo - eta) / sig, (hi - eta) / sig, sig, wt)
    J1, p, nz, q = basis.n_par, P.p, P.n_disp - 1, P.q
    off_b, off_z, off_u = J1, J1 + p, J1 + p + nz
    Ptot = off_u + q
    idx, coef, rq = [], [], []
    for which, r in ((P.lo, 0), (P.hi, 1)):
        ok = which >= 0
        e = np.maximum(which, 0)
        sg = basis.seg[e]
        w = basis.w[e]
        idx += [sg, sg + 1]
        coef += [np.where(ok, 1.0 - w, 0.0), np.where(ok, w, 0.0)]
        rq += [r, r]
    for j in range(p):
        idx.append(np.full(n, off_b + j))
        coef.append(P.X[:, j])
        rq.append(2)
    for j in range(P.cols.shape[1]):
        idx.append(off_u + P.cols[:, j])
        coef.append(Zt[:, j])
        rq.append(2)
    if nz:
        idx.append(off_z + np.maximum(P.disp - 1, 0))
        coef.append((P.disp > 0).astype(float))
        rq.append(3)
    acc = np.zeros(Ptot * Ptot)
    for e1 in range(len(idx)):
        for e2 in range(len(idx)):
            acc += np.bincount(idx[e1] * Ptot + idx[e2],
                               coef[e1] * coef[e2] * N[:, rq[e1], rq[e2]], minlength=Ptot * Ptot)
    Hj = acc.reshape(Ptot, Ptot)
    Hj[off_u:, off_u:] += np.eye(q)
    return Hj
