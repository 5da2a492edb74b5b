r"""Variance parameters shared by the collapsed and the joint PyMC models.

For every random term ``k`` with ``p_k`` columns the covariance of a level's effect
vector is

.. math::

    \Sigma_k = \mathrm{diag}(\mathrm{sd}_k)\, R_k\, \mathrm{diag}(\mathrm{sd}_k),
    \qquad T_k = \mathrm{diag}(\mathrm{sd}_k)\, \mathrm{chol}(R_k),\quad
    \Sigma_k = T_k T_k^\top,

with ``R_k ~ LKJ(eta)`` for ``p_k ≥ 2`` (``T_k = sd`` for ``p_k = 1``), and the
residual SD of dispersion level ``ℓ`` is ``σ_ℓ`` (one ``σ`` for a homoscedastic model):
``ε_i ~ N(0, σ_{ℓ(i)}^2 / w_i)``.

Internal PyMC names (``sigma__<l>``, ``sd__<k>__<a>``, ``corr__<k>`` (packed) and
``corrmat__<k>`` (the matrix)) are index-based so
any level or term label is safe; :mod:`scoremix.bayes.result` maps them back to R names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scoremix.bayes.priors import Prior, PriorSet, sd_name, sigma_names

__all__ = ["VarianceParams", "add_variance_params", "variance_draws", "variance_prior_data",
           "variance_prior_signature"]


@dataclass
class VarianceParams:
    """Handles of the PyTensor variables created by :func:`add_variance_params`."""

    sigma: object  # (L,) tensor of residual SDs
    T: list  # per term: (p_k, p_k) lower-triangular tensor, Σ_k = T_k T_k'


def _variance_priors(spec, ps: PriorSet) -> list[tuple[str, Prior]]:
    """``(internal name, prior)`` of every scalar variance parameter, in model order."""
    out = [(f"sigma__{i}", ps.sigma[name]) for i, name in enumerate(sigma_names(spec))]
    for k, t in enumerate(spec.terms):
        out += [(f"sd__{k}__{a}", ps.sd[sd_name(t.group, term)]) for a, term in enumerate(t.term_names)]
    return out


def variance_prior_data(spec, ps: PriorSet) -> dict[str, float]:
    """Values of the ``pm.Data`` prior parameters created by ``add_variance_params(as_data=True)``."""
    out: dict[str, float] = {}
    for name, pr in _variance_priors(spec, ps):
        out.update(pr.data_items(name))
    return out


def variance_prior_signature(spec, ps: PriorSet) -> tuple:
    """What a compiled model fixes about the variance priors: families and LKJ ``eta``."""
    fams = tuple((name, pr.family) for name, pr in _variance_priors(spec, ps))
    etas = tuple(float(ps.cor[f"cor_{t.group}"].params["eta"]) for t in spec.terms if t.p > 1)
    return fams, etas


def add_variance_params(spec, ps: PriorSet, as_data: bool = False) -> VarianceParams:
    """Create σ, the per-term SDs and LKJ correlations in the current PyMC model.

    With ``as_data=True`` the prior parameters are ``pm.Data`` (see
    :func:`variance_prior_data`); the LKJ ``eta`` stays a constant.
    """
    import pymc as pm
    import pytensor.tensor as pt

    pri = dict(_variance_priors(spec, ps))
    sig = [pri[f"sigma__{i}"].pymc(f"sigma__{i}", as_data=as_data) for i in range(len(sigma_names(spec)))]
    sigma = pt.stack(sig)
    Ts = []
    for k, t in enumerate(spec.terms):
        sds = [pri[f"sd__{k}__{a}"].pymc(f"sd__{k}__{a}", as_data=as_data) for a in range(t.p)]
        if t.p == 1:
            Ts.append(pt.reshape(sds[0], (1, 1)))
        else:
            eta = float(ps.cor[f"cor_{t.group}"].params["eta"])
            R = pm.LKJCorr(f"corr__{k}", n=t.p, eta=eta, return_matrix=True)
            R = pm.Deterministic(f"corrmat__{k}", R)
            Lr = pt.linalg.cholesky(R)
            Ts.append(pt.stack(sds)[:, None] * Lr)
    return VarianceParams(sigma, Ts)


def variance_draws(spec, posterior) -> tuple[np.ndarray, list[np.ndarray]]:
    """Stack draws of σ and ``T_k`` from a posterior ``xarray.Dataset`` of the internal names.

    Returns
    -------
    sigma:
        ``(S, L)`` residual SDs, ``S = chains × draws`` (chain-major).
    T:
        per term ``(S, p_k, p_k)`` lower-triangular factors.
    """

    def flat(name: str) -> np.ndarray:
        v = np.asarray(posterior[name].values, dtype=np.float64)
        return v.reshape((v.shape[0] * v.shape[1],) + v.shape[2:])

    L = len(sigma_names(spec))
    sigma = np.stack([flat(f"sigma__{i}") for i in range(L)], axis=1)
    Ts = []
    for k, t in enumerate(spec.terms):
        sds = np.stack([flat(f"sd__{k}__{a}") for a in range(t.p)], axis=1)
        if t.p == 1:
            Ts.append(sds[:, :, None])
        else:
            R = flat(f"corrmat__{k}")
            Lr = np.linalg.cholesky(R)
            Ts.append(sds[:, :, None] * Lr)
    return sigma, Ts
