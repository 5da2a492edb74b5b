r"""PyMC models: the collapsed model and the full joint model (β and b sampled).

Joint model (same notation as :mod:`scoremix.bayes.collapsed`):

.. math::

    \beta_j \sim \text{prior}_j,\qquad b_{k,j} \sim N(0, \Sigma_k)\ \ (j = 1…n_k),\qquad
    y_i \sim N\!\left(x_i^\top\beta + \textstyle\sum_k z_{k,i}^\top b_{k,g_k(i)},\;
    \sigma_{\ell(i)}^2 / w_i\right).

Two equivalent likelihoods:

* ``likelihood="suffstats"`` — a ``pm.Potential`` with the Gaussian log-density written
  on the blocked cross-products (:mod:`scoremix.bayes.suffstats`): with
  ``e = Z_1 b_1 + R a``, ``a = [b_2 … b_K, β, -1]``,

  .. math::

      \log p(y\mid\cdot) = \tfrac12\textstyle\sum_i \log w_i
        + \sum_\ell \Big[-\tfrac{n_\ell}{2}\log 2\pi - n_\ell\log\sigma_\ell
        - \frac{1}{2\sigma_\ell^2}\big(\sum_j b_{1j}^\top D_{\ell j} b_{1j}
        + 2\sum_j b_{1j}^\top B_{\ell j} a + a^\top A_\ell a\big)\Big];

* ``likelihood="rows"`` — ``pm.Normal`` observed row by row (for checking, and the
  starting point for non-Gaussian extensions);
* ``likelihood="rows"`` with ``cells=(lo, hi)`` — the transformation model with its
  transform fixed (:mod:`scoremix.bayes.transform`): row ``i`` is only known to have its
  latent value in the cell ``(lo_i, hi_i]``, so
  :math:`\log p = \sum_i \log[\Phi((hi_i-\mu_i)/s_i) - \Phi((lo_i-\mu_i)/s_i)]`
  (exact for ties and saturated scores; computed on the upper tail when ``lo_i > 0`` to
  avoid cancellation).

Parameterisation of ``b_k``: centred (``b_k`` is the PyMC variable) when the mean number
of rows per level ``N / n_k ≥ 20`` (the data pin each level down, so the funnel of a
non-centred model would hurt), non-centred (``b_k = z_k T_k^⊤``, ``z_k ~ N(0, I)``)
otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scoremix.bayes.collapsed import collapsed_loglik_graph
from scoremix.bayes.params import VarianceParams, add_variance_params
from scoremix.bayes.priors import PriorError, PriorSet
from scoremix.bayes.suffstats import BlockedSuffStats

__all__ = ["CENTRED_MIN_ROWS_PER_LEVEL", "BuiltModel", "beta_prior_arrays", "build_collapsed_model", "cell_loglik_graph",
           "build_joint_model", "centred_terms", "model_data", "model_signature", "suffstats_data"]

CENTRED_MIN_ROWS_PER_LEVEL = 20.0
LOG2PI = float(np.log(2.0 * np.pi))


@dataclass
class BuiltModel:
    """A PyMC model plus what is needed to read its draws back."""

    model: object
    method: str
    likelihood: str
    centred: list[bool]
    vp: VarianceParams
    priors: PriorSet | None = None


def beta_prior_arrays(spec, ps: PriorSet) -> tuple[np.ndarray, np.ndarray]:
    """Prior means ``m_0`` and SDs ``s_0`` of β (``s_0 = inf`` for a flat prior).

    Raises :class:`PriorError` when a coefficient has a non-Gaussian, non-flat prior
    (the collapsed model needs a Gaussian or flat prior to integrate β exactly).
    """
    m0 = np.zeros(spec.p)
    s0 = np.full(spec.p, np.inf)
    for j, name in enumerate(spec.fixef_names):
        pr = ps.fixef[name]
        if pr.family == "normal":
            m0[j] = float(pr.params["mu"])
            s0[j] = float(pr.params["sigma"])
        elif pr.family != "flat":
            raise PriorError(
                f"method='collapsed' integrates β analytically and needs a normal or flat prior; "
                f"{name!r} has {pr}. Use method='joint' for other families."
            )
    return m0, s0


def centred_terms(spec, centred: bool | dict | None = None) -> list[bool]:
    """Which terms use the centred parameterisation (see the module docstring rule)."""
    out = []
    for t in spec.terms:
        if isinstance(centred, bool):
            out.append(centred)
        elif isinstance(centred, dict) and t.group in centred:
            out.append(bool(centred[t.group]))
        else:
            out.append(spec.n / max(t.n_levels, 1) >= CENTRED_MIN_ROWS_PER_LEVEL)
    return out


def suffstats_data(ss: BlockedSuffStats) -> dict[str, np.ndarray]:
    """The ``pm.Data`` of the joint sufficient-statistic likelihood (shapes: level counts only)."""
    return {"ss_A": np.asarray(ss.A, dtype=np.float64), "ss_B": np.asarray(ss.B, dtype=np.float64),
            "ss_D": np.asarray(ss.D, dtype=np.float64), "ss_n_by": np.asarray(ss.n_by, dtype=np.float64),
            "ss_sum_log_w": np.asarray(ss.sum_log_w, dtype=np.float64)}


def _beta_prior_signature(spec, ps: PriorSet) -> tuple:
    return tuple(ps.fixef[n].family for n in spec.fixef_names)


def _beta_prior_data(spec, ps: PriorSet) -> dict[str, np.ndarray]:
    fams = set(_beta_prior_signature(spec, ps))
    if fams == {"normal"}:
        return {"beta__mu": np.array([ps.fixef[n].params["mu"] for n in spec.fixef_names], dtype=np.float64),
                "beta__sigma": np.array([ps.fixef[n].params["sigma"] for n in spec.fixef_names],
                                        dtype=np.float64)}
    if fams == {"flat"}:
        return {}
    out: dict[str, np.ndarray] = {}
    for j, n in enumerate(spec.fixef_names):
        out.update({k: np.asarray(v) for k, v in ps.fixef[n].data_items(f"beta__{j}").items()})
    return out


def model_signature(spec, ps: PriorSet, ss: BlockedSuffStats | None, method: str, likelihood: str,
                    cent: list[bool]) -> tuple | None:
    """Hashable key of everything a compiled model bakes in (``None``: not cacheable).

    Two fits with equal signatures differ only in ``pm.Data`` values (cross-products, prior
    scales), so the second can reuse the first one's model (:func:`model_data` gives the
    values to set).  The per-row model holds ``N`` rows and is not cached.
    """
    from scoremix.bayes.params import variance_prior_signature

    if likelihood == "rows" or ss is None:
        return None
    struct = (ss.n_disp, ss.n1, ss.p1, tuple(ss.rest_slices), ss.x_start, ss.p, ss.m)
    beta = () if method == "collapsed" else _beta_prior_signature(spec, ps)
    return (method, likelihood, struct, variance_prior_signature(spec, ps), beta, tuple(cent))


def model_data(spec, ps: PriorSet, ss: BlockedSuffStats, method: str) -> dict[str, np.ndarray]:
    """All ``pm.Data`` values of a suffstats model (collapsed or joint) for ``spec``/``ps``."""
    from scoremix.bayes.collapsed import collapsed_data
    from scoremix.bayes.params import variance_prior_data

    out = {k: np.asarray(v, dtype=np.float64) for k, v in variance_prior_data(spec, ps).items()}
    if method == "collapsed":
        m0, s0 = beta_prior_arrays(spec, ps)
        out.update(collapsed_data(ss.shift_response(m0), s0))
    else:
        out.update(suffstats_data(ss))
        out.update(_beta_prior_data(spec, ps))
    return out


def build_collapsed_model(spec, ps: PriorSet, ss: BlockedSuffStats) -> BuiltModel:
    """PyMC model sampling only (σ, SDs, correlations) with the collapsed likelihood.

    The cross-products and prior parameters are ``pm.Data`` (names of
    :func:`model_data`): ``pm.set_data(model_data(...))`` turns the model into that of
    another data set with the same :func:`model_signature`.
    """
    import pymc as pm

    from scoremix.bayes.collapsed import collapsed_data

    m0, s0 = beta_prior_arrays(spec, ps)
    sss = ss.shift_response(m0)
    with pm.Model() as model:
        vp = add_variance_params(spec, ps, as_data=True)
        data = {k: pm.Data(k, v) for k, v in collapsed_data(sss, s0).items()}
        pm.Potential("loglik", collapsed_loglik_graph(sss, vp.sigma, vp.T, s0, data=data))
    return BuiltModel(model, "collapsed", "suffstats", [], vp, ps)


def _beta_rv(spec, ps: PriorSet, as_data: bool = False):
    import pytensor.tensor as pt
    import pymc as pm

    fams = {ps.fixef[n].family for n in spec.fixef_names}
    if fams == {"normal"}:
        vals = _beta_prior_data(spec, ps)
        if as_data:
            mu, sd = pm.Data("beta__mu", vals["beta__mu"]), pm.Data("beta__sigma", vals["beta__sigma"])
        else:
            mu, sd = vals["beta__mu"], vals["beta__sigma"]
        return pm.Normal("beta", mu=mu, sigma=sd, shape=spec.p)
    if fams == {"flat"}:
        return pm.Flat("beta", shape=spec.p)
    parts = [ps.fixef[n].pymc(f"beta__{j}", as_data=as_data) for j, n in enumerate(spec.fixef_names)]
    return pm.Deterministic("beta", pt.stack(parts))


def cell_loglik_graph(mu, sd, lo: np.ndarray, hi: np.ndarray):
    """``Σ_i log[Φ((hi_i − μ_i)/s_i) − Φ((lo_i − μ_i)/s_i)]`` as a pytensor graph.

    Infinite edges are replaced by ``±1e4`` (latent units, residual SD about 1): Φ of such
    values is exactly 0 or 1 in double precision, and the gradients stay finite."""
    import pytensor.tensor as pt

    big = 1e4
    lo = np.clip(np.asarray(lo, dtype=np.float64), -big, big)
    hi = np.clip(np.asarray(hi, dtype=np.float64), -big, big)
    if np.any(hi <= lo):
        raise ValueError("every cell needs hi > lo")
    a = (pt.constant(lo) - mu) / sd
    b = (pt.constant(hi) - mu) / sd
    sqrt2 = np.sqrt(2.0)
    # P = Φ(b) − Φ(a) = ½[erfc(−b/√2) − erfc(−a/√2)] (lower tail) = ½[erfc(a/√2) − erfc(b/√2)] (upper)
    upper = pt.gt(a, 0.0)
    p_lo = 0.5 * (pt.erfc(-b / sqrt2) - pt.erfc(-a / sqrt2))
    p_hi = 0.5 * (pt.erfc(a / sqrt2) - pt.erfc(b / sqrt2))
    p = pt.switch(upper, p_hi, p_lo)
    return pt.log(pt.maximum(p, 1e-300)).sum()


def build_joint_model(spec, ps: PriorSet, ss: BlockedSuffStats | None, likelihood: str = "suffstats",
                      centred: bool | dict | None = None,
                      cells: tuple[np.ndarray, np.ndarray] | None = None) -> BuiltModel:
    """The joint PyMC model with β and b as variables (see the module docstring)."""
    import pymc as pm
    import pytensor.tensor as pt

    if likelihood not in ("suffstats", "rows"):
        raise ValueError(f"likelihood must be 'suffstats' or 'rows', got {likelihood!r}")
    cent = centred_terms(spec, centred)
    as_data = likelihood == "suffstats"
    with pm.Model() as model:
        vp = add_variance_params(spec, ps, as_data=as_data)
        beta = _beta_rv(spec, ps, as_data=as_data)
        bs = []
        for k, t in enumerate(spec.terms):
            if cent[k]:
                if t.p == 1:
                    bk = pm.Normal(f"b__{k}", 0.0, vp.T[k][0, 0], shape=t.n_levels)[:, None]
                else:
                    bk = pm.MvNormal(f"b__{k}", mu=np.zeros(t.p), chol=vp.T[k], shape=(t.n_levels, t.p))
            else:
                zk = pm.Normal(f"z__{k}", 0.0, 1.0, shape=(t.n_levels, t.p))
                bk = pm.Deterministic(f"b__{k}", zk @ vp.T[k].T)
            bs.append(bk)
        sigma = vp.sigma
        if likelihood == "suffstats":
            assert ss is not None
            dd = {k: pm.Data(k, v) for k, v in suffstats_data(ss).items()}
            a = pt.concatenate([bk.ravel() for bk in bs[1:]] + [beta, pt.constant(np.array([-1.0]))])
            Q = pt.dot(pt.dot(dd["ss_A"], a), a)  # (L,)
            if ss.n1:
                b1 = bs[0]
                Dq = (dd["ss_D"] * b1[None, :, :, None] * b1[None, :, None, :]).sum(axis=(1, 2, 3))
                Bq = (pt.dot(dd["ss_B"], a) * b1[None]).sum(axis=(1, 2))
                Q = Q + Dq + 2.0 * Bq
            n_by = dd["ss_n_by"]
            ll = ((-0.5 * LOG2PI * n_by - n_by * pt.log(sigma) - 0.5 * Q / sigma**2).sum()
                  + 0.5 * dd["ss_sum_log_w"])
            pm.Potential("loglik", ll)
        else:
            mu = pt.dot(pt.constant(np.asarray(spec.X, dtype=np.float64)), beta)
            for k, t in enumerate(spec.terms):
                codes = pt.constant(np.asarray(t.codes, dtype=np.int64))
                Xk = np.asarray(t.X, dtype=np.float64)
                mu = mu + (bs[k][codes] * pt.constant(Xk)).sum(axis=1)
            dcodes = (np.zeros(spec.n, dtype=np.int64) if spec.dispersion_codes is None
                      else np.asarray(spec.dispersion_codes, dtype=np.int64))
            w = np.ones(spec.n) if spec.weights is None else np.asarray(spec.weights, dtype=np.float64)
            sd = sigma[pt.constant(dcodes)] / pt.constant(np.sqrt(w))
            if cells is None:
                pm.Normal("y", mu=mu, sigma=sd, observed=np.asarray(spec.y, dtype=np.float64))
            else:
                pm.Potential("loglik_cells", cell_loglik_graph(mu, sd, cells[0], cells[1]))
    return BuiltModel(model, "joint", likelihood, cent, vp, ps)
