"""Fairness plots (matplotlib; every function returns the Figure).

* :func:`plot_subgroup_det` — DET curve per subgroup on probit axes, the overall DET as a
  baseline, markers at the overall threshold ``τ*`` (filled) and at each subgroup's own
  minimiser (hollow); unreliable subgroups dashed and marked ``(unreliable)``; optional
  speaker-bootstrap bands (:func:`det_bootstrap_band`).
* :func:`plot_score_distributions` — score histograms per subgroup and class.
* :func:`plot_ratio_scatter` — ``ratio_overall`` of two systems against each other, with
  interval whiskers and the diagonal (equal fairness).
* :func:`plot_forest` — a ratio per subgroup with intervals and the reference line at 1.
"""

from __future__ import annotations

from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from scoremix.metrics import det_axis_ticks, det_curve, probit, rates_at  # noqa: E402


__all__ = ["det_bootstrap_band", "plot_subgroup_det", "plot_score_distributions", "plot_ratio_scatter", "plot_forest"]

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


def det_bootstrap_band(scores: np.ndarray, y: np.ndarray, clusters: np.ndarray, x_probit: np.ndarray,
                       n_boot: int = 200, ci: float = 0.95, random_state: int | np.random.Generator | None = None,
                       n_thresholds: int = 512) -> tuple[np.ndarray, np.ndarray]:
    r"""Pointwise speaker-bootstrap band of a DET curve (vertical averaging in probit space).

    Replicate ``b`` draws the clusters (speakers) with replacement; trial ``i`` enters with
    weight ``w_i = m_{c(i),b}``.  At the thresholds ``t_k`` (``n_thresholds`` score
    quantiles)

    .. math::

        P_{miss,b}(t_k) = rac{\sum_{y_i=1} w_i [s_i < t_k]}{\sum_{y_i=1} w_i},\qquad
        P_{fa,b}(t_k) = rac{\sum_{y_i=0} w_i [s_i \ge t_k]}{\sum_{y_i=0} w_i},

    the replicate's DET ``probit(P_miss)`` is linearly interpolated at the abscissae
    ``x_probit = probit(P_fa)``, and the band is the pointwise ``(1-ci)/2, (1+ci)/2``
    percentiles over replicates (probabilities clipped to ``[1e-5, 1-1e-5]``).

    Returns
    -------
    lo, hi:
        ``(len(x_probit),)`` arrays in probit units.
    """
    from scoremix.resampling.bootstrap import draw_cluster_weights

    s = np.asarray(scores, float)
    y = np.asarray(y).astype(bool)
    _, cl = np.unique(np.asarray(clusters), return_inverse=True)
    C = int(cl.max()) + 1
    rng = random_state if isinstance(random_state, np.random.Generator) else np.random.default_rng(random_state)
    M = draw_cluster_weights(np.zeros(C, dtype=np.int64), n_boot, rng)  # (C, B)
    thr = np.unique(np.quantile(s, np.linspace(0.0, 1.0, n_thresholds)))
    thr = np.r_[thr, np.inf]
    b = np.searchsorted(thr, s, side="right")  # trial is below t_k  <=>  b <= k
    K = thr.size + 1
    import scipy.sparse as sparse

    def block_counts(mask: np.ndarray) -> np.ndarray:
        A = sparse.csr_matrix((np.ones(int(mask.sum())), (b[mask], cl[mask])), shape=(K, C))
        return np.cumsum(np.asarray(A @ M), axis=0)[: thr.size]  # (T, B) weighted count below t_k

    below_pos, below_neg = block_counts(y), block_counts(~y)
    tot_pos, tot_neg = M.T @ np.bincount(cl[y], minlength=C), M.T @ np.bincount(cl[~y], minlength=C)
    with np.errstate(invalid="ignore", divide="ignore"):
        pm = below_pos / tot_pos[None, :]
        pf = 1.0 - below_neg / tot_neg[None, :]
    xp, yp = probit(np.clip(pf, _EPS, 1 - _EPS)), probit(np.clip(pm, _EPS, 1 - _EPS))
    curves = np.empty((n_boot, np.size(x_probit)))
    for k in range(n_boot):  # p_fa decreases with t: reverse for np.interp
        curves[k] = np.interp(x_probit, xp[::-1, k], yp[::-1, k])
    q = (1.0 - ci) / 2.0
    return np.quantile(curves, q, axis=0), np.quantile(curves, 1.0 - q, axis=0)


def plot_subgroup_det(result: Any, subgroups: Sequence[str] | None = None, ax: Any = None,
                      p_min: float | None = None, p_max: float = 0.5, legend: bool = True,
                      bands: bool = False, n_boot: int = 200, ci: float = 0.95,
                      random_state: int | None = None, rule_of_30: bool = True) -> Any:
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
    bands, n_boot, ci, random_state:
        draw each subgroup's pointwise ``ci`` speaker-bootstrap band
        (:func:`det_bootstrap_band`, ``n_boot`` replicates, seeded by ``random_state``).
    rule_of_30:
        dotted lines where the overall curve rests on 30 errors (Doddington; BOSARIS style,
        :func:`scoremix.binomial.draw_rule_of_30`).
    """
    prep = result._prepared
    if prep is None:
        raise ValueError("the result does not carry its trials; recompute it with subgroup_dcf")
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(6, 6))
    s, y = prep.scores, prep.y
    ov = det_curve(s, y)
    ax.plot(probit(ov.p_fa, _EPS), probit(ov.p_miss, _EPS), color="black", lw=2, label="overall")
    if rule_of_30:
        from scoremix.binomial import draw_rule_of_30

        draw_rule_of_30(ax, ov.n_pos, ov.n_neg)
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
        if bands:
            xs = np.linspace(probit(1e-4), probit(1 - 1e-4), 200)
            lo, hi = det_bootstrap_band(s[idx], yg, prep.clusters[idx], xs, n_boot=n_boot, ci=ci,
                                        random_state=None if random_state is None else random_state + k)
            ax.fill_between(xs, lo, hi, color=colors[k], alpha=0.15, lw=0)
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


def plot_score_distributions(result: Any, subgroups: Sequence[str] | None = None,
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
            ax.axvline(result.threshold, color="black", ls=":", lw=1, label="τ* (overall minDCF threshold)")
        rel = bool(tab.loc[g, "reliable"])
        ax.set_title(name + ("" if rel else " (unreliable)"), fontsize=9)
        ax.set_ylabel("density", fontsize=8)
    for ax in axes.ravel()[len(names):]:
        ax.axis("off")
    for ax in axes[-1]:  # bottom row (shared x axis)
        ax.set_xlabel("score", fontsize=8)
    if len(names) > ncols:  # a panel above an empty one in the last row shows its tick labels
        for ax in axes.ravel()[len(names) - ncols:len(names)]:
            ax.set_xlabel("score", fontsize=8)
    axes.ravel()[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def _interval(tab: pd.DataFrame, col: str) -> np.ndarray | None:
    """``(2, n)`` array of interval ends ``[lo, hi]``, or ``None`` without interval columns.

    Intervals are drawn as segments from ``lo`` to ``hi`` (not as error bars around the
    point), because a percentile or credible interval need not contain the point estimate.
    """
    if f"{col}_lo" in tab and f"{col}_hi" in tab:
        return np.vstack([tab[f"{col}_lo"].to_numpy(float), tab[f"{col}_hi"].to_numpy(float)])
    return None


def plot_ratio_scatter(compare: Any, measure: str = "ratio_overall",
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
        xe, ye = _interval(ta, measure), _interval(tb, measure)
        labels = list(ta["subgroup"])
        rel = (ta["reliable"] & tb["reliable"]).to_numpy() if "reliable" in ta and "reliable" in tb \
            else np.ones(len(x), bool)
    else:
        names = names or compare.systems
        t = compare.table
        a, b = compare.systems
        x, y = t[f"{measure}_{a}"].to_numpy(float), t[f"{measure}_{b}"].to_numpy(float)
        xe, ye = _interval(t, f"{measure}_{a}"), _interval(t, f"{measure}_{b}")
        labels = list(t["subgroup"])
        rel = np.ones(len(x), bool)
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(5.5, 5.5))
    ok = np.isfinite(x) & np.isfinite(y)
    if xe is not None:
        ax.hlines(y[ok], xe[0, ok], xe[1, ok], color="gray", alpha=0.6, lw=1)
    if ye is not None:
        ax.vlines(x[ok], ye[0, ok], ye[1, ok], color="gray", alpha=0.6, lw=1)
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
    err = _interval(tab, measure)
    rel = tab["reliable"].to_numpy(bool) if "reliable" in tab else np.ones(n, bool)
    if err is not None:
        fin = np.isfinite(err).all(axis=0)
        ax.hlines(ypos[fin], err[0, fin], err[1, fin], color="gray", lw=1.2)
        up = np.isfinite(err[0]) & np.isposinf(err[1])  # unbounded above: a line running off the right edge
        if up.any():
            edge = np.nanmax(np.r_[err[np.isfinite(err)], v[np.isfinite(v)], ref]) * 1.15
            ax.hlines(ypos[up], err[0, up], edge, color="gray", lw=1.2, ls=":")
            ax.scatter(np.full(up.sum(), edge), ypos[up], marker=">", color="gray", zorder=3,
                       label="interval unbounded above")
            ax.legend(fontsize=7, loc="lower right")
    ax.scatter(v[rel], ypos[rel], color="tab:blue", zorder=3)
    ax.scatter(v[~rel], ypos[~rel], facecolors="none", edgecolors="tab:red", zorder=3)
    labels = [f"{s}{'' if r else ' (unreliable)'}" for s, r in zip(tab["subgroup"], rel)]
    ax.set_yticks(ypos, labels, fontsize=8)
    ax.axvline(ref, color="black", ls="--", lw=1)
    ax.set_xlabel(measure)
    fig.tight_layout()
    return fig
