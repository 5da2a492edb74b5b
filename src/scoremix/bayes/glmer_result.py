r"""The result of :func:`scoremix.bayes.bayes_glmer`: a :class:`BayesLmerResult` without a
residual SD, with a link.

Posterior variables: fixed effects under their R names, ``sd_<grp>__<term>``,
``cor_<grp>__<t1>.<t2>`` and ``b_<grp>`` (dims ``(<grp>__level, <grp>__term)``), all on the
link scale.  :meth:`BayesGlmerResult.predict` gives the linear predictor or the mean
response per row with posterior intervals; :meth:`~BayesGlmerResult.loo` /
:meth:`~BayesGlmerResult.waic` are PSIS-LOO/WAIC of the rows (or of whole groups), computed
on the distinct ``(cell, response)`` pairs — every row of a pair has the same pointwise
log-likelihood draws, so PSIS is run once per pair and its result repeated (identical to
running it per row).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import special

from scoremix.bayes.conventions import LEVEL, UNSET, resolve_level, seed_int
from scoremix.bayes.glmm_links import linkinv_np, loglik_np
from scoremix.bayes.memory import check_budget, chunk_size
from scoremix.bayes.result import BayesLmerResult, ClassMomentsError

__all__ = ["BayesGlmerResult"]


@dataclass(repr=False)
class BayesGlmerResult(BayesLmerResult):
    """Posterior of a Bayesian binomial / Poisson GLMM (see the module docstring).

    Extra attributes: ``family``, ``link``, ``formula``, ``level`` (default interval
    probability) and ``model_data`` (:class:`scoremix.bayes.glmer.GlmmModelData`: rows,
    cells, weights).
    """

    family: str = "binomial"
    link: str = "logit"
    formula: str = ""
    level: float = 0.95
    model_data: Any = None

    # ------------------------------------------------------------------ names
    @property
    def sigma_names(self) -> list[str]:
        return []

    @property
    def varcorr(self) -> pd.DataFrame:
        """``grp, var1, var2, vcov, sdcor`` (posterior means) and the ``level`` (95 %) HDI of ``sdcor``;
        no residual row (a GLMM has none)."""
        return self._varcorr_table(residual=False)

    # ------------------------------------------------------------------ linear predictor
    def _beta_draws(self) -> np.ndarray:
        return np.stack([self._flat(n) for n in self.fixef_names], axis=1)          # (S, p)

    def _eta(self, X: np.ndarray, offset: np.ndarray, design: list, idx: np.ndarray,
             random: bool = True) -> np.ndarray:
        """``η`` ``(rows, len(idx))`` of the draws ``idx``."""
        eta = offset[:, None] + X @ self._beta_draws()[idx].T
        if random:
            for t, (codes, Z) in zip(self.spec.terms, design):
                b = self._flat(f"b_{t.group}")[idx]                                   # (s, n_k, p)
                codes = np.asarray(codes)
                ok = codes >= 0
                eff = np.einsum("sip,ip->is", b[:, np.where(ok, codes, 0), :], np.asarray(Z, float))
                eta += np.where(ok[:, None], eff, 0.0)
        return eta

    def _cell_eta(self, idx: np.ndarray) -> np.ndarray:
        c = self.model_data.cells
        return self._eta(c.X, c.offset, list(zip(c.codes, c.Z)), idx)

    def _n_draws(self) -> int:
        post = self.idata.posterior
        return int(post.sizes["chain"] * post.sizes["draw"])

    def _new_design(self, newdata: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, list]:
        spec = self.spec
        if spec.fixed_design is None or spec.random_design is None:
            raise ClassMomentsError("this fit's model frame has no design builders: use newdata=None")
        X = np.asarray(spec.fixed_design(newdata), float)
        design = [(np.asarray(c), np.asarray(z, float)) for c, z in spec.random_design(newdata)]
        off = (np.asarray(spec.offset_design(newdata), float) if spec.offset is not None
               and spec.offset_design is not None else np.zeros(len(newdata)))
        return X, off, design

    def predict(self, newdata: pd.DataFrame | None = None, *, type: str = "response", random: bool = True,
                level: float = LEVEL, summary: bool = True, max_draws: int | None = None,
                max_memory: Any = None) -> pd.DataFrame | np.ndarray:
        r"""Posterior of the linear predictor (``type="link"``) or of the mean response
        :math:`\mu = g^{-1}(\eta)` (``type="response"``) per row.

        ``newdata=None``: the fitted rows; new rows get their random effects by level (a
        level not seen in fitting gets 0, i.e. the population value).  ``random=False``
        drops the random effects (lme4's ``re.form = NA``).  With ``summary=True`` a table of
        ``mean``, ``sd`` and the equal-tailed interval bounds (probability ``level``, default
        the fit's); else the draws ``(rows, draws)``, chain-major (checked against the memory
        budget).
        """
        if type not in ("link", "response"):
            raise ValueError(f"type must be 'link' or 'response', got {type!r}")
        lev = resolve_level(level, UNSET, self.level, "BayesGlmerResult.predict")
        S = self._n_draws()
        idx = np.arange(S) if max_draws is None or max_draws >= S else np.linspace(0, S - 1, max_draws).round().astype(int)
        if newdata is None:
            c = self.model_data.cells
            rows = c.row_cell
            X, off, design = c.X, c.offset, list(zip(c.codes, c.Z))
            index = self.spec.data.index
        else:
            X, off, design = self._new_design(newdata)
            rows = np.arange(X.shape[0])
            index = newdata.index
        if not summary:
            check_budget(8.0 * len(rows) * idx.size, f"the predictions ({len(rows):,} rows × {idx.size} draws)",
                         max_memory, shrink="use summary=True or max_draws=")
        n_unique = X.shape[0]
        chunk = chunk_size(8.0 * idx.size * 4, n_unique, max_memory)
        out = np.empty((n_unique, idx.size)) if not summary else None
        stats = np.empty((n_unique, 4))
        qlo, qhi = (1 - lev) / 2, (1 + lev) / 2
        for r0 in range(0, n_unique, chunk):
            sl = slice(r0, r0 + chunk)
            e = self._eta(X[sl], off[sl], [(np.asarray(cd)[sl], np.asarray(z)[sl]) for cd, z in design], idx, random)
            v = e if type == "link" else linkinv_np(e, self.link)
            if out is not None:
                out[sl] = v
            stats[sl, 0] = v.mean(axis=1)
            stats[sl, 1] = v.std(axis=1, ddof=1) if idx.size > 1 else np.nan
            stats[sl, 2], stats[sl, 3] = np.quantile(v, [qlo, qhi], axis=1)
        if not summary:
            return out[rows]
        lo, hi = f"{qlo * 100:g}%", f"{qhi * 100:g}%"
        return pd.DataFrame(stats[rows], index=index, columns=["mean", "sd", lo, hi])

    # ------------------------------------------------------------------ not for a GLMM
    def class_moments(self, *args: Any, **kwargs: Any) -> pd.DataFrame:
        raise ClassMomentsError("class score moments belong to a score model (bayes_lmer); a GLMM models "
                                "decisions: use predict() or scoremix.bayes_decision_model")

    def model_eer(self, *args: Any, **kwargs: Any) -> pd.DataFrame:
        raise ClassMomentsError("a model EER needs a score model (bayes_lmer); a GLMM models decisions at one "
                                "threshold: use scoremix.bayes_decision_model")

    def contrast(self, *args: Any, **kwargs: Any) -> Any:
        raise ClassMomentsError("EER/DCF contrasts need a score model (bayes_lmer); for subgroup error rates "
                                "use scoremix.bayes_decision_model")

    # ------------------------------------------------------------------ pointwise log-likelihood
    def _row_counts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per row: successes ``k``, failures / exposure ``f`` and the constant of its density."""
        md = self.model_data
        k = md.w * md.y
        if self.family == "binomial":
            f = md.w - k
            const = special.gammaln(md.w + 1) - special.gammaln(k + 1) - special.gammaln(f + 1)
        else:
            f = md.w
            const = -md.w * special.gammaln(md.y + 1)
        return k, f, const

    def _unique_pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Distinct ``(cell, k, f)`` of the rows: ``(cell, k, f, const, row → pair)``."""
        k, f, const = self._row_counts()
        cell = self.model_data.cells.row_cell
        key = pd.DataFrame({"c": cell, "k": k, "f": f})
        inv = key.groupby(["c", "k", "f"], sort=False).ngroup().to_numpy()
        n = int(inv.max()) + 1
        first = np.full(n, -1)
        first[inv[::-1]] = np.arange(len(inv))[::-1]
        return cell[first], k[first], f[first], const[first], inv

    def _pair_loglik(self, max_memory: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """``(loglik (S, pairs), row → pair)``."""
        pc, pk, pf, pconst, inv = self._unique_pairs()
        S = self._n_draws()
        check_budget(8.0 * S * (len(pc) + self.model_data.cells.n_cells),
                     f"the log-likelihood of {len(pc):,} distinct (cell, response) pairs × {S} draws",
                     max_memory, shrink="thin the posterior")
        eta = self._cell_eta(np.arange(S))                                            # (C, S)
        ll = loglik_np(eta[pc], pk[:, None], pf[:, None], self.family, self.link) + pconst[:, None]
        return ll.T, inv

    def log_likelihood(self, group: Any = None, *, integrate: bool = False, add: bool = False,
                       max_memory: Any = None) -> Any:
        """Pointwise (per row) or per-group summed log-likelihood as an ``xarray.Dataset``
        (``(chain, draw, obs | <group>)``); ``add=True`` stores it as ``idata.log_likelihood``."""
        import xarray as xr

        if integrate:
            raise NotImplementedError("integrate=True (random effects integrated out) is available for "
                                      "bayes_lmer fits only")
        ll, inv = self._pair_loglik(max_memory)
        S = ll.shape[0]
        post = self.idata.posterior
        nc, nd = int(post.sizes["chain"]), int(post.sizes["draw"])
        if group is None:
            check_budget(8.0 * S * inv.size, f"the pointwise log-likelihood ({inv.size:,} rows × {S} draws)",
                         max_memory, shrink="use fit.loo() (computed on distinct pairs)")
            arr, dim, coords = ll[:, inv], "obs", np.arange(inv.size)
        else:
            arr, dim, coords = self._grouped(ll, inv, group)
        ds = xr.Dataset({self.spec.response: (("chain", "draw", dim), arr.reshape(nc, nd, -1))},
                        coords={"chain": post["chain"].values, "draw": post["draw"].values, dim: coords})
        if add:
            if "log_likelihood" in self.idata.groups():
                del self.idata["log_likelihood"]
            self.idata.add_groups({"log_likelihood": ds})
        return ds

    def _grouped(self, ll: np.ndarray, inv: np.ndarray, group: Any) -> tuple[np.ndarray, str, np.ndarray]:
        import scipy.sparse as sp

        from scoremix.bayes.elpd import group_codes

        codes, levels, name = group_codes(self, group)
        M = sp.csr_matrix((np.ones(inv.size), (codes, inv)), shape=(len(levels), ll.shape[1]))
        return np.asarray(M @ ll.T).T, name, levels

    def _criterion(self, which: str, group: Any, scale: str, max_memory: Any) -> Any:
        import arviz as az
        import xarray as xr
        from arviz.stats.stats_utils import ELPDData

        from scoremix.bayes.elpd import reff

        ll, inv = self._pair_loglik(max_memory)
        post = self.idata.posterior
        nc, nd = int(post.sizes["chain"]), int(post.sizes["draw"])
        S = nc * nd
        if group is None:
            arr, dim, expand, labels = ll, "obs", inv, np.arange(inv.size)
        else:
            arr, dim, labels = self._grouped(ll, inv, group)
            expand = np.arange(arr.shape[1])
        ds = xr.Dataset({self.spec.response: (("chain", "draw", "u"), arr.reshape(nc, nd, -1))},
                        coords={"chain": post["chain"].values, "draw": post["draw"].values})
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            if which == "loo":
                res = az.loo(az.InferenceData(log_likelihood=ds), pointwise=True, scale=scale, reff=reff(self))
            else:
                res = az.waic(az.InferenceData(log_likelihood=ds), pointwise=True, scale=scale)
        for m in dict.fromkeys(str(w.message) for w in rec):
            warnings.warn(m, UserWarning, stacklevel=3)
        pw_u = np.asarray(res[f"{which}_i"].values)
        # p_eff per unique column: lppd_u - elpd_u (on the log scale); repeated per row
        lppd_u = special.logsumexp(arr, axis=0) - np.log(S)
        elpd_u = pw_u if scale == "log" else (pw_u / -2.0 if scale == "deviance" else -pw_u)
        pw = xr.DataArray(pw_u[expand], dims=[dim], coords={dim: labels})
        v = pw.values
        n = v.size
        total = float(v.sum())
        se = float((n * np.var(v)) ** 0.5)
        p_eff = float(np.sum((lppd_u - elpd_u)[expand]))
        if which == "loo":
            kk = xr.DataArray(np.asarray(res["pareto_k"].values)[expand], dims=[dim], coords={dim: labels})
            good_k = min(1 - 1 / np.log10(S), 0.7)
            return ELPDData(data=[total, se, p_eff, S, n, bool(res["warning"]), pw.rename("loo_i"), kk, scale,
                                  good_k],
                            index=["elpd_loo", "se", "p_loo", "n_samples", "n_data_points", "warning", "loo_i",
                                   "pareto_k", "scale", "good_k"])
        return ELPDData(data=[total, se, p_eff, S, n, bool(res["warning"]), pw.rename("waic_i"), scale],
                        index=["elpd_waic", "se", "p_waic", "n_samples", "n_data_points", "warning", "waic_i",
                               "scale"])

    def loo(self, group: Any = None, *, integrate: bool = False, scale: str = "log", max_memory: Any = None) -> Any:
        """PSIS-LOO per row (``group=None``) or leaving out whole groups (``group="speaker"``, a
        column of the fitted rows or labels per row); ``arviz.ELPDData`` for ``arviz.compare``
        / ``scoremix.bayes_compare``."""
        if integrate:
            raise NotImplementedError("integrate=True is available for bayes_lmer fits only")
        return self._criterion("loo", group, scale, max_memory)

    def waic(self, group: Any = None, *, scale: str = "log", max_memory: Any = None) -> Any:
        """WAIC per row or per group (as :meth:`loo`)."""
        return self._criterion("waic", group, scale, max_memory)

    # ------------------------------------------------------------------ posterior predictive
    def posterior_predictive(self, n_draws: int | None = None, *, seed: Any = 0, max_memory: Any = None,
                             random_seed: Any = UNSET) -> Any:
        """Replicated responses (binomial: successes out of the row's trials; Poisson: counts)
        for ``n_draws`` evenly spaced draws per chain (all if ``None``), stored in
        ``idata.posterior_predictive``; the array is checked against the memory budget first."""
        import xarray as xr

        from scoremix.bayes.conventions import resolve_seed

        s = resolve_seed(UNSET if seed is None else seed, random_seed, "posterior_predictive")
        rng = np.random.default_rng(seed_int(s) if s is not None else None)
        post = self.idata.posterior
        nc, nd = int(post.sizes["chain"]), int(post.sizes["draw"])
        keep = np.arange(nd) if n_draws is None or n_draws >= nd else np.linspace(0, nd - 1, n_draws).round().astype(int)
        n = self.spec.n
        check_budget(8.0 * nc * keep.size * n, f"the posterior predictive ({nc} chains × {keep.size} draws × "
                     f"{n:,} rows)", max_memory, shrink="pass n_draws= (fewer draws per chain)")
        idx = (np.arange(nc)[:, None] * nd + keep[None, :]).ravel()
        mu = linkinv_np(self._cell_eta(idx), self.link)[self.model_data.cells.row_cell]   # (n, s)
        md = self.model_data
        if self.family == "binomial":
            m = np.round(md.w).astype(np.int64)
            rep = rng.binomial(m[:, None], np.clip(mu, 0.0, 1.0))
        else:
            rep = rng.poisson(np.maximum(mu, 0.0) * md.w[:, None])
        arr = rep.T.reshape(nc, keep.size, n).astype(float)
        ds = xr.Dataset({self.spec.response: (("chain", "draw", "obs"), arr)},
                        coords={"chain": post["chain"].values, "draw": post["draw"].values[keep], "obs": np.arange(n)})
        if "posterior_predictive" in self.idata.groups():
            del self.idata["posterior_predictive"]
        self.idata.add_groups({"posterior_predictive": ds})
        return ds

    def ppc(self, kind: str = "kde", n_draws: int = 100, *, seed: Any = 0, max_memory: Any = None,
            **plot_kwargs: Any) -> Any:
        """``arviz.plot_ppc`` of the observed responses against replicates (see
        :meth:`posterior_predictive`); returns the matplotlib axes."""
        import arviz as az

        if "posterior_predictive" not in self.idata.groups():
            self.posterior_predictive(n_draws, seed=seed, max_memory=max_memory)
        plot_kwargs.setdefault("random_seed", 0 if seed is None or isinstance(seed, np.random.Generator)
                               else int(seed))
        return az.plot_ppc(self.idata, kind=kind, var_names=[self.spec.response], **plot_kwargs)

    def __repr__(self) -> str:
        post = self.idata.posterior
        return (f"BayesGlmerResult({self.formula!r}, family={self.family!r}, link={self.link!r}, "
                f"sampler={self.sampler!r}, chains={post.sizes['chain']}, draws={post.sizes['draw']}, "
                f"cells={self.model_data.cells.n_cells}, {self.diagnostics!r})")
