r"""Per-speaker shape pooling: each speaker's distribution is a blend of the speaker's own
empirical distribution and the model's conditional one, with the amount of pooling chosen
by cross-validation of the speakers' held-out trials.

Per-speaker differences are not only location and scale: a few speakers have a handful of
catastrophic trials (a bimodal distribution), and any parametric speaker effect predicts
them poorly.  Let :math:`\hat F_{j}` be the empirical distribution of the fitted scores of a
cell :math:`j` (speaker :math:`i` × stratum, e.g. a speaker's spoofs of one attack) of class
:math:`c`, and :math:`F^{\text{model}}_{j}` the fitted model's conditional distribution of
the cell (:mod:`scoremix.locscale.fit`, with its failure mixture when it has one).  The
pooled distribution is

.. math::

    \tilde F_{j} = \omega_{ic}\,\hat F_{j} + (1-\omega_{ic})\,F^{\text{model}}_{j},\qquad
    \omega_{ic} = \frac{n_{ic}}{n_{ic}+\kappa_c},

with :math:`n_{ic}` the speaker's number of fitted trials of class :math:`c` — the posterior
mean of the speaker's distribution under a Dirichlet-process prior centred at the model's
conditional distribution with concentration :math:`\kappa_c` (Ferguson 1973), as
:mod:`scoremix.locscale.pooled` does for factor levels.  :math:`\kappa_c = 0` gives each
speaker's own counts, :math:`\kappa_c=\infty` the model alone; a speaker with more trials
leans more on its own.  Every sub-population of the speaker's trials (one attack, one
session) gets the same blend: on the fitted rows trial :math:`t` carries weight
:math:`1-\omega` on its model distribution and :math:`\omega` on a point mass at its own
score, so any set of a speaker's trials has the blended distribution.

Choice of :math:`\kappa_c` (per class) — the question is a speaker's *new* trials, so it is
cross-validated *within* speakers (:func:`choose_speaker_pooling`):

* ``"error_rates"`` (default, :func:`speaker_pooling_rates_cv`): every speaker × stratum cell
  of the fitted trials is dealt at random into ``n_parts`` parts (default 2, halves); the
  fit's specification is refitted on one part; each speaker's pooled EER and minimum DCF
  (attainable thresholds, ROCCH) from that part are compared with the speaker's empirical
  values on the other parts; each part in turn.  The
  loss of a pair :math:`(\kappa_-, \kappa_+)` is the sum over the two measures of the mean
  absolute error relative to that of the counts (:math:`\kappa = 0`).  The held-out halves are
  small, so the pair is chosen by the one-standard-error rule (Breiman et al. 1984): the pair
  pooling most toward the model among those within one standard error (over speaker × half
  entries) of the smallest loss.  Operating points repeat between a speaker's scores; the
  ROCCH takes each once (``metrics._lower_hull``; before session 7 both copies were dropped
  and counting's CV EER came out as 0.5).
* ``"crps"`` (:func:`speaker_pooling_crps_refit`): the same halves and refits, scored by the
  threshold-weighted CRPS (Gneiting & Ranjan 2011), a proper scoring rule of the whole
  distribution,

  .. math::

      \mathrm{CRPS}_\nu(\tilde F, x_t) = \int \big(\tilde F(u) - 1\{x_t < u\}\big)^2\,d\nu(u),

  with weight measure :math:`\nu` the equal mixture of the two classes' pooled fitted score
  distributions (``weight="both"``), on ``n_grid`` quantiles.  :math:`\tilde F` is linear in
  :math:`\omega`, so the score is a quadratic in :math:`\omega` per trial and the whole
  :math:`\kappa` grid costs one pass.  :func:`speaker_pooling_cv` is the cheap
  leave-one-trial-out version without refits; the model has then seen the held-out trial,
  which favours it (on a simulation with known truth it chose :math:`\kappa=\infty` where
  :math:`\kappa = 30` was best; the refitted version chose 30).

In both, :math:`\kappa = \infty` (the model alone) is a candidate, so the counts enter only
when the cross-validation favours them.

Representation.  A point mass at a fitted score :math:`v` of stratum :math:`s` is a Gaussian
on the latent scale at the middle of :math:`v`'s latent cell
:math:`(h_s^-(v), h_s^+(v)]` with an SD of :math:`10^{-4}` of the cell's width: at every
attainable threshold (the fitted scores) its rates are exactly 0 or 1, so at
:math:`\kappa_c = 0` a speaker's model EER and minimum DCF are the speaker's empirical ones.
For rows that were not fitted (``trials=`` passed), a row of cell :math:`j` carries
:math:`\omega` spread evenly over the fitted scores of cell :math:`j` (none when the cell has
no fitted trials: the model alone).  Marginal over the speaker (new speakers) there is
nothing to pool: the model alone.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy.special import ndtr

from scoremix.locscale.pooled import KAPPA_GRID, _weights

__all__ = ["SpeakerPooling", "SpeakerPoolingError", "choose_speaker_pooling", "speaker_pooling_cv",
           "speaker_pooling_crps_refit",
           "speaker_pooling_rates_cv", "rates_cv_entries", "with_speaker_pooling", "pooled_components", "point_mass_latent", "WEIGHTS",
           "CRITERIA"]

#: criteria of :func:`choose_speaker_pooling`
CRITERIA = ("error_rates", "crps")
#: choice rules of :func:`speaker_pooling_rates_cv`
RULES = ("1se", "1se-paired", "min")
#: parts of the within-speaker CV of :func:`speaker_pooling_rates_cv` (refit on one part, compare
#: with the others; 2: halves.  s8speaker measured 3 — better at a 20 % fitted share of LA, worse
#: at 50 %; docs/score-models.md, *Session 8* — and kept 2)
RATES_CV_PARTS = 2
#: weight measures of the CV CRPS
WEIGHTS = ("both", "own", "other")
#: most fitted scores a new row's empirical part is spread over (quantiles beyond)
_MAX_PER_CELL = 256


class SpeakerPoolingError(ValueError):
    """Bad input to the speaker shape pooling (names the option)."""


@dataclass
class SpeakerPooling:
    r"""The chosen per-speaker shape pooling.

    ``kappa``: :math:`\kappa_c` per class (0 negative, 1 positive; ``inf``: the model alone);
    ``weights``: per (speaker, class) :math:`\omega_{ic}` on the fitted data, a DataFrame with
    columns ``n`` and ``omega``; ``table``: CV CRPS per class and :math:`\kappa` (lower is
    better; ``delta`` from the class's best; ``chosen``)."""

    kappa: dict
    weights: pd.DataFrame
    table: pd.DataFrame
    info: dict = field(default_factory=dict)

    def omega(self, speaker: np.ndarray, cls: np.ndarray) -> np.ndarray:
        """:math:`\\omega` of every (speaker, class) pair (0 for a pair not fitted)."""
        idx = pd.MultiIndex.from_arrays([np.asarray(speaker, object), np.asarray(cls, np.int64)])
        pos = self.weights.index.get_indexer(idx)
        return np.where(pos >= 0, self.weights["omega"].to_numpy()[np.maximum(pos, 0)], 0.0)

    def components(self, fit: Any, trials: pd.DataFrame | None = None, marginal_over: Sequence[str] = ()) -> Any:
        """:func:`pooled_components` of ``fit`` (the hook ``LocScaleFit.trial_components`` calls)."""
        return pooled_components(fit, trials, marginal_over)

    @property
    def used(self) -> bool:
        return any(np.isfinite(k) for k in self.kappa.values())

    def __repr__(self) -> str:
        k = ", ".join(f"{'positive' if c else 'negative'}: {v:g}" for c, v in sorted(self.kappa.items()))
        return f"SpeakerPooling(kappa={{{k}}})"


def _as_2d(a: Any, n: int) -> np.ndarray:
    a = np.asarray(a)
    return a.reshape(n, -1)


def base_components(fit: Any, trials: pd.DataFrame | None, marginal_over: Sequence[str] = ()
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None,
                               np.ndarray | None, np.ndarray | None]:
    """The fit's own per-trial mixture: ``(mean, sd, strata, w1, mean2, sd2, strata2, w2)``
    with the further components as ``(n, K)`` arrays (``None`` without any)."""
    mean, sd, strata = fit.latent_moments(trials, marginal_over=marginal_over)
    n = len(mean)
    mix = fit.trial_mixture(trials, marginal_over=marginal_over) if callable(getattr(fit, "trial_mixture", None)) \
        else None
    if mix is None:
        return np.asarray(mean, float), np.asarray(sd, float), np.asarray(strata, object), None, None, None, None, None
    w1, m2, s2, st2, w2 = mix
    return (np.asarray(mean, float), np.asarray(sd, float), np.asarray(strata, object), np.asarray(w1, float),
            _as_2d(np.asarray(m2, float), n), _as_2d(np.asarray(s2, float), n), _as_2d(np.asarray(st2, object), n),
            _as_2d(np.asarray(w2, float), n))


def point_mass_latent(transform: Any, scores: np.ndarray, strata: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Latent mean and SD of point masses at fitted ``scores`` of ``strata`` (module
    docstring): the middle of the score's latent cell, SD 1e-4 of its width (1e-6 for an
    open end cell: mean one unit inside its finite edge; 0 for a stratum with one score)."""
    s = np.asarray(scores, np.float64)
    st = np.asarray(strata, dtype=object)
    lo, hi = np.empty(s.size), np.empty(s.size)
    for lv in pd.unique(st):
        m = st == lv
        t = transform.stratum(lv)
        lo[m], hi[m] = t.lower(s[m]), t.upper(s[m])
    fin_lo, fin_hi = np.isfinite(lo), np.isfinite(hi)
    with np.errstate(invalid="ignore"):
        mid = np.where(fin_lo & fin_hi, 0.5 * (lo + hi), np.where(fin_lo, lo + 1.0, np.where(fin_hi, hi - 1.0, 0.0)))
        sd = np.where(fin_lo & fin_hi, (hi - lo) * 1e-4, 1e-6)
    return mid, np.maximum(sd, 1e-300)


def _class_y(fit: Any, frame: pd.DataFrame) -> np.ndarray:
    from scoremix.trials import label_to_binary

    spec = fit.locscale_spec
    return np.asarray(label_to_binary(frame[spec.label], positive=spec.positive), dtype=np.int64)


def _core_key(fit: Any, frame: pd.DataFrame, y: np.ndarray) -> np.ndarray:
    key = pd.Series(np.where(y == 1, "+", "-").astype(object), index=frame.index, dtype=object)
    for c in fit.locscale_spec.strata:
        key = key + ":" + frame[c].astype(str).to_numpy()
    return key.to_numpy(dtype=object)


def _grid(score: np.ndarray, y: np.ndarray, n_grid: int, weight: str) -> dict[int, np.ndarray]:
    """Thresholds ``u`` (equal weights) of the CRPS weight measure per class."""
    fin = np.isfinite(score)

    def q(v: np.ndarray, k: int) -> np.ndarray:
        v = v[np.isfinite(v)]
        if v.size == 0:
            return np.zeros(0)
        return np.quantile(v, (np.arange(k) + 0.5) / k)

    both = np.r_[q(score[fin & (y == 0)], n_grid // 2), q(score[fin & (y == 1)], n_grid - n_grid // 2)]
    out = {}
    for c in (0, 1):
        if weight == "both":
            out[c] = both
        elif weight == "own":
            out[c] = q(score[y == c], n_grid)
        else:
            out[c] = q(score[y != c], n_grid)
    return out


def _model_cdf(fit: Any, base: tuple, grid: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``(len(rows), G)`` model ``P(S < u)`` of the fitted rows ``rows`` at thresholds ``grid``."""
    mean, sd, strata, w1, m2, s2, st2, w2 = base
    tr = fit.transform
    cache: dict = {}

    def lat(level: Any) -> np.ndarray:
        if level not in cache:
            cache[level] = np.asarray(tr.stratum(level).lower(grid), np.float64)
        return cache[level]

    def phi(m: np.ndarray, s: np.ndarray, st: np.ndarray) -> np.ndarray:
        out = np.empty((m.size, grid.size))
        for lv in pd.unique(st):
            k = st == lv
            out[k] = ndtr((lat(lv)[None, :] - m[k, None]) / s[k, None])
        return out

    F = phi(mean[rows], sd[rows], strata[rows])
    if w1 is None:
        return F
    F *= w1[rows, None]
    for j in range(m2.shape[1]):
        F += w2[rows, j, None] * phi(m2[rows, j], s2[rows, j], st2[rows, j])
    return F


def speaker_pooling_cv(fit: Any, *, kappas: Sequence[float] = KAPPA_GRID, n_grid: int = 200, weight: str = "both",
                       ) -> SpeakerPooling:
    """Choose :math:`\\kappa_c` per class by leave-one-trial-out CV of the threshold-weighted
    CRPS within speakers (module docstring); ``fit`` a fitted
    :class:`~scoremix.locscale.LocScaleFit` without speaker pooling."""
    if weight not in WEIGHTS:
        raise SpeakerPoolingError(f"weight must be one of {WEIGHTS}, got {weight!r}")
    data = fit._data
    frame = data.frame
    spec = fit.locscale_spec
    score = data.score
    y = data.y
    spk = np.asarray(data.speakers, dtype=object)[data.speaker_codes]
    key = data.core_key
    base = base_components(fit, None)
    grids = _grid(score, y, n_grid, weight)
    kap = np.asarray(kappas, np.float64)
    cell = pd.MultiIndex.from_arrays([spk, key]).factorize()[0]
    unit = pd.MultiIndex.from_arrays([spk, y]).factorize()[0]
    n_cell = np.bincount(cell)[cell]
    n_unit = np.bincount(unit)[unit]
    rows_tab = []
    crps = {c: np.zeros(kap.size) for c in (0, 1)}
    for c in (0, 1):
        u = grids[c]
        rows = np.flatnonzero((y == c) & (n_cell > 1))
        if rows.size == 0 or u.size == 0:
            continue
        for start in range(0, rows.size, 4000):
            r = rows[start:start + 4000]
            M = _model_cdf(fit, base, u, r)                                 # (R, G)
            ind = (score[r, None] < u[None, :]).astype(np.float64)
            # the cell's empirical CDF without the trial
            cells_r = cell[r]
            uc, inv = np.unique(cells_r, return_inverse=True)
            members = [np.flatnonzero(cell == k) for k in uc]
            Fc = np.stack([np.mean(score[m, None] < u[None, :], axis=0) for m in members])   # (C, G)
            nc = n_cell[r].astype(np.float64)[:, None]
            E = (nc * Fc[inv] - ind) / (nc - 1.0)
            D, Dl = M - ind, E - M
            a, b, cc = np.mean(D * D, axis=1), np.mean(D * Dl, axis=1), np.mean(Dl * Dl, axis=1)
            w = np.array([[_weights(float(nu - 1), float(kk)) for kk in kap] for nu in n_unit[r]])   # (R, K)
            crps[c] += (a[:, None] + 2 * b[:, None] * w + cc[:, None] * w ** 2).sum(axis=0)
        best = int(np.argmin(crps[c]))
        rows_tab.append(pd.DataFrame({"class": "positive" if c else "negative", "kappa": kap, "cv_crps": crps[c],
                                      "delta": crps[c] - crps[c][best], "chosen": np.arange(kap.size) == best}))
    kappa = {}
    for c in (0, 1):
        kappa[c] = float(kap[int(np.argmin(crps[c]))]) if crps[c].any() else float("inf")
    wtab = pd.DataFrame({"speaker": spk, "cls": y}).groupby(["speaker", "cls"], sort=True).size().rename("n").to_frame()
    wtab["omega"] = [_weights(float(n), kappa[int(c)]) for (_, c), n in wtab["n"].items()]
    table = pd.concat(rows_tab, ignore_index=True) if rows_tab else pd.DataFrame()
    return SpeakerPooling(kappa=kappa, weights=wtab, table=table,
                          info=dict(weight=weight, n_grid=n_grid, cv="leave one trial out within speaker cells",
                                    speaker_column=spec.speaker))


def _rocch_eer(pm: np.ndarray, pf: np.ndarray) -> np.ndarray:
    """ROCCH EER (:func:`scoremix.metrics.hull_eer`) of every leading row of operating points
    ``(…, T)`` ordered by increasing threshold (``pf`` non-increasing, ``pm`` non-decreasing)."""
    from scoremix.metrics import hull_eer

    shp = pm.shape[:-1]
    pm2, pf2 = pm.reshape(-1, pm.shape[-1]), pf.reshape(-1, pf.shape[-1])
    return np.array([hull_eer(pf2[r], pm2[r])[0] for r in range(pm2.shape[0])]).reshape(shp)


def _both_classes(y: np.ndarray) -> bool:
    """Whether a training part holds both classes (a refit needs both).  Cells are dealt
    into parts with part 0 the largest, so when every cell of a class is a single trial all
    of that class lands in part 0 and the other parts cannot be refitted; such a part gives
    no CV entries (s9robust: a table with 1–2 negatives per speaker)."""
    return bool(y.size) and bool(y.any()) and not bool(y.all())


def _half_split(cell: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``True`` for a random half of every cell (the larger half; a single trial: ``True``)."""
    return _part_split(cell, rng, 2) == 0


def _part_split(cell: np.ndarray, rng: np.random.Generator, n_parts: int) -> np.ndarray:
    """Part (0 … ``n_parts``−1) of every trial: each cell dealt at random into ``n_parts``
    nearly equal parts (part 0 the largest)."""
    u = rng.random(cell.size)
    order = np.lexsort((u, cell))
    cs = cell[order]
    start = np.r_[0, np.flatnonzero(np.diff(cs)) + 1]
    n = np.diff(np.r_[start, cs.size])
    rank = np.arange(cs.size) - np.repeat(start, n)
    out = np.zeros(cell.size, np.int64)
    out[order] = rank % n_parts
    return out


def _speaker_rate_parts(fit_t: Any, frame_t: pd.DataFrame, score_all: np.ndarray, spk_all: np.ndarray,
                        y_all: np.ndarray, train: np.ndarray, speakers: np.ndarray, n_global: int,
                        p_target: float = 0.05, with_speaker: bool = False) -> list[tuple]:
    """Per speaker: thresholds, the model's and the empirical FNR/FPR of the training part,
    the training counts, and the held-out empirical EER and minimum DCF (with
    ``with_speaker``: ``(speaker, tuple)`` pairs)."""
    from scoremix.metrics import eer, min_dcf

    base = base_components(fit_t, None)
    spk_t = frame_t[fit_t.locscale_spec.speaker].astype(str).to_numpy(dtype=object)
    y_t = fit_t._data.y
    glob = np.unique(np.quantile(score_all[np.isfinite(score_all)], np.linspace(0, 1, n_global)))
    out = []
    for sp in speakers:
        a = spk_all == sp
        tr, te = a & train, a & ~train
        if not (y_all[te].any() and (~y_all[te].astype(bool)).any() and y_all[tr].any()
                and (~y_all[tr].astype(bool)).any()):
            continue
        tau = np.unique(np.r_[score_all[a], glob])
        rows = np.flatnonzero(spk_t == sp)
        F = _model_cdf(fit_t, base, tau, rows)
        yr = y_t[rows]
        m_fnr = F[yr == 1].mean(axis=0)
        m_fpr = 1.0 - F[yr == 0].mean(axis=0)
        sp_ = score_all[tr & (y_all == 1)]
        sn_ = score_all[tr & (y_all == 0)]
        e_fnr = np.mean(sp_[:, None] < tau[None, :], axis=0)
        e_fpr = np.mean(sn_[:, None] >= tau[None, :], axis=0)
        s_te, y_te = score_all[te], y_all[te]
        with warnings.catch_warnings():      # a goat's held-out half may look reversed
            warnings.simplefilter("ignore")
            item = (tau, m_fnr, m_fpr, e_fnr, e_fpr, sp_.size, sn_.size, float(eer(s_te, y_te)),
                    float(min_dcf(s_te, y_te, p_target=p_target).value))
            out.append((sp, item) if with_speaker else item)
    return out


def speaker_pooling_crps_refit(fit: Any, *, kappas: Sequence[float] = KAPPA_GRID, n_grid: int = 200,
                               weight: str = "both", seed: int = 0) -> SpeakerPooling:
    r"""Choose :math:`\kappa_c` per class by the threshold-weighted CRPS of held-out halves
    (``criterion="crps"``): every speaker × stratum cell of the fitted trials is halved at
    random, the model (``fit``'s specification) refitted on one half, and the other half's
    trials scored against :math:`\omega\hat F_{j,\text{half}} + (1-\omega)F^{\text{model,half}}_j`
    with :math:`\omega = n_{ic,\text{half}}/(n_{ic,\text{half}}+\kappa_c)`; then the
    halves swap.  Nothing the held-out trials say enters their prediction."""
    from scoremix.locscale.fit import LocScaleData, fit_locscale

    if weight not in WEIGHTS:
        raise SpeakerPoolingError(f"weight must be one of {WEIGHTS}, got {weight!r}")
    data = fit._data
    spec = fit.locscale_spec
    frame, score, y = data.frame, data.score, data.y
    spk = np.asarray(data.speakers, dtype=object)[data.speaker_codes]
    cell = pd.MultiIndex.from_arrays([spk, data.core_key]).factorize()[0]
    grids = _grid(score, y, n_grid, weight)
    kap = np.asarray(kappas, np.float64)
    crps = {c: np.zeros(kap.size) for c in (0, 1)}
    rng = np.random.default_rng(seed)
    half = _half_split(cell, rng)
    n_pass, n_nodes = fit.info.get("n_pass", 3), fit.info.get("n_nodes", 9)
    for train in (half, ~half):
        if not _both_classes(y[train]):   # s9robust: nothing to refit (e.g. every negative cell a single trial)
            continue
        fit_t = fit_locscale(LocScaleData(frame.loc[train], spec), spec, n_pass=n_pass, n_nodes=n_nodes)
        base = base_components(fit_t, None)
        tr_idx = np.flatnonzero(train)
        cell_t = cell[tr_idx]
        n_unit_t = pd.Series(1, index=pd.MultiIndex.from_arrays([spk[tr_idx], y[tr_idx]])).groupby(level=[0, 1]).sum()
        for c in (0, 1):
            u = grids[c]
            te = np.flatnonzero(~train & (y == c))
            if te.size == 0 or u.size == 0:
                continue
            cells_te = np.unique(cell[te])
            Fm, Fe, nu = {}, {}, {}
            for k in cells_te:
                rows_k = np.flatnonzero(cell_t == k)
                if rows_k.size == 0:
                    continue
                Fm[k] = _model_cdf(fit_t, base, u, rows_k).mean(axis=0)
                Fe[k] = np.mean(score[tr_idx[rows_k], None] < u[None, :], axis=0)
                sp_k, = np.unique(spk[tr_idx[rows_k]])
                nu[k] = float(n_unit_t.get((sp_k, c), 0))
            for k in Fm:
                xt = score[te[cell[te] == k]]
                ind = (xt[:, None] < u[None, :]).astype(np.float64)
                D = Fm[k][None, :] - ind
                Dl = (Fe[k] - Fm[k])[None, :]
                a = float(np.mean(D * D, axis=1).sum())
                b = float(np.mean(D * Dl, axis=1).sum())
                cc = float(np.mean(Dl * Dl) * xt.size)
                w = np.array([_weights(nu[k], kk) for kk in kap])
                crps[c] += a + 2 * b * w + cc * w ** 2
    rows_tab = []
    kappa = {}
    for c in (0, 1):
        best = int(np.argmin(crps[c]))
        kappa[c] = float(kap[best]) if crps[c].any() else float("inf")
        rows_tab.append(pd.DataFrame({"class": "positive" if c else "negative", "kappa": kap, "cv_crps": crps[c],
                                      "delta": crps[c] - crps[c][best], "chosen": np.arange(kap.size) == best}))
    wtab = pd.DataFrame({"speaker": spk, "cls": y}).groupby(["speaker", "cls"], sort=True).size().rename("n").to_frame()
    wtab["omega"] = [_weights(float(n), kappa[int(c)]) for (_, c), n in wtab["n"].items()]
    return SpeakerPooling(kappa=kappa, weights=wtab, table=pd.concat(rows_tab, ignore_index=True),
                          info=dict(criterion="crps", weight=weight, n_grid=n_grid,
                                    cv="halves of every speaker cell, model refitted on the other half",
                                    speaker_column=spec.speaker))


def rates_cv_entries(fit: Any, *, kappas: Sequence[float], n_splits: int = 1, seed: int = 0, p_target: float = 0.05,
                     n_global: int = 256, n_parts: int = RATES_CV_PARTS) -> dict:
    """The per-speaker held-out absolute errors of :func:`speaker_pooling_rates_cv`:
    ``{"per": {"eer": [(K, K)…], "min_dcf": […]}, "who": [speaker…], "split": [halving…]}``
    (one entry per speaker and held-out part; the first ``k`` halvings are those of
    ``n_splits = k`` under the same seed)."""
    from scoremix.locscale.fit import LocScaleData, fit_locscale

    data = fit._data
    spec = fit.locscale_spec
    frame = data.frame
    score, y = data.score, data.y
    spk = np.asarray(data.speakers, dtype=object)[data.speaker_codes]
    cell = pd.MultiIndex.from_arrays([spk, data.core_key]).factorize()[0]
    kap = np.asarray(kappas, np.float64)
    K = kap.size
    rng = np.random.default_rng(seed)
    per: dict[str, list] = {"eer": [], "min_dcf": []}      # per speaker and half: (K, K) absolute errors
    who: list = []                                          # the speaker of each entry
    split: list = []
    n_sp = 0
    speakers = np.unique(spk)
    n_pass, n_nodes = fit.info.get("n_pass", 3), fit.info.get("n_nodes", 9)
    for h in range(int(n_splits)):
        part = _part_split(cell, rng, n_parts)
        for train in [part == k for k in range(n_parts)]:
            if not _both_classes(y[train]):   # s9robust: a part without one class gives no entries
                continue
            frame_t = frame.loc[train]
            fit_t = fit_locscale(LocScaleData(frame_t, spec), spec, n_pass=n_pass, n_nodes=n_nodes)
            for sp_id, (tau, m_fnr, m_fpr, e_fnr, e_fpr, n_pos, n_neg, e_te, d_te) in _speaker_rate_parts(
                    fit_t, frame_t, score, spk, y, train, speakers, n_global, p_target, with_speaker=True):
                wn = np.array([_weights(float(n_neg), k) for k in kap])    # κ_- → ω_-
                wp = np.array([_weights(float(n_pos), k) for k in kap])
                fpr = wn[:, None] * e_fpr[None, :] + (1 - wn[:, None]) * m_fpr[None, :]       # (K, T)
                fnr = wp[:, None] * e_fnr[None, :] + (1 - wp[:, None]) * m_fnr[None, :]
                PM = np.broadcast_to(fnr[None, :, :], (K, K, tau.size))                     # [κ_-, κ_+, T]
                PF = np.broadcast_to(fpr[:, None, :], (K, K, tau.size))
                e = _rocch_eer(np.ascontiguousarray(PM), np.ascontiguousarray(PF))
                d = np.minimum((p_target * PM + (1 - p_target) * PF).min(axis=2), p_target)
                per["eer"].append(np.abs(e - e_te))
                per["min_dcf"].append(np.abs(d - d_te))
                who.append(sp_id)
                split.append(h)
                n_sp += 1
    return {"per": per, "who": who, "split": split}


def speaker_pooling_rates_cv(fit: Any, *, kappas: Sequence[float] = (0.0, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0,
                                                                     1000.0, np.inf),
                             n_splits: int = 1, seed: int = 0, p_target: float = 0.05, n_global: int = 256,
                             n_parts: int = RATES_CV_PARTS, rule: str = "1se", se_over: str = "fold",
                             _entries: dict | None = None) -> SpeakerPooling:
    r"""Choose :math:`(\kappa_-, \kappa_+)` by within-speaker cross-validation of the
    per-speaker error rates (module docstring, ``criterion="error_rates"``): every speaker ×
    stratum cell of the fitted trials is dealt at random into ``n_parts`` parts; the model
    (``fit``'s specification) is refitted on one part, each speaker's pooled EER and minimum
    DCF (``p_target``) computed from that part, and compared with the speaker's empirical
    values on the other parts together (each part in turn; ``n_splits`` random deals).
    ``n_parts`` (default 2, halves) sets how much is held out relative to what is refitted
    (``n_parts − 1`` times): the held-out EER of a speaker is a minimum over thresholds of a few
    trials' counts, and its absolute error rewards predicting the *small-sample* value (0 for a
    speaker whose few held-out trials hold no error), so the κ this CV prefers depends on the
    size of the held-out part — with halves, on LA at a 20 % fitted share, the model's CV loss
    relative to counting was 1.05–3.2 against 0.60–1.54 on the real held-out 80 %.  Measured in
    s8speaker (docs/score-models.md, *Session 8*): ``n_parts = 3`` is better when the question
    is about a held-out set 4× the fitted one (20 %) and worse when it is as large (50 %).  The score of a
    :math:`\kappa` pair is the sum over the two measures of the mean absolute error, each
    relative to that of the speaker's own counts (:math:`\kappa = 0`).  The choice follows
    the one-standard-error rule (Breiman et al. 1984; Hastie et al. 2009, §7.10): among the
    pairs whose CV loss is within one standard error (over speakers) of the smallest, the one
    pooling most toward the model (largest :math:`\kappa`'s) — the held-out halves are small,
    so differences inside the noise do not move the fit toward the counts.

    ``se_over``: the standard error over speaker × half entries (``"fold"``, the default) or
    over speakers, each speaker's losses averaged over its halves and the ``n_splits``
    halvings first (``"speaker"``: the speakers are the independent units, so this SE is the
    honest one, and larger — it leans further toward the model; on LA at a 50 % fitted share
    it kept the model for RawGAT-ST-add, 1.85 against counting, where ``"fold"`` chose the
    counts for the bona fide class, 0.97; docs/score-models.md, *Session 7*).  ``rule``:
    ``"1se"`` (standard error of the best pair's loss), ``"1se-paired"`` (a pair qualifies when
    its mean loss exceeds the best pair's by at most the standard error of the per-speaker
    *difference* — the noise of the comparison itself, smaller than that of the loss level,
    which includes how hard the speakers are), ``"min"`` (the smallest loss)."""
    if rule not in RULES:
        raise SpeakerPoolingError(f"rule must be one of {RULES}, got {rule!r}")
    if int(n_parts) != n_parts or n_parts < 2:
        raise SpeakerPoolingError(f"n_parts must be an integer >= 2, got {n_parts!r}")
    if se_over not in ("speaker", "fold"):
        raise SpeakerPoolingError(f"se_over must be 'speaker' or 'fold', got {se_over!r}")
    data = fit._data
    spec = fit.locscale_spec
    spk = np.asarray(data.speakers, dtype=object)[data.speaker_codes]
    y = data.y
    kap = np.asarray(kappas, np.float64)
    K = kap.size
    if _entries is None:
        _entries = rates_cv_entries(fit, kappas=kappas, n_splits=n_splits, seed=seed, p_target=p_target,
                                    n_global=n_global, n_parts=n_parts)
    per, who, n_sp = _entries["per"], _entries["who"], len(_entries["who"])
    loss = np.zeros((max(n_sp, 1), K, K))
    ae = {}
    for m in per:
        arr = np.asarray(per[m]) if per[m] else np.zeros((1, K, K))
        ae[m] = arr.sum(axis=0)
        base = arr[:, 0, 0].mean()
        loss += arr / base if base > 0 else arr
    if se_over == "speaker" and who:     # the speakers are the independent units
        codes, uniq = pd.factorize(np.asarray(who, dtype=object))
        cnt = np.bincount(codes, minlength=uniq.size).astype(np.float64)
        acc = np.zeros((uniq.size, K, K))
        np.add.at(acc, codes, loss)
        loss = acc / cnt[:, None, None]
    rel = loss.mean(axis=0)
    # one-standard-error rule (Breiman et al. 1984): the most pooled pair (largest κ's) whose
    # CV loss is within one standard error of the minimum's
    b0, b1 = np.unravel_index(int(np.argmin(rel)), rel.shape)
    n_u = loss.shape[0]
    if rule == "1se-paired" and n_u > 1:
        diff = loss - loss[:, b0:b0 + 1, b1:b1 + 1]
        se_pair = diff.std(axis=0, ddof=1) / np.sqrt(n_u)
        ok = rel - rel[b0, b1] <= se_pair
        se = float("nan")
    else:
        se = float(loss[:, b0, b1].std(ddof=1) / np.sqrt(n_u)) if n_u > 1 else 0.0
        ok = rel <= rel[b0, b1] + se
    rank = np.add.outer(np.arange(K), np.arange(K)).astype(np.float64)     # more pooling toward the model
    cand = np.where(ok, rank - 1e-9 * rel, -np.inf)
    i, j = np.unravel_index(int(np.argmax(cand)), cand.shape) if rule != "min" else (b0, b1)
    kappa = {0: float(kap[i]), 1: float(kap[j])}
    wtab = pd.DataFrame({"speaker": spk, "cls": y}).groupby(["speaker", "cls"], sort=True).size().rename("n").to_frame()
    wtab["omega"] = [_weights(float(n), kappa[int(c)]) for (_, c), n in wtab["n"].items()]
    kk0, kk1 = np.meshgrid(kap, kap, indexing="ij")
    table = pd.DataFrame({"kappa_negative": kk0.ravel(), "kappa_positive": kk1.ravel(),
                          "cv_mae_eer": ae["eer"].ravel() / max(n_sp, 1),
                          "cv_mae_min_dcf": ae["min_dcf"].ravel() / max(n_sp, 1),
                          "cv_relative": rel.ravel() / 2.0,
                          "within_1se": ok.ravel()})
    table["chosen"] = (table["kappa_negative"] == kappa[0]) & (table["kappa_positive"] == kappa[1])
    return SpeakerPooling(kappa=kappa, weights=wtab, table=table,
                          info=dict(criterion="error_rates", n_splits=n_splits, n_speaker_folds=n_sp, rule=rule,
                                    se_over=se_over, n_units=int(n_u), se=se,
                                    p_target=p_target, speaker_column=spec.speaker))


def pooled_components(fit: Any, trials: pd.DataFrame | None = None, marginal_over: Sequence[str] = ()) -> Any:
    """The per-trial further components of ``fit`` (``(w1, mean2, sd2, strata2, w2)``, the
    latter four ``(n, K)``) with the speaker shape pooling applied (module docstring); the
    fit's own failure mixture (``trial_mixture``) when it has no pooling or when marginal
    over the speaker."""
    pool: SpeakerPooling | None = getattr(fit, "speaker_pooling", None)
    spec = fit.locscale_spec
    own = fit.trial_mixture(trials, marginal_over=marginal_over)
    if pool is None or not pool.used or spec.speaker in tuple(marginal_over):
        return own
    data = fit._data
    frame = data.frame if trials is None else trials
    n = len(frame)
    y = data.y if trials is None else _class_y(fit, frame)
    spk = frame[spec.speaker].astype(str).to_numpy(dtype=object)
    omega = pool.omega(spk, y)
    if trials is not None:
        masses, omega = _new_row_masses(fit, frame, y, spk, omega)
    if own is None:
        w1 = np.ones(n)
        extra = []
    else:
        w1, m2, s2, st2, w2 = own
        extra = [(_as_2d(m2, n), _as_2d(s2, n), _as_2d(np.asarray(st2, object), n), _as_2d(w2, n))]
    w1 = (1.0 - omega) * np.asarray(w1, float)
    if trials is None:
        fstrata = fit.strata.to_numpy(dtype=object)
        pm, ps = point_mass_latent(fit.transform, data.score, fstrata)
        extra.append((pm[:, None], ps[:, None], fstrata[:, None], omega[:, None]))
    else:
        extra.append(masses)
    if own is not None:
        m2, s2, st2, w2 = extra[0]
        extra[0] = (m2, s2, st2, w2 * (1.0 - omega)[:, None])
    mean2 = np.concatenate([e[0] for e in extra], axis=1)
    sd2 = np.concatenate([e[1] for e in extra], axis=1)
    strata2 = np.concatenate([e[2] for e in extra], axis=1)
    wt2 = np.concatenate([e[3] for e in extra], axis=1)
    return w1, mean2, sd2, strata2, wt2


def _new_row_masses(fit: Any, frame: pd.DataFrame, y: np.ndarray, spk: np.ndarray, omega: np.ndarray
                    ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """``(n, K)`` point masses of new rows: weight ``omega`` spread over the fitted scores of
    the row's cell (speaker × core stratum; at most ``_MAX_PER_CELL`` quantiles), and the
    rows' ``omega`` (0 where the cell has no fitted trials)."""
    data = fit._data
    n = len(frame)
    fkey = pd.MultiIndex.from_arrays([np.asarray(data.speakers, object)[data.speaker_codes], data.core_key])
    fstrata = fit.strata.to_numpy(dtype=object)
    pm, ps = point_mass_latent(fit.transform, data.score, fstrata)
    groups = pd.Series(np.arange(len(fkey))).groupby(fkey.factorize()[0]).apply(np.asarray)
    codes, uniq = fkey.factorize()
    lookup = dict(zip(uniq, range(len(uniq))))
    key = _core_key(fit, frame, y)
    cell_of = np.array([lookup.get((s, k), -1) for s, k in zip(spk, key)], np.int64)
    members = {}
    for cid in np.unique(cell_of[cell_of >= 0]):
        idx = groups[cid]
        if idx.size > _MAX_PER_CELL:
            order = idx[np.argsort(data.score[idx], kind="stable")]
            idx = order[np.unique(np.round(np.linspace(0, idx.size - 1, _MAX_PER_CELL)).astype(np.int64))]
        members[cid] = idx
    K = max([m.size for m in members.values()], default=1)
    M = np.zeros((n, K))
    S = np.ones((n, K))
    W = np.zeros((n, K))
    ST = np.empty((n, K), dtype=object)
    first_stratum = fstrata[0]
    ST[:] = first_stratum
    for cid, idx in members.items():
        r = np.flatnonzero(cell_of == cid)
        k = idx.size
        M[np.ix_(r, np.arange(k))] = pm[idx][None, :]
        S[np.ix_(r, np.arange(k))] = ps[idx][None, :]
        ST[np.ix_(r, np.arange(k))] = fstrata[idx][None, :]
        W[np.ix_(r, np.arange(k))] = (omega[r] / k)[:, None]
    omega = np.where(cell_of >= 0, omega, 0.0)     # no fitted trials in the cell: the model alone
    return (M, S, ST, W), omega


def choose_speaker_pooling(fit: Any, *, criterion: str = "error_rates", seed: int = 0,
                           n_parts: int = RATES_CV_PARTS) -> SpeakerPooling:
    """:func:`speaker_pooling_rates_cv` (``"error_rates"``) or :func:`speaker_pooling_cv`
    (``"crps"``) of ``fit`` (a :class:`~scoremix.locscale.LocScaleFit` without pooling)."""
    if criterion not in CRITERIA:
        raise SpeakerPoolingError(f"speaker_pooling must be one of {CRITERIA} or None, got {criterion!r}")
    if criterion == "crps":
        return speaker_pooling_crps_refit(fit, seed=seed)
    return speaker_pooling_rates_cv(fit, seed=seed, n_parts=n_parts)


def with_speaker_pooling(fit: Any, kappa: dict | float) -> Any:
    r"""``fit`` with a fixed pooling :math:`\kappa` (a number for both classes, or
    ``{0: κ_-, 1: κ_+}``; ``inf``: the model alone, ``0``: each speaker's own counts); sets
    and returns ``fit`` (its ``speaker_pooling``)."""
    kap = {0: float(kappa), 1: float(kappa)} if np.isscalar(kappa) else {int(c): float(v) for c, v in kappa.items()}
    data = fit._data
    spk = np.asarray(data.speakers, dtype=object)[data.speaker_codes]
    wtab = pd.DataFrame({"speaker": spk, "cls": data.y}).groupby(["speaker", "cls"], sort=True).size() \
        .rename("n").to_frame()
    wtab["omega"] = [_weights(float(n), kap[int(c)]) for (_, c), n in wtab["n"].items()]
    pool = SpeakerPooling(kappa=kap, weights=wtab, table=pd.DataFrame(), info=dict(criterion="fixed"))
    fit.speaker_pooling = pool if pool.used else None
    return fit
