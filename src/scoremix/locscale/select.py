r"""Automatic specification of a score model: :func:`score_model`.

Candidates (nested location-scale transformation mixed models, :mod:`scoremix.locscale.fit`),
all with one transform per stratum (class × ``factors`` × ``covariates`` levels):

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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix.locscale.failure import failure_cuts, failure_cv, failure_flags
from scoremix.locscale.fit import LocScaleData, LocScaleError, _flags, _maximise, _start, _stats, fit_locscale
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
    st, unit_ids, _, _ = _stats(data, ez, ez2, info)
    spk = unit_ids // 2
    speakers = np.unique(spk)
    rng = np.random.default_rng(seed)
    fold_of = dict(zip(speakers, rng.permutation(np.arange(speakers.size) % n_folds)))
    fold = np.array([fold_of[s] for s in spk])
    scale, corr, omega, tail = _flags(spec, st)
    full = UnitLikelihood(st, scale, corr, omega, n_nodes=n_nodes, tail=tail)
    x_all, _ = _maximise(full, _start(st, full), rounds=1, tol=1e-6)
    out = []
    for k in range(n_folds):
        tr, te = fold != k, fold == k
        if not te.any():
            continue
        st_tr, st_te = _subset_stats(st, tr), _subset_stats(st, te)
        lik = UnitLikelihood(st_tr, scale, corr, omega, n_nodes=n_nodes, tail=tail)
        x, _ = _maximise(lik, x_all, rounds=1, tol=1e-6)   # warm start at the all-speaker fit
        lt = UnitLikelihood(st_te, scale, corr, omega, n_nodes=n_nodes, tail=tail)
        p = lt.unpack(x)
        lt.recentre(p)
        out.append(float(lt.unit_loglik(p).sum()))
    return float(np.sum(out)), np.asarray(out)


def score_model(trials: pd.DataFrame, *, score: str = "score", label: str = "label", speaker: str = "speaker",
                factors: Sequence[str] = (), covariates: Sequence[str] = (), positive: Any = None,
                candidates: Sequence[LocScaleSpec] | None = None, n_folds: int = 4, seed: int = 0,
                n_nodes: int = 9, n_pass: int = 3, failure_quantile: float | None = 0.99) -> Any:
    """Fit a score model whose specification is chosen automatically (module docstring).

    Parameters
    ----------
    trials: one row per trial.
    score, label, speaker: columns; ``positive`` the positive class value.
    factors: categorical columns (e.g. ``["attack"]``) whose levels get their own transform
        within each class (their distributions are fitted freely); speakers are modelled with
        partial pooling within them.
    covariates: further categorical columns, treated as ``factors`` (one transform per level).
    candidates: the specifications to compare (default :func:`candidate_specs`).
    n_folds, seed: the speaker-grouped cross-validation.
    n_nodes, n_pass: passed to :func:`scoremix.locscale.fit_locscale`.
    failure_quantile: ``q`` of the per-speaker failure mixture (:mod:`scoremix.locscale.failure`)
        added to the chosen specification when its speaker-grouped CV wins; ``None``: never.

    Returns
    -------
    LocScaleFit
        with ``.selection`` (:class:`Selection`); accepted by ``sm.model_eer(fit, by=...)``,
        :func:`scoremix.validate_model` and every function built on the predictive layer.
    """
    cov = [c for c in covariates if c not in factors]
    base = LocScaleSpec(score=score, label=label, speaker=speaker, positive=positive,
                        strata=tuple([*factors, *cov]))
    data = LocScaleData(trials, base)
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
    table = pd.DataFrame(rows)
    best = int(np.nanargmax(table["cv_loglik"].to_numpy())) if table["cv_loglik"].notna().any() else len(cands) - 1
    table["delta"] = table["cv_loglik"] - table["cv_loglik"].iloc[best]
    table["chosen"] = np.arange(len(table)) == best
    chosen = cands[best]
    # --- s5trust-mix: per-speaker failure mixture (locscale/failure.py), chosen by its own CV
    fail_row = None
    if failure_quantile is not None and chosen.transform and n_spk >= 4:
        fq = float(failure_quantile)
        flags = failure_flags(data.score, data.y, failure_cuts(data.score, data.y, fq))
        if flags.any():
            cvf = failure_cv(np.asarray(data.speakers)[data.speaker_codes], data.core_key, data.y, flags,
                             n_folds=folds, seed=seed)
            use = bool(cvf["delta"] > 0)
            fail_row = dict(name="+failure-mixture", specification=chosen.with_(failure_quantile=fq).describe(),
                            cv_loglik=np.nan, cv_failure_delta=cvf["delta"], chosen=use, chosen_failure=use)
            if use:
                chosen = chosen.with_(failure_quantile=fq, name=f"{chosen.name}+failure-mixture")
    # --- end s5trust-mix
    fit = fit_locscale(LocScaleData(trials, chosen), chosen, n_pass=n_pass, n_nodes=n_nodes)
    predicted = [f"{speaker} location per class"]
    if chosen.speaker_scale:
        predicted.append(f"{speaker} log-SD ({', '.join(chosen.speaker_scale)})")
    if chosen.speaker_by_stratum:
        predicted.append(f"{speaker} × stratum location ({', '.join(chosen.speaker_by_stratum)})")
    notes = []
    if fail_row is not None:
        notes.append(f"failure mixture (q = {failure_quantile:g}): speaker-grouped CV log-likelihood of the "
                     f"failure counts, speaker-varying minus pooled share = {fail_row['cv_failure_delta']:.2f} → "
                     f"{'used' if fail_row['chosen_failure'] else 'not used'}")
        predicted.append(f"{speaker} × stratum failure share (beta-binomial)" if fail_row["chosen_failure"] else "")
        predicted = [p for p in predicted if p]
        table = pd.concat([table, pd.DataFrame([fail_row])], ignore_index=True)
    if cov:
        notes.append(f"covariates {cov} are modelled as strata (one transform per level)")
    fit.selection = Selection(table=table.set_index("name"), chosen=chosen, fitted_freely=list(data.cells.levels),
                              predicted=predicted, n_folds=folds, notes=notes)
    return fit
