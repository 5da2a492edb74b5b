"""Figures shared by the study tasks and the report (forest and caterpillar plots, PNG
rendering).  A leaf of the study package: it imports only matplotlib and
:mod:`scoremix.report_html`, so that :mod:`~scoremix.study.tasks` (which draws forest plots in
the workers) and :mod:`~scoremix.study.report` can both use it without importing each other."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = ["agg_pyplot", "png_of", "forest_figure", "caterpillar_figure", "MAX_CATERPILLAR_LEVELS"]

#: Levels drawn per caterpillar plot (the most extreme ones when there are more).
MAX_CATERPILLAR_LEVELS = 80


def png_of(fig: Any) -> bytes:
    """Render a matplotlib figure to PNG bytes and close it."""
    import matplotlib.pyplot as plt

    from scoremix.report_html import figure_to_png

    try:
        return figure_to_png(fig)
    finally:
        plt.close(fig)


def agg_pyplot() -> Any:
    """``matplotlib.pyplot`` on the non-interactive Agg backend (workers have no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# ---------------------------------------------------------------------------------------
# figures
# ---------------------------------------------------------------------------------------

def forest_figure(fe: pd.DataFrame, title: str, ref: float = 0.0, xlabel: str = "estimate (95 % interval)") -> Any:
    """Forest plot: one row per term, one marker (± 95 % interval) per system/backend series.

    ``fe`` has columns ``series``, ``term``, ``estimate``, ``lo``, ``hi``.
    """
    plt = agg_pyplot()
    terms = list(dict.fromkeys(fe["term"]))
    series = list(dict.fromkeys(fe["series"]))
    fig, ax = plt.subplots(figsize=(7, 0.9 + 0.38 * len(terms) * max(1, min(len(series), 4))))
    step = 0.8 / max(len(series), 1)
    colors = plt.cm.tab10(np.arange(len(series)) % 10)
    for k, s in enumerate(series):
        d = fe[fe["series"] == s].set_index("term").reindex(terms)
        ypos = np.arange(len(terms)) - 0.4 + step * (k + 0.5)
        est = d["estimate"].to_numpy(float)
        lo, hi = d["lo"].to_numpy(float), d["hi"].to_numpy(float)
        # percentile intervals need not contain the point estimate: clip the bar lengths at 0
        xerr = np.clip(np.nan_to_num(np.vstack([est - lo, hi - est])), 0.0, None)
        ax.errorbar(est, ypos, xerr=xerr, fmt="o", ms=4, color=colors[k], label=s,
                    capsize=2)
    ax.set_yticks(np.arange(len(terms)), terms, fontsize=8)
    ax.invert_yaxis()
    ax.axvline(ref, color="grey", lw=0.7)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="best")
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def caterpillar_figure(re_: pd.DataFrame, title: str) -> Any:
    """Caterpillar plot: sorted random effects with ± 1.96 conditional SD (posterior SD)."""
    plt = agg_pyplot()
    d = re_.sort_values("estimate").reset_index(drop=True)
    if len(d) > MAX_CATERPILLAR_LEVELS:
        k = MAX_CATERPILLAR_LEVELS // 2
        d = pd.concat([d.iloc[:k], d.iloc[-k:]]).reset_index(drop=True)
        title += f" (the {2 * k} most extreme of {len(re_)} levels)"
    fig, ax = plt.subplots(figsize=(7, 1.0 + 0.16 * len(d)))
    y = np.arange(len(d))
    err = 1.96 * d["condsd"].fillna(0).to_numpy(float)
    ax.errorbar(d["estimate"], y, xerr=err, fmt="o", ms=3, color="tab:blue", ecolor="tab:gray", capsize=0)
    ax.set_yticks(y, d["level"], fontsize=6 if len(d) > 30 else 8)
    ax.axvline(0, color="k", lw=0.7)
    ax.set_xlabel("random effect (± 1.96 conditional SD)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return fig
