"""Conditional estimates at a given ``θ``: ``β̂(θ)``, ``û(θ)``, ``b̂ = Λ_θ û``, ``σ̂``,
``Var(β̂)`` and the conditional covariances of the random effects.

With a flat prior on ``β``, ``(u, β) | θ, σ, y ~ N(v, σ² (L L')^{-1})`` where ``L`` is the
factor of the augmented system (:mod:`scoremix.lme.factor`) without the ``y`` row and ``v``
solves ``L' v = (c_u, c_β)``.  ``σ̂² = r_θ²/(n − p)`` (REML) or ``r_θ²/n`` (ML) and
``Var(β̂) = σ̂² (R_X R_X')^{-1}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import scipy.linalg as sla

from scoremix.lme.crossprod import CrossProducts
from scoremix.lme.factor import Factorization, factorize, inverse_upper
from scoremix.lme.relcov import lambda_rest, u_to_b

__all__ = ["ConditionalEstimates", "conditional_estimates", "conditional_variances",
           "estimates_at", "condvar_at"]


@dataclass
class ConditionalEstimates:
    """Conditional estimates of ``(β, b)`` given ``θ`` (and ``ρ``), and their distribution.

    With a flat prior on ``β``, ``(u, β) | θ, σ, y ~ N(v, σ² (L L')^{-1})`` where ``L`` is
    the factor of the augmented system without the ``y`` row and ``v`` solves
    ``L' v = (c_u, c_β)``; ``b = Λ_θ u``.

    Attributes
    ----------
    beta:
        ``(p,)`` conditional estimate of ``β`` (the GLS estimate given θ).
    u:
        ``(q,)`` spherical random effects (level-major within term, terms in order).
    b:
        list of ``(n_k, p_k)`` arrays: random effects per term.
    pwrss, ldL2, ldRX2:
        as in :class:`Factorization`.
    factor:
        the :class:`Factorization`.
    """

    beta: np.ndarray
    u: np.ndarray
    b: list[np.ndarray]
    pwrss: float
    ldL2: float
    ldRX2: float
    factor: Factorization

    def _solve_upper(self, z: np.ndarray) -> np.ndarray:
        """Solve ``L' x = z`` for ``(q + p, k)`` right-hand sides."""
        f = self.factor
        q1 = f.L11.shape[0] * f.L11.shape[1]
        Lrrz = f.Lrr[:-1, :-1]
        Lr1z = f.Lr1[:-1]
        x_rest = sla.solve_triangular(Lrrz, z[q1:], trans="T", lower=True)
        rhs = z[:q1] - Lr1z.T @ x_rest
        n1, p1 = f.L11.shape[0], f.L11.shape[1]
        x1 = np.einsum("lba,lbk->lak", f.L11inv, rhs.reshape(n1, p1, -1)).reshape(q1, -1)
        return np.vstack([x1, x_rest])

    def sample(self, sigma: float, size: int, rng: np.random.Generator | int | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Draw ``(β, u)`` from their conditional distribution given ``θ`` and ``σ``.

        Returns
        -------
        beta:
            ``(size, p)``.
        u:
            ``(size, q)`` spherical random effects; ``b = Λ_θ u`` (see :meth:`u_to_b`).
        """
        rng = np.random.default_rng(rng)
        f = self.factor
        q = f.L11.shape[0] * f.L11.shape[1] + f.q_rest
        z = rng.standard_normal((q + f.p, size))
        x = self._solve_upper(z) * sigma
        draws = x + np.concatenate([self.u, self.beta])[:, None]
        return draws[q:].T.copy(), draws[:q].T.copy()

    def u_to_b(self, u: np.ndarray, term_nlev: Sequence[int]) -> list[np.ndarray]:
        """Map spherical ``u`` (``(q,)``) to the list of ``(n_k, p_k)`` random effects."""
        return u_to_b(u, self.factor.T, term_nlev)

    def covariance(self, sigma: float) -> np.ndarray:
        """Dense ``Cov((u, β) | θ, σ, y) = σ² (L L')^{-1}`` (only for small ``q``)."""
        f = self.factor
        q = f.L11.shape[0] * f.L11.shape[1] + f.q_rest
        Linv_t = self._solve_upper(np.eye(q + f.p))
        return sigma ** 2 * Linv_t @ Linv_t.T




def conditional_estimates(theta: np.ndarray, cp: CrossProducts,
                          rho: np.ndarray | None = None) -> ConditionalEstimates:
    """Conditional estimates ``β̂(θ)``, ``û(θ)``, ``b̂ = Λ_θ û`` and the factor needed to
    draw ``(β, b) | θ, σ, y`` (see :class:`ConditionalEstimates`)."""
    f = factorize(theta, cp, rho)
    q1 = f.L11.shape[0] * f.L11.shape[1]
    c = np.concatenate([f.Lr1[-1], f.Lrr[-1, :-1]])
    ce = ConditionalEstimates(beta=np.zeros(cp.p), u=np.zeros(q1 + f.q_rest), b=[],
                              pwrss=f.pwrss, ldL2=f.ldL2, ldRX2=f.ldRX2, factor=f)
    v = ce._solve_upper(c[:, None])[:, 0]
    q = q1 + f.q_rest
    ce.u = v[:q]
    ce.beta = v[q:]
    ce.b = u_to_b(ce.u, f.T, cp.term_nlev)
    return ce


def conditional_variances(ce: ConditionalEstimates, term_nlev: Sequence[int], sigma: float
                          ) -> list[np.ndarray]:
    """lme4's conditional covariances of the random effects (``ranef(condVar=TRUE)``):
    ``σ² Λ_k [ (L_Z L_Z')^{-1} ]_{kk} Λ_k'`` per level (β treated as known).

    Returns
    -------
    list of ``(n_k, p_k, p_k)`` arrays, one per term.
    """
    f = ce.factor
    n1, p1 = f.L11.shape[0], f.L11.shape[1]
    qr = f.q_rest
    Lzz = f.Lrr[:qr, :qr]
    Lz1 = f.Lr1[:qr]
    # term 1 blocks: L11inv' L11inv + H_l' S^{-1} H_l, H = Lz1 L11^{-T} (per level), S = Lzz Lzz'
    V1 = np.einsum("lba,lbc->lac", f.L11inv, f.L11inv)
    out = [V1]
    if not qr:
        pass
    elif qr * n1 * p1 >= _SPARSE_MIN_SIZE and np.count_nonzero(Lz1) <= 0.1 * Lz1.size:
        # large, sparse Lz1 (two big crossed factors): Z = S^{-1} (LAPACK dpotri) and the
        # quadratic forms over each level's rows only
        Zu = inverse_upper(Lzz)
        H = np.einsum("mlb,lbc->mlc", Lz1.reshape(qr, n1, p1), f.L11inv)
        V1 += _level_quadratic_forms(H, Zu)
        out.extend(_rest_level_blocks(Zu, f.T, term_nlev))
    else:
        H = np.einsum("mlb,lbc->mlc", Lz1.reshape(qr, n1, p1), f.L11inv).reshape(qr, n1 * p1)
        G = sla.solve_triangular(Lzz, H, lower=True).reshape(qr, n1, p1)
        V1 += np.einsum("mla,mlc->lac", G, G)
        Linv = sla.solve_triangular(Lzz, np.eye(qr), lower=True)
        pos = 0
        for k in range(1, len(f.T)):
            pk, nk = f.T[k].shape[0], term_nlev[k]
            cols = Linv[:, pos: pos + pk * nk].reshape(qr, nk, pk)
            out.append(np.einsum("mla,mlc->lac", cols, cols))
            pos += pk * nk
    res = []
    for Vk, Tk in zip(out, f.T):
        res.append(sigma ** 2 * np.einsum("ab,lbc,dc->lad", Tk, Vk, Tk))
    return res


#: conditional variances use the sparse route when ``Lz1`` has at least this many entries
#: (and at most 10 % non-zero)
_SPARSE_MIN_SIZE = 200_000


def _rest_level_blocks(Zinv: Any, T: list[np.ndarray], term_nlev: Sequence[int]) -> list[np.ndarray]:
    """The ``p_k × p_k`` diagonal blocks of each level of every term after the first, read
    from the inverse ``Zinv`` of the rest block (anything indexable as ``Zinv[rows, cols]``
    elementwise: a dense array or the sparse factor's selected inverse)."""
    blocks = []
    pos = 0
    for k in range(1, len(T)):
        pk, nk = T[k].shape[0], term_nlev[k]
        r = pos + np.arange(nk) * pk
        Vk = np.empty((nk, pk, pk))
        for a in range(pk):
            for c in range(a, pk):
                Vk[:, a, c] = Vk[:, c, a] = Zinv[r + a, r + c]
        blocks.append(Vk)
        pos += pk * nk
    return blocks


def _level_quadratic_forms(H: np.ndarray, Zu: np.ndarray) -> np.ndarray:
    """``H_l' Z H_l`` for every level ``l`` of ``H`` (``(m, n_1, p_1)``; ``H_l = H[:, l, :]``)
    with ``Z`` symmetric given by its upper triangle ``Zu``: each form is taken over the rows
    where ``H_l`` is non-zero, levels with the same number of such rows at once."""
    import scipy.sparse as sp
    m, n1, p1 = H.shape
    sup = sp.csc_matrix(np.abs(H).sum(axis=2))
    sup.sort_indices()
    counts = np.diff(sup.indptr)
    out = np.zeros((n1, p1, p1))
    for k in np.unique(counts):
        if k == 0:
            continue
        lev = np.flatnonzero(counts == k)
        R = sup.indices[sup.indptr[lev][:, None] + np.arange(k)[None, :]]       # (n_k, k)
        Hv = H[R, lev[:, None], :]                                             # (n_k, k, p1)
        Ri, Rj = R[:, :, None], R[:, None, :]
        Zs = Zu[np.minimum(Ri, Rj), np.maximum(Ri, Rj)]                         # (n_k, k, k)
        out[lev] = np.einsum("nia,nij,njc->nac", Hv, Zs, Hv)
    return out


def _estimates_sparse(cp: CrossProducts, f: Factorization, REML: bool,
                      condvar: bool = True) -> dict[str, Any]:
    """:func:`estimates_at` from the supernodal factor of the rest block
    (:mod:`scoremix.lme.sparse_chol`, homoscedastic model): the conditional modes of the
    rest rows ``[u_2 … u_K, β]`` by one sparse triangular solve, term 1's by
    ``u_1,l = S_{11,l}^{-1} T_1'(A_{r1,l}'z)`` with ``z = (−Λ_r x, 1)``, and the
    conditional covariances from the selected inverse ``Z = (L_Z L_Z')^{-1}``: for term 1
    ``S_{11,l}^{-1} + H_l'ZH_l`` (``H_l = Λ_r'A_{r1,l} T_1 S_{11,l}^{-1}``, only the rows
    coupled to level ``l``, all on the pattern of ``L``), for the others ``Z``'s diagonal
    level blocks."""
    import scipy.sparse as sp
    T = f.T
    n1, p1 = cp.term_nlev[0], cp.term_p[0]
    qr, p, n = cp.q_rest, cp.p, cp.n
    mz = qr + p
    m = cp.Arr.shape[1]
    x_rest = f.rest_modes(mz)
    A = cp.ar1_sparse()[0]
    S11inv = np.einsum("lba,lbc->lac", f.L11inv, f.L11inv)       # (T1'A11_l T1 + I)^{-1}
    lam_x = lambda_rest(x_rest, T, cp.term_p, cp.term_nlev)
    z = np.zeros(m)
    z[:mz] = -lam_x
    z[-1] = 1.0
    a = (A.T @ z).reshape(n1, p1) @ T[0]
    u1 = np.einsum("lab,lb->la", S11inv, a)
    u = np.concatenate([u1.ravel(), x_rest[:qr]])
    beta = x_rest[qr:mz].copy()
    sigma2 = f.pwrss / (n - p if REML else n)
    sigma = float(np.sqrt(sigma2))
    Lp = f.sparse[0]
    RX = np.tril(Lp[qr:mz, qr:mz])
    RXinv = sla.solve_triangular(RX, np.eye(p), lower=True)
    vcov = sigma2 * RXinv.T @ RXinv
    out = dict(beta=beta, sigma=sigma, vcov=vcov, b=u_to_b(u, T, cp.term_nlev),
               criterion=f.deviance(REML), T=T)
    if not condvar:
        return out
    V = [S11inv.copy()]
    if qr:
        Z = f.rest_inverse(qr)
        # H = Λ_r' A_{r1} blockdiag(T_1 S11_l^{-1}) on the Z rows, one column per (l, a)
        blocks = [sp.kron(sp.identity(nk, format="csr"), sp.csr_matrix(Tk), format="csr")
                  for Tk, nk in zip(T[1:], cp.term_nlev[1:])]
        Lam = sp.block_diag(blocks, format="csr")
        D = sp.bsr_matrix((np.einsum("ab,lbc->lac", T[0], S11inv), np.arange(n1),
                           np.arange(n1 + 1)), shape=(n1 * p1, n1 * p1))
        H = (Lam.T @ A[:qr] @ D).tocsc()
        for aa in range(p1):
            Ha = H[:, aa::p1].tocsc()
            V[0][:, aa, aa] += Z.column_forms(Ha)
            for bb in range(aa + 1, p1):
                Hb = H[:, bb::p1].tocsc()
                cross = 0.5 * (Z.column_forms(Ha + Hb) - Z.column_forms(Ha)
                               - Z.column_forms(Hb))
                V[0][:, aa, bb] += cross
                V[0][:, bb, aa] += cross
        V.extend(_rest_level_blocks(Z, T, cp.term_nlev))
    else:
        V.extend(np.zeros((nk, Tk.shape[0], Tk.shape[0])) for Tk, nk in zip(T[1:], cp.term_nlev[1:]))
    out["condvar"] = [sigma2 * np.einsum("ab,lbc,dc->lad", Tk, Vk, Tk) for Vk, Tk in zip(V, T)]
    return out


def estimates_at(cp: CrossProducts, theta: np.ndarray, REML: bool,
                 rho: np.ndarray | None = None, condvar: bool = True) -> dict[str, Any]:
    """All estimates at a given ``θ`` (and ``ρ``): ``beta``, ``sigma``, ``vcov``, ``b`` (per
    term), ``condvar`` (per term), ``criterion`` and the relative factors ``T``.

    A homoscedastic model whose rest block has a supernodal sparse factor
    (:func:`scoremix.lme.factor.rest_symbolic`) is evaluated from it
    (:func:`_estimates_sparse`); otherwise from the dense blocked factor.

    ``condvar=False``: there (the supernodal factor) the conditional variances, whose
    selected inverse costs more than the rest together, are left out (no ``condvar``
    key; :func:`condvar_at` computes them when asked for, as lme4 computes them in
    ``ranef(condVar = TRUE)`` and not in ``lmer``); the dense factor always includes them."""
    if cp.n_disp == 1 and cp.ar1_sparse() is not None:
        from scoremix.lme.factor import rest_symbolic
        if rest_symbolic(cp) is not None:
            from scoremix.lme.factor import last_factor
            f = last_factor(theta, cp, rho)   # the optimiser's last evaluation, if at θ
            if f is None:
                f = factorize(theta, cp, rho, need_lr1=False, sparse_ok=True)
            if f.sparse is not None:
                return _estimates_sparse(cp, f, REML, condvar=condvar)
    ce = conditional_estimates(theta, cp, rho)
    f = ce.factor
    n, p = cp.n, cp.p
    sigma2 = ce.pwrss / (n - p if REML else n)
    sigma = float(np.sqrt(sigma2))
    qr = f.q_rest
    RX = f.Lrr[qr: qr + p, qr: qr + p]
    RXinv = sla.solve_triangular(RX, np.eye(p), lower=True)
    vcov = sigma2 * RXinv.T @ RXinv
    condvar = conditional_variances(ce, cp.term_nlev, sigma)
    return dict(beta=ce.beta, sigma=sigma, vcov=vcov, b=ce.b, condvar=condvar,
                criterion=f.deviance(REML), T=f.T)


def condvar_at(cp: CrossProducts, theta: np.ndarray, REML: bool,
               rho: np.ndarray | None = None) -> list[np.ndarray]:
    """The conditional covariances ``(n_k, p_k, p_k)`` per term at ``θ`` (the ``condvar`` of
    :func:`estimates_at`), for results that computed them lazily; the supernodal factor's
    work arrays are not kept afterwards."""
    out = estimates_at(cp, theta, REML, rho)["condvar"]
    sym = cp._rest_sym
    if sym:
        sym.release_workspaces()
    return out
