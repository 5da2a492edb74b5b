"""``[[models]] auto = true``: a study runs :func:`scoremix.score_model` and shows its selection
and its out-of-sample validation (:func:`scoremix.validate_model`) beside every model-based
table.  The end-to-end test (real LA data; skipped without ../shared/data) recomputes the
selection, the validation and the in-sample model EER directly and compares them with the
study's outputs."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

import scoremix as sm
from scoremix.study import parse_study, run_study
from scoremix.study.auto import validation_groupings
from scoremix.study.config import StudyConfigError


def _raw(data_file: str = "trials.csv", **model) -> dict:
    m = {"name": "auto", "auto": True, "factors": ["attack"], **model}
    return {"study": {"name": "auto_small", "seed": 7},
            "data": {"file": data_file, "score": "score_logit", "label": "label", "positive": "bonafide",
                     "speaker": "speaker", "subgroups": ["speaker_gender"]},
            "models": [m],
            "analyses": {"model_eer": {"by": ["speaker_gender"], "n_boot": 0},
                         "fairness": {"groups": ["speaker_gender"], "n_boot": 0, "models": ["auto"]}}}


def test_auto_model_parses(tmp_path):
    cfg = parse_study(_raw(covariates=["x"], validate=["speakers"], validate_share=0.3, pool_shapes=True),
                      base_dir=tmp_path)
    m = cfg.models[0]
    assert m.auto and m.factors == ["attack"] and m.covariates == ["x"] and m.pool_shapes
    assert m.validate == ["speakers"] and m.validate_share == 0.3
    assert cfg.analyses.model_eer.models == ["auto"]     # an auto model is a frequentist (point) fit
    assert not parse_study(_raw(validate=[]), base_dir=tmp_path).models[0].validate


@pytest.mark.parametrize("extra, key, text", [
    ({"formula": "score ~ label"}, "models[0].formula", "does not apply with auto = true"),
    ({"transform": "monotone"}, "models[0].transform", "does not apply"),
    ({"validate": ["folds"]}, "models[0].validate[0]", "unknown split 'folds'"),
    ({"covariates": ["attack"]}, "models[0].covariates", "also listed in factors"),
    ({"validate_share": 1.0}, "models[0].validate_share", "must be < 1"),
    ({"factor": ["attack"]}, "models[0].factor", "unknown key"),
])
def test_auto_model_bad_keys(tmp_path, extra, key, text):
    with pytest.raises(StudyConfigError) as exc:
        parse_study(_raw(**extra), base_dir=tmp_path)
    assert str(exc.value).startswith(key) and text in str(exc.value)


def test_validation_groupings():
    by, also = validation_groupings("trials", "spk", ["g"], ["attack"])
    assert by == ["spk"]
    assert also == [["g"], dict(by=["overall"], negative_by="attack"), dict(by=["g"], negative_by="attack")]
    by, also = validation_groupings("speakers", "spk", ["g"], ["attack"])
    assert by == ["g"] and also == [dict(by=["overall"], negative_by="attack"), dict(by=["g"], negative_by="attack")]
    assert validation_groupings("speakers", "spk", [], []) == (["overall"], [])


@pytest.mark.shared_data
@pytest.mark.slow
def test_auto_study_end_to_end(shared_data, tmp_path):
    """A small LA study with an auto model: every number the study shows for it equals the
    function called directly on the study's table."""
    src = shared_data / "asvspoof2019_la_eval" / "asvspoof2019_la_eval.csv.gz"
    df = pd.read_csv(src)
    df = df[df["attack"].isin(["bonafide", "A10", "A17"])].sample(1200, random_state=3)
    df.to_csv(tmp_path / "trials.csv", index=False)
    cfg = parse_study(_raw(), base_dir=tmp_path)
    res = run_study(cfg, out_dir=tmp_path / "out", progress=False)
    assert not res.failed, res.failed
    out = tmp_path / "out"
    table = res.data.table
    kw = dict(score="score", label="y", speaker="speaker", factors=["attack"], positive=1)

    # 1. the selection table is score_model's on the same rows
    fit = sm.score_model(table, **kw)
    got = pd.read_csv(out / "model_selection.csv").set_index("name")
    want = fit.selection.table
    assert list(got.index) == list(want.index)
    np.testing.assert_allclose(got["cv_loglik"], want["cv_loglik"], rtol=1e-10)
    assert got["chosen"].tolist() == want["chosen"].tolist()
    cells = pd.read_csv(out / "model_selection_cells.csv")
    free = cells[cells["status"] == "fitted freely"]["component"].str.replace("stratum ", "", regex=False)
    assert sorted(free) == sorted(map(str, fit.selection.fitted_freely)) == ["+:bonafide", "-:A10", "-:A17"]
    assert cells[cells["status"] == "predicted"]["component"].tolist() == fit.selection.predicted

    # 2. the validation numbers are validate_model's, with the seed the study recorded
    val = pd.read_csv(out / "validation.csv")
    seed = int(val["seed"].iloc[0])
    assert seed == res.models[0]["validate_seed"]
    data = table.assign(overall="all")
    for split in ("trials", "speakers"):
        by, also = validation_groupings(split, "speaker", ["speaker_gender"], ["attack"])
        direct = sm.validate_model(data, by=by, also_by=also, share=0.2, split=split, seed=seed, **kw).summary
        v = val[val["split"] == split].set_index(["cells", "measure"])
        assert sorted(v.index) == sorted(direct.index)
        for col in ("mae_model", "mae_count", "mae_shrunk", "ratio_model", "n_groups"):
            np.testing.assert_allclose(v.loc[direct.index, col].to_numpy(float), direct[col].to_numpy(float),
                                       rtol=1e-10, err_msg=f"{split} {col}")

    # 3. in sample, every stratum's distribution is reproduced: the model EER at attainable
    #    thresholds equals the empirical ROCCH EER (overall: one positive and the negative strata)
    me = pd.read_csv(out / "model_eer.csv")
    overall = me[me["by"] == "overall"].iloc[0]
    assert abs(overall["eer_model"] - sm.eer(table["score"], table["y"])) < 1e-9
    assert set(me["transform"]) == {"locscale"}

    # 4. the report shows the selection and, beside the model-based tables, the validation
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "Model auto (automatic specification)" in html
    sections = re.split(r"<h2[^>]*>", html)
    for title in ("Model-based vs empirical EER", "Subgroup fairness", "Model vs empirical DET curves"):
        sec = next(s for s in sections if s.startswith(title))
        assert "Out-of-sample validation of the score model" in sec, title


def test_validation_split_that_cannot_run_is_a_note_not_a_failed_fit():
    """Five speakers, one of them the only one with attack C: holding out whole speakers
    (share 0.2 → one fitted speaker) leaves a held-out stratum the fit has never seen.  The
    split is reported in ``validation_notes``; the fit and its selection are kept."""
    from scoremix.study.auto import fit_auto

    rng = np.random.default_rng(0)
    rows = [pd.DataFrame(dict(score=rng.normal(2 * y, 1, 12), y=y, speaker=f"s{i}",
                              attack="bona" if y else ("C" if i == 4 else "A")))
            for i in range(5) for y in (0, 1)]
    df = pd.concat(rows, ignore_index=True)
    fit, out = fit_auto(df, speaker="speaker", factors=["attack"], validate=["speakers"], seed=0)
    assert "validation" not in out
    assert len(out["validation_notes"]) == 1
    assert out["validation_notes"][0].startswith("validation split 'speakers' could not run: LocScaleError: stratum")
    # the selection is kept: every candidate score_model tried (the fit's own record), one chosen
    tab = fit.selection.table
    assert out["selection"]["name"].tolist() == tab.index.tolist()
    assert out["selection"]["chosen"].tolist() == tab["chosen"].tolist()
    assert len(tab) >= 5 and out["selection"]["chosen"].sum() >= 1
