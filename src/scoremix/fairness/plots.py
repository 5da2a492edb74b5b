"""Fairness plots (matplotlib; every function returns the Figure).

* :func:`plot_subgroup_det` — DET curve per subgroup on probit axes, the overall DET as a
  baseline, markers at the overall threshold ``τ*`` (filled) and at each subgroup's own
  minimiser (hollow); unreliable subgroups dashed and marked ``(unreliable)``.
* :func:`plot_score_distributions` — score histograms per subgroup and class.
* :func:`plot_ratio_scatter` — ``ratio_overall`` of two systems against each other, with
  interval whiskers and the diagonal (equal fairness).
* :func:`plot_forest` — a ratio per subgroup with intervals and the reference line at 1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from scoremix.metrics import det_axis_ticks, det_curve, probit, rates_at  # noqa: E402

if TYPE_CHECKING:  # pragma: no cover
    from scoremix.fairness.compare import CompareResult
    from scoremix.fairness.sveva import SubgroupDCFResult

__all__ = ["plot_subgroup_det", "plot_score_distributions", "plot_ratio_scatter", "plot_forest"]

_EPS = 1e-5


def _probit_axes(ax: Any, p_min: float, p_max: float) -> None:
    t = det_axis_ticks(p_min, p_max)
    ax.set_xticks(t.positions, t.labels)
    ax.set_yticks(t.positions, t.labels)
    lo, hi = probit(p_min), probit(p_max)
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("false positive rate (%)")
    ax.set_ylabel("false negative rate (%)")
    ax.grid(True, alpha=0.3)


def plot_subgroup_det(result: "SubgroupDCFResult", subgroups: Sequence[str] | None = None, ax: Any = None,
                      p_min: float | None = None, p_max: float = 0.5, legend: bool = True) -> Any:
    """DET curves per subgroup with the overall DET baseline (see module docstring).

    Parameters
    ----------
    result:
        output of :func:`scoremix.fairness.subgroup_dcf` (keeps the trial scores).
    subgroups:
        subgroup names to draw (default: all non-empty).
    ax:
        axes to draw on (a new figure otherwise).
    p_min, p_max:
        axis range in probability (``p_min=None``: 1e-3, or 1e-4 when a marker lies below 1e-3).
    """
    prep = result._prepared
    if prep is None:
        raise ValueError("the result does not carry its trials; recompute it with subgroup_dcf")
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(6, 6))
    s, y = prep.scores, prep.y
    ov = det_curve(s, y)
    ax.plot(probit(ov.p_fa, _EPS), probit(ov.p_miss, _EPS), color="black", lw=2, label="overall")
    tstar = result.threshold
    r = rates_at(s, y, [tstar])
    ax.plot(probit(r.p_fa, _EPS), probit(r.p_miss, _EPS), "k*", ms=12, label="τ* (overall min DCF)")
    tab = result.table
    names = list(tab["subgroup"]) if subgroups is None else list(subgroups)
    cmap = plt.cm.tab10 if len(names) <= 10 else plt.cm.tab20
    colors = [cmap(k % cmap.N) for k in range(len(names))]
    marker_rates = list(np.r_[r.p_fa, r.p_miss])
    for k, name in enumerate(names):
        rows = tab.index[tab["subgroup"] == name]
        if len(rows) == 0:
            raise ValueError(f"unknown subgroup {name!r}")
        g = int(rows[0])
        idx = prep.sg.members(g)
        yg = y[idx]
        if idx.size == 0 or yg.min() == yg.max():
            continue
        reliable = bool(tab.loc[g, "reliable"])
        c = det_curve(s[idx], yg)
        lab = name + ("" if reliable else " (unreliable)")
        ax.plot(probit(c.p_fa, _EPS), probit(c.p_miss, _EPS), color=colors[k], lw=1.2,
                ls="-" if reliable else "--", label=lab)
        at = rates_at(s[idx], yg, [tstar, tab.loc[g, "threshold_own"]])
        ax.plot(probit(at.p_fa[:1], _EPS), probit(at.p_miss[:1], _EPS), "o", color=colors[k], ms=6)
        ax.plot(probit(at.p_fa[1:], _EPS), probit(at.p_miss[1:], _EPS), "o", mfc="none", color=colors[k], ms=8)
        marker_rates += list(np.r_[at.p_fa, at.p_miss])
    if p_min is None:
        pos = [v for v in marker_rates if v > 0]
        p_min = 1e-4 if pos and min(pos) < 1e-3 else 1e-3
    _probit_axes(ax, p_min, p_max)
    ax.set_title("DET per subgroup (●: at τ*, ○: own minimiser)")
    if legend:
        ax.legend(fontsize=7, loc="upper right")
    return fig


def plot_score_distributions(result: "SubgroupDCFResult", subgroups: Sequence[str] | None = None,
                             bins: int = 50, ncols: int = 3) -> Any:
    """Histograms (densities) of scores per subgroup, one panel per subgroup, both classes;
    the overall ``τ*`` as a vertical line."""
    prep = result._prepared
    if prep is None:
        raise ValueError("the result does not carry its trials; recompute it with subgroup_dcf")
    tab = result.table
    names = [n for n, tot in zip(tab["subgroup"], tab["n_pos"] + tab["n_neg"]) if tot > 0] \
        if subgroups is None else list(subgroups)
    nrows = int(np.ceil(len(names) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(4 * ncols, 2.6 * nrows), squeeze=False, sharex=True)
    edges = np.histogram_bin_edges(prep.scores, bins=bins)
    for ax, name in zip(axes.ravel(), names):
        g = int(tab.index[tab["subgroup"] == name][0])
        idx = prep.sg.members(g)
        for cls, col, lab in ((0, "tab:red", "negative"), (1, "tab:blue", "positive")):
            v = prep.scores[idx][prep.y[idx] == cls]
            if v.size:
                ax.hist(v, bins=edges, density=True, histtype="step", color=col, label=lab)
        if np.isfinite(result.threshold):
            ax.axvline(result.threshold, color="black", ls=":", lw=1)
        rel = bool(tab.loc[g, "reliable"])
        ax.set_title(name + ("" if rel else " (unreliable)"), fontsize=9)
    for ax in axes.ravel()[len(names):]:
        ax.axis("off")
    axes.ravel()[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def _err(tab: pd.DataFrame, col: str) -> np.ndarray | None:
    if f"{col}_lo" in tab and f"{col}_hi" in tab:
        v = tab[col].to_numpy(float)
        return np.vstack([v - tab[f"{col}_lo"].to_numpy(float), tab[f"{col}_hi"].to_numpy(float) - v])
    return None


def plot_ratio_scatter(compare: "CompareResult | tuple[pd.DataFrame, pd.DataFrame]", measure: str = "ratio_overall",
                       names: tuple[str, str] | None = None, ax: Any = None, annotate: bool = True) -> Any:
    """Scatter of a per-subgroup ratio for system A (x) against system B (y) with
    interval whiskers and the diagonal ``y = x``.

    ``compare`` is a :class:`~scoremix.fairness.compare.CompareResult` or two
    subgroup tables (from :func:`subgroup_dcf`) with the same subgroups.
    """
    if isinstance(compare, tuple):
        ta, tb = compare
        names = names or ("A", "B")
        x, y = ta[measure].to_numpy(float), tb[measure].to_numpy(float)
        xe, ye = _err(ta, measure), _err(tb, measure)
        labels = list(ta["subgroup"])
        rel = (ta["reliable"] & tb["reliable"]).to_numpy() if "reliable" in ta and "reliable" in tb \
            else np.ones(len(x), bool)
    else:
        names = names or compare.systems
        t = compare.table
        a, b = compare.systems
        x, y = t[f"{measure}_{a}"].to_numpy(float), t[f"{measure}_{b}"].to_numpy(float)
        xe, ye = _err(t, f"{measure}_{a}"), _err(t, f"{measure}_{b}")
        labels = list(t["subgroup"])
        rel = np.ones(len(x), bool)
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(5.5, 5.5))
    ok = np.isfinite(x) & np.isfinite(y)
    ax.errorbar(x[ok], y[ok], xerr=None if xe is None else xe[:, ok], yerr=None if ye is None else ye[:, ok],
                fmt="none", ecolor="gray", alpha=0.6, lw=1)
    ax.scatter(x[ok & rel], y[ok & rel], color="tab:blue", zorder=3, label="reliable")
    if (ok & ~rel).any():
        ax.scatter(x[ok & ~rel], y[ok & ~rel], facecolors="none", edgecolors="tab:red", zorder=3,
                   label="unreliable")
    lim = [0, np.nanmax(np.r_[x[ok], y[ok], 1.0]) * 1.1]
    ax.plot(lim, lim, "k--", lw=1, label="equal")
    ax.axhline(1, color="gray", lw=0.5)
    ax.axvline(1, color="gray", lw=0.5)
    if annotate:
        for xi, yi, lab in zip(x[ok], y[ok], np.asarray(labels)[ok]):
            ax.annotate(str(lab), (xi, yi), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel(f"{measure} ({names[0]})")
    ax.set_ylabel(f"{measure} ({names[1]})")
    ax.legend(fontsize=8)
    return fig


def plot_forest(table: pd.DataFrame, measure: str = "ratio_overall", ax: Any = None, ref: float = 1.0) -> Any:
    """Forest plot: ``measure`` per subgroup with its interval (when the table has
    ``<measure>_lo/_hi``); unreliable subgroups drawn hollow and labelled."""
    if measure not in table:
        raise ValueError(f"table has no column {measure!r}")
    tab = table.reset_index(drop=True)
    n = len(tab)
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(6, 0.35 * n + 1.2))
    ypos = np.arange(n)[::-1]
    v = tab[measure].to_numpy(float)
    err = _err(tab, measure)
    rel = tab["reliable"].to_numpy(bool) if "reliable" in tab else np.ones(n, bool)
    if err is not None:
        ax.errorbar(v, ypos, xerr=np.where(np.isfinite(err), err, 0), fmt="none", ecolor="gray", lw=1.2)
    ax.scatter(v[rel], ypos[rel], color="tab:blue", zorder=3)
    ax.scatter(v[~rel], ypos[~rel], facecolors="none", edgecolors="tab:red", zorder=3)
    labels = [f"{s}{'' if r else ' (unreliable)'}" for s, r in zip(tab["subgroup"], rel)]
    ax.set_yticks(ypos, labels, fontsize=8)
    ax.axvline(ref, color="black", ls="--", lw=1)
    ax.set_xlabel(measure)
    fig.tight_layout()
    return fig
