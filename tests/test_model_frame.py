"""Model frame / design matrices (scoremix.lme.model_frame) against lme4 and by hand.

Reference values: ``r_scripts/model_frame_reference.R`` run on the CSV files in
``tests/data/model_frame`` (stored JSON; re-run live when R with lme4 is installed).
"""

from __future__ import annotations

import json
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scoremix.lme.errors import (
    FormulaError,
    GroupingError,
    LmeError,
    MissingValueError,
    NewLevelError,
    RankDeficiencyWarning,
    ResponseError,
    UnknownColumnError,
)
from scoremix.lme.formula import parse_formula
from scoremix.lme.model_frame import build_model_spec, rank_keep_columns

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "model_frame"
SCRIPT = REPO / "r_scripts" / "model_frame_reference.R"
REFERENCE = json.loads((DATA / "model_frame_reference.json").read_text())
CASES = REFERENCE["cases"]
OK_CASES = [k for k, c in CASES.items() if "error" not in c]
ERR_CASES = [k for k, c in CASES.items() if "error" in c]

_FRAMES: dict[str, pd.DataFrame] = {}


def load(name: str) -> pd.DataFrame:
    """The CSV as R reads it (``cond`` is a factor low < mid < high in R)."""
    if name not in _FRAMES:
        d = pd.read_csv(DATA / f"{name}.csv")
        if name == "detector":
            d["cond"] = pd.Categorical(d["cond"], categories=["low", "mid", "high"])
        _FRAMES[name] = d
    return _FRAMES[name].copy()


def build_quiet(formula: str, data: pd.DataFrame, **kw):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        spec = build_model_spec(formula, data, **kw)
    return spec, rec


def check_against_r(case: dict) -> None:
    spec, rec = build_quiet(case["formula"], load(case["data"]))
    # rows of the model frame
    assert spec.n == case["n"]
    np.testing.assert_array_equal(spec.data.index.to_numpy(), case["rows"])
    assert spec.n_dropped == len(load(case["data"])) - case["n"]
    # fixed effects
    assert spec.fixef_names == case["X_names"]
    assert spec.dropped_fixef == case["dropped"]
    rows = np.asarray(case["X_rows"])
    np.testing.assert_allclose(spec.X[rows], np.asarray(case["X_at_rows"], float), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(spec.X.T @ spec.X, np.asarray(case["XtX"], float), rtol=1e-12, atol=1e-9)
    rank_msgs = [str(w.message) for w in rec if issubclass(w.category, RankDeficiencyWarning)]
    assert [m.strip() for m in case["messages"]] == [m.split(" (")[0] for m in rank_msgs]
    # random terms: order, column names, grouping names, levels
    assert [t.term_names for t in spec.terms] == case["cnms"]
    assert [t.group_factor for t in spec.terms] == case["cnms_names"]
    assert [t.n_levels for t in spec.terms] == case["nl"]
    assert [t.group for t in spec.terms] == case["varcorr_groups"]
    flist = list(dict.fromkeys(t.group_factor for t in spec.terms))
    assert flist == case["flist_names"]
    assert [flist.index(t.group_factor) + 1 for t in spec.terms] == case["flist_assign"]
    for f, levels, counts in zip(flist, case["flist_levels"], case["flist_counts"]):
        term = next(t for t in spec.terms if t.group_factor == f)
        assert term.levels == levels
        np.testing.assert_array_equal(np.bincount(term.codes, minlength=term.n_levels), counts)
    for t, mm, lev in zip(spec.terms, case["term_mm_at_rows"], case["term_level_at_rows"]):
        np.testing.assert_allclose(t.X[rows], np.asarray(mm, float).reshape(len(rows), -1), rtol=1e-12, atol=1e-12)
        assert [t.levels[c] for c in t.codes[rows]] == lev
    # term labels (lme4's names(Ztlist)) as a multiset: the parser's labels
    labels = [rp.label for rp in parse_formula(case["formula"]).random]
    assert sorted(labels) == sorted(case["term_labels"])


@pytest.mark.parametrize("case_id", OK_CASES)
def test_matches_lme4_reference(case_id: str) -> None:
    check_against_r(CASES[case_id])


@pytest.mark.parametrize("case_id", OK_CASES)
def test_theta_names_match_lme4(case_id: str) -> None:
    case = CASES[case_id]
    spec, _ = build_quiet(case["formula"], load(case["data"]))
    assert [nm for t in spec.terms for nm in t.theta_names()] == case["theta_names"]


@pytest.mark.parametrize("case_id", ERR_CASES)
def test_grouping_errors_match_lme4(case_id: str) -> None:
    case = CASES[case_id]
    with pytest.raises(GroupingError) as exc:
        build_quiet(case["formula"], load(case["data"]))
    msg = str(exc.value)
    assert msg.startswith(case["error"])
    assert isinstance(exc.value, ValueError)


def test_grouping_error_names_the_factor() -> None:
    d = load("detector")
    with pytest.raises(GroupingError, match=r"problems: one"):
        build_model_spec("score ~ label + (1 | speaker) + (1 | one)", d)


@pytest.mark.r
def test_reference_script_live(rscript: str, tmp_path: Path) -> None:
    """Re-run the R script on the stored CSVs: same JSON, and scoremix agrees with it."""
    out = tmp_path / "ref.json"
    proc = subprocess.run(
        [rscript, str(SCRIPT), str(DATA), str(out)], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    live = json.loads(out.read_text())
    assert live["cases"].keys() == CASES.keys()
    for k, case in live["cases"].items():
        if "error" in case:
            assert case["error"] == CASES[k]["error"]
            continue
        assert case["X_names"] == CASES[k]["X_names"]
        assert case["cnms"] == CASES[k]["cnms"]
        check_against_r(case)
    assert live["terms"] == REFERENCE["terms"]


# --------------------------------------------------------------------------- by hand
def small() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "y": [1.0, 2.0, 3.0, 4.0, 5.0, 6.5],
            "f": ["b", "a", "c", "a", "b", "c"],
            "x": [0.5, -1.0, 2.0, 0.0, 1.5, 3.0],
            "g": ["u", "u", "v", "v", "w", "w"],
        }
    )


def test_hand_computed_factor_by_numeric_design() -> None:
    d = small()
    spec = build_model_spec("y ~ f*x + (1 | g)", d)
    assert spec.fixef_names == ["(Intercept)", "fb", "fc", "x", "fb:x", "fc:x"]
    fb = np.array([1, 0, 0, 0, 1, 0.0])
    fc = np.array([0, 0, 1, 0, 0, 1.0])
    x = d["x"].to_numpy()
    expected = np.column_stack([np.ones(6), fb, fc, x, fb * x, fc * x])
    np.testing.assert_array_equal(spec.X, expected)
    np.testing.assert_array_equal(spec.y, d["y"].to_numpy())
    (t,) = spec.terms
    assert t.levels == ["u", "v", "w"] and t.term_names == ["(Intercept)"]
    np.testing.assert_array_equal(t.codes, [0, 0, 1, 1, 2, 2])
    assert spec.q == 3 and spec.n_theta == 1


def test_factor_interaction_first_varies_fastest() -> None:
    d = pd.DataFrame(
        {
            "y": np.arange(8.0),
            "f": ["a", "b", "c", "a", "b", "c", "a", "b"],
            "h": ["p", "p", "p", "q", "q", "q", "q", "p"],
            "g": ["u", "v"] * 4,
        }
    )
    with pytest.warns(RankDeficiencyWarning, match="dropping 1 column"):
        spec = build_model_spec("y ~ f:h + (1 | g)", d)  # no main effects: full coding of both
    assert spec.fixef_names == ["(Intercept)", "fa:hp", "fb:hp", "fc:hp", "fa:hq", "fb:hq"]
    assert spec.dropped_fixef == ["fc:hq"]  # the intercept is the sum of all six indicators
    f = d["f"].to_numpy()
    h = d["h"].to_numpy()
    np.testing.assert_array_equal(spec.X[:, 2], ((f == "b") & (h == "p")).astype(float))
    np.testing.assert_array_equal(spec.X[:, 4], ((f == "a") & (h == "q")).astype(float))


def test_categorical_order_and_unused_levels() -> None:
    d = small()
    d["f"] = pd.Categorical(d["f"], categories=["c", "zz", "a", "b"])  # zz unused
    spec = build_model_spec("y ~ f + (1 | g)", d)
    assert spec.fixef_names == ["(Intercept)", "fa", "fb"]
    np.testing.assert_array_equal(spec.X[:, 1], (d["f"] == "a").to_numpy(float))


def test_numeric_grouping_levels_sorted_numerically() -> None:
    d = small()
    d["g"] = [10, 2, 2, 10, 1.5, 1.5]
    spec = build_model_spec("y ~ 1 + (1 | g)", d)
    assert spec.terms[0].levels == ["1.5", "2", "10"]
    np.testing.assert_array_equal(spec.terms[0].codes, [2, 1, 1, 2, 0, 0])


def test_no_random_terms_gives_empty_terms() -> None:
    spec = build_model_spec("y ~ x", small())
    assert spec.terms == [] and spec.q == 0 and spec.theta_init().size == 0


def test_nested_grouping_codes() -> None:
    d = load("pastes")
    spec = build_model_spec("strength ~ 1 + (1 | batch/cask)", d)
    t = spec.terms[0]
    assert t.group == "cask:batch"
    lab = (d["cask"] + ":" + d["batch"]).to_numpy()
    np.testing.assert_array_equal(np.asarray(t.levels)[t.codes], lab)
    # levels ordered by cask first, then batch (lme4's %i%)
    assert t.levels[:3] == ["a:A", "a:B", "a:C"]


# --------------------------------------------------------------------------- errors
def test_unknown_column_names_it_and_suggests() -> None:
    d = load("detector")
    with pytest.raises(UnknownColumnError) as exc:
        build_model_spec("score ~ lable + (1 | speaker)", d)
    e = exc.value
    assert e.column == "lable" and "label" in e.available
    assert "'lable'" in str(e) and "did you mean 'label'" in str(e)
    assert isinstance(e, KeyError) and isinstance(e, ValueError) and isinstance(e, FormulaError)


def test_missing_values_dropped_with_warning() -> None:
    d = load("detector")
    na_rows = np.flatnonzero(d["z"].isna().to_numpy())
    with pytest.warns(UserWarning, match=rf"dropped {len(na_rows)} rows with missing values in columns \[z\]"):
        spec = build_model_spec("score ~ z + (1 | speaker)", d)
    assert spec.n_dropped == len(na_rows) == 4
    assert spec.n == len(d) - 4
    assert not np.isin(na_rows, spec.data.index.to_numpy()).any()


def test_missing_values_fail_names_column_and_rows() -> None:
    d = load("detector")
    with pytest.raises(MissingValueError, match=r"column 'z' has 4 missing value\(s\) \(rows 6, 49, 50, 198\)"):
        build_model_spec("score ~ z + (1 | speaker)", d, na_action="fail")
    with pytest.raises(ValueError, match="na_action"):
        build_model_spec("score ~ x + (1 | speaker)", d, na_action="drop")


def test_missing_grouping_value_dropped() -> None:
    d = load("detector")
    d.loc[[3, 4], "speaker"] = None
    with pytest.warns(UserWarning, match=r"dropped 2 rows .* \[speaker\]"):
        spec = build_model_spec("score ~ x + (1 | speaker)", d)
    assert spec.n == len(d) - 2


def test_response_errors() -> None:
    d = small()
    d.loc[2, "y"] = np.inf
    with pytest.raises(ResponseError, match=r"'y' has 1 non-finite .* rows 2"):
        build_model_spec("y ~ x + (1 | g)", d)
    d = small()
    with pytest.raises(ResponseError, match="must be numeric"):
        build_model_spec("f ~ x + (1 | g)", d)


def test_rank_deficiency_drops_later_columns() -> None:
    d = small()
    d["x2"] = 2 * d["x"] + 1
    d["x3"] = d["x"] + 1e-3 * np.array([1, -1, 2, 0, 1, 3])
    with pytest.warns(RankDeficiencyWarning, match="rank deficient so dropping 1 column / coefficient"):
        spec = build_model_spec("y ~ x + x2 + x3 + (1 | g)", d)
    assert spec.dropped_fixef == ["x2"]
    assert spec.fixef_names == ["(Intercept)", "x", "x3"]
    np.testing.assert_array_equal(spec.X[:, 2], d["x3"].to_numpy())


def test_rank_keep_columns_greedy_rule() -> None:
    rng = np.random.default_rng(3)
    A = rng.normal(size=(50, 3))
    X = np.column_stack([A[:, 0], np.zeros(50), A[:, 1], A[:, 0] - A[:, 1], A[:, 2], 1e-9 * rng.normal(size=50) + A[:, 2]])
    # col 1 zero, col 3 = col0 - col2, col 5 differs from col 4 by 1e-9 relative (< 1e-7)
    np.testing.assert_array_equal(rank_keep_columns(X), [0, 2, 4])
    X[:, 5] = A[:, 2] + 1e-3 * rng.normal(size=50)
    np.testing.assert_array_equal(rank_keep_columns(X), [0, 2, 4, 5])


def test_nonfinite_predictor_rejected() -> None:
    d = small()
    d.loc[1, "x"] = np.inf
    with pytest.raises(LmeError, match="'x'"):
        build_model_spec("y ~ x + (1 | g)", d)


def test_dummy_unknown_level() -> None:
    d = load("detector")
    with pytest.raises(FormulaError, match=r"level 'spof' is not a level of column 'label'"):
        build_model_spec('score ~ 1 + (0 + dummy(label, "spof") | speaker)', d)


def test_single_level_factor_with_contrasts() -> None:
    d = load("detector")
    with pytest.raises(FormulaError, match=r"factor 'one' has only one level"):
        build_model_spec("score ~ one + (1 | speaker)", d)


# --------------------------------------------------------------------------- weights, dispersion
def test_weights_column_and_array() -> None:
    d = load("detector")
    s1 = build_model_spec("score ~ label + (1 | speaker)", d, weights="w")
    s2 = build_model_spec("score ~ label + (1 | speaker)", d, weights=d["w"].to_numpy())
    np.testing.assert_array_equal(s1.weights, d["w"].to_numpy())
    np.testing.assert_array_equal(s2.weights, d["w"].to_numpy())
    w = d["w"].to_numpy().copy()
    w[5] = np.nan
    with pytest.warns(UserWarning, match=r"dropped 1 rows .*\(weights\)"):
        s3 = build_model_spec("score ~ label + (1 | speaker)", d, weights=w)
    assert s3.n == len(d) - 1 and 5 not in s3.data.index
    w[5] = -1.0
    with pytest.raises(LmeError, match="negative weights"):
        build_model_spec("score ~ label + (1 | speaker)", d, weights=w)
    with pytest.raises(ValueError, match="length"):
        build_model_spec("score ~ label + (1 | speaker)", d, weights=w[:-1])


def test_dispersion_codes() -> None:
    d = load("detector")
    spec = build_model_spec("score ~ label + (1 | speaker)", d, dispersion="~ label")
    assert spec.dispersion_levels == ["bonafide", "spoof"]
    assert spec.dispersion_formula == "~ label"
    np.testing.assert_array_equal(spec.dispersion_codes, (d["label"] == "spoof").to_numpy(int))
    spec = build_model_spec("score ~ label + (1 | speaker)", d, dispersion="~cond")
    assert spec.dispersion_levels == ["low", "mid", "high"]
    assert build_model_spec("score ~ label + (1 | speaker)", d).dispersion_codes is None
    with pytest.raises(FormulaError, match="must be a factor"):
        build_model_spec("score ~ label + (1 | speaker)", d, dispersion="~ x")
    with pytest.raises(FormulaError, match="single factor"):
        build_model_spec("score ~ label + (1 | speaker)", d, dispersion="~ label + cond")
    with pytest.raises(UnknownColumnError, match="'lab'"):
        build_model_spec("score ~ label + (1 | speaker)", d, dispersion="~ lab")


# --------------------------------------------------------------------------- prediction closures
def test_fixed_design_reproduces_X_on_new_rows() -> None:
    d = load("detector")
    spec = build_model_spec("score ~ label*cond + x + (1 | speaker)", d)
    np.testing.assert_array_equal(spec.fixed_design(d), spec.X)
    new = d.iloc[[10, 3, 3]].reset_index(drop=True)
    np.testing.assert_array_equal(spec.fixed_design(new), spec.X[[10, 3, 3]])
    # new data given as plain strings (not Categorical) codes the same way
    new2 = new.assign(cond=new["cond"].astype(str))
    np.testing.assert_array_equal(spec.fixed_design(new2), spec.X[[10, 3, 3]])


def test_fixed_design_unseen_level_and_missing() -> None:
    d = load("detector")
    spec = build_model_spec("score ~ label + x + (1 | speaker)", d)
    new = pd.DataFrame({"label": ["spoof", "fake"], "x": [0.0, 1.0]})
    with pytest.raises(NewLevelError, match=r"column 'label' .* 'fake'"):
        spec.fixed_design(new)
    new = pd.DataFrame({"label": ["spoof", None], "x": [np.nan, 1.0]})
    Xn = spec.fixed_design(new)
    np.testing.assert_array_equal(Xn[0, :2], [1.0, 1.0])
    assert np.isnan(Xn[0, 2]) and np.isnan(Xn[1, 1]) and Xn[1, 2] == 1.0
    with pytest.raises(UnknownColumnError, match="'x'"):
        spec.fixed_design(pd.DataFrame({"label": ["spoof"]}))


def test_fixed_design_keeps_rank_dropped_columns_out() -> None:
    d = load("detector")
    with pytest.warns(RankDeficiencyWarning):
        spec = build_model_spec("score ~ label + bona01 + x + x2 + (1 | speaker)", d)
    np.testing.assert_array_equal(spec.fixed_design(d.iloc[:7]), spec.X[:7])


def test_random_design_codes_and_unseen_levels() -> None:
    d = load("detector")
    spec = build_model_spec("score ~ label + (label | speaker) + (1 | speaker:attack)", d)
    out = spec.random_design(d)
    for (codes, Xk), t in zip(out, spec.terms):
        np.testing.assert_array_equal(codes, t.codes)
        np.testing.assert_array_equal(Xk, t.X)
    seen = set(zip(d["speaker"], d["attack"]))
    unseen_pair = next((s, a) for s in sorted(set(d["speaker"])) for a in sorted(set(d["attack"])) if (s, a) not in seen)
    new = pd.DataFrame(
        {"speaker": ["spk01", "spk99", unseen_pair[0]], "attack": ["A07", "A07", unseen_pair[1]], "label": ["spoof"] * 3}
    )
    res = {t.group_factor: r for t, r in zip(spec.terms, spec.random_design(new))}
    spk_codes, spk_X = res["speaker"]
    assert spk_codes[0] == spec.terms[[t.group_factor for t in spec.terms].index("speaker")].levels.index("spk01")
    assert spk_codes[1] == -1 and spk_codes[2] >= 0
    np.testing.assert_array_equal(spk_X, [[1.0, 1.0]] * 3)
    pair_codes, _ = res["speaker:attack"]
    term = next(t for t in spec.terms if t.group_factor == "speaker:attack")
    if ("spk01", "A07") in seen:
        assert term.levels[pair_codes[0]] == "spk01:A07"
    else:
        assert pair_codes[0] == -1
    assert pair_codes[1] == -1 and pair_codes[2] == -1  # unseen speaker; unseen combination


def test_model_frame_keeps_index_and_used_columns() -> None:
    d = load("detector")
    d.index = d.index + 1000
    with pytest.warns(UserWarning):
        spec = build_model_spec("score ~ z + (1 | speaker)", d, weights="w")
    assert list(spec.data.columns) == ["score", "z", "speaker", "w"]
    assert spec.data.index[0] == 1000 and 1006 not in spec.data.index


def test_random_design_dummy_term_on_new_levels() -> None:
    d = load("detector")
    spec = build_model_spec('score ~ label + (0 + dummy(label, "spoof") | speaker) + (1 | attack)', d)
    term_index = [t.group_factor for t in spec.terms].index("speaker")
    new = pd.DataFrame({"speaker": ["spk02", "spk02", "spk02"], "attack": ["A08"] * 3, "label": ["spoof", "bonafide", None]})
    new["label"] = new["label"].astype(object)
    with pytest.raises(NewLevelError):  # the fixed effect 'label' still must know the level
        spec.fixed_design(new.assign(label=["spoof", "fake", "spoof"]))
    codes, Xk = spec.random_design(new.assign(label=["spoof", "fake", "bonafide"]))[term_index]
    np.testing.assert_array_equal(Xk[:, 0], [1.0, 0.0, 0.0])
    codes, Xk = spec.random_design(new)[term_index]
    np.testing.assert_array_equal(Xk[:2, 0], [1.0, 0.0])
    assert np.isnan(Xk[2, 0])


@pytest.mark.parametrize("case_id", OK_CASES)
def test_prediction_closures_reproduce_fit(case_id: str) -> None:
    case = CASES[case_id]
    spec, _ = build_quiet(case["formula"], load(case["data"]))
    np.testing.assert_array_equal(spec.fixed_design(spec.data), spec.X)
    for (codes, Xk), t in zip(spec.random_design(spec.data), spec.terms):
        np.testing.assert_array_equal(codes, t.codes)
        np.testing.assert_array_equal(Xk, t.X)


def test_badly_scaled_predictors_warn_like_lme4_checkScaleX() -> None:
    """lme4's ``checkScaleX`` (tol 1e3) on the non-0/1 columns: an SD outside [1e-3, 1e3] or a
    ratio of SDs above 1e3 warns; 0/1 columns (intercept, factor dummies) are ignored."""
    from scoremix.lme.errors import ScaleWarning
    from scoremix.lme.model_frame import badly_scaled

    rng = np.random.default_rng(3)
    x = rng.normal(size=200)                        # sd ≈ 1
    ones = np.ones(200)
    d01 = (rng.random(200) < 0.5).astype(float)
    assert not badly_scaled(np.column_stack([ones, d01, x]))
    assert badly_scaled(np.column_stack([ones, x * 2e3]))              # sd ≈ 2000 > 1e3
    assert badly_scaled(np.column_stack([ones, x * 5e-4]))             # sd ≈ 5e-4 < 1e-3
    assert badly_scaled(np.column_stack([ones, x * 40, x[::-1] * 0.02]))  # ratio 2000
    assert not badly_scaled(np.column_stack([ones, x * 20, x[::-1] * 0.05]))  # ratio 400
    assert badly_scaled(np.column_stack([ones, d01 * 5000]))           # 0/5000 is not 0/1: sd ≈ 2500
    df = pd.DataFrame({"y": rng.normal(size=200), "x": x * 2e3, "g": np.repeat(np.arange(20), 10)})
    with pytest.warns(ScaleWarning, match="Some predictor variables are on very different scales: "
                                          "consider rescaling"):
        build_model_spec("y ~ x + (1 | g)", df)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_model_spec("y ~ x + (1 | g)", df.assign(x=x))
