"""Seeded simulators of detector trial tables with known truth.

Two generators share one output type, :class:`Simulation`:

* :func:`simulate_trials` — countermeasure (anti-spoofing) style trials: bona fide vs
  spoof, per-speaker and per-attack random intercepts, a continuous nuisance covariate.
* :func:`simulate_sv_trials` — speaker-verification style trials: target vs nontarget,
  enrolment/test speakers, same-sex / same-nationality trial factors and subgroup-specific
  shifts of the target and nontarget means.

Both follow the linear mixed model of study A (``docs/studies.md``), so a fit of
``scoremix.lmer`` on the table can be compared with ``Simulation.truth``.  Because the
random effects are *realised* (drawn once and stored), the simulation also knows the exact
expected error rates of the data-generating process given the drawn effects and the trial
design (:meth:`Simulation.true_rates`, :meth:`Simulation.true_eer`,
:meth:`Simulation.true_min_dcf`): for each trial ``i`` the score is Gaussian given the design,
``s_i | design ~ N(m_i, v_i)``, so

.. math::

    \\bar P_{miss}(\\tau) = \\frac{1}{N_{pos}} \\sum_{i: y_i = 1} \\Phi\\Big(\\frac{\\tau - m_i}{\\sqrt{v_i}}\\Big),
    \\qquad
    \\bar P_{fa}(\\tau) = \\frac{1}{N_{neg}} \\sum_{i: y_i = 0} \\Phi\\Big(\\frac{m_i - \\tau}{\\sqrt{v_i}}\\Big),

the expectations of the empirical rates (accept = score >= threshold) over the nuisance
covariate and the residual noise.

Everything is reproducible from ``seed`` (one :class:`numpy.random.Generator`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, special

__all__ = [
    "SimulationError",
    "Simulation",
    "TrueMinDCF",
    "VOXCELEB1_H_LIKE_SUBGROUPS",
    "voxceleb1_h_like_speakers",
    "speaker_table",
    "simulate_trials",
    "simulate_sv_trials",
]


class SimulationError(ValueError):
    """Invalid simulator argument (names the argument, column, row or level at fault)."""


# ---------------------------------------------------------------------------------------
# Speaker metadata
# ---------------------------------------------------------------------------------------

def _subgroup_counts_table() -> pd.DataFrame:
    rows = [
        # nationality, sex, n_speakers, source
        ("usa", "m", 431, "studies.md (SVEva Fair Table 3)"),
        ("usa", "f", 367, "illustrative"),
        ("uk", "m", 125, "illustrative"),
        ("uk", "f", 91, "illustrative"),
        ("canada", "m", 30, "illustrative"),
        ("canada", "f", 24, "illustrative"),
        ("australia", "m", 21, "illustrative"),
        ("australia", "f", 15, "illustrative"),
        ("india", "m", 15, "illustrative"),
        ("india", "f", 11, "studies.md (SVEva Fair Table 3)"),
        ("norway", "m", 12, "illustrative"),
        ("norway", "f", 8, "illustrative"),
        ("ireland", "m", 11, "illustrative"),
        ("ireland", "f", 7, "illustrative"),
        ("germany", "m", 9, "illustrative"),
        ("germany", "f", 5, "illustrative"),
        ("mexico", "m", 7, "illustrative"),
        ("mexico", "f", 5, "illustrative"),
    ]
    df = pd.DataFrame(rows, columns=["nationality", "sex", "n_speakers", "source"])
    df.insert(0, "subgroup", df["nationality"] + "_" + df["sex"])
    return df


#: VoxCeleb1-H-like speaker counts per ``nationality × sex`` subgroup (18 subgroups,
#: 1194 speakers).  Only ``usa_m`` (431) and ``india_f`` (11) are taken from studies.md
#: (SVEva Fair, Table 3); every other count is illustrative, chosen to mimic VoxCeleb1's
#: skew towards US and UK speakers and its many small subgroups (down to 5 speakers, the
#: smallest size SVEva Fair kept).  Column ``source`` says which is which.
VOXCELEB1_H_LIKE_SUBGROUPS: pd.DataFrame = _subgroup_counts_table()


def _speaker_ids(n: int) -> list[str]:
    width = max(4, len(str(n)))
    return [f"spk{i:0{width}d}" for i in range(1, n + 1)]


def _expand_counts(counts: pd.DataFrame) -> pd.DataFrame:
    n = counts["n_speakers"].to_numpy()
    sex = np.repeat(counts["sex"].astype(str).to_numpy(), n)
    nat = np.repeat(counts["nationality"].astype(str).to_numpy(), n)
    return pd.DataFrame({"speaker": _speaker_ids(int(n.sum())), "sex": sex, "nationality": nat})


def voxceleb1_h_like_speakers() -> pd.DataFrame:
    """Per-speaker metadata with :data:`VOXCELEB1_H_LIKE_SUBGROUPS` counts.

    Returns
    -------
    pandas.DataFrame
        Columns ``speaker`` (``"spk0001"`` …), ``sex`` (``"f"``/``"m"``), ``nationality``,
        ``subgroup`` (``f"{nationality}_{sex}"``); 1194 rows, speakers grouped by subgroup.
    """
    return speaker_table(VOXCELEB1_H_LIKE_SUBGROUPS[["nationality", "sex", "n_speakers"]])


def _allocate(n_total: int, weights: np.ndarray) -> np.ndarray:
    """Largest-remainder allocation of ``n_total`` items proportional to ``weights``."""
    quota = n_total * weights / weights.sum()
    base = np.floor(quota).astype(np.int64)
    rest = n_total - int(base.sum())
    order = np.argsort(-(quota - base), kind="stable")
    base[order[:rest]] += 1
    return base


def speaker_table(meta: pd.DataFrame | None = None, n_speakers: int | None = None) -> pd.DataFrame:
    """Normalise speaker metadata to one row per speaker.

    Parameters
    ----------
    meta:
        Either a per-speaker table with columns ``sex`` and ``nationality`` (optional
        ``speaker`` ids, unique; generated as ``"spk0001"`` … when absent), or a per-subgroup
        table with columns ``sex``, ``nationality`` and ``n_speakers`` (non-negative integers),
        which is expanded to that many speakers per row.  ``None`` uses
        :data:`VOXCELEB1_H_LIKE_SUBGROUPS`.
    n_speakers:
        With a per-subgroup table (or ``None``): rescale the counts to this total by
        largest-remainder allocation (so the subgroup proportions are kept).  Ignored for a
        per-speaker table.

    Returns
    -------
    pandas.DataFrame
        Columns ``speaker``, ``sex``, ``nationality``, ``subgroup`` (``f"{nationality}_{sex}"``),
        all strings, index ``0 … n-1``.

    Raises
    ------
    SimulationError
        Missing columns, missing values (row numbers given), duplicate speaker ids, invalid
        counts.
    """
    if meta is None:
        meta = VOXCELEB1_H_LIKE_SUBGROUPS[["nationality", "sex", "n_speakers"]]
    if not isinstance(meta, pd.DataFrame):
        raise SimulationError(f"speaker metadata must be a pandas DataFrame, got {type(meta).__name__}")
    missing = [c for c in ("sex", "nationality") if c not in meta.columns]
    if missing:
        raise SimulationError(
            f"speaker metadata lacks column(s) {missing}; available columns: {list(meta.columns)}"
        )
    for col in ("sex", "nationality"):
        bad = np.flatnonzero(meta[col].isna().to_numpy())
        if bad.size:
            raise SimulationError(
                f"speaker metadata column {col!r} has {bad.size} missing value(s), first rows: "
                f"{bad[:5].tolist()}"
            )
    if "n_speakers" in meta.columns:
        counts = pd.to_numeric(meta["n_speakers"], errors="coerce").to_numpy(dtype=float)
        bad = np.flatnonzero(~np.isfinite(counts) | (counts < 0) | (counts != np.round(counts)))
        if bad.size:
            raise SimulationError(
                f"speaker metadata column 'n_speakers' must hold non-negative integers; bad rows: "
                f"{bad[:5].tolist()} (values {meta['n_speakers'].iloc[bad[:5]].tolist()})"
            )
        counts = counts.astype(np.int64)
        if n_speakers is not None:
            if counts.sum() == 0:
                raise SimulationError("speaker metadata column 'n_speakers' sums to 0")
            counts = _allocate(int(n_speakers), counts.astype(float))
        if counts.sum() == 0:
            raise SimulationError("speaker metadata column 'n_speakers' sums to 0: no speakers")
        expanded = meta[["sex", "nationality"]].assign(n_speakers=counts)
        table = _expand_counts(expanded)
    else:
        if len(meta) == 0:
            raise SimulationError("speaker metadata is empty: no speakers")
        if "speaker" in meta.columns:
            ids = meta["speaker"].astype(str)
            dup = ids[ids.duplicated(keep=False)]
            if len(dup):
                raise SimulationError(
                    f"speaker metadata column 'speaker' has {dup.nunique()} duplicated id(s), e.g. "
                    f"{dup.unique()[:5].tolist()} (rows {dup.index[:5].tolist()})"
                )
            ids = ids.tolist()
        else:
            ids = _speaker_ids(len(meta))
        table = pd.DataFrame({
            "speaker": ids,
            "sex": meta["sex"].astype(str).to_numpy(),
            "nationality": meta["nationality"].astype(str).to_numpy(),
        })
    table["subgroup"] = table["nationality"] + "_" + table["sex"]
    return table.reset_index(drop=True)


def _shift_table(subgroup_shift: Mapping[str, Any] | None, subgroups: list[str],
                 classes: tuple[str, str]) -> pd.DataFrame:
    """Per-subgroup (negative, positive) shifts from a user mapping; unlisted subgroups get 0."""
    neg, pos = classes
    out = pd.DataFrame(0.0, index=pd.Index(subgroups, name="subgroup"), columns=[neg, pos])
    if subgroup_shift is None:
        return out
    if not isinstance(subgroup_shift, Mapping):
        raise SimulationError(
            f"subgroup_shift must be a mapping subgroup -> shift, got {type(subgroup_shift).__name__}"
        )
    for key, value in subgroup_shift.items():
        if key not in out.index:
            raise SimulationError(
                f"subgroup_shift names unknown subgroup {key!r}; known subgroups: {subgroups}"
            )
        if np.ndim(value) == 0:
            out.loc[key, [neg, pos]] = float(value)
        else:
            vals = np.asarray(value, dtype=float)
            if vals.shape != (2,):
                raise SimulationError(
                    f"subgroup_shift[{key!r}] must be a number (both classes) or a pair "
                    f"({neg}, {pos}), got {value!r}"
                )
            out.loc[key, [neg, pos]] = vals
        if not np.all(np.isfinite(out.loc[key].to_numpy())):
            raise SimulationError(f"subgroup_shift[{key!r}] is not finite: {value!r}")
    return out


# ---------------------------------------------------------------------------------------
# Result type
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrueMinDCF:
    """Minimum of the expected detection cost of a :class:`Simulation`.

    ``threshold`` is ``-inf`` (accept all) or ``+inf`` (reject all) when a trivial decision
    is optimal.
    """

    value: float
    threshold: float
    p_miss: float
    p_fa: float


@dataclass(eq=False)
class Simulation:
    """A simulated trial table with its known truth.

    Attributes
    ----------
    table:
        The trials (one row each); columns documented by the generating function.
    truth:
        True parameters: the scalar model parameters, ``speaker_effects`` (and
        ``attack_effects``) as :class:`pandas.Series` of the *realised* random effects,
        ``subgroup_shift`` (DataFrame subgroup × class), ``class_mean``/``class_sd`` (dicts
        keyed by class label, conditional on the realised effects and trial design, marginal
        over covariate and noise) and ``class_mean_population``/``class_sd_population``
        (marginal over fresh random effects as well).
    speakers:
        Per-speaker metadata (``speaker``, ``sex``, ``nationality``, ``subgroup``,
        ``speaker_effect``).
    cond_mean, cond_sd:
        Per trial, mean and SD of the score given the realised random effects and the trial
        design (speaker, attack, class, trial factors), marginal over the nuisance covariate
        ``x`` and the noise; the basis of :meth:`true_rates`.

    A ``Simulation`` unpacks as ``table, truth = sim``.
    """

    table: pd.DataFrame
    truth: dict[str, Any]
    speakers: pd.DataFrame
    cond_mean: np.ndarray = field(repr=False)
    cond_sd: np.ndarray = field(repr=False)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.table, self.truth))

    # --- expected error rates ----------------------------------------------------------
    def _select(self, subgroup: str | None, mask: np.ndarray | None) -> np.ndarray:
        sel = np.ones(len(self.table), dtype=bool)
        if subgroup is not None:
            groups = self.table["subgroup"].astype(str).to_numpy()
            if subgroup not in set(groups):
                raise SimulationError(
                    f"unknown subgroup {subgroup!r}; subgroups in the table: {sorted(set(groups))}"
                )
            sel &= groups == subgroup
        if mask is not None:
            m = np.asarray(mask, dtype=bool)
            if m.shape != sel.shape:
                raise SimulationError(f"mask has shape {m.shape}, the table has {len(sel)} rows")
            sel &= m
        return sel

    def _components(self, subgroup: str | None, mask: np.ndarray | None) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        sel = self._select(subgroup, mask)
        y = self.table["y"].to_numpy()
        out = {}
        for cls in (0, 1):
            idx = sel & (y == cls)
            if not idx.any():
                what = f"subgroup {subgroup!r}" if subgroup is not None else "the selection"
                raise SimulationError(f"{what} has no trials with y={cls}")
            pairs = np.column_stack([self.cond_mean[idx], self.cond_sd[idx]])
            uniq, counts = np.unique(pairs, axis=0, return_counts=True)
            out[cls] = (uniq[:, 0], uniq[:, 1], counts / counts.sum())
        return out

    @staticmethod
    def _mixture_cdf(t: np.ndarray, comp: tuple[np.ndarray, np.ndarray, np.ndarray],
                     upper: bool) -> np.ndarray:
        m, s, w = comp
        out = np.empty(t.shape, dtype=float)
        block = max(1, 2_000_000 // max(1, m.size))
        for start in range(0, t.size, block):
            tt = t[start:start + block, None]
            z = (m[None, :] - tt) / s[None, :] if upper else (tt - m[None, :]) / s[None, :]
            out[start:start + block] = special.ndtr(z) @ w
        return out

    def true_rates(self, thresholds: Any, subgroup: str | None = None,
                   mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Expected ``(P_miss, P_fa)`` at each threshold (accept = score >= threshold).

        .. math::

            \\bar P_{miss}(\\tau) = \\tfrac{1}{N_1}\\sum_{y_i=1}\\Phi((\\tau - m_i)/s_i),\\quad
            \\bar P_{fa}(\\tau) = \\tfrac{1}{N_0}\\sum_{y_i=0}\\Phi((m_i - \\tau)/s_i)

        with ``m_i, s_i`` = :attr:`cond_mean`, :attr:`cond_sd`: the expectation of the
        empirical rates given the realised random effects and trial design.

        Parameters
        ----------
        thresholds:
            Scalar or array of thresholds.
        subgroup:
            Restrict to trials whose ``subgroup`` column equals this value.
        mask:
            Boolean array over the table rows to restrict further.
        """
        t = np.atleast_1d(np.asarray(thresholds, dtype=float)).ravel()
        comp = self._components(subgroup, mask)
        p_miss = self._mixture_cdf(t, comp[1], upper=False)
        p_fa = self._mixture_cdf(t, comp[0], upper=True)
        if np.ndim(thresholds) == 0:
            return p_miss[:1].copy().reshape(()), p_fa[:1].copy().reshape(())
        return p_miss, p_fa

    def _bracket(self, comp: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> tuple[float, float]:
        lo = min(float((c[0] - 12 * c[1]).min()) for c in comp.values())
        hi = max(float((c[0] + 12 * c[1]).max()) for c in comp.values())
        return lo, hi

    def true_eer(self, subgroup: str | None = None, mask: np.ndarray | None = None,
                 return_threshold: bool = False) -> float | tuple[float, float]:
        """Expected-rate EER: the ``τ`` with ``P̄_miss(τ) = P̄_fa(τ)`` (root of a monotone function).

        Returns the EER (a fraction), or ``(eer, threshold)`` with ``return_threshold=True``.
        """
        comp = self._components(subgroup, mask)

        def gap(t: float) -> float:
            ta = np.array([t])
            return float(self._mixture_cdf(ta, comp[1], False)[0] - self._mixture_cdf(ta, comp[0], True)[0])

        lo, hi = self._bracket(comp)
        tau = optimize.brentq(gap, lo, hi, xtol=1e-12, rtol=1e-12, maxiter=500)
        eer = float(self._mixture_cdf(np.array([tau]), comp[1], False)[0])
        return (eer, float(tau)) if return_threshold else eer

    def true_dcf(self, threshold: float, p_target: float = 0.05, c_miss: float = 1.0,
                 c_fa: float = 1.0, normalize: bool = False, subgroup: str | None = None,
                 mask: np.ndarray | None = None) -> float:
        """Expected detection cost ``c_miss·p_target·P̄_miss(τ) + c_fa·(1−p_target)·P̄_fa(τ)``.

        Normalised (``normalize=True``) it is divided by ``min(c_miss·p_target, c_fa·(1−p_target))``.
        """
        pm, pf = self.true_rates(threshold, subgroup=subgroup, mask=mask)
        cost = c_miss * p_target * float(pm) + c_fa * (1 - p_target) * float(pf)
        return cost / min(c_miss * p_target, c_fa * (1 - p_target)) if normalize else cost

    def true_min_dcf(self, p_target: float = 0.05, c_miss: float = 1.0, c_fa: float = 1.0,
                     normalize: bool = False, subgroup: str | None = None,
                     mask: np.ndarray | None = None, n_grid: int = 2001) -> TrueMinDCF:
        """Minimum over ``τ`` of the expected detection cost (see :meth:`true_dcf`).

        A grid of ``n_grid`` thresholds over the score range locates the basin, a bounded
        Brent search refines it; the trivial decisions (accept all: cost ``c_fa(1−p_target)``,
        reject all: ``c_miss·p_target``) are candidates too.
        """
        comp = self._components(subgroup, mask)
        a, b = c_miss * p_target, c_fa * (1 - p_target)
        norm = min(a, b) if normalize else 1.0

        def cost(t: np.ndarray) -> np.ndarray:
            return a * self._mixture_cdf(t, comp[1], False) + b * self._mixture_cdf(t, comp[0], True)

        lo, hi = self._bracket(comp)
        grid = np.linspace(lo, hi, n_grid)
        c = cost(grid)
        k = int(np.argmin(c))
        lo_k, hi_k = grid[max(k - 1, 0)], grid[min(k + 1, n_grid - 1)]
        res = optimize.minimize_scalar(lambda t: float(cost(np.array([t]))[0]), bounds=(lo_k, hi_k),
                                       method="bounded", options={"xatol": 1e-10})
        best_t, best_c = (float(res.x), float(res.fun)) if res.fun <= c[k] else (float(grid[k]), float(c[k]))
        if min(a, b) <= best_c + 1e-12 * min(a, b):  # a trivial decision is (numerically) optimal
            if b <= a:
                return TrueMinDCF(b / norm, -np.inf, 0.0, 1.0)
            return TrueMinDCF(a / norm, np.inf, 1.0, 0.0)
        pm = float(self._mixture_cdf(np.array([best_t]), comp[1], False)[0])
        pf = float(self._mixture_cdf(np.array([best_t]), comp[0], True)[0])
        return TrueMinDCF(best_c / norm, best_t, pm, pf)


# ---------------------------------------------------------------------------------------
# Validation helpers
# ---------------------------------------------------------------------------------------

def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise SimulationError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_nonneg(name: str, value: Any, positive: bool = False) -> float:
    v = float(value)
    if not np.isfinite(v) or v < 0 or (positive and v == 0):
        kind = "> 0" if positive else ">= 0"
        raise SimulationError(f"{name} must be finite and {kind}, got {value!r}")
    return v


def _check_prob(name: str, value: Any) -> float:
    v = float(value)
    if not 0.0 <= v <= 1.0:
        raise SimulationError(f"{name} must lie in [0, 1], got {value!r}")
    return v


def _class_summaries(cond_mean: np.ndarray, cond_sd: np.ndarray, y: np.ndarray,
                     names: tuple[str, str]) -> tuple[dict[str, float], dict[str, float]]:
    means, sds = {}, {}
    for cls, name in enumerate(names):
        m, s = cond_mean[y == cls], cond_sd[y == cls]
        if m.size == 0:
            means[name], sds[name] = float("nan"), float("nan")
            continue
        means[name] = float(m.mean())
        # law of total variance over trials: Var(m_i) + E[s_i^2]
        sds[name] = float(np.sqrt(m.var() + np.mean(s ** 2)))
    return means, sds


def _y_vector(rng: np.random.Generator, n: int, p: float) -> np.ndarray:
    y = np.zeros(n, dtype=np.int8)
    y[: int(round(p * n))] = 1
    rng.shuffle(y)
    return y


# ---------------------------------------------------------------------------------------
# Countermeasure-style trials
# ---------------------------------------------------------------------------------------

def simulate_trials(
    n_trials: int = 20000,
    n_speakers: int = 1000,
    n_attacks: int = 13,
    *,
    mu: float = -2.0,
    d: float = 4.0,
    beta_x: float = 0.5,
    beta_x_pos: float | None = None,
    sd_speaker: float = 0.5,
    sd_attack: float = 1.5,
    sigma: float = 1.0,
    sigma_pos: float | None = None,
    p_positive: float = 0.5,
    speaker_meta: pd.DataFrame | None = None,
    subgroup_shift: Mapping[str, Any] | None = None,
    seed: int | None = 0,
) -> Simulation:
    """Simulate countermeasure-style (bona fide vs spoof) trials from a crossed LMM.

    Model, for trial ``i`` of speaker ``k(i)`` and (spoof trials) attack ``a(i)``:

    .. math::

        s_i = \\mu + d\\,y_i + \\beta_x x_i + (\\beta_x^{pos} - \\beta_x)\\,x_i y_i
              + b_{k(i)} + c_{a(i)}(1 - y_i) + \\delta_{g(k(i)), y_i} + \\varepsilon_i,

    with :math:`x_i \\sim N(0, 1)` (a standardised nuisance covariate, e.g. SNR),
    :math:`b_k \\sim N(0, \\sigma_b^2)` (``sd_speaker``), :math:`c_a \\sim N(0, \\sigma_c^2)`
    (``sd_attack``; attacks act on spoof trials only),
    :math:`\\varepsilon_i \\sim N(0, \\sigma^2)` for spoof and :math:`N(0, \\sigma_{pos}^2)`
    for bona fide trials, and :math:`\\delta_{g,y}` the fixed shift of subgroup ``g`` for
    class ``y`` (``subgroup_shift``).  In lme4 terms:
    ``score ~ y * x + (1 | speaker) + (0 + dummy(label, "spoof") | attack)``.

    Trials: exactly ``round(p_positive·n_trials)`` are bona fide (positions shuffled); each
    trial's speaker is drawn uniformly from the speakers and each spoof trial's attack
    uniformly from the attacks.

    Parameters
    ----------
    n_trials, n_speakers, n_attacks:
        Table size, number of speakers (ignored when ``speaker_meta`` is given) and of
        attacks (``"A01"``, ``"A02"``, …).
    mu, d:
        Mean spoof score and class discrimination (bona fide minus spoof).
    beta_x, beta_x_pos:
        Slope of ``x`` for spoof trials and, if given, a different slope for bona fide
        trials (default: the same slope ``beta_x`` for both classes).
    sd_speaker, sd_attack:
        Standard deviations of the speaker and attack random intercepts.
    sigma, sigma_pos:
        Residual SD of spoof trials and, if given, of bona fide trials (default ``sigma``).
    p_positive:
        Fraction of bona fide trials.
    speaker_meta:
        Speaker metadata accepted by :func:`speaker_table` (per speaker, or per subgroup with
        an ``n_speakers`` count column), used as given; it then defines the speakers and the
        argument ``n_speakers`` is ignored.  ``None`` spreads ``n_speakers`` over the
        :data:`VOXCELEB1_H_LIKE_SUBGROUPS` proportions (largest-remainder allocation).
    subgroup_shift:
        ``{subgroup: shift}`` (both classes) or ``{subgroup: (spoof_shift, bonafide_shift)}``;
        unlisted subgroups get 0.
    seed:
        Seed of the :class:`numpy.random.Generator`; the same seed gives the same table.

    Returns
    -------
    Simulation
        ``table`` columns: ``trial_id`` (int64, 0…), ``speaker``, ``attack`` (``"A01"``…
        for spoof, ``"bonafide"`` for bona fide trials), ``label`` (``"bonafide"``/
        ``"spoof"``), ``y`` (int8, 1 = bona fide), ``x`` (float), ``score`` (float),
        ``sex``, ``nationality``, ``subgroup`` (``f"{nationality}_{sex}"``); string columns are
        pandas categoricals.  ``truth`` keys: the arguments, ``beta_x_neg``,
        ``var_speaker``, ``var_attack``, ``var_residual`` (and ``_pos``), ``speaker_effects``,
        ``attack_effects`` (Series), ``subgroup_shift`` (DataFrame with columns ``spoof``,
        ``bonafide``), ``class_mean``/``class_sd``/``class_mean_population``/
        ``class_sd_population`` (dicts keyed ``"spoof"``/``"bonafide"``), ``formula``.

    Examples
    --------
    >>> table, truth = simulate_trials(2000, 100, seed=1)
    >>> sorted(table["label"].unique())
    ['bonafide', 'spoof']
    """
    n = _check_int("n_trials", n_trials, 1)
    n_spk_req = _check_int("n_speakers", n_speakers, 1)
    n_att = _check_int("n_attacks", n_attacks, 1)
    sd_b = _check_nonneg("sd_speaker", sd_speaker)
    sd_c = _check_nonneg("sd_attack", sd_attack)
    sig0 = _check_nonneg("sigma", sigma, positive=True)
    sig1 = sig0 if sigma_pos is None else _check_nonneg("sigma_pos", sigma_pos, positive=True)
    p = _check_prob("p_positive", p_positive)
    for name, val in (("mu", mu), ("d", d), ("beta_x", beta_x)):
        if not np.isfinite(float(val)):
            raise SimulationError(f"{name} must be finite, got {val!r}")
    bx0 = float(beta_x)
    bx1 = bx0 if beta_x_pos is None else float(beta_x_pos)

    if speaker_meta is None:
        speakers = speaker_table(None, n_speakers=n_spk_req)
    else:
        speakers = speaker_table(speaker_meta)
    n_spk = len(speakers)
    subgroups = sorted(speakers["subgroup"].unique())
    shifts = _shift_table(subgroup_shift, subgroups, ("spoof", "bonafide"))

    rng = np.random.default_rng(seed)
    b = rng.normal(0.0, sd_b, n_spk)
    c = rng.normal(0.0, sd_c, n_att)
    y = _y_vector(rng, n, p)
    spk = rng.integers(0, n_spk, n)
    att = rng.integers(0, n_att, n)
    x = rng.standard_normal(n)
    eps = rng.standard_normal(n)

    pos = y.astype(bool)
    att_code = np.where(pos, n_att, att)  # code n_att = "bonafide"
    sg_code_spk = pd.Categorical(speakers["subgroup"], categories=subgroups).codes
    shift_neg = shifts["spoof"].to_numpy()[sg_code_spk]
    shift_pos = shifts["bonafide"].to_numpy()[sg_code_spk]
    spk_shift = np.where(pos, shift_pos[spk], shift_neg[spk])
    slope = np.where(pos, bx1, bx0)
    sd_res = np.where(pos, sig1, sig0)
    c_full = np.append(c, 0.0)

    cond_mean = mu + d * y + b[spk] + c_full[att_code] + spk_shift
    score = cond_mean + slope * x + sd_res * eps
    cond_sd = np.sqrt(slope ** 2 + sd_res ** 2)

    spk_ids = speakers["speaker"].tolist()
    attack_names = [f"A{k:02d}" for k in range(1, n_att + 1)]
    sex_cats = sorted(speakers["sex"].unique())
    nat_cats = sorted(speakers["nationality"].unique())
    table = pd.DataFrame({
        "trial_id": np.arange(n, dtype=np.int64),
        "speaker": pd.Categorical.from_codes(spk, categories=spk_ids),
        "attack": pd.Categorical.from_codes(att_code, categories=attack_names + ["bonafide"]),
        "label": pd.Categorical.from_codes(y.astype(np.int64), categories=["spoof", "bonafide"]),
        "y": y,
        "x": x,
        "score": score,
        "sex": pd.Categorical.from_codes(
            pd.Categorical(speakers["sex"], categories=sex_cats).codes[spk], categories=sex_cats),
        "nationality": pd.Categorical.from_codes(
            pd.Categorical(speakers["nationality"], categories=nat_cats).codes[spk], categories=nat_cats),
        "subgroup": pd.Categorical.from_codes(sg_code_spk[spk], categories=subgroups),
    })

    speakers = speakers.assign(speaker_effect=b)
    names = ("spoof", "bonafide")
    class_mean, class_sd = _class_summaries(cond_mean, cond_sd, y, names)
    # population: fresh random effects, speakers uniform over the speaker table
    pop_mean = {
        "spoof": float(mu + shift_neg.mean()),
        "bonafide": float(mu + d + shift_pos.mean()),
    }
    pop_sd = {
        "spoof": float(np.sqrt(sd_b ** 2 + shift_neg.var() + sd_c ** 2 + bx0 ** 2 + sig0 ** 2)),
        "bonafide": float(np.sqrt(sd_b ** 2 + shift_pos.var() + bx1 ** 2 + sig1 ** 2)),
    }
    truth: dict[str, Any] = {
        "model": "cm",
        "formula": 'score ~ y * x + (1 | speaker) + (0 + dummy(label, "spoof") | attack)',
        "n_trials": n, "n_speakers": n_spk, "n_attacks": n_att, "seed": seed,
        "mu": float(mu), "d": float(d),
        "beta_x": bx0, "beta_x_neg": bx0, "beta_x_pos": bx1,
        "sd_speaker": sd_b, "sd_attack": sd_c, "sigma": sig0, "sigma_pos": sig1,
        "var_speaker": sd_b ** 2, "var_attack": sd_c ** 2,
        "var_residual": sig0 ** 2, "var_residual_pos": sig1 ** 2,
        "p_positive": p,
        "speaker_effects": pd.Series(b, index=pd.Index(spk_ids, name="speaker"), name="speaker_effect"),
        "attack_effects": pd.Series(c, index=pd.Index(attack_names, name="attack"), name="attack_effect"),
        "subgroup_shift": shifts,
        "class_mean": class_mean, "class_sd": class_sd,
        "class_mean_population": pop_mean, "class_sd_population": pop_sd,
    }
    return Simulation(table=table, truth=truth, speakers=speakers, cond_mean=cond_mean, cond_sd=cond_sd)


# ---------------------------------------------------------------------------------------
# Speaker-verification-style trials
# ---------------------------------------------------------------------------------------

def _draw_nontarget_partners(rng: np.random.Generator, enrol: np.ndarray, sg_codes: np.ndarray,
                             p_same: float) -> np.ndarray:
    """Test speakers for nontarget trials: another speaker of the enrolment speaker's
    subgroup with probability ``p_same`` (when the subgroup has another speaker), otherwise
    any other speaker (uniform)."""
    n_spk = sg_codes.size
    order = np.argsort(sg_codes, kind="stable")
    rank = np.empty(n_spk, dtype=np.int64)
    rank[order] = np.arange(n_spk)
    sizes = np.bincount(sg_codes)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    g = sg_codes[enrol]
    g_start, g_size = starts[g], sizes[g]
    pos_in_group = rank[enrol] - g_start

    u_choice, u_same, u_any = rng.random(enrol.size), rng.random(enrol.size), rng.random(enrol.size)
    r = np.minimum((u_same * (g_size - 1)).astype(np.int64), np.maximum(g_size - 2, 0))
    r = np.where(r >= pos_in_group, r + 1, r)
    same_partner = order[g_start + r]
    r_any = np.minimum((u_any * (n_spk - 1)).astype(np.int64), n_spk - 2)
    any_partner = np.where(r_any >= enrol, r_any + 1, r_any)
    use_same = (u_choice < p_same) & (g_size >= 2)
    return np.where(use_same, same_partner, any_partner)


def simulate_sv_trials(
    n_trials: int = 20000,
    speakers: str | pd.DataFrame = "voxceleb1-h",
    *,
    p_target: float = 0.5,
    p_same_subgroup: float = 0.5,
    mu: float = 0.008,
    d: float = 0.534,
    beta_same_sex: float = 0.009,
    beta_same_nationality: float = 0.011,
    sd_speaker: float = 0.033,
    sigma: float = 0.106,
    sigma_pos: float | None = None,
    sd_subgroup: float = 0.03,
    subgroup_shift: Mapping[str, Any] | None = None,
    seed: int | None = 0,
) -> Simulation:
    """Simulate speaker-verification trials (target vs nontarget) with subgroup effects.

    Model, for trial ``i`` with enrolment speaker ``e(i)`` of subgroup ``g = g(e(i))``:

    .. math::

        s_i = \\mu + d\\,y_i + \\beta_{sex}\\,\\mathrm{same\\_sex}_i
              + \\beta_{nat}\\,\\mathrm{same\\_nationality}_i + b_{e(i)}
              + \\delta_{g, y_i} + \\varepsilon_i,

    :math:`b_e \\sim N(0, \\sigma_b^2)` (``sd_speaker``), :math:`\\varepsilon_i \\sim
    N(0, \\sigma^2)` for nontarget and :math:`N(0, \\sigma_{pos}^2)` for target trials, and
    :math:`\\delta_{g,0}, \\delta_{g,1}` the subgroup shifts of the nontarget and target means.
    Defaults follow study A's Table VIII (VoxCeleb1, ECAPA, cosine scores: μ 0.008,
    d 0.534, β_gen 0.009, β_cty 0.011, σ_b 0.033, σ_ε 0.106).

    Trial design: exactly ``round(p_target·n_trials)`` target trials (shuffled); the
    enrolment speaker is uniform over speakers; target trials have test speaker = enrolment
    speaker (so ``same_sex = same_nationality = 1``); a nontarget trial's test speaker is,
    with probability ``p_same_subgroup``, another speaker of the same subgroup (as in the
    VoxCeleb1-H list; needs a subgroup with >= 2 speakers) and otherwise any other speaker.
    Subgroup membership follows the enrolment speaker.

    Parameters
    ----------
    n_trials:
        Number of trials.
    speakers:
        ``"voxceleb1-h"`` (:func:`voxceleb1_h_like_speakers`: 18 subgroups, 1194 speakers)
        or a DataFrame accepted by :func:`speaker_table` (per speaker, or per subgroup with
        ``n_speakers``).  At least two speakers.
    p_target, p_same_subgroup:
        Fraction of target trials; probability that a nontarget pair is drawn within the
        enrolment speaker's subgroup.
    mu, d, beta_same_sex, beta_same_nationality, sd_speaker, sigma, sigma_pos:
        Model parameters (see above); ``sigma_pos`` defaults to ``sigma``.
    sd_subgroup:
        When ``subgroup_shift`` is ``None``, each subgroup's nontarget and target shifts are
        drawn independently from ``N(0, sd_subgroup²)`` (seeded; recorded in ``truth``).
    subgroup_shift:
        Explicit shifts ``{subgroup: shift}`` (both classes) or ``{subgroup: (nontarget,
        target)}``; unlisted subgroups get 0.  Pass ``{}`` for no shifts.
    seed:
        Seed of the :class:`numpy.random.Generator`.

    Returns
    -------
    Simulation
        ``table`` columns: ``trial_id``, ``enrol_speaker``, ``test_speaker``, ``label``
        (``"target"``/``"nontarget"``), ``y`` (int8, 1 = target), ``same_sex``,
        ``same_nationality`` (int8), ``sex``, ``nationality``, ``subgroup`` (of the enrolment
        speaker), ``score``.  ``truth`` holds the parameters, ``speaker_effects``,
        ``subgroup_shift`` (DataFrame with columns ``nontarget``, ``target``) and class
        means/SDs keyed ``"nontarget"``/``"target"``.
    """
    n = _check_int("n_trials", n_trials, 1)
    pt = _check_prob("p_target", p_target)
    ps = _check_prob("p_same_subgroup", p_same_subgroup)
    sd_b = _check_nonneg("sd_speaker", sd_speaker)
    sd_g = _check_nonneg("sd_subgroup", sd_subgroup)
    sig0 = _check_nonneg("sigma", sigma, positive=True)
    sig1 = sig0 if sigma_pos is None else _check_nonneg("sigma_pos", sigma_pos, positive=True)
    if isinstance(speakers, str):
        if speakers.lower() not in ("voxceleb1-h", "voxceleb1_h", "vox1-h"):
            raise SimulationError(
                f"unknown speaker set {speakers!r}; use 'voxceleb1-h' or pass a DataFrame"
            )
        spk_table = voxceleb1_h_like_speakers()
    else:
        spk_table = speaker_table(speakers)
    n_spk = len(spk_table)
    if n_spk < 2:
        raise SimulationError("speaker verification needs at least 2 speakers for nontarget trials")
    subgroups = sorted(spk_table["subgroup"].unique())

    rng = np.random.default_rng(seed)
    if subgroup_shift is None:
        draws = rng.normal(0.0, sd_g, size=(len(subgroups), 2))
        shifts = pd.DataFrame(draws, index=pd.Index(subgroups, name="subgroup"),
                              columns=["nontarget", "target"])
    else:
        shifts = _shift_table(subgroup_shift, subgroups, ("nontarget", "target"))
    b = rng.normal(0.0, sd_b, n_spk)
    y = _y_vector(rng, n, pt)
    enrol = rng.integers(0, n_spk, n)
    sg_codes = pd.Categorical(spk_table["subgroup"], categories=subgroups).codes.astype(np.int64)
    partner = _draw_nontarget_partners(rng, enrol, sg_codes, ps)
    eps = rng.standard_normal(n)

    tgt = y.astype(bool)
    test = np.where(tgt, enrol, partner)
    sex = spk_table["sex"].to_numpy()
    nat = spk_table["nationality"].to_numpy()
    sex_cats = sorted(set(sex))
    nat_cats = sorted(set(nat))
    sex_code = pd.Categorical(sex, categories=sex_cats).codes
    nat_code = pd.Categorical(nat, categories=nat_cats).codes
    same_sex = (sex_code[enrol] == sex_code[test]).astype(np.int8)
    same_nat = (nat_code[enrol] == nat_code[test]).astype(np.int8)
    g = sg_codes[enrol]
    shift = np.where(tgt, shifts["target"].to_numpy()[g], shifts["nontarget"].to_numpy()[g])
    sd_res = np.where(tgt, sig1, sig0)
    cond_mean = (mu + d * y + beta_same_sex * same_sex + beta_same_nationality * same_nat
                 + b[enrol] + shift)
    score = cond_mean + sd_res * eps

    spk_ids = spk_table["speaker"].tolist()
    table = pd.DataFrame({
        "trial_id": np.arange(n, dtype=np.int64),
        "enrol_speaker": pd.Categorical.from_codes(enrol, categories=spk_ids),
        "test_speaker": pd.Categorical.from_codes(test, categories=spk_ids),
        "label": pd.Categorical.from_codes(y.astype(np.int64), categories=["nontarget", "target"]),
        "y": y,
        "same_sex": same_sex,
        "same_nationality": same_nat,
        "sex": pd.Categorical.from_codes(sex_code[enrol], categories=sex_cats),
        "nationality": pd.Categorical.from_codes(nat_code[enrol], categories=nat_cats),
        "subgroup": pd.Categorical.from_codes(g, categories=subgroups),
        "score": score,
    })
    speakers_out = spk_table.assign(speaker_effect=b)
    names = ("nontarget", "target")
    cond_sd = sd_res.astype(float)
    class_mean, class_sd = _class_summaries(cond_mean, cond_sd, y, names)
    truth: dict[str, Any] = {
        "model": "sv",
        "formula": "score ~ y + same_sex + same_nationality + (1 | enrol_speaker)",
        "n_trials": n, "n_speakers": n_spk, "seed": seed,
        "mu": float(mu), "d": float(d),
        "beta_same_sex": float(beta_same_sex), "beta_same_nationality": float(beta_same_nationality),
        "sd_speaker": sd_b, "var_speaker": sd_b ** 2,
        "sigma": sig0, "sigma_pos": sig1, "var_residual": sig0 ** 2, "var_residual_pos": sig1 ** 2,
        "p_target": pt, "p_same_subgroup": ps, "sd_subgroup": sd_g,
        "speaker_effects": pd.Series(b, index=pd.Index(spk_ids, name="speaker"), name="speaker_effect"),
        "subgroup_shift": shifts,
        "class_mean": class_mean, "class_sd": class_sd,
    }
    return Simulation(table=table, truth=truth, speakers=speakers_out, cond_mean=cond_mean, cond_sd=cond_sd)
