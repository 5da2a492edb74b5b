r"""The demographic-fairness panel: NIST FRTE Max/GeoMean, GARBE, FDR, max/min ratios and
per-group calibration, each with a speaker-cluster bootstrap interval.

All rate measures are read at a threshold :math:`τ` set on the *overall* rates (all groups
together), as NIST FRTE demographics and ISO/IEC 19795-10 do: the overall EER threshold
(``"eer"``: the distinct score minimising :math:`|P_\text{miss} − P_\text{fa}|`, accept
:math:`s ≥ τ`), a threshold where the overall false-match rate first drops to a target
(``fpr=0.01``: the smallest distinct score with :math:`P_\text{fa}(τ) ≤` the target), or a fixed
number.  Per group :math:`g = 1..G`: :math:`\text{FMR}_g(τ)` (nontargets accepted) and
:math:`\text{FNMR}_g(τ)` (targets rejected).  For a rate vector :math:`x_1..x_G`:

* **Max/GeoMean** (NIST FRTE demographic summary, Grother 2022/2024):
  :math:`\max_g x_g / (\prod_g x_g)^{1/G}` — infinite when a group has rate 0.
* **max/min inequity ratio**: :math:`\max_g x_g / \min_g x_g`.
* **Gini** with the small-sample factor (Howard et al. 2022):
  :math:`A(x) = \frac{G}{G−1}\,\frac{\sum_i\sum_j |x_i − x_j|}{2G^2\bar x}`.
* **GARBE** (Gini Aggregation Rate for Biometric Equitability; Howard, Laird, Rubin, Sirotin,
  Tipton & Vemury 2022, *Evaluating proposed fairness models for face recognition
  algorithms*): :math:`\text{GARBE}(τ) = α A(\text{FMR}) + (1 − α) A(\text{FNMR})`, 0 = equitable.
* **FDR** (Fairness Discrepancy Rate; de Freitas Pereira & Marcel 2022, *Fairness in biometrics:
  a figure of merit to assess biometric verification systems*, IEEE T-BIOM):
  :math:`\text{FDR}(τ) = 1 − [α \max_{i,j}|\text{FMR}_i − \text{FMR}_j| + (1 − α)\max_{i,j}
  |\text{FNMR}_i − \text{FNMR}_j|]`, 1 = fair.
* **Calibration per group** (``llr=True``: scores are log-likelihood ratios): actDCF at the Bayes
  threshold :math:`\log\frac{(1−p)c_\text{fa}}{p\,c_\text{miss}}` (normalised) and
  :math:`C_\text{llr}` per group, and their max − min across groups.

Intervals: speakers are resampled with replacement *within their group*; every replicate
re-sets the threshold on the replicate's overall rates, then recomputes every measure.  The
interval is the percentile interval (default; ``interval="expanded"``: Hesterberg's expanded
percentile interval with :math:`n` = the number of speakers of the smallest group, per-group
rows of that group).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from scoremix.fairness.subgroups import SubgroupError
from scoremix.trials import label_to_binary

__all__ = [
    "FPR_GRID",
    "SWEEP_MEASURES",
    "FairnessPanel",
    "fairness_panel",
    "fdr",
    "garbe",
    "gini",
    "max_geomean",
    "max_min_ratio",
    "operating_point_sweep",
    "plot_group_ape",
    "plot_operating_points",
]

#: overall false-match rates of the default operating-point sweep (fairness over a range of operating points)
FPR_GRID = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2)

#: panel measures drawn by :func:`plot_operating_points`
SWEEP_MEASURES = ("GARBE", "FDR", "max/geomean FMR", "max/geomean FNMR", "max/min FMR", "max/min FNMR")


# ----------------------------------------------------------------------------- formulas (last axis = groups)
def max_geomean(x: np.ndarray) -> np.ndarray:
    """NIST FRTE Max/GeoMean of rates along the last axis."""
    x = np.asarray(x, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        gm = np.exp(np.mean(np.log(x), axis=-1))
        return np.max(x, axis=-1) / gm


def max_min_ratio(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.max(x, axis=-1) / np.min(x, axis=-1)


def gini(x: np.ndarray) -> np.ndarray:
    r"""Small-sample Gini coefficient :math:`\frac{G}{G−1}\sum_i\sum_j|x_i − x_j| / (2G^2\bar x)`."""
    x = np.asarray(x, float)
    G = x.shape[-1]
    diff = np.abs(x[..., :, None] - x[..., None, :]).sum(axis=(-1, -2))
    with np.errstate(divide="ignore", invalid="ignore"):
        return G / (G - 1) * diff / (2 * G * G * np.mean(x, axis=-1))


def garbe(fmr: np.ndarray, fnmr: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    return alpha * gini(fmr) + (1 - alpha) * gini(fnmr)


def fdr(fmr: np.ndarray, fnmr: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    a = np.max(fmr, axis=-1) - np.min(fmr, axis=-1)
    b = np.max(fnmr, axis=-1) - np.min(fnmr, axis=-1)
    return 1 - (alpha * a + (1 - alpha) * b)


# ----------------------------------------------------------------------------- result
@dataclass
class FairnessPanel:
    """``table``: one row per operating point and measure (``value, lo, hi``); ``groups``: per
    group and operating point ``fmr, fnmr`` (and ``act_dcf, cllr``) with intervals; ``settings``;
    ``replicates`` (measure name → ``(B,)`` array)."""

    table: pd.DataFrame
    groups: pd.DataFrame
    settings: dict = field(default_factory=dict)
    replicates: dict = field(default_factory=dict)


def operating_point_sweep(panel: FairnessPanel) -> pd.DataFrame:
    """The panel's measures over its operating points as one table: the rows of ``panel.table``
    whose operating point is an overall-FPR target, with the target as column ``fpr_target``
    (sorted), for a table or :func:`plot_operating_points`."""
    t = panel.table
    t = t[t["operating_point"].astype(str).str.startswith("overall FPR ")].copy()
    t.insert(1, "fpr_target", t["operating_point"].str.slice(len("overall FPR ")).astype(float))
    return t.sort_values(["measure", "fpr_target"], kind="stable").reset_index(drop=True)


def plot_operating_points(panel: FairnessPanel, measures: Sequence[str] = SWEEP_MEASURES, title: str | None = None) -> Any:
    """Fairness over a range of operating points: each panel measure (one axis per measure) against the
    overall FPR target of the threshold (log scale), with its bootstrap interval as a band; the
    overall-EER operating point, if present, as a marker with its interval.  Returns the figure."""
    import matplotlib.pyplot as plt

    sw = operating_point_sweep(panel)
    present = [m for m in measures if m in set(sw["measure"])]
    if not present:
        raise SubgroupError("the panel has no overall-FPR operating points to sweep "
                            "(call fairness_panel with operating_points=[{'fpr': f}, ...])")
    eer = panel.table[panel.table["operating_point"] == "overall EER"].set_index("measure")
    ncol = min(3, len(present))
    nrow = -(-len(present) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.3 * ncol, 2.6 * nrow), squeeze=False)
    for ax, m in zip(axes.ravel(), present):
        d = sw[sw["measure"] == m]
        ax.plot(d["fpr_target"], d["value"], "o-", ms=3, lw=1.2)
        if d["lo"].notna().any():
            ax.fill_between(d["fpr_target"], d["lo"], d["hi"], alpha=0.25, lw=0)
        if m in eer.index:
            pfa = panel.table[(panel.table["operating_point"] == "overall EER")]
            r = eer.loc[m]
            x = float(panel.settings.get("eer_fpr", np.nan))
            if np.isfinite(x) and len(pfa):
                ax.errorbar([x], [r["value"]], yerr=np.clip([[r["value"] - r["lo"]], [r["hi"] - r["value"]]], 0, None)
                            if np.isfinite(r["lo"]) else None, fmt="s", color="black", ms=4, capsize=2,
                            label="overall EER")
                ax.legend(fontsize=6)
        ax.set_xscale("log")
        ax.set_title(m, fontsize=9)
        ax.set_xlabel("overall FPR at the threshold", fontsize=8)
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=7)
    for ax in axes.ravel()[len(present):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_group_ape(trials: pd.DataFrame, group: str, *, score: str = "score", label: str = "label",
                   positive: Any = None, title: str | None = None) -> Any:
    """Per-group Bayes error-rate (APE) plot of LLR scores (:func:`scoremix.ape.ape_curve` per level of
    ``group``: actual solid, PAV minimum dashed): calibration fairness is the gap between a group's two
    curves compared across groups.  Returns the figure."""
    import matplotlib.pyplot as plt

    from scoremix.ape import ape_curve, plot_ape

    for c in (group, score, label):
        if c not in trials.columns:
            raise SubgroupError(f"the trial table has no column {c!r} (columns: {list(trials.columns)})")
    y = np.asarray(label_to_binary(trials[label], positive=positive, column=label)).astype(int)
    curves = {}
    for lev in sorted(pd.unique(trials[group].dropna().astype(str))):
        m = (trials[group].astype(str) == lev).to_numpy()
        if y[m].min() == y[m].max():
            raise SubgroupError(f"group {lev!r} of {group!r} has trials of one class only")
        curves[lev] = ape_curve(trials[score].to_numpy(float)[m], y[m])
    fig, ax = plt.subplots(figsize=(6.5, 4))
    plot_ape(curves, ax=ax, title=title or f"Bayes error rate per {group}")
    fig.tight_layout()
    return fig


class _Data:
    def __init__(self, s, y, g, cl, G):
        order = np.argsort(s, kind="stable")
        self.s, self.y, self.g, self.cl = s[order], y[order], g[order], cl[order]
        self.G = G
        self.first = np.flatnonzero(np.r_[True, self.s[1:] != self.s[:-1]])
        self.u = self.s[self.first]

    def thresholds(self, w: np.ndarray, ops: list) -> list[float]:
        pw, nw = w * self.y, w * (1 - self.y)
        cp = np.r_[0.0, np.cumsum(pw)][self.first]
        cn = np.r_[0.0, np.cumsum(nw)][self.first]
        P, N = pw.sum(), nw.sum()
        pmiss, pfa = cp / P, (N - cn) / N
        out = []
        for op in ops:
            if op == "eer":
                out.append(float(self.u[int(np.argmin(np.abs(pmiss - pfa)))]))
            elif isinstance(op, tuple):  # ("fpr", target)
                ok = np.flatnonzero(pfa <= op[1])
                out.append(float(self.u[ok[0]]) if ok.size else float(np.inf))
            else:
                out.append(float(op))
        return out

    def rates(self, w: np.ndarray, tau: float) -> tuple[np.ndarray, np.ndarray]:
        acc = self.s >= tau
        G = self.G
        neg, pos = self.y == 0, self.y == 1
        with np.errstate(divide="ignore", invalid="ignore"):
            fmr = np.bincount(self.g, w * (neg & acc), G) / np.bincount(self.g, w * neg, G)
            fnmr = np.bincount(self.g, w * (pos & ~acc), G) / np.bincount(self.g, w * pos, G)
        return fmr, fnmr

    def calibration(self, w: np.ndarray, p: float, c_miss: float, c_fa: float) -> tuple[np.ndarray, np.ndarray]:
        G = self.G
        theta = np.log((1 - p) * c_fa / (p * c_miss))
        fmr, fnmr = self.rates(w, theta)
        act = (p * c_miss * fnmr + (1 - p) * c_fa * fmr) / min(p * c_miss, (1 - p) * c_fa)
        lt = np.where(self.y == 1, np.logaddexp(0, -self.s), np.logaddexp(0, self.s))
        with np.errstate(divide="ignore", invalid="ignore"):
            cp = np.bincount(self.g, w * lt * self.y, G) / np.bincount(self.g, w * self.y, G)
            cn = np.bincount(self.g, w * lt * (1 - self.y), G) / np.bincount(self.g, w * (1 - self.y), G)
        return act, (cp + cn) / (2 * np.log(2))


def _op_name(op: Any) -> str:
    if op == "eer":
        return "overall EER"
    if isinstance(op, tuple):
        return f"overall FPR {op[1]:g}"
    return f"threshold {op:g}"


def fairness_panel(trials: pd.DataFrame, group: str, *, score: str = "score", label: str = "label",
                   speaker: str | None = "speaker", positive: Any = None,
                   operating_points: Sequence[Any] = ("eer",), alpha: float = 0.5, llr: bool = False,
                   p_target: float = 0.05, c_miss: float = 1.0, c_fa: float = 1.0, n_boot: int = 0,
                   seed: int | np.random.Generator | None = None, level: float = 0.95,
                   interval: str = "percentile") -> FairnessPanel:
    """The fairness panel of the module docstring for the groups of column ``group``.

    ``operating_points``: any of ``"eer"``, ``{"fpr": f}`` / ``("fpr", f)`` (threshold where the overall
    FPR first drops to ``f``), or a number (a fixed threshold); fairness over a range of operating
    points is one call with several.  ``llr=True`` adds per-group actDCF and Cllr.  ``interval``:
    ``"percentile"`` (default; covered 0.93–0.96 at 8–30 speakers per group in
    ``benchmarks/coverage_fairness_panel.py``) or ``"expanded"`` (Hesterberg; over-covers there, 0.97–0.99).
    """
    from scoremix.resampling.bootstrap import draw_cluster_weights
    from scoremix.resampling.intervals import (
        expanded_percentile_interval,
        percentile_interval,
    )

    for c in (group, score, label, speaker):
        if c is not None and c not in trials.columns:
            raise SubgroupError(f"the trial table has no column {c!r} (columns: {list(trials.columns)})")
    if interval not in ("percentile", "expanded"):
        raise SubgroupError(f"interval must be 'percentile' or 'expanded', got {interval!r}")
    if not 0 <= alpha <= 1:
        raise SubgroupError(f"alpha must be in [0, 1], got {alpha}")
    ops: list[Any] = []
    for op in operating_points:
        if isinstance(op, dict) and set(op) == {"fpr"}:
            ops.append(("fpr", float(op["fpr"])))
        elif isinstance(op, tuple) and len(op) == 2 and op[0] == "fpr":
            ops.append(("fpr", float(op[1])))
        elif op == "eer" or isinstance(op, (int, float)):
            ops.append(op)
        else:
            raise SubgroupError(f"operating point {op!r}: expected 'eer', {{'fpr': f}} or a number")
    s = trials[score].to_numpy(float)
    bad = np.flatnonzero(~np.isfinite(s))
    if bad.size:
        raise SubgroupError(f"column {score!r} has a non-finite score at row {int(bad[0])}")
    y = np.asarray(label_to_binary(trials[label], positive=positive, column=label)).astype(float)
    if trials[group].isna().any():
        raise SubgroupError(f"column {group!r} is missing at row {int(np.flatnonzero(trials[group].isna())[0])}")
    levels, g = np.unique(trials[group].astype(str), return_inverse=True)
    G = levels.size
    if G < 2:
        raise SubgroupError(f"column {group!r} has one group only ({list(levels)}); the panel compares groups")
    for k in range(G):
        m = g == k
        if y[m].min() == y[m].max():
            raise SubgroupError(f"group {levels[k]!r} of {group!r} has trials of one class only")
    if speaker is None:
        cl = np.arange(s.size)
    else:
        cl = np.unique(trials[speaker].astype(str), return_inverse=True)[1]
    C = int(cl.max()) + 1
    strata = np.full(C, -1)
    strata[cl] = g
    mixed = pd.Series(g).groupby(cl).nunique()
    if (mixed > 1).any():
        raise SubgroupError(f"speaker {np.unique(trials[speaker].astype(str))[mixed.index[mixed > 1][0]]!r} "
                            f"belongs to more than one {group!r} group")
    n_spk = np.bincount(strata, minlength=G)
    D = _Data(s, y, g, cl, G)

    def measures(w: np.ndarray) -> dict[str, np.ndarray]:
        # a group with rate 0 gives Max/GeoMean = inf and NaN Gini/GARBE on purpose (documented); no warnings
        with np.errstate(all="ignore"):
            return _measures(w)

    def _measures(w: np.ndarray) -> dict[str, np.ndarray]:
        out: dict[str, Any] = {}
        for op, tau in zip(ops, D.thresholds(w, ops)):
            fmr, fnmr = D.rates(w, tau)
            name = _op_name(op)
            out[(name, "threshold")] = tau
            for rate, x in (("FMR", fmr), ("FNMR", fnmr)):
                out[(name, f"max/geomean {rate}")] = max_geomean(x)
                out[(name, f"max/min {rate}")] = max_min_ratio(x)
                out[(name, f"gini {rate}")] = gini(x)
                for k in range(G):
                    out[(name, f"{rate.lower()}|{levels[k]}")] = x[k]
            out[(name, "GARBE")] = garbe(fmr, fnmr, alpha)
            out[(name, "FDR")] = fdr(fmr, fnmr, alpha)
        if llr:
            act, cl_ = D.calibration(w, p_target, c_miss, c_fa)
            for k in range(G):
                out[("calibration", f"act_dcf|{levels[k]}")] = act[k]
                out[("calibration", f"cllr|{levels[k]}")] = cl_[k]
            out[("calibration", "max-min act_dcf")] = act.max() - act.min()
            out[("calibration", "max-min cllr")] = cl_.max() - cl_.min()
        return {k: float(v) for k, v in out.items()}

    point = measures(np.ones(s.size))
    eer_fpr = float("nan")
    if "eer" in ops:
        tau = D.thresholds(np.ones(s.size), ["eer"])[0]
        eer_fpr = float(np.mean(s[y == 0] >= tau))
    reps: dict[Any, np.ndarray] = {}
    if n_boot:
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        M = draw_cluster_weights(strata, int(n_boot), rng)
        vals = [measures(M[D.cl, b]) for b in range(int(n_boot))]
        reps = {k: np.array([v[k] for v in vals]) for k in point}
    rows, grows = [], {}
    for (op, name), v in point.items():
        lo = hi = np.nan
        if n_boot:
            gi = [k for k in range(G) if name.endswith(f"|{levels[k]}")]
            n = n_spk[gi[0]] if gi else n_spk.min()
            r = np.where(np.isfinite(reps[(op, name)]), reps[(op, name)], np.nan)
            if interval == "expanded":
                a, b = expanded_percentile_interval(r[None, :], np.array([float(n)]), level)
            else:
                a, b = percentile_interval(r[None, :], level)
            lo, hi = float(np.ravel(a)[0]), float(np.ravel(b)[0])
        if "|" in name:
            meas, lev = name.split("|", 1)
            grows.setdefault((op, lev), {"operating_point": op, "group": lev})
            grows[(op, lev)].update({meas: v, f"{meas}_lo": lo, f"{meas}_hi": hi})
        else:
            rows.append({"operating_point": op, "measure": name, "value": v, "lo": lo, "hi": hi})
    groups_df = pd.DataFrame(list(grows.values()))
    groups_df["n_speakers"] = [int(n_spk[list(levels).index(lv)]) for lv in groups_df["group"]]
    settings = {"group": group, "alpha": alpha, "operating_points": [_op_name(o) for o in ops], "n_boot": int(n_boot),
                "level": level, "llr": llr, "p_target": p_target, "c_miss": c_miss, "c_fa": c_fa, "eer_fpr": eer_fpr,
                "interval": f"{interval} bootstrap interval, speakers resampled within groups" if n_boot else None}
    return FairnessPanel(pd.DataFrame(rows), groups_df, settings, {f"{k[0]}: {k[1]}": v for k, v in reps.items()})
