r"""Per-trial, per-draw quantities of a posterior, computed in chunks within a memory budget.

For posterior draw ``d`` (chain-major flat index over ``S`` draws) and fitted trial ``i``

.. math::

    \mu_{di} = x_i^\top\beta_d + \sum_k z_{ki}^\top b_{d,k,g_k(i)},\qquad
    s_{di} = \sigma_{d,\ell(i)}/\sqrt{w_i},

the pointwise log-likelihood is :math:`\log p(y_i\mid\theta_d) = \log\phi((y_i-\mu_{di})/s_{di}) - \log s_{di}`
for the Gaussian model, and for a transformation model with the fixed latent cell
:math:`(l_i, u_i]` of the observed score :math:`\log\{\Phi((u_i-\mu_{di})/s_{di}) - \Phi((l_i-\mu_{di})/s_{di})\}`
(the probability of the observed score; not a density, so not comparable with a Gaussian
model's log-likelihood).  Replicated scores are :math:`y^{rep}_{di} = \mu_{di} + s_{di}\varepsilon_{di}`.

Nothing here keeps an ``n × S`` array unless the caller asks for it; the chunk sizes come from
:mod:`scoremix.bayes.memory`.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from scoremix.bayes.memory import check_budget, chunk_size, format_bytes
from scoremix.bayes.priors import sigma_names

__all__ = ["PointwiseError", "PosteriorArrays", "posterior_arrays", "linear_predictor", "row_sd",
           "loglik_rows", "iter_loglik", "posterior_predictive_dataset", "TEMPS"]

#: number of ``(draws × rows)`` float64 temporaries a chunk holds at once (mean, sd, result, scratch)
TEMPS = 5


class PointwiseError(ValueError):
    """Per-trial posterior quantities need the fitted rows (not available for this fit)."""


class PosteriorArrays:
    """Flat ``(S, …)`` views of the parameters a linear predictor needs (draws stored once:
    these are reshapes of ``idata.posterior``, not copies, where the layout allows)."""

    def __init__(self, spec: Any, post: Any, draw_index: np.ndarray | None = None) -> None:
        nc, nd = int(post.sizes["chain"]), int(post.sizes["draw"])
        self.n_chains, self.n_draws_per_chain = nc, nd

        def flat(name: str) -> np.ndarray:
            a = np.asarray(post[name].values)
            a = a.reshape((nc * nd,) + a.shape[2:])
            return a if draw_index is None else a[draw_index]

        self.beta = np.stack([flat(n) for n in spec.fixef_names], axis=1) if spec.p else np.zeros((nc * nd, 0))
        self.bs = [flat(f"b_{t.group}") for t in spec.terms]
        self.sigma = np.stack([flat(n) for n in sigma_names(spec)], axis=1)
        self.S = self.beta.shape[0] if draw_index is None else int(np.asarray(draw_index).size)


def posterior_arrays(spec: Any, post: Any, draw_index: np.ndarray | None = None) -> PosteriorArrays:
    return PosteriorArrays(spec, post, draw_index)


def _need_rows(spec: Any) -> None:
    X = getattr(spec, "X", None)
    if X is None or getattr(spec, "y", None) is None or len(np.asarray(spec.y)) != spec.n:
        raise PointwiseError("per-trial posterior quantities (log-likelihood, LOO, replicates) need the fitted "
                             "rows; this fit was made from summed statistics (Dask input) and holds none")


def linear_predictor(spec: Any, pa: PosteriorArrays, rows: np.ndarray, draws: slice | np.ndarray = slice(None),
                     skip: frozenset = frozenset()) -> np.ndarray:
    r""":math:`\mu_{di}` for the fitted ``rows`` and the ``draws`` of ``pa``: ``(len(draws), len(rows))``
    (without the random terms whose indices are in ``skip``)."""
    X = np.asarray(spec.X, dtype=np.float64)[rows]
    mu = pa.beta[draws] @ X.T
    for k, t in enumerate(spec.terms):
        if k in skip:
            continue
        codes = np.asarray(t.codes)[rows]
        Xk = np.asarray(t.X, dtype=np.float64)[rows]
        bk = pa.bs[k][draws]  # (s, L, p)
        ok = codes >= 0
        eff = np.einsum("sip,ip->si", bk[:, np.where(ok, codes, 0), :], Xk)
        mu += np.where(ok[None, :], eff, 0.0)
    return mu


def row_sd(spec: Any, pa: PosteriorArrays, rows: np.ndarray, draws: slice | np.ndarray = slice(None)
           ) -> np.ndarray:
    r""":math:`s_{di} = \sigma_{d,\ell(i)}/\sqrt{w_i}`: ``(len(draws), len(rows))``."""
    dcodes = (np.zeros(len(rows), np.int64) if spec.dispersion_codes is None
              else np.asarray(spec.dispersion_codes, np.int64)[rows])
    sd = pa.sigma[draws][:, dcodes]
    if spec.weights is not None:
        sd = sd / np.sqrt(np.asarray(spec.weights, dtype=np.float64)[rows])[None, :]
    return sd


def _log_interval_prob(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    r""":math:`\log(\Phi(b) - \Phi(a))` for ``a < b`` without cancellation (upper tail mirrored)."""
    from scipy.special import log_ndtr

    flip = a > 0
    lo = np.where(flip, -b, a)
    hi = np.where(flip, -a, b)
    lhi, llo = log_ndtr(hi), log_ndtr(lo)
    with np.errstate(divide="ignore"):
        return lhi + np.log1p(-np.exp(np.minimum(llo - lhi, 0.0)))


def loglik_rows(spec: Any, pa: PosteriorArrays, rows: np.ndarray, cells: tuple[np.ndarray, np.ndarray] | None
                ) -> np.ndarray:
    """Pointwise log-likelihood ``(S, len(rows))`` (see the module docstring)."""
    mu = linear_predictor(spec, pa, rows)
    sd = row_sd(spec, pa, rows)
    if cells is None:
        y = np.asarray(spec.y, dtype=np.float64)[rows]
        z = (y[None, :] - mu) / sd
        return -0.5 * z * z - np.log(sd) - 0.5 * np.log(2 * np.pi)
    lo = np.asarray(cells[0], dtype=np.float64)[rows]
    hi = np.asarray(cells[1], dtype=np.float64)[rows]
    return _log_interval_prob((lo[None, :] - mu) / sd, (hi[None, :] - mu) / sd)


def iter_loglik(spec: Any, post: Any, cells: tuple[np.ndarray, np.ndarray] | None = None,
                max_memory: Any = None, order: np.ndarray | None = None
                ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield ``(rows, loglik (S, len(rows)))`` over the fitted rows (in ``order`` if given),
    each chunk's working set within the memory budget."""
    _need_rows(spec)
    pa = posterior_arrays(spec, post)
    n = spec.n
    per_row = 8.0 * pa.S * (TEMPS + max((t.p for t in spec.terms), default=0))
    check_budget(per_row, f"the pointwise log-likelihood of one trial over {pa.S} draws", max_memory,
                 shrink="use fewer draws")
    m = chunk_size(per_row, n, max_memory)
    idx = np.arange(n) if order is None else np.asarray(order)
    for r0 in range(0, n, m):
        rows = idx[r0:r0 + m]
        yield rows, loglik_rows(spec, pa, rows, cells)


def posterior_predictive_dataset(spec: Any, post: Any, rng: np.random.Generator, n_draws: int | None = None,
                                 max_memory: Any = None) -> Any:
    """``xarray.Dataset`` of replicated scores ``(chain, draw, obs)`` for ``n_draws`` evenly spaced
    draws per chain (all if ``None``); the kept array is checked against the memory budget
    before it is allocated, and filled chunk by chunk over draws."""
    import xarray as xr

    _need_rows(spec)
    nc, nd = int(post.sizes["chain"]), int(post.sizes["draw"])
    keep = nd if n_draws is None else int(min(max(1, n_draws), nd))
    di = np.linspace(0, nd - 1, keep).round().astype(int)
    n = spec.n
    check_budget(8.0 * nc * keep * n,
                 f"posterior predictive replicates ({nc} chain(s) × {keep} draws × {n:,} trials)", max_memory,
                 shrink="ask for fewer replicate draws (ppc(n_draws=...))")
    flat_idx = (np.arange(nc)[:, None] * nd + di[None, :]).ravel()
    pa = posterior_arrays(spec, post, flat_idx)
    yrep = np.empty((nc * keep, n))
    rows = np.arange(n)
    per_draw = 8.0 * n * (TEMPS + max((t.p for t in spec.terms), default=0))
    step = chunk_size(per_draw, nc * keep, max_memory)
    for s0 in range(0, nc * keep, step):
        sl = slice(s0, min(s0 + step, nc * keep))
        mu = linear_predictor(spec, pa, rows, sl)
        mu += row_sd(spec, pa, rows, sl) * rng.standard_normal(mu.shape)
        yrep[sl] = mu
    return xr.Dataset({spec.response: (("chain", "draw", "obs"), yrep.reshape(nc, keep, n))},
                      coords={"chain": post["chain"].values, "draw": post["draw"].values[di]},
                      attrs={"note": f"{keep} of {nd} draws per chain ({format_bytes(yrep.nbytes)})"})
