"""The independent units of work of a study (top-level functions, so that joblib and Dask can
ship them to other processes).  Each returns plain data: DataFrames, dicts, PNG bytes and, for
Bayesian fits, the ``arviz.InferenceData``; files are written by the runner only."""

from __future__ import annotations

import dataclasses

import math
from typing import Any, Sequence

import numpy as np
import pandas as pd

from scoremix.study.config import (BreakdownConfig, CompareConfig, FairnessConfig, MetricsConfig,
                                   ModelConfig, ModelEERConfig, NuisanceConfig)
from scoremix.study.figures import forest_figure, png_of

__all__ = ["metrics_task", "model_task", "fit_model", "fit_model_over_partitions", "fairness_task",
           "fairness_point_task", "fairness_boot_task",
           "fairness_combine", "breakdown_task", "compare_task", "compare_point_task", "compare_boot_task",
           "compare_combine", "nuisance_task", "png_of"]


def _agg() -> None:
    import matplotlib

    matplotlib.use("Agg")


# ---------------------------------------------------------------------------------------
# empirical metrics
# ---------------------------------------------------------------------------------------

def _metric_row(s: np.ndarray, y: np.ndarray, cfg: MetricsConfig, speaker: np.ndarray | None = None
                ) -> dict[str, Any]:
    """EER and minDCF (normalised and unnormalised) of one cell, and actDCF and Cllr when
    ``cfg.llr``; with ``cfg.n_boot`` their speaker-cluster bootstrap intervals (``eer_lo/hi``,
    ``min_dcf_lo/hi``, ``act_dcf_lo/hi``, ``cllr_lo/hi``; NaN when degenerate)."""
    from scoremix import metrics as M

    n_pos = int(y.sum())
    n_neg = int(y.size - n_pos)
    row: dict[str, Any] = {"n_trials": int(y.size), "n_pos": n_pos, "n_neg": n_neg}
    if n_pos == 0 or n_neg == 0:
        row.update(eer=math.nan, min_dcf=math.nan, min_dcf_threshold=math.nan, p_miss=math.nan, p_fa=math.nan)
        return row
    boot: dict[str, Any] = {}
    if cfg.n_boot:
        boot = dict(n_boot=cfg.n_boot, speaker=speaker, seed=cfg.seed, level=cfg.ci)
    md = M.min_dcf(s, y, p_target=cfg.p_target, c_miss=cfg.c_miss, c_fa=cfg.c_fa, normalize=cfg.normalize, **boot)
    e = M.eer(s, y, method=cfg.eer_method, **boot)
    row.update(eer=float(e), min_dcf=float(md.value), min_dcf_norm=float(md.normalized),
               min_dcf_threshold=float(md.threshold), p_miss=float(md.p_miss), p_fa=float(md.p_fa))
    if cfg.n_boot:
        def ok(lo: float, hi: float) -> tuple[float, float]:  # a zero-width interval is no interval
            return (lo, hi) if hi > lo else (math.nan, math.nan)

        row["eer_lo"], row["eer_hi"] = ok(e.lo, e.hi)
        row["min_dcf_lo"], row["min_dcf_hi"] = ok(md.lo, md.hi)
    if getattr(cfg, "llr", False):  # calibrated LLRs: actual cost at the Bayes threshold and Cllr
        ad = M.act_dcf(s, y, p_target=cfg.p_target, c_miss=cfg.c_miss, c_fa=cfg.c_fa, normalize=cfg.normalize, **boot)
        cl = M.cllr(s, y, **boot)
        row.update(act_dcf=float(ad), cllr=float(cl))
        if cfg.n_boot:
            row["act_dcf_lo"], row["act_dcf_hi"] = ok(ad.lo, ad.hi)
            row["cllr_lo"], row["cllr_hi"] = ok(cl.lo, cl.hi)
    return row


def _metric_cells(df: pd.DataFrame, cols: list[str],
                  negatives_by: list[str]) -> list[tuple[tuple[Any, ...], pd.DataFrame]]:
    """The trials of each ``cols`` cell that its metrics are computed on.

    Without a ``negatives_by`` column among ``cols`` a cell is its own trials.  Otherwise
    (e.g. ``attack``, which only negatives carry) the cells are those of the negative
    trials, and cell :math:`c` is scored as

    .. math:: \\{i : y_i = 0,\\ \\mathrm{cols}(i) = c\\} \\cup
              \\{i : y_i = 1,\\ \\mathrm{cols}'(i) = c'\\},

    where :math:`\\mathrm{cols}'` are the columns of ``cols`` not in ``negatives_by`` (none:
    all positives of the system) — the ASVspoof "all bona fide vs the spoofs of one attack".
    """
    keyed = [c for c in cols if c in negatives_by]
    if not keyed:
        return [(k if isinstance(k, tuple) else (k,), g)
                for k, g in df.groupby(cols, sort=True, observed=True, dropna=False)]
    rest = [c for c in cols if c not in negatives_by]
    neg, pos = df[df["y"] == 0], df[df["y"] == 1]
    pos_cells = ({(k if isinstance(k, tuple) else (k,)): g
                  for k, g in pos.groupby(rest, sort=True, observed=True, dropna=False)} if rest else None)
    out = []
    for key, g in neg.groupby(cols, sort=True, observed=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        if pos_cells is None:
            p = pos
        else:
            p = pos_cells.get(tuple(k for c, k in zip(cols, key) if c in rest), pos.iloc[:0])
        out.append((key, pd.concat([p, g])))
    return out


def metrics_task(system: str, df: pd.DataFrame, cfg: MetricsConfig) -> dict[str, Any]:
    """EER (``cfg.eer_method``) and minDCF of one system, overall and per ``cfg.by`` cell.

    Returns ``{"table": DataFrame, "heatmaps": [PNG bytes]}``; table columns ``system, by,
    cell, n_trials, n_pos, n_neg, eer, min_dcf, min_dcf_norm, min_dcf_threshold, p_miss, p_fa``
    (+ ``eer_lo, eer_hi, min_dcf_lo, min_dcf_hi`` with ``cfg.n_boot``: speaker-cluster bootstrap).
    """
    s = df["score"].to_numpy(float)
    y = df["y"].to_numpy()
    spk_col = cfg.speaker if cfg.speaker is not None and cfg.speaker in df.columns else None

    def spk(d: pd.DataFrame) -> np.ndarray | None:
        return d[spk_col].to_numpy() if spk_col is not None else None

    rows = [{"system": system, "by": "overall", "cell": "all", **_metric_row(s, y, cfg, spk(df))}]
    heatmaps: list[bytes] = []
    for cols in cfg.by:
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise KeyError(f"analyses.metrics.by: column(s) {missing} not in the trial table")
        sub_rows = []
        # per-cell intervals when asked for (n_boot in the study file); the default ones are the headline's
        cell_cfg = cfg if getattr(cfg, "cell_intervals", True) else dataclasses.replace(cfg, n_boot=0)
        for key, g in _metric_cells(df, cols, cfg.negatives_by):
            r = _metric_row(g["score"].to_numpy(float), g["y"].to_numpy(), cell_cfg, spk(g))
            sub_rows.append({"system": system, "by": "×".join(cols), "cell": "×".join(map(str, key)),
                             **{c: str(k) for c, k in zip(cols, key)}, **r})
        rows.extend(sub_rows)
        if len(cols) == 2 and sub_rows:
            heatmaps.append(_heatmap(pd.DataFrame(sub_rows), cols, system))
    return {"table": pd.DataFrame(rows), "heatmaps": heatmaps}


def _heatmap(tab: pd.DataFrame, cols: list[str], system: str) -> bytes:
    _agg()
    import matplotlib.pyplot as plt

    def order(v: pd.Series) -> list[str]:
        u = list(pd.unique(v))
        num = pd.to_numeric(pd.Series(u), errors="coerce")
        if num.notna().all():
            return [u[i] for i in np.argsort(num.to_numpy())]
        return sorted(u)

    rows_l, cols_l = order(tab[cols[0]]), order(tab[cols[1]])
    grid = tab.pivot_table(index=cols[0], columns=cols[1], values="eer", aggfunc="first")
    grid = grid.reindex(index=rows_l, columns=cols_l) * 100
    fig, ax = plt.subplots(figsize=(1.0 + 0.55 * len(cols_l), 1.0 + 0.32 * len(rows_l)))
    im = ax.imshow(grid.to_numpy(float), aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(cols_l)), cols_l, rotation=90, fontsize=7)
    ax.set_yticks(range(len(rows_l)), rows_l, fontsize=7)
    ax.set_xlabel(cols[1])
    ax.set_ylabel(cols[0])
    fig.colorbar(im, ax=ax, label="EER (%)")
    ax.set_title(f"EER by {cols[0]} × {cols[1]} — {system}", fontsize=9)
    return png_of(fig)


# ---------------------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------------------

def _freq_tables(fit: Any) -> dict[str, Any]:
    fe = pd.DataFrame({"term": fit.fixef.index, "estimate": fit.fixef.to_numpy(), "se": fit.se.to_numpy()})
    z = 1.959963984540054
    fe["lo95"] = fe["estimate"] - z * fe["se"]
    fe["hi95"] = fe["estimate"] + z * fe["se"]
    ranef_rows = []
    ranef = fit.ranef
    condsd = fit.ranef_condsd
    for grp, frame in ranef.items():
        sd = condsd.get(grp) if condsd is not None else None
        for term in frame.columns:
            for level, val in frame[term].items():
                csd = float(sd.loc[level, term]) if sd is not None else math.nan
                ranef_rows.append({"group": grp, "term": term, "level": str(level), "estimate": float(val),
                                   "condsd": csd})
    try:
        r2 = {k: float(v) for k, v in fit.r2().items()}
    except Exception:  # noqa: BLE001 - R² is a nicety; never fail a study on it
        r2 = {}
    return {"fixef": fe, "varcorr": varcorr_with_residuals(fit), "ranef": pd.DataFrame(ranef_rows), "r2": r2,
            "summary": fit.summary(), "json": fit.to_dict()}


def varcorr_with_residuals(fit: Any) -> pd.DataFrame:
    """``fit.varcorr`` with one ``Residual`` row per level of a dispersion model
    (``Residual (label = spoof)``; lme4's VarCorr shows only the reference level's σ)."""
    vc = fit.varcorr.copy()
    sb = getattr(fit, "sigma_by", None)
    if sb is None or len(sb) < 2:
        return vc
    col = str(getattr(fit, "dispersion", None) or "").split("~")[-1].strip() or "dispersion"
    rows = [{"grp": f"Residual ({col} = {lvl})", "var1": None, "var2": None, "vcov": float(sd) ** 2,
             "sdcor": float(sd)} for lvl, sd in sb.items()]
    keep = vc[vc["grp"] != "Residual"]
    return pd.concat([keep, pd.DataFrame(rows, columns=vc.columns)], ignore_index=True)


#: column added to the fitted rows to mark those ``[analyses.model_eer].filters`` keeps
_EVAL_COL = "_model_eer_rows"


def _model_eer_data(df: pd.DataFrame, cfg: ModelEERConfig) -> tuple[pd.DataFrame, list[str]]:
    """``df`` plus a boolean column marking the rows the model EER is evaluated on
    (``cfg.filters``, by the same :func:`~scoremix.study.data.apply_filters` as the other
    analyses), and the ``by`` prefix that selects them (empty without filters)."""
    if not cfg.filters:
        return df, []
    from scoremix.study.data import apply_filters

    keep = apply_filters(df, cfg.filters, "analyses.model_eer.filters").index
    return df.assign(**{_EVAL_COL: df.index.isin(keep)}), [_EVAL_COL]


def _evaluated(tab: pd.DataFrame, sel: list[str]) -> pd.DataFrame:
    """Rows of a ``model_eer(..., by=[*sel, col])`` table that belong to the kept rows,
    re-indexed by the remaining ``by`` columns."""
    if not sel:
        return tab
    keep = np.asarray(tab.index.get_level_values(_EVAL_COL), dtype=bool)
    tab = tab[keep]
    return tab.droplevel(_EVAL_COL) if isinstance(tab.index, pd.MultiIndex) else tab


def _model_eer_table(fit: Any, df: pd.DataFrame, cfg: ModelEERConfig | None,
                     speaker: str | None = None) -> pd.DataFrame | None:
    """Model-based vs empirical EER, overall and per ``cfg.by`` column.

    The model was fitted to all of ``df``; the per-trial (latent) Gaussians of the rows kept
    by ``cfg.filters`` form the class mixtures (:func:`scoremix.model_eer.model_eer`) and the
    empirical EER is computed on the same rows; both carry an interval (``eer_model_lo/_hi``, made
    by the method named in ``eer_model_interval``: a parametric bootstrap of ``cfg.n_boot`` refits
    for Gaussian fits; ``eer_empirical_lo/_hi``: a speaker bootstrap) and ``fit_ok`` (no
    disagreement beyond sampling error, rule of :mod:`scoremix.predictive.gof`)."""
    from scoremix.model_eer import model_eer_tables

    if cfg is None:
        return None
    data, sel = _model_eer_data(df, cfg)
    spk = speaker if speaker is not None and speaker in df.columns else None
    rows = []
    bys: list[Any] = []
    for col in [None, *cfg.by]:
        by: Any = [*sel] + ([col] if col else [])
        bys.append(by if by else pd.Series(np.zeros(len(data), np.int64), index=data.index, name="overall"))
    # one set of parametric-bootstrap refits for the overall and every per-column table
    tables = model_eer_tables(fit, bys, conditional=cfg.conditional, label="y", data=data, n_boot=cfg.n_boot,
                              speaker=spk, progress=False, model_interval=cfg.model_interval,
                              n_refits=cfg.n_refits or None)
    for col, tab in zip([None, *cfg.by], tables):
        tab = _evaluated(tab, sel)
        if col is None:
            tab = tab.set_axis(["all"])
        for key, r in tab.iterrows():
            rows.append({"by": col or "overall", "cell": str(key), "n_neg": int(r["n_neg"]), "n_pos": int(r["n_pos"]),
                         "eer_model": float(r["eer_model"]),
                         "eer_model_lo": float(r.get("eer_model_lo", np.nan)),
                         "eer_model_hi": float(r.get("eer_model_hi", np.nan)),
                         "eer_model_interval": str(r.get("eer_model_interval", "")),
                         # speaker re-weighting (parameters fixed): its own columns, never eer_model_lo/_hi
                         "eer_model_reweight_lo": float(r.get("eer_model_reweight_lo", np.nan)),
                         "eer_model_reweight_hi": float(r.get("eer_model_reweight_hi", np.nan)),
                         "eer_empirical": float(r["eer_empirical"]),
                         "eer_empirical_lo": float(r.get("eer_empirical_lo", np.nan)),
                         "eer_empirical_hi": float(r.get("eer_empirical_hi", np.nan)),
                         "fit_ok": bool(r.get("fit_ok", True)),
                         "fit_hint": str(r.get("fit_hint", "")),
                         "term_note": tab.attrs.get("note", "") if col else ""})
    return pd.DataFrame(rows)


def _det_overlay(fit: Any, df: pd.DataFrame, system: str, model_name: str, groups: Sequence[str] = ()) -> dict[str, Any]:
    """Model-implied and empirical DET curves of one fit: overall and per ``groups`` cell
    (PNG figures for the report and the model curve as a table)."""
    import matplotlib.pyplot as plt

    from scoremix.predictive import model_det_curve, plot_model_det

    out: dict[str, Any] = {}
    _agg()
    try:
        det = model_det_curve(fit, data=df, label="y", n_points=150)
    except ValueError:
        return out
    fig, ax = plt.subplots(figsize=(5, 5))
    plot_model_det(det, df["score"].to_numpy(float), df["y"].to_numpy(), ax=ax, label=system, p_min=1e-4)
    ax.set_title(f"{model_name} on {system}: model (dashed) vs empirical DET", fontsize=9)
    ax.legend(fontsize=7)
    out["det_png"] = png_of(fig)
    out["det_curve"] = det.assign(cell="overall")
    cols = [g for g in groups if g in df.columns]
    if cols:
        try:
            by = model_det_curve(fit, data=df, by=cols, label="y", n_points=120)
        except ValueError:
            return out
        fig, ax = plt.subplots(figsize=(5, 5))
        for key, part in by.groupby(cols, sort=True):
            key = key if isinstance(key, tuple) else (key,)
            mask = np.ones(len(df), bool)
            for c, k in zip(cols, key):
                mask &= (df[c] == k).to_numpy()
            name = "/".join(map(str, key))
            plot_model_det(part, df["score"].to_numpy(float)[mask], df["y"].to_numpy()[mask], ax=ax, label=name,
                           p_min=1e-3)
        ax.set_title(f"{model_name} on {system} by {' × '.join(cols)}: model (dashed) vs empirical", fontsize=9)
        ax.legend(fontsize=7)
        out["det_by_png"] = png_of(fig)
    return out


def _fairness_rows(df: pd.DataFrame, fcfg: FairnessConfig) -> pd.DataFrame:
    """The fitted rows the fairness measures are evaluated on (``[analyses.fairness].filters``)."""
    if not fcfg.filters:
        return df
    from scoremix.study.data import apply_filters

    return apply_filters(df, fcfg.filters, "analyses.fairness.filters").reset_index(drop=True)


def _model_fairness(fit: Any, df: pd.DataFrame, fcfg: FairnessConfig, speaker: str) -> pd.DataFrame:
    from scoremix.fairness import model_subgroup_dcf

    res = model_subgroup_dcf(fit, df, fcfg.groups, label="y", speaker=speaker, p_target=fcfg.p_target,
                             c_miss=fcfg.c_miss, c_fa=fcfg.c_fa, normalize=fcfg.normalize,
                             conditional=fcfg.conditional, membership=fcfg.membership, score="score",
                             n_boot=min(fcfg.n_boot, 200), seed=0)
    tab = res.table.copy()
    tab.insert(0, "source", "model (" + ("conditional" if fcfg.conditional else "marginal") + ")")
    tab["term_note"] = "; ".join(res.notes)
    tab.attrs["fairness_index"] = res.fairness_index
    return tab


def model_task(model: ModelConfig, system: str, df: pd.DataFrame, seed: int,
               model_eer_cfg: ModelEERConfig | None = None, fairness_cfg: FairnessConfig | None = None,
               speaker: str = "speaker", postfit: Any = None, fit_data: Any = None) -> dict[str, Any]:
    """:func:`fit_model` that turns a model error (bad formula for this subset, a grouping
    factor with too few levels, …) into ``{"model", "system", "backend", "error"}`` so that the
    other fits and analyses of the study still finish; the runner reports the error."""
    from scoremix.lme.errors import LmeError

    try:
        if fit_data is not None:
            return fit_model_over_partitions(model, system, fit_data, model_eer_cfg, fairness_cfg)
        return fit_model(model, system, df, seed, model_eer_cfg, fairness_cfg, speaker, postfit)
    except (LmeError, ValueError, np.linalg.LinAlgError) as exc:
        return {"model": model.name, "system": system, "backend": model.backend, "nobs": int(len(df)),
                "error": f"{type(exc).__name__}: {exc}"}


def fit_model_over_partitions(model: ModelConfig, system: str, ddf: Any,
                              model_eer_cfg: ModelEERConfig | None = None,
                              fairness_cfg: FairnessConfig | None = None) -> dict[str, Any]:
    """Fit one (native, Gaussian) model to a Dask DataFrame of the system's trials: the
    cross-products are summed over partitions (:func:`scoremix.distributed.lmer_dask`), so the
    fit is the in-memory one up to summation order.  Its tables are those of :func:`fit_model`;
    the model EER comes from merged per-partition counts (overall and per ``by`` column; the
    empirical EER's bootstrap interval and ``filters`` need the rows and are left out), and the
    model-based fairness table and DET overlay, which need the rows, are not computed
    (``notes`` says so)."""
    from scoremix.lme.api import lmer
    from scoremix.metrics import eer as empirical_eer
    from scoremix.model_eer import model_eer

    fit = lmer(model.formula, ddf, REML=model.REML, dispersion=model.dispersion)
    out: dict[str, Any] = {"model": model.name, "system": system, "backend": model.backend, "nobs": int(fit.nobs),
                           "transform": "none", "dask_partitions": int(ddf.npartitions)}
    out.update(_freq_tables(fit))
    notes = []
    if model_eer_cfg is not None and model_eer_cfg.filters:
        notes.append("model_eer: filters need the rows; not computed for a model fitted over partitions")
    elif model_eer_cfg is not None:
        y = ddf["y"]
        rows = [{"by": "overall", "cell": "all", "n_neg": int((y == 0).sum().compute()),
                 "n_pos": int((y == 1).sum().compute()),
                 "eer_model": float(model_eer(fit, conditional=model_eer_cfg.conditional, label="y", positive=1)),
                 "eer_empirical": float(empirical_eer(ddf["score"], y)), "term_note": ""}]
        for col in model_eer_cfg.by:
            tab = model_eer(fit, by=col, conditional=model_eer_cfg.conditional, label="y", positive=1)
            for key, r in tab.iterrows():
                rows.append({"by": col, "cell": str(key), "n_neg": int(r["n_neg"]), "n_pos": int(r["n_pos"]),
                             "eer_model": float(r["eer_model"]), "eer_empirical": float(r["eer_empirical"]),
                             "term_note": tab.attrs.get("note", "")})
        out["model_eer"] = _with_transform(pd.DataFrame(rows), model)
        if model_eer_cfg.n_boot:
            notes.append("model_eer: the empirical EER's bootstrap interval needs the rows; left out")
    if fairness_cfg is not None and model.name in fairness_cfg.models:
        notes.append("fairness: the model-based subgroup table needs the rows; not computed for a model "
                     "fitted over partitions")
    out["notes"] = notes
    return out


def fit_model(model: ModelConfig, system: str, df: pd.DataFrame, seed: int,
              model_eer_cfg: ModelEERConfig | None = None, fairness_cfg: FairnessConfig | None = None,
              speaker: str = "speaker", postfit: Any = None) -> dict[str, Any]:
    """Fit one model to one system's trials and derive everything the study reports from it.

    Frequentist backends: :func:`scoremix.lme.api.lmer`; ``"bayes"``:
    :func:`scoremix.bayes.bayes_lmer` (seeded) plus a frequentist fit (``compare_with``) for the
    side-by-side table.  Returns a dict with ``fixef``, ``varcorr``, ``ranef`` (long: group, term,
    level, estimate, condsd), ``r2``, ``summary``, ``json`` (``LmerResult.to_dict()``),
    ``model_eer`` and ``fairness`` tables when configured, and for Bayesian fits ``idata``
    and ``compare``.
    """
    from scoremix.lme.api import lmer

    if model.auto:  # s5trust-auto
        return fit_auto_model(model, system, df, seed, model_eer_cfg, fairness_cfg, speaker)
    out: dict[str, Any] = {"model": model.name, "system": system, "backend": model.backend, "nobs": int(len(df)),
                           "transform": model.transform or "none"}
    tkw: dict[str, Any] = {"transform": model.transform} if model.transform else {}
    if model.transform == "monotone-by-class" and model.strata:
        tkw["control"] = {"strata": model.strata}
    if model.backend != "bayes":
        fit = lmer(model.formula, df, REML=model.REML, backend=model.backend, dispersion=model.dispersion, **tkw)
        out.update(_freq_tables(fit))
        out["model_eer"] = _with_transform(_model_eer_table(fit, df, model_eer_cfg, speaker), model)
        fair = fairness_cfg is not None and model.name in fairness_cfg.models
        if fair:
            out["fairness"] = _with_transform(_model_fairness(fit, _fairness_rows(df, fairness_cfg), fairness_cfg,
                                                              speaker), model)
        if model_eer_cfg is not None or fair:
            out.update(_det_overlay(fit, df, system, model.name, fairness_cfg.groups if fair else ()))
        from scoremix.study.postfit import postfit_outputs  # s5postfit: contrasts, model checks
        out.update(postfit_outputs(fit, model, *(postfit or (None, None))))
        return out

    from scoremix.bayes import bayes_lmer

    bres = bayes_lmer(model.formula, df, draws=model.draws, tune=model.tune, chains=model.chains,
                      method=model.method, seed=seed, progress=False, dispersion=model.dispersion,
                      cores=1, **tkw)
    fe = bres.fixef.reset_index().rename(columns={"parameter": "term"})
    out.update({"idata": bres.idata, "fixef": fe, "varcorr": bres.varcorr,
                "summary": bres.summary().to_string(), "ranef": _bayes_ranef(bres)})
    if model.compare_with != "none":
        fit = lmer(model.formula, df, REML=model.REML, backend=model.compare_with, dispersion=model.dispersion,
                   **tkw)
        out["compare"] = bres.compare(fit).reset_index()
        out["json"] = fit.to_dict()
    if model_eer_cfg is not None:
        from scoremix.model_eer import model_eer

        rows = []
        data, sel = _model_eer_data(df, model_eer_cfg)
        for col in [None, *model_eer_cfg.by]:
            by = [*sel] + ([col] if col else [])
            # the exact EER of the class mixtures per draw, as for the frequentist fits (the
            # one-Gaussian moment approximation is far off when attack effects spread the spoofs)
            post = model_eer(bres, by=by or None, conditional=model_eer_cfg.conditional, label="y", positive=1,
                             data=data, method="mixture", max_draws=400, progress=False,
                             n_boot=model_eer_cfg.n_boot,
                             speaker=speaker if speaker is not None and speaker in df.columns else None)
            summ = _evaluated(post.summary, sel)
            if col is None and sel:
                summ = summ.set_axis(["all"])
            for key, r in summ.iterrows():
                rows.append({"by": col or "overall", "cell": str(key), "n_neg": int(r["n_neg"]),
                             "n_pos": int(r["n_pos"]), "eer_model": float(r["eer_model"]),
                             "eer_model_sd": float(r["eer_sd"]), "eer_empirical": float(r["eer_empirical"]),
                             "eer_empirical_lo": float(r.get("eer_empirical_lo", np.nan)),
                             "eer_empirical_hi": float(r.get("eer_empirical_hi", np.nan)),
                             "fit_ok": bool(r.get("fit_ok", True)),
                             "term_note": post.summary.attrs.get("note", "") if col else ""})
        out["model_eer"] = _with_transform(pd.DataFrame(rows), model)
    if fairness_cfg is not None and model.name in fairness_cfg.models:
        out["fairness"] = _with_transform(_posterior_fairness(bres, _fairness_rows(df, fairness_cfg), fairness_cfg,
                                                              speaker), model)
    from scoremix.study.postfit import postfit_outputs  # s5postfit2: posterior checks panel
    out.update(postfit_outputs(bres, model, *(postfit or (None, None))))
    return out


# ---------------------------------------------------------------------------------------
# s5trust-auto: [[models]] auto = true (score_model + out-of-sample validation)
# ---------------------------------------------------------------------------------------

def fit_auto_model(model: ModelConfig, system: str, df: pd.DataFrame, seed: int,
                   model_eer_cfg: ModelEERConfig | None = None, fairness_cfg: FairnessConfig | None = None,
                   speaker: str = "speaker") -> dict[str, Any]:
    """A model with ``auto = true``: :func:`scoremix.score_model` chooses and fits the
    specification (:func:`scoremix.study.auto.fit_auto`, which also validates it out of sample
    with ``seed``); the model EER, model-based fairness table and DET overlay use that fit as
    for any other model.  Adds ``selection``, ``selection_cells``, ``validation``,
    ``validation_groups`` and ``validation_png`` to the result."""
    from scoremix.study.auto import auto_tables, fit_auto

    fair = fairness_cfg is not None and model.name in fairness_cfg.models
    subgroups = list(dict.fromkeys([*(model_eer_cfg.by if model_eer_cfg is not None else []),
                                    *(fairness_cfg.groups if fair else [])]))
    fit, extra = fit_auto(df, speaker=speaker, factors=model.factors, covariates=model.covariates,
                          subgroups=subgroups, validate=model.validate, share=model.validate_share, seed=seed,
                          pool_shapes=model.pool_shapes)
    out: dict[str, Any] = {"model": model.name, "system": system, "backend": "score_model", "nobs": int(len(df)),
                           "transform": "locscale", "auto": True, "validate_seed": int(seed)}
    out.update(auto_tables(fit))
    out.update(extra)
    out["model_eer"] = _with_transform(_model_eer_table(fit, df, model_eer_cfg, speaker), model)
    if fair:
        out["fairness"] = _with_transform(_model_fairness(fit, _fairness_rows(df, fairness_cfg), fairness_cfg,
                                                          speaker), model)
    if model_eer_cfg is not None or fair:
        try:
            out.update(_det_overlay(fit, df, system, model.name, fairness_cfg.groups if fair else ()))
        except (TypeError, AttributeError, ValueError):  # a DET overlay is a figure; never fail the fit on it
            pass
    return out


def _with_transform(tab: pd.DataFrame | None, model: ModelConfig) -> pd.DataFrame | None:
    """Record the model's transform (``"monotone"``, ``"monotone-by-class"`` or ``"none"``)
    in its result table."""
    return None if tab is None else tab.assign(transform="locscale" if model.auto else (model.transform or "none"))


def _bayes_ranef(bres: Any) -> pd.DataFrame:
    rows = []
    for t in bres.spec.terms:
        d = bres.draws(f"b_{t.group}")  # (chain, draw, level, term)
        flat = d.reshape(-1, *d.shape[2:])
        mean, sd = flat.mean(axis=0), flat.std(axis=0, ddof=1)
        for j, term in enumerate(t.term_names):
            for i, level in enumerate(t.levels):
                rows.append({"group": t.group, "term": term, "level": str(level), "estimate": float(mean[i, j]),
                             "condsd": float(sd[i, j])})
    return pd.DataFrame(rows)


def _posterior_fairness(bres: Any, df: pd.DataFrame, fcfg: FairnessConfig, speaker: str) -> pd.DataFrame:
    """Posterior SVEva measures (:func:`scoremix.fairness.posterior_subgroup_dcf`)."""
    from scoremix.fairness import posterior_subgroup_dcf

    res = posterior_subgroup_dcf(bres, df, fcfg.groups, label="y", speaker=speaker, p_target=fcfg.p_target,
                                 c_miss=fcfg.c_miss, c_fa=fcfg.c_fa, normalize=fcfg.normalize,
                                 random="conditional" if fcfg.conditional else "marginal", level=fcfg.ci,
                                 membership=fcfg.membership, score="score", n_boot=min(fcfg.n_boot, 200),
                                 seed=0)
    tab = res.table.copy()
    tab.insert(0, "source", "posterior")
    tab["term_note"] = "; ".join(getattr(res, "notes", []))
    tab.attrs["fairness_index"] = res.fairness_index
    return tab


# ---------------------------------------------------------------------------------------
# fairness, breakdown, compare, nuisance
# ---------------------------------------------------------------------------------------

def _sveva_kwargs(cfg: FairnessConfig, speaker: str) -> dict[str, Any]:
    two_way = {} if cfg.test_speaker is None else {"test_speaker": cfg.test_speaker, "resample": "two-way"}
    return dict(score="score", label="y", speaker=speaker, p_target=cfg.p_target, c_miss=cfg.c_miss, c_fa=cfg.c_fa,
                normalize=cfg.normalize, membership=cfg.membership, **two_way)


def fairness_task(system: str, df: pd.DataFrame, cfg: FairnessConfig, speaker: str, seed: int,
                  min_speakers: int = 5) -> dict[str, Any]:
    """SVEva subgroup table with cluster-bootstrap intervals (one seed, one task), DET per
    subgroup and score distributions of one system (:func:`scoremix.fairness.subgroup_dcf`)."""
    _agg()
    from scoremix.fairness import subgroup_dcf

    res = subgroup_dcf(df, cfg.groups, n_boot=cfg.n_boot, level=cfg.ci, seed=seed, min_speakers=min_speakers,
                       progress=False, interval=cfg.interval, **_sveva_kwargs(cfg, speaker))
    return _fairness_outputs(system, res, cfg, png_of(res.plot_det()), png_of(res.plot_scores()), n_chunks=1)


def fairness_point_task(system: str, df: pd.DataFrame, cfg: FairnessConfig, speaker: str,
                        min_speakers: int = 5) -> dict[str, Any]:
    """Point estimates (no bootstrap) of the SVEva table plus the DET and score plots; the
    intervals come from :func:`fairness_boot_task` chunks joined by :func:`fairness_combine`."""
    _agg()
    from scoremix.fairness import subgroup_dcf

    res = subgroup_dcf(df, cfg.groups, n_boot=0, level=cfg.ci, min_speakers=min_speakers, progress=False,
                       interval=cfg.interval, **_sveva_kwargs(cfg, speaker))
    return {"result": res, "det_png": png_of(res.plot_det()), "scores_png": png_of(res.plot_scores())}


def fairness_boot_task(df: pd.DataFrame, cfg: FairnessConfig, speaker: str, seed: int,
                       count: int) -> dict[str, np.ndarray]:
    """``count`` cluster-bootstrap replicates of every SVEva measure from ``default_rng(seed)``
    (:func:`scoremix.fairness.subgroup_dcf_replicates`)."""
    from scoremix.fairness import subgroup_dcf_replicates

    return subgroup_dcf_replicates(df, cfg.groups, [seed], [count], progress=False, **_sveva_kwargs(cfg, speaker))


def fairness_combine(system: str, point: dict[str, Any], parts: list[dict[str, np.ndarray]], cfg: FairnessConfig,
                     seeds: list[int]) -> dict[str, Any]:
    """Intervals (``cfg.interval``) from all chunks' replicates (:func:`scoremix.fairness.with_bootstrap`)
    on the point table of :func:`fairness_point_task`; the same outputs as :func:`fairness_task`."""
    from scoremix.fairness import with_bootstrap

    res = with_bootstrap(point["result"], parts, cfg.ci, interval=cfg.interval, random_state=None,
                         boot_seeds=list(seeds))
    return _fairness_outputs(system, res, cfg, point["det_png"], point["scores_png"], n_chunks=len(parts))


def _fairness_outputs(system: str, res: Any, cfg: FairnessConfig, det_png: bytes, scores_png: bytes,
                      n_chunks: int) -> dict[str, Any]:
    tab = res.table.copy()
    tab.insert(0, "system", system)
    summary = {"system": system, "min_dcf": res.min_dcf, "threshold": res.threshold,
               "fairness_index": res.fairness_index, "fairness_index_lo": res.fairness_index_ci[0],
               "fairness_index_hi": res.fairness_index_ci[1], "fi_n_subgroups": res.n_subgroups,
               "fi_share_ratio_above_1": res.share_above_one, "n_boot": int(res.settings.get("n_boot", 0)),
               "boot_chunks": int(n_chunks) if res.settings.get("n_boot", 0) else 0,
               **{f"overall_{k}": v for k, v in res.overall.items()}}

    forest = None
    if "ratio_overall_lo" in tab.columns:
        _agg()
        ok = tab[tab["ratio_overall"].notna()]
        series = pd.DataFrame({"series": system, "term": ok["subgroup"].astype(str), "estimate": ok["ratio_overall"],
                               "lo": ok["ratio_overall_lo"], "hi": ok["ratio_overall_hi"]})
        forest = png_of(forest_figure(series, f"ratio_overall per subgroup — {system}", ref=1.0,
                                      xlabel=f"C_det^g(τ*) / C_det(τ*) ({100 * cfg.ci:g} % bootstrap interval)"))
    return {"table": tab, "summary": summary, "det_png": det_png, "scores_png": scores_png, "forest_png": forest}


def breakdown_task(system: str, df: pd.DataFrame, cfg: BreakdownConfig, speaker: str | None,
                   seed: int) -> pd.DataFrame:
    """Casual-Conversations style breakdown (:func:`scoremix.fairness.breakdown`) of one system."""
    from scoremix.fairness import breakdown

    by = [c[0] if len(c) == 1 else tuple(c) for c in cfg.by]
    tab = breakdown(df, by, score="score", label="y", threshold=cfg.threshold, speaker=speaker,
                    n_boot=cfg.n_boot, level=cfg.ci, seed=seed, progress=False)
    tab.insert(0, "system", system)
    return tab


def _compare_input(df: pd.DataFrame, system_col: str, cfg: CompareConfig, speaker: str,
                   fcfg: FairnessConfig | None) -> tuple[pd.DataFrame, dict[str, Any]]:
    cost = {} if fcfg is None else dict(p_target=fcfg.p_target, c_miss=fcfg.c_miss, c_fa=fcfg.c_fa,
                                        normalize=fcfg.normalize)
    sub = df[df[system_col].astype(str).isin(cfg.systems)].copy()
    sub[system_col] = sub[system_col].astype(str)
    kw = dict(system=system_col, systems=cfg.systems, trial_id=cfg.trial_id, score="score", label="y",
              speaker=speaker, measures=cfg.measures, **cost)
    return sub, kw


def compare_task(df: pd.DataFrame, system_col: str, cfg: CompareConfig, speaker: str, fcfg: FairnessConfig | None,
                 seed: int) -> dict[str, Any]:
    """Paired-bootstrap comparison of two systems (:func:`scoremix.fairness.compare_subgroup_dcf`)
    with the ratio scatter plot."""
    from scoremix.fairness import compare_subgroup_dcf

    sub, kw = _compare_input(df, system_col, cfg, speaker, fcfg)
    res = compare_subgroup_dcf(sub, cfg.groups, n_boot=cfg.n_boot, level=cfg.ci, seed=seed, progress=False,
                               **kw)
    return _compare_outputs(res, cfg)


def compare_point_task(df: pd.DataFrame, system_col: str, cfg: CompareConfig, speaker: str,
                       fcfg: FairnessConfig | None) -> Any:
    """Point estimates of the two-system comparison (a :class:`~scoremix.fairness.CompareResult`
    without intervals), to be joined with :func:`compare_boot_task` chunks."""
    from scoremix.fairness import compare_subgroup_dcf

    sub, kw = _compare_input(df, system_col, cfg, speaker, fcfg)
    return compare_subgroup_dcf(sub, cfg.groups, n_boot=0, level=cfg.ci, progress=False, **kw)


def compare_boot_task(df: pd.DataFrame, system_col: str, cfg: CompareConfig, speaker: str,
                      fcfg: FairnessConfig | None, seed: int, count: int) -> dict[str, dict[str, np.ndarray]]:
    """``count`` paired replicates of both systems from ``default_rng(seed)``
    (:func:`scoremix.fairness.compare_replicates`)."""
    from scoremix.fairness import compare_replicates

    sub, kw = _compare_input(df, system_col, cfg, speaker, fcfg)
    return compare_replicates(sub, cfg.groups, [seed], [count], progress=False, **kw)


def compare_combine(point: Any, parts: list[dict[str, dict[str, np.ndarray]]], cfg: CompareConfig) -> dict[str, Any]:
    """Intervals from all chunks' paired replicates (:func:`scoremix.fairness.compare_with_bootstrap`)."""
    from scoremix.fairness import compare_with_bootstrap

    return _compare_outputs(compare_with_bootstrap(point, parts, cfg.ci, measures=cfg.measures), cfg,
                            n_chunks=len(parts))


def _compare_outputs(res: Any, cfg: CompareConfig, n_chunks: int = 1) -> dict[str, Any]:
    _agg()
    fi = {k: {"value": v[0], "lo": v[1], "hi": v[2]} for k, v in res.fairness_index.items()}
    png = None
    if "ratio_overall" in cfg.measures:
        png = png_of(_ratio_scatter(res.table, list(res.systems)))
    n_boot = 0 if res.replicates is None else int(next(iter(res.replicates.values()))["fairness_index"].shape[-1])
    return {"table": res.table, "fairness_index": fi, "systems": list(res.systems), "scatter_png": png,
            "n_boot": n_boot, "boot_chunks": n_chunks if n_boot else 0}


def _ratio_scatter(tab: pd.DataFrame, systems: list[str]) -> Any:
    """ratio_overall of system B against system A per subgroup (diagonal = equal), with the
    bootstrap intervals as error bars (clipped at 0 length where a percentile interval misses
    the point estimate)."""
    _agg()
    import matplotlib.pyplot as plt

    a, b = systems
    x, y = tab[f"ratio_overall_{a}"].to_numpy(float), tab[f"ratio_overall_{b}"].to_numpy(float)

    def err(col: str, v: np.ndarray) -> np.ndarray | None:
        if f"{col}_lo" not in tab.columns:
            return None
        e = np.vstack([v - tab[f"{col}_lo"].to_numpy(float), tab[f"{col}_hi"].to_numpy(float) - v])
        return np.clip(np.nan_to_num(e), 0.0, None)

    fig, ax = plt.subplots(figsize=(5, 5))
    ax.errorbar(x, y, xerr=err(f"ratio_overall_{a}", x), yerr=err(f"ratio_overall_{b}", y), fmt="o",
                ecolor="grey", capsize=2)
    for name, xi, yi in zip(tab["subgroup"].astype(str), x, y):
        if np.isfinite(xi) and np.isfinite(yi):
            ax.annotate(name, (xi, yi), fontsize=7, xytext=(3, 3), textcoords="offset points")
    finite = np.r_[x, y][np.isfinite(np.r_[x, y])]
    hi = float(finite.max()) * 1.1 if finite.size else 2.0
    ax.plot([0, hi], [0, hi], color="grey", lw=0.7)
    ax.axhline(1, color="k", lw=0.5, ls=":")
    ax.axvline(1, color="k", lw=0.5, ls=":")
    ax.set_xlabel(f"ratio_overall, {a}")
    ax.set_ylabel(f"ratio_overall, {b}")
    ax.set_title("Subgroup DCF ratios of two systems")
    return fig


def nuisance_task(system: str, df: pd.DataFrame, cfg: NuisanceConfig, seed: int) -> dict[str, Any]:
    """Nuisance LLR (class-conditional GMMs fitted on the ``train`` rows) on the ``test`` rows
    and its two-Gaussian model :math:`\\ell = \\mu + d y + \\varepsilon`."""
    from scoremix.nuisance import NuisanceLLR, nuisance_model
    from scoremix.study.data import apply_filters

    if cfg.feature not in df.columns:
        raise KeyError(f"analyses.nuisance.feature: column {cfg.feature!r} not in the trial table")
    train = apply_filters(df, cfg.train, "analyses.nuisance.train") if cfg.train else df
    test = apply_filters(df, cfg.test, "analyses.nuisance.test") if cfg.test else df
    est = NuisanceLLR(n_components=cfg.n_components, random_state=seed)
    est.fit(train[cfg.feature].to_numpy(float), train["y"].to_numpy())
    llr = est.llr(test[cfg.feature].to_numpy(float))
    nm = nuisance_model(llr, test["y"].to_numpy())
    tab = nm.to_frame(cfg.feature).reset_index()
    tab.insert(0, "system", system)
    return {"table": tab}


def systems_task(df: pd.DataFrame, system_col: str, cfg: Any, speaker: str | None, seed: int) -> pd.DataFrame:
    """``[analyses.systems]`` (s4deteval): all pairs of systems on the same trials
    (:func:`scoremix.compare_systems.compare_systems`, label column ``y``)."""
    from scoremix.compare_systems import compare_systems

    spk = speaker if speaker is not None and speaker in df.columns else None
    test = cfg.test if cfg.n_boot or cfg.test == "delong" else "delong"
    metrics = cfg.metrics if cfg.n_boot else [m for m in cfg.metrics if m == "auc"]
    if not metrics:
        raise ValueError("[analyses.systems] with n_boot = 0 can only compare auc (DeLong)")
    return compare_systems(df, systems=cfg.systems or None, metrics=metrics, test=test, speaker=spk,
                           score="score", label="y", system=system_col, trial=cfg.trial_id, n_boot=cfg.n_boot,
                           seed=seed, level=cfg.ci, adjust=cfg.adjust)


def tandem_task(df: pd.DataFrame, system_col: str | None, cfg: Any, speaker: str | None, seed: int) -> pd.DataFrame:
    """``[analyses.tandem]`` (s5deteval): every CM system of the study in tandem with the ASV table
    ``cfg.asv_file`` (:func:`scoremix.tandem.tandem_table`; CM key from ``y``: 1 = bona fide)."""
    from scoremix.study.data import StudyDataError, apply_filters, read_data_file
    from scoremix.tandem.table import tandem_table

    asv = read_data_file(cfg.asv_file)
    if cfg.asv_filters:
        asv = apply_filters(asv, cfg.asv_filters, f"analyses.tandem.asv_file {cfg.asv_file}")
    asv = asv.reset_index(drop=True)
    cm = df
    if cfg.systems:
        present = set(df[system_col].astype(str))
        missing = [s for s in cfg.systems if s not in present]
        if missing:
            raise StudyDataError(f"analyses.tandem.systems: {missing} not in column {system_col!r} "
                                 f"(systems: {sorted(present)})")
        cm = df[df[system_col].astype(str).isin(cfg.systems)]
    cm = cm.assign(_cm_key=np.where(cm["y"].to_numpy() == 1, "bonafide", "spoof"))
    if system_col is not None:
        cm = cm.assign(**{system_col: cm[system_col].astype(str)})
    spk = speaker if speaker is not None and speaker in cm.columns else None
    if cfg.n_boot and spk is None:
        raise StudyDataError("analyses.tandem: n_boot > 0 needs the [data].speaker column in the CM table")
    return tandem_table(asv, cm, join=cfg.join, asv_score=cfg.asv_score, asv_key=cfg.asv_key, cm_score="score",
                        cm_key="_cm_key", system=system_col, asv_speaker=cfg.asv_speaker if cfg.n_boot else None,
                        cm_speaker=spk if cfg.n_boot else None, n_boot=cfg.n_boot, seed=seed, level=cfg.ci,
                        by=tuple(cfg.by) if cfg.by else None)


def fairness_panel_task(system: str, df: pd.DataFrame, cfg: FairnessConfig, speaker: str, seed: int,
                        min_speakers: int = 5) -> dict[str, Any]:
    """``[analyses.fairness]`` panel (s5deteval): :meth:`scoremix.fairness.SubgroupDCFResult.panel` of the
    subgroups of ``cfg.groups`` at the overall EER and the overall-FPR targets ``cfg.panel_fpr``
    (percentile speaker-bootstrap intervals, ``cfg.n_boot`` replicates), its sweep plot and, with
    ``cfg.panel_llr``, the per-group Bayes error-rate plot."""
    _agg()
    from scoremix.fairness import subgroup_dcf
    from scoremix.fairness.panel import plot_group_ape, plot_operating_points

    res = subgroup_dcf(df, cfg.groups, n_boot=0, level=cfg.ci, min_speakers=min_speakers, progress=False,
                       **_sveva_kwargs(cfg, speaker))
    from scoremix.fairness.subgroups import SubgroupError

    ops = ["eer", *[{"fpr": f} for f in cfg.panel_fpr]]
    try:
        panel = res.panel(operating_points=ops, n_boot=cfg.n_boot, seed=seed, level=cfg.ci, llr=cfg.panel_llr,
                          p_target=cfg.p_target, c_miss=cfg.c_miss, c_fa=cfg.c_fa, skip_one_class=True)
    except SubgroupError as exc:  # fewer than two subgroups with both classes: the report says why
        return {"system": system, "note": f"no fairness panel: {exc}"}
    tab, grp = panel.table.copy(), panel.groups.copy()
    tab.insert(0, "system", system)
    grp.insert(0, "system", system)
    skipped = panel.settings.get("skipped") or []
    out = {"system": system, "table": tab, "groups": grp, "settings": panel.settings,
           "note": f"subgroups with trials of one class left out of the panel: {', '.join(skipped)}" if skipped else "",
           "sweep_png": png_of(plot_operating_points(panel, title=f"{system}: fairness over operating points"))}
    if cfg.panel_llr:
        names = res._prepared.sg.cells["subgroup"].astype(str).to_numpy()
        code = res._prepared.sg.code_enrol
        keep = code >= 0
        trials = pd.DataFrame({"score": res._prepared.scores[keep], "y": res._prepared.y[keep].astype(int),
                               "subgroup": names[code[keep]]})
        trials = trials[~trials["subgroup"].isin(skipped)]
        out["ape_png"] = png_of(plot_group_ape(trials, "subgroup", label="y", positive=1,
                                               title=f"{system}: Bayes error rate per subgroup"))
    return out
