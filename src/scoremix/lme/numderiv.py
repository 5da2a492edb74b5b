"""Richardson-extrapolated finite differences, as R's ``numDeriv`` computes them.

lmerTest differentiates the deviance and ``Var(β̂)`` numerically with ``numDeriv::hessian``
and ``numDeriv::jacobian``; reproducing their step sizes and extrapolation makes the
Satterthwaite degrees of freedom agree with lmerTest to rounding, also where the deviance is
not smooth (a variance parameter at its bound).

For a step ``h_i = |d·x_i| + ε·1{|x_i| < zero_tol}`` halved ``r`` times (``v = 2``), the
central differences ``D_k = (f(x + h_k e_i) − f(x − h_k e_i)) / (2 h_k)`` are combined by
Richardson's scheme ``D_k ← (4^m D_{k+1} − D_k) / (4^m − 1)``, ``m = 1 … r − 1``, which
removes the ``h², h⁴, …`` error terms.  The Hessian (``numDeriv::genD``) does the same for
``(f(x+h e_i) − 2f(x) + f(x−h e_i)) / h²`` on the diagonal and, off it, for
``(f(x + h_i e_i + h_j e_j) − 2 f(x) + f(x − h_i e_i − h_j e_j) − H_ii h_i² − H_jj h_j²)
/ (2 h_i h_j)``.  Defaults are numDeriv's: ``ε = 1e-4``, ``zero_tol = sqrt(2.2e-16/7e-7)``,
``r = 4``, ``d = 1e-4`` for the Jacobian and ``d = 0.1`` for the Hessian.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = ["richardson_jacobian", "richardson_hessian"]

ZERO_TOL = float(np.sqrt(np.finfo(float).eps / 7e-7))


def _steps(x: np.ndarray, d: float, eps: float) -> np.ndarray:
    return np.abs(d * x) + eps * (np.abs(x) < ZERO_TOL)


def _extrapolate(a: np.ndarray, r: int) -> np.ndarray:
    """Richardson extrapolation over the first axis (``r`` successively halved steps)."""
    a = a.copy()
    for m in range(1, r):
        a = (a[1: r + 1 - m] * 4.0 ** m - a[: r - m]) / (4.0 ** m - 1)
    return a[0]


def richardson_jacobian(f: Callable[[np.ndarray], np.ndarray], x: np.ndarray, d: float = 1e-4,
                        eps: float = 1e-4, r: int = 4) -> np.ndarray:
    """Jacobian ``∂f/∂x`` of a vector-valued ``f`` (``numDeriv::jacobian``, Richardson).

    Returns
    -------
    numpy.ndarray
        ``(len(f(x)), len(x))``.
    """
    x = np.asarray(x, dtype=float)
    n = x.size
    f0 = np.atleast_1d(np.asarray(f(x), dtype=float)).ravel()
    a = np.empty((r, f0.size, n))
    h = _steps(x, d, eps)
    for k in range(r):
        for i in range(n):
            e = np.zeros(n)
            e[i] = h[i]
            a[k, :, i] = (np.ravel(f(x + e)) - np.ravel(f(x - e))) / (2 * h[i])
        h = h / 2
    return _extrapolate(a, r)


def richardson_hessian(f: Callable[[np.ndarray], float], x: np.ndarray, d: float = 0.1,
                       eps: float = 1e-4, r: int = 4) -> np.ndarray:
    """Hessian of a scalar ``f`` (``numDeriv::hessian``: ``genD`` with ``d = 0.1``)."""
    x = np.asarray(x, dtype=float)
    n = x.size
    f0 = float(f(x))
    h0 = _steps(x, d, eps)
    H = np.empty((n, n))
    for i in range(n):
        h = h0.copy()
        a = np.empty(r)
        for k in range(r):
            e = np.zeros(n)
            e[i] = h[i]
            a[k] = (float(f(x + e)) - 2 * f0 + float(f(x - e))) / h[i] ** 2
            h = h / 2
        H[i, i] = _extrapolate(a, r)
    for i in range(n):
        for j in range(i):
            h = h0.copy()
            a = np.empty(r)
            for k in range(r):
                e = np.zeros(n)
                e[i] = h[i]
                e[j] = h[j]
                a[k] = (float(f(x + e)) - 2 * f0 + float(f(x - e)) - H[i, i] * h[i] ** 2
                        - H[j, j] * h[j] ** 2) / (2 * h[i] * h[j])
                h = h / 2
            H[i, j] = H[j, i] = _extrapolate(a, r)
    return H
