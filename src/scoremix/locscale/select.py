r"""Automatic specification of a score model: :func:`score_model`.

Candidates (nested location-scale transformation mixed models, :mod:`scoremix.locscale.fit`),
all with one transform per stratum (class × ``factors`` levels):

=====================  =====================================================================
``location``           speaker location per class ``(0 + label | speaker)``
``location+scale``     + speaker log-SD per class (dispersion ``(0 + label | speaker)``)
``+speaker:stratum``   + speaker × stratum location (negative class)
``+heavy-tailed``      speaker log-SD effects Student-t (a few speakers far wider: goats)
``+correlated``        speaker location and log-SD correlated (Gaussian)
=====================  =====================================================================

Then a per-speaker **failure mixture** (:mod:`scoremix.locscale.failure`, ``failure_quantile``)
is added to the chosen specification when the speaker-grouped cross-validated log-likelihood of
the held-out speakers' failure counts is higher with a speaker multiplier of the failure share
than with the pooled shares.

The choice maximises the **speaker-grouped cross-validated log-likelihood**: speakers are
split into ``n_folds`` folds; each candidate is fitted on the others' cells and scored by
the marginal likelihood (random effects integrated out) of the held-out speakers' cells.
All candidates are compared on the same latent values (the first-pass rank-based normal
scores of every stratum), so their likelihoods are comparable.

Then ``covariates`` are tried one at a time as per-class location terms
:math:`x^\top\beta_c` on the chosen structure (forward selection by the same CV
log-likelihood; :mod:`scoremix.locscale.covariates`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix.locscale.failure import (SHARE_ESTIMATES, choose_failure_min_count, failure_cuts, failure_cv,
                                      failure_flags, failure_shape_cv)
from scoremix.locscale.covariates import CovCellStats, covariate_stats, make_likelihood
from scoremix.locscale.fit import (LocScaleData, LocScaleError, _flags, _maximise, _start, _stats, covariate_design,
                                   fit_locscale)
from scoremix.locscale.latent import cell_moments, normal_score_edges
from scoremix.locscale.likelihood import CellStats, UnitLikelihood
from scoremix.locscale.spec import LocScaleSpec

__all__ = ["Selection", "candidate_specs", "score_model"]


@dataclass
class Selection:
    """What :func:`score_model` tried and chose.

    ``table``: per candidate its specification, cross-validated log-likelihood (sum over
    folds of the held-out speakers' marginal log-likelihood), its difference from the best
    and whether it was chosen.  ``chosen``: the chosen :class:`LocScaleSpec`.
    ``fitted_freely``: the strata (class × factor levels) whose score distribution the model
    reproduces exactly (one transform each); ``predicted``: the cells whose distribution
    is predicted with partial pooling (speaker, speaker × stratum)."""

    table: pd.DataFrame
    chosen: LocScaleSpec
    fitted_freely: list
    predicted: list
    n_folds: int
    notes: list = field(default_factory=list)
    speaker_pooling: Any = None   # s6speaker: the SpeakerPooling chosen (locscale/speaker_pool.py)

    def __repr__(self) -> str:
        return (f"Selection(chosen={self.chosen.name!r}: {self.chosen.describe()})\n"
                f"{self.table.to_string()}\nfitted freely: {len(self.fitted_freely)} strata; "
                f"predicted: {', '.join(self.predicted)}")


def candidate_specs(base: LocScaleSpec) -> list[LocScaleSpec]:
    """The candidate list of the module docstring, built on ``base``'s columns."""
    both = ("negative", "positive")
    return [
        base.with_(speaker_scale=(), correlated=(), speaker_by_stratum=(), heavy_tailed_scale=(), name="location"),
        base.with_(speaker_scale=both, correlated=(), speaker_by_stratum=(), heavy_tailed_scale=(),
                   name="location+scale"),
        base.with_(speaker_scale=both, correlated=(), speaker_by_stratum=("negative",), heavy_tailed_scale=(),
                   name="+speaker:stratum"),
        base.with_(speaker_scale=both, correlated=(), speaker_by_stratum=("negative",), heavy_tailed_scale=both,
                   name="+heavy-tailed"),
        base.with_(speaker_scale=both, correlated=both, speaker_by_stratum=("negative",), heavy_tailed_scale=(),
                   name="+correlated"),
    ]


def _subset_stats(st: CellStats, keep_units: np.ndarray) -> CellStats:
    if isinstance(st, CovCellStats):  # s5trust-auto: with covariate sums
        return st.subset_units(keep_units)
    cells = keep_units[st.unit]
    new_unit = -np.ones(st.n_units, np.int64)
    new_unit[keep_units] = np.arange(int(keep_units.sum()))
    return CellStats(unit=new_unit[st.unit[cells]], stratum=st.stratum[cells], n=st.n[cells], sz=st.sz[cells],
                     szz=st.szz[cells], unit_class=st.unit_class[keep_units], n_strata=st.n_strata,
                     n_classes=st.n_classes)


def cv_loglik(data: LocScaleData, spec: LocScaleSpec, n_folds: int, seed: int, n_nodes: int = 7
              ) -> tuple[float, np.ndarray]:
    """Speaker-grouped cross-validated log-likelihood of ``spec`` on the first-pass latent
    values (module docstring); returns the total and the per-fold values."""
    n = data.score.size
    ez, ez2, info = cell_moments(data.cells, normal_score_edges(data.cells), np.zeros(n), np.ones(n))
    st, unit_ids, _, trial_cell = _stats(data, ez, ez2, info)
    if spec.covariates:  # s5trust-auto
        st = covariate_stats(st, covariate_design(data, spec.covariates)[1], ez, trial_cell)
    spk = unit_ids // 2
    speakers = np.unique(spk)
    rng = np.random.default_rng(seed)
    fold_of = dict(zip(speakers, rng.permutation(np.arange(speakers.size) % n_folds)))
    fold = np.array([fold_of[s] for s in spk])
    scale, corr, omega, tail = _flags(spec, st)
    full = make_likelihood(st, scale, corr, omega, n_nodes=n_nodes, tail=tail)
    x_all, _ = _maximise(full, _start(st, full), rounds=1, tol=1e-6)
    out = []
    for k in range(n_folds):
        tr, te = fold != k, fold == k
        if not te.any():
            continue
        st_tr, st_te = _subset_stats(st, tr), _subset_stats(st, te)
        lik = make_likelihood(st_tr, scale, corr, omega, n_nodes=n_nodes, tail=tail)
        x, _ = _maximise(lik, x_all, rounds=1, tol=1e-6)   # warm start at the all-speaker fit
        lt = make_likelihood(st_te, scale, corr, omega, n_nodes=n_nodes, tail=tail)
        p = lt.unpack(x)
        lt.recentre(p)
        out.append(float(lt.unit_loglik(p).sum()))
    return float(np.sum(out)), np.asarray(out)


def score_model(trials: pd.DataFrame, *, score: str = "score", label: str = "label", speaker: str = "speaker",
                factors: Sequence[str] = (), covariates: Sequence[str] = (), positive: Any = None,
                candidates: Sequence[LocScaleSpec] | None = None, n_folds: int = 4, seed: int = 0,
                n_nodes: int = 9, n_pass: int = 3, pool_shapes: bool = False,
                failure_quantile: float | None = 0.99, speaker_pooling: str | None = "error_rates",
                failure_share: str = "mean", speaker_pooling_parts: int = 2) -> Any:
    r"""Fit a score model whose specification is chosen automatically (module docstring).

    Parameters
    ----------
    trials: one row per trial.
    score, label, speaker: columns; ``positive`` the positive class value.
    factors: categorical columns (e.g. ``["attack"]``) whose levels get their own transform
        within each class (their distributions are fitted freely); speakers are modelled with
        partial pooling within them.
    covariates: columns that may enter the latent location per class,
        :math:`x^\top\beta_c` (``label × covariate``; numeric as they are, categorical as
        treatment dummies; :mod:`scoremix.locscale.covariates`).  After the random-effect
        structure is chosen, each covariate in turn is added when it raises the
        cross-validated log-likelihood (forward selection; rows ``+label:covariate`` of the
        selection table).
    candidates: the specifications to compare (default :func:`candidate_specs`).
    n_folds, seed: the speaker-grouped cross-validation.
    n_nodes, n_pass: passed to :func:`scoremix.locscale.fit_locscale`.
    failure_quantile: ``q`` of the per-speaker failure mixture (:mod:`scoremix.locscale.failure`)
        added to the chosen specification when its speaker-grouped CV wins; ``None``: never.
    failure_share: how a speaker's failure multiplier is summarised when the failure mixture is
        used: ``"mean"`` (its posterior mean) or ``"median"`` (its posterior median,
        :func:`scoremix.locscale.failure.multiplier_quantile`; s8speaker).
    speaker_pooling: per-speaker shape pooling (:mod:`scoremix.locscale.speaker_pool`): every
        speaker's distribution is the blend :math:`\omega F_{\text{own}} + (1-\omega)
        F_{\text{model}}`, :math:`\omega = n/(n+\kappa_c)`, with :math:`\kappa_c` per class
        chosen by within-speaker cross-validation (``"error_rates"``: of the speakers' EER and
        minimum DCF on held-out halves, the model refitted on the other half; ``"crps"``:
        leave-one-trial-out threshold-weighted CRPS); :math:`\kappa=\infty` (the model alone)
        is a candidate.  ``None``: never.  The choice is ``fit.selection.speaker_pooling``.
    speaker_pooling_parts: parts of the ``"error_rates"`` CV of the speaker pooling (refit on
        one, hold out the others; default 2, halves).  The held-out part's size shapes which
        :math:`\kappa` the CV prefers (absolute errors of small-sample EERs); 3 holds out twice
        what it refits (s8speaker, docs/score-models.md *Session 8*).
    pool_shapes: also consider shapes between one transform per class and one per stratum:
        each stratum's distribution shrunk toward a shared class shape, the amount of pooling
        :math:`\kappa` chosen by speaker-grouped CV (:mod:`scoremix.locscale.pooled`; κ = 0 is
        one free transform per stratum).  The fit then carries ``shape_pooling``.

    Returns
    -------
    LocScaleFit
        with ``.selection`` (:class:`Selection`); accepted by ``sm.model_eer(fit, by=...)``,
        :func:`scoremix.validate_model` and every function built on the predictive layer.
    """
    if failure_share not in SHARE_ESTIMATES:
        raise LocScaleError(f"failure_share must be one of {SHARE_ESTIMATES}, got {failure_share!r}")
    cov = [c for c in covariates if c not in factors]
    base = LocScaleSpec(score=score, label=label, speaker=speaker, positive=positive, strata=tuple(factors))
    data = LocScaleData(trials, base)
    for c in cov:
        if c not in trials.columns:
            raise LocScaleError(f"covariate {c!r} is not in the trial table (columns: {list(trials.columns)})")
    n_spk = len(data.speakers)
    cands = list(candidates) if candidates is not None else candidate_specs(base)
    if not cands:
        raise LocScaleError("candidates is empty")
    folds = max(2, min(int(n_folds), n_spk))
    rows = []
    for c in cands:
        if n_spk >= 4 and len(cands) > 1:
            total, per = cv_loglik(data, c, folds, seed)
        else:
            total, per = np.nan, np.array([])
        rows.append(dict(name=c.name or c.describe(), specification=c.describe(), cv_loglik=total))
    best = int(np.nanargmax([r["cv_loglik"] for r in rows])) if any(np.isfinite(r["cv_loglik"]) for r in rows) \
        else len(cands) - 1
    chosen = cands[best]
    notes = []
    if cov:
        chosen, best, cov_rows, cov_notes = _select_covariates(data, chosen, best, rows[best]["cv_loglik"], cov,
                                                               folds, seed, len(rows), n_spk)
        rows += cov_rows
        notes += cov_notes
    table = pd.DataFrame(rows)
    table["delta"] = table["cv_loglik"] - table["cv_loglik"].iloc[best]
    table["chosen"] = np.arange(len(table)) == best
    # --- s5trust-mix: per-speaker failure mixture (locscale/failure.py), chosen by its own CV
    fail_row = None
    if failure_quantile is not None and chosen.transform and n_spk >= 4 and not (pool_shapes and factors):
        fq = float(failure_quantile)
        flags = failure_flags(data.score, data.y, failure_cuts(data.score, data.y, fq))
        if flags.any():
            cvf = failure_cv(np.asarray(data.speakers)[data.speaker_codes], data.core_key, data.y, flags,
                             n_folds=folds, seed=seed)
            use = bool(cvf["delta"] > max(cvf.get("se", 0.0), 0.0))   # s6failure: one-standard-error rule
            fail_row = dict(name="+failure-mixture", specification=chosen.with_(failure_quantile=fq).describe(),
                            cv_loglik=np.nan, cv_failure_delta=cvf["delta"], cv_failure_se=cvf["se"], chosen=use, chosen_failure=use)
            if use:
                chosen = chosen.with_(failure_quantile=fq, failure_share=failure_share,
                                      name=f"{chosen.name}+failure-mixture")
                # s6failure: one failure distribution per class or per stratum (CV of the CRPS)
                shape_cv = failure_shape_cv(np.asarray(data.speakers)[data.speaker_codes], data.core_key, data.y,
                                            data.score, flags, n_folds=folds, seed=seed)
                m_best = choose_failure_min_count(shape_cv)
                if m_best is not None:
                    chosen = chosen.with_(failure_min_count=m_best, name=f"{chosen.name}-by-stratum")
                fail_row["failure_by"] = "class" if m_best is None else f"stratum (>= {m_best} failures)"
                notes.append("failure distributions: speaker-grouped CV CRPS per threshold m (own distribution for a "
                             "stratum with >= m failures; 'class': one per class): "
                             + ", ".join(f"{m}: {c:.2f}" for m, c in zip(shape_cv["min_count"], shape_cv["crps"]))
                             + f" → {fail_row['failure_by']} (one-standard-error rule)")
    # --- end s5trust-mix
    if pool_shapes and factors:  # s5trust-auto: pooled per-level shapes
        from scoremix.locscale.pooled import fit_pooled_shapes

        fit = fit_pooled_shapes(trials, chosen, n_folds=folds, seed=seed, n_pass=n_pass, n_nodes=n_nodes)
    else:
        fit = fit_locscale(LocScaleData(trials, chosen), chosen, n_pass=n_pass, n_nodes=n_nodes)
    predicted = [f"{speaker} location per class"]
    if chosen.speaker_scale:
        predicted.append(f"{speaker} log-SD ({', '.join(chosen.speaker_scale)})")
    if chosen.speaker_by_stratum:
        predicted.append(f"{speaker} × stratum location ({', '.join(chosen.speaker_by_stratum)})")
    for c in chosen.covariates:
        predicted.append(f"{label} × {c} location (per class)")
    if fail_row is not None:   # s5trust-mix
        notes.append(f"failure mixture (q = {failure_quantile:g}): speaker-grouped CV log-likelihood of the "
                     f"failure counts, speaker multiplier minus pooled shares = {fail_row['cv_failure_delta']:.2f} "
                     f"(SE {fail_row.get('cv_failure_se', float('nan')):.2f}; used when above one SE) → "
                     f"{'used' if fail_row['chosen_failure'] else 'not used'}")
        if fail_row["chosen_failure"]:   # the table gets the row only when it is used (notes: always)
            predicted.append(f"{speaker} failure share per class (zero-inflated gamma-Poisson multiplier)")
            table = pd.concat([table, pd.DataFrame([fail_row])], ignore_index=True)
    fit.selection = Selection(table=table.set_index("name"), chosen=chosen, fitted_freely=list(data.cells.levels),
                              predicted=predicted, n_folds=folds, notes=notes)
    if getattr(fit, "shape_pooling", None) is not None:
        _pooling_selection(fit.selection, fit.shape_pooling)
    # --- s6speaker: per-speaker shape pooling (locscale/speaker_pool.py), chosen by within-speaker CV
    if speaker_pooling is not None and chosen.transform and n_spk >= 4:
        from scoremix.locscale.speaker_pool import choose_speaker_pooling

        pool = choose_speaker_pooling(fit, criterion=speaker_pooling, seed=seed, n_parts=speaker_pooling_parts)
        fit.selection.speaker_pooling = pool
        k = ", ".join(f"{'positive' if c else 'negative'} {v:g}" for c, v in sorted(pool.kappa.items()))
        fit.selection.notes.append(f"speaker shape pooling ({speaker_pooling} CV within speakers): kappa {k} "
                                   f"({'used' if pool.used else 'model alone'})")
        if pool.used:
            fit.speaker_pooling = pool
            fit.selection.predicted.append(f"{speaker} shape per class: own distribution blended with the model's, "
                                           "weight n/(n + kappa)")
    # --- end s6speaker
    return fit


def _pooling_selection(sel: Selection, pool: Any) -> None:  # s5trust-auto: pooled per-level shapes
    """Strata whose shape is pooled (weight < 1) move from ``fitted_freely`` to ``predicted``."""
    pooled = [lv for lv in sel.fitted_freely if pool.weights.get(lv, 1.0) < 1.0]
    sel.fitted_freely = [lv for lv in sel.fitted_freely if lv not in pooled]
    sel.predicted += [f"stratum {lv} shape pooled toward its class shape (weight {pool.weights[lv]:.3f} on its own "
                      f"distribution)" for lv in pooled]
    sel.notes.append(f"shape pooling: kappa = {pool.kappa:g} chosen by speaker-grouped CV of the threshold-weighted "
                     f"CRPS ({len(pooled)} strata pooled)")


# ----------------------------------------------------------------------------------------------
# s5trust-auto: forward selection of per-class covariate location terms
# ----------------------------------------------------------------------------------------------

def _select_covariates(data: LocScaleData, chosen: LocScaleSpec, best: int, best_cv: float,
                       covariates: Sequence[str], folds: int, seed: int, offset: int, n_spk: int
                       ) -> tuple[LocScaleSpec, int, list[dict], list[str]]:
    """Add each covariate's per-class location term to ``chosen`` in turn, keeping it when it
    raises the speaker-grouped CV log-likelihood.  Returns the final specification, its row
    index in the selection table (``offset`` + its position among the rows tried, or ``best``
    when none is kept), the rows tried and notes."""
    rows, notes = [], []
    cur, cur_cv = chosen, best_cv
    for c in covariates:
        trial = cur.with_(covariates=(*cur.covariates, c), name=f"{cur.name}+{cur.label}:{c}")
        total = cv_loglik(data, trial, folds, seed)[0] if n_spk >= 4 else np.nan
        rows.append(dict(name=trial.name, specification=trial.describe(), cv_loglik=total))
        if np.isfinite(total) and (not np.isfinite(cur_cv) or total > cur_cv):
            cur, cur_cv = trial, total
            best = offset + len(rows) - 1
            notes.append(f"covariate {c!r}: per-class location term kept (CV log-likelihood +{total - best_cv:.2f} "
                         f"over the model without covariates)")
        else:
            notes.append(f"covariate {c!r}: per-class location term not kept (it does not raise the CV "
                         "log-likelihood)")
    return cur, best, rows, notes
