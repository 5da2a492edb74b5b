r"""PSIS-LOO and WAIC of a posterior, per trial or per group, in bounded memory.

**Pointwise LOO** (Vehtari, Gelman & Gabry 2017, *Stat. Comput.* 27:1413): for each trial
:math:`\widehat{\mathrm{elpd}}_i = \log \sum_d w_{di}\,p(y_i\mid\theta_d) / \sum_d w_{di}` with
Pareto-smoothed importance ratios :math:`w_{di} \propto 1/p(y_i\mid\theta_d)`; the Pareto
shape :math:`\hat k_i` flags unreliable terms.  The PSIS step is ArviZ's (``arviz.loo``),
applied to chunks of trials, so the ``n × S`` log-likelihood matrix is never held at once;
the totals (``elpd_loo``, its SE :math:`\sqrt{n\,\mathrm{var}(\widehat{\mathrm{elpd}}_i)}`,
``p_loo``) are those ``arviz.loo`` returns on the full matrix (tested).

**Grouped (leave-one-group-out) LOO**: for questions about *new speakers*, the unit left
out is a speaker.  The log-likelihood of group ``g`` in draw ``d`` is the sum over its trials,
:math:`\ell_{dg} = \sum_{i\in g}\log p(y_i\mid\theta_d)` (the trials are conditionally
independent given θ, which contains the group's random effect), and PSIS runs on the
``G × S`` matrix of these sums (Merkle, Furr & Rabe-Hesketh 2019, *Psychometrika* 84:802, on
why the unit of prediction decides the likelihood).  Leaving a whole speaker out moves the
posterior far more than leaving one trial out, so large :math:`\hat k` are common here: the
result's ``warning`` and ``pareto_k`` say so.

**WAIC** (Watanabe 2010): ``arviz.waic`` on the same chunks, pointwise or grouped.

The results are :class:`arviz.ELPDData`, so ``arviz.compare({"m1": fit1.loo(), "m2": fit2.loo()})``
ranks competing specifications (:func:`compare` does exactly that).
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping

import numpy as np
import pandas as pd

from scoremix.bayes.memory import check_budget
from scoremix.bayes.pointwise import PointwiseError, iter_loglik

__all__ = ["LooError", "loo", "waic", "log_likelihood", "group_codes", "compare", "reff"]


class LooError(ValueError):
    """Invalid LOO/WAIC request (names the argument or column)."""


def group_codes(fit: Any, group: Any) -> tuple[np.ndarray, np.ndarray, str]:
    """``(codes (n,), levels, name)`` of a grouping given as a column of the fitted rows or an array."""
    spec = fit.spec
    if isinstance(group, str):
        frame = getattr(spec, "data", None)
        if frame is None or not hasattr(frame, "columns") or group not in frame.columns:
            cols = list(getattr(frame, "columns", []))
            raise LooError(f"group column {group!r} is not in the fitted rows; columns: {cols}; "
                           f"or pass an array of {spec.n} group labels")
        values = frame[group].to_numpy()
        name = group
    else:
        values = np.asarray(group)
        name = getattr(group, "name", None) or "group"
        if values.ndim != 1 or values.shape[0] != spec.n:
            raise LooError(f"group must be a column name or {spec.n} labels (one per fitted row), "
                           f"got shape {values.shape}")
    if pd.isna(values).any():
        raise LooError(f"group {name!r} has missing values in row(s) {np.flatnonzero(pd.isna(values))[:5].tolist()}")
    codes, levels = pd.factorize(values, sort=True)
    return codes.astype(np.int64), np.asarray(levels), str(name)


def reff(fit: Any) -> float:
    """Relative efficiency used by ``arviz.loo``: mean ESS of all posterior values / draws
    (1 for a single chain)."""
    import arviz as az

    post = fit.idata.posterior
    S = post.sizes["chain"] * post.sizes["draw"]
    if post.sizes["chain"] == 1:
        return 1.0
    ess_p = az.ess(post, method="mean")
    return float(np.hstack([ess_p[v].values.ravel() for v in ess_p.data_vars]).mean() / S)


def _blocks(fit: Any, group: Any, max_memory: Any):
    """Yield ``(labels, loglik (S, m))`` blocks of trials or of whole groups."""
    spec = fit.spec
    cells = getattr(fit, "cells", None)
    post = fit.idata.posterior
    S = int(post.sizes["chain"] * post.sizes["draw"])
    if group is None:
        for rows, ll in iter_loglik(spec, post, cells=cells, max_memory=max_memory):
            yield rows, ll
        return
    codes, levels, _ = group_codes(fit, group)
    G = len(levels)
    check_budget(8.0 * G * S, f"the grouped log-likelihood ({G} groups × {S} draws)", max_memory,
                 shrink="group by a coarser column")
    import scipy.sparse as sp

    acc = np.zeros((G, S))
    for rows, ll in iter_loglik(spec, post, cells=cells, max_memory=max_memory):
        # sum each group's trials: sparse (G, m) indicator @ (m, S)
        ind = sp.csr_matrix((np.ones(rows.size), (codes[rows], np.arange(rows.size))), shape=(G, rows.size))
        acc += ind @ ll.T
    yield levels, acc.T


def _dataset(fit: Any, ll: np.ndarray, dim: str, coords: Any):
    import xarray as xr

    post = fit.idata.posterior
    nc, nd = int(post.sizes["chain"]), int(post.sizes["draw"])
    return xr.Dataset({fit.spec.response: (("chain", "draw", dim), ll.reshape(nc, nd, -1))},
                      coords={"chain": post["chain"].values, "draw": post["draw"].values, dim: coords})


def log_likelihood(fit: Any, group: Any = None, *, max_memory: Any = None) -> Any:
    """Pointwise (``group=None``: dims ``(chain, draw, obs)``) or grouped (``(chain, draw,
    <group>)``) log-likelihood as an ``xarray.Dataset``, ready for ``idata.add_groups``.

    The kept array (``8·n·S`` bytes per trial) is checked against the memory budget first.
    """
    post = fit.idata.posterior
    S = int(post.sizes["chain"] * post.sizes["draw"])
    if group is None:
        check_budget(8.0 * fit.spec.n * S, f"the pointwise log-likelihood ({fit.spec.n:,} trials × {S} draws)",
                     max_memory, shrink="use fit.loo() (computed in chunks) or a grouped log-likelihood")
        out = np.empty((S, fit.spec.n))
        for rows, ll in _blocks(fit, None, max_memory):
            out[:, rows] = ll
        return _dataset(fit, out, "obs", np.arange(fit.spec.n))
    levels, acc = next(_blocks(fit, group, max_memory))
    _, _, name = group_codes(fit, group)
    return _dataset(fit, acc, name, levels)


def _criterion(fit: Any, group: Any, which: str, max_memory: Any, scale: str) -> Any:
    import arviz as az
    import xarray as xr
    from arviz.stats.stats_utils import ELPDData

    if fit.transform is not None and getattr(fit, "cells", None) is None:
        raise LooError("this transformation-model fit carries no latent cells; refit with this version")
    r = reff(fit)
    post = fit.idata.posterior
    S = int(post.sizes["chain"] * post.sizes["draw"])
    dim = "obs" if group is None else group_codes(fit, group)[2]
    parts_i, parts_k, p_eff, warned, msgs, n = [], [], 0.0, False, [], 0
    fn = az.loo if which == "loo" else az.waic
    for labels, ll in _blocks(fit, group, max_memory):
        ds = _dataset(fit, ll, dim, labels)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            kw = {"reff": r} if which == "loo" else {}
            res = fn(az.InferenceData(log_likelihood=ds), pointwise=True, scale=scale, **kw)
        msgs.extend(str(w.message) for w in rec)
        warned = warned or bool(res["warning"])
        parts_i.append(res[f"{which}_i"])
        if which == "loo":
            parts_k.append(res["pareto_k"])
        p_eff += float(res[f"p_{which}"])
        n += ll.shape[1]
    for m in dict.fromkeys(msgs):
        warnings.warn(m, UserWarning, stacklevel=3)
    pw = xr.concat(parts_i, dim=dim)
    v = pw.values
    total = float(v.sum())
    se = float((n * np.var(v)) ** 0.5)
    if which == "loo":
        kk = xr.concat(parts_k, dim=dim)
        good_k = min(1 - 1 / np.log10(S), 0.7)
        return ELPDData(data=[total, se, p_eff, S, n, warned, pw.rename("loo_i"), kk, scale, good_k],
                        index=["elpd_loo", "se", "p_loo", "n_samples", "n_data_points", "warning", "loo_i",
                               "pareto_k", "scale", "good_k"])
    return ELPDData(data=[total, se, p_eff, S, n, warned, pw.rename("waic_i"), scale],
                    index=["elpd_waic", "se", "p_waic", "n_samples", "n_data_points", "warning", "waic_i", "scale"])


def loo(fit: Any, group: Any = None, *, scale: str = "log", max_memory: Any = None) -> Any:
    """PSIS-LOO of ``fit`` per trial (``group=None``) or leaving out whole groups
    (``group="speaker"``: a column of the fitted rows, or an array of labels).  Returns
    ``arviz.ELPDData`` (``elpd_loo``, ``se``, ``p_loo``, ``loo_i``, ``pareto_k``, …)."""
    try:
        return _criterion(fit, group, "loo", max_memory, scale)
    except PointwiseError as exc:
        raise LooError(str(exc)) from exc


def waic(fit: Any, group: Any = None, *, scale: str = "log", max_memory: Any = None) -> Any:
    """WAIC per trial or per group, as :func:`loo`; returns ``arviz.ELPDData``."""
    try:
        return _criterion(fit, group, "waic", max_memory, scale)
    except PointwiseError as exc:
        raise LooError(str(exc)) from exc


def compare(fits: Mapping[str, Any], group: Any = None, *, ic: str = "loo", scale: str = "log",
            max_memory: Any = None, **kwargs: Any) -> pd.DataFrame:
    """``arviz.compare`` of competing specifications fitted to the same rows.

    ``fits`` maps names to :class:`~scoremix.bayes.result.BayesLmerResult` (or to ready
    ``ELPDData``); ``group`` as in :func:`loo` (the same grouping for every fit).
    """
    import arviz as az

    if ic not in ("loo", "waic"):
        raise LooError(f"ic must be 'loo' or 'waic', got {ic!r}")
    if len(fits) < 2:
        raise LooError("compare needs at least two fits")
    ns = {k: f.spec.n for k, f in fits.items() if hasattr(f, "spec")}
    if len(set(ns.values())) > 1:
        raise LooError(f"the fits were made on different numbers of rows: {ns}")
    fn = loo if ic == "loo" else waic
    elpd = {k: (fn(f, group, scale=scale, max_memory=max_memory) if hasattr(f, "spec") else f)
            for k, f in fits.items()}
    return az.compare(elpd, ic=ic, scale=scale, **kwargs)
