r"""``bayes_glmer``: the Bayesian counterpart of ``glmer`` (binomial and Poisson GLMMs, PyMC NUTS).

Model (the one :func:`scoremix.glmer` fits, with priors instead of a Laplace likelihood):

.. math::

    \eta_i = o_i + x_i^\top\beta + \sum_k z_{k,i}^\top b_{k,g_k(i)},\qquad
    b_{k,j} = T_k u_{k,j},\ u_{k,j}\sim N(0, I),\ T_k = \mathrm{diag}(\mathrm{sd}_k)\,
    \mathrm{chol}(R_k),

    y_i \mid \eta_i \sim \mathrm{Binomial}(m_i, g^{-1}(\eta_i))\ \text{or}\
    \mathrm{Poisson}(g^{-1}(\eta_i)),

with every link of ``glmer`` (binomial: logit, probit, cloglog, log; Poisson: log,
identity, sqrt).  The random effects are sampled **non-centred** (:math:`u` is the
sampled variable; a GLMM's levels are rarely pinned down well enough for the centred
form), and the likelihood is evaluated on **sufficient statistics**: the summed
successes/failures (counts/exposure) per cell of identical linear predictor
(:mod:`scoremix.bayes.glmm_cells`), so a 20,000-row decision table costs what its few
hundred cells cost.

Default priors (the conventions of :mod:`scoremix.bayes.priors` on the link scale, as
rstanarm does for GLMs): with :math:`s = 1` (binomial links, Poisson log) or the SD of
:math:`g(y)` (Poisson identity / sqrt),

.. math::

    \beta_{(Intercept)} \sim N(g(\bar y), (2.5 s)^2),\quad
    \beta_j \sim N(0, (2.5 s / s_j)^2),\quad
    \mathrm{sd}_{g,a} \sim \text{half-}t_3(0, s/\mathrm{rms}_a),\quad R_g \sim \mathrm{LKJ}(2),

overridable by the same keys as ``bayes_lmer`` (there is no ``sigma``).
"""

from __future__ import annotations

import importlib.util
import time
from collections import OrderedDict
import warnings
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pandas as pd

from scoremix.bayes.conventions import LEVEL, UNSET, resolve_progress, resolve_seed, seed_int
from scoremix.bayes.glmm_cells import GlmmCells, aggregate_cells
from scoremix.bayes.glmm_links import linkfun_np, loglik_graph
from scoremix.bayes.priors import PriorError, PriorSet, re_sd_cor_vars, resolve_priors, sd_name

__all__ = ["bayes_glmer", "GlmmModelData", "glmm_model_data", "glmm_priors", "build_glmm_model"]

GLMER_SAMPLERS = ("auto", "pymc", "nutpie", "numpyro")


@dataclass
class GlmmModelData:
    """What the sampler needs: the model frame, family, rows and their cells."""

    spec: Any
    family: str
    link: str
    y: np.ndarray          # proportion (binomial) or count (Poisson), per row
    w: np.ndarray          # prior weights (binomial: trials × user weights)
    offset: np.ndarray
    cells: GlmmCells
    kind: str              # "binary", "cbind", "proportion", "count"
    response_text: str


def glmm_model_data(formula: str, data: pd.DataFrame, family: str, link: str | None, weights: Any = None,
                    offset: Any = None, na_action: str = "omit", contrasts: dict | None = None) -> GlmmModelData:
    """Parse ``formula``/``data`` exactly as :func:`scoremix.glmer` does (response forms,
    ``cbind``, proportions with ``weights=``, offsets, NA handling) and aggregate the rows
    into cells."""
    from scoremix.glmm import make_family
    from scoremix.glmm.errors import GlmmUnsupportedError
    from scoremix.glmm.response import N_COL, prepare_response
    from scoremix.lme.input_checks import check_model_input
    from scoremix.lme.model_frame import build_model_spec

    fam = make_family(family, link)
    if not isinstance(data, pd.DataFrame):
        raise TypeError(f"bayes_glmer: data must be a pandas DataFrame, got {type(data).__name__}")
    pr = prepare_response(formula, data, fam, weights is not None)
    w: Any = weights
    if pr.cbind:
        base = pr.data[N_COL].to_numpy(float)
        if weights is not None:
            wu = pr.data[weights].to_numpy(float) if isinstance(weights, str) else np.asarray(weights, float)
            base = base * wu
        w = base
    check_model_input(pr.formula, pr.data)
    spec = build_model_spec(pr.formula, pr.data, weights=w, na_action=na_action, contrasts=contrasts,
                            offset=offset, glmm=True)
    from scoremix.bayes.checks import refuse_structured
    refuse_structured(spec)
    if not spec.terms:
        raise GlmmUnsupportedError("no random effects terms specified in formula (use a Bayesian GLM, "
                                   "e.g. bambi, for a model without them)")
    # s6bayes-check: lme4 2.0's structured covariances are glmer's; never fit them as unstructured
    odd = [t for t in spec.terms if getattr(t, "structure", "us") not in ("us", "diag")]
    if odd:
        t = odd[0]
        raise GlmmUnsupportedError(
            f"bayes_glmer: the structured covariance {t.structure.split('_')[0]}() of the term on {t.group!r} "
            f"({', '.join(t.term_names)}) is not implemented in the Bayesian GLMM; fit it with sm.glmer, or write "
            f"(... | {t.group}) for an unstructured covariance with an LKJ prior or diag(... | {t.group}) for "
            "independent variances")
    off = np.zeros(spec.n) if spec.offset is None else np.asarray(spec.offset, float)
    y = np.asarray(spec.y, float) + off          # the Gaussian frame stores y - offset
    wt = np.ones(spec.n) if spec.weights is None else np.asarray(spec.weights, float)
    cells = aggregate_cells(spec.X, off, [t.codes for t in spec.terms], [t.X for t in spec.terms], y, wt,
                            fam.name)
    return GlmmModelData(spec, fam.name, fam.link.name, y, wt, off, cells, pr.kind, pr.lhs)


class _MomentsSpec:
    """``spec`` seen with given prior moments (``data_moments`` reads ``.moments``)."""

    def __init__(self, spec: Any, moments: dict) -> None:
        self._spec = spec
        self.moments = moments

    def __getattr__(self, name: str) -> Any:
        return getattr(self._spec, name)


def glmm_priors(md: GlmmModelData, priors: Mapping[str, Any] | None) -> PriorSet:
    """The default priors of the module docstring, with the user's overrides."""
    from scoremix.bayes.reprosum import spec_moments

    if priors and any(k == "sigma" or str(k).startswith("sigma_") for k in priors):
        raise PriorError(f"a {md.family} GLMM has no residual SD: drop the prior key(s) "
                         f"{[k for k in priors if k == 'sigma' or str(k).startswith('sigma_')]}")
    mom = dict(spec_moments(md.spec))
    ybar = float(np.sum(md.w * md.y) / np.sum(md.w)) if np.sum(md.w) > 0 else 0.5
    if md.family == "binomial":
        ybar = min(max(ybar, 1e-3), 1 - 1e-3)
        s = 1.0
    else:
        ybar = max(ybar, 1e-3)
        s = 1.0 if md.link == "log" else float(np.std(linkfun_np(np.maximum(md.y, 0.0), md.link), ddof=1))
        if not np.isfinite(s) or s <= 0:
            s = 1.0
    mom["ybar"] = float(linkfun_np(np.array(ybar), md.link))
    mom["y_sd"] = s
    ps = resolve_priors(_MomentsSpec(md.spec, mom), priors)
    ps.sigma = {}
    return ps


def _beta(spec, ps: PriorSet):
    import pymc as pm
    import pytensor.tensor as pt

    names = list(spec.fixef_names)
    fams = {ps.fixef[n].family for n in names}
    if fams == {"normal"}:
        mu = np.array([ps.fixef[n].params["mu"] for n in names], float)
        sd = np.array([ps.fixef[n].params["sigma"] for n in names], float)
        return pm.Normal("beta", mu=mu, sigma=sd, shape=len(names))
    if fams == {"flat"}:
        return pm.Flat("beta", shape=len(names))
    return pm.Deterministic("beta", pt.stack([ps.fixef[n].pymc(f"beta__{j}") for j, n in enumerate(names)]))


def build_glmm_model(md: GlmmModelData, ps: PriorSet, centred: bool = False):
    """The PyMC model on the cells (non-centred random effects unless ``centred=True``)."""
    import pymc as pm
    import pytensor.tensor as pt

    spec, c = md.spec, md.cells
    with pm.Model() as model:
        beta = _beta(spec, ps)
        eta = pt.constant(c.offset) + pt.dot(pt.constant(c.X), beta)
        for k, t in enumerate(spec.terms):
            sds = [ps.sd[sd_name(t.group, a)].pymc(f"sd__{k}__{i}") for i, a in enumerate(t.term_names)]
            if t.p == 1:
                T = pt.reshape(sds[0], (1, 1))
            else:
                eta_lkj = float(ps.cor[f"cor_{t.group}"].params["eta"])
                R = pm.LKJCorr(f"corr__{k}", n=t.p, eta=eta_lkj, return_matrix=True)
                R = pm.Deterministic(f"corrmat__{k}", R)
                T = pt.stack(sds)[:, None] * pt.linalg.cholesky(R)
            if centred:
                if t.p == 1:
                    bk = pm.Normal(f"b__{k}", 0.0, sds[0], shape=(t.n_levels, 1))
                else:
                    bk = pm.MvNormal(f"b__{k}", mu=np.zeros(t.p), chol=T, shape=(t.n_levels, t.p))
            else:
                zk = pm.Normal(f"z__{k}", 0.0, 1.0, shape=(t.n_levels, t.p))
                bk = pm.Deterministic(f"b__{k}", pt.dot(zk, T.T))
            codes = pt.constant(c.codes[k])
            if t.p == 1 and np.all(c.Z[k] == 1.0):
                eta = eta + bk[:, 0][codes]
            else:
                eta = eta + (bk[codes] * pt.constant(c.Z[k])).sum(axis=1)
        # counts as pm.Data: the graph (and its compiled C code, cached on disk) depends only on
        # the design, so refits to new counts on the same design compile fast
        kk, ff = pm.Data("cell_k", c.k), pm.Data("cell_f", c.f)
        pm.Potential("loglik", loglik_graph(eta, kk, ff, md.family, md.link))
    return model


def _resolve_sampler(sampler: str) -> str:
    from scoremix.bayes.samplers import check_sampler as _check_sampler

    if sampler not in GLMER_SAMPLERS:
        raise ValueError(f"sampler must be one of {GLMER_SAMPLERS}, got {sampler!r}")
    if sampler == "auto":
        return "nutpie" if importlib.util.find_spec("nutpie") is not None else "pymc"
    _check_sampler(sampler)
    return sampler


def _initvals(md: GlmmModelData, ps: PriorSet) -> dict[str, np.ndarray]:
    """Start at the prior means of β (the intercept at g(ȳ)), random effects at 0."""
    mu = np.array([float(ps.fixef[n].params.get("mu", 0.0)) for n in md.spec.fixef_names])
    out: dict[str, np.ndarray] = {}
    if {ps.fixef[n].family for n in md.spec.fixef_names} == {"normal"}:
        out["beta"] = mu
    return out


def _named_posterior(md: GlmmModelData, raw) -> Any:
    """Posterior ``xarray.Dataset`` under R names (as :class:`BayesLmerResult` reads them)."""
    import xarray as xr

    spec = md.spec
    coords = {"chain": raw["chain"].values, "draw": raw["draw"].values}
    beta = np.asarray(raw["beta"].values)
    dv: dict[str, Any] = {}
    for j, n in enumerate(spec.fixef_names):
        dv[n] = (("chain", "draw"), beta[..., j])
    dv.update(re_sd_cor_vars(raw, spec.terms))
    for k, t in enumerate(spec.terms):
        dims = ("chain", "draw", f"{t.group}__level", f"{t.group}__term")
        bk = np.asarray(raw[f"b__{k}"].values).reshape(beta.shape[:2] + (t.n_levels, t.p))
        dv[f"b_{t.group}"] = (dims, bk)
        coords[f"{t.group}__level"] = list(t.levels)
        coords[f"{t.group}__term"] = list(t.term_names)
    return xr.Dataset(dv, coords=coords, attrs=dict(raw.attrs))


#: compiled PyMC models and NUTS steps of recent designs (at most 4): refits to new counts on
#: the same design (bootstrap, simulation-based calibration) skip building and compiling
_STEP_CACHE: "OrderedDict[str, tuple[Any, Any]]" = OrderedDict()
_STEP_CACHE_SIZE = 4


def _design_key(md: GlmmModelData, ps: PriorSet, centred: bool, target_accept: float) -> str:
    """Hash of everything the compiled model and step bake in (the counts are ``pm.Data``)."""
    import hashlib

    h = hashlib.sha1()
    c = md.cells
    for a in [c.X, c.offset, *c.codes, *c.Z]:
        a = np.ascontiguousarray(a)
        h.update(str((a.shape, a.dtype.str)).encode())
        h.update(a.tobytes())
    h.update(repr(ps.as_table().to_numpy().tolist()).encode())
    h.update(repr((md.family, md.link, bool(centred), float(target_accept), list(md.spec.fixef_names),
                   [(t.group, list(t.term_names), t.n_levels) for t in md.spec.terms])).encode())
    return h.hexdigest()


def _cached_model_and_step(md: GlmmModelData, ps: PriorSet, centred: bool, target_accept: float, cache: bool):
    """``(model, NUTS step)`` for this design: from the cache with the counts set, or new.

    The step's mass matrix starts from the model's initial point with unit variances and is
    adapted during warm-up exactly as ``pm.sample``'s ``"jitter+adapt_diag"`` does
    (``QuadPotentialDiagAdapt``; ``pm.sample`` resets its adaptation for every chain)."""
    import pymc as pm
    from pymc.blocking import DictToArrayBijection
    from pymc.step_methods.hmc.quadpotential import QuadPotentialDiagAdapt

    key = _design_key(md, ps, centred, target_accept) if cache else None
    if key is not None and key in _STEP_CACHE:
        model, step = _STEP_CACHE[key]
        _STEP_CACHE.move_to_end(key)
        pm.set_data({"cell_k": md.cells.k, "cell_f": md.cells.f}, model=model)
        return model, step
    model = build_glmm_model(md, ps, centred=centred)
    mean = DictToArrayBijection.map(model.initial_point()).data
    pot = QuadPotentialDiagAdapt(len(mean), mean, np.ones_like(mean), 10)
    step = pm.NUTS(model=model, potential=pot, target_accept=target_accept)
    if key is not None:
        _STEP_CACHE[key] = (model, step)
        while len(_STEP_CACHE) > _STEP_CACHE_SIZE:
            _STEP_CACHE.popitem(last=False)
    return model, step


def _jittered_initvals(model, md: GlmmModelData, ps: PriorSet, chains: int, seed: int | None) -> list[dict]:
    """Per-chain starting values: β at its prior means and the standardised random effects,
    each jittered by U(-1, 1) (as PyMC's ``jitter+adapt_diag``); SDs at PyMC's defaults."""
    rng = np.random.default_rng(seed)
    base = _initvals(md, ps)
    out = []
    for _ in range(chains):
        iv: dict[str, np.ndarray] = {}
        if "beta" in base:
            iv["beta"] = base["beta"] + rng.uniform(-1, 1, base["beta"].shape)
        for k, t in enumerate(md.spec.terms):
            if f"z__{k}" in model.named_vars:
                iv[f"z__{k}"] = rng.uniform(-1, 1, (t.n_levels, t.p))
        out.append(iv)
    return out


def _sample_model(model, sampler: str, draws: int, tune: int, chains: int, cores: int | None, seed: int | None,
                  progress: bool, target_accept: float, initvals: Any, step: Any = None):
    import pymc as pm

    from scoremix.bayes.api import _interruptible, _reset_xla_flags

    if sampler == "nutpie":
        import nutpie

        compiled = nutpie.compile_pymc_model(model)
        kw: dict[str, Any] = dict(draws=draws, tune=tune, chains=chains, progress_bar=progress,
                                  target_accept=target_accept, save_warmup=False)
        if cores is not None:
            kw["cores"] = cores
        if seed is not None:
            kw["seed"] = int(seed)
        with _interruptible():
            return nutpie.sample(compiled, **kw)
    if sampler == "numpyro":
        _reset_xla_flags()
    kw = dict(draws=draws, tune=tune, chains=chains, random_seed=seed, progressbar=progress,
              compute_convergence_checks=False, return_inferencedata=True, target_accept=target_accept,
              initvals=initvals or None)
    if cores is not None:
        kw["cores"] = cores
    if step is not None:
        kw["step"] = step
        kw.pop("target_accept")
    if sampler == "numpyro":
        kw["nuts_sampler"] = "numpyro"
        kw.pop("initvals")
    with model, _interruptible():
        return pm.sample(**kw)


def bayes_glmer(
    formula: str,
    data: pd.DataFrame,
    family: str = "binomial",
    *,
    link: str | None = None,
    weights: Any = None,
    offset: Any = None,
    priors: Mapping[str, Any] | None = None,
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    sampler: str = "auto",
    seed: Any = UNSET,
    level: float = LEVEL,
    progress: bool = UNSET,
    cores: int | None = None,
    centred: bool = False,
    target_accept: float = 0.9,
    na_action: str = "omit",
    contrasts: dict[str, str] | None = None,
    check: bool = True,
    cache: bool = True,
) -> "BayesGlmerResult":  # noqa: F821
    r"""Fit a binomial or Poisson GLMM by NUTS, with ``glmer``'s formula and response rules.

    Parameters
    ----------
    formula:
        lme4 formula; response 0/1, logical, a two-level factor (first level = failure),
        ``cbind(successes, failures)``, a proportion with ``weights=`` the trials
        (binomial), or counts (Poisson).  Random terms: every structure ``glmer`` accepts
        (``(1|g)``, correlated slopes ``(x|g)`` with an LKJ prior, ``(x||g)``, nested
        ``(1|a/b)``, crossed).
    data:
        the data frame.
    family, link:
        ``"binomial"`` (``logit`` default, ``probit``, ``cloglog``, ``log``) or
        ``"poisson"`` (``log`` default, ``identity``, ``sqrt``).
    weights, offset:
        prior weights (binomial: numbers of trials of a proportion response) and a known
        part of the linear predictor; ``offset()`` terms in the formula work too.
    priors:
        overrides of the default priors (module docstring), keys as in ``bayes_lmer``.
    draws, tune, chains:
        NUTS draws kept per chain, warm-up iterations, chains.
    sampler:
        ``"auto"`` (nutpie when installed, else PyMC), ``"pymc"``, ``"nutpie"``, ``"numpyro"``.
    seed:
        int or ``numpy.random.Generator`` (reproducible draws).
    level:
        default interval probability of the result's summaries (0.95; it was ArviZ's 0.94
        before s7).
    progress:
        the sampler's progress bar (default ``True``).
    cores:
        parallel chains (default: the sampler's choice).
    centred:
        sample ``b`` itself instead of the standardised ``u`` (for comparison; slower on
        most GLMMs).
    target_accept:
        NUTS target acceptance rate (0.9: fewer divergences near ``sd → 0``).
    check:
        run the convergence gate (R-hat, ESS, divergences) and warn.
    cache:
        reuse the compiled model and NUTS step of a recent fit with the same design, priors
        and settings (only the counts differ: bootstrap, calibration runs); PyMC sampler.

    Returns
    -------
    BayesGlmerResult

    Raises
    ------
    FamilyError, GlmmResponseError, GlmmUnsupportedError, PriorError, SamplerUnavailableError,
    SamplingInterrupted
    """
    import arviz as az
    import xarray as xr

    from scoremix.bayes.api import _check_complete
    from scoremix.bayes.conventions import resolve_level
    from scoremix.bayes.diagnostics import diagnose, gate
    from scoremix.bayes.glmer_result import BayesGlmerResult

    seed = resolve_seed(seed, UNSET, "bayes_glmer")
    progress = resolve_progress(progress, UNSET, True, "bayes_glmer")
    level = resolve_level(level, UNSET, 0.95, "bayes_glmer")
    for name, value, least in (("draws", draws, 1), ("tune", tune, 0), ("chains", chains, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
            raise ValueError(f"bayes_glmer: {name} must be an integer >= {least}, got {value!r}")
    sampler = _resolve_sampler(sampler)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=FutureWarning)
        md = glmm_model_data(formula, data, family, link, weights=weights, offset=offset, na_action=na_action,
                             contrasts=contrasts)
    ps = glmm_priors(md, priors)
    t0 = time.perf_counter()
    sint = seed_int(seed)
    if sampler == "pymc":
        model, step = _cached_model_and_step(md, ps, centred, float(target_accept), cache)
        iv: Any = _jittered_initvals(model, md, ps, int(chains), sint)
    else:
        model, step, iv = build_glmm_model(md, ps, centred=centred), None, _initvals(md, ps)
    raw = _sample_model(model, sampler, int(draws), int(tune), int(chains), cores, sint, progress,
                        float(target_accept), iv, step=step)
    _check_complete(raw, draws, chains)
    wall = time.perf_counter() - t0
    post = _named_posterior(md, raw.posterior)
    obs = xr.Dataset({md.spec.response: (("obs",), md.y * (md.w if md.family == "binomial" else 1.0))})
    idata = az.InferenceData(posterior=post, sample_stats=raw.sample_stats, observed_data=obs)
    res = BayesGlmerResult(idata=idata, spec=md.spec, method="joint", likelihood="cells", sampler=sampler,
                           priors=ps, diagnostics=None, wall_time=wall,  # type: ignore[arg-type]
                           centred=[bool(centred)] * len(md.spec.terms))
    res.model_data = md
    res.family = md.family
    res.link = md.link
    res.formula = formula
    res.level = level
    res.diagnostics = diagnose(idata, res.param_names)
    if check:
        gate(res.diagnostics)
    return res

