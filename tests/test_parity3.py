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
