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
    """``(codes (n,), levels, name)`` of a grouping given as a column of the fitted rows, a
    ``pandas.Series`` indexed like the fitted data (aligned by index label: use it for a
    column the model does not contain, e.g. ``group=df["speaker"]``) or an array of ``n`` labels."""
    spec = fit.spec
    frame = getattr(spec, "data", None)
    if isinstance(group, str):
        if frame is None or not hasattr(frame, "columns") or group not in frame.columns:
            cols = list(getattr(frame, "columns", []))
            raise LooError(f"group column {group!r} is not in the fitted rows (columns: {cols}); pass the column "
                           f"itself, group=data[{group!r}] (aligned by index), or an array of {spec.n} labels")
        values = frame[group].to_numpy()
        name = group
    elif isinstance(group, pd.Series) and frame is not None and hasattr(frame, "index"):
        if not frame.index.isin(group.index).all():
            raise LooError(f"group {group.name!r}: the Series lacks some fitted rows (it is aligned by index label)")
        values = group.loc[frame.index].to_numpy()
        name = str(group.name) if group.name is not None else "group"
    else:
        values = np.asarray(group)
        name = getattr(group, "name", None) or "group"
        if values.ndim != 1 or values.shape[0] != spec.n:
            raise LooError(f"group must be a column name, a Series or {spec.n} labels (one per fitted row), "
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


def _marginal_terms(fit: Any, group: Any) -> list[int]:
    """Indices of the random terms whose grouping factor is the LOO grouping column."""
    if group is None:
        raise LooError("integrate=True needs group= (the grouping factor whose random effects are integrated out)")
    _, _, name = group_codes(fit, group)
    ks = [k for k, t in enumerate(fit.spec.terms) if t.group_factor == name]
    if not ks:
        facs = sorted({t.group_factor for t in fit.spec.terms})
        raise LooError(f"integrate=True: {name!r} is not a grouping factor of the model (factors: {facs})")
    if getattr(fit, "cells", None) is not None:
        raise LooError("integrate=True is for the Gaussian model; a transformation fit has cell likelihoods")
    return ks


def _blocks_integrated(fit: Any, group: str, max_memory: Any):
    r"""Leave-one-group-out log-likelihood with the group's own random effects integrated out.

    For group ``g`` with rows ``R`` and the columns ``Z`` of the terms on ``g`` (covariance
    ``Σ_d``, block diagonal over those terms), the other terms and β held at draw ``d``:
    :math:`y_R \sim N(m_{dR},\, D_{dR} + Z\Sigma_d Z^\top)`, evaluated by Woodbury with
    :math:`A = \Sigma_d^{-1} + Z^\top D^{-1} Z`:
    :math:`-\tfrac12\{|R|\log 2\pi + \sum\log D_{ii} + \log|\Sigma_d| + \log|A|
    + r^\top D^{-1} r - (Z^\top D^{-1}r)^\top A^{-1} Z^\top D^{-1} r\}`, ``r = y − m``.
    """
    import scipy.sparse as sp

    from scoremix.bayes.pointwise import TEMPS, _need_rows, linear_predictor, posterior_arrays, row_sd
    from scoremix.bayes.priors import cor_name, sd_name

    spec = fit.spec
    post = fit.idata.posterior
    _need_rows(spec)
    ks = _marginal_terms(fit, group)
    codes, levels, _ = group_codes(fit, group)
    G = len(levels)
    for k in ks:
        tc = np.asarray(spec.terms[k].codes)
        lo = np.full(G, np.iinfo(np.int64).max)
        hi = np.full(G, -1)
        np.minimum.at(lo, codes, tc)
        np.maximum.at(hi, codes, tc)
        if (lo != hi).any():
            raise LooError(f"integrate=True: the levels of term {spec.terms[k].group!r} do not coincide with "
                           f"the groups of {group!r}")
    q = sum(spec.terms[k].p for k in ks)
    pa = posterior_arrays(spec, post)
    S = pa.S
    check_budget(8.0 * G * S * (2 + q + 2 * q * q), f"the integrated grouped log-likelihood ({G} groups × {S} draws)",
                 max_memory, shrink="use integrate=False")
    # Σ_d and its inverse / log-determinant, block diagonal over the integrated terms
    flat = lambda a: np.asarray(a).reshape((S,) + np.asarray(a).shape[2:])  # noqa: E731
    Sig = np.zeros((S, q, q))
    o = 0
    for k in ks:
        t = spec.terms[k]
        sds = np.stack([flat(post[sd_name(t.group, n)].values) for n in t.term_names], axis=1)
        R = np.broadcast_to(np.eye(t.p), (S, t.p, t.p)).copy()
        for b in range(t.p):
            for a in range(b + 1, t.p):
                R[:, a, b] = R[:, b, a] = flat(post[cor_name(t.group, t.term_names[b], t.term_names[a])].values)
        Sig[:, o:o + t.p, o:o + t.p] = sds[:, :, None] * R * sds[:, None, :]
        o += t.p
    Sig += 1e-12 * np.eye(q)
    Sinv = np.linalg.inv(Sig)
    _, logdet_S = np.linalg.slogdet(Sig)
    Zall = np.concatenate([np.asarray(spec.terms[k].X, dtype=np.float64) for k in ks], axis=1)  # (n, q)
    y = np.asarray(spec.y, dtype=np.float64)
    rDr = np.zeros((G, S))
    ZDr = np.zeros((G, S, q))
    ZDZ = np.zeros((G, S, q, q))
    sumlogD = np.zeros((G, S))
    nR = np.bincount(codes, minlength=G).astype(np.float64)
    per_row = 8.0 * S * (TEMPS + q * q + q)
    from scoremix.bayes.memory import chunk_size

    m = chunk_size(per_row, spec.n, max_memory)
    skip = frozenset(ks)
    for r0 in range(0, spec.n, m):
        rows = np.arange(r0, min(r0 + m, spec.n))
        mu = linear_predictor(spec, pa, rows, skip=skip)
        sd = row_sd(spec, pa, rows)
        dinv = sd ** -2.0  # (S, m)
        r = y[rows][None, :] - mu
        ind = sp.csr_matrix((np.ones(rows.size), (codes[rows], np.arange(rows.size))), shape=(G, rows.size))
        rDr += ind @ (r * r * dinv).T
        sumlogD += ind @ (2.0 * np.log(sd)).T
        Z = Zall[rows]  # (m, q)
        for a in range(q):
            ZDr[:, :, a] += ind @ (Z[:, a][None, :] * dinv * r).T
            for b in range(a, q):
                w = ind @ ((Z[:, a] * Z[:, b])[None, :] * dinv).T
                ZDZ[:, :, a, b] += w
                if b != a:
                    ZDZ[:, :, b, a] += w
    A = Sinv[None] + ZDZ  # (G, S, q, q)
    _, logdet_A = np.linalg.slogdet(A)
    sol = np.linalg.solve(A, ZDr[..., None])[..., 0]
    quad = rDr - np.einsum("gsq,gsq->gs", ZDr, sol)
    ll = -0.5 * (nR[:, None] * np.log(2 * np.pi) + sumlogD + logdet_S[None, :] + logdet_A + quad)
    yield levels, ll.T


def _dataset(fit: Any, ll: np.ndarray, dim: str, coords: Any):
    import xarray as xr

    post = fit.idata.posterior
    nc, nd = int(post.sizes["chain"]), int(post.sizes["draw"])
    return xr.Dataset({fit.spec.response: (("chain", "draw", dim), ll.reshape(nc, nd, -1))},
                      coords={"chain": post["chain"].values, "draw": post["draw"].values, dim: coords})


def log_likelihood(fit: Any, group: Any = None, *, integrate: bool = False, max_memory: Any = None) -> Any:
    """Pointwise (``group=None``: dims ``(chain, draw, obs)``) or grouped (``(chain, draw,
    <group>)``) log-likelihood as an ``xarray.Dataset``, ready for ``idata.add_groups``
    (``integrate=True``: the group's own random effects integrated out, as in :func:`loo`).

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
    levels, acc = next(_blocks_integrated(fit, group, max_memory) if integrate else _blocks(fit, group, max_memory))
    _, _, name = group_codes(fit, group)
    return _dataset(fit, acc, name, levels)


def _criterion(fit: Any, group: Any, which: str, max_memory: Any, scale: str, integrate: bool = False) -> Any:
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
    if integrate and group is None:
        raise LooError("integrate=True needs group= (the grouping factor whose random effects are integrated out)")
    blocks = _blocks_integrated(fit, group, max_memory) if integrate else _blocks(fit, group, max_memory)
    for labels, ll in blocks:
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


def loo(fit: Any, group: Any = None, *, integrate: bool = False, scale: str = "log", max_memory: Any = None) -> Any:
    """PSIS-LOO of ``fit`` per trial (``group=None``) or leaving out whole groups
    (``group="speaker"``: a column of the fitted rows, or an array of labels).  With
    ``integrate=True`` (``group`` a grouping factor of the model) the left-out group's own
    random effects are integrated out analytically (see :func:`_blocks_integrated`), the
    predictive density of a *new* group; its importance ratios are far more stable.  Returns
    ``arviz.ELPDData`` (``elpd_loo``, ``se``, ``p_loo``, ``loo_i``, ``pareto_k``, …)."""
    if getattr(fit, "model_data", None) is not None:  # a bayes_glmer fit: its own (cell-based) LOO
        return fit.loo(group, integrate=integrate, scale=scale, max_memory=max_memory)
    try:
        return _criterion(fit, group, "loo", max_memory, scale, integrate)
    except PointwiseError as exc:
        raise LooError(str(exc)) from exc


def waic(fit: Any, group: Any = None, *, scale: str = "log", max_memory: Any = None) -> Any:
    """WAIC per trial or per group, as :func:`loo`; returns ``arviz.ELPDData``."""
    if getattr(fit, "model_data", None) is not None:  # a bayes_glmer fit
        return fit.waic(group, scale=scale, max_memory=max_memory)
    try:
        return _criterion(fit, group, "waic", max_memory, scale)
    except PointwiseError as exc:
        raise LooError(str(exc)) from exc


def compare(fits: Mapping[str, Any], group: Any = None, *, ic: str = "loo", integrate: bool = False,
            scale: str = "log", max_memory: Any = None, **kwargs: Any) -> pd.DataFrame:
    """``arviz.compare`` of competing specifications fitted to the same rows.

    ``fits`` maps names to :class:`~scoremix.bayes.result.BayesLmerResult` (or to ready
    ``ELPDData``); ``group`` as in :func:`loo` (the same grouping for every fit);
    ``integrate=True`` integrates each left-out group's random effects in the fits that have
    them (a fit without a term on ``group`` has nothing to integrate: its grouped sums are
    already the new-group predictive).
    """
    import arviz as az

    if ic not in ("loo", "waic"):
        raise LooError(f"ic must be 'loo' or 'waic', got {ic!r}")
    if len(fits) < 2:
        raise LooError("compare needs at least two fits")
    ns = {k: f.spec.n for k, f in fits.items() if hasattr(f, "spec")}
    if len(set(ns.values())) > 1:
        raise LooError(f"the fits were made on different numbers of rows: {ns}")
    if integrate and ic != "loo":
        raise LooError("integrate=True is available with ic='loo'")

    def crit(f):
        if ic == "waic":
            return waic(f, group, scale=scale, max_memory=max_memory)
        gname = group_codes(f, group)[2] if group is not None else None
        integ = integrate and any(t.group_factor == gname for t in f.spec.terms)
        return loo(f, group, integrate=integ, scale=scale, max_memory=max_memory)

    elpd = {k: (crit(f) if hasattr(f, "spec") else f) for k, f in fits.items()}
    return az.compare(elpd, ic=ic, scale=scale, **kwargs)
