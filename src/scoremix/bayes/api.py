r"""``bayes_lmer``: the Bayesian counterpart of ``lmer`` (PyMC, NumPyro or nutpie NUTS).

.. math::

    y = X\beta + Zb + \varepsilon,\quad b_{k,j} \sim N(0,\Sigma_k),\quad
    \varepsilon_i \sim N(0, \sigma_{\ell(i)}^2/w_i),

with the auto-scaled priors of :mod:`scoremix.bayes.priors`.  ``method="collapsed"``
(default) samples only the variance parameters from the exact marginal likelihood
(:mod:`scoremix.bayes.collapsed`) and draws β, b from their Gaussian conditional per draw;
``method="joint"`` samples everything (:mod:`scoremix.bayes.joint`).
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import pandas as pd

from scoremix.adapters import adapter_for
from scoremix.bayes.checks import refuse_structured, warn_nested_factors
from scoremix.bayes.conventions import UNSET, resolve_progress, resolve_seed, seed_int
from scoremix.bayes.diagnostics import diagnose, gate
from scoremix.bayes.priors import re_sd_cor_vars, resolve_priors, sigma_names
from scoremix.bayes.result import BayesLmerResult

if TYPE_CHECKING:  # s6bayes-check
    from scoremix.bayes.locscale import BayesLocScaleResult

__all__ = ["bayes_lmer", "bayes_lmer_spec", "SamplerUnavailableError", "SamplingInterrupted", "IncompleteSamplingError",
           "SAMPLERS"]

# s6bayes-check: in scoremix.bayes.samplers (imported by locscale/glmer without importing this module)
from scoremix.bayes.samplers import SAMPLERS, SamplerUnavailableError  # noqa: E402
from scoremix.bayes.samplers import check_sampler as _check_sampler  # noqa: E402


class IncompleteSamplingError(RuntimeError):
    """The sampler returned fewer chains or draws than asked for (it was interrupted): no
    posterior is returned, since a truncated one would pass for a normal result."""


class _Interrupted(BaseException):
    """Ctrl-C during sampling, raised past PyMC (which swallows ``KeyboardInterrupt`` per chain
    and starts the next chain)."""


@contextlib.contextmanager
def _interruptible() -> Any:
    """Turn Ctrl-C into :class:`_Interrupted` while sampling (main thread with Python's default
    handler only; a caller's own handler, e.g. the command line's, is left alone), and re-raise
    it as ``KeyboardInterrupt`` once out of the sampler."""
    import signal
    import threading

    installed = False
    previous: Any = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGINT)
        if previous is signal.default_int_handler:
            def on_sigint(signum: int, frame: Any) -> None:
                raise _Interrupted()

            signal.signal(signal.SIGINT, on_sigint)
            installed = True
    try:
        yield
    except _Interrupted:
        raise KeyboardInterrupt("bayes_lmer: sampling interrupted (Ctrl-C); no posterior is returned") from None
    finally:
        if installed:
            signal.signal(signal.SIGINT, previous)


class SamplingInterrupted(KeyboardInterrupt, IncompleteSamplingError):
    """Sampling was interrupted (Ctrl-C): no result is returned.

    PyMC catches ``KeyboardInterrupt`` and returns the draws made so far; ``bayes_lmer``
    re-raises instead, so a truncated posterior is never returned as a normal result.  The
    truncated draws are kept on the exception (``partial``: the sampler's ``InferenceData``,
    internal parameter names) with the counts ``draws_done`` / ``draws_requested`` per chain.
    """

    def __init__(self, message: str, partial: Any = None, draws_done: int = 0, draws_requested: int = 0,
                 chains_done: int = 0, chains_requested: int = 0) -> None:
        super().__init__(message)
        self.partial = partial
        self.draws_done = draws_done
        self.draws_requested = draws_requested
        self.chains_done = chains_done
        self.chains_requested = chains_requested


def _check_complete(raw, draws: int, chains: int) -> None:
    """Raise :class:`SamplingInterrupted` unless every chain holds all ``draws``."""
    post = getattr(raw, "posterior", None)
    nd = int(post.sizes.get("draw", 0)) if post is not None else 0
    nc = int(post.sizes.get("chain", 0)) if post is not None else 0
    if nd < draws or nc < chains:
        raise SamplingInterrupted(
            f"bayes_lmer: sampling was interrupted after {nd} of {draws} draws in {nc} of {chains} chain(s) "
            f"({nc} of {chains} chain(s) and {nd} of {draws} draw(s) per chain); no posterior is returned "
            f"(the truncated draws are on this exception's .partial)",
            partial=raw, draws_done=nd, draws_requested=draws, chains_done=nc, chains_requested=chains)


def _reset_xla_flags() -> None:
    """PyMC's import sets XLA_FLAGS to many host devices; keep JAX to one device per process."""
    flags = os.environ.get("XLA_FLAGS", "")
    parts = [f for f in flags.split() if "xla_force_host_platform_device_count" not in f]
    os.environ["XLA_FLAGS"] = " ".join(parts)


def _sample(model, sampler: str, draws: int, tune: int, chains: int, cores: int | None,
            random_seed: int | None, progressbar: bool, target_accept: float | None):
    import pymc as pm

    if sampler == "numpyro":
        _reset_xla_flags()
    kw: dict[str, Any] = dict(draws=draws, tune=tune, chains=chains, random_seed=random_seed,
                              progressbar=progressbar, compute_convergence_checks=False,
                              return_inferencedata=True)
    if cores is not None:
        kw["cores"] = cores
    if target_accept is not None:
        kw["target_accept"] = target_accept
    if sampler != "pymc":
        kw["nuts_sampler"] = sampler
    with model, _interruptible():
        return pm.sample(**kw)


def _sample_nutpie(built, key, values: dict | None, draws: int, tune: int, chains: int, cores: int | None,
                   random_seed: int | None, progressbar: bool, target_accept: float | None, use_cache: bool):
    """nutpie NUTS on a compiled model, reused from :data:`MODEL_CACHE` when the signature matches."""
    import nutpie

    from scoremix.bayes.cache import MODEL_CACHE

    ckey = ("nutpie", key) if (use_cache and key is not None) else None
    compiled = MODEL_CACHE.get(ckey) if ckey is not None else None
    if compiled is None:
        compiled = nutpie.compile_pymc_model(built.model, freeze_model=False)  # keep pm.Data settable
        MODEL_CACHE.put(ckey, compiled)
    elif values:
        compiled = compiled.with_data(**values)
    kw: dict[str, Any] = dict(draws=draws, tune=tune, chains=chains, progress_bar=progressbar,
                              save_warmup=False)
    if cores is not None:
        kw["cores"] = cores
    if random_seed is not None:
        kw["seed"] = int(random_seed)
    if target_accept is not None:
        kw["target_accept"] = target_accept
    with _interruptible():
        return nutpie.sample(compiled, **kw)


def _get_model(spec, ps, ss, method: str, likelihood: str, centred, use_cache: bool, cells=None):
    """The PyMC model: from the cache (``pm.set_data`` to this data) or freshly built.

    Returns ``(built, signature, data values)``.
    """
    from scoremix.bayes.cache import MODEL_CACHE
    from scoremix.bayes.joint import (build_collapsed_model, build_joint_model, centred_terms, model_data,
                                      model_signature)

    if cells is not None:  # the transformation model's cell likelihood: per row, never cached
        return build_joint_model(spec, ps, None, likelihood="rows", centred=centred, cells=cells), None, None

    cent = centred_terms(spec, centred) if method == "joint" else []
    key = model_signature(spec, ps, ss, method, likelihood, cent)
    values = model_data(spec, ps, ss, method) if key is not None else None
    mkey = ("pymc", key) if (use_cache and key is not None) else None
    built = MODEL_CACHE.get(mkey) if mkey is not None else None
    if built is not None:
        import pymc as pm

        pm.set_data(values, model=built.model)
        return built, key, values
    if method == "collapsed":
        built = build_collapsed_model(spec, ps, ss)
    else:
        built = build_joint_model(spec, ps, ss, likelihood=likelihood, centred=centred)
    MODEL_CACHE.put(mkey, built)
    return built, key, values


def _post_to_named(spec, method: str, ps, raw, ss, rng: np.random.Generator):
    """Posterior ``xarray.Dataset`` under R names from the sampler's internal names."""
    import xarray as xr

    from scoremix.bayes.collapsed import conditional_draws
    from scoremix.bayes.joint import beta_prior_arrays
    from scoremix.bayes.params import variance_draws

    nc, nd = raw.sizes["chain"], raw.sizes["draw"]
    coords = {"chain": raw["chain"].values, "draw": raw["draw"].values}

    def shape(a: np.ndarray) -> np.ndarray:
        return a.reshape((nc, nd) + a.shape[1:])

    sigma, Ts = variance_draws(spec, raw)
    if method == "collapsed":
        m0, s0 = beta_prior_arrays(spec, ps)
        beta, bs = conditional_draws(ss.shift_response(m0), sigma, Ts, m0, s0, rng)
    else:
        beta = np.asarray(raw["beta"].values).reshape(nc * nd, spec.p)
        bs = []
        for k, t in enumerate(spec.terms):
            bs.append(np.asarray(raw[f"b__{k}"].values).reshape(nc * nd, t.n_levels, t.p))
    data_vars: dict[str, Any] = {}
    for j, name in enumerate(spec.fixef_names):
        data_vars[name] = (("chain", "draw"), shape(beta[:, j]))
    data_vars.update(re_sd_cor_vars(raw, spec.terms))
    snames = sigma_names(spec)
    for i, nm in enumerate(snames):
        data_vars[nm] = (("chain", "draw"), shape(sigma[:, i]))
    if snames != ["sigma"]:
        data_vars["sigma"] = (("chain", "draw"), shape(sigma[:, 0]))
    for k, t in enumerate(spec.terms):
        dims = ("chain", "draw", f"{t.group}__level", f"{t.group}__term")
        data_vars[f"b_{t.group}"] = (dims, shape(bs[k]))
        coords[f"{t.group}__level"] = list(t.levels)
        coords[f"{t.group}__term"] = list(t.term_names)
    return xr.Dataset(data_vars, coords=coords, attrs=dict(raw.attrs))


def _posterior_predictive(spec, post, rng: np.random.Generator, n_draws: int | None = None,
                          max_memory: Any = None):
    """Replicated responses ``y_rep = Xβ + Zb + ε`` of ``n_draws`` evenly spaced draws per chain
    (all by default), see :func:`scoremix.bayes.pointwise.posterior_predictive_dataset`."""
    from scoremix.bayes.pointwise import posterior_predictive_dataset

    return posterior_predictive_dataset(spec, post, rng, n_draws=n_draws, max_memory=max_memory)


def bayes_lmer_spec(
    spec,
    priors: Mapping[str, Any] | None = None,
    *,
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    sampler: str = "pymc",
    method: str = "collapsed",
    likelihood: str = "suffstats",
    seed: Any = UNSET,
    progress: bool = UNSET,
    posterior_predictive: bool | int = False,
    cores: int | None = None,
    centred: bool | dict | None = None,
    target_accept: float | None = None,
    check: bool = True,
    cache: bool = True,
    cells: tuple[np.ndarray, np.ndarray] | None = None,
    max_memory: Any = None,
    random_seed: Any = UNSET,
    progressbar: Any = UNSET,
) -> BayesLmerResult:
    """:func:`bayes_lmer` for a ready :class:`~scoremix.lme.spec.ModelSpec` (see there).

    ``cells=(lo, hi)``: the latent cell of every row of a transformation model with a fixed
    transform (:mod:`scoremix.bayes.transform`); needs ``method="joint"``,
    ``likelihood="rows"``.
    """
    import arviz as az

    seed = resolve_seed(seed, random_seed, "bayes_lmer")
    progressbar = resolve_progress(progress, progressbar, True, "bayes_lmer")
    random_seed = seed_int(seed)
    import xarray as xr

    from scoremix.bayes.suffstats import blocked_suffstats

    if method not in ("collapsed", "joint"):
        raise ValueError(f"method must be 'collapsed' or 'joint', got {method!r}")
    if likelihood not in ("suffstats", "rows"):
        raise ValueError(f"likelihood must be 'suffstats' or 'rows', got {likelihood!r}")
    if method == "collapsed" and likelihood == "rows":
        raise ValueError("method='collapsed' always works on sufficient statistics; "
                         "likelihood='rows' needs method='joint'")
    _check_sampler(sampler)
    if cells is not None and (method != "joint" or likelihood != "rows"):
        raise ValueError("the cell likelihood of a transformation model needs method='joint', likelihood='rows'")
    if check:
        warn_nested_factors(spec)
    ps = resolve_priors(spec, priors)
    ss = blocked_suffstats(spec) if (method == "collapsed" or likelihood == "suffstats") else None
    t0 = time.perf_counter()
    built, key, values = _get_model(spec, ps, ss, method, likelihood, centred, cache, cells=cells)
    seq = np.random.SeedSequence(random_seed)
    pm_seed = int(seq.generate_state(1)[0] % (2**31 - 1)) if random_seed is not None else None
    rng = np.random.default_rng(seq.spawn(1)[0])
    if sampler == "nutpie":
        raw = _sample_nutpie(built, key, values, draws, tune, chains, cores, pm_seed, progressbar,
                             target_accept, cache)
    else:
        raw = _sample(built.model, sampler, draws, tune, chains, cores, pm_seed, progressbar, target_accept)
    _check_complete(raw, draws, chains)  # PyMC returns a truncated trace on Ctrl-C: never a normal result
    wall = time.perf_counter() - t0
    post = _post_to_named(spec, built.method, ps, raw.posterior, ss, rng)
    groups: dict[str, Any] = {"posterior": post, "sample_stats": raw.sample_stats,
                              "observed_data": xr.Dataset({spec.response: (("obs",),
                                                                          np.asarray(spec.y))})}
    if posterior_predictive:
        n_pp = None if posterior_predictive is True else int(posterior_predictive)
        groups["posterior_predictive"] = _posterior_predictive(spec, post, rng, n_draws=n_pp, max_memory=max_memory)
    idata = az.InferenceData(**groups)
    res = BayesLmerResult(idata=idata, spec=spec, method=method, likelihood=likelihood, sampler=sampler,
                          priors=ps, diagnostics=None, wall_time=wall,  # type: ignore[arg-type]
                          centred=list(built.centred), cells=cells)
    res.diagnostics = diagnose(idata, res.param_names)
    gate(res.diagnostics)
    return res


def bayes_lmer(
    formula: Any,
    data: pd.DataFrame | None = None,
    *,
    priors: Mapping[str, Any] | None = None,
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    sampler: str = "pymc",
    method: str = "collapsed",
    likelihood: str = "suffstats",
    seed: Any = UNSET,
    progress: bool = UNSET,
    dispersion: str | None = None,
    posterior_predictive: bool | int = False,
    cores: int | None = None,
    weights: Any = None,
    centred: bool | dict | None = None,
    target_accept: float | None = None,
    cache: bool = True,
    transform: Any = None,
    max_memory: Any = None,
    random_seed: Any = UNSET,
    progressbar: Any = UNSET,
) -> BayesLmerResult | BayesLocScaleResult:
    r"""Fit a linear mixed model by NUTS with lme4 formula syntax.

    Parameters
    ----------
    formula:
        lme4 formula (``"score ~ label + (1|speaker) + (0 + dummy(label, 'spoof')|attack)"``),
        or a ready :class:`~scoremix.lme.spec.ModelSpec` (then ``data`` is ignored).
    data:
        the trial table; or a ``dask.dataframe.DataFrame`` / parquet path or glob, reduced to
        summed cross-products and moments on the cluster (same posterior as in memory for
        the same seed; ``observed_data`` then holds no rows, see ``docs/dask.md``).
    priors:
        overrides of the default priors, keyed by parameter name (``"sigma"``,
        ``"sd_speaker__(Intercept)"``, ``"labelspoof"``, ``"cor_<grp>"``); values are
        :class:`~scoremix.bayes.priors.Prior` objects (see :mod:`scoremix.bayes.priors`).
    draws, tune, chains:
        NUTS draws kept per chain, warm-up iterations, chains.
    sampler:
        ``"pymc"`` (default), ``"nutpie"`` or ``"numpyro"`` (the latter two need their
        packages; a :class:`SamplerUnavailableError` names the missing one).
    method:
        ``"collapsed"`` (β, b integrated out; default) or ``"joint"``.
    likelihood:
        for ``method="joint"``: ``"suffstats"`` (default) or ``"rows"``.
    seed:
        int or ``numpy.random.Generator``: makes the sampler and the conditional β/b draws
        reproducible (``random_seed=`` is its deprecated name, with a ``FutureWarning``).
    progress:
        show the sampler's progress bar (default ``True``; ``progressbar=`` is deprecated).
    dispersion:
        class-specific residual SD, e.g. ``"~ label"`` (σ per level: ``sigma_<level>``).
        With random effects, e.g. ``"~ label + diag(0 + label | speaker)"`` (a log-SD effect per
        speaker and class), the model is the Gaussian location-scale model and the result a
        :class:`~scoremix.bayes.locscale.BayesLocScaleResult` (see
        :mod:`scoremix.bayes.dispersion_re` for the formulas accepted); other structures raise
        :class:`~scoremix.bayes.dispersion_re.DispersionRandomEffectsError`.
    posterior_predictive:
        add ``posterior_predictive`` (replicated responses) to ``idata``: ``True`` for every
        draw, an int for that many evenly spaced draws per chain.  The array is checked
        against the memory budget before it is allocated.
    cores:
        parallel chains (PyMC sampler); default PyMC's choice.
    weights:
        prior weights (residual variance ``σ²/w_i``), as in ``lmer``.
    centred:
        joint model only: force the centred (``True``) / non-centred (``False``)
        parameterisation, per group with a dict; default rule: ≥ 20 rows per level →
        centred.
    target_accept:
        NUTS target acceptance rate (PyMC default 0.8).
    cache:
        reuse a built model (and nutpie's compiled model) from an earlier fit with the
        same level counts, term sizes and prior families; its ``pm.Data`` (cross-products,
        prior scales) is set to this data (see :mod:`scoremix.bayes.cache`).
    transform:
        ``None`` (default): the Gaussian model.  ``"monotone"``: the transformation model
        ``h(score) = Xβ + Zb + ε`` with ``h`` fixed at its ML estimate
        (``lmer(..., transform="monotone")``), or that ``lmer`` fit itself to reuse.  With
        ``method="collapsed"`` (default) the fast path: the latent points (conditional means
        of the latent value given the score's cell) fitted by the collapsed sampler
        (:mod:`scoremix.bayes.latent`); with ``method="joint"`` the exact cell likelihood of
        the scores (ties and saturated scores included; slow: one latent Gaussian per row),
        which also accepts a bare fitted transform object (``fit.transform``).
        Everything in the result is on the latent scale; ``result.transform`` maps scores to
        it (see :mod:`scoremix.bayes.transform` for what fixing ``h`` ignores).

    max_memory:
        budget (bytes, or ``"4GB"``) for any per-trial × per-draw array (default
        ``$SCOREMIX_MAX_MEMORY`` or 2 GiB, see :mod:`scoremix.bayes.memory`); exceeding it
        raises :class:`~scoremix.bayes.memory.MemoryBudgetError` before allocating.

    Returns
    -------
    BayesLmerResult

    Notes
    -----
    Interrupting the sampler (Ctrl-C) raises :class:`SamplingInterrupted` (a
    ``KeyboardInterrupt``); a truncated posterior is never returned.

    Random-effect structures: every term ``lmer`` accepts — ``(1|g)``, correlated slopes
    ``(x + z|g)`` (LKJ prior on the correlation matrix), uncorrelated ``(x||g)`` (split into
    independent terms), nested ``(1|a/b)`` and interactions ``(1|a:b)``, repeated grouping
    factors — is fitted (tests/test_bayes_structures.py).
    """
    from scoremix.lme.spec import ModelSpec

    seed = resolve_seed(seed, random_seed, "bayes_lmer")
    progress = resolve_progress(progress, progressbar, True, "bayes_lmer")

    for name, value, least in (("draws", draws, 1), ("tune", tune, 0), ("chains", chains, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
            raise ValueError(f"bayes_lmer: {name} must be an integer >= {least}, got {value!r}")
    # s6bayes-check: dispersion random effects -> the Bayesian location-scale model (or a named refusal)
    from scoremix.bayes.dispersion_re import fit_dispersion_re, has_dispersion_random_effects

    if has_dispersion_random_effects(dispersion):
        return fit_dispersion_re(formula, data, dispersion, priors=priors, draws=draws, tune=tune, chains=chains,
                                 sampler=sampler, method=method, seed=seed, progress=progress, cores=cores,
                                 centred=centred, target_accept=target_accept, transform=transform, weights=weights,
                                 posterior_predictive=posterior_predictive)
    if isinstance(formula, ModelSpec):
        spec = formula
    elif (adapter := adapter_for("bayes_spec", data)) is not None:
        # Dask rows (registered by scoremix.distributed): the collapsed likelihood needs only
        # cross-products summed over partitions
        spec = adapter(formula, data, weights=weights, dispersion=dispersion, method=method,
                       likelihood=likelihood, posterior_predictive=posterior_predictive)
    else:
        try:
            from scoremix.lme.model_frame import build_model_spec
        except ImportError as exc:  # pragma: no cover - depends on the parser module
            raise ImportError("scoremix.lme.model_frame.build_model_spec is needed to parse formulas; "
                              "pass a ModelSpec instead") from exc
        if data is None:
            raise ValueError("data is required with a formula")
        from scoremix.lme.input_checks import check_model_input

        check_model_input(formula, data)
        spec = build_model_spec(formula, data, weights=weights, dispersion=dispersion)
    refuse_structured(spec)
    cells = None
    tr = None
    point_cells = None
    fast = (isinstance(transform, str) and transform == "monotone") or hasattr(transform, "latent_gaussian_fit")
    if fast and method == "collapsed":  # s5bayes-ls: the fast path, scoremix.bayes.latent
        from scoremix.bayes.latent import latent_point_spec

        if isinstance(transform, str) and isinstance(formula, ModelSpec):
            raise ValueError("transform='monotone' needs the formula and data (to fit h); with a ModelSpec pass "
                             "transform=<the lmer(..., transform='monotone') fit>")
        if posterior_predictive:
            raise ValueError("posterior_predictive is not available with a transform (replicates would be latent)")
        spec, tr, point_cells = latent_point_spec(formula, data, spec, transform, dispersion, weights)
        transform = None
    if transform is not None:
        from scoremix.bayes.transform import latent_spec, ml_transform

        if isinstance(transform, str):
            if transform == "monotone-by-class":
                from scoremix.bayes.transform import TransformSpecError

                raise TransformSpecError("bayes_lmer(transform='monotone-by-class') is not supported (one transform "
                                         "per stratum); use transform='monotone', the frequentist "
                                         "lmer(..., transform='monotone-by-class'), or scoremix.bayes_locscale "
                                         "(a transform per class × attack stratum)")
            if transform != "monotone":
                raise ValueError(f"transform must be None, 'monotone' or a fitted transform, got {transform!r}")
            if isinstance(formula, ModelSpec):
                raise ValueError("transform='monotone' needs the formula and data (to fit h); with a ModelSpec "
                                 "pass transform=<lmer(..., transform='monotone').transform>")
            tr = ml_transform(formula, data, dispersion, weights)
        else:
            tr = transform
        spec, cells = latent_spec(spec, tr)
        method, likelihood = "joint", "rows"
        if posterior_predictive:
            raise ValueError("posterior_predictive is not available with a transform (replicates would be latent)")
    res = bayes_lmer_spec(spec, priors=priors, draws=draws, tune=tune, chains=chains, sampler=sampler,
                          method=method, likelihood=likelihood, seed=seed,
                          progress=progress, posterior_predictive=posterior_predictive,
                          cores=cores, centred=centred, target_accept=target_accept, cache=cache, cells=cells,
                          max_memory=max_memory)
    res.transform = tr
    if point_cells is not None:
        res.cells = point_cells  # exact cell log-likelihood per row for LOO
    return res
