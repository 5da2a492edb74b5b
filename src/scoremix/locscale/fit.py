r"""Fit a location-scale transformation mixed model (:func:`fit_locscale`).

Model: one increasing transform :math:`h_s` per stratum (class × ``spec.strata``,
:mod:`scoremix.locscale.latent`) and on the latent scale the Gaussian location-scale mixed
model of :mod:`scoremix.locscale.likelihood`

.. math::

    h_{s(t)}(S_t) = \mu_s + b_{ic} + u_{is} + \sigma_s e^{g_{ic}}\varepsilon_t .

Estimation alternates (a few passes, typically 3):

1. latent moments of every trial given its cell (interval censoring; first pass: rank-based
   normal scores), reduced to per-cell sufficient statistics :math:`(n, \sum z, \sum z^2)`;
2. maximum marginal likelihood of :math:`\mu_s, \log\sigma_s` and the random-effect
   parameters (adaptive Gauss–Hermite quadrature over :math:`g`, :math:`b` and :math:`u`
   in closed form; L-BFGS-B with the quadrature nodes re-centred between rounds);
3. posterior means of :math:`b, g, u` → every trial's latent mean and SD;
4. marginal matching of the edges of every :math:`h_s` to those trial Gaussians.

After step 4 the model's distribution of every stratum equals the empirical one at every
fitted score (in sample, per stratum, the model reproduces the counts), while the speaker
effects distribute that distribution over speakers with partial pooling — the quantity that
is predicted out of sample.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from scoremix.locscale.latent import (StrataCells, cell_moments, matched_edges, normal_score_edges, strata_cells,
                                      stratified_transform)
from scoremix.locscale.failure import (FAILURE_LEVEL, failure_strata, own_failure_keys, FailureCuts, FailureShares, failure_cuts, failure_flags,
                                       fit_shares)
from scoremix.locscale.covariates import CovariateDesign, covariate_stats, make_likelihood
from scoremix.locscale.likelihood import CellStats, Params, UnitLikelihood
from scoremix.locscale.spec import LocScaleSpec
from scoremix.transform.errors import TransformError

__all__ = ["LocScaleError", "LocScaleFit", "LocScaleData", "check_trial_columns", "prepare", "fit_locscale", "STRATUM"]

STRATUM = "__stratum__"
_CLASSES = ("negative", "positive")


class LocScaleError(TransformError, ValueError):
    """Bad input to a location-scale score model (names the column / level)."""


class _Spec:
    """The model frame as the predictive layer reads it (``data``, ``response``, ``n``)."""

    def __init__(self, data: pd.DataFrame, response: str, formula: str, dispersion: str) -> None:
        self.data = data
        self.response = response
        self.n = len(data)
        self.y = data[response].to_numpy(np.float64)
        self.terms = None
        self.formula = formula
        self.dispersion_formula = dispersion


def _row(v: Any) -> Any:
    """A row label as its Python value (numpy scalars print as ``np.int64(7)`` otherwise)."""
    return v.item() if isinstance(v, np.generic) else v


def check_trial_columns(frame: pd.DataFrame, score: str, levels: Sequence[str],
                        error: type[Exception] | None = None) -> np.ndarray:
    """The ``score`` column as float64, checked to be numeric without NaN (±inf are valid
    scores: certain decisions), and the ``levels`` columns (speaker, factors) without missing
    values; otherwise ``error`` (default :class:`LocScaleError`) naming the column, the count,
    the first row by the frame's own index, and the remedy."""
    error = LocScaleError if error is None else error
    raw = frame[score]
    s = pd.to_numeric(raw, errors="coerce").to_numpy(np.float64)
    bad = np.isnan(s)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise error(f"score column {score!r} has {int(bad.sum())} missing or non-numeric value(s) (first at row "
                    f"{_row(frame.index[first])!r}: {_row(raw.iloc[first])!r}); drop or fix those rows")
    for c in levels:
        miss = frame[c].isna().to_numpy()
        if miss.any():   # s7heldout: count, first row label as text, and the remedy
            raise error(f"column {c!r} has {int(miss.sum())} missing value(s) (first at row "
                        f"{_row(frame.index[miss][0])!r}); fill them with a level (e.g. 'none' for the "
                        f"class that has no {c}) or drop those rows")
    return s


class LocScaleData:
    """A trial table prepared for fitting: class, speaker and stratum codes, cells."""

    def __init__(self, frame: pd.DataFrame, spec: LocScaleSpec, failure: np.ndarray | None = None) -> None:
        from scoremix.trials import label_to_binary

        for c in [spec.score, spec.label, spec.speaker, *spec.strata]:
            if c not in frame.columns:
                raise LocScaleError(f"column {c!r} is not in the trial table (columns: {list(frame.columns)})")
        s = check_trial_columns(frame, spec.score, [spec.speaker, *spec.strata])
        try:
            y = np.asarray(label_to_binary(frame[spec.label], positive=spec.positive), dtype=np.int64)
        except (ValueError, TypeError) as exc:
            raise LocScaleError(f"class column {spec.label!r}: {exc}") from exc
        if y.size == 0:   # s9robust: not a raw numpy reduction error
            raise LocScaleError("the trial table has no rows")
        if y.min() == y.max():
            raise LocScaleError(f"class column {spec.label!r} holds one class only")
        self.spec = spec
        self.frame = frame
        self.score = s
        self.y = y
        lab = np.where(y == 1, "+", "-").astype(object)
        strata = pd.Series(lab, index=frame.index, dtype=object)
        for c in spec.strata:
            strata = strata + ":" + frame[c].astype(str).to_numpy()
        self.core_key = strata.to_numpy(dtype=object)   # the stratum without the failure cut
        self.failure = np.zeros(len(frame), bool) if failure is None else np.asarray(failure, bool)
        self.failure_own = own_failure_keys(self.core_key, self.failure, spec.failure_min_count)
        if self.failure.any():
            strata = strata.where(~self.failure, pd.Series(failure_strata(self.core_key, lab, self.failure_own),
                                                           index=frame.index))
        self.strata = strata
        self.cells: StrataCells = strata_cells(s, strata.to_numpy())
        self.stratum_class = np.array([1 if str(lv).startswith("+") else 0 for lv in self.cells.levels])
        self.speaker_codes, self.speakers = pd.factorize(frame[spec.speaker].astype(str), sort=True)
        self.unit = self.speaker_codes * 2 + y            # speaker × class
        self.cell = self.speaker_codes * self.cells.n_strata + self.cells.stratum

    def subset(self, mask: np.ndarray) -> "LocScaleData":
        m = np.asarray(mask, bool)
        return LocScaleData(self.frame.loc[m], self.spec, self.failure[m] if self.failure.any() else None)


def covariate_design(data: LocScaleData, covariates: Sequence[str]) -> tuple[CovariateDesign, np.ndarray]:
    """The design of ``covariates`` on ``data`` (cached per column list); s5trust-auto."""
    cache = data.__dict__.setdefault("_cov_cache", {})
    key = tuple(covariates)
    if key not in cache:
        from scoremix.locscale.covariates import CovariateError

        try:
            d = CovariateDesign.from_frame(data.frame, key)
            cache[key] = (d, d.matrix(data.frame))
        except CovariateError as exc:
            raise LocScaleError(str(exc)) from None
    return cache[key]


def prepare(trials: pd.DataFrame, spec: LocScaleSpec) -> LocScaleData:
    return LocScaleData(trials, spec)


def _stats(data: LocScaleData, ez: np.ndarray, ez2: np.ndarray, info: np.ndarray
           ) -> tuple[CellStats, np.ndarray, np.ndarray, np.ndarray]:
    """Per-cell sufficient statistics of the informative trials; returns the stats, the
    unit ids (speaker × class codes) of the stats' units, the cell ids and the map
    trial → stats cell (−1 for uninformative trials)."""
    idx = np.flatnonzero(info)
    cell_ids, inv = np.unique(data.cell[idx], return_inverse=True)
    n = np.bincount(inv).astype(np.float64)
    sz = np.bincount(inv, weights=ez[idx])
    szz = np.bincount(inv, weights=ez2[idx])
    S = data.cells.n_strata
    spk, stratum = cell_ids // S, cell_ids % S
    unit_ids_all = spk * 2 + data.stratum_class[stratum]
    unit_ids, unit = np.unique(unit_ids_all, return_inverse=True)
    st = CellStats(unit=unit, stratum=stratum, n=n, sz=sz, szz=szz, unit_class=unit_ids % 2, n_strata=S,
                   n_classes=2)
    trial_cell = np.full(data.score.size, -1)
    trial_cell[idx] = inv
    return st, unit_ids, cell_ids, trial_cell


def _flags(spec: LocScaleSpec, st: CellStats) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    scale = np.array([c in spec.speaker_scale for c in _CLASSES])
    corr = np.array([c in spec.correlated for c in _CLASSES]) & scale
    omega = np.array([c in spec.speaker_by_stratum for c in _CLASSES])
    # ω is identified only where speakers have several cells of the class
    multi = np.array([np.any(np.bincount(st.unit[st.unit_class[st.unit] == c], minlength=st.n_units) > 1)
                      for c in range(2)])
    tail = np.array([c in spec.heavy_tailed_scale for c in _CLASSES]) & scale & ~corr
    return scale, corr, omega & multi, tail


def _start(st: CellStats, lik: UnitLikelihood) -> np.ndarray:
    S = st.n_strata
    ns = np.bincount(st.stratum, weights=st.n, minlength=S)
    mu = np.bincount(st.stratum, weights=st.sz, minlength=S) / np.maximum(ns, 1)
    resid = st.szz - 2 * mu[st.stratum] * st.sz + st.n * mu[st.stratum] ** 2
    ssw = st.ssw
    lam = 0.5 * np.log(np.maximum(np.bincount(st.stratum, weights=ssw, minlength=S)
                                  / np.maximum(ns - np.bincount(st.stratum, minlength=S), 1), 1e-4))
    dev = st.zbar - mu[st.stratum]
    tb = np.array([np.sqrt(max(np.mean(dev[st.unit_class[st.unit] == c] ** 2) if np.any(st.unit_class[st.unit] == c)
                               else 0.1, 1e-4)) for c in range(2)])
    del resid
    p = Params(mu=mu, lam=lam, log_tb=np.log(tb), log_tg=np.full(2, np.log(0.2)), z_rho=np.zeros(2),
               log_om=np.full(2, np.log(0.1)), log_nu=np.full(2, np.log(4.0)))
    return lik.pack(p)


def _maximise(lik: UnitLikelihood, x0: np.ndarray, rounds: int = 3, tol: float = 1e-7) -> tuple[np.ndarray, float]:
    x = x0.copy()
    val = np.inf
    for r in range(rounds):
        lik.recentre(lik.unpack(x))

        def obj(v: np.ndarray) -> float:
            return -float(lik.unit_loglik(lik.unpack(v)).sum())

        res = minimize(obj, x, method="L-BFGS-B", bounds=lik.bounds(),
                       options=dict(maxiter=500, ftol=tol, gtol=1e-5))
        moved = np.max(np.abs(res.x - x)) if x.size else 0.0
        x, val = res.x, float(res.fun)
        if r >= 1 and moved < 1e-3:
            break
    lik.recentre(lik.unpack(x))
    return x, float(lik.unit_loglik(lik.unpack(x)).sum())


class LocScaleFit:
    """A fitted location-scale transformation mixed model (see :mod:`scoremix.locscale.fit`).

    Every model-based function of scoremix accepts it (through the predictive layer's
    ``latent_moments`` hook): ``sm.model_eer(fit, by="speaker")``, ``model_subgroup_dcf`` …

    Attributes
    ----------
    spec: the :class:`~scoremix.locscale.spec.LocScaleSpec`.
    params: fitted :class:`~scoremix.locscale.likelihood.Params` (stratum ``mu``/``lam`` on the
        latent scale, random-effect SDs per class ``[negative, positive]``).
    transform: the :class:`~scoremix.transform.StratifiedTransform` (column ``__stratum__``).
    ranef: ``{speaker: DataFrame}`` posterior means per speaker (``b_neg``, ``b_pos``,
        ``g_neg``, ``g_pos``).
    varcorr: random-effect SDs and correlations (lme4's ``as.data.frame(VarCorr)`` layout).
    loglik: latent-scale marginal log-likelihood of the last pass.
    selection: set by :func:`scoremix.score_model` (what was tried and chosen).
    """

    def __init__(self, data: LocScaleData, lik: UnitLikelihood, x: np.ndarray, loglik: float, edges: list,
                 trial_mean: np.ndarray, trial_sd: np.ndarray, post: dict, unit_ids: np.ndarray,
                 cell_ids: np.ndarray, info: dict) -> None:
        spec = data.spec
        self.locscale_spec = spec
        self.params = lik.unpack(x)
        self.loglik = float(loglik)
        self.info = info
        self._data = data
        self._edges = edges
        self._lik = lik
        f = spec.formulas()
        self.formula, self.dispersion = f["formula"], f["dispersion"]
        frame = data.frame.assign(**{STRATUM: data.strata.to_numpy()})
        self.spec = _Spec(frame, spec.score, self.formula, self.dispersion)
        self.transform = stratified_transform(data.cells, edges, STRATUM) if edges is not None else None
        self.strata = pd.Series(data.strata.to_numpy(), index=frame.index)
        self.trial_mean = trial_mean
        self.trial_sd = trial_sd
        self._post = post
        self._unit_ids = unit_ids
        self._cell_ids = cell_ids
        sp = list(data.speakers)
        re = pd.DataFrame(0.0, index=pd.Index(sp, name=spec.speaker), columns=["b_neg", "b_pos", "g_neg", "g_pos"])
        for k, uid in enumerate(unit_ids):
            c = "pos" if uid % 2 else "neg"
            re.iloc[uid // 2, re.columns.get_loc(f"b_{c}")] = post["b"][k]
            re.iloc[uid // 2, re.columns.get_loc(f"g_{c}")] = post["g"][k]
        self.ranef = {spec.speaker: re}
        p = self.params
        rows = []
        for c, name in enumerate(_CLASSES):
            rows.append((spec.speaker, f"location:{name}", None, float(np.exp(2 * p.log_tb[c]))))
            if lik.scale[c]:
                rows.append((spec.speaker, f"log_sd:{name}", None, float(np.exp(2 * p.log_tg[c]))))
            if lik.corr[c]:
                rows.append((spec.speaker, f"location:{name}", f"log_sd:{name}", float(np.tanh(p.z_rho[c]))))
            if lik.tail[c]:
                rows.append((spec.speaker, f"log_sd_df:{name}", None, float(np.exp(p.log_nu[c]))))
            if lik.omega[c]:
                rows.append((f"{spec.speaker}:stratum", f"location:{name}", None, float(np.exp(2 * p.log_om[c]))))
        vc = pd.DataFrame(rows, columns=["grp", "var1", "var2", "vcov"])
        v = vc["vcov"].to_numpy(float)
        vc["sdcor"] = np.where(vc["var2"].isna(), np.sqrt(np.abs(v)), v)
        self.varcorr = vc
        self.selection: Any = None
        self.failure: dict | None = None    # set by fit_locscale: {"cuts", "shares"}
        self.speaker_pooling: Any = None    # s6speaker: set by score_model (locscale/speaker_pool.py)
        self.n_obs = len(frame)
        # s5trust-auto: per-class covariate location terms (``coef``: β per class)
        self.design = covariate_design(data, spec.covariates)[0] if spec.covariates else None
        self.coef = (pd.Series(np.asarray(self.params.beta).ravel(), index=self.design.coef_names(), name="beta")
                     if self.design is not None else pd.Series(dtype=float, name="beta"))

    # ------------------------------------------------------------------ predictive hook
    def latent_moments(self, trials: pd.DataFrame | None = None, marginal_over: Sequence[str] = ()
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-trial latent mean, SD and stratum label.

        Conditional (default): :math:`m_t = \\hat\\mu_s + \\hat b_{ic} + \\hat u_{is}`,
        :math:`s_t = \\hat\\sigma_s e^{\\hat g_{ic}}` (posterior means of the speaker's effects;
        0 for a speaker or cell not seen in fitting).  Marginal over the speaker:
        :math:`m_t=\\hat\\mu_s`, :math:`s_t^2=\\tau_b^2+\\omega^2+\\sigma_s^2E[e^{2g}]` (the
        moment-matched Gaussian of the scale mixture)."""
        spec = self.locscale_spec
        marg = tuple(marginal_over)
        p = self.params
        if trials is None and not marg:
            return self.trial_mean, self.trial_sd, self.strata.to_numpy(dtype=object)
        frame = self._data.frame if trials is None else trials
        for c in [spec.label, spec.speaker, *spec.strata]:
            if c not in frame.columns:
                raise LocScaleError(f"column {c!r} is needed to predict with this model "
                                    f"(columns: {list(frame.columns)})")
        from scoremix.trials import label_to_binary
        y = np.asarray(label_to_binary(frame[spec.label], positive=spec.positive), dtype=np.int64)
        lab = np.where(y == 1, "+", "-").astype(object)
        strata = pd.Series(lab, index=frame.index, dtype=object)
        for c in spec.strata:
            strata = strata + ":" + frame[c].astype(str).to_numpy()
        fail = self._failure_of(frame, y)
        if fail.any():
            strata = strata.where(~fail, pd.Series(self._failure_level(strata.to_numpy(dtype=object), lab),
                                                   index=frame.index))
        pos = {lv: k for k, lv in enumerate(self._data.cells.levels)}
        s = strata.map(pos)
        if s.isna().any():
            raise LocScaleError(f"stratum {strata[s.isna()].iloc[0]!r} (class and {list(spec.strata)}) was not "
                                f"seen in fitting")
        s = s.to_numpy(np.int64)
        mu, sig = p.mu[s] + self._xbeta(frame, y), np.exp(p.lam[s])
        if spec.speaker in marg:
            om2 = np.where(self._lik.omega, np.exp(2 * p.log_om), 0.0)[y]
            e2g = np.array([_mean_e2g(self._lik, p, c) for c in range(2)])[y]
            var = np.exp(2 * p.log_tb)[y] + om2 + sig ** 2 * e2g
            return (np.where(fail, 0.0, mu), np.where(fail, 1.0, np.sqrt(var)), strata.to_numpy(dtype=object))
        spk = pd.Index(self._data.speakers).get_indexer(frame[spec.speaker].astype(str))
        unit_id = np.where(spk >= 0, spk * 2 + y, -1)
        k = np.searchsorted(self._unit_ids, unit_id)
        k = np.clip(k, 0, self._unit_ids.size - 1)
        hit = (spk >= 0) & (self._unit_ids[k] == unit_id)
        b = np.where(hit, self._post["b"][k], 0.0)
        g = np.where(hit, self._post["g"][k], 0.0)
        cid = np.where(spk >= 0, spk * self._data.cells.n_strata + s, -1)
        kc = np.clip(np.searchsorted(self._cell_ids, cid), 0, self._cell_ids.size - 1)
        hitc = (spk >= 0) & (self._cell_ids[kc] == cid)
        u = np.where(hitc, self._post["u"][kc], 0.0)
        return (np.where(fail, 0.0, mu + b + u), np.where(fail, 1.0, sig * np.exp(g)),
                strata.to_numpy(dtype=object))

    # ------------------------------------------------------------------ failure mixture
    def _primary_strata(self, frame: pd.DataFrame, y: np.ndarray, fail: np.ndarray) -> np.ndarray:
        lab = np.where(y == 1, "+", "-").astype(object)
        strata = pd.Series(lab, index=frame.index, dtype=object)
        for c in self.locscale_spec.strata:
            strata = strata + ":" + frame[c].astype(str).to_numpy()
        strata = strata.where(~fail, pd.Series(self._failure_level(strata.to_numpy(dtype=object), lab),
                                               index=frame.index))
        return strata.to_numpy(dtype=object)

    def _failure_level(self, key: np.ndarray, lab: np.ndarray) -> np.ndarray:
        """The fitted failure stratum of core strata ``key`` (s6failure): the stratum's own
        (``"<key>:failure"``) when it was fitted, else the class's (``"±:failure"``) when
        fitted, else the core stratum itself (a class without failures)."""
        known = set(self._data.cells.levels)
        own = failure_strata(key, lab, frozenset(k for k in pd.unique(key) if f"{k}:{FAILURE_LEVEL}" in known))
        return np.where([lv in known for lv in own], own, np.asarray(key, object))

    def _failure_of(self, frame: pd.DataFrame, y: np.ndarray) -> np.ndarray:
        """Failure flags of the rows of ``frame`` (all ``False`` without a failure part or
        without a score column)."""
        if self.failure is None or self.locscale_spec.score not in frame.columns:
            return np.zeros(len(frame), bool)
        sc = pd.to_numeric(frame[self.locscale_spec.score], errors="coerce").to_numpy(np.float64)
        return failure_flags(sc, y, self.failure["cuts"]) & np.isfinite(sc)

    def trial_mixture(self, trials: pd.DataFrame | None = None, marginal_over: Sequence[str] = ()
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        r"""Per-trial weights of the failure mixture (``None`` without a failure part).

        For the rows of a cell :math:`j` (speaker × core stratum; the core stratum alone when
        marginal over the speaker) with :math:`n_j` rows of which :math:`k_j` are failures, a
        core row carries weight :math:`(1-\hat\pi_j)\,n_j/(n_j-k_j)` on its own latent
        Gaussian, a failure row weight 0, and every row weight :math:`\hat\pi_j` on the
        class's failure distribution :math:`G_c` (mean 0, SD 1 in stratum ``"±:failure"``).
        The cell's total is :math:`(1-\hat\pi_j)\,n_j` core and :math:`\hat\pi_j n_j`
        failure mass, whatever :math:`k_j` is (the split of the rows only says which rows
        carry the core mass).  A cell whose rows are all failures keeps weight 1 on them.

        Returns ``(weight, mean2, sd2, strata2, weight2)``."""
        if self.failure is None:
            return None
        spec = self.locscale_spec
        frame = self._data.frame if trials is None else trials
        from scoremix.trials import label_to_binary
        y = np.asarray(label_to_binary(frame[spec.label], positive=spec.positive), dtype=np.int64)
        lab = np.where(y == 1, "+", "-").astype(object)
        key = pd.Series(lab, index=frame.index, dtype=object)
        for c in spec.strata:
            key = key + ":" + frame[c].astype(str).to_numpy()
        key = key.to_numpy(dtype=object)
        fail = self._failure_of(frame, y)
        shares: FailureShares = self.failure["shares"]
        marg = spec.speaker in tuple(marginal_over)
        spk = np.full(len(frame), "", dtype=object) if marg else frame[spec.speaker].astype(str).to_numpy(dtype=object)
        if marg:
            pi = np.array([shares.pooled.get(k, 0.0) for k in key], np.float64)
        else:
            pi = shares.share(spk, key, y)
        grp = pd.MultiIndex.from_arrays([spk, key]).factorize()[0] if len(frame) else np.zeros(0, np.int64)
        n_j = np.bincount(grp, minlength=grp.max() + 1 if grp.size else 0)[grp].astype(np.float64)
        k_j = np.bincount(grp, weights=fail.astype(np.float64), minlength=grp.max() + 1 if grp.size else 0)[grp]
        allfail = k_j >= n_j
        w1 = np.where(fail, 0.0, (1 - pi) * n_j / np.maximum(n_j - k_j, 1.0))
        w1 = np.where(allfail, 1.0, w1)
        w2 = np.where(allfail, 0.0, pi)
        strata2 = self._failure_level(key, lab)   # s6failure: the stratum's own G_a or the class's G_c
        known = set(self._data.cells.levels)
        has = np.array([lv in known for lv in strata2], bool)   # a class without failures: no G_c
        if not has.all():
            w1 = np.where(has, w1, 1.0)
            w2 = np.where(has, w2, 0.0)
            strata2 = np.where(has, strata2, self._primary_strata(frame, y, fail))
        return w1, np.zeros(len(frame)), np.ones(len(frame)), strata2, w2

    def trial_components(self, trials: pd.DataFrame | None = None, marginal_over: Sequence[str] = ()) -> Any:
        """Every further per-trial component: the failure mixture (:meth:`trial_mixture`) and
        the per-speaker shape pooling (:mod:`scoremix.locscale.speaker_pool`; s6speaker)."""
        if self.speaker_pooling is None:
            return self.trial_mixture(trials, marginal_over=marginal_over)
        return self.speaker_pooling.components(self, trials, marginal_over)

    def _xbeta(self, frame: pd.DataFrame, y: np.ndarray) -> np.ndarray | float:
        """:math:`x_t^\\top\\beta_{c(t)}` of the covariate location terms (0 without any)."""
        if self.design is None:
            return 0.0
        from scoremix.locscale.covariates import CovariateError

        try:
            X = self.design.matrix(frame)
        except CovariateError as exc:
            raise LocScaleError(str(exc)) from None
        return np.einsum("np,np->n", X, self.params.beta[y])

    def __repr__(self) -> str:
        return (f"<LocScaleFit {self.locscale_spec.describe()}; {self.n_obs} trials, "
                f"{self._data.cells.n_strata} strata, loglik {self.loglik:.1f}>")


def _mean_e2g(lik: UnitLikelihood, p: Params, c: int) -> float:
    """:math:`E[e^{2g}]` under the fitted prior of class ``c`` (t prior: ``g`` truncated to ±3)."""
    if not lik.scale[c]:
        return 1.0
    tg = float(np.exp(p.log_tg[c]))
    if not lik.tail[c]:
        return float(np.exp(2 * tg ** 2))
    from scipy import stats
    g = np.linspace(-3, 3, 2001)
    w = stats.t.pdf(g / tg, df=float(np.exp(p.log_nu[c])))
    return float(np.sum(w * np.exp(2 * g)) / np.sum(w))


def fit_locscale(trials: pd.DataFrame | LocScaleData, spec: LocScaleSpec, *, n_pass: int = 3, n_nodes: int = 9,
                 ) -> LocScaleFit:
    """Fit the location-scale transformation mixed model ``spec`` to ``trials``
    (module docstring).  ``n_pass``: passes of steps 1–4; ``n_nodes``: Gauss–Hermite nodes
    over the log-SD effect (1 = Laplace)."""
    t0 = time.perf_counter()
    data = trials if isinstance(trials, LocScaleData) else LocScaleData(trials, spec)
    failure = None
    if spec.failure_quantile is not None:
        if not spec.transform:
            raise LocScaleError("failure_quantile needs transform=True (the failure strata have their own transform)")
        cuts = failure_cuts(data.score, data.y, spec.failure_quantile)
        flags = failure_flags(data.score, data.y, cuts)
        data = LocScaleData(data.frame, spec, flags)
        shares = fit_shares(np.asarray(data.speakers)[data.speaker_codes], data.core_key, data.y, flags,
                             estimate=spec.failure_share)
        failure = dict(cuts=cuts, shares=shares)
    fail = data.failure
    cells = data.cells
    n = data.score.size
    mean, sd = np.zeros(n), np.ones(n)
    edges = normal_score_edges(cells)
    x = None
    X = covariate_design(data, spec.covariates)[1] if spec.covariates else None
    if not spec.transform:
        n_pass = 1
        if not np.isfinite(data.score).all():
            bad = int(np.flatnonzero(~np.isfinite(data.score))[0])
            raise LocScaleError(f"column {spec.score!r}: row {data.frame.index[bad]!r} is infinite; the Gaussian "
                                "model (transform=False) needs finite scores (use transform=True)")
    for it in range(n_pass):
        if spec.transform:
            ez, ez2, info = cell_moments(cells, edges, mean, sd)
        else:
            ez, ez2, info = data.score, data.score ** 2, np.isfinite(data.score)
        info = info & ~fail          # failures enter through their own part (failure.py)
        st, unit_ids, cell_ids, trial_cell = _stats(data, ez, ez2, info)
        if X is not None:
            st = covariate_stats(st, X, ez, trial_cell)
        scale, corr, omega, tail = _flags(spec, st)
        if not spec.speaker_location:
            raise LocScaleError("speaker_location=False is not supported (the speaker location effect is the "
                                "model's base term)")
        lik = make_likelihood(st, scale, corr, omega, n_nodes=n_nodes, tail=tail)
        x0 = _start(st, lik) if x is None else x
        x, ll = _maximise(lik, x0)
        post = lik.posterior(lik.unpack(x))
        p = lik.unpack(x)
        s = cells.stratum
        # trial → unit/cell index in the stats
        k_unit = np.searchsorted(unit_ids, data.unit)
        ok_u = (k_unit < unit_ids.size) & (unit_ids[np.clip(k_unit, 0, unit_ids.size - 1)] == data.unit)
        k_unit = np.clip(k_unit, 0, unit_ids.size - 1)
        b = np.where(ok_u, post["b"][k_unit], 0.0)
        g = np.where(ok_u, post["g"][k_unit], 0.0)
        u = np.where(trial_cell >= 0, post["u"][np.maximum(trial_cell, 0)], 0.0)
        mean = np.where(fail, 0.0,
                        p.mu[s] + b + u + (np.einsum("np,np->n", X, p.beta[data.y]) if X is not None else 0.0))
        sd = np.where(fail, 1.0, np.exp(p.lam[s] + g))
        if it < n_pass - 1:
            edges = matched_edges(cells, mean, sd)
    edges = matched_edges(cells, mean, sd) if spec.transform else None
    info = dict(seconds=time.perf_counter() - t0, n_pass=n_pass, n_nodes=n_nodes, n_params=int(x.size))
    fit = LocScaleFit(data, lik, x, ll, edges, mean, sd, post, unit_ids, cell_ids, info)
    fit.failure = failure
    return fit
