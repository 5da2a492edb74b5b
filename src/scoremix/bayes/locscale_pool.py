r"""Transform uncertainty of a Bayesian location-scale transformation fit: a mixture of
posteriors over parametric-bootstrap re-estimates of the stratum transforms.

:func:`scoremix.bayes.locscale.bayes_locscale` fixes every stratum transform :math:`h_s` at its
ML estimate :math:`\hat h`, so its posterior is :math:`p(\theta\mid y, \hat h)` and its EER
interval ignores the sampling error of :math:`\hat h` (about 1.8× the posterior SD on LA,
``docs/bayes-locscale.md``).  The posterior that integrates over the transforms is

.. math::

    p(\mathrm{EER}\mid y) = \int p(\mathrm{EER}\mid y, h)\, p(h\mid y)\, dh
    \approx \frac1K \sum_{k=1}^K p(\mathrm{EER}\mid y^{(k)}, \hat h^{(k)}),

approximated here as in multiple imputation (Rubin 1987) with the bootstrap in place of the
posterior of the nuisance (Efron 2012, "Bayesian inference and the parametric bootstrap"):
:math:`\hat h^{(1)} = \hat h` on the observed scores :math:`y^{(1)} = y` (the fixed-transform
fit itself), and for :math:`k = 2..K` a parametric-bootstrap replicate :math:`y^{(k)}` —
every trial's latent value drawn from the ML fit, :math:`z_t \sim N(m_t, s_t^2)` (conditional on
the fitted speakers' effects, ``fit.trial_mean``/``fit.trial_sd``), mapped back to a score by
:math:`\hat h_s^{-1}` — on which the transforms :math:`\hat h^{(k)}` *and* the model are
re-estimated (``fit_locscale`` with the same specification, then NUTS with the same priors and
settings).  The EER draws of the K posteriors (the same number from each) are pooled.

Approximation.  Each replicate's posterior is centred on that replicate's estimate, so the
mixture's variance is :math:`\bar V_{post} + \mathrm{Var}_k(\hat\theta^{(k)})`: the spread
between replicates holds the sampling error of the transforms and also that of the location /
scale parameters, which the posterior already holds.  The pooled interval is therefore
conservative by up to the posterior variance counted twice (at most a factor √2 on the width
where the transforms' error is negligible, much less where it dominates, as on LA); the
intervals of an ``n_transform = 1`` pool are the fixed-transform ones exactly.  With small K
the between-replicate spread is itself noisy (K − 1 degrees of freedom); K = 10–20 is a
practical range.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from scoremix.bayes.locscale import (
    BayesLocScaleError,
    BayesLocScaleResult,
    locscale_cells,
    register_transform_pool,
    sample_locscale,
    summarise_dcf,
    summarise_draws,
)

__all__ = ["TransformPool", "bootstrap_scores", "transform_pool"]


def bootstrap_scores(fit: Any, rng: np.random.Generator) -> pd.DataFrame:
    """One parametric-bootstrap replicate of a transformation fit's trial table: every
    trial's latent value :math:`z_t \\sim N(m_t, s_t^2)` of the ML fit, mapped back to a score
    by its stratum's fitted :math:`\\hat h_s^{-1}` (all other columns kept)."""
    spec = fit.locscale_spec
    if not spec.transform or fit.transform is None:
        raise BayesLocScaleError("transform_uncertainty needs a transformation fit; this LocScaleSpec has "
                                 "transform=False (the scores are modelled directly, there is no transform)")
    frame = fit._data.frame
    z = np.asarray(fit.trial_mean, float) + np.asarray(fit.trial_sd, float) * rng.standard_normal(len(frame))
    strata = fit.strata.to_numpy(dtype=object)
    score = np.asarray(fit.transform.inverse(z, strata), dtype=np.float64)
    return frame.assign(**{spec.score: score})


@dataclass
class TransformPool:
    """``K`` Bayesian fits of one specification: ``results[0]`` the fixed-transform fit, the
    others refits on parametric-bootstrap replicates (:func:`transform_pool`)."""

    results: list
    seeds: list = field(default_factory=list)
    _n_first: int = field(default=0, repr=False)

    @property
    def n_transform(self) -> int:
        return len(self.results)

    def eer_draws(self, by: str | Sequence[str] | None = None, *, max_draws: int | None = 200,
                  thresholds: str = "attainable", max_thresholds: int | None = 2000) -> tuple[list, np.ndarray, list]:
        """Pooled EER draws ``(labels, E (1 + G, Σ D_k), info)``; ``info`` (n, empirical) of the
        observed data (``results[0]``)."""
        labels, E0, info = self.results[0].eer_draws(by, max_draws=max_draws, thresholds=thresholds,
                                                     max_thresholds=max_thresholds)
        parts = [E0]
        self._n_first = E0.shape[1]
        for k, r in enumerate(self.results[1:], start=1):
            lab, E, _ = r.eer_draws(by, max_draws=max_draws, thresholds=thresholds, max_thresholds=max_thresholds)
            if lab != labels:
                raise BayesLocScaleError(f"transform replicate {k} has groups {lab} but the data have {labels}")
            parts.append(E)
        return labels, np.concatenate(parts, axis=1), info

    def posterior_eer(self, by: str | Sequence[str] | None = None, *, level: float = 0.95,
                      max_draws: int | None = 200, thresholds: str = "attainable",
                      max_thresholds: int | None = 2000) -> pd.DataFrame:
        """The table of :meth:`~scoremix.bayes.locscale.BayesLocScaleResult.posterior_eer` with
        the draws pooled over the transform replicates, plus ``lo_fixed``/``hi_fixed`` (the
        interval of the fixed-transform fit) and ``n_transform``."""
        if not 0 < level < 1:
            raise BayesLocScaleError(f"level must be in (0, 1), got {level!r}")
        labels, E, info = self.eer_draws(by, max_draws=max_draws, thresholds=thresholds,
                                         max_thresholds=max_thresholds)
        tab = summarise_draws(labels, E, info, level)
        a = (1 - level) / 2
        fixed = E[:, :self._n_first]
        tab["lo_fixed"] = np.nanquantile(fixed, a, axis=1)
        tab["hi_fixed"] = np.nanquantile(fixed, 1 - a, axis=1)
        tab["n_transform"] = self.n_transform
        return tab

    def posterior_dcf(self, by: str | Sequence[str] | None = None, *, p_target: float = 0.05, c_miss: float = 1.0,
                      c_fa: float = 1.0, level: float = 0.95, max_draws: int | None = 200,
                      max_thresholds: int | None = 2000) -> pd.DataFrame:
        """:meth:`~scoremix.bayes.locscale.BayesLocScaleResult.posterior_dcf` with the draws
        pooled over the transform replicates (plus ``lo_fixed``/``hi_fixed``, ``n_transform``)."""
        if not 0 < level < 1:
            raise BayesLocScaleError(f"level must be in (0, 1), got {level!r}")
        kw = dict(p_target=p_target, c_miss=c_miss, c_fa=c_fa, max_draws=max_draws, max_thresholds=max_thresholds)
        labels, M0, info, at0 = self.results[0].dcf_draws(by, **kw)
        Ms, ats = [M0], [at0]
        for k, r in enumerate(self.results[1:], start=1):
            lab, M, _, at = r.dcf_draws(by, **kw)
            if lab != labels:
                raise BayesLocScaleError(f"transform replicate {k} has groups {lab} but the data have {labels}")
            Ms.append(M)
            ats.append(at)
        tab = summarise_dcf(labels, np.concatenate(Ms, axis=1), info, np.concatenate(ats, axis=1), level)
        a = (1 - level) / 2
        tab["lo_fixed"] = np.nanquantile(M0, a, axis=1)
        tab["hi_fixed"] = np.nanquantile(M0, 1 - a, axis=1)
        tab["n_transform"] = self.n_transform
        return tab


def transform_pool(result: Any, n_transform: int = 10, *, seed: Any = None, progress: bool = False) -> TransformPool:
    """Refit a :class:`~scoremix.bayes.locscale.BayesLocScaleResult` on ``n_transform − 1``
    parametric-bootstrap replicates of its transforms (module docstring): ML transforms
    re-estimated by ``fit_locscale`` with the same specification, NUTS with the same priors and
    settings (the compiled model is reused when the cell layout is unchanged).  ``seed``: int
    or ``numpy.random.Generator`` (replicate data and sampler seeds); ``progress``: a tqdm bar
    over the replicates."""
    from tqdm.auto import tqdm

    from scoremix.bayes.conventions import seed_int
    from scoremix.locscale import fit_locscale

    if not isinstance(result, BayesLocScaleResult):
        raise BayesLocScaleError(f"transform_pool needs a BayesLocScaleResult, got {type(result).__name__}")
    if isinstance(n_transform, bool) or not isinstance(n_transform, (int, np.integer)) or n_transform < 1:
        raise BayesLocScaleError(f"n_transform must be an integer >= 1 (1: the ML transform only), got {n_transform!r}")
    fit = result.fit
    if n_transform > 1:
        bootstrap_scores(fit, np.random.default_rng(0))  # named error for a fit without transforms
    st = result.settings
    if not st:
        raise BayesLocScaleError("this BayesLocScaleResult carries no sampler settings (made by an older "
                                 "bayes_locscale); refit it to resample the transforms")
    seq = np.random.SeedSequence(seed_int(seed))
    children = seq.spawn(max(n_transform - 1, 0))
    results: list = [result]
    seeds: list = [None]
    model, compiled = st.get("model"), st.get("compiled")
    base = result.cells
    with tqdm(total=n_transform - 1, desc="transform replicates", disable=not progress, unit="fit") as bar:
        for child in children:
            rng = np.random.default_rng(child)
            frame = bootstrap_scores(fit, rng)
            fb = fit_locscale(frame, fit.locscale_spec)
            pool = getattr(fit, "speaker_pooling", None)
            if pool is not None and pool.used:   # s7: the replicate carries the same speaker pooling (fixed kappa)
                from scoremix.locscale.speaker_pool import with_speaker_pooling

                with_speaker_pooling(fb, pool.kappa)
            cells, maps = locscale_cells(fb)
            same = (cells.unit.size == base.unit.size and np.array_equal(cells.unit, base.unit)
                    and np.array_equal(cells.stratum, base.stratum) and cells.strata_levels == base.strata_levels
                    and all(np.array_equal(getattr(cells, f), getattr(base, f))
                            for f in ("scale", "corr", "omega", "tail")))
            s_int = int(rng.integers(0, 2 ** 31 - 1))
            step = None
            if same and model is not None and st["sampler"] == "pymc":
                step = st.get("step")
                if step is None:  # compile the NUTS step once for every replicate (pm.Data shared)
                    import pymc as pm

                    with model:
                        step = pm.NUTS(target_accept=st["target_accept"])
                    st["step"] = step
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                d = sample_locscale(cells, st["priors"], draws=st["draws"], tune=st["tune"], chains=st["chains"],
                                    seed=s_int, progress=False, cores=st["cores"], target_accept=st["target_accept"],
                                    centred=st["centred"], sampler=st["sampler"],
                                    model=model if same else None, step=step,
                                    compiled=compiled if same else None)
            keys = ("mu", "lam", "tau_b", "tau_g", "rho", "om2", "nu", "g", "b", "u")
            results.append(BayesLocScaleResult(fit=fb, cells=cells, maps=maps, draws={k: d[k] for k in keys},
                                               idata=None, diagnostics=pd.DataFrame(), wall_time=d["wall_time"],
                                               centred=d["centred"]))
            seeds.append(s_int)
            bar.update(1)
    return TransformPool(results=results, seeds=seeds)


register_transform_pool(transform_pool)
