"""Replay of the emmeans battery (``r_scripts/emmeans_battery.R``) with scoremix.emm."""

from __future__ import annotations

import json
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

import scoremix as sm
from scoremix.emm import contrast, emmeans, joint_tests

EMM_DATA = Path(__file__).resolve().parent / "data" / "emmeans"


def load_battery(path: Path | None = None) -> dict:
    path = path or EMM_DATA / "battery.json"
    return json.loads(path.read_text())


def load_dataset(name: str, factors: list[str], shared: Path | None) -> pd.DataFrame | None:
    if name.startswith("la_"):
        if shared is None:
            return None
        p = shared / "asvspoof2019_la_eval" / "asvspoof2019_la_eval.csv.gz"
        if not p.exists():
            return None
        la = pd.read_csv(p)
        la = la[la["utt"].str.replace("LA_E_", "").astype(int) % 40 == 0]
        if name == "la_spoof":
            la = la[la["label"] == "spoof"][["speaker", "speaker_gender", "attack", "score_logit"]]
        else:
            la = la[["speaker", "speaker_gender", "label", "score_logit"]]
        return la.reset_index(drop=True)
    df = pd.read_csv(EMM_DATA / "data" / f"{name}.csv", dtype={f: str for f in factors},
                     keep_default_na=False, na_values=["NA"])
    return df


_FITS: dict = {}


def fit_model(m: dict, shared: Path | None):
    key = m["id"]
    if key not in _FITS:
        d = load_dataset(m["data"], m["factors"], shared)
        if d is None:
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _FITS[key] = sm.lmer(m["formula"], d, REML=bool(m["REML"]))
    return _FITS[key]


def _ref_index(q: dict):
    ref = q.get("ref")
    return None if ref is None else int(ref) - 1


def run_query(fit, q: dict) -> pd.DataFrame:
    kind = q["kind"]
    if kind == "joint_tests":
        return joint_tests(fit, by=q.get("by"), lmer_df=q["lmer_df"])
    emm = emmeans(fit, q["specs"], by=q.get("by"), at=q.get("at"), weights=q.get("weights", "equal"),
                  lmer_df=q["lmer_df"])
    if kind == "emmeans":
        return emm.summary()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        con = contrast(emm, q["method"], adjust=q["adjust"], ref=_ref_index(q))
        s = con.summary()
        if q["adjust"] == "mvt" and max(len(f) for f in con.families) > 4:
            # simultaneous mvt intervals of large families take minutes of quasi-Monte
            # Carlo root finding; they are compared on the families of up to 4 contrasts
            return s
        ci = con.confint()
    lo = [c for c in ci.columns if c in ("lower.CL", "asymp.LCL")][0]
    hi = [c for c in ci.columns if c in ("upper.CL", "asymp.UCL")][0]
    s["lower.CL.adj"] = ci[lo].to_numpy()
    s["upper.CL.adj"] = ci[hi].to_numpy()
    return s


TOL = {"emmean": 1e-6, "estimate": 1e-6, "SE": 1e-6, "df": 1e-4, "p.value": 1e-4, "t.ratio": 1e-6,
       "z.ratio": 1e-6, "lower.CL": 1e-6, "upper.CL": 1e-6, "asymp.LCL": 1e-6, "asymp.UCL": 1e-6,
       "df1": 0, "df2": 1e-2 + 1e-9, "F.ratio": 1e-3 + 1e-9}


def compare(ours: pd.DataFrame, ref: list[dict], q: dict) -> list[str]:
    """Differences beyond the stated tolerances (relative to max(1, |ref|) for estimates,
    absolute for p-values)."""
    R = pd.DataFrame(ref)
    errs = []
    if len(R) != len(ours):
        return [f"rows {len(ours)} != R {len(R)}"]
    for col in R.columns:
        if col not in ours.columns and col != "p.value.precise":
            if col not in ("lower.CL.adj", "upper.CL.adj"):   # intervals may be skipped (mvt)
                errs.append(f"missing column {col}")
            continue
        r = R[col]
        if r.dtype == object and col not in TOL:
            a = ours[col].astype(str).tolist() if ours[col].dtype == object else [
                format(float(v), ".15g") for v in ours[col]]
            b = r.astype(str).tolist() if r.dtype == object else [format(float(v), ".15g") for v in r]
            if a != b:
                errs.append(f"{col}: {a[:4]} != R {b[:4]}")
            continue
        rv = pd.to_numeric(r, errors="coerce").to_numpy(dtype=float)
        if col == "p.value" and q.get("adjust") == "mvt":
            # quasi-Monte Carlo on both sides: mvtnorm at high precision vs scipy's Genz-Bretz
            rv = R["p.value.precise"].to_numpy(dtype=float)
            tol = 5e-4
        elif col in ("lower.CL.adj", "upper.CL.adj"):
            ov = ours[col].to_numpy(dtype=float)
            if q.get("adjust") in ("mvt", "dunnettx"):
                # critical values: emmeans's qmvt is randomised and its Dunnett quantile is a
                # uniroot with tol 5e-4; compare (limit - estimate)/SE to 5e-3
                tol = 5e-3
                d = np.abs(ov - rv) / R["SE"].to_numpy(dtype=float)
            else:
                tol = 1e-6
                d = np.abs(ov - rv) / np.maximum(1, np.abs(rv))
            if np.nanmax(d) > tol:
                errs.append(f"{col}: max rel diff {np.nanmax(d):.2e}")
            continue
        elif col == "p.value.precise":
            continue
        else:
            tol = TOL.get(col, 1e-6)
        ov = pd.to_numeric(ours[col], errors="coerce").to_numpy(dtype=float)
        if col == "df" and np.all(np.isnan(rv)):
            ok = np.all(~np.isfinite(ov))
            if not ok:
                errs.append("df should be infinite")
            continue
        if col == "df2" and np.all(np.isnan(rv)):
            continue
        if col in ("p.value",):
            d = np.abs(ov - rv)
        else:
            d = np.abs(ov - rv) / np.maximum(1, np.abs(rv))
        if np.any(np.isnan(ov) != np.isnan(rv)) or np.nanmax(d, initial=0) > tol:
            errs.append(f"{col}: max diff {np.nanmax(d, initial=0):.2e} (tol {tol})")
    return errs


def fit_at_theta(fit, theta):
    """The same model evaluated at lme4's ``θ`` (so the emmeans layer is compared with R
    at identical variance parameters; the engines agree on ``θ`` only to the optimisers'
    tolerance, ~1e-6 relative for random-slope models)."""
    from scoremix.lme.conditional import estimates_at
    from scoremix.lme.engine import NativeFit
    from scoremix.lme.optimizer import OptimResult
    from scoremix.lme.result import LmerResult
    th = np.asarray(theta, dtype=float)
    est = estimates_at(fit.cp, th, fit.REML, None)
    opt = OptimResult(theta=th, rho=None, criterion=float(est["criterion"]), converged=True,
                      singular=bool(np.any(th == 0)), n_eval=0)
    nf = NativeFit(spec=fit.spec, cp=fit.cp, REML=fit.REML, opt=opt, estimates=est, info={})
    return LmerResult.from_native(nf)


def battery_fit(m: dict, shared: Path | None):
    """The model of battery entry ``m`` at R's ``θ`` (or the native fit when the stored
    references carry no ``θ``)."""
    key = ("atR", m["id"])
    if key not in _FITS:
        fit = fit_model(m, shared)
        if fit is None:
            return None
        _FITS[key] = fit_at_theta(fit, m["theta"]) if m.get("theta") is not None else fit
    return _FITS[key]
