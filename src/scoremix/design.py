"""Interventional evaluation designs (studies.md A.1).

An intervention (MP3 coding, additive noise, loudness normalisation, …) is applied with a
class- and subset-specific probability ρ to the four subsets train-negative,
train-positive, test-negative, test-positive.  For test trial :math:`i` with intervention
indicator (or probability) :math:`t_i` the regressors are

.. math::

    \\Delta_i^{pos} = |t_i - \\rho_{train,pos}|,\\qquad
    \\Delta_i^{neg} = |t_i - \\rho_{train,neg}|,

(0 = treated like that class's training data, 1 = treated differently) and the score model
is :math:`s_i = \\mu + d\\,y_i + \\beta^{pos}\\Delta_i^{pos} + \\beta^{neg}\\Delta_i^{neg} + \\varepsilon_i`.

:func:`class_mean_difference` derives the class-mean difference of any configuration
from these definitions; :func:`partial_bias_grid` maps empirical and model-based EERs
over a grid of test-side intervention probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from scoremix._deprecate import renamed_kwargs
from scoremix.predictive.mixture import mixture_eer

__all__ = [
    "DesignError",
    "Configuration",
    "CONFIGURATIONS",
    "get_configuration",
    "delta_covariates",
    "delta_covariates_for",
    "expected_deltas",
    "class_means",
    "class_mean_difference",
    "zscore_by",
    "partial_bias_grid",
]


class DesignError(ValueError):
    """Invalid interventional-design input (names the configuration, column or group)."""


@dataclass(frozen=True)
class Configuration:
    """Intervention probabilities of the four subsets of one design.

    Attributes
    ----------
    name:
        short name (``"IT_p"``).
    tr_n, tr_p, te_n, te_p:
        probability that a train-negative, train-positive, test-negative, test-positive
        trial is intervened; the corner configurations use bits 0/1.
    description:
        one-line meaning.
    """

    name: str
    tr_n: float
    tr_p: float
    te_n: float
    te_p: float
    description: str = ""

    def __post_init__(self) -> None:
        for field_name in ("tr_n", "tr_p", "te_n", "te_p"):
            v = getattr(self, field_name)
            if not (0.0 <= float(v) <= 1.0):
                raise DesignError(f"configuration {self.name!r}: {field_name}={v!r} is not in [0, 1]")

    @property
    def bits(self) -> tuple[float, float, float, float]:
        """``(tr_n, tr_p, te_n, te_p)``."""
        return (self.tr_n, self.tr_p, self.te_n, self.te_p)


CONFIGURATIONS: dict[str, Configuration] = {
    c.name: c
    for c in (
        Configuration("O", 0, 0, 0, 0, "original"),
        Configuration("I", 1, 1, 1, 1, "everything intervened"),
        Configuration("M_tr", 1, 1, 0, 0, "domain mismatch, train side"),
        Configuration("M_te", 0, 0, 1, 1, "domain mismatch, test side"),
        Configuration("IT_p", 0, 1, 0, 1, "intensified: positive class in train and test"),
        Configuration("IT_n", 1, 0, 1, 0, "intensified: negative class in train and test"),
        Configuration("IV_pn", 0, 1, 1, 0, "inverted: positive in train, negative in test"),
        Configuration("IV_np", 1, 0, 0, 1, "inverted: negative in train, positive in test"),
        Configuration("O_n", 0, 0, 1, 0, "original training, negative test class intervened"),
        Configuration("O_p", 0, 0, 0, 1, "original training, positive test class intervened"),
    )
}


def get_configuration(config: str | Configuration) -> Configuration:
    """Look a configuration up by name (or pass a :class:`Configuration` through)."""
    if isinstance(config, Configuration):
        return config
    try:
        return CONFIGURATIONS[config]
    except (KeyError, TypeError):
        raise DesignError(
            f"unknown configuration {config!r}; known: {', '.join(CONFIGURATIONS)}"
        ) from None


def _binary_labels(labels: Any, positive: Any = None) -> np.ndarray:
    from scoremix.trials import label_to_binary

    return np.asarray(label_to_binary(labels, positive=positive), dtype=np.int8)


# ---------------------------------------------------------------------------------------
# Δ covariates
# ---------------------------------------------------------------------------------------
def delta_covariates(test_intervened: Any, rho_train_neg: Any, rho_train_pos: Any) -> pd.DataFrame:
    """Δ regressors :math:`\\Delta^{pos} = |t-\\rho_{train,pos}|`, :math:`\\Delta^{neg} = |t-\\rho_{train,neg}|`.

    Parameters
    ----------
    test_intervened:
        ``t`` per test trial: 0/1 indicator or a probability in [0, 1].
    rho_train_neg, rho_train_pos:
        training-side intervention probabilities (scalars or arrays broadcastable to ``t``).

    Returns
    -------
    pandas.DataFrame
        columns ``delta_pos``, ``delta_neg`` (index of ``t`` when it is a Series).
    """
    index = test_intervened.index if isinstance(test_intervened, pd.Series) else None
    t = np.asarray(test_intervened, dtype=np.float64)
    if t.ndim != 1:
        raise DesignError(f"test_intervened must be 1-D, got shape {t.shape}")
    for name, arr in (("test_intervened", t),
                      ("rho_train_neg", np.asarray(rho_train_neg, dtype=np.float64)),
                      ("rho_train_pos", np.asarray(rho_train_pos, dtype=np.float64))):
        bad = ~((arr >= 0) & (arr <= 1))
        if np.any(bad):
            first = np.flatnonzero(np.atleast_1d(bad))[:5].tolist()
            raise DesignError(f"{name} must lie in [0, 1]; {int(np.sum(bad))} value(s) do not "
                              f"(first positions: {first})")
    return pd.DataFrame(
        {
            "delta_pos": np.abs(t - np.asarray(rho_train_pos, dtype=np.float64)),
            "delta_neg": np.abs(t - np.asarray(rho_train_neg, dtype=np.float64)),
        },
        index=index,
    )


def delta_covariates_for(
    config: str | Configuration,
    labels: Any,
    intervened: Any = None,
    positive: Any = None,
) -> pd.DataFrame:
    """Δ regressors of the test trials of one configuration.

    ``t_i`` is ``intervened`` when given (the realised indicator), else the
    configuration's test probability of the trial's class (``te_p`` for positives,
    ``te_n`` for negatives: the indicator itself for a corner configuration);
    :math:`\\rho_{train}` are the configuration's ``tr_n``/``tr_p``.
    """
    cfg = get_configuration(config)
    y = _binary_labels(labels, positive)
    if intervened is None:
        t = np.where(y == 1, float(cfg.te_p), float(cfg.te_n))
    else:
        t = np.asarray(intervened, dtype=np.float64)
        if t.shape != y.shape:
            raise DesignError(f"intervened has {t.shape[0]} values but labels has {y.shape[0]}")
    out = delta_covariates(t, cfg.tr_n, cfg.tr_p)
    if isinstance(labels, pd.Series):
        out.index = labels.index
    return out


def expected_deltas(config: str | Configuration) -> pd.DataFrame:
    """Expected Δ per test class of a configuration.

    With :math:`t \\sim \\mathrm{Bernoulli}(\\rho_{te,c})` for class ``c`` and a training
    probability :math:`r`, :math:`E|t - r| = \\rho_{te,c}(1-r) + (1-\\rho_{te,c})\\,r`
    (= :math:`|\\rho_{te,c} - r|` for corner bits).

    Returns
    -------
    pandas.DataFrame
        index ``["neg", "pos"]`` (test class), columns ``delta_pos``, ``delta_neg``.
    """
    cfg = get_configuration(config)

    def e_abs(p: float, r: float) -> float:
        return float(p) * (1.0 - float(r)) + (1.0 - float(p)) * float(r)

    return pd.DataFrame(
        {
            "delta_pos": [e_abs(cfg.te_n, cfg.tr_p), e_abs(cfg.te_p, cfg.tr_p)],
            "delta_neg": [e_abs(cfg.te_n, cfg.tr_n), e_abs(cfg.te_p, cfg.tr_n)],
        },
        index=pd.Index(["neg", "pos"], name="test_class"),
    )


_COEF_KEYS = ("mu", "d", "beta_pos", "beta_neg")


def _coefficients(fit: Any, names: Mapping[str, str] | None = None) -> dict[str, float]:
    """Read μ, d, β^pos, β^neg from a mapping, an object, or an LmerResult + ``names``."""
    if names is not None:
        missing = [k for k in _COEF_KEYS if k not in names]
        if missing:
            raise DesignError(f"names= must map each of {_COEF_KEYS}; missing {missing}")
        source = fit.fixef if hasattr(fit, "fixef") else fit
        out = {}
        for k in _COEF_KEYS:
            try:
                out[k] = float(source[names[k]])
            except KeyError:
                avail = list(source.index) if hasattr(source, "index") else list(source)
                raise DesignError(f"coefficient {names[k]!r} (for {k}) not found; available: {avail}") from None
        return out
    if isinstance(fit, Mapping):
        missing = [k for k in _COEF_KEYS if k not in fit]
        if missing:
            raise DesignError(f"fit mapping lacks {missing} (needs {_COEF_KEYS})")
        return {k: float(fit[k]) for k in _COEF_KEYS}
    missing = [k for k in _COEF_KEYS if not hasattr(fit, k)]
    if missing:
        raise DesignError(
            f"fit object lacks attribute(s) {missing}; for an LmerResult pass names={{'mu': "
            "'(Intercept)', 'd': ..., 'beta_pos': ..., 'beta_neg': ...}}"
        )
    return {k: float(getattr(fit, k)) for k in _COEF_KEYS}


def class_means(
    config: str | Configuration, fit: Any, names: Mapping[str, str] | None = None
) -> tuple[float, float]:
    """Model class means ``(mean_neg, mean_pos)`` of the test trials of a configuration.

    :math:`E[s\\mid y] = \\mu + d\\,y + \\beta^{pos}E[\\Delta^{pos}\\mid y] + \\beta^{neg}E[\\Delta^{neg}\\mid y]`
    with the expectations of :func:`expected_deltas`.
    """
    c = _coefficients(fit, names)
    ed = expected_deltas(config)
    means = []
    for cls, y in (("neg", 0.0), ("pos", 1.0)):
        means.append(c["mu"] + c["d"] * y + c["beta_pos"] * ed.loc[cls, "delta_pos"]
                     + c["beta_neg"] * ed.loc[cls, "delta_neg"])
    return float(means[0]), float(means[1])


def class_mean_difference(
    config: str | Configuration, fit: Any, names: Mapping[str, str] | None = None
) -> float:
    """Positive-minus-negative mean score of a configuration, derived from the Δ definitions.

    .. math::

        E[s\\mid y=1] - E[s\\mid y=0] = d
        + \\beta^{pos}(E[\\Delta^{pos}\\mid 1] - E[\\Delta^{pos}\\mid 0])
        + \\beta^{neg}(E[\\Delta^{neg}\\mid 1] - E[\\Delta^{neg}\\mid 0]).

    Corner results: O, I, M_tr, M_te: d; IT: d + β^neg − β^pos; IV: d + β^pos − β^neg;
    O_n: d − β^pos − β^neg; O_p: d + β^pos + β^neg.

    Parameters
    ----------
    config:
        a name from :data:`CONFIGURATIONS` or a :class:`Configuration` (probabilities
        allowed).
    fit:
        mapping or object with ``mu``, ``d``, ``beta_pos``, ``beta_neg``; or an
        ``LmerResult`` together with ``names`` mapping those four keys to its
        ``fixef`` names.
    names:
        see ``fit``.
    """
    m0, m1 = class_means(config, fit, names)
    return m1 - m0


# ---------------------------------------------------------------------------------------
# z-scoring
# ---------------------------------------------------------------------------------------
def zscore_by(df: pd.DataFrame, score: str, by: str | Sequence[str], ddof: int = 1) -> pd.Series:
    """z-normalise a score column within groups (per configuration / intervention).

    :math:`z_i = (s_i - \\bar s_{g(i)}) / \\mathrm{sd}_{g(i)}` with the group SD using
    ``ddof`` (1 = R's ``scale``).

    Returns
    -------
    pandas.Series
        aligned with ``df.index``, named ``f"{score}_z"``.
    """
    cols = [by] if isinstance(by, str) else list(by)
    missing = [c for c in [score, *cols] if c not in df.columns]
    if missing:
        raise DesignError(f"column(s) {missing} not in the data frame (columns: {list(df.columns)})")
    s = df[score].astype(np.float64)
    if s.isna().any():
        rows = list(df.index[s.isna()][:5])
        raise DesignError(f"score column {score!r} has {int(s.isna().sum())} NaN value(s); first rows {rows}")
    g = s.groupby([df[c] for c in cols], sort=False, dropna=False)
    mean = g.transform("mean")
    sd = g.transform(lambda v: v.std(ddof=ddof))
    bad = ~(sd > 0)
    if bad.any():
        first = df.loc[bad, cols].drop_duplicates().head(3).to_dict("records")
        raise DesignError(
            f"score {score!r} has zero or undefined SD (constant or fewer than {ddof + 1} rows) "
            f"in group(s) {first}"
        )
    return ((s - mean) / sd).rename(f"{score}_z")


# ---------------------------------------------------------------------------------------
# partially biased set-ups
# ---------------------------------------------------------------------------------------
def _sigmas(fit: Any) -> tuple[float, float]:
    get = (lambda k: fit.get(k)) if isinstance(fit, Mapping) else (lambda k: getattr(fit, k, None))
    s0, s1, s = get("sigma_neg"), get("sigma_pos"), get("sigma")
    if s0 is not None and s1 is not None:
        return float(s0), float(s1)
    if s is not None:
        return float(s), float(s)
    raise DesignError("fit needs 'sigma' (tied) or 'sigma_neg' and 'sigma_pos' for a model-based EER")


@renamed_kwargs(random_state="seed")
def partial_bias_grid(
    scores_original: Any,
    scores_intervened: Any,
    labels: Any,
    rho_te_neg: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0),
    rho_te_pos: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0),
    rho_train_neg: float = 0.0,
    rho_train_pos: float = 0.0,
    fit: Any = None,
    n_rep: int = 1,
    positive: Any = None,
    seed: int | None = None,
    progress: bool = True,
) -> pd.DataFrame:
    """Empirical and model-based EER over a grid of test-side intervention probabilities.

    Input is one *paired* test set for a fixed detector (trained with
    :math:`\\rho_{train,neg}`, :math:`\\rho_{train,pos}`): every test trial ``i`` has a score
    without (``scores_original``) and with (``scores_intervened``) the intervention.  For each
    cell :math:`(\\rho_{te,n}, \\rho_{te,p})` and each of ``n_rep`` seeded replicates, every
    trial is intervened independently, :math:`t_i \\sim \\mathrm{Bernoulli}(\\rho_{te,y_i})`,
    its score is taken from the matching column, and the empirical EER
    (:func:`scoremix.metrics.eer`) is computed.

    The model-based EER of a cell is the EER of the two class mixtures

    .. math::

        s \\mid y \\sim (1-\\rho_{te,y})\\,N(m_{y,0}, \\sigma_{y,0}^2)
                     + \\rho_{te,y}\\,N(m_{y,1}, \\sigma_{y,1}^2),

    with, when ``fit`` is given (mapping/object with ``mu``, ``d``, ``beta_pos``,
    ``beta_neg`` and ``sigma`` or ``sigma_neg``/``sigma_pos``),
    :math:`m_{y,t} = \\mu + d\\,y + \\beta^{pos}|t-\\rho_{train,pos}| + \\beta^{neg}|t-\\rho_{train,neg}|`
    and :math:`\\sigma_{y,t} = \\sigma_y`; without ``fit`` the four cell moments
    :math:`(m_{y,t}, \\sigma_{y,t})` are the sample means and SDs of the class's original
    (t = 0) and intervened (t = 1) scores (the saturated Gaussian model).

    Parameters
    ----------
    scores_original, scores_intervened:
        ``(n,)`` paired scores of the same test trials.
    labels:
        class labels (read by :func:`scoremix.trials.label_to_binary`).
    rho_te_neg, rho_te_pos:
        grid values in [0, 1].
    rho_train_neg, rho_train_pos:
        training-side probabilities (used only by a ``fit``'s Δ regressors).
    fit:
        optional Δ-model coefficients (see above).
    n_rep:
        replicates per cell (mean and SD of the empirical EER are reported).
    seed:
        seed; the same seed gives the same table.
    progress:
        tqdm bar over cells.

    Returns
    -------
    pandas.DataFrame
        one row per cell: ``rho_te_neg``, ``rho_te_pos``, ``eer_empirical`` (mean over
        replicates), ``eer_empirical_sd`` (NaN for one replicate), ``eer_model``.  Use
        ``df.pivot(index="rho_te_neg", columns="rho_te_pos", values=...)`` for a heat map.
    """
    random_state = seed  # the body's name for seed= (renamed API argument)
    from scoremix.metrics import eer

    s0 = np.asarray(scores_original, dtype=np.float64).ravel()
    s1 = np.asarray(scores_intervened, dtype=np.float64).ravel()
    y = _binary_labels(labels, positive)
    if not (s0.shape == s1.shape == y.shape):
        raise DesignError(
            f"scores_original ({s0.size}), scores_intervened ({s1.size}) and labels ({y.size}) "
            "must have the same length"
        )
    for name, arr in (("scores_original", s0), ("scores_intervened", s1)):
        bad = ~np.isfinite(arr)
        if bad.any():
            raise DesignError(f"{name} has {int(bad.sum())} NaN/inf value(s); first rows "
                              f"{np.flatnonzero(bad)[:5].tolist()}")
    if y.min() == y.max():
        raise DesignError("labels hold only one class; an EER needs both")
    grid_n = [float(v) for v in rho_te_neg]
    grid_p = [float(v) for v in rho_te_pos]
    for name, grid in (("rho_te_neg", grid_n), ("rho_te_pos", grid_p)):
        if any(not (0.0 <= v <= 1.0) for v in grid):
            raise DesignError(f"{name} values must lie in [0, 1]: {grid}")
    if int(n_rep) < 1:
        raise DesignError(f"n_rep must be >= 1, got {n_rep}")

    # cell moments m[y][t], sd[y][t]
    if fit is not None:
        c = _coefficients(fit)
        sig = _sigmas(fit)
        m = [[c["mu"] + c["d"] * yy + c["beta_pos"] * abs(t - rho_train_pos)
              + c["beta_neg"] * abs(t - rho_train_neg) for t in (0, 1)] for yy in (0, 1)]
        sd = [[sig[yy], sig[yy]] for yy in (0, 1)]
    else:
        m = [[float(s[y == yy].mean()) for s in (s0, s1)] for yy in (0, 1)]
        sd = [[float(s[y == yy].std(ddof=1)) for s in (s0, s1)] for yy in (0, 1)]

    rng = np.random.default_rng(random_state)
    is_pos = y == 1
    rows = []
    cells = [(pn, pp) for pn in grid_n for pp in grid_p]
    for pn, pp in tqdm(cells, disable=not progress, desc="partial-bias grid"):
        p_i = np.where(is_pos, pp, pn)
        emp = []
        for _ in range(int(n_rep)):
            t = rng.random(y.shape[0]) < p_i
            emp.append(float(eer(np.where(t, s1, s0), y)))
        w_neg, w_pos = np.array([1.0 - pn, pn]), np.array([1.0 - pp, pp])
        keep_n, keep_p = w_neg > 0, w_pos > 0
        model = mixture_eer(np.asarray(m[0])[keep_n], np.asarray(sd[0])[keep_n],
                            np.asarray(m[1])[keep_p], np.asarray(sd[1])[keep_p],
                            weight_neg=w_neg[keep_n], weight_pos=w_pos[keep_p])
        rows.append({
            "rho_te_neg": pn,
            "rho_te_pos": pp,
            "eer_empirical": float(np.mean(emp)),
            "eer_empirical_sd": float(np.std(emp, ddof=1)) if len(emp) > 1 else float("nan"),
            "eer_model": float(model),
        })
    return pd.DataFrame(rows)
