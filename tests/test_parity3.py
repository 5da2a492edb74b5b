"""lme4 parity part 3 (issue 20): Kenward–Roger at singular fits, ranova with offsets.

References: ``tests/data/parity3/<id>.json`` from ``r_scripts/parity3_reference.R``
(lme4 + lmerTest + pbkrtest, tight bobyqa fits), and a live re-run of that script when R is
present.
"""

from __future__ import annotations

import json
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import scoremix as sm
from scoremix.lme.kenward_roger import _w_from_information, kr_info

REF_DIR = Path(__file__).resolve().parents[1] / "tests" / "data" / "parity3"
REPO_ROOT = REF_DIR.parents[2]
KR = sorted(p.stem for p in REF_DIR.glob("kr_*.json"))
RANOVA = sorted(p.stem for p in REF_DIR.glob("ranova_*.json"))


def _num(v) -> float:
    return np.nan if v in (None, "NA", "NaN") else float(v)


def _list(v) -> list:
    return list(v) if isinstance(v, list) else [v]


def table(t: dict) -> pd.DataFrame:
    """A table written by jsonlite (one-row columns come unboxed)."""
    return pd.DataFrame({k: [_num(v) for v in _list(vals)] for k, vals in t["columns"].items()},
                        index=_list(t["rownames"]))


def load(name: str, folder: Path = REF_DIR) -> tuple[dict, pd.DataFrame]:
    ref = json.loads((folder / f"{name}.json").read_text())
    return ref, pd.read_csv(folder / f"{ref['data']}.csv")


def fit(ref: dict, df: pd.DataFrame) -> sm.LmerResult:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.lmer(ref["formula"], df, REML=ref["REML"], weights=ref.get("weights"),
                       offset=ref.get("offset"))


def assert_cols(ours: pd.DataFrame, theirs: pd.DataFrame, cols, what: str, rtol: float) -> None:
    assert list(ours.index) == list(theirs.index), what
    for c in cols:
        a, b = ours[c].to_numpy(float), theirs[c].to_numpy(float)
        assert np.all(np.isfinite(a) == np.isfinite(b)), f"{what}[{c}]: {a} vs {b}"
        ok = np.isfinite(b)
        np.testing.assert_allclose(a[ok], b[ok], rtol=rtol, atol=1e-8, err_msg=f"{what}[{c}]")


@pytest.mark.parametrize("name", KR)
def test_kenward_roger_singular_fit_matches_pbkrtest(name):
    ref, df = load(name)
    m = fit(ref, df)
    crit = m.reml_criterion if ref["REML"] else m.deviance
    assert crit <= ref["deviance"] + 1e-6 * abs(ref["deviance"])
    kr = kr_info(m)
    # finite, and pbkrtest's adjusted covariance to 1e-5
    assert np.all(np.isfinite(kr.vcov_adj))
    np.testing.assert_allclose(kr.vcov_adj, np.asarray(ref["vcov_adj"]), rtol=1e-5, atol=1e-9)
    coef = m.coef_table(ddf="Kenward-Roger")
    want = table(ref["coef_kenward_roger"])
    assert_cols(coef, want, ["Estimate", "Std. Error", "df", "t value", "Pr(>|t|)"],
                f"{name} coef", 1e-4)
    an = sm.anova(m, ddf="Kenward-Roger")
    wan = table(ref["anova_kenward_roger"])
    assert np.all(an["F value"].to_numpy() > 0)
    assert_cols(an, wan, ["NumDF", "DenDF", "F value", "Pr(>F)"], f"{name} anova", 1e-4)


def test_generalised_inverse_cuts_roundoff_eigenvalue():
    """pbkrtest's ``ginv`` (MASS) drops singular values below ``sqrt(eps)·s_max``; a
    round-off eigenvalue of ``1e-14·s_max`` must not turn into ``1e14`` in ``W``."""
    rng = np.random.default_rng(1)
    Q, _ = np.linalg.qr(rng.normal(size=(5, 5)))
    ev = np.array([300.0, 80.0, 20.0, 5.0, 300.0 * 3e-15])
    IE2 = (Q * ev) @ Q.T
    W = _w_from_information(IE2)
    want = 2 * (Q[:, :4] / ev[:4]) @ Q[:, :4].T       # the exact pseudo-inverse, null cut
    np.testing.assert_allclose(W, want, atol=1e-12)
    # and a regular matrix is inverted exactly
    IE2r = (Q * np.r_[ev[:4], 1.0]) @ Q.T
    np.testing.assert_allclose(_w_from_information(IE2r), 2 * np.linalg.inv(IE2r), rtol=1e-12)


@pytest.mark.parametrize("name", RANOVA)
def test_ranova_with_offset_matches_lmertest(name):
    ref, df = load(name)
    m = fit(ref, df)
    got = sm.ranova(m)
    want = table(ref["ranova"])
    assert_cols(got, want, ["npar", "logLik", "AIC", "LRT", "Df", "Pr(>Chisq)"], name, 1e-5)


@pytest.mark.r
def test_live_r_reference(rscript, tmp_path):
    """Re-run the R script and compare two of its outputs with the stored ones and with
    scoremix."""
    out = subprocess.run([rscript, str(REPO_ROOT / "r_scripts" / "parity3_reference.R"),
                          str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    for name in ("kr_rabbit_singular", "ranova_offset_arg"):
        ref, df = load(name, tmp_path)
        stored, _ = load(name)
        m = fit(ref, df)
        if "coef_kenward_roger" in ref:
            assert_cols(m.coef_table(ddf="Kenward-Roger"), table(ref["coef_kenward_roger"]),
                        ["Std. Error", "df"], name, 1e-4)
        assert_cols(sm.ranova(m), table(ref["ranova"]), ["LRT"], name, 1e-5)
        assert_cols(table(stored["ranova"]), table(ref["ranova"]), ["LRT"], name, 1e-8)


# ---- data-dependent calls and splines inside formulas -------------------------------------

FORMULA = sorted(p.stem for p in REF_DIR.glob("formula_*.json"))
DATA_FILES = {"chick": REF_DIR / "chick.csv",
              "orthodont": REF_DIR.parent / "battery" / "data" / "Orthodont.csv"}
FACTORS = {"chick": ("Chick", "Diet"), "orthodont": ("Subject", "Sex")}


def formula_case(name: str, folder: Path = REF_DIR) -> tuple[dict, pd.DataFrame]:
    ref = json.loads((folder / f"{name}.json").read_text())
    df = pd.read_csv(DATA_FILES[ref["data"]])
    for c in FACTORS[ref["data"]]:
        df[c] = df[c].astype(str)
    return ref, df


@pytest.mark.parametrize("name", FORMULA)
def test_formula_calls_match_lme4(name):
    """``I(age - mean(age))``, ``sd``, ``median``, ``min``, ``max``, ``ns()``, ``bs()``: the
    fit equals lme4's (criterion no higher, β to 1e-5 relative, SEs and θ to 1e-4), and
    predictions on new data (outside the boundary knots too) equal lme4's ``predict``."""
    ref, df = formula_case(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = sm.lmer(ref["formula"], df, REML=ref["REML"])
    crit = m.reml_criterion if ref["REML"] else m.deviance
    assert crit <= ref["criterion"] + 1e-7 * abs(ref["criterion"])
    assert list(m.fixef.index) == list(ref["fixef"])
    np.testing.assert_allclose(m.fixef.to_numpy(), list(ref["fixef"].values()), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m.se.to_numpy(), ref["se"], rtol=1e-4)
    np.testing.assert_allclose(m.theta.to_numpy(), ref["theta"], rtol=1e-4, atol=1e-5)
    if "newdata" in ref:
        nd = pd.DataFrame(ref["newdata"])
        for c in FACTORS[ref["data"]]:
            nd[c] = nd[c].astype(str)
        np.testing.assert_allclose(m.predict(nd, re_form="NA").to_numpy(), ref["predict_fixed"],
                                   rtol=1e-6)
        np.testing.assert_allclose(m.predict(nd).to_numpy(), ref["predict_full"], rtol=1e-6)


def test_spline_bases_match_r_closed_values():
    """``bs``/``ns`` against values printed by R 4.2 ``splines`` (knots at quantiles, the
    natural-spline projection, and the continuation outside the boundary knots)."""
    from scoremix.lme.splines import fit_basis
    x = np.array([1.5, 2, 3.3, 4, 5.1, 6, 7.7, 8, 9.2, 10])
    nx = np.array([0, 1.5, 5, 10, 12.0])
    b = fit_basis("bs", x, df=5)
    np.testing.assert_allclose(b.knots, [4.0, 7.7])
    np.testing.assert_allclose(b.basis(nx)[[0, 2, 4]], [
        [-3.6537003, 0.58331701, -0.0256167, 0.0, 0.0],
        [0.1383905, 0.55420060, 0.2999014, 0.007507508, 0.0],
        [0.0, -0.06820119, 1.2864327, -6.752874350, 6.534643]], atol=2e-7)
    n = fit_basis("ns", x, df=4)
    np.testing.assert_allclose(n.knots, [3.475, 5.55, 7.925])
    np.testing.assert_allclose(n.basis(nx)[[0, 2, 4]], [
        [0.0, 0.1803436, -0.5671047, 0.3867611],
        [0.5809349, -0.0311173, 0.2829537, -0.1929723],
        [0.0, -1.1259677, 0.6491274, 1.4768403]], atol=2e-7)


def test_summary_of_missing_column_is_a_named_error():
    rng = np.random.default_rng(3)
    df = pd.DataFrame({"y": rng.normal(size=12), "x": [np.nan] + list(range(11)),
                       "g": list("abc") * 4})
    with pytest.raises(sm.FormulaError, match=r"mean\(x\).*'x'.*na.rm"):
        sm.lmer("y ~ I(x - mean(x)) + (1 | g)", df)
    with pytest.raises(sm.FormulaError, match="trim"):
        sm.lmer("y ~ I(x - mean(x, 0.1)) + (1 | g)", df)
    # with na.rm the mean is over the non-missing rows, as R's
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = sm.lmer("y ~ I(x - mean(x, na.rm = TRUE)) + (1 | g)", df)
        m0 = sm.lmer("y ~ x + (1 | g)", df)
    b0 = m0.fixef.to_numpy()
    np.testing.assert_allclose(m.fixef.iloc[0], b0[0] + b0[1] * np.nanmean(df.x), rtol=1e-8)


@pytest.mark.r
def test_live_r_formula_reference(rscript, tmp_path):
    out = subprocess.run([rscript, str(REPO_ROOT / "r_scripts" / "parity3_formula_reference.R"),
                          str(tmp_path)], capture_output=True, text=True, timeout=300,
                         cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    for name in ("formula_mean_center", "formula_ns_df3"):
        live = json.loads((tmp_path / f"{name}.json").read_text())
        stored = json.loads((REF_DIR / f"{name}.json").read_text())
        np.testing.assert_allclose(list(live["fixef"].values()), list(stored["fixef"].values()),
                                   rtol=1e-8)


@pytest.mark.parametrize("wrapper", ["toep", "ou"])  # cs()/ar1()/diag() are fitted: tests/test_lmer_structured.py
def test_unsupported_structured_covariances_are_refused_by_name(wrapper):
    df = pd.DataFrame({"y": np.arange(12.0) % 5, "x": np.arange(12.0), "g": list("abc") * 4})
    with pytest.raises(sm.FormulaError, match=rf"{wrapper}\("):
        sm.lmer(f"y ~ x + {wrapper}(1 + x | g)", df)
