"""Placeholder replaced below."""
from __future__ import annotations
from typing import Any, Sequence
import pandas as pd
from scoremix.locscale.fit import fit_locscale
from scoremix.locscale.spec import LocScaleSpec


def score_model(trials: pd.DataFrame, *, score: str = "score", label: str = "label", speaker: str = "speaker",
                factors: Sequence[str] = (), covariates: Sequence[str] = (), positive: Any = None,
                spec: LocScaleSpec | None = None, **kw: Any):
    spec = spec or LocScaleSpec(score=score, label=label, speaker=speaker, positive=positive, strata=tuple(factors),
                                speaker_by_stratum=("negative",))
    return fit_locscale(trials, spec)
