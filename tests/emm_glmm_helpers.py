"""Replay of the GLMM emmeans battery (``r_scripts/emmeans_glmm_battery.R``)."""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import scoremix as sm
from scoremix.emm import contrast, emmeans, joint_tests, regrid

DATA = Path(__file__).resolve().parent / "data"
GLMM_BATTERY = DATA / "emmeans" / "glmm_battery.json"


def load_glmm_battery() -> dict:
    return json.loads(GLMM_BATTERY.read_text())


def load_glmm_data(m: dict) -> pd.DataFrame:
    d = pd.read_csv(DATA / m["data"], dtype={f: str for f in m["factors"]}, keep_default_na=False,
                    na_values=["NA"])
    if m.get("subset") == "id100":
        d = d[d["id"].astype(int) <= 100].reset_index(drop=True)
    return d


_FITS: dict = {}


def native_fit(m: dict):
    """``sm.glmer`` on the battery entry's data (cached)."""
    if m["id"] not in _FITS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _FITS[m["id"]] = sm.glmer(m["formula"], load_glmm_data(m), family=m["family"], link=m["link"])
    return _FITS[m["id"]]


def fit_at_lme4(m: dict):
    """The native fit with lme4's ``β̂`` and ``vcov`` (the emmeans layer is a function of
    these and of the design, so it is compared with R at identical inputs; the engines agree
    on them to the optimisers' tolerance, tests/test_glmm.py)."""
    key = ("atR", m["id"])
    if key not in _FITS:
        fit = copy.copy(native_fit(m))
        names = list(fit.fixef.index)
        assert names == list(m["fixef"]), (names, list(m["fixef"]))
        fit.fixef = pd.Series(list(m["fixef"].values()), index=names)
        fit.vcov = pd.DataFrame(np.asarray(m["vcov"], float), index=names, columns=names)
        _FITS[key] = fit
    return _FITS[key]


def run_glmm_query(fit, q: dict) -> pd.DataFrame:
    if q["kind"] == "joint_tests":
        return joint_tests(fit, by=q.get("by"))
    emm = emmeans(fit, q["specs"], by=q.get("by"), at=q.get("at"), weights=q.get("weights", "equal"),
                  type=q.get("type", "link"))
    if q.get("regrid"):
        emm = regrid(emm)
    if q["kind"] == "emmeans":
        return emm.summary()
    ref = q.get("ref")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        con = contrast(emm, q["method"], adjust=q["adjust"], ref=None if ref is None else int(ref) - 1)
        s = con.summary()
        ci = con.confint()
    lo = [c for c in ci.columns if c in ("lower.CL", "asymp.LCL")][0]
    hi = [c for c in ci.columns if c in ("upper.CL", "asymp.UCL")][0]
    s["lower.CL.adj"] = ci[lo].to_numpy()
    s["upper.CL.adj"] = ci[hi].to_numpy()
    return s
