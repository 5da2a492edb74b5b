"""Study "contrasts" section and "model checks" panel, end to end on real ASVspoof 2019 LA
scores (a deterministic 1-in-40 subset; skipped when ../shared/data is absent): the written
emmeans.csv / contrasts.csv / model_checks.csv equal sm.emmeans / sm.contrast /
fit.check() called directly on the same model and rows, and the report shows both sections."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import scoremix as sm
from scoremix.study import parse_study, run_study
from scoremix.study.config import StudyConfigError
from scoremix.study.postfit import _checks_table


def _study(path, contrasts=True, checks=None):
    raw = {
        "study": {"name": "postfit", "title": "post-fit", "seed": 1},
        "data": {"file": str(path), "score": "score_logit", "label": "label", "positive": "bonafide",
                 "speaker": "speaker", "subgroups": ["speaker_gender"]},
        "models": [{"name": "gender", "formula": "score ~ label * speaker_gender + (1 | speaker)"}],
        "analyses": {"metrics": {}},
    }
    if contrasts:
        raw["analyses"]["contrasts"] = {"specs": ["speaker_gender | label"], "method": "pairwise",
                                        "adjust": "holm", "lmer_df": "satterthwaite"}
    if checks is not None:
        raw["analyses"]["checks"] = checks
    return raw


@pytest.fixture(scope="module")
def la_subset(tmp_path_factory, request):
    from conftest import shared_data_dir
    p = shared_data_dir() / "asvspoof2019_la_eval" / "asvspoof2019_la_eval.csv.gz"
    if not p.exists():
        pytest.skip(f"{p} is absent (../shared/data)")
    la = pd.read_csv(p)
    la = la[la["utt"].str.replace("LA_E_", "").astype(int) % 40 == 0].reset_index(drop=True)
    out = tmp_path_factory.mktemp("la") / "la_subset.csv"
    la.to_csv(out, index=False)
    return out, la


def test_study_contrasts_and_checks_equal_direct_calls(la_subset, tmp_path):
    path, la = la_subset
    cfg = parse_study(_study(path, checks={"nsim": 60, "seed": 3}), base_dir=tmp_path)
    res = run_study(cfg, out_dir=tmp_path / "out", progress=False)
    out = tmp_path / "out"
    em = pd.read_csv(out / "emmeans.csv", keep_default_na=False, na_values=[""])
    co = pd.read_csv(out / "contrasts.csv", keep_default_na=False, na_values=[""])
    ck = pd.read_csv(out / "model_checks.csv")
    # the same model on the same rows, called directly
    d = la.rename(columns={"score_logit": "score"})
    fit = sm.lmer("score ~ label * speaker_gender + (1 | speaker)", d)
    e = sm.emmeans(fit, "speaker_gender | label")
    want_e = e.summary()
    c = sm.contrast(e, "pairwise", adjust="holm")
    want_c, ci = c.summary(), c.confint()
    assert list(em["speaker_gender"]) == list(want_e["speaker_gender"])
    np.testing.assert_allclose(em["emmean"], want_e["emmean"], rtol=1e-9)
    np.testing.assert_allclose(em["SE"], want_e["SE"], rtol=1e-9)
    np.testing.assert_allclose(em["df"], want_e["df"], rtol=1e-9)
    assert list(co["contrast"]) == list(want_c["contrast"]) == ["female - male"] * 2
    for col in ("estimate", "SE", "df", "t.ratio", "p.value"):
        np.testing.assert_allclose(co[col], want_c[col], rtol=1e-9)
    np.testing.assert_allclose(co["lower.CL"], ci["lower.CL"], rtol=1e-9)
    want_k = _checks_table(fit.check(nsim=60, seed=3, influence=False))
    assert list(ck["check"]) == list(want_k["check"])
    np.testing.assert_allclose(ck["statistic"], want_k["statistic"], rtol=1e-9)
    np.testing.assert_allclose(ck["p.value"], want_k["p.value"], rtol=1e-9)
    assert list(ck["ok"]) == list(want_k["ok"])
    assert {"Contrasts", "Model checks"} <= set(res.section_titles)
    html = (out / "report.html").read_text()
    assert "female - male" in html and "check panel" in html
    assert "contrasts.csv" in (out / "manifest.json").read_text()


def test_checks_can_be_disabled_and_bad_keys_are_named(la_subset, tmp_path):
    path, _ = la_subset
    cfg = parse_study(_study(path, contrasts=False, checks={"enabled": False}), base_dir=tmp_path)
    res = run_study(cfg, out_dir=tmp_path / "o2", progress=False, report=False)
    assert not (tmp_path / "o2" / "model_checks.csv").exists() and not (tmp_path / "o2" / "contrasts.csv").exists()
    assert res.models and "checks" not in res.models[0]
    bad = _study(path)
    bad["analyses"]["contrasts"]["method"] = "allpairs"
    with pytest.raises(StudyConfigError, match=r"analyses.contrasts.method"):
        parse_study(bad, base_dir=tmp_path)
    bad = _study(path)
    bad["analyses"]["contrasts"]["models"] = ["nope"]
    with pytest.raises(StudyConfigError, match=r"analyses.contrasts.models\[0\]"):
        parse_study(bad, base_dir=tmp_path)
    bad = _study(path)
    del bad["analyses"]["contrasts"]["specs"]
    with pytest.raises(StudyConfigError, match=r"analyses.contrasts.specs"):
        parse_study(bad, base_dir=tmp_path)


def test_spec_outside_the_model_is_named(tmp_path):
    raw = _study(tmp_path / "absent.csv")
    raw["analyses"]["contrasts"]["specs"] = ["attack"]
    with pytest.raises(StudyConfigError, match=r"analyses.contrasts.specs\[0\].*attack.*'gender'"):
        parse_study(raw, base_dir=tmp_path)
