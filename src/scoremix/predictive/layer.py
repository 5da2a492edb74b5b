r"""One predictive layer: any fitted score model → per-trial predictive distributions.

Every model-based measure of scoremix (:func:`scoremix.model_eer`,
:func:`scoremix.model_subgroup_dcf`, :func:`scoremix.posterior_subgroup_dcf`,
:func:`scoremix.model_det_curve`) starts here.  A fitted linear mixed model — Gaussian
(``lmer``), transformation (``lmer(..., transform="monotone")``) or Bayesian (``bayes_lmer``,
one distribution per posterior draw ``d``) — implies for trial ``i`` a Gaussian on the
model's *latent* scale :math:`z = h(s)` (``h`` the identity for a Gaussian fit):

.. math::

    z_i \mid d \sim N\big(m_{di},\, v_{di}\big),\qquad
    m_{di} = x_i^\top\beta_d + \sum_{k\notin M} z_{ik}^\top b_{d,k,g_k(i)},\qquad
    v_{di} = \sigma_{d,c(i)}^2/w_i + \sum_{k\in M} z_{ik}^\top\Sigma_{d,k}\,z_{ik},

where ``M`` is the set of random terms whose grouping factors are *marginalised* (new
levels: their variance is added) and the other terms are *conditioned on* (their estimated
random effects, 0 for a level unseen in fitting); :math:`\sigma_{c(i)}` is the residual SD
of the trial's dispersion level and :math:`w_i` its prior weight.  Trials with identical
``(m, v, class)`` share one *component*, so a class's score distribution in any population
is the mixture of components weighted by trial counts (:class:`Predictive`).

Scores and thresholds.  An error rate at a *score* threshold τ (accept ``s ≥ τ``) is the
latent rate at ``t = h(τ)``:
:math:`\mathrm{FNR}(\tau) = \sum_i b_i\Phi((h(\tau)-m_i)/s_i)`,
:math:`\mathrm{FPR}(\tau) = \sum_j a_j\Phi((m_j-h(\tau))/s_j)`; a latent threshold ``t`` is
reported on the score scale as :math:`h^{-1}(t)` (the transform's generalised inverse).
Because ``h`` is increasing, the EER, the minimum DCF and every subgroup ratio are the same
whether they are minimised over latent or score thresholds; only the reported thresholds
need the inverse.

Stratified transformation models (``transform="monotone-by-class"``): trial ``i`` of stratum
``s(i)`` has its own map :math:`h_{s(i)}`, so one score threshold τ is the latent threshold
:math:`h^-_{s(i)}(\tau)` of that trial (``transform.latent_threshold(tau, stratum)``) and
:math:`\mathrm{FNR}(\tau) = \sum_i b_i\Phi((h^-_{s(i)}(\tau)-m_i)/s_i)`.  Components then also
carry their stratum, and every measure is computed over the common threshold axis of
:mod:`scoremix.predictive.axis` (the latent scale itself for every other fit), which is the
one place where score thresholds become latent ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix._deprecate import renamed_kwargs
from scoremix.predictive.axis import ThresholdAxis, is_stratified_transform, threshold_axis
from scoremix.predictive.mixture import MixtureRates, ModelEERError, PredictiveError, batch_eer, mixture_eer

__all__ = ["Predictive", "predictive", "fit_class_defaults", "is_bayes_fit", "model_frame_with", "term_covariance",
           "fit_transform", "check_same_response"]

_CELL = "__predictive_cell__"
_Y01 = "__predictive_y__"


def is_bayes_fit(fit: Any) -> bool:
    """``True`` for a posterior fit (a ``BayesLmerResult`` or anything with ``class_moments``
    and ``idata``)."""
    return hasattr(fit, "class_moments") and hasattr(fit, "idata")


def fit_transform(fit: Any) -> Any:
    """The fit's score → latent transform ``h`` (``None`` for a Gaussian fit)."""
    return getattr(fit, "transform", None)


@dataclass
class Predictive:
    """Per-trial latent Gaussian predictive distributions of a fit, grouped into components.

    Attributes
    ----------
    mean, sd:
        ``(D, m)`` latent mean and SD of every component for ``D`` draws (``D = 1`` for a
        point fit).
    positive:
        ``(m,)`` class of every component (True = positive / target / bona fide).
    component:
        ``(n,)`` component of every trial.
    y:
        ``(n,)`` 0/1 class of every trial.
    score:
        ``(n,)`` observed scores on the score scale (NaN when the rows carry none).
    frame:
        the ``n`` rows (model frame or the trials passed), index = trial labels.
    transform:
        the score → latent map ``h`` (``None``: identity, a Gaussian fit).
    marginal_over:
        grouping factors whose random effects are marginalised (new levels).
    draws:
        posterior draw ids (``None`` for a point fit).
    axis:
        the threshold axis (:mod:`scoremix.predictive.axis`): the latent scale, or for a
        stratified transform the common coordinate of the strata's latent thresholds.
    stratum:
        ``(m,)`` stratum of every component (index into ``axis.levels``; all 0 unless the
        transform is stratified).
    """

    mean: np.ndarray
    sd: np.ndarray
    positive: np.ndarray
    component: np.ndarray
    y: np.ndarray
    score: np.ndarray
    frame: pd.DataFrame
    transform: Any = None
    marginal_over: tuple[str, ...] = ()
    draws: np.ndarray | None = None
    conditional: bool = field(default=True)
    axis: ThresholdAxis | None = None
    stratum: np.ndarray | None = None
    #: per-trial mixtures (e.g. a failure mixture, :mod:`scoremix.locscale.failure`; speaker
    #: shape pooling, :mod:`scoremix.locscale.speaker_pool`): trial ``i`` carries weight
    #: ``weight[i]`` on ``component[i]`` and ``weight2[i]`` on ``component2[i]`` (``(n,)``, or
    #: ``(n, K)`` for ``K`` further components per trial); ``None``: weight 1 on ``component`` only
    weight: np.ndarray | None = None
    component2: np.ndarray | None = None
    weight2: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.axis is None:
            self.axis = threshold_axis(self.transform)
        if self.stratum is None:
            if not self.axis.identity:
                raise PredictiveError("a stratified transform needs the stratum of every component")
            self.stratum = np.zeros(self.mean.shape[1], dtype=np.int64)

    # ----------------------------------------------------------------- sizes / scales
    @property
    def n_draws(self) -> int:
        return int(self.mean.shape[0])

    @property
    def n_components(self) -> int:
        return int(self.mean.shape[1])

    @property
    def index(self) -> pd.Index:
        return self.frame.index

    def to_latent(self, tau: Any) -> np.ndarray:
        """Score thresholds → latent thresholds (identity for a Gaussian fit).

        Accepting ``s ≥ τ``, the latent threshold is the transform's left limit
        ``h⁻(τ)`` (``transform.latent_threshold``, so tied scores at τ are accepted, as the
        empirical rates count them).  Shape of ``tau``, or ``(S, *tau.shape)`` (one row per
        stratum, ``axis.levels``) for a stratified transform."""
        lat = self.axis.from_score(tau)
        return lat[0] if self.axis.identity else lat

    def to_score(self, t: Any) -> np.ndarray:
        """Thresholds on the axis (latent thresholds unless stratified) → score thresholds
        (``h⁻¹(t)``; identity for a Gaussian fit; see :mod:`scoremix.predictive.axis`)."""
        return self.axis.to_score(t)

    # ----------------------------------------------------------------- populations
    def counts(self, mask: Any = None) -> np.ndarray:
        """``(m,)`` number of trials (in ``mask``, a boolean ``(n,)`` array) per component."""
        m = slice(None) if mask is None else np.asarray(mask, bool)
        w = None if self.weight is None else self.weight[m]
        out = np.bincount(self.component[m], weights=w, minlength=self.n_components).astype(np.float64)
        if self.component2 is not None:
            out += np.bincount(self.component2[m].ravel(), weights=self.weight2[m].ravel(),
                               minlength=self.n_components)
        return out

    def population_weights(self, mem_trial: np.ndarray, mem_group: np.ndarray, n_groups: int) -> np.ndarray:
        """``(1 + G, m)`` weights: row 0 all trials, row ``1 + g`` the trials ``mem_trial``
        whose membership entry is ``g`` (a trial may belong to several groups)."""
        W = np.zeros((1 + n_groups, self.n_components))
        W[0] = self.counts()
        mt, mg = np.asarray(mem_trial), 1 + np.asarray(mem_group)
        np.add.at(W, (mg, self.component[mt]), 1.0 if self.weight is None else self.weight[mt])
        if self.component2 is not None:
            c2 = self.component2[mt]
            np.add.at(W, (mg.reshape((-1,) + (1,) * (c2.ndim - 1)), c2), self.weight2[mt])
        return W

    def mixture(self, weights: np.ndarray) -> MixtureRates:
        """Rates of the populations with component weights ``weights`` ``(P, m)``."""
        return MixtureRates(self.mean, self.sd, self.positive, weights, axis=self.axis, stratum=self.stratum)

    # ----------------------------------------------------------------- measures
    def eer(self, mask: Any = None, return_threshold: bool = False, thresholds: str = "attainable",
            max_thresholds: int | None = None) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """Model EER of the trials in ``mask`` (all by default), one value per draw.

        ``thresholds="attainable"`` (default): the ROCCH EER of the model ROC at the observed
        distinct scores of all the evaluated rows — a detector's threshold is not limited to the
        scores of the subgroup in ``mask`` (tie cells as steps, :mod:`scoremix.predictive.attainable`),
        the convention of :func:`scoremix.metrics.eer`.  ``"latent"``: the exact root of
        :math:`\\mathrm{FNR}(t) = \\mathrm{FPR}(t)` of the two class mixtures over every real latent
        threshold (:func:`~scoremix.predictive.mixture.mixture_eer`; for a stratified transform
        the root over the common threshold axis, :func:`~scoremix.predictive.mixture.batch_eer`).
        NaN when a class is missing.  With ``return_threshold`` also the EER threshold on the
        *score* scale (attainable: the observed score of the nearer hull vertex).
        """
        from scoremix.predictive.attainable import attainable_eer, check_thresholds

        check_thresholds(thresholds)
        w = self.counts(mask)
        neg = (w > 0) & ~self.positive
        pos = (w > 0) & self.positive
        e = np.full(self.n_draws, np.nan)
        t = np.full(self.n_draws, np.nan)
        if neg.any() and pos.any() and thresholds == "attainable":
            # s7heldout: every evaluated trial's distinct score is a threshold, also for a subgroup
            e, t = attainable_eer(self, w[None, :], max_thresholds)
            e, t = e[0], t[0]
            return (e, t) if return_threshold else e
        if neg.any() and pos.any() and not self.axis.identity:
            e, t = batch_eer(self.mixture(w[None, :]), return_threshold=True)
            e, t = e[0], t[0]
        elif neg.any() and pos.any():
            for d in range(self.n_draws):
                e[d], t[d] = mixture_eer(self.mean[d, neg], self.sd[d, neg], self.mean[d, pos],
                                         self.sd[d, pos], w[neg], w[pos], return_threshold=True)
        return (e, self.to_score(t)) if return_threshold else e

    def rates_at(self, tau: Any, mask: Any = None, scale: str = "score") -> tuple[np.ndarray, np.ndarray]:
        """Model FNR and FPR at thresholds ``tau`` (``(D, T)`` each; accept ``s ≥ τ``).

        ``scale="score"`` maps τ to each trial's latent threshold with
        ``transform.latent_threshold`` (:math:`h^-_{s(i)}(\\tau)`, exact at tied scores);
        ``"latent"`` takes points of the threshold axis (latent thresholds, unless the
        transform is stratified: see :mod:`scoremix.predictive.axis`).
        """
        if scale not in ("score", "latent"):
            raise PredictiveError(f"scale must be 'score' or 'latent', got {scale!r}")
        w = self.counts(mask)
        keep = np.flatnonzero(w > 0)     # components outside the population add nothing
        if 0 < keep.size < w.size:
            mix = MixtureRates(self.mean[:, keep], self.sd[:, keep], self.positive[keep], w[None, keep],
                               axis=self.axis, stratum=self.stratum[keep])
        else:
            mix = self.mixture(w[None, :])
        if scale == "score":
            lat = self.axis.from_score(np.atleast_1d(np.asarray(tau, dtype=np.float64)))  # (S, T)
            lat = np.broadcast_to(lat[:, None, None, :], (lat.shape[0], 1, self.n_draws, lat.shape[1]))
            pm, pf = mix.rates_latent(np.ascontiguousarray(lat))
            return pm[0], pf[0]
        t = np.atleast_1d(np.asarray(tau, float))
        tt = np.broadcast_to(t, (self.n_draws, t.size))[None]
        pm, pf = mix.rates(np.ascontiguousarray(tt))
        return pm[0], pf[0]

    def trial_table(self) -> pd.DataFrame:
        """Per trial ``y``, ``score``, latent ``mean`` and ``sd`` (point fits only)."""
        if self.n_draws != 1:
            raise PredictiveError("trial_table() needs a point fit (one draw); use mean/sd per draw")
        out = pd.DataFrame({"y": self.y, "score": self.score, "mean": self.mean[0, self.component],
                            "sd": self.sd[0, self.component]}, index=self.frame.index)
        if not self.axis.identity:
            out["stratum"] = np.asarray(self.axis.levels, dtype=object)[self.stratum[self.component]]
        return out


# ----------------------------------------------------------------------------- helpers
def unique_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(a, axis=0, return_inverse=True)`` for a finite float matrix (rows in
    lexicographic order, first column most significant), by one ``np.lexsort`` of the columns
    instead of a sort of the rows as byte strings (an order of magnitude faster; it runs once
    per parametric-bootstrap refit)."""
    a = np.asarray(a, dtype=np.float64)
    if a.shape[0] == 0:
        return a.copy(), np.zeros(0, np.int64)
    order = np.lexsort(a.T[::-1])
    s = a[order]
    new = np.r_[True, np.any(s[1:] != s[:-1], axis=1)]
    inv = np.empty(a.shape[0], np.int64)
    inv[order] = np.cumsum(new) - 1
    return s[new], inv


def _is_null(v: Any) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA


def term_covariance(varcorr: pd.DataFrame, group: str, term_names: Sequence[str]) -> np.ndarray:
    """The ``p × p`` covariance of one random term from ``as.data.frame(VarCorr(m))``."""
    rows = varcorr[varcorr["grp"] == group]
    if rows.empty:
        raise ModelEERError(f"random term {group!r} has no rows in fit.varcorr "
                            f"(groups there: {sorted(set(varcorr['grp']))})")
    pos = {name: k for k, name in enumerate(term_names)}
    cov = np.zeros((len(term_names), len(term_names)))
    for _, r in rows.iterrows():
        v1, v2 = r["var1"], r["var2"]
        if v1 not in pos or (not _is_null(v2) and v2 not in pos):
            raise ModelEERError(
                f"fit.varcorr names ({v1!r}, {v2!r}) for group {group!r}, which are not among "
                f"the term's columns {list(term_names)}"
            )
        i = pos[v1]
        j = i if _is_null(v2) else pos[v2]
        cov[i, j] = cov[j, i] = float(r["vcov"])
    return cov


def model_frame_with(fit: Any, data: pd.DataFrame | None, needed: Sequence[str]) -> pd.DataFrame:
    """The model frame, with columns it lacks taken from ``data`` by index label."""
    frame = fit.spec.data
    missing = [c for c in needed if c not in frame.columns]
    if not missing:
        return frame
    if data is None:
        raise ModelEERError(
            f"column(s) {missing} are not in the fitted model frame (columns: {list(frame.columns)}); "
            "pass the data frame the model was fitted on as data="
        )
    absent = [c for c in missing if c not in data.columns]
    if absent:
        raise ModelEERError(f"column(s) {absent} are neither in the model frame nor in data "
                            f"(columns: {list(data.columns)})")
    try:
        extra = data.loc[frame.index, missing]
    except KeyError:
        raise ModelEERError("data does not contain every row of the model frame (match is by "
                            "index label); pass the data frame the model was fitted on") from None
    check_same_response(fit, data)
    return pd.concat([frame, extra], axis=1)


def check_same_response(fit: Any, data: pd.DataFrame) -> None:
    """Rows of ``data`` are matched to the model frame by index label; refuse (named error) when
    ``data`` holds the fit's response column with other values in those rows — it is then not
    the frame the model was fitted on (e.g. re-indexed, sorted or another system's table)."""
    spec = getattr(fit, "spec", None)
    resp = getattr(spec, "response", None)
    frame = getattr(spec, "data", None)
    if resp is None or frame is None or resp not in data.columns:
        return
    fitted = (pd.to_numeric(frame[resp], errors="coerce").to_numpy(np.float64) if resp in frame.columns
              else np.asarray(getattr(spec, "y", np.full(len(frame), np.nan)), dtype=np.float64))
    given = pd.to_numeric(data.loc[frame.index, resp], errors="coerce").to_numpy(np.float64)
    if given.ndim != 1 or given.shape != fitted.shape:
        return
    with np.errstate(invalid="ignore"):
        same = (given == fitted) | (np.isnan(given) & np.isnan(fitted)) | np.isclose(given, fitted, rtol=1e-12,
                                                                                     atol=0.0)
    if not same.all():
        i = int(np.flatnonzero(~same)[0])
        raise ModelEERError(
            f"data= is not the frame the model was fitted on: rows are matched by index label, and at index "
            f"{frame.index[i]!r} its response column {resp!r} is {given[i]!r} where the fit has {fitted[i]!r} "
            f"({int((~same).sum())} row(s) differ); pass the fitted data frame (same index and rows)")


def _group_factors(fit: Any) -> list[str]:
    spec = getattr(fit, "spec", None)
    if spec is not None and getattr(spec, "terms", None) is not None:
        return list(dict.fromkeys(t.group_factor for t in spec.terms))
    ranef = getattr(fit, "ranef", None)
    if isinstance(ranef, dict):
        return list(ranef)
    vc = getattr(fit, "varcorr", None)
    return [] if vc is None else [g for g in dict.fromkeys(vc["grp"]) if g != "Residual"]


def _marginal_set(fit: Any, conditional: bool, marginal_over: Sequence[str] | None) -> tuple[str, ...]:
    groups = _group_factors(fit)
    if marginal_over is None:
        return () if conditional else tuple(groups)
    m = [marginal_over] if isinstance(marginal_over, str) else list(marginal_over)
    unknown = [g for g in m if g not in groups]
    if unknown:
        raise PredictiveError(f"cannot marginalise over {unknown}: not a grouping factor of the fit "
                              f"(grouping factors: {groups})")
    return tuple(dict.fromkeys(m))


def _residual_var_fitted(fit: Any, spec: Any) -> np.ndarray:
    sigma_by = getattr(fit, "sigma_by", None)
    if sigma_by is not None and len(sigma_by) > 0:
        codes = getattr(spec, "dispersion_codes", None)
        levels = getattr(spec, "dispersion_levels", None)
        if codes is None or levels is None:
            raise ModelEERError("fit.sigma_by is set but fit.spec has no dispersion_codes/levels")
        by_str = {str(k): float(v) for k, v in dict(sigma_by).items()}
        missing = [lv for lv in levels if str(lv) not in by_str]
        if missing:
            raise ModelEERError(f"fit.sigma_by has no residual SD for dispersion level(s) {missing}")
        sd = np.array([by_str[str(lv)] for lv in levels])[np.asarray(codes)]
    else:
        sd = np.full(spec.n, float(fit.sigma))
    weights = getattr(spec, "weights", None)
    var = sd ** 2
    if weights is not None:
        var = var / np.asarray(weights, dtype=np.float64)
    return var


def _dispersion_column(fit: Any) -> str | None:
    spec = getattr(fit, "spec", None)
    form = getattr(spec, "dispersion_formula", None) or getattr(fit, "dispersion", None)
    return None if not form else str(form).replace("~", "").strip()


def _residual_var_trials(fit: Any, trials: pd.DataFrame) -> np.ndarray:
    sigma_by = getattr(fit, "sigma_by", None)
    if sigma_by is None or len(sigma_by) == 0:
        return np.full(len(trials), float(fit.sigma) ** 2)
    col = _dispersion_column(fit)
    if not col:
        raise PredictiveError("fit has sigma_by but no dispersion formula to map trials to levels")
    if col not in trials.columns:
        raise PredictiveError(f"dispersion column {col!r} not in the trial table")
    lv = trials[col].astype(str)
    sig = pd.Series(sigma_by).rename(index=str)
    unknown = ~lv.isin(list(sig.index))
    if unknown.any():
        raise PredictiveError(f"dispersion level {lv[unknown].iloc[0]!r} (column {col!r}) not in the fit")
    return np.asarray(sig.reindex(lv).to_numpy(), dtype=float) ** 2


def _term_blocks(fit: Any, group: str) -> list[tuple[int, Any]]:
    """``(term index, term)`` of every random term of grouping factor ``group``."""
    spec = getattr(fit, "spec", None)
    if spec is None or getattr(spec, "terms", None) is None:
        return []
    return [(k, t) for k, t in enumerate(spec.terms) if t.group_factor == group]


def _ranef_values(fit: Any, group: str, terms: list[tuple[int, Any]]) -> list[np.ndarray]:
    """Conditional modes of each term of ``group`` as ``(n_levels, p)`` (term level order)."""
    frame = fit.ranef[group]
    out, col = [], 0
    for _, t in terms:
        block = frame.iloc[:, col:col + t.p]
        col += t.p
        block = block.set_axis(block.index.astype(str), axis=0).reindex([str(v) for v in t.levels])
        out.append(np.asarray(block.to_numpy(), dtype=np.float64))
    return out


def _marginal_parts(fit: Any, rows: pd.DataFrame | None, group: str, need_shift: bool
                    ) -> tuple[np.ndarray, np.ndarray]:
    """For the rows (``None``: the model frame), the random effects of ``group``
    :math:`\\sum_k z_{ik}^\\top\\hat b_k` (to remove from the conditional mean) and their
    variance :math:`\\sum_k z_{ik}^\\top\\Sigma_k z_{ik}` (to add)."""
    spec = getattr(fit, "spec", None)
    terms = _term_blocks(fit, group)
    n = spec.n if rows is None else len(rows)
    shift = np.zeros(n)
    var = np.zeros(n)
    if terms and (rows is None or getattr(spec, "random_design", None) is not None):
        design = ([(t.codes, t.X) for t in spec.terms] if rows is None else spec.random_design(rows))
        values = _ranef_values(fit, group, terms) if need_shift else [None] * len(terms)
        for (k, t), bk in zip(terms, values):
            codes = np.asarray(design[k][0], dtype=np.int64)
            Z = np.asarray(design[k][1], dtype=np.float64)
            cov = term_covariance(fit.varcorr, t.group, t.term_names)
            var += np.einsum("ij,jk,ik->i", Z, cov, Z)
            if need_shift:
                ok = codes >= 0
                shift[ok] += np.einsum("ij,ij->i", Z[ok], bk[codes[ok]])
        return shift, var
    # duck-typed fits without a design encoder: random intercepts only
    vc = fit.varcorr
    vrows = vc[(vc["grp"] == group) & (vc["var2"].map(_is_null))]
    if vrows.empty:
        raise PredictiveError(f"random-effects group {group!r} not in the fit "
                              f"(groups: {sorted(set(vc['grp']))})")
    slopes = vrows[vrows["var1"] != "(Intercept)"]
    if len(slopes):
        raise PredictiveError(f"group {group!r} has random slopes {list(slopes['var1'])}; marginalising them "
                              "needs a fit whose spec can encode new data (random_design)")
    var += float(vrows["vcov"].sum())
    if need_shift:
        if rows is None or group not in rows.columns:
            raise PredictiveError(f"column {group!r} is needed to remove its random intercepts")
        re = fit.ranef[group]["(Intercept)"].copy()
        re.index = re.index.astype(str)
        shift += re.reindex(rows[group].astype(str)).fillna(0.0).to_numpy()
    return shift, var


def _observed_scores(fit: Any, rows: pd.DataFrame | None) -> np.ndarray:
    """Observed scores on the score scale: the fitted response (or, for a transformation
    fit, the original response column), or ``rows[response]``; NaN when unavailable."""
    spec = getattr(fit, "spec", None)
    resp = getattr(spec, "response", None)
    if rows is None:
        frame = spec.data
        if fit_transform(fit) is not None and resp in frame.columns:
            return pd.to_numeric(frame[resp], errors="coerce").to_numpy(np.float64)
        return np.asarray(spec.y, dtype=np.float64)
    if resp is not None and resp in rows.columns:
        return pd.to_numeric(rows[resp], errors="coerce").to_numpy(np.float64)
    return np.full(len(rows), np.nan)


def _binary(values: pd.Series, positive: Any, label: str) -> np.ndarray:
    from scoremix.trials import label_to_binary

    try:
        return np.asarray(label_to_binary(values, positive=positive), dtype=np.int8)
    except (ValueError, TypeError) as exc:
        raise PredictiveError(f"class column {label!r}: {exc}") from exc


def _trial_strata(fit: Any, axis: ThresholdAxis, trials: pd.DataFrame | None, rows: pd.DataFrame) -> Any:
    """Stratum label of every row for a stratified transform (``None`` otherwise): the fit's
    per-row ``strata`` for the fitted rows, column ``axis.column`` of ``trials`` otherwise."""
    if axis.identity:
        return None
    col = axis.column
    if trials is None:
        st = getattr(fit, "strata", None)
        if st is not None:
            try:
                return pd.Series(st).loc[rows.index].to_numpy(dtype=object)
            except KeyError:
                pass
        if col in rows.columns:
            return rows[col].to_numpy(dtype=object)
        raise PredictiveError(f"the fit has one transform per level of {col!r} but no per-row strata "
                              "(fit.strata) for its rows")
    if col not in trials.columns:
        raise PredictiveError(f"strata column {col!r} not in the trial table: a fit with one transform per "
                              f"level of {col!r} needs every trial's stratum")
    return trials[col].to_numpy(dtype=object)


# ----------------------------------------------------------------------------- builders
def _point_predictive(fit: Any, trials: pd.DataFrame | None, data: pd.DataFrame | None, label: str,
                      positive: Any, marg: tuple[str, ...], conditional: bool, split: Sequence[str] = ()
                      ) -> Predictive:
    all_groups = _group_factors(fit)
    if trials is None:
        rows = model_frame_with(fit, data, [label, *split])
        spec = fit.spec
        if not marg:
            mean = np.asarray(fit.predict(None, re_form=None), dtype=np.float64)
        elif set(marg) == set(all_groups):
            mean = np.asarray(fit.predict(None, re_form="~0"), dtype=np.float64)
        else:
            mean = np.asarray(fit.predict(None, re_form=None), dtype=np.float64)
        var = _residual_var_fitted(fit, spec)
        rows_for_design = None
    else:
        rows = trials
        if label not in rows.columns:
            raise PredictiveError(f"class column {label!r} not in the trial table")
        full = not marg or set(marg) != set(all_groups)
        mean = np.asarray(fit.predict(trials, re_form=None if full else "~0", allow_new_levels=True),
                          dtype=np.float64)
        var = _residual_var_trials(fit, trials)
        rows_for_design = trials
    partial = bool(marg) and set(marg) != set(all_groups)
    for g in marg:
        shift, v = _marginal_parts(fit, rows_for_design, g, need_shift=partial)
        var = var + v
        mean = mean - shift
    y = _binary(rows[label], positive, label)
    sd = np.sqrt(var)
    if not (np.isfinite(mean).all() and np.isfinite(sd).all() and (sd > 0).all()):
        bad = int(np.flatnonzero(~(np.isfinite(mean) & np.isfinite(sd) & (sd > 0)))[0])
        raise PredictiveError(f"trial {rows.index[bad]!r} has a non-finite predictive mean or SD "
                              f"(mean={mean[bad]!r}, sd={sd[bad]!r})")
    axis = threshold_axis(fit_transform(fit))
    codes = axis.codes(_trial_strata(fit, axis, trials, rows), len(rows))
    comp_key, comp = unique_rows(np.c_[mean, sd, y.astype(float), codes.astype(float)])
    return Predictive(mean=comp_key[:, 0][None, :], sd=comp_key[:, 1][None, :], positive=comp_key[:, 2] > 0.5,
                      component=np.asarray(comp).ravel().astype(np.int64), y=y,
                      score=_observed_scores(fit, trials), frame=rows, transform=fit_transform(fit),
                      marginal_over=marg, draws=None, conditional=not marg, axis=axis,
                      stratum=comp_key[:, 3].astype(np.int64))


def _moments_predictive(fit: Any, trials: pd.DataFrame | None, data: pd.DataFrame | None, label: str,
                        positive: Any, marg: tuple[str, ...], split: Sequence[str],
                        fitted_rows: bool = False) -> Predictive:
    """Predictive of a fit that computes its own per-trial latent moments
    (``fit.latent_moments(trials, marginal_over=) -> (mean, sd, strata)``, e.g. a
    :class:`scoremix.locscale.LocScaleFit`); ``fitted_rows``: ``trials`` are the fitted rows
    (:func:`_is_fitted_frame`), predicted as such (the fit's methods get ``None``)."""
    rows_in = trials
    if fitted_rows:
        trials = None
    if rows_in is None:
        rows = model_frame_with(fit, data, [label, *split])
    else:
        rows = rows_in
        if label not in rows.columns:
            raise PredictiveError(f"class column {label!r} not in the trial table")
    mean, sd, strata = fit.latent_moments(trials, marginal_over=marg)
    mean, sd = np.asarray(mean, np.float64), np.asarray(sd, np.float64)
    y = _binary(rows[label], positive, label)
    axis = threshold_axis(fit_transform(fit))
    codes = axis.codes(strata, len(rows)) if not axis.identity else np.zeros(len(rows), np.int64)
    key = np.c_[mean, sd, y.astype(float), codes.astype(float)]
    if callable(getattr(fit, "trial_components", None)):   # further components per trial, (n, K)
        mix = fit.trial_components(trials, marginal_over=marg)
    else:
        mix = fit.trial_mixture(trials, marginal_over=marg) if callable(getattr(fit, "trial_mixture", None)) else None
    n = len(rows)
    shape2 = (n,)
    if mix is not None:   # further components per trial (failure mixture, speaker shape pooling)
        w1, mean2, sd2, strata2, w2 = mix
        shape2 = np.shape(mean2)
        K = 1 if len(shape2) == 1 else shape2[1]
        st2 = np.asarray(strata2, dtype=object).reshape(n, K)
        codes2 = (np.column_stack([axis.codes(st2[:, j], n) for j in range(K)]) if not axis.identity
                  else np.zeros((n, K), np.int64))
        key = np.r_[key, np.c_[np.asarray(mean2, np.float64).reshape(n, K).T.ravel(),
                               np.asarray(sd2, np.float64).reshape(n, K).T.ravel(),
                               np.tile(y.astype(float), K), codes2.T.ravel().astype(float)]]
    comp_key, comp = unique_rows(key)
    comp = np.asarray(comp).ravel().astype(np.int64)
    extra = {}
    if mix is not None:
        c2 = comp[n:].reshape(K, n).T
        extra = dict(weight=np.asarray(w1, np.float64), component2=c2.reshape(shape2),
                     weight2=np.asarray(w2, np.float64).reshape(shape2))
    return Predictive(mean=comp_key[:, 0][None, :], sd=comp_key[:, 1][None, :], positive=comp_key[:, 2] > 0.5,
                      component=comp[:n], y=y,
                      score=_observed_scores(fit, trials), frame=rows, transform=fit_transform(fit),
                      marginal_over=marg, draws=None, conditional=not marg, axis=axis,
                      stratum=comp_key[:, 3].astype(np.int64), **extra)


def _design_cells(fit: Any, rows: pd.DataFrame | None, conditional: bool) -> np.ndarray | None:
    """Rows with identical fixed-effects row, random-term design (and levels when
    conditional), dispersion level and weight share one Gaussian in every draw."""
    spec = getattr(fit, "spec", None)
    if spec is None or getattr(spec, "terms", None) is None:
        return None
    if rows is None:
        cols = [np.asarray(spec.X, dtype=np.float64)]
        design = [(t.codes, t.X) for t in spec.terms]
        if getattr(spec, "dispersion_codes", None) is not None:
            cols.append(np.asarray(spec.dispersion_codes, dtype=np.float64)[:, None])
        if getattr(spec, "weights", None) is not None:
            cols.append(np.asarray(spec.weights, dtype=np.float64)[:, None])
    else:
        if getattr(spec, "fixed_design", None) is None or getattr(spec, "random_design", None) is None:
            return None
        cols = [np.asarray(spec.fixed_design(rows), dtype=np.float64)]
        design = spec.random_design(rows)
        col = _dispersion_column(fit)
        if getattr(spec, "dispersion_levels", None) is not None and col in rows.columns:
            cols.append(pd.factorize(rows[col].astype(str))[0].astype(np.float64)[:, None])
    for codes, Xk in design:
        cols.append(np.asarray(Xk, dtype=np.float64))
        if conditional:
            cols.append(np.asarray(codes, dtype=np.float64)[:, None])
    _, inv = np.unique(np.column_stack(cols), axis=0, return_inverse=True)
    return np.asarray(inv).ravel()


def _bayes_predictive(fit: Any, trials: pd.DataFrame | None, data: pd.DataFrame | None, label: str,
                      positive: Any, conditional: bool, split: Sequence[str], max_draws: int | None
                      ) -> Predictive:
    spec = getattr(fit, "spec", None)
    if is_stratified_transform(fit_transform(fit)):
        raise PredictiveError("posterior fits with one transform per stratum (transform='monotone-by-class') "
                              "are not supported; use the frequentist fit (lmer) or transform='monotone'")
    if trials is None:
        if spec is None:
            raise PredictiveError("pass trials= (the fitted trial table): the fit carries no data frame")
        if getattr(spec.data, "index", None) is not None and spec.data.index.has_duplicates:
            raise ModelEERError("the fitted model frame has duplicate index labels; refit on a frame "
                                "with a unique index (e.g. df.reset_index(drop=True))")
        rows = model_frame_with(fit, data, [label, *split])
        rows = rows.assign(**{spec.response: np.asarray(spec.y, dtype=np.float64)})
    else:
        rows = trials
        for c in [label, *split]:
            if c not in rows.columns:
                raise PredictiveError(f"column {c!r} not in the trial table")
    y = _binary(rows[label], positive, label)
    if not y.any() or y.all():
        raise PredictiveError(f"class column {label!r} must hold both classes")
    key = pd.DataFrame({c: rows[c].to_numpy() for c in split}, index=rows.index)
    cells = _design_cells(fit, trials, conditional)
    if cells is not None:
        key["_design"] = cells
    key[_Y01] = y
    cell = key.groupby(list(key.columns), sort=True, dropna=False).ngroup().to_numpy()
    mom = fit.class_moments([_CELL], data=rows.assign(**{_CELL: cell, _Y01: y}), label=_Y01,
                            positive=1, random="conditional" if conditional else "marginal",
                            max_draws=max_draws)
    wide_mu = mom.pivot(index="draw", columns=[_CELL, "class"], values="mean")
    wide_sd = mom.pivot(index="draw", columns=[_CELL, "class"], values="sd")
    cols = wide_mu.columns
    comp_of_cell = pd.Series(np.arange(len(cols)), index=cols.get_level_values(0))
    return Predictive(mean=wide_mu.to_numpy(), sd=wide_sd.reindex(columns=cols).to_numpy(),
                      positive=cols.get_level_values(1).to_numpy() == 1,
                      component=comp_of_cell.reindex(cell).to_numpy().astype(np.int64), y=y,
                      score=(_observed_scores(fit, trials) if spec is not None else np.full(len(rows), np.nan)),
                      frame=rows, transform=fit_transform(fit),
                      marginal_over=() if conditional else tuple(_group_factors(fit)),
                      draws=wide_mu.index.to_numpy(), conditional=conditional)


def _is_fitted_frame(fit: Any, trials: pd.DataFrame) -> bool:
    """Whether ``trials`` are the rows ``fit`` was fitted on (the same object, or the same index
    and the same score, class, speaker and factor values): a location-scale fit then predicts
    them as fitted rows (with speaker shape pooling each row's pooled mass sits at its own
    score; as new rows it is spread over at most 256 quantiles of its cell)."""
    fr = getattr(getattr(fit, "_data", None), "frame", None)
    spec = getattr(fit, "locscale_spec", None)
    if fr is None or spec is None or not isinstance(trials, pd.DataFrame):
        return False
    if fr is trials:
        return True
    if len(fr) != len(trials) or not fr.index.equals(trials.index):
        return False
    cols = [spec.score, spec.label, spec.speaker, *spec.strata]
    return all(c in trials.columns and fr[c].equals(trials[c]) for c in cols)


def fit_class_defaults(fit: Any, label: str, positive: Any) -> tuple[str, Any]:
    """The class column and positive value of a fit that records them (``sm.score_model`` /
    location-scale fits: ``fit.locscale_spec``) where the caller left the defaults
    (``label="label"``, ``positive=None``); otherwise the arguments unchanged (s7heldout:
    ``sm.model_eer(fit, by="speaker")`` on a table whose class column is not called ``label``)."""
    spec = getattr(fit, "locscale_spec", None)
    if spec is None:
        return label, positive
    if label == "label":
        label = getattr(spec, "label", label)
    if positive is None:
        positive = getattr(spec, "positive", None)
    return label, positive


@renamed_kwargs(split="by")
def predictive(
    fit: Any,
    trials: pd.DataFrame | None = None,
    *,
    data: pd.DataFrame | None = None,
    label: str = "label",
    positive: Any = None,
    conditional: bool = True,
    marginal_over: Sequence[str] | str | None = None,
    by: Sequence[str] = (),
    max_draws: int | None = None,
) -> Predictive:
    """Per-trial latent predictive distributions of a fitted model (see the module docstring).

    Parameters
    ----------
    fit:
        an ``LmerResult`` (Gaussian or transformation model) or a ``BayesLmerResult``.
    trials:
        the trials to predict (any table the model's formula can encode; unseen grouping
        levels get random effect 0).  ``None``: the fitted rows (the model frame).
    data:
        with ``trials=None``: the fitted data frame, for columns (``label``, ``split``) that
        are not in the model frame (matched by index label).
    label, positive:
        class column and its positive value (:func:`scoremix.trials.label_to_binary`).
    conditional:
        condition on every fitted random effect (True) or marginalise all of them (False),
        unless ``marginal_over`` names the grouping factors to marginalise.
    marginal_over:
        grouping factors whose random effects are replaced by their variance (new levels);
        the others are conditioned on.  Point fits only; a posterior fit marginalises all
        random effects or none.
    by:
        columns carried in :attr:`Predictive.frame` (from ``data`` when outside the model
        frame); for posterior fits their cells are kept apart (components never straddle
        them).  Point-fit components are exact either way.
    max_draws:
        posterior fits: at most this many evenly spaced draws.

    Returns
    -------
    Predictive
    """
    split = by  # the body's name for by= (renamed API argument)
    label, positive = fit_class_defaults(fit, label, positive)
    if is_bayes_fit(fit):
        if marginal_over is not None:
            groups = _group_factors(fit)
            m = [marginal_over] if isinstance(marginal_over, str) else list(marginal_over)
            if set(m) not in (set(), set(groups)):
                raise PredictiveError("a posterior fit marginalises all random effects or none; "
                                      f"got marginal_over={m} of {groups}")
            conditional = not m
        return _bayes_predictive(fit, trials, data, label, positive, conditional, list(split), max_draws)
    if getattr(fit, "spec", None) is None and trials is None:
        raise PredictiveError("pass trials=: the fit carries no model frame")
    marg = _marginal_set(fit, conditional, marginal_over)
    if callable(getattr(fit, "latent_moments", None)):   # fits that give their own per-trial moments
        # the fitted rows themselves are predicted as fitted rows (their own pooled point masses,
        # not new rows'), and keep their columns (by=, label)
        fitted = trials is not None and _is_fitted_frame(fit, trials)
        return _moments_predictive(fit, trials, data, label, positive, marg, list(split), fitted_rows=fitted)
    return _point_predictive(fit, trials, data, label, positive, marg, conditional, list(split))
