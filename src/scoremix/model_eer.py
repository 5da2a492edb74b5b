"""Model-based equal error rates (studies.md A.4).

If negative scores follow :math:`N(\\mu_0, \\sigma_0^2)` and positive scores
:math:`N(\\mu_1, \\sigma_1^2)` (accept when :math:`s \\ge \\tau`), the false negative and
false positive rates are :math:`\\Phi((\\tau-\\mu_1)/\\sigma_1)` and
:math:`\\Phi((\\mu_0-\\tau)/\\sigma_0)`.  They are equal at
:math:`\\tau^* = (\\mu_1\\sigma_0 + \\mu_0\\sigma_1)/(\\sigma_0+\\sigma_1)`, where

.. math::

    \\mathrm{EER} = \\Phi\\!\\left(-\\frac{\\mu_1-\\mu_0}{\\sigma_0+\\sigma_1}\\right)
    \\quad(\\text{tied } \\sigma:\\ \\Phi(-d/(2\\sigma))).

A fitted linear mixed model implies, for every trial, a Gaussian score distribution;
each class's score distribution is then the equal-weight *mixture* of its trials'
Gaussians, and :func:`model_eer` finds the EER of the two mixtures numerically
(:func:`mixture_eer`, Brent's method on :math:`\\mathrm{FNR}(\\tau)=\\mathrm{FPR}(\\tau)`).

Bayesian fits: :func:`model_eer` also accepts a
:class:`~scoremix.bayes.result.BayesLmerResult` and returns a :class:`PosteriorEER` (one
EER per posterior draw and subgroup, plus a summary with a credible interval).  Per draw the
class distributions are built exactly as for an ``LmerResult`` (mixtures of the per-trial
Gaussians, from the draw's β, random effects and residual SDs, obtained through the result's
public :meth:`~scoremix.bayes.result.BayesLmerResult.class_moments`); ``method="moments"``
instead uses one moment-matched Gaussian per class and draw (the result's own
:meth:`~scoremix.bayes.result.BayesLmerResult.model_eer`), which is faster on huge tables.
:func:`model_eer_from_moments` is :func:`gaussian_eer` vectorised over any broadcastable
arrays of draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy.optimize import brentq
from scipy.special import ndtr

__all__ = [
    "ModelEERError",
    "gaussian_eer",
    "model_eer_from_moments",
    "mixture_eer",
    "trial_moments",
    "model_eer",
    "PosteriorEER",
]


class ModelEERError(ValueError):
    """Invalid input to a model-based EER computation (names the offending item)."""


def gaussian_eer(mu_neg: Any, mu_pos: Any, sd_neg: Any, sd_pos: Any) -> np.ndarray | float:
    """EER of two Gaussian classes: :math:`\\Phi(-(\\mu_1-\\mu_0)/(\\sigma_0+\\sigma_1))`.

    Parameters
    ----------
    mu_neg, mu_pos:
        class means :math:`\\mu_0` (negative) and :math:`\\mu_1` (positive).
    sd_neg, sd_pos:
        class standard deviations :math:`\\sigma_0, \\sigma_1 > 0`.

    All arguments broadcast against each other (numpy rules).

    Returns
    -------
    float or numpy.ndarray
        EER as a fraction; a Python float when every input is a scalar.  When
        :math:`\\mu_1 < \\mu_0` the value exceeds 0.5 (the detector is inverted).
    """
    m0, m1, s0, s1 = np.broadcast_arrays(
        *(np.asarray(v, dtype=np.float64) for v in (mu_neg, mu_pos, sd_neg, sd_pos))
    )
    bad = ~((s0 > 0) & (s1 > 0) & np.isfinite(s0) & np.isfinite(s1))
    if bad.any():
        idx = np.argwhere(bad)[0].tolist()
        raise ModelEERError(
            f"standard deviations must be positive and finite; got sd_neg={float(s0[tuple(idx)])!r}, "
            f"sd_pos={float(s1[tuple(idx)])!r}" + (f" at index {idx}" if idx else "")
        )
    out = ndtr(-(m1 - m0) / (s0 + s1))
    return float(out) if out.ndim == 0 else out


def model_eer_from_moments(mu_neg: Any, mu_pos: Any, sd_neg: Any, sd_pos: Any) -> np.ndarray | float:
    """Model-based EER from class moments, vectorised over draws (for Bayesian fits).

    Identical to :func:`gaussian_eer`; provided under this name as the hook for posterior
    summaries: pass arrays of draws of :math:`(\\mu_0, \\mu_1, \\sigma_0, \\sigma_1)` (any
    broadcastable shapes, e.g. ``(n_draws,)`` or ``(n_draws, n_groups)``) and get
    :math:`\\Phi(-(\\mu_1-\\mu_0)/(\\sigma_0+\\sigma_1))` per draw.
    """
    return gaussian_eer(mu_neg, mu_pos, sd_neg, sd_pos)


def _check_components(mean: Any, sd: Any, weight: Any, what: str) -> tuple[np.ndarray, ...]:
    m = np.atleast_1d(np.asarray(mean, dtype=np.float64)).ravel()
    s = np.broadcast_to(np.asarray(sd, dtype=np.float64), m.shape).astype(np.float64)
    if m.size == 0:
        raise ModelEERError(f"the {what} class has no mixture components (no trials)")
    if weight is None:
        w = np.full(m.shape, 1.0 / m.size)
    else:
        w = np.broadcast_to(np.asarray(weight, dtype=np.float64), m.shape).astype(np.float64)
        if (w < 0).any() or not w.sum() > 0:
            raise ModelEERError(f"{what} weights must be non-negative with a positive sum")
        w = w / w.sum()
    if not np.isfinite(m).all():
        raise ModelEERError(f"{what} component means contain NaN/inf "
                            f"(first at {int(np.flatnonzero(~np.isfinite(m))[0])})")
    if not ((s > 0) & np.isfinite(s)).all():
        i = int(np.flatnonzero(~((s > 0) & np.isfinite(s)))[0])
        raise ModelEERError(f"{what} component SDs must be positive and finite; component {i} has {float(s[i])!r}")
    return m, s, w


def mixture_eer(
    mean_neg: Any,
    sd_neg: Any,
    mean_pos: Any,
    sd_pos: Any,
    weight_neg: Any = None,
    weight_pos: Any = None,
    return_threshold: bool = False,
) -> float | tuple[float, float]:
    """EER of two Gaussian mixtures, solved with Brent's method.

    Negative scores follow :math:`\\sum_j a_j N(m_j, s_j^2)`, positive scores
    :math:`\\sum_i b_i N(m_i, s_i^2)` (equal weights by default).  With
    :math:`\\mathrm{FNR}(\\tau) = \\sum_i b_i\\Phi((\\tau-m_i)/s_i)` (increasing) and
    :math:`\\mathrm{FPR}(\\tau) = \\sum_j a_j\\Phi((m_j-\\tau)/s_j)` (decreasing) the
    root :math:`\\tau^*` of :math:`\\mathrm{FNR}-\\mathrm{FPR}` is unique and
    :math:`\\mathrm{EER} = \\mathrm{FNR}(\\tau^*)`.  With one component per class this
    equals :func:`gaussian_eer` (which is then used directly).

    Returns
    -------
    float, or ``(eer, threshold)`` with ``return_threshold=True``.
    """
    m0, s0, a = _check_components(mean_neg, sd_neg, weight_neg, "negative")
    m1, s1, b = _check_components(mean_pos, sd_pos, weight_pos, "positive")

    def fnr(t: float) -> float:
        return float(np.dot(b, ndtr((t - m1) / s1)))

    def fpr(t: float) -> float:
        return float(np.dot(a, ndtr((m0 - t) / s0)))

    if m0.size == 1 and m1.size == 1:
        e = float(ndtr(-(m1[0] - m0[0]) / (s0[0] + s1[0])))
        tau = float((m1[0] * s0[0] + m0[0] * s1[0]) / (s0[0] + s1[0]))
        return (e, tau) if return_threshold else e
    smax = max(float(s0.max()), float(s1.max()))
    lo = min(float(m0.min()), float(m1.min())) - 40.0 * smax
    hi = max(float(m0.max()), float(m1.max())) + 40.0 * smax
    tau = float(brentq(lambda t: fnr(t) - fpr(t), lo, hi, xtol=1e-12 * max(1.0, hi - lo), rtol=1e-14))
    e = 0.5 * (fnr(tau) + fpr(tau))
    return (e, tau) if return_threshold else e


# ---------------------------------------------------------------------------------------
# LmerResult → per-trial Gaussian moments
# ---------------------------------------------------------------------------------------
def _is_null(v: Any) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA


def _term_covariance(varcorr: pd.DataFrame, group: str, term_names: Sequence[str]) -> np.ndarray:
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


def _residual_sd(fit: Any, spec: Any) -> np.ndarray:
    n = spec.n
    sigma_by = getattr(fit, "sigma_by", None)
    if sigma_by is not None and len(sigma_by) > 0:
        codes = getattr(spec, "dispersion_codes", None)
        levels = getattr(spec, "dispersion_levels", None)
        if codes is None or levels is None:
            raise ModelEERError("fit.sigma_by is set but fit.spec has no dispersion_codes/levels")
        by_str = {str(k): float(v) for k, v in sigma_by.items()}  # dict or Series
        missing = [lv for lv in levels if str(lv) not in by_str]
        if missing:
            raise ModelEERError(f"fit.sigma_by has no residual SD for dispersion level(s) {missing}")
        sd = np.array([by_str[str(lv)] for lv in levels])[np.asarray(codes)]
    else:
        sd = np.full(n, float(fit.sigma))
    weights = getattr(spec, "weights", None)
    if weights is not None:
        sd = sd / np.sqrt(np.asarray(weights, dtype=np.float64))
    return sd


def _frame(fit: Any, data: pd.DataFrame | None, needed: Sequence[str]) -> pd.DataFrame:
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
    return pd.concat([frame, extra], axis=1)


def trial_moments(
    fit: Any,
    conditional: bool = True,
    label: str = "label",
    positive: Any = None,
    data: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per-trial Gaussian score distribution implied by a fitted linear mixed model.

    For trial :math:`i` with fixed-effects row :math:`x_i` and random-term design rows
    :math:`z_{ik}`:

    * conditional (observed speakers/attacks):
      :math:`s_i \\sim N(x_i^\\top\\hat\\beta + \\sum_k z_{ik}^\\top\\hat b_{k,g_k(i)},\\ \\sigma_{c(i)}^2)`;
    * marginal (new levels of every grouping factor):
      :math:`s_i \\sim N(x_i^\\top\\hat\\beta,\\ \\sigma_{c(i)}^2 + \\sum_k z_{ik}^\\top\\hat\\Sigma_k z_{ik})`,

    where :math:`\\sigma_{c(i)}` is the residual SD of the trial's dispersion level
    (``fit.sigma_by``) or ``fit.sigma`` (divided by :math:`\\sqrt{w_i}` under prior weights)
    and :math:`\\hat\\Sigma_k` the term's covariance from ``fit.varcorr``.

    Parameters
    ----------
    fit:
        an ``LmerResult`` (needs ``spec``, ``predict``, ``sigma``, ``sigma_by``, ``varcorr``).
    conditional:
        conditional on the fitted random effects (True) or marginal (False).
    label:
        class column of ``fit.spec.data`` (or of ``data``).
    positive:
        the positive label value, passed to :func:`scoremix.trials.label_to_binary`.
    data:
        the data frame the model was fitted on; needed only when ``label`` is not a
        column of the model frame (which holds just the formula's variables); rows are
        matched by index label.

    Returns
    -------
    pandas.DataFrame
        index = model-frame index; columns ``y`` (0/1), ``score`` (observed response),
        ``mean``, ``sd``.
    """
    from scoremix.trials import label_to_binary

    spec = fit.spec
    data = _frame(fit, data, [label])
    y = np.asarray(label_to_binary(data[label], positive=positive), dtype=np.int8)
    # predict() without newdata: the model frame's own rows (no re-encoding)
    mean = np.asarray(fit.predict(None, re_form=None if conditional else "~0"), dtype=np.float64)
    var = _residual_sd(fit, spec) ** 2
    if not conditional:
        for term in spec.terms:
            cov = _term_covariance(fit.varcorr, term.group, term.term_names)
            Z = np.asarray(term.X, dtype=np.float64)
            var = var + np.einsum("ij,jk,ik->i", Z, cov, Z)
    return pd.DataFrame(
        {"y": y, "score": np.asarray(spec.y, dtype=np.float64), "mean": mean, "sd": np.sqrt(var)},
        index=data.index,
    )


def _eer_of_rows(mom: pd.DataFrame) -> float:
    neg = mom[mom["y"] == 0]
    pos = mom[mom["y"] == 1]
    if neg.empty or pos.empty:
        return float("nan")
    return float(mixture_eer(neg["mean"].to_numpy(), neg["sd"].to_numpy(),
                             pos["mean"].to_numpy(), pos["sd"].to_numpy()))


# ---------------------------------------------------------------------------------------
# BayesLmerResult → posterior distribution of the model-based EER
# ---------------------------------------------------------------------------------------
def _is_bayes_fit(fit: Any) -> bool:
    """Duck-typed check for a :class:`~scoremix.bayes.result.BayesLmerResult`."""
    return callable(getattr(fit, "class_moments", None)) and callable(getattr(fit, "draws", None))


@dataclass
class PosteriorEER:
    """Posterior distribution of the model-based EER of a Bayesian fit.

    Attributes
    ----------
    draws:
        long table: the ``by`` columns (if any), ``draw`` (chain-major flat index of the
        posterior draw) and ``eer`` (the model-based EER of that draw).
    summary:
        one row per subgroup (index = the ``by`` columns; a single row labelled ``"all"``
        when ``by`` is None): ``n_neg``, ``n_pos``, ``eer_model`` (posterior mean),
        ``eer_sd``, ``eer_median``, the HDI bounds ``hdi_<lo>%`` / ``hdi_<hi>%`` (highest
        density interval of probability ``hdi_prob``) and ``eer_empirical``
        (:func:`scoremix.metrics.eer` of the observed scores).
    hdi_prob:
        probability of the credible interval.
    method:
        ``"mixture"`` or ``"moments"`` (see :func:`model_eer`).
    conditional:
        whether the random effects were conditioned on.
    """

    draws: pd.DataFrame
    summary: pd.DataFrame
    hdi_prob: float
    method: str
    conditional: bool

    @property
    def interval_columns(self) -> tuple[str, str]:
        """Names of the lower and upper HDI columns of :attr:`summary`."""
        return _hdi_names(self.hdi_prob)

    def __repr__(self) -> str:
        n = self.draws["draw"].nunique()
        return (f"PosteriorEER(method={self.method!r}, conditional={self.conditional}, draws={n}, "
                f"hdi_prob={self.hdi_prob})\n{self.summary!r}")


def _hdi_names(hdi_prob: float) -> tuple[str, str]:
    lo = (1 - hdi_prob) / 2 * 100
    return f"hdi_{lo:g}%", f"hdi_{100 - lo:g}%"


def _design_cells(spec: Any, conditional: bool) -> np.ndarray:
    """Cell id of every fitted row: rows with the same fixed-effects row, random-term design
    (and levels, when conditional), dispersion level and weight share one Gaussian."""
    cols = [np.asarray(spec.X, dtype=np.float64)]
    for term in spec.terms:
        cols.append(np.asarray(term.X, dtype=np.float64))
        if conditional:
            cols.append(np.asarray(term.codes, dtype=np.float64)[:, None])
    if getattr(spec, "dispersion_codes", None) is not None:
        cols.append(np.asarray(spec.dispersion_codes, dtype=np.float64)[:, None])
    if getattr(spec, "weights", None) is not None:
        cols.append(np.asarray(spec.weights, dtype=np.float64)[:, None])
    _, inv = np.unique(np.column_stack(cols), axis=0, return_inverse=True)
    return np.asarray(inv).ravel()


def _bayes_model_eer(
    fit: Any,
    by: Any,
    conditional: bool,
    label: str,
    positive: Any,
    data: pd.DataFrame | None,
    method: str,
    hdi_prob: float,
    max_draws: int | None,
    progress: bool,
) -> PosteriorEER:
    from scoremix.metrics import eer
    from scoremix.trials import label_to_binary

    if method not in ("mixture", "moments"):
        raise ModelEERError(f"method must be 'mixture' or 'moments', got {method!r}")
    if not 0 < hdi_prob < 1:
        raise ModelEERError(f"hdi_prob must lie in (0, 1), got {hdi_prob!r}")
    spec = fit.spec
    if getattr(spec.data, "index", None) is not None and spec.data.index.has_duplicates:
        raise ModelEERError("the fitted model frame has duplicate index labels; refit on a frame "
                            "with a unique index (e.g. df.reset_index(drop=True))")
    # the fitted rows with the class, by columns and the observed response
    if by is None:
        names: list[str] = []
        frame = _frame(fit, data, [label])
    elif isinstance(by, str) or (isinstance(by, (list, tuple)) and all(isinstance(b, str) for b in by)):
        names = [by] if isinstance(by, str) else list(by)
        frame = _frame(fit, data, [label, *names])
    else:
        arr = np.asarray(by)
        frame = _frame(fit, data, [label])
        if arr.shape[0] != len(frame):
            raise ModelEERError(f"by has {arr.shape[0]} values but the model frame has {len(frame)} rows")
        names = [getattr(by, "name", None) or "group"]
        frame = frame.assign(**{names[0]: arr})
    y = np.asarray(label_to_binary(frame[label], positive=positive), dtype=np.int8)
    frame = frame.assign(**{spec.response: np.asarray(spec.y, dtype=np.float64), "_y01": y})
    random = "conditional" if conditional else "marginal"

    if method == "moments":
        long = fit.model_eer(groups=names or None, data=frame, label="_y01", positive=1,
                             random=random, max_draws=max_draws)
        long = long[[*names, "draw", "eer"]].reset_index(drop=True)
    else:
        frame = frame.assign(_cell=_design_cells(spec, conditional))
        mom = fit.class_moments(groups=[*names, "_cell"], data=frame, label="_y01", positive=1,
                                random=random, max_draws=max_draws)
        parts = []
        by_groups = mom.groupby(names, sort=True) if names else [((), mom)]
        n_groups = mom.groupby(names).ngroups if names else 1
        try:
            from tqdm.auto import tqdm
        except ImportError:  # pragma: no cover
            progress = False
        bar = tqdm(total=n_groups * int(mom["draw"].nunique()), desc="posterior mixture EER",
                   disable=not progress, leave=False) if progress else None
        for key, g in by_groups:
            g = g.sort_values(["draw", "class", "_cell"])
            draws = np.unique(g["draw"].to_numpy())
            if g["class"].nunique() < 2:
                e = np.full(draws.size, np.nan)
            else:
                neg = g[g["class"] == 0]
                pos = g[g["class"] == 1]
                k0, k1 = len(neg) // draws.size, len(pos) // draws.size
                m0 = neg["mean"].to_numpy().reshape(draws.size, k0)
                s0 = neg["sd"].to_numpy().reshape(draws.size, k0)
                w0 = neg["n"].to_numpy().reshape(draws.size, k0)[0]
                m1 = pos["mean"].to_numpy().reshape(draws.size, k1)
                s1 = pos["sd"].to_numpy().reshape(draws.size, k1)
                w1 = pos["n"].to_numpy().reshape(draws.size, k1)[0]
                e = np.empty(draws.size)
                for j in range(draws.size):
                    e[j] = mixture_eer(m0[j], s0[j], m1[j], s1[j], w0, w1)
                    if bar is not None:
                        bar.update(1)
            key = key if isinstance(key, tuple) else (key,)
            part = pd.DataFrame({**{n: [k] * draws.size for n, k in zip(names, key)},
                                 "draw": draws, "eer": e})
            parts.append(part)
        if bar is not None:
            bar.close()
        long = pd.concat(parts, ignore_index=True)

    # summary per subgroup
    import arviz as az

    lo, hi = _hdi_names(hdi_prob)
    rows = []
    groups = frame.groupby(names, sort=True) if names else [((), frame)]
    draws_by = dict(iter(long.groupby(names, sort=True))) if names else {(): long}
    for key, g in groups:
        e = draws_by.get(key)
        ev = np.asarray(e["eer"], dtype=np.float64) if e is not None else np.array([np.nan])
        yy = g["_y01"].to_numpy()
        n_pos = int(yy.sum())
        n_neg = int(yy.size - n_pos)
        emp = (float(eer(g[spec.response].to_numpy(), yy)) if n_pos and n_neg else float("nan"))
        if np.isfinite(ev).all() and ev.size > 1:
            h = np.asarray(az.hdi(ev, hdi_prob=hdi_prob)).ravel()
            stats = (float(ev.mean()), float(ev.std(ddof=1)), float(np.median(ev)), float(h[0]), float(h[1]))
        else:
            stats = (float(np.mean(ev)),) + (float("nan"),) * 4
        key = key if isinstance(key, tuple) else (key,)
        rows.append((*key, n_neg, n_pos, *stats, emp))
    summary = pd.DataFrame(rows, columns=[*names, "n_neg", "n_pos", "eer_model", "eer_sd", "eer_median",
                                          lo, hi, "eer_empirical"])
    summary = summary.set_index(names) if names else summary.set_axis(["all"])
    return PosteriorEER(draws=long, summary=summary, hdi_prob=hdi_prob, method=method,
                        conditional=conditional)


def model_eer(
    fit: Any,
    by: str | Sequence[str] | Any | None = None,
    conditional: bool = True,
    label: str = "label",
    positive: Any = None,
    data: pd.DataFrame | None = None,
    *,
    method: str = "mixture",
    hdi_prob: float = 0.94,
    max_draws: int | None = None,
    progress: bool = True,
) -> float | pd.DataFrame | PosteriorEER:
    """EER implied by a fitted linear mixed model, overall or per subgroup.

    Each class's score distribution is the equal-weight mixture over that class's trials
    of the per-trial Gaussians of :func:`trial_moments`; the EER of the two mixtures is
    found by :func:`mixture_eer`.  For a single Gaussian per class this is the closed form
    :math:`\\Phi(-(\\mu_1-\\mu_0)/(\\sigma_0+\\sigma_1))`.

    For a :class:`~scoremix.bayes.result.BayesLmerResult` the same is done for every
    posterior draw ``d`` (β, random effects and residual SDs of that draw) and the result is
    the posterior distribution of the EER, a :class:`PosteriorEER`.

    Parameters
    ----------
    fit:
        an ``LmerResult`` or a ``BayesLmerResult``; a fit on Dask input
        (:class:`scoremix.distributed.fit.DaskLmerResult`) is evaluated on the cluster from
        merged counts of the distinct per-trial Gaussians (no row is collected).
    by:
        ``None`` (one EER), a column name or list of names of ``fit.spec.data``, or an
        array/Series aligned with the model frame's rows: one EER per subgroup.
    conditional:
        use the fitted random effects (observed levels) or the marginal distribution
        (new levels: random-effect variances added).
    label, positive:
        class column and positive value (see :func:`trial_moments`).
    data:
        the fitted data frame, for ``label``/``by`` columns that are not in the model
        frame (matched by index label).
    method:
        Bayesian fits only. ``"mixture"`` (default): per draw, the exact EER of the two
        class mixtures of per-trial Gaussians (trials with identical design rows are
        merged into one weighted component), as for an ``LmerResult``; ``"moments"``: per
        draw one Gaussian per class with the mixture's mean and variance (the result's own
        ``model_eer``; faster, approximate when the trials' means differ a lot).
    hdi_prob:
        Bayesian fits only: probability of the highest-density credible interval.
    max_draws:
        Bayesian fits only: use at most this many posterior draws (evenly spaced); None
        uses all of them.
    progress:
        Bayesian fits only: show a progress bar over draws (``method="mixture"``).

    Returns
    -------
    float, pandas.DataFrame or PosteriorEER
        ``LmerResult`` without ``by``: the EER.  With ``by``: index = subgroup, columns
        ``n_neg``, ``n_pos``, ``eer_model``, ``eer_empirical``
        (:func:`scoremix.metrics.eer` of the observed scores); NaN where a subgroup lacks
        a class.  ``BayesLmerResult``: a :class:`PosteriorEER` (``.draws`` and
        ``.summary``, the latter with the same columns plus ``eer_sd``, ``eer_median`` and
        the HDI bounds; ``eer_model`` is the posterior mean).
    """
    from scoremix.metrics import eer

    if not (_is_bayes_fit(fit) or hasattr(fit, "spec")):
        raise ModelEERError(f"model_eer needs a fitted model (the LmerResult of scoremix.lmer or the "
                            f"BayesLmerResult of scoremix.bayes_lmer), got {type(fit).__name__} {fit!r:.60}")
    dask_eer = getattr(fit, "dask_model_eer", None)
    if callable(dask_eer):  # a fit on Dask rows: merged per-partition cells, no rows collected
        if by is not None and not (isinstance(by, str) or (isinstance(by, (list, tuple))
                                                          and all(isinstance(b, str) for b in by))):
            raise ModelEERError("for a Dask fit, by must name column(s) of the data")
        return dask_eer(by=by, conditional=conditional, label=label, positive=positive)
    if _is_bayes_fit(fit):
        return _bayes_model_eer(fit, by, conditional, label, positive, data, method, hdi_prob,
                                max_draws, progress)
    mom = trial_moments(fit, conditional=conditional, label=label, positive=positive, data=data)
    if by is None:
        return _eer_of_rows(mom)
    if isinstance(by, str) or (isinstance(by, (list, tuple)) and all(isinstance(b, str) for b in by)):
        cols = [by] if isinstance(by, str) else list(by)
        frame = _frame(fit, data, cols)
        keys = [frame[c].to_numpy() for c in cols]
        names = cols
    else:
        arr = np.asarray(by)
        if arr.shape[0] != len(mom):
            raise ModelEERError(f"by has {arr.shape[0]} values but the model frame has {len(mom)} rows")
        keys = [arr]
        names = [getattr(by, "name", None) or "group"]
    grouped = mom.groupby(keys, sort=True, dropna=False)
    rows = []
    for key, g in grouped:
        n_pos = int(g["y"].sum())
        n_neg = int(len(g) - n_pos)
        emp = float(eer(g["score"].to_numpy(), g["y"].to_numpy())) if n_pos and n_neg else float("nan")
        rows.append((*(key if isinstance(key, tuple) else (key,)), n_neg, n_pos, _eer_of_rows(g), emp))
    out = pd.DataFrame(rows, columns=[*names, "n_neg", "n_pos", "eer_model", "eer_empirical"])
    return out.set_index(names)
