r"""Bayesian location-scale and stratified transformation models: :func:`bayes_locscale`,
:func:`bayes_score_model`.

The model is the frequentist :mod:`scoremix.locscale` model (one increasing transform
:math:`h_s` per stratum = class × ``strata`` levels; speaker location and log-SD effects per
class, optionally correlated or heavy-tailed; a speaker × stratum location effect), fitted by
NUTS on per-cell sufficient statistics (:mod:`scoremix.bayes.locscale_model`).

**The transforms are fixed by default.**  Every :math:`h_s` is fixed at the
maximum-likelihood estimate of the frequentist fit (its marginal-matched edges), and every
trial enters through the first two moments of its latent value given its score's cell under
that fit (the E-step of :mod:`scoremix.locscale.latent`; for untied scores the cell midpoint).
A Gaussian location-scale model (``LocScaleSpec(transform=False)``) uses the scores
themselves.  What fixing :math:`h_s` ignores is the sampling error of the transforms: a
stratum's transform is estimated from all of its trials, and the EER depends on it only
through where the class mixtures cross; ``benchmarks/bayes_la_transform.py --sensitivity``
measures the change of the posterior EER interval when :math:`h_s` is re-estimated on
parametric-bootstrap replicates (``docs/bayes-locscale.md``).
``posterior_eer(..., transform_uncertainty="bootstrap", n_transform=K, seed=)`` (and
``posterior_dcf``) pools the posteriors of K such refits
(:mod:`scoremix.bayes.locscale_pool`), folding the transforms' sampling error in.
``bayes_locscale(..., transform="sampled")`` samples a monotone Bernstein deformation of every
ML transform jointly with the model (:mod:`scoremix.bayes.locscale_sampled`); measured in
``docs/bayes-locscale.md`` (it does not widen the EER intervals, so it is off by default).

What else ``score_model`` chose.  Per-factor shape pooling (:mod:`scoremix.locscale.pooled`)
lives in the ML transforms, so a fixed-transform fit carries it.  A failure mixture
(:mod:`scoremix.locscale.failure`) and a per-speaker shape pooling
(:mod:`scoremix.locscale.speaker_pool`) are carried into every draw's error rates with their
shares, failure distributions and :math:`\kappa_c` fixed at the frequentist values; the failure
trials are left out of the sampled likelihood, as in the ML fit
(:mod:`scoremix.bayes.locscale_mix`; ``result.notes`` says so).  ``transform="sampled"``
refuses such a fit by name.

Posterior error rates.  For every posterior draw the trials' latent predictive distributions
(conditional on the fitted speakers' effects) go through the predictive layer
(:class:`scoremix.predictive.Predictive`): the EER at the *attainable* thresholds (the
observed scores, mapped into every stratum by its :math:`h_s`) as the empirical EER is
computed, so the posterior EER interval is directly comparable with the empirical EER.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from scoremix.bayes.conventions import LEVEL, UNSET, resolve_level, resolve_progress, resolve_seed, seed_int
from scoremix.bayes.locscale_mix import component_notes, further_components, mixture_dcf_draws, mixture_eer_draws
from scoremix.bayes.locscale_model import (
    CLASSES,
    LocScaleCells,
    LocScalePriors,
    build_locscale_model,
    conditional_effects,
    default_locscale_priors,
)

__all__ = ["BayesLocScaleError", "BayesLocScaleResult", "bayes_locscale", "bayes_score_model", "locscale_cells"]


class BayesLocScaleError(ValueError):
    """Bad input to :func:`bayes_locscale` (names the argument / column)."""


#: the transform-uncertainty pool builder, registered by :mod:`scoremix.bayes.locscale_pool`
#: (which sits above this module: it refits through :func:`sample_locscale`)
_TRANSFORM_POOL: list = []


def register_transform_pool(fn: Any) -> None:
    """Register :func:`scoremix.bayes.locscale_pool.transform_pool` (used by
    ``posterior_eer(transform_uncertainty="bootstrap")``)."""
    _TRANSFORM_POOL[:] = [fn]


def locscale_cells(fit: Any) -> tuple[LocScaleCells, dict[str, Any]]:
    """The per-cell sufficient statistics of a :class:`~scoremix.locscale.LocScaleFit` on its
    latent scale (transform fixed at the fit's ML estimate), and the maps trial → cell."""
    from scoremix.locscale.fit import _flags, _stats
    from scoremix.locscale.latent import cell_moments

    data = fit._data
    spec = fit.locscale_spec
    if spec.transform:
        ez, ez2, info = cell_moments(data.cells, fit._edges, fit.trial_mean, fit.trial_sd)
    else:
        ez, ez2, info = data.score, data.score ** 2, np.isfinite(data.score)
    info = np.asarray(info, bool) & ~np.asarray(data.failure, bool)   # s7: failures enter through their own part
    st, unit_ids, cell_ids, trial_cell = _stats(data, ez, ez2, info)
    scale, corr, omega, tail = _flags(spec, st)
    cells = LocScaleCells(unit=st.unit, stratum=st.stratum, n=st.n, sz=st.sz, szz=st.szz, unit_class=st.unit_class,
                          stratum_class=data.stratum_class, scale=scale, corr=corr, omega=omega, tail=tail,
                          strata_levels=list(data.cells.levels))
    return cells, dict(unit_ids=unit_ids, cell_ids=cell_ids, trial_cell=trial_cell, info=np.asarray(info, bool),
                       ez=np.asarray(ez, float), ez2=np.asarray(ez2, float))


def _auto_centred(cells: LocScaleCells) -> bool:
    """Centred ``g`` when the speakers' units hold ≥ 20 trials (median): the data then pin
    each ``g`` (the rule of ``bayes_lmer``'s joint model)."""
    per_unit = np.bincount(cells.unit, weights=cells.n, minlength=cells.n_units)
    return bool(np.median(per_unit) >= 20)


def sample_locscale(cells: LocScaleCells, priors: LocScalePriors | None = None, *, draws: int = 1000,
                    tune: int = 1000, chains: int = 2, seed: Any = None, progress: bool = False,
                    cores: int | None = None, target_accept: float = 0.9, centred: bool | None = None,
                    model: Any = None, step: Any = None, sampler: str = "pymc", compiled: Any = None,
                    tdata: Any = None) -> dict[str, Any]:
    """NUTS on :func:`~scoremix.bayes.locscale_model.build_locscale_model`; returns the draws
    ``(D, ·)`` of every parameter (``b``, ``u`` drawn exactly per draw), the raw
    ``InferenceData``, the model and wall time.  ``model``/``step``: a built model (and NUTS
    step) of the same structure whose ``pm.Data`` is set to ``cells`` (refits without
    recompiling).  ``sampler="nutpie"``: nutpie's NUTS on the same graph (``compiled``: a
    ``nutpie.compile_pymc_model`` of a model of this structure, given new data with
    ``with_data``).  ``tdata``: sample the transforms too
    (:class:`~scoremix.bayes.locscale_sampled.SampledTransformData`; ``model``/``compiled``
    then of :func:`~scoremix.bayes.locscale_sampled.build_sampled_model`)."""
    import pymc as pm

    if sampler not in ("pymc", "nutpie"):
        raise BayesLocScaleError(f"sampler must be 'pymc' or 'nutpie', got {sampler!r}")

    pri = priors or default_locscale_priors(cells)
    cen = _auto_centred(cells) if centred is None else bool(centred)
    data = {"n": cells.n, "zbar": cells.zbar, "ssw": cells.ssw}
    if tdata is not None:  # s7bayes-sbc: a built sampled model / compiled nutpie model is re-used too
        from scoremix.bayes.locscale_sampled import build_sampled_model, sampled_model_data

        data = sampled_model_data(cells, tdata)
    if model is None:
        model = build_sampled_model(cells, tdata, pri, cen) if tdata is not None else build_locscale_model(cells, pri, cen)
    else:
        pm.set_data(data, model=model)
    rs = seed_int(seed)
    seq = np.random.SeedSequence(rs)
    pm_seed = int(seq.generate_state(1)[0] % (2 ** 31 - 1))
    rng = np.random.default_rng(seq.spawn(1)[0])
    kw: dict[str, Any] = dict(draws=draws, tune=tune, chains=chains, random_seed=pm_seed, progressbar=progress,
                              compute_convergence_checks=False, return_inferencedata=True)
    if cores is not None:
        kw["cores"] = cores
    if step is not None:
        kw["step"] = step
    else:
        kw["target_accept"] = target_accept
    t0 = time.perf_counter()
    if sampler == "nutpie":
        from scoremix.bayes.samplers import check_sampler as _check_sampler  # s6bayes-check: no cycle via api

        _check_sampler("nutpie")
        import nutpie

        if compiled is None:
            compiled = nutpie.compile_pymc_model(model, freeze_model=False)
        else:
            compiled = compiled.with_data(**data)
        nkw: dict[str, Any] = dict(draws=draws, tune=tune, chains=chains, seed=pm_seed, progress_bar=progress,
                                   target_accept=target_accept)
        if cores is not None:
            nkw["cores"] = cores
        raw = nutpie.sample(compiled, **nkw)
    else:
        with model:
            raw = pm.sample(**kw)
    wall = time.perf_counter() - t0
    post = raw.posterior
    D = post.sizes["chain"] * post.sizes["draw"]

    def flat(name: str, width: int | None = None) -> np.ndarray | None:
        if name not in post:
            return None
        a = np.asarray(post[name].values, dtype=np.float64)
        return a.reshape(D, -1) if width is None else a.reshape(D, width)

    mu, lam = flat("mu"), flat("lam")
    tau_b = flat("tau_b")
    tau_g = np.zeros((D, 2))
    ks = np.flatnonzero(cells.scale)
    if ks.size:
        tau_g[:, ks] = flat("tau_g")
    rho = np.zeros((D, 2))
    kc = np.flatnonzero(cells.corr)
    if kc.size:
        rho[:, kc] = 2.0 * flat("rho01") - 1.0
    om2 = np.zeros((D, 2))
    ko = np.flatnonzero(cells.omega)
    if ko.size:
        om2[:, ko] = flat("omega") ** 2
    nu = np.full((D, 2), np.inf)
    kt = np.flatnonzero(cells.tail)
    if kt.size:
        nu[:, kt] = flat("nu")
    g = flat("g")
    extra: dict[str, Any] = {}
    ccells = cells
    if tdata is not None:  # per-draw latent cell means under the sampled transforms
        import copy

        from scoremix.bayes.locscale_sampled import cell_zbar

        w = flat("w").reshape(D, cells.n_strata, tdata.order)
        ccells = copy.copy(cells)
        ccells.sz = cell_zbar(cells, tdata, w) * cells.n
        extra = dict(w=w, tau_h=flat("tau_h")[:, 0])
    b, u = conditional_effects(ccells, mu, lam, tau_b, tau_g, rho, om2, g, rng)
    return dict(mu=mu, lam=lam, tau_b=tau_b, tau_g=tau_g, rho=rho, om2=om2, nu=nu, g=g, b=b, u=u, raw=raw, **extra,
                model=model, wall_time=wall, centred=cen, priors=pri, n_chains=int(post.sizes["chain"]),
                compiled=compiled)


def _scalar_params(cells: LocScaleCells) -> list[str]:
    names = [f"mu[{lv}]" for lv in cells.strata_levels] + [f"sigma[{lv}]" for lv in cells.strata_levels]
    for c, cn in enumerate(CLASSES):
        names.append(f"tau_b[{cn}]")
        if cells.scale[c]:
            names.append(f"tau_g[{cn}]")
        if cells.corr[c]:
            names.append(f"rho[{cn}]")
        if cells.omega[c]:
            names.append(f"omega[{cn}]")
        if cells.tail[c]:
            names.append(f"nu[{cn}]")
    return names


def scalar_draws(cells: LocScaleCells, d: dict[str, Any]) -> dict[str, np.ndarray]:
    """``{name: (D,) draws}`` of the model's scalar parameters under readable names."""
    out: dict[str, np.ndarray] = {}
    for k, lv in enumerate(cells.strata_levels):
        out[f"mu[{lv}]"] = d["mu"][:, k]
    for k, lv in enumerate(cells.strata_levels):
        out[f"sigma[{lv}]"] = np.exp(d["lam"][:, k])
    for c, cn in enumerate(CLASSES):
        out[f"tau_b[{cn}]"] = d["tau_b"][:, c]
        if cells.scale[c]:
            out[f"tau_g[{cn}]"] = d["tau_g"][:, c]
        if cells.corr[c]:
            out[f"rho[{cn}]"] = d["rho"][:, c]
        if cells.omega[c]:
            out[f"omega[{cn}]"] = np.sqrt(d["om2"][:, c])
        if cells.tail[c]:
            out[f"nu[{cn}]"] = d["nu"][:, c]
    if "tau_h" in d:
        out["tau_h"] = d["tau_h"]
    return out


@dataclass
class BayesLocScaleResult:
    """Posterior of a location-scale (transformation) mixed model, :func:`bayes_locscale`.

    Attributes
    ----------
    fit: the frequentist :class:`~scoremix.locscale.LocScaleFit` whose transforms (and
        specification) are used (``fit.transform``: the fixed :math:`h_s`).
    cells: the per-cell statistics (:class:`~scoremix.bayes.locscale_model.LocScaleCells`).
    draws: ``(D, ·)`` arrays ``mu``, ``lam`` (log σ per stratum), ``tau_b``, ``tau_g``,
        ``rho``, ``om2``, ``nu`` (per class, ``[negative, positive]``), ``g``, ``b`` (per
        speaker × class unit), ``u`` (per cell).
    idata: ArviZ ``InferenceData`` (scalar parameters under readable names + sample stats).
    diagnostics: ``DataFrame`` of ``az.summary`` (mean, sd, 95 % HDI, ESS, R-hat) made at fit
        time; :meth:`summary` recomputes it at any ``level``.
    wall_time: sampling seconds.
    """

    fit: Any
    cells: LocScaleCells
    maps: dict
    draws: dict
    idata: Any
    diagnostics: pd.DataFrame
    wall_time: float
    centred: bool
    notes: list = field(default_factory=list)
    settings: dict = field(default_factory=dict, repr=False)

    @property
    def transform(self) -> Any:
        return self.fit.transform

    @property
    def min_ess(self) -> float:
        return float(self.diagnostics["ess_bulk"].min())

    @property
    def max_rhat(self) -> float:
        r = self.diagnostics["r_hat"].to_numpy(dtype=float)
        return float(np.nanmax(r)) if np.isfinite(r).any() else float("nan")

    def summary(self, *, level: float = LEVEL) -> pd.DataFrame:
        """``arviz.summary`` of the scalar parameters (mean, sd, the ``level`` HDI, MCSE, ESS,
        R-hat), computed from the stored draws (default 0.95; before s7 this table was fixed
        at fit time with ArviZ's 94 % HDI)."""
        import arviz as az

        lev = resolve_level(level, UNSET, 0.95, "BayesLocScaleResult.summary")
        return az.summary(self.idata, kind="all", hdi_prob=lev, round_to="none")

    # ---------------------------------------------------------------- predictive layer
    def predictive(self, by: str | Sequence[str] | None = None, *, max_draws: int | None = 200,
                   ) -> tuple[Any, np.ndarray, list]:
        """The posterior predictive layer object and population weights.

        Returns ``(pred, W, labels)``: a :class:`scoremix.predictive.Predictive` with one
        component per cell × ``by`` level and ``max_draws`` evenly spaced posterior draws
        (conditional on the fitted speakers' effects); ``W`` ``(1 + G, m)`` trial counts of
        everyone and of every ``by`` level; ``labels`` ``["all", level…]``.  Trials of a
        stratum with one distinct score (no latent information) are left out (``notes``).
        This is the sampled model part only: for a fit with a failure mixture or speaker shape
        pooling (``score_model``'s choices) the failure trials are not in it and
        :meth:`eer_draws` / :meth:`dcf_draws` add both parts
        (:mod:`scoremix.bayes.locscale_mix`)."""
        from scoremix.predictive.axis import threshold_axis
        from scoremix.predictive.layer import Predictive

        fit, cells, d = self.fit, self.cells, self.draws
        data = fit._data
        tc = self.maps["trial_cell"]
        keep = tc >= 0
        frame = data.frame.loc[keep]
        tcell = tc[keep]
        D = d["mu"].shape[0]
        idx = np.arange(D) if max_draws is None or max_draws >= D else \
            np.unique(np.round(np.linspace(0, D - 1, int(max_draws))).astype(np.int64))
        cols = [by] if isinstance(by, str) else list(by or [])
        for c in cols:
            if c not in frame.columns:
                raise BayesLocScaleError(f"by column {c!r} is not in the trial table (columns: {list(frame.columns)})")
        if cols:
            lev = frame[cols].astype(str).agg("|".join, axis=1).to_numpy() if len(cols) > 1 else \
                frame[cols[0]].astype(str).to_numpy()
            glevels, gcode = np.unique(lev, return_inverse=True)
        else:
            glevels, gcode = np.array([], dtype=object), np.zeros(tcell.size, np.int64)
        key = tcell * max(1, glevels.size) + gcode
        comp_key, component = np.unique(key, return_inverse=True)
        ccell = comp_key // max(1, glevels.size)
        cgrp = comp_key % max(1, glevels.size)
        s = cells.stratum[ccell]
        un = cells.unit[ccell]
        mean = d["mu"][idx][:, s] + d["b"][idx][:, un] + d["u"][idx][:, ccell]
        sd = np.exp(d["lam"][idx][:, s] + d["g"][idx][:, un])
        positive = cells.stratum_class[s] == 1
        tr = fit.transform
        axis = threshold_axis(tr)
        stratum = None if axis.identity else axis.codes(np.asarray(cells.strata_levels, dtype=object)[s], s.size)
        y = np.asarray(data.y)[keep]
        pred = Predictive(mean=mean, sd=sd, positive=positive, component=component, y=y,
                          score=np.asarray(data.score)[keep], frame=frame, transform=tr, draws=idx,
                          axis=axis, stratum=stratum)
        m = comp_key.size
        n_comp = np.bincount(component, minlength=m).astype(np.float64)
        W = [n_comp]
        for k in range(glevels.size):
            w = np.where(cgrp == k, n_comp, 0.0)
            for cls in (positive, ~positive):
                if not (w * cls).any():  # a level of one class (an attack): against all trials of the other
                    w = np.where(cls, n_comp, w)
            W.append(w)
        return pred, np.vstack(W), ["all", *[str(v) for v in glevels]]

    def _check_by(self, by: str | Sequence[str] | None) -> None:
        cols = self.fit._data.frame.columns
        for c in [by] if isinstance(by, str) else list(by or []):
            if c not in cols:
                raise BayesLocScaleError(f"by column {c!r} is not in the trial table (columns: {list(cols)})")

    def eer_draws(self, by: str | Sequence[str] | None = None, *, max_draws: int | None = 200,
                  thresholds: str = "attainable", max_thresholds: int | None = 2000
                  ) -> tuple[list, np.ndarray, list]:
        """``(labels, E, rows)``: posterior EER draws in percent, ``E`` ``(1 + G, D')`` (everyone,
        then every ``by`` level), and per label ``(n, empirical EER %)``."""
        from scoremix.metrics import eer as empirical_eer
        from scoremix.predictive.attainable import attainable_eer
        from scoremix.predictive.mixture import MixtureRates, batch_eer

        if thresholds not in ("attainable", "latent"):
            raise BayesLocScaleError(f"thresholds must be 'attainable' or 'latent', got {thresholds!r}")
        if further_components(self.fit) is not None:   # s7: failure mixture / speaker shape pooling
            if thresholds != "attainable":
                raise BayesLocScaleError("thresholds='latent' is not defined for a fit with a failure mixture or "
                                         "speaker shape pooling (point masses at the scores); use 'attainable'")
            self._check_by(by)
            return mixture_eer_draws(self, by, max_draws, max_thresholds)
        pred, W, labels = self.predictive(by, max_draws=max_draws)
        d_ = self.draws
        if "w" in d_:
            from scoremix.bayes.locscale_sampled import sampled_eer_draws

            E = sampled_eer_draws(pred, W, self.settings["tdata"], d_["w"][pred.draws], thresholds, max_thresholds)
        elif thresholds == "attainable":
            E = attainable_eer(pred, W, max_thresholds=max_thresholds)[0]
        else:
            E = batch_eer(MixtureRates(pred.mean, pred.sd, pred.positive, W, pred.axis, pred.stratum))
        comp = pred.component
        rows = []
        for k in range(len(labels)):
            members = np.ones(comp.size, bool) if k == 0 else W[k][comp] > 0
            y, s = pred.y[members], pred.score[members]
            emp = float(empirical_eer(s, y)) if 0 < y.sum() < y.size else np.nan
            rows.append((int(members.sum()), 100 * emp))
        return labels, 100 * np.asarray(E, dtype=np.float64), rows

    def posterior_eer(self, by: str | Sequence[str] | None = None, *, level: float = 0.95,
                      max_draws: int | None = 200, thresholds: str = "attainable",
                      max_thresholds: int | None = 2000, transform_uncertainty: str | None = None,
                      n_transform: int = 10, seed: Any = None, progress: bool = False) -> pd.DataFrame:
        """Posterior EER (percent) of everyone and every ``by`` level, beside the empirical EER.

        ``thresholds="attainable"``: the ROCCH EER of the model's rates at the observed scores
        (as the empirical EER is defined; ``max_thresholds`` evenly thinned distinct scores,
        ``None`` for all); ``"latent"``: the crossing of the smooth model rates.  Columns:
        ``n``, ``empirical``, ``mean``, ``median``, ``lo``, ``hi`` (equal-tailed ``level``
        interval), ``covers`` (the empirical EER inside the interval).

        ``transform_uncertainty="bootstrap"``: the draws pooled over ``n_transform`` transform
        estimates (the ML one and ``n_transform − 1`` parametric-bootstrap refits, each with its
        own NUTS run; :func:`scoremix.bayes.locscale_pool.transform_pool`, ``seed``,
        ``progress``); the fixed-transform interval is added as ``lo_fixed``/``hi_fixed``.
        ``None`` (default): the transforms fixed at their ML estimate."""
        if not 0 < level < 1:
            raise BayesLocScaleError(f"level must be in (0, 1), got {level!r}")
        if transform_uncertainty is not None:
            return self._pool(transform_uncertainty, n_transform, seed, progress).posterior_eer(
                by, level=level, max_draws=max_draws, thresholds=thresholds, max_thresholds=max_thresholds)
        labels, E, info = self.eer_draws(by, max_draws=max_draws, thresholds=thresholds,
                                         max_thresholds=max_thresholds)
        return summarise_draws(labels, E, info, level)

    def _pool(self, kind: str, n_transform: int, seed: Any, progress: bool) -> Any:
        if "w" in self.draws:
            raise BayesLocScaleError("transform_uncertainty='bootstrap' pools fits with fixed transforms; this fit "
                                     "samples its transforms (transform='sampled'), so their uncertainty is already in")
        if not _TRANSFORM_POOL:  # pragma: no cover - registered by scoremix.bayes (locscale_pool)
            raise BayesLocScaleError("transform_uncertainty needs scoremix.bayes.locscale_pool (import scoremix.bayes)")
        transform_pool = _TRANSFORM_POOL[0]
        if kind != "bootstrap":
            raise BayesLocScaleError(f"transform_uncertainty must be None or 'bootstrap', got {kind!r}")
        key = (int(n_transform), seed) if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) else None
        cache = self.settings.setdefault("_pools", {})
        if key is not None and key in cache:
            return cache[key]
        pool = transform_pool(self, n_transform, seed=seed, progress=progress)
        if key is not None:
            cache[key] = pool
        return pool

    def dcf_draws(self, by: str | Sequence[str] | None = None, *, p_target: float = 0.05, c_miss: float = 1.0,
                  c_fa: float = 1.0, max_draws: int | None = 200, max_thresholds: int | None = 2000
                  ) -> tuple[list, np.ndarray, list, np.ndarray]:
        """``(labels, M, info, at_overall)``: posterior minimum-DCF draws in percent ``M``
        ``(1 + G, D')``, per label ``(n, empirical min DCF %)``, and every ``by`` level's DCF
        draws at everyone's minimising threshold ``(G, D')`` (percent)."""
        from scoremix.predictive.attainable import attainable_measures

        if "w" in self.draws:
            raise BayesLocScaleError("posterior_dcf is not implemented for transform='sampled' (use posterior_eer, "
                                     "or transform='fixed' with transform_uncertainty='bootstrap')")
        if further_components(self.fit) is not None:   # s7: failure mixture / speaker shape pooling
            self._check_by(by)
            labels, M, at, members = mixture_dcf_draws(self, by, p_target=p_target, c_miss=c_miss, c_fa=c_fa,
                                                       max_draws=max_draws, max_thresholds=max_thresholds)
            info = [(int(yy.size), _empirical_dcf(yy, sc, p_target, c_miss, c_fa)) for yy, sc in members]
            return labels, M, info, at
        pred, W, labels = self.predictive(by, max_draws=max_draws)
        W = W if W.shape[0] > 1 else np.vstack([W, W])
        m = attainable_measures(pred, W, p_target=p_target, c_miss=c_miss, c_fa=c_fa,
                                max_thresholds=max_thresholds)
        comp = pred.component
        M, info = [], []
        for k in range(len(labels)):
            M.append(100 * np.asarray(m["all_min_dcf"] if k == 0 else m["min_dcf"][k - 1], dtype=np.float64))
            members = np.ones(comp.size, bool) if k == 0 else W[k][comp] > 0
            y, sc = pred.y[members], pred.score[members]
            info.append((int(members.sum()), _empirical_dcf(y, sc, p_target, c_miss, c_fa)))
        at = 100 * np.atleast_2d(np.asarray(m["dcf_at_overall"], dtype=np.float64))[: len(labels) - 1]
        return labels, np.vstack(M), info, at

    def posterior_dcf(self, by: str | Sequence[str] | None = None, *, p_target: float = 0.05, c_miss: float = 1.0,
                      c_fa: float = 1.0, level: float = LEVEL, max_draws: int | None = 200,
                      max_thresholds: int | None = 2000, transform_uncertainty: str | None = None,
                      n_transform: int = 10, seed: Any = None, progress: bool = False) -> pd.DataFrame:
        """Posterior minimum DCF (unnormalised, :math:`c_{miss} p P_{miss} + c_{fa}(1-p) P_{fa}`) at
        attainable score thresholds of everyone and every ``by`` level, beside the empirical one
        (the minimum over the observed scores).  Columns as :meth:`posterior_eer`; for a ``by``
        level ``dcf_at_overall`` is its posterior mean DCF at everyone's minimising threshold.
        ``transform_uncertainty``, ``n_transform``, ``seed``, ``progress``: as
        :meth:`posterior_eer` (draws pooled over transform replicates)."""
        if not 0 < level < 1:
            raise BayesLocScaleError(f"level must be in (0, 1), got {level!r}")
        kw = dict(p_target=p_target, c_miss=c_miss, c_fa=c_fa, max_draws=max_draws, max_thresholds=max_thresholds)
        if transform_uncertainty is not None:
            return self._pool(transform_uncertainty, n_transform, seed, progress).posterior_dcf(by, level=level, **kw)
        labels, M, info, at = self.dcf_draws(by, **kw)
        return summarise_dcf(labels, M, info, at, level)


def _empirical_dcf(y: np.ndarray, sc: np.ndarray, p_target: float, c_miss: float, c_fa: float) -> float:
    """Empirical minimum DCF (percent, unnormalised) over the observed scores and reject-all."""
    if not 0 < y.sum() < y.size:
        return np.nan
    thr = np.r_[np.unique(sc), np.inf]
    ss, yy = np.sort(sc), y[np.argsort(sc)]
    npos = np.r_[0, np.cumsum(yy)][np.searchsorted(ss, thr, side="left")]
    nneg = np.r_[0, np.cumsum(1 - yy)][np.searchsorted(ss, thr, side="left")]
    pmiss = npos / y.sum()
    pfa = 1 - nneg / (y.size - y.sum())
    return 100 * float(np.min(c_miss * p_target * pmiss + c_fa * (1 - p_target) * pfa))


def summarise_draws(labels: list, E: np.ndarray, info: list, level: float) -> pd.DataFrame:
    """The table of :meth:`BayesLocScaleResult.posterior_eer` from EER draws ``E`` (percent)."""
    a = (1 - level) / 2
    rows = []
    for k, lab in enumerate(labels):
        n, emp = info[k]
        e = E[k]
        lo, hi = np.nanquantile(e, [a, 1 - a])
        rows.append(dict(group=lab, n=n, empirical=emp, mean=float(np.nanmean(e)), median=float(np.nanmedian(e)),
                         lo=float(lo), hi=float(hi), covers=bool(lo <= emp <= hi)))
    return pd.DataFrame(rows).set_index("group")


def summarise_dcf(labels: list, M: np.ndarray, info: list, at: np.ndarray, level: float) -> pd.DataFrame:
    """The table of :meth:`BayesLocScaleResult.posterior_dcf` from min-DCF draws (percent)."""
    tab = summarise_draws(labels, M, info, level)
    if len(labels) > 1:
        tab["dcf_at_overall"] = [np.nan, *[float(np.nanmean(at[k])) for k in range(len(labels) - 1)]]
    return tab


def _as_fit(model: Any, trials: pd.DataFrame | None) -> Any:
    from scoremix.locscale import LocScaleFit, LocScaleSpec, fit_locscale

    if isinstance(model, LocScaleFit):
        return model
    if isinstance(model, LocScaleSpec):
        if trials is None:
            raise BayesLocScaleError("a LocScaleSpec needs the trials: bayes_locscale(spec, trials)")
        return fit_locscale(trials, model)
    if isinstance(model, dict):
        return _as_fit(LocScaleSpec.from_dict(model), trials)
    raise BayesLocScaleError(f"bayes_locscale needs a LocScaleFit (scoremix.score_model / fit_locscale), a "
                             f"LocScaleSpec or its to_dict(); got {type(model).__name__}")


def bayes_locscale(model: Any, trials: pd.DataFrame | None = None, *, priors: LocScalePriors | None = None,
                   draws: int = 1000, tune: int = 1000, chains: int = 2, seed: Any = UNSET,
                   progress: bool = UNSET, cores: int | None = None, target_accept: float = 0.9,
                   centred: bool | None = None, sampler: str = "pymc", transform: str = "fixed",
                   order: int = 6, tau_h_scale: float = 1.0) -> BayesLocScaleResult:
    r"""Bayesian location-scale (transformation) mixed model of detector scores.

    Parameters
    ----------
    model:
        a :class:`~scoremix.locscale.LocScaleFit` (``sm.score_model(...)`` or
        ``fit_locscale``: its specification and its ML transforms are used), or a
        :class:`~scoremix.locscale.LocScaleSpec` (or its ``to_dict()``) with ``trials`` (the
        frequentist fit is made first, for the transforms).  ``LocScaleSpec(transform=False)``
        is the Gaussian location-scale model of the scores themselves.
    trials:
        the trial table (only with a specification).
    priors:
        :class:`~scoremix.bayes.locscale_model.LocScalePriors` (default: scaled by the data,
        :func:`~scoremix.bayes.locscale_model.default_locscale_priors`).
    draws, tune, chains, cores, target_accept:
        NUTS settings (PyMC).
    seed:
        int or ``numpy.random.Generator``.
    progress:
        show the sampler's progress bar (default ``False``).
    centred:
        ``g`` centred (``True``) or non-centred (``False``); default by cell size.
    sampler:
        ``"pymc"`` (default) or ``"nutpie"`` (needs the ``nutpie`` package; compiles once,
        samples several times faster).
    transform:
        ``"fixed"`` (default): every stratum transform fixed at its ML estimate;
        ``"sampled"``: a monotone Bernstein deformation of order ``order`` of every ML
        transform sampled jointly (shrinkage scale :math:`\tau_h \sim N^+(0,`
        ``tau_h_scale``:math:`^2)`; :mod:`scoremix.bayes.locscale_sampled`; ``posterior_eer``
        only).

    Returns
    -------
    BayesLocScaleResult
        ``.posterior_eer(by=...)``, ``.predictive(...)``, ``.summary()``.

    Notes
    -----
    Model, priors and what is sampled: :mod:`scoremix.bayes.locscale_model`.  The transforms
    :math:`h_s` are fixed at the frequentist ML estimate (:mod:`scoremix.bayes.locscale`).
    """
    import arviz as az
    import xarray as xr

    seed = resolve_seed(seed, UNSET, "bayes_locscale")
    progress = resolve_progress(progress, UNSET, False, "bayes_locscale")
    for name, value, least in (("draws", draws, 1), ("tune", tune, 0), ("chains", chains, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
            raise BayesLocScaleError(f"bayes_locscale: {name} must be an integer >= {least}, got {value!r}")
    if transform not in ("fixed", "sampled"):
        raise BayesLocScaleError(f"transform must be 'fixed' or 'sampled', got {transform!r}")
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or not 2 <= order <= 30:
        raise BayesLocScaleError(f"order (the Bernstein order of a sampled transform) must be an integer in 2..30, "
                                 f"got {order!r}")
    fit = _as_fit(model, trials)
    parts = component_notes(fit)
    if transform == "sampled" and parts:
        raise BayesLocScaleError("transform='sampled' does not carry the fit's "
                                 + " and ".join(p.split(" carried")[0] for p in parts)
                                 + "; use transform='fixed' (they are then carried, fixed at their ML values) or fit "
                                 "without them: score_model(..., failure_quantile=None, speaker_pooling=None)")
    cells, maps = locscale_cells(fit)
    tdata = None
    if transform == "sampled":
        from scoremix.bayes.locscale_sampled import sampled_transform_data

        if not fit.locscale_spec.transform:
            raise BayesLocScaleError("transform='sampled' needs a transformation fit; this LocScaleSpec has "
                                     "transform=False (the scores are modelled directly)")
        if sampler != "pymc":
            raise BayesLocScaleError("transform='sampled' runs with sampler='pymc'")
        tdata = sampled_transform_data(cells, maps["ez"], maps["ez2"], maps["trial_cell"], order, tau_h_scale)
    d = sample_locscale(cells, priors, draws=draws, tune=tune, chains=chains, seed=seed, progress=progress,
                        cores=cores, target_accept=target_accept, centred=centred, sampler=sampler, tdata=tdata)
    nc = d["n_chains"]
    sc = scalar_draws(cells, d)
    empty = [lv for k, lv in enumerate(cells.strata_levels) if not (cells.stratum == k).any()]
    for lv in empty:   # s7: strata without sampled trials (failure strata): prior draws only, not reported
        sc.pop(f"mu[{lv}]", None)
        sc.pop(f"sigma[{lv}]", None)
    post = xr.Dataset({k: (("chain", "draw"), v.reshape(nc, -1)) for k, v in sc.items()})
    idata = az.InferenceData(posterior=post, sample_stats=d["raw"].sample_stats)
    diag = az.summary(idata, kind="all", hdi_prob=0.95, round_to="none")
    notes = list(parts)
    n_out = int(((maps["trial_cell"] < 0) & ~np.asarray(fit._data.failure, bool)).sum())
    if n_out:
        notes.append(f"{n_out} trials of strata with one distinct score carry no latent information and are left out")
    keys = ("mu", "lam", "tau_b", "tau_g", "rho", "om2", "nu", "g", "b", "u") + (("w", "tau_h") if tdata else ())
    return BayesLocScaleResult(fit=fit, cells=cells, maps=maps, draws={k: d[k] for k in keys},
                               idata=idata, diagnostics=diag, wall_time=d["wall_time"], centred=d["centred"],
                               notes=notes,
                               settings=dict(draws=draws, tune=tune, chains=chains, cores=cores,
                                             target_accept=target_accept, centred=d["centred"], sampler=sampler,
                                             priors=d["priors"], model=d["model"], compiled=d["compiled"],
                                             transform=transform, tdata=tdata))


def bayes_score_model(fit: Any, **kwargs: Any) -> BayesLocScaleResult:
    r"""The Bayesian fit of what a :func:`scoremix.score_model` fit chose: its ``LocScaleSpec``
    and ML transforms (which hold any per-factor shape pooling) are sampled around, and its
    failure mixture and per-speaker shape pooling are carried into every posterior draw's error
    rates with their shares and :math:`\kappa_c` fixed at the frequentist values
    (:mod:`scoremix.bayes.locscale_mix`; ``result.notes`` names them):
    ``bayes_locscale(fit, **kwargs)``."""
    return bayes_locscale(fit, **kwargs)
