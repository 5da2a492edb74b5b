"""``[[models]]`` with ``auto = true``: a score model chosen by :func:`scoremix.score_model`,
its selection table and its out-of-sample validation (:func:`scoremix.validate_model`).

For one system's trials (columns ``score``, ``y`` = 1 for the positive class, the study's
speaker column and the model's ``factors``/``covariates``) :func:`fit_auto` runs

* ``score_model(df, score="score", label="y", speaker=<speaker>, factors=..., covariates=...,
  positive=1)`` — the fit every model-based table of the study then uses;
* for each split in ``validate`` (``"trials"``: every speaker × class × factor cell split at
  random into a fitted share A and a held-out share B; ``"speakers"``: whole speakers held
  out) ``validate_model`` with the same arguments, ``share = validate_share`` and ``seed``;
  the groups compared are, for ``"trials"``, the speakers, every reported subgroup column and,
  per factor, the cells "all positives against the negatives of one level" (overall and per
  subgroup); for ``"speakers"`` the same without the speakers.

:func:`selection_tables` turns ``fit.selection`` into the two tables the report shows (the
candidates with their cross-validated log-likelihood; every stratum fitted freely and every
component predicted with partial pooling); :func:`validation_tables` the validation summaries.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

__all__ = ["OVERALL", "fit_auto", "selection_tables", "validation_groupings", "auto_tables", "validation_figure"]

#: constant column added to the trials so that "all positives vs one factor level" is a grouping
OVERALL = "overall"


def _overall_col(df: pd.DataFrame) -> str:
    return OVERALL if OVERALL not in df.columns else f"_{OVERALL}"


def validation_groupings(split: str, speaker: str, subgroups: Sequence[str], factors: Sequence[str],
                         overall: str = OVERALL) -> tuple[list[str], list[Any]]:
    """``by`` and ``also_by`` of :func:`scoremix.validate_model` for one split (module docstring)."""
    cells: list[Any] = [[g] for g in subgroups]
    for f in factors:
        cells.append(dict(by=[overall], negative_by=f))
        cells += [dict(by=[g], negative_by=f) for g in subgroups]
    if split == "trials":
        return [speaker], cells
    if not cells:
        return [overall], []
    first = cells[0]
    if isinstance(first, dict):
        return [overall], cells
    return first, cells[1:]


def selection_tables(sel: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The candidates table (one row per candidate: name, specification, CV log-likelihood,
    difference from the best, chosen) and the cells table (component, status:
    ``fitted freely`` — one transform per stratum, the model reproduces its distribution — or
    ``predicted`` — partial pooling over speakers)."""
    cand = sel.table.reset_index()
    cells = pd.DataFrame([{"component": f"stratum {s}", "status": "fitted freely"} for s in sel.fitted_freely]
                         + [{"component": p, "status": "predicted"} for p in sel.predicted])
    return cand, cells


def _fixef(fit: Any) -> pd.DataFrame:
    """Latent-scale parameters as a fixed-effects table (``term, estimate, se, lo95, hi95``):
    each stratum's location and log-SD (identified only together with its own transform)
    and any other location coefficient the fit reports (``fit.coef``)."""
    p = fit.params
    levels = list(fit._data.cells.levels)
    rows = [{"term": f"mu[{lv}]", "estimate": float(p.mu[k])} for k, lv in enumerate(levels)]
    rows += [{"term": f"log_sd[{lv}]", "estimate": float(p.lam[k])} for k, lv in enumerate(levels)]
    coef = getattr(fit, "coef", None)
    if coef is not None and len(coef):
        rows += [{"term": str(t), "estimate": float(v)} for t, v in coef.items()]
    fe = pd.DataFrame(rows)
    fe["se"] = np.nan
    fe["lo95"] = np.nan
    fe["hi95"] = np.nan
    return fe


def _ranef(fit: Any) -> pd.DataFrame:
    rows = []
    for grp, frame in fit.ranef.items():
        for term in frame.columns:
            for level, val in frame[term].items():
                rows.append({"group": grp, "term": term, "level": str(level), "estimate": float(val),
                             "condsd": np.nan})
    return pd.DataFrame(rows)


def _label(key: Any) -> str:
    return "/".join(map(str, key)) if isinstance(key, tuple) else str(key)


def validation_tables(val: Any, split: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``val.summary`` and ``val.groups`` as flat tables with a ``split`` column (groups keyed
    by a ``group`` string)."""
    summ = val.summary.reset_index()
    summ.insert(0, "split", split)
    g = val.groups.copy()
    g.insert(0, "group", [_label(k) for k in g.index])
    g = g.reset_index(drop=True)
    g.insert(0, "split", split)
    return summ, g


def validation_figure(groups: pd.DataFrame, title: str, measure: str = "eer") -> Any:
    """Held-out value (B) against the model's and the counting estimate (A), one panel per
    grouping (``cells``)."""
    from scoremix.study.figures import agg_pyplot

    plt = agg_pyplot()
    names = list(dict.fromkeys(groups["cells"]))
    fig, axes = plt.subplots(1, len(names), figsize=(3.6 * len(names), 3.6), squeeze=False)
    for ax, name in zip(axes[0], names):
        g = groups[groups["cells"] == name]
        t = 100 * g[f"{measure}_heldout"]
        ax.scatter(t, 100 * g[f"{measure}_count"], s=10, alpha=0.6, label="counting (A)")
        ax.scatter(t, 100 * g[f"{measure}_model"], s=10, alpha=0.8, label="model (A)")
        hi = float(np.nanmax(np.r_[t, 100 * g[f"{measure}_count"], 100 * g[f"{measure}_model"], 1e-3]))
        ax.plot([0, hi], [0, hi], color="grey", lw=0.7)
        ax.set_title(name, fontsize=8)
        ax.set_xlabel(f"held-out {measure} % (B)", fontsize=8)
        ax.set_ylabel("estimate from A (%)", fontsize=8)
    axes[0][0].legend(fontsize=7, frameon=False)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def fit_auto(df: pd.DataFrame, *, speaker: str, factors: Sequence[str] = (), covariates: Sequence[str] = (),
             subgroups: Sequence[str] = (), validate: Sequence[str] = ("trials", "speakers"), share: float = 0.2,
             seed: int = 0, pool_shapes: bool = False) -> tuple[Any, dict[str, Any]]:
    """Fit :func:`scoremix.score_model` to one system's trials and validate it (module
    docstring).  Returns the fit and ``{"selection", "selection_cells", "validation",
    "validation_groups", "validation_png", "validation_notes"}`` (tables, per-split PNG figures
    and, for a split that could not run — e.g. too few speakers —, why)."""
    from scoremix.locscale.select import score_model
    from scoremix.study.figures import png_of
    from scoremix.validation import validate_model

    kw = dict(score="score", label="y", speaker=speaker, factors=list(factors), covariates=list(covariates),
              positive=1, **({"pool_shapes": True} if pool_shapes else {}))
    fit = score_model(df, **kw)
    cand, cells = selection_tables(fit.selection)
    out: dict[str, Any] = {"selection": cand, "selection_cells": cells}
    pool = getattr(fit, "shape_pooling", None)
    if pool is not None and len(pool.table):
        out["shape_pooling"] = pool.table
    ov = _overall_col(df)
    data = df.assign(**{ov: "all"})
    subgroups = [g for g in subgroups if g in df.columns and g != speaker]
    summs, groups, pngs, failed = [], [], {}, []
    for split in validate:
        by, also = validation_groupings(split, speaker, subgroups, factors, ov)
        try:
            val = validate_model(data, by=by, also_by=also, share=share, split=split, seed=seed, **kw)
        except (ValueError, np.linalg.LinAlgError) as exc:   # reported beside the tables, not a failed fit
            failed.append(f"validation split {split!r} could not run: {type(exc).__name__}: {exc}")
            continue
        s, g = validation_tables(val, split)
        summs.append(s)
        groups.append(g)
        pngs[split] = png_of(validation_figure(g, f"out-of-sample check, split by {split} (share A = "
                                                  f"{100 * share:g} %)"))
    if summs:
        out["validation"] = pd.concat(summs, ignore_index=True).assign(share=share, seed=seed)
        out["validation_groups"] = pd.concat(groups, ignore_index=True)
        out["validation_png"] = pngs
    out["validation_notes"] = failed
    return fit, out


def auto_tables(fit: Any) -> dict[str, Any]:
    """The per-model tables of a study for a score-model fit (``fixef`` — latent-scale stratum
    parameters —, ``varcorr``, ``ranef``, ``summary``, ``json``)."""
    sel = fit.selection
    return {"fixef": _fixef(fit), "varcorr": fit.varcorr.copy(), "ranef": _ranef(fit), "r2": {},
            "summary": f"{fit!r}\n{sel!r}",
            "json": {"kind": "score_model", "specification": sel.chosen.to_dict(),
                     "formulas": sel.chosen.formulas(), "loglik": fit.loglik,
                     "selection": sel.table.reset_index().to_dict(orient="records"),
                     "fitted_freely": list(map(str, sel.fitted_freely)), "predicted": list(sel.predicted),
                     "notes": list(sel.notes)}}
