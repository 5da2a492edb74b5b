"""Relative covariance factors of the random terms: ``θ ↔ T_k`` and ``Λ_θ``.

Term ``k`` (``p_k`` columns, ``n_k`` levels) has ``b_k = (I_{n_k} ⊗ T_k) u_k`` with ``T_k``
the ``p_k × p_k`` lower-triangular relative Cholesky factor; its lower triangle, column-major
(lme4's order), is the term's slice of ``θ``.  ``Λ_θ = ⊕_k (I_{n_k} ⊗ T_k)`` and random
effects are ordered level-major within a term (level ``l``, column ``a`` at ``l·p_k + a``).

The "rest" rows of the blocked cross-products (:mod:`scoremix.lme.crossprod`) are
``[Z_2 … Z_K, X, y]``; :func:`scale_rest_rows` applies ``Λ_rest' = ⊕_{k≥2} (I ⊗ T_k')`` to
them (identity on ``X`` and ``y``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["psd_chol", "theta_to_T", "scale_rest_rows", "scale_rest_sym", "rest_scale", "u_to_b", "lambda_rest"]


def psd_chol(R: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor of a positive semi-definite ``R`` (a zero pivot gives a zero
    column below it), as the relative factor ``T`` of a covariance on its boundary."""
    p = R.shape[0]
    L = np.zeros_like(R)
    for j in range(p):
        d = R[j, j] - np.dot(L[j, :j], L[j, :j])
        L[j, j] = np.sqrt(max(d, 0.0))
        for i in range(j + 1, p):
            v = R[i, j] - np.dot(L[i, :j], L[j, :j])
            L[i, j] = v / L[j, j] if L[j, j] > 1e-12 else 0.0
    return L


def theta_to_T(theta: np.ndarray, term_p: Sequence[int]) -> list[np.ndarray]:
    """Split ``θ`` into the lower-triangular relative factors ``T_k`` (column-major lower
    triangle per term, lme4's order)."""
    theta = np.atleast_1d(np.asarray(theta, dtype=float))
    out = []
    pos = 0
    for p in term_p:
        T = np.zeros((p, p))
        for j in range(p):
            for i in range(j, p):
                T[i, j] = theta[pos]
                pos += 1
        out.append(T)
    if pos != len(theta):
        raise ValueError(f"theta has {len(theta)} elements, the terms need {pos}")
    return out


def scale_rest_rows(M: np.ndarray, T: list[np.ndarray], term_p: Sequence[int],
                    term_nlev: Sequence[int]) -> np.ndarray:
    """``Λ_rest' M``: apply ``I_{n_k} ⊗ T_k'`` (``k ≥ 2``) to the ``[Z_2 … Z_K]`` rows of
    ``M`` (a copy; the ``X, y`` rows are unchanged)."""
    M = M.copy()
    pos = 0
    for k in range(1, len(term_p)):
        pk, nk = term_p[k], term_nlev[k]
        sl = slice(pos, pos + pk * nk)
        if pk == 1:
            M[sl] *= T[k][0, 0]
        else:
            blk = M[sl].reshape(nk, pk, -1)
            M[sl] = np.einsum("ba,lbc->lac", T[k], blk).reshape(pk * nk, -1)
        pos += pk * nk
    return M


def _apply_Tt(blk: np.ndarray, T: np.ndarray, axis: int) -> None:
    """In place: along ``axis`` (of length ``p``) replace ``v`` by ``T'v``.  ``T`` is lower
    triangular, so entry ``a`` only needs entries ``b ≥ a`` and ascending ``a`` is safe."""
    pk = T.shape[0]
    take = (lambda b: blk[:, b, :]) if axis == 1 else (lambda b: blk[:, :, b])
    for a in range(pk):
        out = take(a)
        out *= T[a, a]
        for b in range(a + 1, pk):
            if T[b, a] != 0.0:
                out += T[b, a] * take(b)


def scale_rest_sym(S: np.ndarray, T: list[np.ndarray], term_p: Sequence[int],
                   term_nlev: Sequence[int]) -> np.ndarray:
    """``Λ_rest' S Λ_rest`` computed in place on the (C-ordered, square) rest block ``S``;
    returns ``S``.  Same as ``scale_rest_rows(scale_rest_rows(S).T).T`` without copies."""
    m = S.shape[0]
    pos = 0
    for k in range(1, len(term_p)):
        pk, nk = term_p[k], term_nlev[k]
        sl = slice(pos, pos + pk * nk)
        if pk == 1:
            t = T[k][0, 0]
            S[sl, :] *= t
            S[:, sl] *= t
        else:
            _apply_Tt(S[sl, :].reshape(nk, pk, m), T[k], axis=1)
            _apply_Tt(S[:, sl].reshape(m, nk, pk), T[k], axis=2)
        pos += pk * nk
    return S


def rest_scale(theta: np.ndarray, term_nlev: Sequence[int], m: int) -> np.ndarray:
    """``diag(Λ_rest, I_{p+1})`` as a length-``m`` vector (scalar random terms only:
    ``θ_k`` on the ``n_k`` rows of term ``k ≥ 2``, 1 on ``X, y``)."""
    lam = np.ones(m)
    pos = 0
    for k in range(1, len(term_nlev)):
        lam[pos: pos + term_nlev[k]] = theta[k]
        pos += term_nlev[k]
    return lam


def u_to_b(u: np.ndarray, T: list[np.ndarray], term_nlev: Sequence[int]) -> list[np.ndarray]:
    """Map spherical ``u`` (``(q,)``, level-major per term) to the list of ``(n_k, p_k)``
    random effects ``b_k = u_k T_k'`` per level."""
    out = []
    pos = 0
    for Tk, nk in zip(T, term_nlev):
        pk = Tk.shape[0]
        uk = u[pos: pos + pk * nk].reshape(nk, pk)
        out.append(uk @ Tk.T)
        pos += pk * nk
    return out


def lambda_rest(x: np.ndarray, T: list[np.ndarray], term_p: Sequence[int],
                term_nlev: Sequence[int]) -> np.ndarray:
    """``Λ_rest x`` on the ``[Z_2 … Z_K X]`` rows: ``b = Λ u`` per level of every term after
    the first (``x`` holds ``p_k`` consecutive entries per level); the ``X`` rows are unchanged."""
    out = np.array(x, dtype=float, copy=True)
    pos = 0
    for k in range(1, len(term_p)):
        pk, nk = term_p[k], term_nlev[k]
        out[pos: pos + pk * nk] = (x[pos: pos + pk * nk].reshape(nk, pk) @ T[k].T).ravel()
        pos += pk * nk
    return out
