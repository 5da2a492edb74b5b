r"""Decision-level fairness model: a binomial GLMM of the errors a detector makes at one
threshold, giving partially pooled subgroup FNR, FPR, DCF and SVEva ratios.

At threshold :math:`\tau` (accept :math:`\iff s \ge \tau`) trial :math:`i` of class
:math:`c(i)` (positive / negative) in subgroup :math:`g(i)` by speaker :math:`k(i)` is an
error :math:`e_i = 1` when it is a miss (positive rejected) or a false alarm (negative
accepted).  The model is

.. math::

    \operatorname{logit} P(e_i = 1) = \beta_{c(i), g(i)} + b_{k(i), c(i)}
        + \sum_f a^{(f)}_{f(i)},\qquad
    (b_{k,\mathrm{neg}}, b_{k,\mathrm{pos}}) \sim N(0, \Sigma_s),\quad
    a^{(f)}_l \sim N(0, \sigma_f^2),

(``err ~ 0 + cell + (0 + cls | speaker) + (1 | factor) …`` fitted by
:func:`scoremix.glmer`, Laplace; 0/1 rows are collapsed into per-cell counts; a factor with
a single level in one class, such as ASVspoof's attack ``bonafide``, acts in the other
class only).  The model subgroup rates are those of a new speaker of the subgroup drawn
from the fitted speaker distribution, over the subgroup's mix of factor levels (the
conditional modes of the factor effects), i.e. the speakers are pooled through
:math:`\Sigma_s` instead of being weighted by their trial counts:

.. math::

    \widehat{\mathrm{FNR}}_g = \sum_l w^+_{g,l} \int \operatorname{logit}^{-1}
        (\hat\beta_{+,g} + \tilde a_l + \sigma_+ z)\,\phi(z)\,dz,\qquad
    \widehat{\mathrm{DCF}}_g = c_{miss}\pi\,\widehat{\mathrm{FNR}}_g
        + c_{fa}(1-\pi)\,\widehat{\mathrm{FPR}}_g,

with SVEva's ratio ``ratio_overall = DCF_g / DCF_all`` and the rate ratios to the overall
rates.  Model intervals: percentiles of the same quantities over joint draws of
:math:`(u, \beta)` from the Laplace approximation at the mode, the normal with the
inverse of the penalised Hessian as covariance (Gelman & Hill's ``sim`` with the
correlation between fixed and random effects kept; the uncertainty of :math:`\theta` is
ignored).  ``speakers="observed"`` replaces the new speaker by the subgroup's own
speakers at their conditional modes, trial-weighted; ``pool_groups=True`` replaces the free
:math:`\beta_{c,g}` by :math:`\mu_c + v_{c,g}`, :math:`v_{c,g} \sim N(0, \sigma_g^2)`;
``factor_by_group`` / ``factor_by_speaker`` add random factor × subgroup / factor × speaker
interactions.  :meth:`DecisionModelResult.rates` gives the rates of any subgroups of any
table (held-out trials, a few speakers, subgroup × attack) as trial-weighted conditional
cell rates, with :math:`\hat\beta` calibrated to the fixed-effect score equation.
Beside each model
value: the empirical (counted) value and its speaker-cluster bootstrap percentile interval
at the same fixed threshold.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix.fairness.subgroups import SubgroupError, binary_labels

__all__ = ["DecisionModelResult", "decision_model", "MEASURES", "logit_normal_mean"]

MEASURES = ("fnr", "fpr", "dcf", "ratio_overall", "fnr_ratio", "fpr_ratio")


@dataclass
class DecisionModelResult:
    """``table``: one row per subgroup with, for every measure ``m`` of :data:`MEASURES`,
    ``m_model``, ``m_model_lo``, ``m_model_hi``, ``m_emp``, ``m_emp_lo``, ``m_emp_hi``;
    ``overall``: the same measures of all trials; ``threshold``; ``fit`` (the GLMM)."""

    table: pd.DataFrame
    overall: dict[str, float]
    threshold: float
    fit: Any
    settings: dict[str, Any] = field(default_factory=dict)
    _predictor: Any = field(default=None, repr=False)

    def inside(self) -> pd.DataFrame:
        """Whether each model value lies inside the empirical interval (subgroups ×
        measures)."""
        out = {}
        for m in MEASURES:
            v, lo, hi = (self.table[f"{m}_model"], self.table[f"{m}_emp_lo"], self.table[f"{m}_emp_hi"])
            out[m] = (v >= lo) & (v <= hi)
        return pd.DataFrame(out)

    def rates(self, trials: pd.DataFrame, by: str | Sequence[str], *, level: float | None = None,
              n_sim: int | None = None, seed: int | np.random.Generator | None = 0,
              calibrate: bool = True) -> pd.DataFrame:
        r"""Model FNR and FPR of the subgroups ``by`` of a table of trials — a held-out
        table, or subgroups finer than the fitted ones (a few speakers, gender × attack) —
        as the trial-weighted average of the fitted *conditional* cell rates:

        .. math::

            \widehat{\mathrm{FNR}}_h = \frac{\sum_{c \in h,\,+} n_c\,\hat\mu_c}
                {\sum_{c \in h,\,+} n_c},\qquad
            \hat\mu_c = \operatorname{logit}^{-1}(x_c^\top\hat\beta + z_c^\top\hat b),

        over the speaker × class × subgroup × factor-level cells :math:`c` of ``trials``
        (:math:`n_c` its trials, :math:`\hat b` the conditional modes: a speaker's own
        effect pooled toward its subgroup mean through :math:`\Sigma_s`).  A speaker not
        in the fit gets the new-speaker integral of its class
        (:func:`logit_normal_mean`), an unseen factor level effect 0.  For speakers in the
        fit this estimates the rate of *these* speakers on these trials (the split-half
        target), not the population marginal of ``decision_model``'s default.  Model
        interval: percentiles over joint draws of :math:`(u, \beta)` (as in
        :func:`decision_model`).  Beside it the counted rate of ``trials`` at the fitted
        threshold (``fnr_emp``, ``fpr_emp``) and the number of trials.

        ``calibrate=True`` (default) shifts :math:`\hat\beta` by the :math:`\Delta` that
        makes the fitted table's conditional rates add up to its counted errors in every
        fixed-effect cell (class × subgroup; class with ``pool_groups``), the score
        equation :math:`X^\top(e - n\hat\mu) = 0` at the joint mode; then a fitted
        subgroup's rate on a table with the fitted table's mix of cells is its counted
        rate, and the pooling acts only *within* it (speakers, factor levels).

        ``trials`` needs the fitted score, label, speaker, subgroup and factor columns and
        the ``by`` columns.
        """
        if self._predictor is None:
            raise ValueError("this result has no fitted predictor (made by decision_model?)")
        by = [by] if isinstance(by, str) else list(by)
        return self._predictor.rates(trials, by, level=self.settings["level"] if level is None else level,
                                     n_sim=self.settings["n_sim"] if n_sim is None else n_sim,
                                     rng=np.random.default_rng(seed), calibrate=calibrate)


def logit_normal_mean(eta: np.ndarray, sd: np.ndarray, *, h: float = 0.2,
                      half_width: float = 12.0) -> np.ndarray:
    r"""The marginal rate :math:`\int \operatorname{logit}^{-1}(\eta + \sigma z)\,\phi(z)\,dz`
    (elementwise; ``eta`` and ``sd`` broadcast).

    The trapezoidal rule with step ``h`` on :math:`[-12, 12]`: for an integrand analytic in
    a strip about the real axis and decaying like :math:`\phi`, its error falls like
    :math:`e^{-c/h}` (Trefethen & Weideman 2014, SIAM Review 56, §5); at ``h = 0.2`` (121
    nodes) the relative error is below 1e-9 for :math:`\eta \in [-14, 6]`,
    :math:`\sigma \le 4` (checked against adaptive quadrature in the tests).  A 21-point
    Gauss–Hermite rule, used before, is off by up to 6e-4 relative at rare rates with
    :math:`\sigma \ge 2`.
    """
    from scipy.special import expit
    z = np.arange(-half_width, half_width + h / 2, h)
    w = h * np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)
    eta, sd = np.broadcast_arrays(np.asarray(eta, float), np.asarray(sd, float))
    out = np.zeros(eta.shape)
    for zk, wk in zip(z, w):
        out += wk * expit(eta + sd * zk)
    return out


def _threshold(trials: pd.DataFrame, threshold: float | str, groups: Sequence[str], score: str,
               label: str, speaker: str, positive: Any, cost: dict) -> float:
    if isinstance(threshold, (int, float, np.floating)) and not isinstance(threshold, bool):
        return float(threshold)
    if threshold == "eer":
        from scoremix.metrics import eer_threshold
        return float(eer_threshold(trials[score].to_numpy(float),
                                   binary_labels(trials[label], positive)))
    if threshold == "min_dcf":
        from scoremix.fairness.sveva import subgroup_dcf
        res = subgroup_dcf(trials, list(groups), score=score, label=label, speaker=speaker,
                           positive=positive, n_boot=0, eer=False, progress=False, **cost)
        return float(res.threshold)
    raise ValueError(f"threshold must be a number, 'eer' or 'min_dcf', not {threshold!r}")


def _measures(fn: np.ndarray, npos: np.ndarray, fa: np.ndarray, nneg: np.ndarray,
              fn_all: np.ndarray, npos_all: np.ndarray, fa_all: np.ndarray, nneg_all: np.ndarray,
              a: float, b: float) -> dict[str, np.ndarray]:
    """The six measures from (possibly fractional) error counts; trailing axes broadcast."""
    with np.errstate(invalid="ignore", divide="ignore"):
        fnr, fpr = fn / npos, fa / nneg
        fnr_all, fpr_all = fn_all / npos_all, fa_all / nneg_all
        dcf, dcf_all = a * fnr + b * fpr, a * fnr_all + b * fpr_all
        return {"fnr": fnr, "fpr": fpr, "dcf": dcf, "ratio_overall": dcf / dcf_all,
                "fnr_ratio": fnr / fnr_all, "fpr_ratio": fpr / fpr_all,
                "_all": (fnr_all, fpr_all, dcf_all)}


def decision_model(trials: pd.DataFrame, threshold: float | str = "min_dcf",
                   groups: Sequence[str] = (), *, score: str = "score", label: str = "label",
                   speaker: str = "speaker", positive: Any = None,
                   factors: Sequence[str] = (), p_target: float = 0.05, c_miss: float = 1.0,
                   c_fa: float = 1.0, level: float = 0.95, n_sim: int = 1000, n_boot: int = 1000,
                   seed: int | np.random.Generator | None = 0,
                   control: dict | None = None, speakers: str = "new",
                   point: str = "mode", pool_groups: bool = False,
                   factor_by_group: bool = False, factor_by_speaker: bool = False) -> DecisionModelResult:
    r"""Binomial GLMM of misses and false alarms at ``threshold`` (see the module docstring).

    Parameters
    ----------
    trials:
        one row per trial (score, label, speaker and the attribute columns).
    threshold:
        a number, ``"min_dcf"`` (the overall minimum-DCF threshold of SVEva, ``τ*``) or
        ``"eer"`` (the ROC-convex-hull EER threshold).
    groups:
        attribute columns defining the subgroups (their level combinations).
    speaker:
        the speaker column (random speaker effects per class, and the bootstrap clusters).
    factors:
        further crossed random intercepts, e.g. ``["attack"]``.
    p_target, c_miss, c_fa:
        the detection cost (SVEva defaults).
    level, n_sim, n_boot, seed:
        interval level, number of model draws and of bootstrap replicates, seed.
    speakers:
        ``"new"`` (default): the rate of a new speaker of the subgroup, integrated over the
        fitted speaker distribution (population-averaged, marginal); ``"observed"``: the
        trial-weighted rate of the subgroup's fitted speakers at their conditional modes
        (the finite-population rate of these speakers).  They do not equal the counted
        rates: the Laplace fit optimises :math:`\beta` on the approximate marginal
        likelihood, not jointly with :math:`u`, so :math:`X^\top(y-\hat\mu)\ne 0`.
    point:
        ``"mode"`` (default): the rates at the conditional modes (plug-in; the new
        speaker's effect integrated by :func:`logit_normal_mean`); ``"mean"``: the
        posterior mean of each rate under the Laplace approximation — each cell's linear
        predictor normal with the mode as mean and :math:`a^\top C a` as variance
        (:math:`C` the joint covariance of :math:`(u, \beta)`).  ``"mean"`` overstates rare
        rates: for a factor level with almost no errors the normal approximation is wide
        and symmetric where the true posterior is bounded above (on LA, FPR at τ* falls
        outside the counted 95 % interval for 2 of 10 systems; docs/glmm.md).
    pool_groups:
        ``False`` (default): a free fixed mean per class × subgroup (the model above);
        ``True``: the subgroup means are partially pooled toward the class mean,
        ``err ~ 0 + cls + (1 | cell) + …`` with :math:`\beta_{c,g} = \mu_c + v_{c,g}`,
        :math:`v \sim N(0, \sigma_g^2)` (one variance over all class × subgroup cells).
    factor_by_group:
        ``True`` adds, for every factor, a random factor × subgroup interaction
        :math:`a^{(f,g)}_{l,g(i)} \sim N(0, \sigma_{fg}^2)` (``(1 | f:g)``), so that e.g.
        gender × attack rates are pooled toward the additive attack + gender structure
        instead of being forced onto it.
    factor_by_speaker:
        ``True`` adds a random speaker × factor-level interaction (``(1 | f:speaker)``,
        one variance per factor), so that a speaker's errors under one attack are pooled
        toward its additive prediction instead of being forced onto it.

    Returns
    -------
    DecisionModelResult
    """
    from scoremix.glmm import glmer

    groups = list(groups)
    for col in [score, label, speaker, *groups, *factors]:
        if col not in trials.columns:
            raise SubgroupError(f"column {col!r} is not in the trials (columns: {list(trials.columns)})")
    if not groups:
        raise SubgroupError("decision_model needs at least one subgroup column in groups=")
    if point not in ("mean", "mode"):
        raise ValueError(f"point must be 'mean' or 'mode', not {point!r}")
    if speakers not in ("new", "observed"):
        raise ValueError(f"speakers must be 'new' or 'observed', not {speakers!r}")
    cost = dict(p_target=p_target, c_miss=c_miss, c_fa=c_fa)
    tau = _threshold(trials, threshold, groups, score, label, speaker, positive, cost)
    cols = dict(score=score, label=label, speaker=speaker, positive=positive, groups=groups,
                factors=list(factors))
    frame, y, err, grp = _decision_frame(trials, tau, cols)
    extra = ["g"] * factor_by_group + ["s"] * factor_by_speaker
    terms = ["(0 + cls | spk)"]
    for j, f in enumerate(factors):
        v = frame[f"f{j}"].to_numpy()
        # a factor with one level in a class (ASVspoof's attack "bonafide") acts in the
        # other class only; its single level would otherwise be aliased with the class means
        only = "isneg" if len(set(v[y])) == 1 else "ispos" if len(set(v[~y])) == 1 else None
        terms.append(f"(0 + {only} | f{j})" if only else f"(1 | f{j})")
        for x in extra:
            terms.append(f"(0 + {only} | f{j}{x})" if only else f"(1 | f{j}{x})")
    rand = " + ".join(terms)
    formula = f"err ~ 0 + cls + (1 | cell) + {rand}" if pool_groups else f"err ~ 0 + cell + {rand}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = glmer(formula, frame, "binomial", control=control)
    a, b = c_miss * p_target, c_fa * (1 - p_target)
    levels = sorted(set(grp))
    rng = np.random.default_rng(seed)
    pred = _Predictor(fit, tau, cols, extra, rng, n_sim)
    pred.cell_levels = set(frame["cell"].astype(str))
    fit_keys = ["cell", "spk"] + [f"f{j}" for j in range(len(factors))]
    fit_keys += [f"f{j}{x}" for j in range(len(factors)) for x in extra]
    pred.calibrate(_with_class_columns(frame.groupby(fit_keys, observed=True)["err"].agg(
        n="size", e="sum").reset_index()))

    # ---- model: marginal rates of a new speaker of each subgroup (or the trial-weighted
    # conditional rates of its own speakers), over the subgroup's mix of factor levels
    observed = speakers == "observed"
    keys = ["cell"] + [f"f{j}" for j in range(len(factors))] + (["spk"] if observed else [])
    # a new speaker's speaker × factor effects are integrated out with its own (sd_new)
    keys += [f"f{j}{x}" for j in range(len(factors)) for x in extra if observed or x != "s"]
    cells = frame.groupby(keys, observed=True).size().rename("n").reset_index()
    if not observed:
        cells["spk"] = "\x00new speaker"
        for j in range(len(factors) if factor_by_speaker else 0):
            cells[f"f{j}s"] = "\x00new speaker"
    cells = _with_class_columns(cells)
    n = cells["n"].to_numpy(float)
    is_pos = (cells["cls"] == "pos").to_numpy()
    gidx = np.array([levels.index(g) for g in cells["grp"]])
    G = len(levels)
    sd_row = pred.sd_new(is_pos) if not observed else np.zeros(len(cells))

    def rates(mu: np.ndarray) -> dict[str, np.ndarray]:
        e = mu * n[:, None]
        fn = np.stack([e[(gidx == k) & is_pos].sum(0) for k in range(G)])
        fa = np.stack([e[(gidx == k) & ~is_pos].sum(0) for k in range(G)])
        npos = np.array([n[(gidx == k) & is_pos].sum() for k in range(G)])[:, None]
        nneg = np.array([n[(gidx == k) & ~is_pos].sum() for k in range(G)])[:, None]
        return _measures(fn, npos, fa, nneg, e[is_pos].sum(0), n[is_pos].sum(), e[~is_pos].sum(0),
                         n[~is_pos].sum(), a, b)

    mu_hat, mu_sim = pred.cell_rates(cells, sd_row, point=point)
    point_ = rates(mu_hat[:, None])
    sim = rates(mu_sim)
    lo_q, hi_q = (1 - level) / 2, (1 + level) / 2

    # ---- empirical: counts per speaker and class, speaker bootstrap within subgroups
    emp_frame = pd.DataFrame({"spk": frame["spk"], "grp": grp, "pos": y, "err": err})
    per = emp_frame.groupby(["grp", "spk", "pos"]).agg(e=("err", "sum"), n=("err", "size")).unstack(
        "pos", fill_value=0)
    per.columns = [f"{c}_{'pos' if p else 'neg'}" for c, p in per.columns]
    for c in ("e_pos", "n_pos", "e_neg", "n_neg"):
        if c not in per.columns:
            per[c] = 0.0
    per = per.reset_index()
    pg = np.array([levels.index(g) for g in per["grp"]])
    M = per[["e_pos", "n_pos", "e_neg", "n_neg"]].to_numpy(float)
    W = np.zeros((len(per), n_boot + 1))
    W[:, 0] = 1.0
    for k in range(G):
        idx = np.where(pg == k)[0]
        if len(idx):
            draws = rng.integers(0, len(idx), size=(n_boot, len(idx)))
            for r in range(n_boot):
                W[idx, r + 1] = np.bincount(draws[r], minlength=len(idx))
    tot = np.einsum("sc,sr->rc", M, W)                          # (reps, 4) overall
    sub = np.stack([np.einsum("sc,sr->rc", M[pg == k], W[pg == k]) for k in range(G)])  # (G, reps, 4)
    emp = _measures(sub[..., 0], sub[..., 1], sub[..., 2], sub[..., 3],
                    tot[:, 0], tot[:, 1], tot[:, 2], tot[:, 3], a, b)

    rows = []
    for k, g in enumerate(levels):
        r: dict[str, Any] = {"subgroup": g, "n_speakers": int((pg == k).sum()),
                             "n_pos": int(M[pg == k, 1].sum()), "n_neg": int(M[pg == k, 3].sum()),
                             "n_errors": int(M[pg == k, 0].sum() + M[pg == k, 2].sum())}
        for m in MEASURES:
            r[f"{m}_model"] = float(point_[m][k, 0])
            r[f"{m}_model_lo"], r[f"{m}_model_hi"] = np.nanquantile(sim[m][k], [lo_q, hi_q])
            r[f"{m}_emp"] = float(emp[m][k, 0])
            r[f"{m}_emp_lo"], r[f"{m}_emp_hi"] = np.nanquantile(emp[m][k, 1:], [lo_q, hi_q])
        rows.append(r)
    table = pd.DataFrame(rows).set_index("subgroup")
    fnr_all, fpr_all, dcf_all = point_["_all"]
    efn, efp, edcf = emp["_all"]
    overall = {"fnr_model": float(fnr_all[0]), "fpr_model": float(fpr_all[0]),
               "dcf_model": float(dcf_all[0]), "fnr_emp": float(efn[0]), "fpr_emp": float(efp[0]),
               "dcf_emp": float(edcf[0])}
    return DecisionModelResult(table=table, overall=overall, threshold=tau, fit=fit,
                               settings=dict(groups=groups, factors=list(factors), level=level,
                                             n_sim=n_sim, n_boot=n_boot, formula=formula, speakers=speakers,
                                             point=point, pool_groups=pool_groups,
                                             factor_by_group=factor_by_group,
                                             factor_by_speaker=factor_by_speaker, **cost),
                                _predictor=pred)


def _decision_frame(trials: pd.DataFrame, tau: float, cols: dict[str, Any]
                    ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray]:
    """The model frame (``err``, ``cls``, ``cell`` = class|subgroup, ``spk``, ``isneg``,
    ``ispos``, ``f{j}`` per factor and ``f{j}g`` = factor level:subgroup), the positive
    mask, the error indicators and the subgroup labels."""
    y = binary_labels(trials[cols["label"]], cols["positive"]).astype(bool)
    s = trials[cols["score"]].to_numpy(float)
    err = np.where(y, s < tau, s >= tau).astype(float)
    grp = _joined(trials, cols["groups"])
    cls = np.where(y, "pos", "neg")
    frame = pd.DataFrame({"err": err, "cls": pd.Categorical(cls, categories=["neg", "pos"]),
                          "cell": pd.Categorical(np.char.add(np.char.add(cls, "|"), grp.astype(str))),
                          "spk": trials[cols["speaker"]].astype(str).to_numpy()}, index=trials.index)
    frame["isneg"] = (~y).astype(float)
    frame["ispos"] = y.astype(float)
    for j, f in enumerate(cols["factors"]):
        v = trials[f].astype(str).to_numpy()
        frame[f"f{j}"] = v
        frame[f"f{j}g"] = np.char.add(np.char.add(v.astype(str), ":"), grp.astype(str))
        frame[f"f{j}s"] = np.char.add(np.char.add(v.astype(str), ":"), frame["spk"].to_numpy().astype(str))
    return frame, y, err, grp


def _joined(trials: pd.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """The level combination of ``columns`` per row, ``"a:b"`` (vectorised)."""
    out = trials[columns[0]].astype(str).to_numpy().astype(str)
    for c in columns[1:]:
        out = np.char.add(np.char.add(out, ":"), trials[c].astype(str).to_numpy().astype(str))
    return out


def _with_class_columns(cells: pd.DataFrame) -> pd.DataFrame:
    """Add ``cls``, ``grp``, ``isneg``, ``ispos`` to a table of cells keyed by ``cell``."""
    cells = cells.copy()
    cls = cells["cell"].astype(str).str.split("|").str[0]
    cells["grp"] = cells["cell"].astype(str).str.split("|", n=1).str[1]
    cells["isneg"] = (cls == "neg").to_numpy(float)
    cells["ispos"] = 1.0 - cells["isneg"]
    cells["cls"] = pd.Categorical(cls, categories=["neg", "pos"])
    return cells


class _Predictor:
    """Cell rates of a fitted decision GLMM at the conditional modes and over joint draws
    of :math:`(u, \beta)` from the Laplace approximation (θ fixed), drawn once so that every
    table of cells uses the same draws."""

    def __init__(self, fit: Any, tau: float, cols: dict[str, Any], extra: list[str],
                 rng: np.random.Generator, n_sim: int) -> None:
        self.fit, self.tau, self.cols, self.extra = fit, tau, cols, extra
        self.beta = fit.fixef.to_numpy()
        self.q = len(fit.u)
        self.C = fit.joint_cov()                                # of (u, β) at the mode
        Lj = np.linalg.cholesky(self.C + 1e-12 * np.eye(len(self.C)))
        mean = np.concatenate([fit.u, self.beta])
        self.D = mean[:, None] + Lj @ rng.standard_normal((len(mean), n_sim))   # (q + p, draws)
        i_spk = [t.group for t in fit.spec.terms].index("spk")
        self.S_spk = fit.cov_re[i_spk]                          # (neg, pos) speaker covariance
        self.spk_levels = set(map(str, fit.spec.terms[i_spk].levels))
        self.cell_levels: set[str] = set()
        self.delta = np.zeros(len(self.beta))

    def calibrate(self, cells: pd.DataFrame) -> None:
        r"""The shift :math:`\Delta` of :math:`\hat\beta` that makes the fitted cells'
        conditional rates add up to their counted errors, :math:`X^\top(e - n\,
        \operatorname{logit}^{-1}(\hat\eta + X\Delta)) = 0` (``cells``: the fitted table's
        cells with ``n`` trials and ``e`` errors), by Newton's method.  This is the
        fixed-effect score equation at the joint mode (β given the conditional modes);
        the Laplace fit optimises β on the marginal criterion instead, whose subgroup
        totals are off by up to a few per cent of the counted rate."""
        from scipy.special import expit
        X, Zu = self._maps(cells)
        eta = X @ self.beta + Zu @ np.asarray(self.fit.u, float)
        n, e = cells["n"].to_numpy(float), cells["e"].to_numpy(float)
        d = np.zeros(X.shape[1])
        for _ in range(100):
            mu = expit(eta + X @ d)
            g = X.T @ (e - n * mu)
            H = X.T @ (X * (n * mu * (1 - mu))[:, None])
            step = np.clip(np.linalg.solve(H + 1e-12 * np.eye(len(d)), g), -2.0, 2.0)
            d = np.clip(d + step, -10.0, 10.0)
            if np.max(np.abs(step)) < 1e-10:
                break
        self.delta = d

    def sd_new(self, is_pos: np.ndarray) -> np.ndarray:
        """The SD of a new speaker's effect in each cell's class (its speaker × factor
        effects included where the model has them)."""
        var = np.where(is_pos, self.S_spk[1, 1], self.S_spk[0, 0])
        for t, S in zip(self.fit.spec.terms, self.fit.cov_re):
            if re.fullmatch(r"f\d+s", t.group):
                col = t.term_names[0]
                acts = is_pos if col == "ispos" else ~is_pos if col == "isneg" else np.ones_like(is_pos)
                var = var + np.where(acts, S[0, 0], 0.0)
        return np.sqrt(var)

    def _maps(self, cells: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        X = np.asarray(self.fit.spec.fixed_design(cells), float)
        design = self.fit.spec.random_design(cells)
        # the linear map u -> Z b(u) on the cells (b = Λ_θ u is linear in u); an unseen
        # level (code -1, e.g. a new speaker) contributes nothing
        Zu = np.zeros((len(cells), self.q))
        for j in range(self.q):
            e_j = np.zeros(self.q)
            e_j[j] = 1.0
            Zu[:, j] = _zb(design, self.fit.b_from_u(e_j))
        return X, Zu

    def cell_rates(self, cells: pd.DataFrame, sd_row: np.ndarray, *, point: str = "mode",
                   calibrated: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``(μ̂ per cell, μ per cell × draw)``; ``sd_row`` the SD of an unknown speaker
        effect integrated out in each cell (0 for a fitted speaker); ``calibrated``: β
        shifted by :meth:`calibrate`'s Δ (the draws too)."""
        X, Zu = self._maps(cells)
        shift = X @ self.delta if calibrated else 0.0
        eta_hat = X @ self.beta + Zu @ np.asarray(self.fit.u, float) + shift
        if point == "mean":
            # posterior mean of each cell's rate: η ~ N(η̂, a'Ca) under the Laplace
            # approximation, plus the new speaker's N(0, σ²) where asked
            Am = np.hstack([Zu, X])
            var_post = np.maximum(np.einsum("ij,jk,ik->i", Am, self.C, Am), 0.0)
            mu_hat = logit_normal_mean(eta_hat, np.sqrt(sd_row ** 2 + var_post))
        else:                                                   # plug-in at the mode
            mu_hat = logit_normal_mean(eta_hat, sd_row)
        eta = X @ self.D[self.q:] + Zu @ self.D[:self.q] + np.asarray(shift)[..., None]
        return mu_hat, logit_normal_mean(eta, sd_row[:, None])

    def rates(self, trials: pd.DataFrame, by: list[str], *, level: float, n_sim: int,
              rng: np.random.Generator, calibrate: bool = True) -> pd.DataFrame:
        c = self.cols
        need = [c["score"], c["label"], c["speaker"], *c["groups"], *c["factors"], *by]
        for col in need:
            if col not in trials.columns:
                raise SubgroupError(f"column {col!r} is not in the trials (columns: {list(trials.columns)})")
        frame, y, err, grp = _decision_frame(trials, self.tau, c)
        unknown = sorted(set(frame["cell"].astype(str)) - self.cell_levels)
        if unknown:
            raise SubgroupError(f"subgroup level(s) not in the fit: {unknown[:5]} (columns {c['groups']})")
        frame["by"] = _joined(trials, by)
        keys = ["by", "cell", "spk"] + [f"f{j}" for j in range(len(c["factors"]))]
        keys += [f"f{j}{x}" for j in range(len(c["factors"])) for x in self.extra]
        cells = frame.groupby(keys, observed=True)["err"].agg(["size", "sum"]).reset_index()
        cells = _with_class_columns(cells.rename(columns={"size": "n", "sum": "e"}))
        is_pos = (cells["cls"] == "pos").to_numpy()
        new = ~cells["spk"].isin(self.spk_levels).to_numpy()
        sd_row = np.where(new, self.sd_new(is_pos), 0.0)
        mu_hat, mu_sim = self.cell_rates(cells, sd_row, calibrated=calibrate)
        if n_sim < mu_sim.shape[1]:
            mu_sim = mu_sim[:, rng.choice(mu_sim.shape[1], n_sim, replace=False)]
        n = cells["n"].to_numpy(float)
        lo_q, hi_q = (1 - level) / 2, (1 + level) / 2
        rows = []
        for h, idx in cells.groupby("by").indices.items():
            r: dict[str, Any] = {"subgroup": h}
            for m, cls_mask in (("fnr", is_pos[idx]), ("fpr", ~is_pos[idx])):
                ii = idx[cls_mask]
                nn = n[ii].sum()
                r[f"n_{'pos' if m == 'fnr' else 'neg'}"] = int(nn)
                if nn == 0:
                    r.update({f"{m}_model": np.nan, f"{m}_model_lo": np.nan, f"{m}_model_hi": np.nan,
                              f"{m}_emp": np.nan})
                    continue
                r[f"{m}_model"] = float(n[ii] @ mu_hat[ii] / nn)
                draws = n[ii] @ mu_sim[ii] / nn
                r[f"{m}_model_lo"], r[f"{m}_model_hi"] = np.quantile(draws, [lo_q, hi_q])
                r[f"{m}_emp"] = float(cells["e"].to_numpy()[ii].sum() / nn)
                r["n_speakers"] = int(cells["spk"].iloc[idx].nunique())
            rows.append(r)
        return pd.DataFrame(rows).set_index("subgroup")


def _zb(design: list[tuple[np.ndarray, np.ndarray]], b: list[np.ndarray]) -> np.ndarray:
    n = len(design[0][0])
    out = np.zeros(n)
    for (codes, Xk), bk in zip(design, b):
        codes = np.asarray(codes)
        ok = codes >= 0
        out[ok] += np.sum(np.asarray(Xk, float)[ok] * bk[codes[ok]], axis=1)
    return out
