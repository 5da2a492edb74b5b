r"""The result of :func:`scoremix.bayes.bayes_lmer`: posterior draws under R's parameter names.

Posterior variables (``idata.posterior``), each over ``(chain, draw)``:

* fixed effects under their R names (``"(Intercept)"``, ``"labelspoof"``);
* ``sd_<grp>__<term>`` (SD of a random-effect column), ``cor_<grp>__<t1>.<t2>``;
* ``sigma`` (residual SD; for a dispersion model the SD of the reference level) and
  ``sigma_<level>`` per dispersion level;
* ``b_<grp>`` with dims ``(<grp>__level, <grp>__term)``: the random effects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from scoremix._deprecate import renamed_kwargs
from scoremix.bayes.conventions import LEVEL, UNSET, resolve_level, resolve_seed
from scoremix.bayes.diagnostics import Diagnostics
from scoremix.bayes.memory import chunk_size
from scoremix.bayes.priors import PriorSet, cor_name, sd_name, sigma_names

__all__ = ["BayesLmerResult", "ClassMomentsError", "POSITIVE_LABELS"]

POSITIVE_LABELS = ("bonafide", "bona fide", "bona-fide", "target", "genuine", "real", "positive",
                   "pos", "1", "true")


class ClassMomentsError(ValueError):
    """Invalid request for class moments / model EER (names the column or value)."""


def _hdi_cols(hdi_prob: float) -> tuple[str, str]:
    lo = (1 - hdi_prob) / 2 * 100
    return f"hdi_{lo:g}%", f"hdi_{100 - lo:g}%"


@dataclass
class BayesLmerResult:
    """Posterior of a Bayesian linear mixed model (see the module docstring for names).

    Attributes
    ----------
    idata:
        ArviZ ``InferenceData`` (``posterior``, ``sample_stats``, ``observed_data`` and,
        on request, ``posterior_predictive``).
    spec:
        the :class:`~scoremix.lme.spec.ModelSpec` that was fitted.
    method, likelihood, sampler:
        how it was fitted.
    priors:
        the resolved :class:`~scoremix.bayes.priors.PriorSet`.
    diagnostics:
        :class:`~scoremix.bayes.diagnostics.Diagnostics` of the scalar parameters.
    wall_time:
        seconds spent sampling (compilation included).
    transform:
        ``bayes_lmer(..., transform="monotone")``: the score → latent map ``h`` (fixed at its
        ML estimate, see :mod:`scoremix.bayes.transform`); everything else is on the latent
        scale.  ``None`` for the Gaussian model.
    """

    idata: Any
    spec: Any
    method: str
    likelihood: str
    sampler: str
    priors: PriorSet
    diagnostics: Diagnostics
    wall_time: float = float("nan")
    centred: list[bool] = field(default_factory=list)
    #: the fixed score → latent map of a transformation model (``None``: Gaussian model)
    transform: Any = None
    #: the latent cells ``(lo, hi)`` of the fitted scores of a transformation model
    cells: Any = field(default=None, repr=False)

    # ------------------------------------------------------------------ names
    @property
    def fixef_names(self) -> list[str]:
        return list(self.spec.fixef_names)

    @property
    def sd_names(self) -> list[str]:
        return [sd_name(t.group, n) for t in self.spec.terms for n in t.term_names]

    @property
    def cor_names(self) -> list[str]:
        out = []
        for t in self.spec.terms:
            for b in range(t.p):
                for a in range(b + 1, t.p):
                    out.append(cor_name(t.group, t.term_names[b], t.term_names[a]))
        return out

    @property
    def sigma_names(self) -> list[str]:
        names = sigma_names(self.spec)
        return names if names == ["sigma"] else ["sigma"] + names

    @property
    def param_names(self) -> list[str]:
        """All scalar parameters in the order fixef, sd, cor, sigma."""
        return self.fixef_names + self.sd_names + self.cor_names + self.sigma_names

    # ------------------------------------------------------------------ access
    def draws(self, name: str) -> np.ndarray:
        """Draws of one posterior variable, shape ``(chain, draw, …)``."""
        post = self.idata.posterior
        if name not in post:
            raise KeyError(f"no posterior variable {name!r}; available: {list(post.data_vars)}")
        return np.asarray(post[name].values)

    def _default_level(self) -> float:
        """The default interval probability of this fit's tables (0.95; a
        ``bayes_glmer(level=)`` fit keeps its own)."""
        return float(getattr(self, "level", 0.95))

    def summary(self, var_names: Sequence[str] | None = None, *, level: float = LEVEL, hdi_prob: float = UNSET,
                **kwargs) -> pd.DataFrame:
        """``arviz.summary`` over the named scalar parameters (R names, see module docstring);
        ``level``: HDI probability (default 0.95 — it was ArviZ's 0.94 before s7; ``hdi_prob=``
        is its deprecated name)."""
        import arviz as az

        lev = resolve_level(level, hdi_prob, self._default_level(), "BayesLmerResult.summary")
        names = list(var_names) if var_names is not None else self.param_names
        return az.summary(self.idata, var_names=names, hdi_prob=lev, **kwargs)

    def _scalar_table(self, names: list[str], hdi_prob: float) -> pd.DataFrame:
        import arviz as az

        lo, hi = _hdi_cols(hdi_prob)
        rows = []
        for n in names:
            d = self.draws(n)
            h = np.asarray(az.hdi(np.ravel(d), hdi_prob=hdi_prob)).ravel()
            rows.append((n, float(d.mean()), float(d.std(ddof=1)), float(h[0]), float(h[1])))
        return pd.DataFrame(rows, columns=["parameter", "mean", "sd", lo, hi]).set_index("parameter")

    @property
    def fixef(self) -> pd.DataFrame:
        """Posterior mean, SD and 95 % HDI of every fixed effect (index: R names)."""
        return self._scalar_table(self.fixef_names, self._default_level())

    @property
    def varcorr(self) -> pd.DataFrame:
        """Like ``as.data.frame(VarCorr(m))``: ``grp, var1, var2, vcov, sdcor`` as posterior
        means (``vcov`` = E[variance or covariance], ``sdcor`` = E[SD or correlation]), plus
        the 95 % HDI of ``sdcor`` (columns ``sdcor_hdi_2.5%``, ``sdcor_hdi_97.5%``)."""
        return self._varcorr_table(residual=True)

    def _varcorr_table(self, residual: bool) -> pd.DataFrame:
        """The rows of :attr:`varcorr`, with the ``Residual`` row only where the model has one."""
        import arviz as az

        rows = []
        lev = self._default_level()
        lo, hi = _hdi_cols(lev)

        def add(grp, v1, v2, vc, sc):
            h = np.asarray(az.hdi(np.ravel(sc), hdi_prob=lev)).ravel()
            rows.append((grp, v1, v2, float(vc.mean()), float(sc.mean()), float(h[0]), float(h[1])))

        for t in self.spec.terms:
            sds = [self.draws(sd_name(t.group, n)) for n in t.term_names]
            for a, n in enumerate(t.term_names):
                add(t.group, n, None, sds[a] ** 2, sds[a])
            for b in range(t.p):
                for a in range(b + 1, t.p):
                    r = self.draws(cor_name(t.group, t.term_names[b], t.term_names[a]))
                    add(t.group, t.term_names[b], t.term_names[a], r * sds[a] * sds[b], r)
        if residual:
            s = self.draws("sigma")
            add("Residual", None, None, s**2, s)
        return pd.DataFrame(rows, columns=["grp", "var1", "var2", "vcov", "sdcor", f"sdcor_{lo}", f"sdcor_{hi}"])

    def ranef(self, group: str) -> pd.DataFrame:
        """Posterior means of the random effects of ``group`` (rows = levels, columns = terms)."""
        d = self.draws(f"b_{group}")
        t = next(t for t in self.spec.terms if t.group == group)
        return pd.DataFrame(d.mean(axis=(0, 1)), index=t.levels, columns=t.term_names)

    # ------------------------------------------------------------------ comparison
    @staticmethod
    def _freq_values(fit: Any) -> dict[str, tuple[float, float]]:
        """``{name: (estimate, se)}`` from an ``LmerResult`` or its ``to_dict()``."""
        out: dict[str, tuple[float, float]] = {}
        get = (lambda k: fit.get(k)) if isinstance(fit, Mapping) else (lambda k: getattr(fit, k, None))
        fe = get("fixef")
        fe = dict(fe.items()) if fe is not None else {}
        se = get("se")
        if se is None:
            vc = get("vcov")
            if vc is not None:
                v = np.asarray(vc, dtype=np.float64)
                se = dict(zip(fe, np.sqrt(np.diag(v))))
        se = dict(se.items()) if se is not None else {}
        for k, v in fe.items():
            out[str(k)] = (float(v), float(se.get(k, np.nan)))
        vc = get("varcorr")
        if vc is not None:
            df = pd.DataFrame(vc)
            for _, r in df.iterrows():
                v1 = r["var1"] if isinstance(r["var1"], str) else None
                v2 = r["var2"] if isinstance(r["var2"], str) else None
                if r["grp"] == "Residual":
                    out.setdefault("sigma", (float(r["sdcor"]), np.nan))
                elif v2 is None and v1 is not None:
                    out[sd_name(r["grp"], v1)] = (float(r["sdcor"]), np.nan)
                elif v1 is not None:
                    out[cor_name(r["grp"], v1, v2)] = (float(r["sdcor"]), np.nan)
        sig = get("sigma")
        if sig is not None:
            out["sigma"] = (float(sig), np.nan)
        sb = get("sigma_by")
        if sb is not None and len(sb):
            for lvl, v in dict(sb).items():
                out[f"sigma_{lvl}"] = (float(v), np.nan)
        return out

    def compare(self, lmer_result: Any, *, level: float = LEVEL, hdi_prob: float = UNSET) -> pd.DataFrame:
        """Side-by-side table of a frequentist fit and this posterior.

        Columns: ``estimate``, ``se`` (frequentist; SE only for fixed effects), ``mean``,
        ``sd``, the HDI bounds, and ``z = (mean - estimate) / sd`` (distance in posterior
        SDs).  ``lmer_result`` is an ``LmerResult`` or its ``to_dict()``.  ``level``: HDI
        probability (default 0.95).
        """
        lev = resolve_level(level, hdi_prob, self._default_level(), "BayesLmerResult.compare")
        freq = self._freq_values(lmer_result)
        post = self._scalar_table(self.param_names, lev)
        est = pd.DataFrame([(n, *freq.get(n, (np.nan, np.nan))) for n in post.index],
                           columns=["parameter", "estimate", "se"]).set_index("parameter")
        out = est.join(post)
        out["z"] = (out["mean"] - out["estimate"]) / out["sd"]
        return out

    # ------------------------------------------------------------------ class moments / EER
    def _flat(self, name: str) -> np.ndarray:
        d = self.draws(name)
        return d.reshape((d.shape[0] * d.shape[1],) + d.shape[2:])

    def _design(self, data: pd.DataFrame | None):
        spec = self.spec
        if data is not None and self._is_fitting_data(data):
            frame = data.loc[spec.data.index]
            _, X, rnd, dcodes, w = self._design(None)
            return frame, X, rnd, dcodes, w
        if data is None:
            X = np.asarray(spec.X, dtype=np.float64)
            rnd = [(np.asarray(t.codes), np.asarray(t.X, dtype=np.float64)) for t in spec.terms]
            dcodes = (np.zeros(spec.n, np.int64) if spec.dispersion_codes is None
                      else np.asarray(spec.dispersion_codes, np.int64))
            w = np.ones(spec.n) if spec.weights is None else np.asarray(spec.weights, dtype=np.float64)
            return spec.data, X, rnd, dcodes, w
        if spec.fixed_design is None or spec.random_design is None:
            raise ClassMomentsError("this ModelSpec has no fixed_design/random_design: pass data=None "
                                    "(the fitted rows) or build the spec with build_model_spec")
        X = np.asarray(spec.fixed_design(data), dtype=np.float64)
        rnd = [(np.asarray(c), np.asarray(x, dtype=np.float64)) for c, x in spec.random_design(data)]
        if spec.dispersion_levels is None:
            dcodes = np.zeros(len(data), np.int64)
        else:
            col = str(spec.dispersion_formula).replace("~", "").strip()
            if col not in data.columns:
                raise ClassMomentsError(f"dispersion column {col!r} is not in data")
            lut = {lvl: i for i, lvl in enumerate(spec.dispersion_levels)}
            vals = data[col].astype(str)
            unknown = sorted(set(vals) - set(lut))
            if unknown:
                raise ClassMomentsError(f"dispersion column {col!r} has levels {unknown} unseen in fitting")
            dcodes = vals.map(lut).to_numpy(np.int64)
        return data, X, rnd, dcodes, np.ones(len(data))

    def _is_fitting_data(self, data: pd.DataFrame) -> bool:
        """``data`` holds the fitted rows (same index labels, same response values): its extra
        columns (e.g. a subgroup not in the formula) are then used with the fitted design."""
        spec = self.spec
        idx = getattr(spec.data, "index", None)
        if idx is None or spec.response not in data.columns or not idx.isin(data.index).all():
            return False
        if data.index.has_duplicates:
            return False
        yv = pd.to_numeric(data.loc[idx, spec.response], errors="coerce").to_numpy(np.float64)
        return bool(np.allclose(yv, np.asarray(spec.y, dtype=np.float64), rtol=0, atol=1e-12))

    @staticmethod
    def _class_vector(data: pd.DataFrame, label: str | None, positive: Any) -> tuple[np.ndarray, str]:
        if label is None:
            if "label" not in data.columns:
                raise ClassMomentsError("pass label=<class column>; data has no column 'label'")
            label = "label"
        if label not in data.columns:
            raise ClassMomentsError(f"class column {label!r} is not in data; columns: {list(data.columns)}")
        col = data[label]
        values = pd.unique(col.dropna())
        if len(values) != 2:
            raise ClassMomentsError(f"class column {label!r} must have exactly 2 values, has {list(values)}")
        if positive is None:
            hits = [v for v in values if str(v).strip().lower() in POSITIVE_LABELS]
            if len(hits) != 1:
                raise ClassMomentsError(f"cannot tell the positive class of {label!r} from {list(values)}; "
                                        f"pass positive=<value>")
            positive = hits[0]
        if positive not in set(values):
            raise ClassMomentsError(f"positive={positive!r} is not a value of {label!r}: {list(values)}")
        return (col == positive).to_numpy(np.int64), label

    @renamed_kwargs(groups="by")
    def class_moments(
        self,
        by: str | Sequence[str] | None = None,
        data: pd.DataFrame | None = None,
        label: str | None = None,
        positive: Any = None,
        random: str = "conditional",
        max_draws: int | None = None,
        max_memory: Any = None,
    ) -> pd.DataFrame:
        r"""Posterior draws of the score mean and SD of each class in each subgroup.

        ``data=None`` uses the fitted rows (model frame); ``data`` that contains the fitted
        rows (same index and response) adds its other columns as possible ``groups``; any
        other ``data`` is treated as new trials (its design is built with the spec's
        encoders; unseen levels get a zero random effect).

        For draw ``d`` and the rows ``i`` of cell (subgroup ``g``, class ``c``) the model's
        score distribution is the mixture of the rows' Gaussians, with moments

        .. math::

            \mu_{gc} = \overline{\mu_i},\qquad
            s_{gc}^2 = \overline{v_i} + \overline{(\mu_i - \mu_{gc})^2},

        where ``random="conditional"`` uses ``μ_i = x_i^⊤β + z_i^⊤b`` (the fitted random
        effects) and ``v_i = σ_{ℓ(i)}^2 / w_i``; ``random="marginal"`` uses
        ``μ_i = x_i^⊤β`` and adds the random-effect variance
        ``Σ_k z_{k,i}^⊤ Σ_k z_{k,i}`` to ``v_i`` (a new speaker / attack).

        The per-trial × per-draw arrays are built in chunks of draws whose working set stays
        within the memory budget (``max_memory=`` / ``$SCOREMIX_MAX_MEMORY``, see
        :mod:`scoremix.bayes.memory`).

        Returns
        -------
        pandas.DataFrame
            long format: the ``groups`` columns, ``class`` (1 = positive, 0 = negative),
            ``draw`` (chain-major flat index), ``mean``, ``sd``, ``n`` (rows in the cell).
        """
        groups = by  # the body's name for by= (renamed API argument)
        if random not in ("conditional", "marginal"):
            raise ClassMomentsError(f"random must be 'conditional' or 'marginal', got {random!r}")
        gcols = [groups] if isinstance(groups, str) else list(groups or [])
        frame, X, rnd, dcodes, w = self._design(data)
        for g in gcols:
            if g not in frame.columns:
                raise ClassMomentsError(f"group column {g!r} is not in data; columns: {list(frame.columns)}")
        yc, _ = self._class_vector(frame, label, positive)
        keys = pd.DataFrame({**{g: frame[g].to_numpy() for g in gcols}, "class": yc})
        cell = keys.groupby(list(keys.columns), sort=True, observed=True).ngroup().to_numpy()
        cells = keys.groupby(list(keys.columns), sort=True, observed=True).size().reset_index(name="n")
        import scipy.sparse as sp

        N = X.shape[0]
        M = sp.csr_matrix((np.ones(N), (cell, np.arange(N))), shape=(len(cells), N))
        ncell = cells["n"].to_numpy(np.float64)
        beta = np.stack([self._flat(n) for n in self.fixef_names], axis=1)
        S = beta.shape[0]
        idx = np.arange(S)
        if max_draws is not None and max_draws < S:
            idx = np.linspace(0, S - 1, max_draws).round().astype(int)
        sig = np.stack([self._flat(n) for n in sigma_names(self.spec)], axis=1)
        bs = [self._flat(f"b_{t.group}") for t in self.spec.terms]
        sds = [np.stack([self._flat(sd_name(t.group, n)) for n in t.term_names], axis=1) for t in self.spec.terms]
        cors = []
        for t in self.spec.terms:
            R = np.broadcast_to(np.eye(t.p), (S, t.p, t.p)).copy()
            for b in range(t.p):
                for a in range(b + 1, t.p):
                    R[:, a, b] = R[:, b, a] = self._flat(cor_name(t.group, t.term_names[b], t.term_names[a]))
            cors.append(R)
        means = np.empty((len(cells), idx.size))
        sdsout = np.empty((len(cells), idx.size))
        # working set per draw: mu, mu², v, the gathered random effects (p columns) and scratch
        pmax = max((t.p for t in self.spec.terms), default=0)
        chunk = chunk_size(8.0 * N * (5 + 2 * pmax), idx.size, max_memory)
        for c0 in range(0, idx.size, chunk):
            ii = idx[c0:c0 + chunk]
            mu = X @ beta[ii].T  # (N, s)
            v = (sig[ii][:, dcodes] ** 2 / w[None, :]).T
            for k, (codes, Xk) in enumerate(rnd):
                ok = codes >= 0
                if random == "conditional":
                    bk = bs[k][ii]  # (s, n_k, p)
                    eff = np.einsum("sip,ip->is", bk[:, np.where(ok, codes, 0), :], Xk)
                    mu += np.where(ok[:, None], eff, 0.0)
                else:
                    Sig = sds[k][ii][:, :, None] * cors[k][ii] * sds[k][ii][:, None, :]
                    v += np.einsum("ip,spq,iq->is", Xk, Sig, Xk)
            m = np.asarray(M @ mu) / ncell[:, None]
            m2 = np.asarray(M @ (mu**2)) / ncell[:, None]
            mv = np.asarray(M @ v) / ncell[:, None]
            means[:, c0:c0 + ii.size] = m
            sdsout[:, c0:c0 + ii.size] = np.sqrt(np.maximum(m2 - m**2, 0.0) + mv)
        rep = cells.loc[cells.index.repeat(idx.size)].reset_index(drop=True)
        rep["draw"] = np.tile(idx, len(cells))
        rep["mean"] = means.ravel()
        rep["sd"] = sdsout.ravel()
        return rep[gcols + ["class", "draw", "mean", "sd", "n"]]

    @renamed_kwargs(groups="by")
    def model_eer(
        self,
        by: str | Sequence[str] | None = None,
        data: pd.DataFrame | None = None,
        *,
        label: str | None = None,
        positive: Any = None,
        random: str = "conditional",
        summary: bool = False,
        max_draws: int | None = None,
        level: float = LEVEL,
        hdi_prob: float = UNSET,
    ) -> pd.DataFrame:
        r"""Model-based EER per posterior draw (and subgroup):
        :math:`\Phi(-(\mu_1-\mu_0)/(\sigma_0+\sigma_1))` from :meth:`class_moments`.

        Returns the draws (``groups`` columns, ``draw``, ``eer``) or, with ``summary=True``,
        per subgroup ``mean``, ``sd`` and the HDI bounds (probability ``level``, default
        0.95; ``hdi_prob=`` is its deprecated name) of the EER.  Options after ``data`` are
        keyword-only.
        """
        groups = by  # the body's name for by= (renamed API argument)
        from scoremix.predictive.mixture import gaussian_eer

        hdi_prob = resolve_level(level, hdi_prob, self._default_level(), "BayesLmerResult.model_eer")
        gcols = [groups] if isinstance(groups, str) else list(groups or [])
        mom = self.class_moments(by=gcols, data=data, label=label, positive=positive,
                                 random=random, max_draws=max_draws)
        wide = mom.pivot_table(index=gcols + ["draw"], columns="class", values=["mean", "sd"])
        missing = [c for c in (0, 1) if ("mean", c) not in wide.columns]
        if missing or wide.isna().any().any():
            raise ClassMomentsError("every subgroup needs trials of both classes to compute an EER")
        eer = gaussian_eer(mean_neg=wide[("mean", 0)].to_numpy(), mean_pos=wide[("mean", 1)].to_numpy(),
                           sd_neg=wide[("sd", 0)].to_numpy(), sd_pos=wide[("sd", 1)].to_numpy())
        out = wide.index.to_frame(index=False)
        out["eer"] = np.asarray(eer, dtype=np.float64)
        if not summary:
            return out
        import arviz as az

        lo, hi = _hdi_cols(hdi_prob)

        def agg(e: pd.Series) -> pd.Series:
            h = np.asarray(az.hdi(e.to_numpy(), hdi_prob=hdi_prob)).ravel()
            return pd.Series({"mean": e.mean(), "sd": e.std(ddof=1), lo: h[0], hi: h[1]})

        if not gcols:
            return agg(out["eer"]).to_frame().T
        return out.groupby(gcols)["eer"].apply(agg).unstack()

    # ------------------------------------------------------------------ checks and comparison
    def posterior_predictive(self, n_draws: int | None = None, *, seed: Any = 0, max_memory: Any = None,
                             random_seed: Any = UNSET) -> Any:
        r"""Replicated scores :math:`y^{rep} = X\beta + Zb + \varepsilon` of ``n_draws`` evenly
        spaced draws per chain (all if ``None``), stored in (and returned from)
        ``idata.posterior_predictive`` — the one ``InferenceData`` of this fit.

        The ``chains × n_draws × n`` array is estimated against the memory budget before it is
        allocated (:class:`~scoremix.bayes.memory.MemoryBudgetError` names ``max_memory=``).
        """
        from scoremix.bayes.conventions import seed_int
        from scoremix.bayes.pointwise import posterior_predictive_dataset

        if self.transform is not None:
            raise ClassMomentsError("posterior predictive replicates of a transformation model would be latent; "
                                    "not available with a transform")
        s = resolve_seed(UNSET if seed is None else seed, random_seed, "posterior_predictive")
        rng = np.random.default_rng(seed_int(s) if s is not None else None)
        ds = posterior_predictive_dataset(self.spec, self.idata.posterior, rng, n_draws=n_draws,
                                          max_memory=max_memory)
        if "posterior_predictive" in self.idata.groups():
            del self.idata["posterior_predictive"]
        self.idata.add_groups({"posterior_predictive": ds})
        return ds

    def check(self, *, n_draws: int = 100, seed: Any = 0, alpha: float = 0.05, max_memory: Any = None) -> Any:
        """Sampler diagnostics and posterior predictive p-values with advice
        (:func:`scoremix.bayes.model_check.bayes_check`)."""
        from scoremix.bayes.model_check import bayes_check  # s5postfit2
        return bayes_check(self, n_draws=n_draws, seed=seed, alpha=alpha, max_memory=max_memory)

    def ppc(self, kind: str = "kde", n_draws: int = 100, *, seed: Any = 0, max_memory: Any = None,
            **plot_kwargs: Any) -> Any:
        """Posterior predictive check: ``arviz.plot_ppc`` of the observed scores against
        replicated scores.

        Replicates are drawn for ``n_draws`` evenly spaced draws per chain unless
        ``idata.posterior_predictive`` already holds them (``bayes_lmer(...,
        posterior_predictive=True)`` or :meth:`posterior_predictive`).  ``kind`` and
        ``plot_kwargs`` go to ``arviz.plot_ppc`` (``"kde"``, ``"cumulative"``, ``"scatter"``).
        Returns its matplotlib axes.
        """
        import arviz as az

        if "observed_data" not in self.idata.groups() or self.spec.response not in self.idata.observed_data \
                or self.idata.observed_data[self.spec.response].size != self.spec.n:
            raise ClassMomentsError("ppc needs the observed scores; this fit holds none (Dask input)")
        if "posterior_predictive" not in self.idata.groups():
            self.posterior_predictive(n_draws, seed=seed, max_memory=max_memory)
        plot_kwargs.setdefault("random_seed", 0 if seed is None or isinstance(seed, np.random.Generator)
                               else int(seed))
        return az.plot_ppc(self.idata, kind=kind, var_names=[self.spec.response], **plot_kwargs)

    def log_likelihood(self, group: Any = None, *, integrate: bool = False, add: bool = False,
                       max_memory: Any = None) -> Any:
        """Pointwise (``group=None``) or per-group summed log-likelihood, ``xarray.Dataset`` over
        ``(chain, draw, obs | <group>)`` (see :mod:`scoremix.bayes.elpd`); with ``add=True`` it
        also becomes ``idata.log_likelihood`` (for ``arviz.loo(fit.idata)``).  The kept array is
        checked against the memory budget first; :meth:`loo` never keeps it."""
        from scoremix.bayes.elpd import log_likelihood

        ds = log_likelihood(self, group, integrate=integrate, max_memory=max_memory)
        if add:
            if "log_likelihood" in self.idata.groups():
                del self.idata["log_likelihood"]
            self.idata.add_groups({"log_likelihood": ds})
        return ds

    def loo(self, group: Any = None, *, integrate: bool = False, scale: str = "log", max_memory: Any = None) -> Any:
        """PSIS-LOO per trial, or leaving out whole groups (``group="speaker"``; ``integrate=True``
        integrates the left-out group's random effects), computed in chunks
        (:func:`scoremix.bayes.elpd.loo`); an ``arviz.ELPDData`` for ``arviz.compare``."""
        from scoremix.bayes.elpd import loo

        return loo(self, group, integrate=integrate, scale=scale, max_memory=max_memory)

    def waic(self, group: Any = None, *, scale: str = "log", max_memory: Any = None) -> Any:
        """WAIC per trial or per group (:func:`scoremix.bayes.elpd.waic`)."""
        from scoremix.bayes.elpd import waic

        return waic(self, group, scale=scale, max_memory=max_memory)

    def contrast(self, by: str, data: pd.DataFrame | None = None, **kwargs: Any) -> Any:
        """Posterior EER / min-DCF contrasts between the levels of ``by``
        (:func:`scoremix.bayes.contrasts.posterior_contrasts`)."""
        from scoremix.bayes.contrasts import posterior_contrasts

        return posterior_contrasts(self, by, data, **kwargs)

    def __repr__(self) -> str:
        post = self.idata.posterior
        return (f"BayesLmerResult({self.spec.formula!r}, method={self.method!r}, likelihood="
                f"{self.likelihood!r}, sampler={self.sampler!r}, chains={post.sizes['chain']}, "
                f"draws={post.sizes['draw']}, {self.diagnostics!r})")
