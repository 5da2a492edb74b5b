r"""Coverage of subgroup intervals against a simulation with known truth.

Generating model (one data set): subgroup ``g`` has ``n_g`` enrolment speakers; speaker
``j`` of ``g`` has ``n_tar`` target and ``n_non`` nontarget trials with scores

.. math::

    s = μ_y + δ_{g,y} + b_j + σ_y\,ε,\qquad b_j \sim N(0, σ_b^2),\ ε \sim N(0, 1),

``μ_0 = 0, μ_1 = d``, ``σ_0 = 1``, ``σ_1 = sigma_pos``, the same speaker effect for both
classes (it shifts a speaker's whole score distribution).

**Crossed test speakers** (``n_test > 0``): the nontarget trials of every enrolment speaker
are spread evenly over one pool of ``n_test`` test speakers (trial ``k`` of a speaker faces
test speaker ``k mod n_test``; the pool is shared by all enrolment speakers and subgroups),
and a nontarget score gets the test speaker's effect as well,

.. math::

    s = δ_{g,0} + b_j + c_t + ε,\qquad c_t \sim N(0, σ_c^2)\ (\text{``sd_test``}),

while a target trial's test speaker is the enrolment speaker himself (column
``test_speaker`` = ``speaker``, no ``c``).  With ``n_test = 0`` (default) there is no test
speaker and the draws are those of the one-way design.

Integrating the speaker effects out, a subgroup's *population* scores are exactly normal,
``N(μ_y + δ_{g,y}, σ_y^2 + σ_b^2 + σ_c^2 [y = 0])``, and the overall population is the mixture of the
subgroups with weights ``n_g / Σ n`` (every speaker has the same number of trials).  The
**true** measures are therefore closed forms of normal CDFs:
``P^g_{miss}(τ) = Φ((τ - μ_1 - δ_{g,1})/\sqrt{σ_1^2+σ_b^2})``,
``P^g_{fa}(τ) = 1 - Φ((τ - δ_{g,0})/\sqrt{1+σ_b^2})``, ``τ*`` minimises the mixture's
cost (bounded 1-D search to 1e-10), ``minDCF_g`` the subgroup's, the subgroup's EER is
``Φ((μ_0 + δ_{g,0} − μ_1 − δ_{g,1}) / (s_0 + s_1))`` (``s_y`` the population SDs; the binormal
ROC meets the diagonal there), and the ratios follow
as in :mod:`scoremix.fairness.sveva`.  They are the values the estimators target: the
subgroup's speakers are a sample from its population of speakers.

:func:`coverage_study` simulates data sets, runs :func:`scoremix.fairness.subgroup_dcf`
once per data set and scores the three interval methods on the same replicates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar
from scipy.special import ndtr
from tqdm.auto import tqdm

from scoremix.fairness.engine import CostSpec
from scoremix.resampling.intervals import percentile_interval
from scoremix.fairness.sveva import bootstrap_intervals, subgroup_dcf

__all__ = ["CoverageDesign", "simulate_subgroup_trials", "true_subgroup_measures", "coverage_study", "coverage_pivot",
           "COVERAGE_MEASURES"]

#: measures whose intervals the coverage study scores
COVERAGE_MEASURES = ("ratio_overall", "fpr", "fnr", "fpr_ratio", "fnr_ratio", "dcf_at_overall", "min_dcf",
                     "ratio_own", "eer")


@dataclass(frozen=True)
class CoverageDesign:
    """One simulation design (see the module docstring for the model).

    ``sizes``: speakers per subgroup; ``shift_non`` / ``shift_tar``: ``δ_{g,0}``, ``δ_{g,1}``
    (one per subgroup); ``sd_speaker``: ``σ_b`` (0 = independent trials); ``n_test``: test
    speakers crossed with the enrolment speakers in the nontarget trials (0 = none);
    ``sd_test``: their effect ``σ_c``.
    """

    sizes: tuple[int, ...] = (5, 8, 15, 30, 60)
    n_tar: int = 40
    n_non: int = 400
    d: float = 3.0
    sigma_pos: float = 1.0
    sd_speaker: float = 0.5
    shift_non: tuple[float, ...] = (0.3, 0.2, -0.1, 0.0, -0.1)
    shift_tar: tuple[float, ...] = (-0.2, 0.1, 0.2, 0.0, -0.1)
    names: tuple[str, ...] = field(default=())
    n_test: int = 0
    sd_test: float = 0.0

    def __post_init__(self) -> None:
        G = len(self.sizes)
        if len(self.shift_non) != G or len(self.shift_tar) != G:
            raise ValueError(f"shift_non and shift_tar need one value per subgroup ({G})")
        if min(self.sizes) < 1 or self.n_tar < 1 or self.n_non < 1:
            raise ValueError("sizes, n_tar and n_non must be >= 1")
        if self.n_test < 0 or self.sd_test < 0:
            raise ValueError(f"n_test and sd_test must be >= 0, got {self.n_test}, {self.sd_test}")
        if self.sd_test > 0 and self.n_test == 0:
            raise ValueError("sd_test > 0 needs test speakers (n_test >= 1)")
        if not self.names:
            object.__setattr__(self, "names", tuple(f"g{g + 1}_n{n:03d}" for g, n in enumerate(self.sizes)))
        if len(set(self.names)) != G:
            raise ValueError(f"subgroup names must be distinct, got {self.names}")

    @property
    def class_sd(self) -> tuple[float, float]:
        """Population SDs ``(nontarget, target)`` with the speaker effects integrated out."""
        return (float(np.sqrt(1.0 + self.sd_speaker ** 2 + self.sd_test ** 2)),
                float(np.hypot(self.sigma_pos, self.sd_speaker)))


def simulate_subgroup_trials(design: CoverageDesign, seed: int | np.random.Generator | None = 0) -> pd.DataFrame:
    """One data set: columns ``speaker, group, label`` (1 = target) and ``score``, plus
    ``test_speaker`` when the design has crossed test speakers (``n_test > 0``)."""
    rng = np.random.default_rng(seed)
    frames = []
    per = design.n_tar + design.n_non
    y_spk = np.r_[np.ones(design.n_tar, np.int8), np.zeros(design.n_non, np.int8)]
    crossed = design.n_test > 0
    if crossed:
        c = rng.normal(0.0, design.sd_test, design.n_test) if design.sd_test > 0 else np.zeros(design.n_test)
        t_spk = np.r_[np.full(design.n_tar, -1), np.arange(design.n_non) % design.n_test]  # -1: own voice
        t_names = np.array([f"t{k:03d}" for k in range(design.n_test)], dtype=object)
    for g, (n, name) in enumerate(zip(design.sizes, design.names)):
        b = rng.normal(0.0, design.sd_speaker, n) if design.sd_speaker > 0 else np.zeros(n)
        y = np.tile(y_spk, n)
        spk = np.repeat(np.arange(n), per)
        mean = np.where(y == 1, design.d + design.shift_tar[g], design.shift_non[g]) + b[spk]
        sd = np.where(y == 1, design.sigma_pos, 1.0)
        names = np.array([f"{name}_s{j:03d}" for j in range(n)], dtype=object)[spk]
        cols = {"speaker": names, "group": name, "label": y}
        if crossed:
            t = np.tile(t_spk, n)
            mean = mean + np.where(t >= 0, c[np.maximum(t, 0)], 0.0)
            cols["test_speaker"] = np.where(t >= 0, t_names[np.maximum(t, 0)], names)
        frames.append(pd.DataFrame({**cols, "score": mean + sd * rng.standard_normal(y.size)}))
    return pd.concat(frames, ignore_index=True)


def true_subgroup_measures(design: CoverageDesign, p_target: float = 0.05, c_miss: float = 1.0,
                           c_fa: float = 1.0, normalize: bool = False) -> pd.DataFrame:
    """Closed-form true measures per subgroup (index: subgroup name), see module docstring."""
    a, b = CostSpec(p_target=p_target, c_miss=c_miss, c_fa=c_fa, normalize=normalize).weights
    s0, s1 = design.class_sd
    mu0 = np.asarray(design.shift_non, float)
    mu1 = design.d + np.asarray(design.shift_tar, float)
    w = np.asarray(design.sizes, float) / np.sum(design.sizes)

    def rates(t: float, g: int | None = None) -> tuple[float, float]:
        fnr = ndtr((t - mu1) / s1)
        fpr = ndtr((mu0 - t) / s0)
        if g is None:
            return float(w @ fnr), float(w @ fpr)
        return float(fnr[g]), float(fpr[g])

    def argmin_cost(g: int | None) -> tuple[float, float]:
        f = lambda t: a * rates(t, g)[0] + b * rates(t, g)[1]  # noqa: E731
        grid = np.linspace(mu0.min() - 3 * s0, mu1.max() + 6 * s1, 2001)
        k = int(np.argmin([f(t) for t in grid]))
        r = minimize_scalar(f, bounds=(grid[max(k - 1, 0)], grid[min(k + 1, grid.size - 1)]), method="bounded",
                            options={"xatol": 1e-10})
        return float(r.x), float(r.fun)

    tau, min_all = argmin_cost(None)
    fnr_all, fpr_all = rates(tau)
    rows = []
    for g, name in enumerate(design.names):
        fnr, fpr = rates(tau, g)
        dcf_at = a * fnr + b * fpr
        _, min_g = argmin_cost(g)
        rows.append(dict(subgroup=name, n_speakers=design.sizes[g], dcf_at_overall=dcf_at, min_dcf=min_g,
                         ratio_overall=dcf_at / min_all, ratio_own=min_g / dcf_at, fpr=fpr, fnr=fnr,
                         fpr_ratio=fpr / fpr_all, fnr_ratio=fnr / fnr_all, threshold=tau, all_min_dcf=min_all,
                         eer=float(ndtr((mu0[g] - mu1[g]) / (s0 + s1)))))
    return pd.DataFrame(rows).set_index("subgroup")


def coverage_study(design: CoverageDesign, n_datasets: int, n_boot: int = 1000, ci: float = 0.95,
                   seed: int = 0, p_target: float = 0.05, progress: bool = True,
                   measures: Sequence[str] = COVERAGE_MEASURES, resample: str = "one-way") -> pd.DataFrame:
    """Simulate ``n_datasets`` data sets and score three interval methods on the same replicates:
    ``percentile``, ``expanded`` and ``studentized`` (the default of ``subgroup_dcf``).

    ``resample``: the bootstrap of :func:`~scoremix.fairness.subgroup_dcf` (``"two-way"`` needs
    a design with test speakers, ``n_test > 0``); the same seeds give the same data sets for both.

    Data set ``k`` is drawn with seed ``[seed, k]`` and bootstrapped with seed ``[seed, k, 1]``
    (:class:`numpy.random.SeedSequence` entropy), so every row is reproducible on its own.

    Returns
    -------
    long DataFrame, one row per data set × subgroup × measure × method: ``dataset,
    subgroup, n_speakers, n_errors, measure, method, truth, estimate, lo, hi, covered,
    degenerate, reliable`` (``covered``: ``lo ≤ truth ≤ hi``; a missing interval does not cover).
    """
    if resample == "two-way" and design.n_test == 0:
        raise ValueError("resample='two-way' needs a design with test speakers (n_test >= 1)")
    truth = true_subgroup_measures(design, p_target=p_target)
    two = {"test_speaker": "test_speaker", "resample": "two-way"} if resample == "two-way" else {}
    out = []
    for k in tqdm(range(n_datasets), desc="coverage data sets", disable=not progress, unit="set"):
        df = simulate_subgroup_trials(design, seed=np.random.default_rng([seed, k]))
        res = subgroup_dcf(df, ["group"], p_target=p_target, n_boot=n_boot, level=ci,
                           seed=np.random.default_rng([seed, k, 1]), progress=False, eer="eer" in measures,
                           interval="studentized", **two)
        tab = res.table.set_index("subgroup")
        ex, _ = bootstrap_intervals(res.replicates, ci, list(measures), method="expanded",
                                    point={m: tab[m].to_numpy(float)[:, None]
                                           for m in {*measures, "ratio_overall"}},
                                    n_speakers=tab["n_speakers"].to_numpy(float))
        for m in measures:
            t = truth.loc[tab.index, m].to_numpy()
            est = tab[m].to_numpy()
            p_lo, p_hi = percentile_interval(res.replicates[m], ci)
            for method, lo, hi in (("percentile", p_lo, p_hi), ("expanded", *ex[m]),
                                   ("studentized", tab[f"{m}_lo"].to_numpy(), tab[f"{m}_hi"].to_numpy())):
                with np.errstate(invalid="ignore"):
                    cov = (lo <= t) & (t <= hi)
                out.append(pd.DataFrame({
                    "dataset": k, "subgroup": tab.index, "n_speakers": tab["n_speakers"].to_numpy(),
                    "n_errors": tab["n_errors"].to_numpy(), "measure": m, "method": method, "truth": t,
                    "estimate": est, "lo": lo, "hi": hi, "covered": cov, "degenerate": ~(hi > lo),
                    "reliable": tab["reliable"].to_numpy()}))
    return pd.concat(out, ignore_index=True)


def coverage_pivot(res: pd.DataFrame, by: str, measures: Sequence[str], scenarios: Sequence[str],
                   value: str = "covered", aggfunc: str = "mean") -> pd.DataFrame:
    """A long coverage table (:func:`coverage_study`, with a ``scenario`` column) as measure ×
    scenario rows and ``by`` (e.g. ``"method"``) × subgroup size columns, rows in the order of
    ``measures`` and ``scenarios``; ``value="log_width"`` with ``aggfunc="median"`` gives widths."""
    tab = res.pivot_table(index=["measure", "scenario"], columns=[by, "n_speakers"], values=value, aggfunc=aggfunc)
    return tab.reindex(index=pd.MultiIndex.from_product([list(measures), list(scenarios)]))
