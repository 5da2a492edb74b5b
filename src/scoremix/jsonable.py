"""Plain-JSON conversion of numpy/pandas values, shared by the study runner, the demo and the
command line (one leaf module with no scoremix imports, so that any of them can use it)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["to_jsonable"]


def to_jsonable(obj: Any) -> Any:
    """Convert numpy/pandas values (Series → dict, DataFrame → {row: {col: v}}) for ``json``.

    Non-finite floats become ``None`` (JSON has no NaN/inf).
    """
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, pd.Series):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, pd.DataFrame):
        return {str(i): {str(c): to_jsonable(v) for c, v in row.items()}
                for i, row in obj.to_dict(orient="index").items()}
    if isinstance(obj, np.ndarray):
        return [to_jsonable(v) for v in obj.tolist()]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return v if math.isfinite(v) else None
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj
