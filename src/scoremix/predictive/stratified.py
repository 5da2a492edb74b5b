"""Model EER of a stratified transformation fit (layer 5: it reads a layer-4 fit through the
predictive layer)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from scoremix.predictive.layer import predictive
from scoremix.transform.errors import TransformError
from scoremix.transform.strata import StratifiedTransform

__all__ = ["stratified_model_eer"]


def stratified_model_eer(fit: Any, label: str = "label", positive: Any = None,
                         conditional: bool = True, data: pd.DataFrame | None = None,
                         neg_mask: np.ndarray | None = None, pos_mask: np.ndarray | None = None,
                         thresholds: str = "attainable") -> float:
    """Model EER of a stratified transformation fit (``transform="monotone-by-class"``),
    optionally of a subset of its positives/negatives.

    ``pos_mask``/``neg_mask`` (boolean over the model frame's rows) restrict the
    positives/negatives (e.g. one attack's trials against all bona fide ones).  Computed by
    the predictive layer (:func:`scoremix.predictive.predictive`, ``Predictive.eer``): per-trial
    latent moments, each trial at its stratum's latent threshold
    :math:`h^-_{s(i)}(\tau)`, the root of FNR = FPR over one common score threshold
    (:mod:`scoremix.predictive.axis`) with ``thresholds="latent"``, the ROCCH EER at the
    observed scores with ``"attainable"`` (default; :mod:`scoremix.predictive.attainable`).
    ``sm.model_eer(fit)`` gives the same value for all trials.
    """
    if not isinstance(getattr(fit, "transform", None), StratifiedTransform):
        raise TransformError("stratified_model_eer needs a fit with transform='monotone-by-class'")
    pred = predictive(fit, data=data, label=label, positive=positive, conditional=conditional)
    y = pred.y == 1
    keep = np.ones(y.size, bool)
    for m, cls in ((pos_mask, y), (neg_mask, ~y)):
        if m is not None:
            m = np.asarray(m, bool)
            if m.shape != y.shape:
                raise TransformError(f"masks must have one entry per model-frame row ({y.size}), got {m.shape}")
            keep &= ~cls | m
    return float(pred.eer(keep, thresholds=thresholds)[0])
