r"""Penalised iteratively reweighted least squares, the Laplace criterion and adaptive
Gauss–Hermite quadrature (lme4's ``pwrssUpdate``, ``glmerLaplace`` and ``glmerAGQ``).

The model: :math:`\eta = o + X\beta + Z\Lambda_\theta u`, :math:`u \sim N(0, I_q)`,
:math:`\mu = g^{-1}(\eta)`, :math:`y_i \mid u` from the family with prior weight
:math:`w_i`.  For given :math:`(\theta, \beta)` the conditional mode :math:`\tilde u`
minimises the penalised deviance :math:`\sum_i d_i(y_i, \mu_i) + \|u\|^2`; PIRLS iterates
the Newton step

.. math::

    (U'U + I)\,\delta = U' W^{1/2} (y - \mu)/\mu_\eta - u,\qquad
    U = W^{1/2} Z\Lambda_\theta,\quad W = \mathrm{diag}(w_i \mu_{\eta,i}^2 / V(\mu_i)),

with step halving.  With :math:`L L' = U'U + I` at :math:`\tilde u`:

* **Laplace** (``nAGQ = 1``): :math:`-2\log p(y\mid\tilde u) + \|\tilde u\|^2 + \log|L|^2`
  (lme4 adds the family's ``aic`` term, i.e. the full conditional log-likelihood);
* **adaptive Gauss–Hermite** (``nAGQ = K > 1``, one scalar random term, so :math:`L` is
  diagonal and the groups are independent): with
  :math:`c_j(u) = \sum_{i \in j} d_i + u_j^2` (deviance residuals),
  :math:`s_j = 1/L_{jj}` and the :math:`K` standard-normal nodes/weights
  :math:`(z_k, w_k)`,

  .. math::

      \sum_j c_j(\tilde u) + \log|L|^2 - 2\sum_j \log\sum_k w_k
      \exp\{z_k^2/2 - [c_j(\tilde u + z_k s) - c_j(\tilde u)]/2\}

  (lme4's ``glmerAGQ``; it uses deviance residuals, not the log-likelihood, so its value
  differs from the Laplace criterion by the saturated model's constant).

In lme4's first stage (``nAGQ = 0``) :math:`\beta` is updated jointly with :math:`u` in the
same Newton system (augmented by :math:`V = W^{1/2}X`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy import special

from scoremix.glmm.errors import PirlsError
from scoremix.glmm.family import Family
from scoremix.lme.relcov import theta_to_T
from scoremix.lme.spec import RandomTerm

__all__ = ["GlmmData", "PirlsState", "gh_rule"]


class _LazyL:
    """The dense ``L`` of a :class:`BlockFactor`, built on first use (``np.asarray``)."""

    def __init__(self, F: "BlockFactor"):
        self.F = F
        self._L: np.ndarray | None = None

    def __array__(self, dtype=None, copy=None):
        if self._L is None:
            self._L = self.F.L_dense()
        return self._L if dtype is None else self._L.astype(dtype)

    def diag(self) -> np.ndarray:
        return np.concatenate([self.F.sD, np.diag(self.F.Ls)[:self.F.r_u]])


def _diag(L) -> np.ndarray:
    return L.diag() if isinstance(L, _LazyL) else np.diag(L)


@functools.lru_cache(maxsize=32)
def _gh_rule(k: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.hermite.hermgauss(k)
    z = np.sqrt(2.0) * x
    w = w / np.sqrt(np.pi)
    z[np.abs(z) < 1e-14] = 0.0
    z.flags.writeable = False
    w.flags.writeable = False
    return z, w


def gh_rule(k: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of the ``k``-point Gauss–Hermite rule for the standard normal
    density (lme4's ``GHrule``): ``Σ_k w_k f(z_k) ≈ E f(Z)`` (cached, read-only)."""
    return _gh_rule(int(k))


@dataclass
class PirlsState:
    """The result of PIRLS at one ``(θ, β)``."""

    u: np.ndarray
    beta: np.ndarray
    eta: np.ndarray
    mu: np.ndarray
    L: Any                        # Cholesky factor of U'U + I (lower; np.asarray for dense)
    ldL2: float
    pdev: float                   # Σ d_i + ||u||²
    sqr_u: float
    minus2ll: float               # -2 log p(y | u)
    RX: np.ndarray | None = None  # Cholesky of the Schur complement (joint updates)
    extra: dict = field(default_factory=dict)


class _Coupling:
    """A sparse ``n_1 × r`` block with a fixed pattern (``rows``, ``cols``) and the products
    :class:`BlockFactor` needs, by ``np.bincount`` (no per-call sparse-matrix set-up)."""

    def __init__(self, data: np.ndarray, rows: np.ndarray, cols: np.ndarray, shape: tuple,
                 pairs: tuple[np.ndarray, np.ndarray, np.ndarray]):
        self.data, self.rows, self.cols, self.shape, self.pairs = data, rows, cols, shape, pairs

    def scale_rows(self, s: np.ndarray) -> "_Coupling":
        return _Coupling(self.data * s[self.rows], self.rows, self.cols, self.shape, self.pairs)

    def gram(self) -> np.ndarray:
        """``G' G`` (dense ``r × r``)."""
        pa, pb, target = self.pairs
        r = self.shape[1]
        return np.bincount(target, weights=self.data[pa] * self.data[pb],
                           minlength=r * r).reshape(r, r)

    def tmul(self, z: np.ndarray) -> np.ndarray:
        """``G' z`` for a vector or an ``n_1 × k`` matrix."""
        r = self.shape[1]
        if z.ndim == 1:
            return np.bincount(self.cols, weights=self.data * z[self.rows], minlength=r)
        return np.column_stack([self.tmul(z[:, c]) for c in range(z.shape[1])])

    def mul(self, x: np.ndarray) -> np.ndarray:
        """``G x``."""
        return np.bincount(self.rows, weights=self.data * x[self.cols], minlength=self.shape[0])

    def toarray(self) -> np.ndarray:
        out = np.zeros(self.shape)
        out[self.rows, self.cols] = self.data
        return out


class BlockFactor:
    r"""Cholesky factor of ``[[A, B], [B', X'WX]]`` (or of ``A`` alone) when the first random
    term is scalar, so that ``A``'s leading block is diagonal:

    .. math::

        \begin{pmatrix} D & C \\ C' & R \end{pmatrix} = L L',\quad
        L = \begin{pmatrix} D^{1/2} & 0 \\ G & L_S \end{pmatrix},\quad
        G = C' D^{-1/2},\quad L_S L_S' = R - G G',

    (``R`` the other terms' block, with ``X`` appended for the joint system).  Cost
    ``O(n_1 r^2 + r^3)`` instead of ``O(q^3)`` (MixedModels.jl's diagonal ``L_{11}``)."""

    def __init__(self, D: np.ndarray, Cr, Cx: np.ndarray | None, R: np.ndarray, r_u: int,
                 perm: np.ndarray | None = None):
        # D: the diagonal block, a vector (a scalar term) or (n_1, p_0, p_0) blocks (a
        # vector-valued term: block diagonal, L_11 = ⊕ chol(D_l)); C = [Cr, Cx]: Cr
        # (n_d × r_u, dense or a fixed-pattern sparse block) couples the diagonal term with
        # the other random effects, Cx (n_d × p) with β (joint system only)
        self.sparse = isinstance(Cr, _Coupling)
        if D.ndim == 1:
            self.L11 = None
            self.sD = np.sqrt(D)
            inv_sD = 1.0 / self.sD
            self.Gr = Cr.scale_rows(inv_sD) if self.sparse else Cr * inv_sD[:, None]
            self.Gx = None if Cx is None else Cx * inv_sD[:, None]
        else:
            self.L11 = np.linalg.cholesky(D)
            self.sD = np.diagonal(self.L11, axis1=1, axis2=2).ravel()
            self.Gr = self._l_solve(Cr)
            self.Gx = None if Cx is None else self._l_solve(Cx)
        S = R.copy()
        if r_u:
            S[:r_u, :r_u] -= self.Gr.gram() if self.sparse else self.Gr.T @ self.Gr
        if self.Gx is not None:
            if r_u:
                S[:r_u, r_u:] -= self.Gr.tmul(self.Gx) if self.sparse else self.Gr.T @ self.Gx
                S[r_u:, :r_u] = S[:r_u, r_u:].T
            S[r_u:, r_u:] -= self.Gx.T @ self.Gx
        self.Ls = np.linalg.cholesky(S) if len(S) else np.zeros((0, 0))
        self.r_u = r_u
        self.n1 = len(self.sD)          # the size of the diagonal block
        #: ``None`` or the order of ``u`` in which the factor is taken (the diagonal
        #: term's levels first): ``A[perm][:, perm] = L L'``
        self.perm = perm

    def _l_solve(self, h: np.ndarray) -> np.ndarray:
        """``L_11^{-1} h`` (``h`` of ``n_d`` rows, a vector or a matrix)."""
        if self.L11 is None:
            return h / self.sD if h.ndim == 1 else h / self.sD[:, None]
        n1, p0, _ = self.L11.shape
        hb = h.reshape(n1, p0, -1)
        return np.linalg.solve(self.L11, hb).reshape(h.shape)

    def _lt_solve(self, z: np.ndarray) -> np.ndarray:
        """``L_11^{-T} z`` (a vector)."""
        if self.L11 is None:
            return z / self.sD
        n1, p0, _ = self.L11.shape
        return np.linalg.solve(np.swapaxes(self.L11, 1, 2), z.reshape(n1, p0, 1)).ravel()

    def _G_mul(self, z1: np.ndarray) -> np.ndarray:
        """``G z_1`` with ``G = C' D^{-1/2}``."""
        parts = ([self.Gr.tmul(z1) if self.sparse else self.Gr.T @ z1]
                 if self.r_u else [])
        if self.Gx is not None:
            parts.append(self.Gx.T @ z1)
        return np.concatenate(parts) if parts else np.zeros(0)

    def _Gt_mul(self, x2: np.ndarray) -> np.ndarray:
        """``G' x_2``."""
        if self.r_u:
            out = self.Gr.mul(x2[:self.r_u]) if self.sparse else self.Gr @ x2[:self.r_u]
        else:
            out = np.zeros(self.n1)
        if self.Gx is not None:
            out = out + self.Gx @ x2[self.r_u:]
        return out

    def solve(self, h: np.ndarray) -> np.ndarray:
        """``x`` with ``A x = h`` (``A`` in the model's order of ``u``, ``X`` appended)."""
        if self.perm is None:
            return self._solve(h)
        q = len(self.perm)
        hp = np.concatenate([h[:q][self.perm], h[q:]])
        xp = self._solve(hp)
        x = np.empty_like(xp)
        x[self.perm] = xp[:q]
        x[q:] = xp[q:]
        return x

    def _solve(self, h: np.ndarray) -> np.ndarray:
        n1 = self.n1
        z1 = self._l_solve(h[:n1])
        if len(self.Ls):
            z2 = sla.solve_triangular(self.Ls, h[n1:] - self._G_mul(z1), lower=True,
                                      check_finite=False)
            x2 = sla.solve_triangular(self.Ls, z2, lower=True, trans="T", check_finite=False)
            x1 = self._lt_solve(z1 - self._Gt_mul(x2))
            return np.concatenate([x1, x2])
        return self._lt_solve(z1)

    @property
    def ldL2(self) -> float:
        """``log|A|`` of the random-effects block."""
        d = np.diag(self.Ls)[:self.r_u]
        return float(2 * np.sum(np.log(self.sD)) + 2 * np.sum(np.log(d)))

    @property
    def RX(self) -> np.ndarray:
        return self.Ls[self.r_u:, self.r_u:]

    def inverse_blocks(self) -> tuple[np.ndarray, np.ndarray]:
        r"""Pieces of ``A^{-1}`` (``A = LL'`` the random-effects block): the diagonal term's
        ``p_0 × p_0`` blocks ``L_{11}^{-T}(I + W'W)L_{11}^{-1}`` per level, ``W = L_S^{-1}G``,
        and the other terms' block ``(L_SL_S')^{-1}`` (dense ``r × r``)."""
        r = self.r_u
        Ls = self.Ls[:r, :r]
        if r:
            Gr = self.Gr.toarray() if self.sparse else self.Gr          # (n_d, r)
            W = sla.solve_triangular(Ls, Gr.T, lower=True, check_finite=False)   # (r, n_d)
            Li = sla.solve_triangular(Ls, np.eye(r), lower=True, check_finite=False)
            rest = Li.T @ Li
        else:
            W = np.zeros((0, self.n1))
            rest = np.zeros((0, 0))
        if self.L11 is None:
            blocks = ((1.0 + np.sum(W * W, axis=0)) / self.sD ** 2)[:, None, None]
        else:
            n1, p0, _ = self.L11.shape
            Wb = W.reshape(r, n1, p0).transpose(1, 0, 2)                   # (n_l, r, p0)
            M = np.eye(p0)[None] + np.einsum("lka,lkb->lab", Wb, Wb)
            Linv = np.linalg.inv(self.L11)                                 # (n_l, p0, p0)
            blocks = np.einsum("lba,lbc,lcd->lad", Linv, M, Linv)
        return blocks, rest

    def L_dense(self) -> np.ndarray:
        """The random-effects part of ``L`` as a dense ``q × q`` matrix ``M`` with
        ``M M' = A`` in the model's order of ``u`` (lower triangular when the diagonal term
        is the first one; else ``L`` with its rows put back in the model's order)."""
        q = self.n1 + self.r_u
        L = np.zeros((q, q))
        if self.L11 is None:
            L[np.arange(self.n1), np.arange(self.n1)] = self.sD
        else:
            n1, p0, _ = self.L11.shape
            for a in range(p0):
                for b in range(a + 1):
                    idx = np.arange(n1) * p0
                    L[idx + a, idx + b] = self.L11[:, a, b]
        if self.r_u:
            L[self.n1:, :self.n1] = self.Gr.toarray().T if self.sparse else self.Gr.T
        L[self.n1:, self.n1:] = self.Ls[:self.r_u, :self.r_u]
        if self.perm is not None:
            M = np.empty_like(L)
            M[self.perm] = L
            return M
        return L


class GlmmData:
    """The arrays of one GLMM (``y``, ``X``, ``Z``, weights, trials, offset) and the
    computations on them at given parameters.

    Parameters
    ----------
    y:
        response (proportions for binomial).
    X:
        ``(n, p)`` fixed-effects matrix.
    terms:
        the random terms of the model frame (:class:`scoremix.lme.spec.RandomTerm`).
    family:
        the family and link.
    wt:
        prior weights (binomial: number of trials times any user weight).
    trials:
        binomial ``m_i`` for R's ``aic`` (``n`` for ``cbind``, else the prior weights).
    offset:
        the known part of ``η``.
    """

    def __init__(self, y: np.ndarray, X: np.ndarray, terms: list[RandomTerm], family: Family,
                 wt: np.ndarray, trials: np.ndarray, offset: np.ndarray):
        self.y = np.asarray(y, float)
        self.X = np.asarray(X, float)
        self.terms = terms
        self.family = family
        self.wt = np.asarray(wt, float)
        self.trials = np.asarray(trials, float)
        self.offset = np.asarray(offset, float)
        self.n, self.p = self.X.shape
        self.term_p = [t.p for t in terms]
        self.term_nlev = [t.n_levels for t in terms]
        self.q = int(sum(p * nl for p, nl in zip(self.term_p, self.term_nlev)))
        self.Z = self._build_z()
        # per row and per random-effect column of every term: the column of u it touches
        # (``ZΛ`` has, per row, p_k entries per term k, at the columns of that row's level)
        cols, pos = [], 0
        for t in terms:
            codes = np.asarray(t.codes, np.int64)
            for b in range(t.p):
                cols.append(pos + codes * t.p + b)
            pos += t.p * t.n_levels
        self.cols = np.column_stack(cols) if cols else np.zeros((self.n, 0), np.int64)
        self.dense_ok = self.q <= 3000
        # the diagonal block of the blocked factor: the scalar term with the most levels
        # the diagonal block of the blocked factor: the term with the most levels (a
        # scalar term's block is diagonal, a vector term's block diagonal)
        k0 = (max(range(len(terms)), key=lambda k: (terms[k].n_levels, -terms[k].p, -k))
              if terms else 0)
        # only the other terms' block (and X) is dense: block when it is small enough
        self.blocked = bool(terms) and self.q - terms[k0].n_levels * terms[k0].p <= 3000
        self._k0 = k0
        self.p0 = terms[k0].p if self.blocked else 1
        self.n1 = terms[k0].n_levels * self.p0 if self.blocked else 0
        self._perm: np.ndarray | None = None
        self._bcols, self._border = self.cols, np.arange(self.cols.shape[1])
        if self.blocked and k0 != 0:
            offs = np.cumsum([0] + [t.p * t.n_levels for t in terms])
            first = np.arange(offs[k0], offs[k0 + 1])
            self._perm = np.concatenate([first, np.setdiff1d(np.arange(self.q), first)])
            inv = np.empty(self.q, np.int64)
            inv[self._perm] = np.arange(self.q)
            c0 = int(sum(t.p for t in terms[:k0]))
            own = np.arange(c0, c0 + self.p0)
            self._border = np.concatenate([own, np.delete(np.arange(self.cols.shape[1]), own)])
            self._bcols = inv[self.cols][:, self._border]
        self._u_warm = np.zeros(self.q)
        self._beta_warm: np.ndarray | None = None
        self.n_eval = 0

    # -- design -------------------------------------------------------------------------
    def _build_z(self) -> sp.csr_matrix:
        rows, cols, vals = [], [], []
        off = 0
        idx = np.arange(self.n)
        for t in self.terms:
            codes = np.asarray(t.codes, np.int64)
            Xt = np.asarray(t.X, float)
            for a in range(t.p):
                rows.append(idx)
                cols.append(off + codes * t.p + a)
                vals.append(Xt[:, a])
            off += t.p * t.n_levels
        if not rows:
            return sp.csr_matrix((self.n, 0))
        return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                             shape=(self.n, self.q))

    def lambda_matrix(self, theta: np.ndarray) -> sp.csc_matrix:
        """``Λ_θ = ⊕_k I_{n_k} ⊗ T_k``."""
        T = theta_to_T(theta, self.term_p)
        blocks = [sp.kron(sp.identity(nl, format="csc"), sp.csc_matrix(Tk), format="csc")
                  for Tk, nl in zip(T, self.term_nlev)]
        if not blocks:
            return sp.csc_matrix((0, 0))
        return sp.block_diag(blocks, format="csc")

    def zl_values(self, theta: np.ndarray) -> np.ndarray:
        """``(n, Σp_k)`` values of ``ZΛ_θ`` at :attr:`cols` (row ``i`` of term ``k``:
        ``x_{ik}' T_k``)."""
        if not self.terms:
            return np.zeros((self.n, 0))
        if not hasattr(self, "_tX"):
            self._tX = [np.asarray(t.X, float) for t in self.terms]
            self._all_scalar = all(p == 1 for p in self.term_p)
        if self._all_scalar:     # ZΛ's values: each scalar term's column times its θ
            return np.hstack(self._tX) * np.asarray(theta, float)[None, :]
        T = theta_to_T(theta, self.term_p)
        return np.column_stack([x @ Tk for x, Tk in zip(self._tX, T)])

    def zl_mul(self, vals: np.ndarray, u: np.ndarray) -> np.ndarray:
        """``ZΛu``."""
        return np.einsum("ij,ij->i", vals, u[self.cols]) if vals.shape[1] else np.zeros(self.n)

    def zl_tmul(self, vals: np.ndarray, v: np.ndarray) -> np.ndarray:
        """``(ZΛ)'v``."""
        out = np.zeros(self.q)
        for j in range(vals.shape[1]):
            out += np.bincount(self.cols[:, j], weights=vals[:, j] * v, minlength=self.q)
        return out

    def zl_cross(self, vals: np.ndarray, w: np.ndarray) -> np.ndarray:
        """``(ZΛ)'W(ZΛ)`` as a dense ``q × q`` matrix."""
        q = self.q
        P = vals.shape[1]
        A = np.zeros(q * q)
        for j in range(P):
            for k in range(j, P):
                idx = self.cols[:, j] * q + self.cols[:, k]
                c = np.bincount(idx, weights=w * vals[:, j] * vals[:, k], minlength=q * q)
                A += c
                if k != j:
                    A += c.reshape(q, q).T.ravel()
        return A.reshape(q, q)

    def zl_xcross(self, vals: np.ndarray, w: np.ndarray) -> np.ndarray:
        """``(ZΛ)'WX`` (``q × p``)."""
        out = np.zeros((self.q, self.p))
        for c in range(self.p):
            out[:, c] = self.zl_tmul(vals, w * self.X[:, c])
        return out

    def _sparse_pattern(self) -> tuple | None:
        """The CSR pattern of the coupling block ``C_r`` (diagonal term × other random
        effects) and each row-entry's position in it; ``None`` when ``C_r`` is dense
        enough for a dense array."""
        if hasattr(self, "_cr_pattern"):
            return self._cr_pattern
        n1, r = self.n1, self.q - self.n1
        cols = self._bcols
        P = cols.shape[1]
        pat = None
        if self.p0 == 1 and r and P > 1 and n1 * r > 20000 and self.n * (P - 1) < 0.2 * n1 * r:
            keys = np.concatenate([cols[:, 0] * r + (cols[:, j] - n1) for j in range(1, P)])
            uniq, inv = np.unique(keys, return_inverse=True)
            prow, pcol = uniq // r, uniq % r
            # all pairs of entries in one row (for G'G)
            start = np.searchsorted(prow, np.arange(n1 + 1))
            cnt = np.diff(start)
            pa = np.concatenate([np.repeat(np.arange(start[i], start[i + 1]), cnt[i])
                                 for i in range(n1) if cnt[i]] or [np.zeros(0, np.int64)])
            pb = np.concatenate([np.tile(np.arange(start[i], start[i + 1]), cnt[i])
                                 for i in range(n1) if cnt[i]] or [np.zeros(0, np.int64)])
            pat = (inv, prow, pcol, len(uniq), (pa, pb, pcol[pa] * r + pcol[pb]))
        self._cr_pattern = pat
        return pat

    def _r_pattern(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The entries of the other terms' ``r × r`` block that rows touch (upper pairs
        ``j ≤ k`` of each row's columns): unique flat keys, each row-pair's key index, and
        which unique entries are off the diagonal (mirrored below it)."""
        if hasattr(self, "_rpat"):
            return self._rpat
        n1, r = self.n1, self.q - self.n1
        cols = self._bcols
        P = cols.shape[1]
        p0 = self.p0
        keys = np.concatenate([(cols[:, j] - n1) * r + (cols[:, k] - n1)
                               for j in range(p0, P) for k in range(j, P)])
        ukeys, inv = np.unique(keys, return_inverse=True)
        a, b = ukeys // r, ukeys % r
        # a pair of different columns j < k always has a < b (terms and a term's columns
        # keep their order), so the mirrored keys never collide with a stored one
        self._rpat = (ukeys, inv, a != b)
        return self._rpat

    def _indicators(self) -> list[sp.csr_matrix]:
        """Per column of the blocked layout, the ``levels × n`` 0/1 matrix sending a row to
        its random effect (the diagonal term's levels, then the other ``r`` effects)."""
        if not hasattr(self, "_ind"):
            n1, r = self.n1, self.q - self.n1
            cols = self._bcols
            idx = np.arange(self.n)
            p0 = self.p0
            self._ind = [sp.csr_matrix((np.ones(self.n),
                                        (cols[:, j] - (n1 if j >= p0 else 0), idx)),
                                       shape=(r if j >= p0 else n1, self.n))
                         for j in range(cols.shape[1])]
        return self._ind

    def block_factor(self, vals: np.ndarray, w: np.ndarray, joint: bool) -> BlockFactor:
        """:class:`BlockFactor` of ``Λ'Z'WZΛ + I`` (and ``X`` for ``joint``)."""
        n1, q, p = self.n1, self.q, self.p
        r = q - n1
        cols = self._bcols                     # the diagonal term's column first
        vals = vals[:, self._border]
        p0 = self.p0
        c0, v0 = cols[:, 0], vals[:, 0]
        wv0 = w * v0
        rp = r + (p if joint else 0)
        R = np.zeros((rp, rp))
        P = vals.shape[1]
        if p0 == 1:
            D = 1.0 + np.bincount(c0, weights=wv0 * v0, minlength=n1)
        else:
            # (n_l, p0, p0) blocks Σ_i w_i v_ia v_ib + I of the vector-valued diagonal term
            lev = c0 // p0
            nl = n1 // p0
            D = np.empty((nl, p0, p0))
            for a in range(p0):
                for b in range(a + 1):
                    D[:, a, b] = np.bincount(lev, weights=w * vals[:, a] * vals[:, b],
                                             minlength=nl)
                    D[:, b, a] = D[:, a, b]
            D += np.eye(p0)[None]
        pat = self._sparse_pattern()
        if pat is not None:
            inv, prow, pcol, nnz, pairs = pat
            wts = np.concatenate([wv0 * vals[:, j] for j in range(1, P)])
            Cr = _Coupling(np.bincount(inv, weights=wts, minlength=nnz), prow, pcol, (n1, r), pairs)
        else:
            Cr = np.zeros(n1 * r)
            for a in range(p0):
                for j in range(p0, P):
                    Cr += np.bincount(cols[:, a] * r + (cols[:, j] - n1),
                                      weights=w * vals[:, a] * vals[:, j], minlength=n1 * r)
            Cr = Cr.reshape(n1, r)
        if r:
            # the other terms' block Σ_i w_i z_ij z_ik over its fixed pattern
            ukeys, rinv, off = self._r_pattern()
            wts = np.concatenate([w * vals[:, j] * vals[:, k]
                                  for j in range(p0, P) for k in range(j, P)])
            v = np.bincount(rinv, weights=wts, minlength=len(ukeys))
            Rr = np.zeros(r * r)
            Rr[ukeys] = v
            Rr[(ukeys[off] % r) * r + ukeys[off] // r] = v[off]   # the mirrored entries
            R[:r, :r] = Rr.reshape(r, r) + np.eye(r)
        Cx = None
        if joint:
            WX = self.X * w[:, None]
            ind = self._indicators()
            Cx = ind[0] @ (v0[:, None] * WX)
            for a in range(1, p0):
                Cx += ind[a] @ (vals[:, a:a + 1] * WX)
            for j in range(p0, P):
                R[:r, r:] += ind[j] @ (vals[:, j:j + 1] * WX)
            R[r:, :r] = R[:r, r:].T
            R[r:, r:] = self.X.T @ WX
        return BlockFactor(D, Cr, Cx, R, r, self._perm)

    def _zl_ops(self, theta: np.ndarray, vals: np.ndarray | None = None):
        """``(ZΛu, (ZΛ)'v, (ZΛ)'W(ZΛ), (ZΛ)'WX)`` as functions: index arithmetic on
        :attr:`cols` when ``q`` is small enough for a dense ``q × q`` matrix, else sparse
        products (``vals``: :meth:`zl_values` at ``θ`` when already computed)."""
        if self.dense_ok or self.blocked:
            vals = self.zl_values(theta) if vals is None else vals
            return (lambda u: self.zl_mul(vals, u), lambda v: self.zl_tmul(vals, v),
                    lambda w: self.zl_cross(vals, w), lambda w: self.zl_xcross(vals, w))
        ZL = (self.Z @ self.lambda_matrix(theta)).tocsr()
        ZLt = ZL.T.tocsr()
        return (lambda u: ZL @ u, lambda v: ZLt @ v,
                lambda w: (ZLt @ sp.diags(w) @ ZL).toarray(),
                lambda w: np.asarray(ZLt @ (self.X * w[:, None])))

    def ainv_blocks(self, L) -> list[np.ndarray]:
        """Per term the ``(n_levels, p, p)`` diagonal blocks of ``A^{-1} = (LL')^{-1}``
        (from the blocked factor without forming a ``q × q`` inverse when ``L`` is one)."""
        out: list[np.ndarray] = []
        if isinstance(L, _LazyL):
            blocks, rest = L.F.inverse_blocks()
            offs = np.cumsum([0] + [t.p * t.n_levels for t in self.terms])
            nd = self.n1
            for k, t in enumerate(self.terms):
                if k == self._k0:
                    out.append(blocks)
                    continue
                s0 = offs[k] - (nd if k > self._k0 else 0)
                idx = s0 + np.arange(t.n_levels)[:, None] * t.p + np.arange(t.p)[None, :]
                out.append(rest[idx[:, :, None], idx[:, None, :]])
            return out
        Linv = np.linalg.inv(np.asarray(L)) if self.q else np.zeros((0, 0))
        pos = 0
        for t in self.terms:
            blk = np.empty((t.n_levels, t.p, t.p))
            for j in range(t.n_levels):
                Li = Linv[:, pos + j * t.p: pos + (j + 1) * t.p]
                blk[j] = Li.T @ Li
            out.append(blk)
            pos += t.p * t.n_levels
        return out

    def scalar_only(self) -> bool:
        return len(self.terms) == 1 and self.terms[0].p == 1

    # -- family pieces ------------------------------------------------------------------
    def _mu(self, eta: np.ndarray) -> np.ndarray:
        return self.family.valid_mu(self.family.link.linkinv(eta))

    def _devconst(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, float | None]:
        r"""``(c, a, b, K)`` with ``d_i(μ) = c_i - 2(a_i \log μ_i + b_i \log(1-μ_i))``
        (binomial) or ``c_i - 2(a_i \log μ_i - b_i μ_i)`` (Poisson) the deviance residuals,
        and ``K = Σ_i [-2\log f(y_i|μ_i) - d_i(μ)]``, the same for every ``μ`` (``None``
        when a binomial ``m_i y_i`` is not a whole number, where R's ``aic`` rounds)."""
        if hasattr(self, "_dc"):
            return self._dc
        y, wt, fam = self.y, self.wt, self.family
        if fam.name == "binomial":
            a, b = wt * y, wt * (1 - y)
            c = 2 * (special.xlogy(a, y) + special.xlogy(b, 1 - y))
        else:
            a, b = wt * y, wt
            c = 2 * (special.xlogy(a, y) - a)
        mu0 = fam.valid_mu(fam.mustart(y, wt))
        K: float | None = float(np.sum(fam.minus2_loglik(y, mu0, wt, self.trials))
                                - np.sum(fam.dev_resid(y, mu0, wt)))
        if fam.name == "binomial":
            m = self.trials
            if not np.allclose(np.round(m * y), m * y, rtol=0, atol=1e-9):
                K = None
        self._dc = (c, a, b, K)
        return self._dc

    def _devres(self, mu: np.ndarray) -> np.ndarray:
        c, a, b, _ = self._devconst()
        if self.family.name == "binomial":
            return c - 2 * (a * np.log(mu) + b * np.log1p(-mu))
        return c - 2 * (a * np.log(mu) - b * mu)

    def _devres_family(self, mu: np.ndarray) -> np.ndarray:
        return self.family.dev_resid(self.y, mu, self.wt)

    def initial_eta(self) -> np.ndarray:
        return self.family.link.linkfun(self.family.mustart(self.y, self.wt))

    # -- PIRLS --------------------------------------------------------------------------
    def pirls(self, theta: np.ndarray, beta: np.ndarray | None, u0: np.ndarray | None = None,
              tol: float = 1e-12, max_iter: int = 200, step_tol: float = 1e-9) -> PirlsState:
        """Conditional modes at ``θ`` (and ``β``; ``beta=None``: ``β`` and ``u`` jointly,
        lme4's ``nAGQ = 0`` step).  Converges when the penalised deviance changes by less
        than ``tol`` relative and the largest Newton step is below ``step_tol``."""
        self.n_eval += 1
        vals = self.zl_values(theta) if self.dense_ok or self.blocked else None
        mul, tmul, cross, xcross = self._zl_ops(theta, vals)
        joint = beta is None
        q, p = self.q, self.p
        u = np.array(self._u_warm if u0 is None else u0, float)
        if joint:
            b = (np.zeros(p) if self._beta_warm is None else self._beta_warm.copy())
            if self._beta_warm is None:
                eta = self.initial_eta()
                u = np.zeros(q)
            else:
                eta = self.offset + self.X @ b + mul(u)
        else:
            b = np.asarray(beta, float)
            eta = self.offset + self.X @ b + mul(u)
        mu = self._mu(eta)
        pdev = float(np.sum(self._devres(mu)) + u @ u)
        first = joint and self._beta_warm is None
        for it in range(max_iter):
            mu_eta = self.family.link.mu_eta(eta)
            w = self.wt * mu_eta ** 2 / self.family.variance(mu)
            wr = w * (self.y - mu) / mu_eta                 # W × working residual
            if self.blocked:
                F = self.block_factor(vals, w, joint)
                if joint and first:
                    wz = wr + w * (eta - self.offset)
                    sol = F.solve(np.concatenate([tmul(wz), self.X.T @ wz]))
                    du, db = sol[:q] - u, sol[q:] - b
                elif joint:
                    sol = F.solve(np.concatenate([tmul(wr) - u, self.X.T @ wr]))
                    du, db = sol[:q], sol[q:]
                else:
                    du, db = F.solve(tmul(wr) - u), np.zeros(p)
            elif joint:
                A = cross(w)
                A[np.diag_indices(q)] += 1.0
                B = xcross(w)
                C = self.X.T @ (self.X * w[:, None])
                M = np.block([[A, B], [B.T, C]])
                if first:
                    # IRLS from the starting means: solve for (u, β) directly
                    wz = wr + w * (eta - self.offset)
                    sol = sla.solve(M, np.concatenate([tmul(wz), self.X.T @ wz]), assume_a="pos")
                    du, db = sol[:q] - u, sol[q:] - b
                else:
                    sol = sla.solve(M, np.concatenate([tmul(wr) - u, self.X.T @ wr]), assume_a="pos")
                    du, db = sol[:q], sol[q:]
            else:
                A = cross(w)
                A[np.diag_indices(q)] += 1.0
                Lc = sla.cho_factor(A, lower=True)
                du = sla.cho_solve(Lc, tmul(wr) - u)
                db = np.zeros(p)
            step = 1.0
            accepted = False
            for _ in range(30):
                un, bn = u + step * du, b + step * db
                etan = self.offset + self.X @ bn + mul(un)
                mun = self._mu(etan)
                pdn = float(np.sum(self._devres(mun)) + un @ un)
                if first or pdn <= pdev + 1e-10 * abs(pdev):
                    accepted = True
                    break
                step /= 2
            if not accepted:
                break
            change = abs(pdev - pdn) / (0.1 + abs(pdn))
            u, b, eta, mu = un, bn, etan, mun
            stepsize = max(np.max(np.abs(step * du), initial=0), np.max(np.abs(step * db), initial=0))
            pdev = pdn
            # the criterion depends on the mode to first order (through log|L|): converge
            # on the step, not only on the penalised deviance
            if not first and ((change < tol and stepsize < step_tol) or stepsize < 1e-2 * step_tol
                              # a separated cell drifts to ±inf with vanishing gains
                              or (it > 30 and change < 1e-10)):
                break
            first = False
        else:
            raise PirlsError(f"PIRLS did not converge in {max_iter} iterations at theta={theta}")
        # Cholesky factor at the mode
        mu_eta = self.family.link.mu_eta(eta)
        w = self.wt * mu_eta ** 2 / self.family.variance(mu)
        RX = None
        if self.blocked:
            F = self.block_factor(vals, w, joint)
            ldL2 = F.ldL2
            L = _LazyL(F)
            if joint:
                RX = F.RX
                self._beta_warm = b.copy()
        else:
            A = cross(w)
            A[np.diag_indices(q)] += 1.0
            L = np.linalg.cholesky(A) if q else np.zeros((0, 0))
            ldL2 = float(2 * np.sum(np.log(np.diag(L)))) if q else 0.0
            if joint:
                B = xcross(w)
                RZX = sla.solve_triangular(L, B, lower=True) if q else np.zeros((0, p))
                RX = np.linalg.cholesky(self.X.T @ (self.X * w[:, None]) - RZX.T @ RZX)
                self._beta_warm = b.copy()
        self._u_warm = u.copy()
        K = self._devconst()[3]
        m2ll = (float(np.sum(self._devres(mu))) + K if K is not None else
                float(np.sum(self.family.minus2_loglik(self.y, mu, self.wt, self.trials))))
        return PirlsState(u=u, beta=b, eta=eta, mu=mu, L=L, ldL2=ldL2, pdev=pdev,
                          sqr_u=float(u @ u), minus2ll=m2ll, RX=RX)

    # -- criteria -----------------------------------------------------------------------
    def laplace(self, st: PirlsState) -> float:
        """lme4's Laplace criterion ``-2 log p(y|ũ) + ||ũ||² + log|L|²``."""
        return st.minus2ll + st.sqr_u + st.ldL2

    def agq(self, theta: np.ndarray, st: PirlsState, nAGQ: int) -> float:
        """lme4's adaptive Gauss–Hermite criterion (one scalar random term), all nodes at
        once: an ``(nAGQ, n)`` array of linear predictors summed per group."""
        t = self.terms[0]
        nl = t.n_levels
        lam = float(theta[0])
        if not hasattr(self, "_agq_ind"):
            codes = np.asarray(t.codes, np.int64)
            self._agq_ind = sp.csr_matrix((np.ones(self.n), (codes, np.arange(self.n))),
                                          shape=(nl, self.n))
            self._agq_codes = codes
            self._agq_z = np.asarray(t.X, float)[:, 0]
        ind, codes, zcol = self._agq_ind, self._agq_codes, self._agq_z
        d0 = ind @ self._devres(st.mu) + st.u ** 2
        sd = 1.0 / _diag(st.L)
        z, w = gh_rule(nAGQ)
        nz = z != 0.0
        base = st.eta - lam * zcol * st.u[codes]
        U = st.u[None, :] + z[nz, None] * sd[None, :]                 # (K', nl)
        eta = base[None, :] + lam * zcol[None, :] * U[:, codes]        # (K', n)
        dev = (ind @ self._devres(self._mu(eta)).T).T + U ** 2         # (K', nl)
        terms = w[nz, None] * np.exp(z[nz, None] ** 2 / 2 - 0.5 * (dev - d0[None, :]))
        mult = terms.sum(axis=0) + float(np.sum(w[~nz]))
        return float(np.sum(d0) + st.ldL2 - 2 * np.sum(np.log(mult)))
