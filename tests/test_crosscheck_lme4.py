"""Native ``scoremix.lmer`` against stored lme4 / glmmTMB references (and live lme4 when R
is present).

The references in ``tests/data/reference/`` were made by ``r_scripts/make_references.py``
with lme4 1.1-31 at tight settings (``fit_lme4.R --tight``) and glmmTMB 1.1.5; the truth
they provide is independent of scoremix's code (R builds its own model matrices).

Tolerances (relative unless stated):

* REML criterion / deviance: 1e-6, and the native criterion is never worse (higher) than
  the reference by more than 1e-8 relative (a correct optimum cannot be worse);
* fixed effects, their SEs and the standard deviations of ``VarCorr``: 1e-4, with an
  absolute floor of 1e-4 × SE for fixed effects near 0; correlations 1e-4 absolute;
* θ: 1e-4 relative, absolute 1e-4 for θ below 1e-2 (near-singular components sit in a flat
  part of the likelihood where θ is determined only to ~√(criterion tolerance));
* sleepstudy's correlated model: the REML surface is flat along the correlation, and
  lme4 (tight) and the native engine stop 1e-5 apart in θ with criteria equal to 1e-12 —
  covered by the 1e-4 tolerance.
* live lme4 at default settings: 1e-3 on variance components, θ and SEs (lme4's defaults
  are loose, ``../shared/docs/install-notes.md``), 1e-4 on fixed effects, criterion never
  better than native by more than 1e-8 relative.
"""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scoremix.lme.api import lmer

REF = Path(__file__).resolve().parent / "data" / "reference"
R_DIR = Path(__file__).resolve().parents[1] / "r_scripts"
MANIFEST: dict = json.loads((REF / "manifest.json").read_text())


def _load_ref(name: str) -> dict:
    return json.loads((REF / MANIFEST[name]["json"]).read_text())


@pytest.fixture(scope="session")
def insteval_csv(rscript: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """InstEval exported from R into a temporary folder (73k rows, not committed)."""
    out = tmp_path_factory.mktemp("insteval")
    subprocess.run([rscript, str(R_DIR / "export_datasets.R"), str(out), "insteval"],
                   check=True, capture_output=True, text=True, timeout=300)
    return out / "InstEval.csv"


def _dataset(name: str, request: pytest.FixtureRequest) -> pd.DataFrame:
    kind, _, rest = MANIFEST[name]["source"].partition(":")
    if kind == "committed":
        return pd.read_csv(REF / rest)
    if kind == "r-export":
        return pd.read_csv(request.getfixturevalue("insteval_csv"))
    shared = request.getfixturevalue("shared_data")
    path = shared / rest
    if not path.is_file():
        pytest.skip(f"{path} is absent from the shared data folder")
    with gzip.open(path, "rt") as fh:
        return pd.read_csv(fh)


def _criterion(d: dict) -> float:
    """-2 log-likelihood (REML criterion for REML fits, deviance for ML fits)."""
    return -2.0 * float(d["loglik"])


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def _assert_agree(nat: dict, ref: dict, *, theta_tol: float = 1e-4, sd_tol: float = 1e-4,
                  fe_tol: float = 1e-4, crit_tol: float = 1e-6, se_tol: float = 1e-4) -> None:
    c_nat, c_ref = _criterion(nat), _criterion(ref)
    assert _rel(c_nat, c_ref) < crit_tol, (c_nat, c_ref)
    assert c_nat <= c_ref + 1e-8 * abs(c_ref), f"native criterion {c_nat} worse than reference {c_ref}"
    if ref["REML"]:
        assert nat["reml_criterion"] == pytest.approx(ref["reml_criterion"], rel=crit_tol)
    else:
        assert nat["deviance"] == pytest.approx(ref["deviance"], rel=crit_tol)
    assert list(nat["fixef"]) == list(ref["fixef"])
    for k, v in ref["fixef"].items():
        assert abs(nat["fixef"][k] - v) <= fe_tol * max(abs(v), ref["se"][k]), (k, nat["fixef"][k], v)
        assert nat["se"][k] == pytest.approx(ref["se"][k], rel=se_tol), k
    th_n, th_r = np.asarray(nat["theta"]), np.asarray(ref["theta"])
    assert th_n.shape == th_r.shape
    bound = theta_tol * np.abs(th_r) + np.where(th_r < 1e-2, 1e-4, 0.0)
    assert np.all(np.abs(th_n - th_r) <= bound), f"theta {th_n} vs reference {th_r}"
    vn = {(r["grp"], r["var1"], r["var2"]): r for r in nat["varcorr"]}
    for r in ref["varcorr"]:
        key = (r["grp"], r["var1"], r["var2"])
        assert key in vn, f"varcorr row {key} missing from native result"
        if r["var2"] is None:
            assert vn[key]["sdcor"] == pytest.approx(r["sdcor"], rel=sd_tol, abs=1e-8), key
        else:
            assert vn[key]["sdcor"] == pytest.approx(r["sdcor"], abs=sd_tol), key
    assert nat["nobs"] == ref["nobs"]
    assert {k: int(v) for k, v in nat["ngrps"].items()} == ref["ngrps"]
    if ref.get("sigma_by") is not None:
        for lev, s in ref["sigma_by"].items():
            assert nat["sigma_by"][lev] == pytest.approx(s, rel=sd_tol), lev


def _fit_native(name: str, data: pd.DataFrame) -> dict:
    m = MANIFEST[name]
    return lmer(m["formula"], data, REML=m["REML"], dispersion=m["dispersion"]).to_dict()


FAST = [n for n, m in MANIFEST.items() if m["dataset"] != "InstEval"]


@pytest.mark.parametrize("name", FAST)
def test_native_matches_reference(name: str, request: pytest.FixtureRequest) -> None:
    data = _dataset(name, request)
    ref = _load_ref(name)
    nat = _fit_native(name, data)
    _assert_agree(nat, ref)


@pytest.mark.slow
@pytest.mark.r
def test_native_matches_reference_insteval(request: pytest.FixtureRequest) -> None:
    data = _dataset("insteval_reml", request)
    nat = _fit_native("insteval_reml", data)
    _assert_agree(nat, _load_ref("insteval_reml"))


@pytest.mark.parametrize("name", ["sleepstudy_corr_reml", "penicillin_reml", "pastes_reml",
                                  "sim_detector_reml"])
def test_ranef_match_reference(name: str, request: pytest.FixtureRequest) -> None:
    """Conditional modes and their conditional SDs (lme4's postVar), matched by level label."""
    data = _dataset(name, request)
    ref = _load_ref(name)
    nat = _fit_native(name, data)
    for g, r in ref["ranef"].items():
        n = nat["ranef"][g]
        assert n["terms"] == r["terms"]
        pos = {str(lv): i for i, lv in enumerate(n["levels"])}
        idx = [pos[str(lv)] for lv in r["levels"]]
        vals_n = np.asarray(n["values"])[idx]
        vals_r = np.asarray(r["values"])
        scale = np.abs(vals_r).max(axis=0)
        np.testing.assert_allclose(vals_n, vals_r, atol=1e-4 * scale.max())
        np.testing.assert_allclose(np.asarray(n["condsd"])[idx], np.asarray(r["condsd"]), rtol=1e-4)


def test_reference_fixed_effects_closed_form() -> None:
    """Independent check of a stored reference: in the balanced Pastes design the GLS
    intercept is the grand mean, and its variance is the closed form
    ``σ_batch²/10 + σ_cask²/30 + σ²/60``."""
    d = pd.read_csv(REF / "Pastes.csv")
    ref = _load_ref("pastes_reml")
    assert ref["fixef"]["(Intercept)"] == pytest.approx(d["strength"].mean(), rel=1e-12)
    v = {r["grp"]: r["vcov"] for r in ref["varcorr"]}
    se2 = v["batch"] / 10 + v["cask:batch"] / 30 + v["Residual"] / 60
    assert ref["se"]["(Intercept)"] ** 2 == pytest.approx(se2, rel=1e-9)


def test_glmmtmb_reference_equals_weighted_lme4(rscript: str, tmp_path: Path) -> None:
    """The glmmTMB dispersion reference is reproduced by lme4 with weights 1 (bonafide) and
    σ_bonafide²/σ_spoof² (spoof) at glmmTMB's ratio: same REML log-likelihood (install-notes
    recipe), so the two R packages agree on what the class-specific model is."""
    ref = _load_ref("sim_detector_disp_reml")
    d = pd.read_csv(REF / "sim_detector.csv")
    ratio = (ref["sigma_by"]["bonafide"] / ref["sigma_by"]["spoof"]) ** 2
    d["w"] = np.where(d["label"] == "spoof", ratio, 1.0)
    csv = tmp_path / "d.csv"
    d.to_csv(csv, index=False)
    out = tmp_path / "o.json"
    subprocess.run([rscript, str(R_DIR / "fit_lme4.R"), str(csv), ref["formula"], str(out),
                    "--tight", "--weights=w"], check=True, capture_output=True, timeout=300)
    w = json.loads(out.read_text())
    assert w["loglik"] == pytest.approx(ref["loglik"], rel=1e-9)
    assert w["sigma"] == pytest.approx(ref["sigma_by"]["bonafide"], rel=1e-5)
    for k, v in ref["fixef"].items():
        assert w["fixef"][k] == pytest.approx(v, rel=1e-5, abs=1e-6)


LIVE = ["sleepstudy_corr_reml", "sleepstudy_uncorr_ml", "penicillin_reml", "pastes_ml",
        "sim_detector_reml", "sim_detector_ml"]


@pytest.mark.r
@pytest.mark.parametrize("name", LIVE)
def test_native_vs_live_lme4_default(name: str, rscript: str, tmp_path: Path,
                                     request: pytest.FixtureRequest) -> None:
    """Re-fit with lme4 at its DEFAULT settings now, and compare (looser tolerance)."""
    m = MANIFEST[name]
    data = _dataset(name, request)
    csv = tmp_path / "d.csv"
    data.to_csv(csv, index=False)
    out = tmp_path / "o.json"
    args = [rscript, str(R_DIR / "fit_lme4.R"), str(csv), m["formula"], str(out)]
    if not m["REML"]:
        args.append("--ml")
    subprocess.run(args, check=True, capture_output=True, timeout=300)
    live = json.loads(out.read_text())
    nat = _fit_native(name, data)
    # SEs of fixed effects follow the variance components (e.g. labelspoof's SE ~ σ_attack/√6)
    _assert_agree(nat, live, theta_tol=1e-3, sd_tol=1e-3, fe_tol=1e-4, crit_tol=1e-6, se_tol=1e-3)


def test_reference_files_complete() -> None:
    """Every manifest entry has a JSON in the schema with the keys the tests use."""
    for name in MANIFEST:
        d = _load_ref(name)
        assert d["schema"] == "scoremix.lmer/1"
        assert d["converged"] is True
        assert (d["reml_criterion"] is None) != d["REML"]
        assert _criterion(d) == pytest.approx(d["reml_criterion"] if d["REML"] else d["deviance"],
                                              rel=1e-12)
