r"""The collapsed model: β and b integrated out analytically.

Model (``ℓ(i)`` = dispersion level of row ``i``, ``w_i`` prior weights):

.. math::

    y = X\beta + Zb + \varepsilon,\quad
    \varepsilon_i \sim N(0, \sigma_{\ell(i)}^2 / w_i),\quad
    b = \Lambda u,\ u \sim N(0, I_q),\quad
    \beta \sim N(m_0, \mathrm{diag}(s_0^2))\ \text{(or flat)},

with ``Λ`` block diagonal (``I_{n_k} ⊗ T_k``, ``Σ_k = T_k T_k^⊤``, *absolute* scale, not
relative to σ as in lme4).  With ``γ = (u, β - m_0)``, ``C = [ZΛ\; X]``, ``ỹ = y - Xm_0``,
``R = diag(σ_{ℓ(i)}^2/w_i)`` and ``P = diag(I_q, s_0^{-2})`` the Cholesky factor of

.. math::

    \Omega = \begin{bmatrix} C^\top R^{-1} C + P & C^\top R^{-1}\tilde y \\
             \tilde y^\top R^{-1} C & \tilde y^\top R^{-1} \tilde y \end{bmatrix}
          = L L^\top,\qquad
    H = \Omega_{[-1,-1]},\ r^2 = L_{last,last}^2

gives the exact marginal likelihood

.. math::

    \log p(y\mid\sigma,\Sigma) = -\tfrac{N - p_{flat}}{2}\log 2\pi
      - \tfrac12\sum_i \log\frac{\sigma_{\ell(i)}^2}{w_i}
      - \tfrac12 \sum_{j\ \text{Gaussian}} \log s_{0j}^2
      - \tfrac12 \log|H| - \tfrac12 r^2 ,

(``p_flat`` = number of flat-prior coefficients; with all β flat this is the REML
likelihood).  ``Ω`` is factored blockwise: the first term's ``n_1`` blocks
``T_1^⊤ D_j T_1 / σ^2 + I`` are factored separately and the remaining
``m × m`` Schur complement densely, so one evaluation (and its gradient) costs
``O(n_1 p_1^3 + n_1 p_1 m^2 + m^3)``, independent of the number of rows.

Given (σ, Σ) the conditional posterior of ``γ`` is ``N(H^{-1}h, H^{-1})``;
:func:`conditional_draws` draws β and b from it exactly for every posterior draw.
"""

from __future__ import annotations

import numpy as np

from scoremix.bayes.suffstats import BlockedSuffStats

__all__ = [
    "rest_lambda_index",
    "collapsed_data",
    "collapsed_loglik_graph",
    "collapsed_constant",
    "conditional_draws",
]

LOG2PI = float(np.log(2.0 * np.pi))


def rest_lambda_index(ss: BlockedSuffStats) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """Positions of the entries of ``Λ_rest`` (terms 2…K, then identity for X and y).

    Returns ``rows, cols, src, diagonal`` where entry ``(rows[e], cols[e])`` of the
    ``m × m`` matrix takes element ``src[e]`` of the vector
    ``concat([T_2.ravel(), …, T_K.ravel(), [1.0]])`` and ``diagonal`` says all rest terms
    have one column (``Λ_rest`` is then diagonal).
    """
    rows, cols, src = [], [], []
    off = 0
    diagonal = True
    for start, nl, p in ss.rest_slices:
        if p > 1:
            diagonal = False
        for a in range(p):
            for b in range(a + 1):
                idx = start + np.arange(nl) * p
                rows.append(idx + a)
                cols.append(idx + b)
                src.append(np.full(nl, off + a * p + b))
        off += p * p
    one = np.arange(ss.x_start, ss.m)
    rows.append(one)
    cols.append(one)
    src.append(np.full(one.size, off))
    return (np.concatenate(rows).astype(np.int64), np.concatenate(cols).astype(np.int64),
            np.concatenate(src).astype(np.int64), diagonal)


def collapsed_constant(ss: BlockedSuffStats, beta_sd: np.ndarray) -> float:
    """Parameter-free part: ``-(N - p_flat)/2 log 2π + ½Σ log w - ½Σ log s_0^2``."""
    s0 = np.asarray(beta_sd, dtype=np.float64)
    gauss = np.isfinite(s0)
    n_flat = int((~gauss).sum())
    return float(-0.5 * (ss.n - n_flat) * LOG2PI + 0.5 * ss.sum_log_w
                 - np.sum(np.log(s0[gauss])))


def _prior_diag(ss: BlockedSuffStats, beta_sd: np.ndarray) -> np.ndarray:
    s0 = np.asarray(beta_sd, dtype=np.float64)
    prec = np.where(np.isfinite(s0), 1.0 / np.where(np.isfinite(s0), s0, 1.0) ** 2, 0.0)
    return np.concatenate([np.ones(ss.x_start), prec, [0.0]])


def collapsed_data(ss: BlockedSuffStats, beta_sd: np.ndarray) -> dict[str, np.ndarray]:
    """The numbers the collapsed likelihood reads, keyed by their ``pm.Data`` names.

    ``ss_A``, ``ss_B``, ``ss_D`` (cross-products of the shifted response), ``ss_n_by``
    (rows per dispersion level), ``beta_prec`` (the diagonal ``P`` padded to ``m``:
    ones for ``u``, ``s_0^{-2}`` for β, 0 for y) and ``loglik_const``.  Their shapes
    depend only on the level counts, so one compiled model serves every refit with the
    same structure.
    """
    return {"ss_A": np.asarray(ss.A, dtype=np.float64), "ss_B": np.asarray(ss.B, dtype=np.float64),
            "ss_D": np.asarray(ss.D, dtype=np.float64), "ss_n_by": np.asarray(ss.n_by, dtype=np.float64),
            "beta_prec": _prior_diag(ss, beta_sd),
            "loglik_const": np.asarray(collapsed_constant(ss, beta_sd), dtype=np.float64)}


def collapsed_loglik_graph(ss: BlockedSuffStats, sigma, Ts, beta_sd: np.ndarray, data=None):
    """PyTensor expression of ``log p(y | σ, Σ)`` (see the module docstring).

    Parameters
    ----------
    ss:
        statistics of the *shifted* response ``y - X m_0``
        (:meth:`BlockedSuffStats.shift_response`).
    sigma:
        ``(L,)`` tensor of residual SDs.
    Ts:
        list of ``(p_k, p_k)`` tensors, ``Σ_k = T_k T_k^⊤``.
    beta_sd:
        prior SDs of β (``inf`` = flat prior).
    data:
        optional mapping of the names of :func:`collapsed_data` to tensors (``pm.Data``)
        holding those numbers; default: the numbers of ``ss`` as constants.  Only the
        structure of ``ss`` (level counts, term sizes) is then baked into the graph.
    """
    import pytensor.tensor as pt
    from pytensor.tensor.slinalg import solve_triangular

    if data is None:
        data = {k: pt.constant(v) for k, v in collapsed_data(ss, beta_sd).items()}
    wl = 1.0 / sigma**2
    A = pt.tensordot(wl, data["ss_A"], axes=1)
    rows, cols, src, diagonal = rest_lambda_index(ss)
    vals = pt.concatenate([T.ravel() for T in Ts[1:]] + [pt.ones((1,), dtype="float64")])
    if diagonal:
        lam = pt.zeros((ss.m,), dtype="float64")
        lam = pt.set_subtensor(lam[rows], vals[src])
        Ar = A * lam[:, None] * lam[None, :]
    else:
        Lam = pt.zeros((ss.m, ss.m), dtype="float64")
        Lam = pt.set_subtensor(Lam[rows, cols], vals[src])
        Ar = Lam.T @ A @ Lam
    S = Ar + pt.diag(data["beta_prec"])
    logdet1 = pt.constant(0.0)
    if ss.n1:
        D = pt.tensordot(wl, data["ss_D"], axes=1)  # (n1, p1, p1)
        B = pt.tensordot(wl, data["ss_B"], axes=1)  # (n1, p1, m)
        T1 = Ts[0]
        if ss.p1 == 1:
            t = T1[0, 0]
            g = t**2 * D[:, 0, 0] + 1.0
            Bl = B[:, 0, :] * lam[None, :] if diagonal else B[:, 0, :] @ Lam
            S = S - t**2 * (Bl.T / g[None, :]) @ Bl
            logdet1 = pt.sum(pt.log(g))
        else:
            G = pt.matmul(pt.matmul(T1.T[None, :, :], D), T1[None, :, :]) + pt.eye(ss.p1)[None, :, :]
            L1 = pt.linalg.cholesky(G)
            E = pt.matmul(T1.T[None, :, :], B)
            E = E * lam[None, None, :] if diagonal else pt.matmul(E, Lam[None, :, :])
            V = solve_triangular(L1, E, lower=True, b_ndim=2)
            Vf = V.reshape((ss.n1 * ss.p1, ss.m))
            S = S - Vf.T @ Vf
            logdet1 = 2.0 * pt.sum(pt.log(pt.diagonal(L1, axis1=1, axis2=2)))
    Lc = pt.linalg.cholesky(S)
    d = pt.diag(Lc)
    logdet = logdet1 + 2.0 * pt.sum(pt.log(d[:-1]))
    r2 = d[-1] ** 2
    return data["loglik_const"] - pt.sum(data["ss_n_by"] * pt.log(sigma)) - 0.5 * logdet - 0.5 * r2


def _lambda_rest_np(ss: BlockedSuffStats, Ts: list[np.ndarray]) -> np.ndarray:
    S = Ts[0].shape[0] if Ts else 1
    rows, cols, src, _ = rest_lambda_index(ss)
    vals = np.concatenate([T.reshape(S, -1) for T in Ts[1:]] + [np.ones((S, 1))], axis=1)
    Lam = np.zeros((S, ss.m, ss.m))
    Lam[:, rows, cols] = vals[:, src]
    return Lam


def conditional_draws(
    ss: BlockedSuffStats,
    sigma: np.ndarray,
    Ts: list[np.ndarray],
    beta_mean: np.ndarray,
    beta_sd: np.ndarray,
    rng: np.random.Generator,
    chunk: int | None = None,
    return_loglik: bool = False,
):
    """Exact draws of β and b from ``p(β, b | σ, Σ, y)``, one per posterior draw.

    Parameters
    ----------
    ss:
        statistics of the shifted response (``y - X m_0``).
    sigma:
        ``(S, L)`` draws of the residual SDs.
    Ts:
        per term ``(S, p_k, p_k)`` draws of ``T_k``.
    beta_mean, beta_sd:
        prior mean ``m_0`` and SDs ``s_0`` of β (``inf`` = flat).
    rng:
        numpy generator (seeded by the caller).
    return_loglik:
        also return ``log p(y | σ, Σ)`` per draw (the collapsed likelihood in numpy).

    Returns
    -------
    beta:
        ``(S, p)``.
    b:
        per term ``(S, n_k, p_k)`` random effects (level-major, R's level order).
    loglik:
        ``(S,)``, only with ``return_loglik=True``.
    """
    sigma = np.atleast_2d(np.asarray(sigma, dtype=np.float64))
    S = sigma.shape[0]
    if chunk is None:
        per = ss.n1 * max(ss.p1, 1) * ss.m + 3 * ss.m * ss.m + 1
        chunk = int(max(1, min(S, 4e6 // per)))
    prior = _prior_diag(ss, beta_sd)
    const = collapsed_constant(ss, beta_sd)
    beta = np.empty((S, ss.p))
    b_out = []
    nlev = [ss.n1] + [nl for _, nl, _ in ss.rest_slices]
    for k, T in enumerate(Ts):
        b_out.append(np.empty((S, nlev[k], T.shape[-1])))
    ll = np.empty(S)
    for s0 in range(0, S, chunk):
        sl = slice(s0, min(S, s0 + chunk))
        n = sl.stop - sl.start
        sig = sigma[sl]
        Tc = [T[sl] for T in Ts]
        wl = 1.0 / sig**2
        A = np.einsum("sl,lab->sab", wl, ss.A)
        Lam = _lambda_rest_np(ss, Tc) if Tc else np.broadcast_to(np.eye(ss.m), (n, ss.m, ss.m))
        Sm = np.einsum("sba,sbc,scd->sad", Lam, A, Lam) + np.diag(prior)[None]
        logdet = np.zeros(n)
        if ss.n1:
            T1 = Tc[0]
            D = np.einsum("sl,ljab->sjab", wl, ss.D)
            B = np.einsum("sl,ljam->sjam", wl, ss.B)
            G = np.einsum("sba,sjbc,scd->sjad", T1, D, T1) + np.eye(ss.p1)
            L1 = np.linalg.cholesky(G)
            E = np.einsum("sba,sjbm,smn->sjan", T1, B, Lam)
            V = np.linalg.solve(L1, E)  # (n, n1, p1, m)
            Vf = V.reshape(n, ss.n1 * ss.p1, ss.m)
            Sm = Sm - np.einsum("sja,sjb->sab", Vf, Vf)
            logdet += 2.0 * np.log(np.diagonal(L1, axis1=2, axis2=3)).sum(axis=(1, 2))
        Lc = np.linalg.cholesky(Sm)
        dc = np.diagonal(Lc, axis1=1, axis2=2)
        logdet += 2.0 * np.log(dc[:, :-1]).sum(axis=1)
        ll[sl] = const - (np.log(sig) * ss.n_by).sum(axis=1) - 0.5 * logdet - 0.5 * dc[:, -1] ** 2
        Lr = Lc[:, :-1, :-1]
        lvec = Lc[:, -1, :-1]
        z = rng.standard_normal((n, ss.m - 1))
        g_rest = np.linalg.solve(np.swapaxes(Lr, 1, 2), (lvec + z)[..., None])[..., 0]
        beta[sl] = beta_mean[None, :] + g_rest[:, ss.x_start:ss.x_start + ss.p]
        if ss.n1:
            z1 = rng.standard_normal((n, ss.n1, ss.p1))
            rhs = V[..., -1] + z1 - np.einsum("sjam,sm->sja", V[..., :-1], g_rest)
            u1 = np.linalg.solve(np.swapaxes(L1, 2, 3), rhs[..., None])[..., 0]
            b_out[0][sl] = np.einsum("sab,sjb->sja", Tc[0], u1)
        for k, (start, nl, p) in enumerate(ss.rest_slices, start=1):
            u = g_rest[:, start:start + nl * p].reshape(n, nl, p)
            b_out[k][sl] = np.einsum("sab,sjb->sja", Tc[k], u)
    if return_loglik:
        return beta, b_out, ll
    return beta, b_out
