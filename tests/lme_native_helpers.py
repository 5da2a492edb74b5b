"""Helpers shared by the native-engine tests: hand-built ModelSpecs and lme4 references.

The specs are built directly from columns (no formula parser), so these tests exercise the
engine independently of :mod:`scoremix.lme.model_frame`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from scoremix.lme.spec import ModelSpec, RandomTerm

NATIVE_DATA = Path(__file__).resolve().parent / "data" / "native"


def load_csv(name: str) -> pd.DataFrame:
    return pd.read_csv(NATIVE_DATA / f"{name}.csv")


def load_ref(name: str) -> dict:
    """The lme4 reference JSON written by ``r_scripts/native_reference.R`` ("NA" → nan)."""
    def fix(o):
        if isinstance(o, dict):
            out = {k: fix(v) for k, v in o.items()}
            for k in ("theta", "theta_names", "terms", "levels"):  # R's auto_unbox makes length-1 vectors scalars
                if k in out and not isinstance(out[k], list):
                    out[k] = [out[k]]
            return out
        if isinstance(o, list):
            return [fix(v) for v in o]
        return np.nan if o == "NA" else o
    return fix(json.loads((NATIVE_DATA / f"{name}.json").read_text()))


def _cols(df: pd.DataFrame, cols: list[str]) -> np.ndarray:
    out = []
    for c in cols:
        if c == "(Intercept)":
            out.append(np.ones(len(df)))
        elif ":" in c and c not in df:
            a, b = c.split(":")
            out.append(df[a].to_numpy(float) * df[b].to_numpy(float))
        else:
            out.append(df[c].to_numpy(float))
    return np.column_stack(out)


def term(df: pd.DataFrame, group: str, cols: list[str], name: str | None = None) -> RandomTerm:
    """A random term ``(cols | group)``; ``group`` may be ``"a:b"`` (interaction)."""
    if ":" in group:
        parts = group.split(":")
        g = df[parts[0]].astype(str)
        for p in parts[1:]:
            g = g + ":" + df[p].astype(str)
    else:
        g = df[group].astype(str)
    lev = sorted(g.unique())
    codes = pd.Categorical(g, categories=lev).codes.astype(np.int64)
    return RandomTerm(name or group, group, list(cols), codes, lev, _cols(df, cols))


def spec(df: pd.DataFrame, response: str, fixed: list[str], terms: list[RandomTerm],
         formula: str = "", weights: np.ndarray | None = None,
         dispersion: str | None = None) -> ModelSpec:
    """A ModelSpec with terms sorted like lme4 (most levels first)."""
    terms = sorted(terms, key=lambda t: -t.n_levels)
    kw = {}
    if dispersion is not None:
        lev = sorted(df[dispersion].astype(str).unique())
        kw = dict(dispersion_formula=f"~ {dispersion}", dispersion_levels=lev,
                  dispersion_codes=pd.Categorical(df[dispersion].astype(str), categories=lev)
                  .codes.astype(np.int64))

    def fixed_design(new: pd.DataFrame) -> np.ndarray:
        return _cols(new, fixed)

    def random_design(new: pd.DataFrame):
        out = []
        for t in terms:
            g = new[t.group_factor].astype(str)
            pos = {v: i for i, v in enumerate(t.levels)}
            codes = np.array([pos.get(v, -1) for v in g], dtype=np.int64)
            out.append((codes, _cols(new, t.term_names)))
        return out

    return ModelSpec(formula, response, df[response].to_numpy(float), _cols(df, fixed),
                     list(fixed), terms, df, weights=weights, fixed_design=fixed_design,
                     random_design=random_design, **kw)


def sleepstudy_spec(slope: bool = True) -> ModelSpec:
    d = load_csv("sleepstudy")
    cols = ["(Intercept)", "Days"] if slope else ["(Intercept)"]
    f = "Reaction ~ Days + (Days | Subject)" if slope else "Reaction ~ Days + (1 | Subject)"
    return spec(d, "Reaction", ["(Intercept)", "Days"], [term(d, "Subject", cols)], f)


def penicillin_spec() -> ModelSpec:
    d = load_csv("penicillin")
    return spec(d, "diameter", ["(Intercept)"],
                [term(d, "plate", ["(Intercept)"]), term(d, "sample", ["(Intercept)"])],
                "diameter ~ 1 + (1 | plate) + (1 | sample)")


def pastes_spec() -> ModelSpec:
    d = load_csv("pastes")
    return spec(d, "strength", ["(Intercept)"],
                [term(d, "cask:batch", ["(Intercept)"]), term(d, "batch", ["(Intercept)"])],
                "strength ~ 1 + (1 | batch/cask)")


def detector_spec(slope: bool = False) -> ModelSpec:
    d = load_csv("detector")
    att = ["(Intercept)", "label"] if slope else ["(Intercept)"]
    return spec(d, "score", ["(Intercept)", "label", "x"],
                [term(d, "speaker", ["(Intercept)"]), term(d, "attack", att)],
                "score ~ label + x + (1 | speaker) + (1 + label | attack)" if slope
                else "score ~ label + x + (1 | speaker) + (1 | attack)",
                weights=d["w"].to_numpy(float))


def singular_spec() -> ModelSpec:
    d = load_csv("singular")
    return spec(d, "y", ["(Intercept)"], [term(d, "g", ["(Intercept)"])], "y ~ 1 + (1 | g)")


def dispersion_spec(dispersion: bool = True) -> ModelSpec:
    d = load_csv("dispersion")
    return spec(d, "score", ["(Intercept)", "label"],
                [term(d, "speaker", ["(Intercept)"]), term(d, "attack", ["(Intercept)"])],
                "score ~ label + (1 | speaker) + (1 | attack)",
                dispersion="label" if dispersion else None)
