"""The statsmodels and lme4 backends against the stored lme4 references.

statsmodels' optimiser is looser than lme4 at tight settings (it stops on a gradient
norm), so its variance components are compared at 1e-3 relative (measured: up to 3.3e-4
on Pastes' batch SD), fixed effects at 1e-6 relative (GLS given θ), SEs at 1e-3 and the
criterion at 1e-7 relative.  The lme4 backend runs the same R code as
``r_scripts/fit_lme4.R``, so its JSON must equal the script's output (apart from
``timing_s``; to 1e-5 relative, since R runs are not bit-reproducible across processes
on flat optima, and to 1e-12 in the criterion).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scoremix.lme.api import lmer
from scoremix.lme.backends import lme4_backend, rutil, statsmodels_backend
from scoremix.lme.backends.rutil import BackendUnavailableError
from scoremix.lme.backends.statsmodels_backend import UnsupportedModelError
from scoremix.lme.model_frame import build_model_spec

REF = Path(__file__).resolve().parent / "data" / "reference"
R_DIR = Path(__file__).resolve().parents[1] / "r_scripts"
MANIFEST: dict = json.loads((REF / "manifest.json").read_text())


def _ref(name: str) -> dict:
    return json.loads((REF / f"{name}.json").read_text())


def _data(name: str) -> pd.DataFrame:
    return pd.read_csv(REF / MANIFEST[name]["source"].partition(":")[2])


# ---------------------------------------------------------------------- statsmodels

SM_CASES = ["sleepstudy_corr_reml", "sleepstudy_corr_ml", "sleepstudy_uncorr_reml",
            "penicillin_reml", "penicillin_ml", "pastes_reml"]


@pytest.mark.parametrize("name", SM_CASES)
def test_statsmodels_matches_reference(name: str) -> None:
    m, ref = MANIFEST[name], _ref(name)
    spec = build_model_spec(m["formula"], _data(name))
    d = statsmodels_backend.fit_dict(spec, REML=m["REML"])
    crit_sm, crit_ref = -2 * d["loglik"], -2 * ref["loglik"]
    assert crit_sm == pytest.approx(crit_ref, rel=1e-7)
    for k, v in ref["fixef"].items():
        assert d["fixef"][k] == pytest.approx(v, rel=1e-6)
        assert d["se"][k] == pytest.approx(ref["se"][k], rel=1e-3)
    got = {(r["grp"], r["var1"], r["var2"]): r["sdcor"] for r in d["varcorr"]}
    for r in ref["varcorr"]:
        key = (r["grp"], r["var1"], r["var2"])
        if r["var2"] is None:
            assert got[key] == pytest.approx(r["sdcor"], rel=1e-3), key
        else:
            assert got[key] == pytest.approx(r["sdcor"], abs=1e-3), key
    np.testing.assert_allclose(d["theta"], ref["theta"], rtol=1e-3)
    assert d["ngrps"] == ref["ngrps"]
    assert d["nobs"] == ref["nobs"]
    for g, r in ref["ranef"].items():
        pos = {str(lv): i for i, lv in enumerate(d["ranef"][g]["levels"])}
        idx = [pos[str(lv)] for lv in r["levels"]]
        vals = np.asarray(d["ranef"][g]["values"])[idx]
        np.testing.assert_allclose(vals, r["values"], atol=1e-3 * np.abs(r["values"]).max())
        np.testing.assert_allclose(np.asarray(d["ranef"][g]["condsd"])[idx], r["condsd"], rtol=1e-3)


def test_statsmodels_through_lmer_api() -> None:
    ref = _ref("penicillin_reml")
    res = lmer(ref["formula"], _data("penicillin_reml"), backend="statsmodels")
    out = res.to_dict()
    assert out["backend"] == "statsmodels"
    assert out["reml_criterion"] == pytest.approx(ref["reml_criterion"], rel=1e-7)
    assert out["aic"] == pytest.approx(ref["aic"], rel=1e-7)


def test_statsmodels_layouts() -> None:
    """Single factor → groups + exog_re; nested → outer groups + VCs; crossed → one group."""
    ss = build_model_spec("Reaction ~ Days + (Days|Subject)", _data("sleepstudy_corr_reml"))
    outer, re_term, vcs = statsmodels_backend._layout(ss)
    assert outer == "Subject" and re_term is not None and re_term.p == 2 and vcs == []
    pa = build_model_spec("strength ~ 1 + (1|batch/cask)", _data("pastes_reml"))
    outer, re_term, vcs = statsmodels_backend._layout(pa)
    assert outer == "batch" and [t.group for t in vcs] == ["cask:batch"]
    pe = build_model_spec("diameter ~ 1 + (1|plate) + (1|sample)", _data("penicillin_reml"))
    outer, re_term, vcs = statsmodels_backend._layout(pe)
    assert outer is None and re_term is None and len(vcs) == 2


def test_statsmodels_sparse_z_matches_dense_construction() -> None:
    """Z built by the backend equals indicator-times-covariate built by hand."""
    d = _data("sleepstudy_corr_reml")
    spec = build_model_spec("Reaction ~ Days + (Days|Subject)", d)
    Z = statsmodels_backend.sparse_z(spec).toarray()
    levels = spec.terms[0].levels
    expect = np.zeros((len(d), 2 * len(levels)))
    for i, (s, days) in enumerate(zip(d["Subject"].astype(str), d["Days"])):
        j = levels.index(s)
        expect[i, 2 * j] = 1.0
        expect[i, 2 * j + 1] = days
    np.testing.assert_array_equal(Z, expect)


def test_statsmodels_rejects_what_it_cannot_map() -> None:
    sim = _data("sim_detector_reml")
    spec = build_model_spec("score ~ label + (1 + x|speaker) + (1|attack)", sim)
    with pytest.raises(UnsupportedModelError, match="correlated slopes"):
        statsmodels_backend.fit_dict(spec)
    spec = build_model_spec("score ~ label + (1|speaker)", sim, dispersion="~ label")
    with pytest.raises(UnsupportedModelError, match="dispersion"):
        statsmodels_backend.fit_dict(spec)
    spec = build_model_spec("score ~ label + (1|speaker)", sim, weights=np.ones(len(sim)))
    with pytest.raises(UnsupportedModelError, match="weights"):
        statsmodels_backend.fit_dict(spec)
    assert issubclass(UnsupportedModelError, ValueError)


# ---------------------------------------------------------------------------- lme4

HAS_RPY2 = importlib.util.find_spec("rpy2") is not None


@pytest.fixture(scope="module")
def rpy2_lme4(rscript: str) -> None:
    if not HAS_RPY2:
        pytest.skip(f"rpy2 is not installed ({rutil.INSTALL_HINT_RPY2})")
    try:
        rutil.load_rpy2(("lme4", "jsonlite"))
    except BackendUnavailableError as exc:
        pytest.skip(str(exc))


def _assert_json_close(a: object, b: object, rtol: float, path: str = "") -> None:
    """Same structure, same strings/flags, numbers equal to ``rtol`` (absolute floor
    ``rtol`` × the largest magnitude in the same list)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), path
        for k in a:
            _assert_json_close(a[k], b[k], rtol, f"{path}/{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        if a and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in a):
            scale = max(abs(v) for v in a)
            np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale, err_msg=path)
        else:
            for k, (u, v) in enumerate(zip(a, b)):
                _assert_json_close(u, v, rtol, f"{path}[{k}]")
    elif isinstance(a, float) and isinstance(b, (int, float)):
        assert a == pytest.approx(b, rel=rtol), path
    else:
        assert a == b, path


def _without_timing(d: dict) -> dict:
    d = dict(d)
    d.pop("timing_s", None)
    return d


@pytest.mark.r
@pytest.mark.parametrize("name", ["sleepstudy_uncorr_reml", "pastes_ml", "sim_detector_reml"])
def test_lme4_backend_same_json_as_script(name: str, rpy2_lme4: None, rscript: str,
                                          tmp_path: Path) -> None:
    """rpy2 path == subprocess path == r_scripts/fit_lme4.R run by hand on the CSV."""
    m = MANIFEST[name]
    data = _data(name)
    spec = build_model_spec(m["formula"], data)
    a = lme4_backend.fit_json(spec, REML=m["REML"], control="tight", via="rpy2")
    b = lme4_backend.fit_json(spec, REML=m["REML"], control="tight", via="subprocess")
    out = tmp_path / "o.json"
    args = [rscript, str(R_DIR / "fit_lme4.R"), str(REF / m["source"].partition(":")[2]),
            m["formula"], str(out), "--tight"] + ([] if m["REML"] else ["--ml"])
    subprocess.run(args, check=True, capture_output=True, timeout=300)
    c = json.loads(out.read_text())
    # Same R code, same data.  Not always bit-identical between R processes: on the flat
    # sim_detector optimum two runs of the same script stop 1e-6 apart in θ (OpenBLAS
    # kernels round differently with different buffer alignment), at equal criteria.
    _assert_json_close(_without_timing(a), _without_timing(b), rtol=1e-5)
    assert a["loglik"] == pytest.approx(b["loglik"], rel=1e-12)
    # the hand-run script read the whole CSV itself (R's own factor coding): same fit.  Not
    # bit-identical: on the flat sim_detector optimum a different column set moves nloptwrap's
    # stopping point by 6e-9 relative in the fixed effects (criterion equal to 1e-14).
    ref = _ref(name)
    for d in (a, c):
        assert d["loglik"] == pytest.approx(ref["loglik"], rel=1e-12)
        for k, v in ref["fixef"].items():
            assert d["fixef"][k] == pytest.approx(v, rel=1e-7, abs=1e-12)
    assert a["timing_s"] >= 0.0


@pytest.mark.r
def test_lme4_backend_through_lmer_api(rpy2_lme4: None) -> None:
    ref = _ref("sleepstudy_corr_reml")
    res = lmer(ref["formula"], _data("sleepstudy_corr_reml"), backend="lme4")
    out = res.to_dict()
    assert out["backend"] == "lme4"
    # lme4 defaults vs tight reference: install-notes tolerance
    assert out["reml_criterion"] == pytest.approx(ref["reml_criterion"], rel=1e-8)
    np.testing.assert_allclose(out["theta"], ref["theta"], rtol=1e-3)


@pytest.mark.r
def test_lme4_backend_weights_match_native(rpy2_lme4: None) -> None:
    """Prior weights reach R: lme4 (tight) and the native engine fit the same weighted model."""
    d = _data("sleepstudy_corr_reml")
    w = np.where(d["Days"].to_numpy() >= 5, 2.0, 1.0)
    spec = build_model_spec("Reaction ~ Days + (1|Subject)", d, weights=w)
    r = lme4_backend.fit_json(spec, REML=True, control="tight")
    nat = lmer("Reaction ~ Days + (1|Subject)", d, weights=w).to_dict()
    assert nat["reml_criterion"] == pytest.approx(r["reml_criterion"], rel=1e-8)
    for k, v in r["fixef"].items():
        assert nat["fixef"][k] == pytest.approx(v, rel=1e-6)
    unweighted = _ref("sleepstudy_corr_reml")
    assert abs(r["fixef"]["Days"] - unweighted["fixef"]["Days"]) > 1e-6  # weights did something


@pytest.mark.r
@pytest.mark.parametrize("via", ["rpy2", "subprocess"])
def test_lme4_backend_passes_ordered_factors(rpy2_lme4: None, via: str) -> None:
    """An ordered pandas Categorical reaches R as an ordered factor, so lme4 uses
    contr.poly: lme4::cake's names and criterion are the stored tight lme4 reference's
    (treatment contrasts would give ``temperature185`` and a REML criterion of 1633.25)."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from battery_helpers import MODEL_BY_ID, load_dataset, load_ref
    m, ref = MODEL_BY_ID["cake_ordered_reml"], load_ref("cake_ordered_reml")
    d = load_dataset(m["dataset"])
    assert d["temperature"].cat.ordered
    spec = build_model_spec(m["formula"], d)
    out = lme4_backend.fit_json(spec, REML=True, control="tight", via=via)
    assert list(out["fixef"]) == list(ref["fixef"])
    assert -2 * out["loglik"] == pytest.approx(ref["criterion"], rel=1e-8)


@pytest.mark.r
def test_lme4_backend_dispersion_uses_glmmtmb(rpy2_lme4: None) -> None:
    pytest.importorskip("rpy2")
    if not rutil.r_has_packages(("glmmTMB",)):
        pytest.skip(f"R package glmmTMB is not installed ({rutil.INSTALL_HINT_R})")
    ref = _ref("sim_detector_disp_reml")
    spec = build_model_spec(ref["formula"], _data("sim_detector_disp_reml"), dispersion="~ label")
    d = lme4_backend.fit_json(spec, REML=True)
    assert d["backend"] == "glmmTMB"
    # glmmTMB runs are reproducible only to ~1e-12 between processes
    assert d["loglik"] == pytest.approx(ref["loglik"], rel=1e-10)
    for lev, s in ref["sigma_by"].items():
        assert d["sigma_by"][lev] == pytest.approx(s, rel=1e-7)


def test_lme4_backend_unavailable_without_rpy2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rpy2", None)
    monkeypatch.setitem(sys.modules, "rpy2.robjects", None)
    spec = build_model_spec("Reaction ~ Days + (1|Subject)", _data("sleepstudy_corr_reml"))
    with pytest.raises(BackendUnavailableError) as info:
        lme4_backend.fit(spec, REML=True)
    msg = str(info.value)
    assert "pip install scoremix[r]" in msg
    assert "apt-get install -y --no-install-recommends r-base-core r-cran-lme4" in msg
    assert isinstance(info.value, ImportError) and isinstance(info.value, ValueError)


def test_lme4_subprocess_unavailable_without_r(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rutil.shutil, "which", lambda name: None)
    rutil.r_has_packages.cache_clear()
    spec = build_model_spec("Reaction ~ Days + (1|Subject)", _data("sleepstudy_corr_reml"))
    try:
        with pytest.raises(BackendUnavailableError, match="r-cran-lme4"):
            lme4_backend.fit(spec, REML=True, via="subprocess")
    finally:
        rutil.r_has_packages.cache_clear()


def test_bad_control_and_via() -> None:
    spec = build_model_spec("Reaction ~ Days + (1|Subject)", _data("sleepstudy_corr_reml"))
    with pytest.raises(ValueError, match="via"):
        lme4_backend.fit_json(spec, via="ssh")
    with pytest.raises(ValueError, match="control"):
        lme4_backend._control_parts("loose")
    with pytest.raises(ValueError, match="optCtrl"):
        lme4_backend._control_parts({"rhoend": 1e-9})


def test_formula_columns_and_model_frame_csv(tmp_path: Path) -> None:
    cols = ["score", "label", "x", "speaker", "attack", "utt", "odd name"]
    f = 'score ~ label * x + (1|speaker) + (0 + dummy(label, "spoof")|attack) + `odd name`'
    assert rutil.formula_columns(f, cols) == ["score", "label", "x", "speaker", "attack", "odd name"]
    d = pd.DataFrame({"y": [0.1, 1 / 3, 2.0, 7.25], "g": pd.Categorical(["b", "a", "b", "a"],
                                                                         categories=["b", "a"]),
                      "h": ["z", "Z", "a", "z"], "unused": [1, 2, 3, 4]})
    spec = build_model_spec("y ~ g + (1|h)", d)
    csv, lev, wname = rutil.write_model_frame(spec, tmp_path)
    back = pd.read_csv(csv)
    assert list(back.columns) == ["y", "g", "h"] and wname is None
    np.testing.assert_array_equal(back["y"].to_numpy(), d["y"].to_numpy())  # exact round trip
    assert json.loads(lev.read_text()) == {"g": ["b", "a"], "h": ["Z", "a", "z"]}


def test_starting_r_does_not_leak_ld_library_path(rpy2_lme4: None) -> None:
    """rpy2 prepends R's library folders (with the system's /usr/lib/<arch>) to
    LD_LIBRARY_PATH when it starts R. Leaked into child processes, that made a pyenv/venv
    Python load the system's libpython and lose its site-packages (seen as
    "No module named numpy" in subprocesses started after an lme4 fit). The variable must
    be as before, and a child Python must still import numpy and scoremix."""
    code = (
        "import os, subprocess, sys\n"
        "before = os.environ.get('LD_LIBRARY_PATH')\n"
        "from scoremix.lme.backends import rutil\n"
        "ro = rutil.load_rpy2(); ro.r('1 + 1')\n"
        "assert os.environ.get('LD_LIBRARY_PATH') == before, os.environ.get('LD_LIBRARY_PATH')\n"
        "out = subprocess.run([sys.executable, '-c', 'import numpy, scoremix'], capture_output=True,"
        " text=True)\n"
        "assert out.returncode == 0, out.stderr\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "LD_LIBRARY_PATH"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]
