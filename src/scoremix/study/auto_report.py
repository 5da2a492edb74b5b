"""Report blocks of the ``auto = true`` models (:mod:`scoremix.study.auto`).

* :func:`auto_model_section`: the model's own section — what :func:`scoremix.score_model`
  tried and chose (candidates with their speaker-grouped cross-validated log-likelihood), which
  cells are fitted freely and which are predicted, the variance components, and the
  out-of-sample validation (table and plot per split);
* :func:`validation_blocks`: the validation summary placed beside every model-based table
  (model vs empirical EER, model-based fairness measures, DET overlays).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from scoremix import report_html as rh
from scoremix.study.results import StudyResult

__all__ = ["auto_model_section", "validation_blocks", "VALIDATION_TEXT"]

VALIDATION_TEXT = (
    "Out-of-sample check (validate_model): the model is fitted — its specification chosen again — on a share A of "
    "the trials and its EER and minimum DCF (p_target = 0.05, at attainable thresholds: the model's rates at the "
    "distinct fitted scores, ROCCH EER) are compared with the empirical values on the held-out share B. "
    "Split 'trials': every speaker × class × factor cell split at random (groups: speakers, subgroups, 'all "
    "positives vs one factor level' cells); split 'speakers': whole speakers held out (the model marginal over "
    "speakers). Competitors: counting (the group's own empirical value on A) and the best linear shrinkage of "
    "those counts towards the pooled value on A (λ chosen on B: an oracle that favours counting). ratio_model = "
    "MAE(model)/MAE(counting): below 1 the model predicts the held-out error rates better than counting.")


def _summary_view(v: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in ("model", "system", "split", "cells", "measure", "n_groups", "mae_model", "mae_count",
                        "mae_shrunk", "ratio_model", "ratio_shrunk", "shrink_lambda") if c in v.columns]
    return v[cols]


def validation_blocks(res: StudyResult, model: str | None = None, system: str | None = None,
                      figures: bool = False) -> list[rh.Block]:
    """The out-of-sample validation of the auto models (optionally one model/system), as a
    caption-led table (and the plots with ``figures``)."""
    fits = [m for m in res.models if m.get("auto") and m.get("validation") is not None
            and (model is None or m["model"] == model) and (system is None or m["system"] == system)]
    notes = [rh.Paragraph(f"{m['model']} on {m['system']}: {n}") for m in res.models if m.get("auto")
             and (model is None or m["model"] == model) and (system is None or m["system"] == system)
             for n in m.get("validation_notes") or []]
    if not fits:
        return notes
    tab = pd.concat([m["validation"].assign(model=m["model"], system=m["system"]) for m in fits],
                    ignore_index=True)
    share = float(fits[0]["validation"]["share"].iloc[0])
    out: list[rh.Block] = [rh.Table(_summary_view(tab), caption=(
        f"Out-of-sample validation of the score model{'s' if len(fits) > 1 else ''} beside this table (fitted share "
        f"A = {100 * share:g} %): MAE of the model, of counting and of the best shrinkage of counts against the "
        "held-out empirical values; ratio_model < 1: the model beats counting (validation.csv)")), *notes]
    if figures:
        for m in fits:
            for split, png in (m.get("validation_png") or {}).items():
                out.append(rh.Figure(png, caption=f"{m['model']} on {m['system']}: held-out EER (B) against the "
                                                  f"model's and the counting estimate from A, split by {split}",
                                     alt="validation plot"))
    return out


def auto_model_section(res: StudyResult, cfg: Any, fits: list[dict[str, Any]]) -> rh.Section:
    """The section of one ``auto = true`` model (module docstring)."""
    blocks: list[rh.Block] = [rh.Paragraph(
        f"Specification chosen automatically by score_model (auto = true): factors {cfg.factors or 'none'}, "
        f"covariates {cfg.covariates or 'none'}"
        + (f"; subset {cfg.filters}" if cfg.filters else "") + f"; {len(fits)} fit(s). A location-scale "
        "transformation mixed model: every stratum (class × factor levels) has its own increasing transform of "
        "the scores — its distribution is fitted freely, so in sample the model reproduces each stratum's counts — "
        "and on the latent scale speakers get location and log-SD effects per class (partial pooling: these are "
        "predicted). Candidates are compared by the speaker-grouped cross-validated log-likelihood (held-out "
        "speakers' marginal likelihood); the largest wins (docs/score-models.md).")]
    for f in fits:
        sel = f["selection"]
        blocks.append(rh.Table(sel, caption=f"{f['system']}: specifications tried (cv_loglik: speaker-grouped "
                                            "cross-validated log-likelihood; delta: difference from the best) and "
                                            "the one chosen"))
        cells = f.get("selection_cells")
        if cells is not None and len(cells):
            counts = cells.groupby("status").size().to_dict()
            blocks.append(rh.Table(cells, caption=f"{f['system']}: what is fitted freely "
                                                  f"({counts.get('fitted freely', 0)} strata: one transform each) "
                                                  f"and what is predicted with partial pooling"))
        if f.get("shape_pooling") is not None:
            blocks.append(rh.Table(f["shape_pooling"], caption=f"{f['system']}: pooling of the strata's shapes toward "
                                                               "a shared class shape (kappa: 0 = one free transform "
                                                               "per stratum, inf = shared shape; cv_crps: "
                                                               "speaker-grouped CV of the threshold-weighted CRPS, "
                                                               "lower is better)"))
        vc = f["varcorr"].copy()
        vc = vc.astype(object).where(vc.notna(), "")
        blocks.append(rh.Table(vc, caption=f"{f['system']}: random-effect SDs and correlations on the latent scale"))
    val = validation_blocks(res, model=cfg.name, figures=True)
    if val:
        blocks.append(rh.Paragraph(VALIDATION_TEXT))
        blocks += val
    return rh.Section(f"Model {cfg.name} (automatic specification)", blocks)
