"""Kenward–Roger adjusted covariance of ``β̂`` and denominator df (pbkrtest's method).

Kenward & Roger (1997, *Biometrics* 53:983) write the marginal covariance linearly in the
variance parameters ``γ``:

.. math::

    \\Sigma = \\sum_r \\gamma_r G_r,\\qquad
    G_{(k,a,b)} = Z_{ka} Z_{kb}' + Z_{kb} Z_{ka}' \\;(a \\ne b),\\quad
    G_{(k,a,a)} = Z_{ka} Z_{ka}',\\quad G_{\\varepsilon} = W^{-1},

where ``Z_{ka}`` is the ``n × n_k`` indicator matrix of term ``k``'s levels times its
``a``-th column, ``γ`` are the variances and covariances of ``VarCorr`` and ``σ²`` (a
dispersion model has one residual ``G_d = diag(1{d(i)=d}/w_i)`` per level, with parameter
``σ_d²``).  With ``Φ = Var(β̂)`` (the REML fit's), ``P_r = −X'Σ^{-1}G_rΣ^{-1}X``,
``Q_{rs} = X'Σ^{-1}G_rΣ^{-1}G_sΣ^{-1}X`` and the expected information
``I_{rs} = ½ [tr(Σ^{-1}G_rΣ^{-1}G_s) − 2 tr(ΦQ_{rs}) + tr(ΦP_rΦP_s)]``, ``W = I^{-1}``
(pbkrtest stores ``2·(2I)^{-1}``), the adjusted covariance is

.. math::

    \\Phi_A = \\Phi + 2\\Phi\\Big[\\sum_{r,s} W_{rs}(Q_{rs} − P_r Φ P_s)\\Big]\\Phi

(the ``R_{rs}`` term of Kenward & Roger vanishes because ``Σ`` is linear in ``γ``: this is
why pbkrtest, and this module, parameterise by variances and covariances rather than by
``θ``).  For a hypothesis ``Lβ = 0`` of rank ``q``, with ``Θ = L'(LΦL')^{-1}L``,
``A_1 = Σ_{rs} W_{rs} tr(ΘΦP_rΦ) tr(ΘΦP_sΦ)``, ``A_2 = Σ_{rs} W_{rs} tr(ΘΦP_rΦΘΦP_sΦ)``,
``B = (A_1 + 6A_2)/(2q)``, ``g = ((q+1)A_1 − (q+4)A_2)/((q+2)A_2)``,
``c_1 = g/(3q+2(1−g))``, ``c_2 = (q−g)/(3q+2(1−g))``, ``c_3 = (q+2−g)/(3q+2(1−g))``,
``ρ = ((1 − A_2/q)/(1 − c_2B))² (1 + c_1B) / (q(1 − c_3B))``:

.. math::

    \\nu = 4 + \\frac{q+2}{q\\rho − 1},\\qquad
    \\lambda = \\frac{\\nu (1 − A_2/q)}{\\nu − 2},\\qquad
    F = \\lambda\\,\\frac{(L\\hat\\beta)'(L\\Phi_AL')^{-1}L\\hat\\beta}{q} \\sim F_{q,\\nu}.

The t test of one contrast uses ``sqrt(l'Φ_A l)`` and ``ν`` (pbkrtest's ``Lb_ddf``).

Only REML fits (as pbkrtest, which refits ML fits by REML first; here the caller is asked to
do so).  Computation is dense in ``n`` (``n × n`` matrices), as pbkrtest's.  One
difference: pbkrtest takes ``G_ε = I`` even for a model with prior weights; here
``G_ε = W^{-1}``, the residual covariance of the fitted model.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from scoremix.lme.covstruct import is_structured
from scoremix.lme.relcov import theta_to_T
from scoremix.lme.errors import DdfError
from scoremix.lme.result import LmerResult

__all__ = ["KRInfo", "kr_info", "kr_ddf_1d", "kr_ftest", "MAX_ROWS"]

#: largest number of rows for which the ``n × n`` computation is attempted
MAX_ROWS = 6000

_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@dataclass
class KRInfo:
    """Kenward–Roger ingredients of one fit.

    Attributes
    ----------
    vcov:
        ``Φ``: the unadjusted ``Var(β̂)``.
    vcov_adj:
        ``Φ_A``: the adjusted covariance.
    P:
        ``(k, p, p)``: the ``P_r``.
    W:
        ``(k, k)``: pbkrtest's ``W = 2 (2I)^{-1}`` (``I`` the expected information above).
    """

    vcov: np.ndarray
    vcov_adj: np.ndarray
    P: np.ndarray
    W: np.ndarray


def _g_factors(m: LmerResult) -> tuple[list[tuple[np.ndarray, np.ndarray] | np.ndarray], np.ndarray]:
    """The ``G_r`` in pbkrtest's order, each as ``(U, V)`` with ``G_r = U V'`` (random
    terms, ``n × n_k`` or ``n × 2n_k``) or as the diagonal vector (residual), and ``γ̂``."""
    spec = m.spec
    n = spec.n
    term_p = [t.p for t in spec.terms]
    T = theta_to_T(m.theta.to_numpy(), term_p)
    G: list = []
    gam = []
    for t, Tk in zip(spec.terms, T):
        S = m.sigma ** 2 * Tk @ Tk.T
        Zs = []
        for a in range(t.p):
            Z = np.zeros((n, t.n_levels))
            Z[np.arange(n), np.asarray(t.codes)] = np.asarray(t.X, float)[:, a]
            Zs.append(Z)
        for b in range(t.p):
            for a in range(b, t.p):
                if a == b:
                    G.append((Zs[a], Zs[a]))
                else:
                    G.append((np.hstack([Zs[a], Zs[b]]), np.hstack([Zs[b], Zs[a]])))
                gam.append(S[a, b])
    w = np.ones(n) if spec.weights is None else np.asarray(spec.weights, float)
    if m.sigma_by is not None and spec.dispersion_codes is not None:
        codes = np.asarray(spec.dispersion_codes)
        for d, s in enumerate(m.sigma_by.to_numpy()):
            G.append((codes == d) / w)
            gam.append(s ** 2)
    else:
        G.append(1.0 / w)
        gam.append(m.sigma ** 2)
    return G, np.asarray(gam)


def _g_times(Gr, M: np.ndarray) -> np.ndarray:
    """``G_r M`` without forming ``G_r``."""
    if isinstance(Gr, tuple):
        U, V = Gr
        return U @ (V.T @ M)
    return Gr[:, None] * M


#: relative singular-value cut of the generalised inverse: ``MASS::ginv``'s
#: ``sqrt(.Machine$double.eps)`` (numpy's default ``1e-15`` keeps round-off eigenvalues)
GINV_TOL = float(np.sqrt(np.finfo(float).eps))


def _w_from_information(IE2: np.ndarray) -> np.ndarray:
    """pbkrtest's ``W = 2 IE2^{-1}``: the inverse when ``min |eig(IE2)| > 1e-10``, else the
    Moore–Penrose inverse with ``MASS::ginv``'s cut (singular values below
    ``sqrt(eps) · s_max`` are dropped).

    At a singular fit (e.g. ``(Treatment || Animal)`` with a redundant intercept) ``IE2`` has
    an exact null direction that round-off leaves at ``~1e-15 · s_max``; keeping it (numpy's
    default ``rcond=1e-15`` does, depending on the last bits) puts ``~1e15`` into ``W`` and
    gives NaN standard errors and negative F values.
    """
    IE2 = (IE2 + IE2.T) / 2
    ev = np.linalg.eigvalsh(IE2)
    if np.min(np.abs(ev)) > 1e-10:
        W = 2 * np.linalg.inv(IE2)
    else:
        W = 2 * np.linalg.pinv(IE2, rcond=GINV_TOL, hermitian=False)
    return (W + W.T) / 2


def kr_info(m: LmerResult) -> KRInfo:
    """``Φ_A``, ``P_r`` and ``W`` of a REML fit (pbkrtest's ``vcovAdj``), cached per fit.

    Raises
    ------
    DdfError
        for ML fits, fits without their spec, fits with ``cs()``/``ar1()`` terms, or more
        than :data:`MAX_ROWS` rows.
    """
    if m in _CACHE:
        return _CACHE[m]
    if not m.REML:
        raise DdfError("Kenward-Roger's method is only available for REML model fits; "
                       "refit with REML=True")
    if m.spec is None:
        raise DdfError("Kenward-Roger needs the model spec; build the result with "
                       "LmerResult.from_dict(d, spec)")
    if is_structured(m.spec.terms):
        raise DdfError("Kenward-Roger (pbkrtest) needs a covariance linear in its parameters; "
                       "the cs()/ar1() structures of lme4 2.0 are not (rho enters through "
                       "D R D and rho^|i-j|): use ddf='Satterthwaite', or for cs(..., hom = TRUE) "
                       "on a factor's indicators the equivalent (1 | g) + (1 | g:f) model")
    n = m.spec.n
    if n > MAX_ROWS:
        raise DdfError(f"Kenward-Roger works with dense n x n matrices; the model has {n} rows "
                       f"(limit {MAX_ROWS}); use ddf='Satterthwaite'")
    G, gam = _g_factors(m)
    X = np.asarray(m.spec.X, float)
    Phi = m.vcov.to_numpy()
    Sigma = np.zeros((n, n))
    for g, Gr in zip(gam, G):
        if isinstance(Gr, tuple):
            Sigma += g * (Gr[0] @ Gr[1].T)
        else:
            Sigma[np.diag_indices(n)] += g * Gr
    C = np.linalg.cholesky(Sigma)
    Cinv = sla.solve_triangular(C, np.eye(n), lower=True)
    SigInv = Cinv.T @ Cinv
    TT = SigInv @ X
    k = len(G)
    HH = [_g_times(Gr, SigInv) for Gr in G]
    OO = [H @ X for H in HH]
    P = np.stack([-(O.T @ TT) for O in OO])
    P = (P + np.transpose(P, (0, 2, 1))) / 2
    Q = {}
    for r in range(k):
        for s in range(r, k):
            Q[r, s] = OO[r].T @ SigInv @ OO[s]
    K = np.empty((k, k))
    for r in range(k):
        for s in range(r, k):
            K[r, s] = K[s, r] = float(np.sum(HH[r].T * HH[s]))
    IE2 = np.empty((k, k))
    for r in range(k):
        PhiPr = Phi @ P[r]
        for s in range(r, k):
            IE2[r, s] = IE2[s, r] = (K[r, s] - 2 * np.sum(Phi * Q[r, s])
                                     + np.sum(PhiPr * (P[s] @ Phi)))
    W = _w_from_information(IE2)
    U = np.zeros_like(Phi)
    for r in range(k - 1):
        for s in range(r + 1, k):
            U += W[r, s] * (Q[r, s] - P[r] @ Phi @ P[s])
    U = U + U.T
    for r in range(k):
        U += W[r, r] * (Q[r, r] - P[r] @ Phi @ P[r])
    PhiA = Phi + 2 * Phi @ U @ Phi
    info = KRInfo(vcov=Phi, vcov_adj=PhiA, P=P, W=W)
    _CACHE[m] = info
    return info


def _div_zero(x: float, y: float, tol: float = 1e-14) -> float:
    return 1.0 if abs(x) < tol and abs(y) < tol else x / y


def _a1_a2(kr: KRInfo, L: np.ndarray) -> tuple[float, float]:
    Phi = kr.vcov
    Theta = L.T @ np.linalg.solve(L @ Phi @ L.T, L)
    TP = Theta @ Phi
    u = [TP @ Pr @ Phi for Pr in kr.P]
    A1 = A2 = 0.0
    k = len(u)
    for r in range(k):
        for s in range(r, k):
            e = 1.0 if r == s else 2.0
            A1 += e * kr.W[r, s] * np.trace(u[r]) * np.trace(u[s])
            A2 += e * kr.W[r, s] * np.sum(u[r] * u[s].T)
    return float(A1), float(A2)


def _ddf(A1: float, A2: float, q: int) -> tuple[float, float]:
    """``(ν, λ)`` from ``A_1, A_2`` (pbkrtest's ``.KR_adjust``)."""
    B = (A1 + 6 * A2) / (2 * q)
    g = ((q + 1) * A1 - (q + 4) * A2) / ((q + 2) * A2)
    den = 3 * q + 2 * (1 - g)
    c1, c2, c3 = g / den, (q - g) / den, (q + 2 - g) / den
    V0 = 1 + c1 * B
    V1 = 1 - c2 * B
    V2 = 1 - c3 * B
    V0 = 0.0 if abs(V0) < 1e-10 else V0
    rho = 1 / q * _div_zero(1 - A2 / q, V1) ** 2 * V0 / V2
    df2 = 4 + (q + 2) / (q * rho - 1)
    scale = 1.0 if abs(df2 - 2) < 1e-2 else df2 * (1 - A2 / q) / (df2 - 2)
    return float(df2), float(scale)


def kr_ddf_1d(kr: KRInfo, L: np.ndarray) -> float:
    """Kenward–Roger df of one contrast (pbkrtest's ``Lb_ddf``)."""
    L = np.atleast_2d(np.asarray(L, float))
    A1, A2 = _a1_a2(kr, L)
    return _ddf(A1, A2, L.shape[0])[0]


def kr_ftest(m: LmerResult, L: np.ndarray) -> dict[str, float]:
    """Kenward–Roger F test of ``Lβ = 0`` (pbkrtest's ``KRmodcomp(m, L)``).

    Returns
    -------
    dict
        ``ndf`` (rank of ``L``), ``ddf`` (``ν``), ``F.scaling`` (``λ``), ``FstatU``
        (the unscaled ``W/q``) and ``Fstat`` (``λ W / q``).
    """
    kr = kr_info(m)
    L = np.atleast_2d(np.asarray(L, float))
    q = int(np.linalg.matrix_rank(L))
    A1, A2 = _a1_a2(kr, L)
    ddf, scale = _ddf(A1, A2, q)
    b = L @ m.fixef.to_numpy()
    wald = float(b @ np.linalg.solve(L @ kr.vcov_adj @ L.T, b))
    return {"ndf": float(q), "ddf": ddf, "F.scaling": scale, "FstatU": wald / q,
            "Fstat": scale * wald / q}
