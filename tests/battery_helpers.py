"""Helpers of the lme4-parity battery tests: data sets, models and stored R references.

``tests/data/battery/`` holds

* ``models.json``: the battery (id, data set, formula, REML, weights, offset, contrasts,
  source);
* ``data/<dataset>.csv`` + ``data/datasets.json``: the data sets as exported by
  ``r_scripts/battery.R export`` (column classes and R's factor levels, so factors, their
  reference levels and ordered factors are rebuilt exactly);
* ``refs/<id>.json``: lme4 + lmerTest at tight settings (``r_scripts/battery.R fit``);
* ``model_matrix.json``: R's ``model.matrix`` and ``predict`` for the formula features
  (``r_scripts/battery_model_matrix.R``).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

BATTERY = Path(__file__).resolve().parent / "data" / "battery"
DATA = BATTERY / "data"
REFS = BATTERY / "refs"
MODELS: list[dict[str, Any]] = json.loads((BATTERY / "models.json").read_text())
MODEL_BY_ID = {m["id"]: m for m in MODELS}


def as_list(v: Any) -> list:
    """R's JSON ``auto_unbox`` turns length-1 vectors into scalars; undo that."""
    return list(v) if isinstance(v, list) else [v]


@lru_cache(maxsize=None)
def _meta() -> dict:
    return json.loads((DATA / "datasets.json").read_text())


def load_dataset(name: str, data_dir: Path = DATA) -> pd.DataFrame:
    """A battery data set with R's column classes: factors become pandas Categoricals with
    R's levels in R's order (``ordered=True`` for R's ordered factors)."""
    cols = json.loads((data_dir / "datasets.json").read_text())[name] if data_dir != DATA else _meta()[name]
    factors = {c for c, info in cols.items() if info["type"] != "numeric"}
    d = pd.read_csv(data_dir / f"{name}.csv", dtype={c: str for c in factors},
                    keep_default_na=False, na_values=["NA"])
    for c in factors:
        info = cols[c]
        d[c] = pd.Categorical(d[c], categories=as_list(info["levels"]), ordered=info["type"] == "ordered")
    return d


def load_ref(model_id: str) -> dict:
    return json.loads((REFS / f"{model_id}.json").read_text())


def ref_table(rec: dict | None) -> pd.DataFrame | None:
    """A table stored by ``battery.R`` (rows, columns, column-wise values; null = NA)."""
    if rec is None:
        return None
    cols = as_list(rec["columns"])
    vals = [np.asarray([np.nan if x is None else x for x in as_list(v)], dtype=float)
            for v in rec["values"]]
    return pd.DataFrame(dict(zip(cols, vals)), index=as_list(rec["rows"]))


def fit_kwargs(m: dict) -> dict:
    return dict(REML=m["REML"], weights=m["weights"], offset=m["offset"], contrasts=m["contrasts"])
