r"""The Laplace-approximated likelihood of a transformation mixed model and its gradient.

Model (latent scale): :math:`h(y_i)=\eta_i+\sigma_i\varepsilon_i`,
:math:`\eta_i=x_i'\beta+\tilde z_i'u`, :math:`u\sim N(0,I_q)`, :math:`b=\Lambda_\theta u`
(lme4's relative Cholesky factors, here relative to a latent residual SD of 1 in the
reference dispersion level), :math:`\sigma_i=e^{\zeta_{d(i)}}`, :math:`\zeta_0=0`.  The
row's likelihood is the latent Gaussian probability of its cell,
:math:`P_i(u)=\Phi(b_i)-\Phi(a_i)` (:mod:`scoremix.transform.likelihood`).

Inner problem: the mode :math:`\hat u` of :math:`\ell(u)-\tfrac12u'u`,
:math:`\ell=\sum_i w_i\log P_i`, by Newton with step halving (the objective is concave:
the probit cell probability is log-concave in :math:`\eta`) with Hessian
:math:`H=I+\tilde Z'W\tilde Z`, :math:`W_i=-w_i\,\partial^2\log P_i/\partial\eta_i^2`.

Outer objective (minus the Laplace log-likelihood):

.. math::

    f(\phi)=-\ell(\hat u)+\tfrac12\hat u'\hat u+\tfrac12\log|H(\hat u)|,

and its exact gradient (TMB's): envelope theorem for the first two terms; for the
log-determinant :math:`\tfrac12\sum_i h_i\,dW_i` with :math:`h_i=\tilde z_i'H^{-1}\tilde z_i`
plus the adjoint term through :math:`\hat u`: with :math:`v=\tfrac12\sum_i h_i
(\partial W_i/\partial\eta_i)\tilde z_i` and :math:`a=H^{-1}v`, each row contributes
:math:`(\tilde z_i'a)\,\partial s_i/\partial\phi` with :math:`s_i=\partial\ell_i/\partial\eta_i`.
For :math:`\theta`, :math:`\tilde Z` itself moves: row contributions
:math:`c_{\eta,i}\,d\tilde z_i'\hat u + W_i\tilde z_i'H^{-1}d\tilde z_i + s_i\,d\tilde z_i'a`.
With no random effects the objective is the exact log-likelihood (``ordinal::clm``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.linalg as sla

from scoremix.lme.relcov import theta_to_T
from scoremix.transform.basis import CutpointBasis
from scoremix.transform.likelihood import add_third, row_derivs

__all__ = ["TransformProblem", "LaplaceState", "laplace"]


@dataclass
class TransformProblem:
    """Everything that does not change during the fit.

    ``lo``/``hi``: per row the edge index of the cell's lower/upper bound (``-1`` = open
    end).  ``X``: fixed effects without the intercept.  ``disp``: dispersion code per row
    (0 = reference).  ``cols``: ``(n, m)`` column of ``u`` for each random-effect entry of
    a row; ``term_X``: per term its raw ``(n, p_k)`` columns; ``term_slices``: the slice of
    ``cols`` belonging to each term.
    """

    basis: CutpointBasis
    lo: np.ndarray
    hi: np.ndarray
    X: np.ndarray
    disp: np.ndarray
    n_disp: int
    cols: np.ndarray
    term_X: list[np.ndarray]
    term_p: list[int]
    term_slices: list[slice]
    q: int
    theta_lower: np.ndarray
    weights: np.ndarray | None = None

    @property
    def n(self) -> int:
        return int(self.lo.size)

    @property
    def p(self) -> int:
        return int(self.X.shape[1])

    @property
    def n_theta(self) -> int:
        return int(self.theta_lower.size)

    def split(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``x = [transform params, β, ζ_1.., θ]``."""
        a = self.basis.n_par
        b = a + self.p
        c = b + self.n_disp - 1
        return x[:a], x[a:b], x[b:c], x[c:]

    def ztilde(self, theta: np.ndarray) -> np.ndarray:
        """``(n, m)`` values of :math:`\\tilde z_i = T_k' x_{ik}` per term block."""
        T = theta_to_T(theta, self.term_p)
        out = np.empty(self.cols.shape)
        for Xk, Tk, sl in zip(self.term_X, T, self.term_slices):
            out[:, sl] = Xk @ Tk
        return out


@dataclass
class LaplaceState:
    """Warm start of the inner Newton and the last evaluation's pieces."""

    u: np.ndarray
    n_inner: int = 0
    n_eval: int = 0
    extra: dict = field(default_factory=dict)


def _pair_sum(P: TransformProblem, Zt: np.ndarray, wts: np.ndarray) -> np.ndarray:
    """Dense ``Z̃' diag(wts) Z̃`` (q × q) by bincount over the row's column pairs."""
    q, m = P.q, P.cols.shape[1]
    acc = np.zeros(q * q)
    for j in range(m):
        for k in range(m):
            acc += np.bincount(P.cols[:, j] * q + P.cols[:, k], wts * Zt[:, j] * Zt[:, k],
                               minlength=q * q)
    return acc.reshape(q, q)


def _zt_u(P: TransformProblem, Zt: np.ndarray, u: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", Zt, u[P.cols]) if P.q else np.zeros(P.n)


def _zt_T(P: TransformProblem, Zt: np.ndarray, r: np.ndarray) -> np.ndarray:
    """``Z̃' r`` (q-vector)."""
    out = np.zeros(P.q)
    for j in range(P.cols.shape[1]):
        out += np.bincount(P.cols[:, j], Zt[:, j] * r, minlength=P.q)
    return out


def _bounds(P: TransformProblem, alpha: np.ndarray, eta: np.ndarray, sig: np.ndarray):
    lo = np.where(P.lo >= 0, alpha[np.maximum(P.lo, 0)], -np.inf)
    hi = np.where(P.hi >= 0, alpha[np.maximum(P.hi, 0)], np.inf)
    return (lo - eta) / sig, (hi - eta) / sig


def laplace(x: np.ndarray, P: TransformProblem, state: LaplaceState, grad: bool = True,
            tol: float = 1e-12, max_inner: int = 50):
    """``f(φ)`` (minus the Laplace log-likelihood) and, with ``grad``, its gradient."""
    state.n_eval += 1
    tpar, beta, zeta, theta = P.split(np.asarray(x, float))
    basis = P.basis
    c = basis.knot_values(tpar)
    alpha = basis.alpha(c)
    logsig = np.concatenate([[0.0], zeta])[P.disp]
    sig = np.exp(logsig)
    wt = np.ones(P.n) if P.weights is None else P.weights
    eta0 = P.X @ beta if P.p else np.zeros(P.n)
    q = P.q
    Zt = P.ztilde(theta) if q else np.zeros((P.n, 0))
    u = state.u.copy() if q else np.zeros(0)

    def evaluate(u_):
        eta = eta0 + _zt_u(P, Zt, u_)
        a, b = _bounds(P, alpha, eta, sig)
        return eta, a, b

    eta, a, b = evaluate(u)
    d = row_derivs(a, b)
    obj = float(np.sum(wt * d.ll) - 0.5 * u @ u)
    L = None
    if q:
        for it in range(max_inner):
            state.n_inner += 1
            s = (d.pa - d.pb) / sig
            W = -d.M / sig ** 2
            g = _zt_T(P, Zt, wt * s) - u
            H = _pair_sum(P, Zt, wt * W)
            H[np.diag_indices(q)] += 1.0
            L = sla.cho_factor(H, lower=True, check_finite=False)
            step = sla.cho_solve(L, g, check_finite=False)
            dec = float(g @ step)
            if dec < tol:            # Newton decrement: the objective is within dec/2
                break
            t, accepted = 1.0, False
            for _ in range(40):
                un = u + t * step
                eta_n, a_n, b_n = evaluate(un)
                d_n = row_derivs(a_n, b_n)
                obj_n = float(np.sum(wt * d_n.ll) - 0.5 * un @ un)
                if np.isfinite(obj_n) and obj_n >= obj - 1e-13 * abs(obj):
                    accepted = True
                    break
                t *= 0.5
            if not accepted:         # no ascent possible at this precision: at the mode
                break
            u, eta, a, b, d, obj = un, eta_n, a_n, b_n, d_n, obj_n
            if np.max(np.abs(t * step)) < 1e-10:
                break
        state.u = u.copy()
    if grad and q:
        add_third(d)
    ll = float(np.sum(wt * d.ll))
    f = -ll + 0.5 * float(u @ u)
    Hinv = None
    if q:
        W = -d.M / sig ** 2
        H = _pair_sum(P, Zt, wt * W)
        H[np.diag_indices(q)] += 1.0
        L = sla.cho_factor(H, lower=True, check_finite=False)
        f += float(np.sum(np.log(np.diag(L[0]))))
        Hinv = sla.cho_solve(L, np.eye(q), check_finite=False)
    state.extra = dict(u=u, ll=ll, Hinv=Hinv, alpha=alpha, c=c, Zt=Zt, sig=sig, eta=eta)
    if not grad:
        return f
    # ---------------------------------------------------------------- gradient
    s = (d.pa - d.pb) / sig                       # ∂ℓ_i/∂η
    l_lo = -d.pa / sig
    l_hi = d.pb / sig
    l_t = d.af * d.pa - d.bf * d.pb               # ∂ℓ_i/∂log σ
    c_eta = -wt * s
    c_lo = -wt * l_lo
    c_hi = -wt * l_hi
    c_t = -wt * l_t
    if q:
        m = P.cols.shape[1]
        R = np.zeros((P.n, m))                    # (H⁻¹ z̃_i) restricted to the row's columns
        for j in range(m):
            for k in range(m):
                R[:, k] += Zt[:, j] * Hinv[P.cols[:, j], P.cols[:, k]]
        h = np.einsum("ij,ij->i", R, Zt)
        sig3 = sig ** 3
        W = -d.M / sig ** 2
        W_eta = (d.Ma + d.Mb) / sig3
        W_lo = -d.Ma / sig3
        W_hi = -d.Mb / sig3
        W_t = (d.af * d.Ma + d.bf * d.Mb + 2 * d.M) / sig ** 2
        Gaa, Gab, Gbb = d.Gaa, d.Gab, d.Gbb
        s_eta = -W
        s_lo = -(Gaa + Gab) / sig ** 2
        s_hi = -(Gab + Gbb) / sig ** 2
        s_t = (-d.pa + d.pb) / sig + (d.af * (Gaa + Gab) + d.bf * (Gab + Gbb)) / sig
        v = _zt_T(P, Zt, 0.5 * wt * h * W_eta)
        adj = Hinv @ v
        ta = _zt_u(P, Zt, adj)
        hh = 0.5 * wt * h
        c_eta = c_eta + hh * W_eta + wt * ta * s_eta
        c_lo = c_lo + hh * W_lo + wt * ta * s_lo
        c_hi = c_hi + hh * W_hi + wt * ta * s_hi
        c_t = c_t + hh * W_t + wt * ta * s_t
    E = alpha.size
    g_alpha = (np.bincount(np.maximum(P.lo, 0), np.where(P.lo >= 0, c_lo, 0.0), minlength=E)
               + np.bincount(np.maximum(P.hi, 0), np.where(P.hi >= 0, c_hi, 0.0), minlength=E))
    g_t = basis.grad_par(basis.grad_c(g_alpha), tpar)
    g_b = P.X.T @ c_eta if P.p else np.zeros(0)
    g_z = np.bincount(P.disp, c_t, minlength=P.n_disp)[1:]
    g_th = np.zeros(P.n_theta)
    if q:
        pos = 0
        for Xk, pk, sl in zip(P.term_X, P.term_p, P.term_slices):
            cols = P.cols[:, sl]
            base = (c_eta[:, None] * u[cols] + (wt * W)[:, None] * R[:, sl]
                    + (wt * s)[:, None] * adj[cols])          # per block column
            for jc in range(pk):
                for ir in range(jc, pk):
                    # dT/dθ = E_{ir, jc}: d z̃_{block, jc} = X_k[:, ir]
                    g_th[pos] = float(Xk[:, ir] @ base[:, jc])
                    pos += 1
    return f, np.concatenate([g_t, g_b, g_z, g_th])
