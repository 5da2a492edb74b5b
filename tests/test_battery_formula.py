"""Formula features against R: column names and model matrices (``model.matrix``), the
contrasts of ordered factors and of ``contrasts=``, ``predict(newdata)`` re-using
``poly()``'s coefficients and ``scale()``'s centre/scale, offsets and transformed
responses.

References: ``tests/data/battery/model_matrix.json`` written by
``r_scripts/battery_model_matrix.R`` (R 4.2, lme4 1.1-31) on the battery's data sets;
re-made live when R is present.  Closed forms check the contrast matrices independently.
"""

from __future__ import annotations

import json
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from battery_helpers import BATTERY, load_dataset
from scoremix import FormulaError, UnsupportedModelError, build_model_spec, lmer, model_matrix
from scoremix.lme.contrasts import contrast_matrix

R_DIR = Path(__file__).resolve().parents[1] / "r_scripts"
MM = json.loads((BATTERY / "model_matrix.json").read_text())


def _compare_mm(case: dict) -> None:
    d = load_dataset(case["dataset"])
    got = model_matrix(case["formula"], d, contrasts=case.get("contrasts"))
    cols = case["columns"] if isinstance(case["columns"], list) else [case["columns"]]
    assert list(got.columns) == cols
    want = np.asarray(case["matrix"], dtype=float).reshape(len(got), len(cols))
    np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case_id", sorted(MM["model_matrix"]))
def test_model_matrix_matches_r(case_id: str) -> None:
    _compare_mm(MM["model_matrix"][case_id])


@pytest.mark.parametrize("case_id", sorted(MM["predictions"]))
def test_predict_newdata_matches_r(case_id: str) -> None:
    """Fit natively, then predict new rows: poly()/scale() parameters of the fit, offsets and
    (for unseen levels) zero random effects, as R's predict.merMod."""
    case = MM["predictions"][case_id]
    d = load_dataset(case["dataset"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = lmer(case["formula"], d)
        nd = pd.DataFrame(case["newdata"])
        for col in nd.columns:
            if isinstance(d[col].dtype, pd.CategoricalDtype):
                nd[col] = pd.Categorical(nd[col].astype(str), categories=d[col].cat.categories,
                                         ordered=d[col].cat.ordered)
        assert -2 * m.loglik == pytest.approx(case["criterion"], rel=1e-8)
        assert list(m.fixef.index) == list(case["fixef"])
        pop = m.predict(nd, re_form="~0")
        cond = m.predict(nd, allow_new_levels=True)
    np.testing.assert_allclose(pop, case["population"], rtol=1e-6)
    np.testing.assert_allclose(cond, case["conditional"], rtol=1e-6)
    np.testing.assert_allclose(m.fitted, case["fitted"], rtol=1e-6)
    # the transformed response is what the model saw: fitted + residuals
    np.testing.assert_allclose(m.fitted + m.residuals, case["response"], rtol=1e-12)


# ------------------------------------------------------------------ closed forms
def test_contrast_matrices_closed_form() -> None:
    """contr.poly(3) = [-1, 0, 1]/√2 and [1, -2, 1]/√6; helmert, sum and SAS by definition."""
    C, names = contrast_matrix("contr.poly", ["lo", "mid", "hi"])
    assert names == [".L", ".Q"]
    np.testing.assert_allclose(C[:, 0], np.array([-1, 0, 1]) / np.sqrt(2), atol=1e-15)
    np.testing.assert_allclose(C[:, 1], np.array([1, -2, 1]) / np.sqrt(6), atol=1e-15)
    C, names = contrast_matrix("contr.poly", list("abcdef"))
    assert names == [".L", ".Q", ".C", "^4", "^5"]
    np.testing.assert_allclose(C.T @ C, np.eye(5), atol=1e-14)
    np.testing.assert_allclose(C.sum(axis=0), 0.0, atol=1e-14)
    C, names = contrast_matrix("contr.helmert", list("abcd"))
    np.testing.assert_array_equal(C, [[-1, -1, -1], [1, -1, -1], [0, 2, -1], [0, 0, 3]])
    assert names == ["1", "2", "3"]
    C, _ = contrast_matrix("contr.sum", list("abc"))
    np.testing.assert_array_equal(C, [[1, 0], [0, 1], [-1, -1]])
    C, names = contrast_matrix("contr.SAS", list("abc"))
    np.testing.assert_array_equal(C, [[1, 0], [0, 1], [0, 0]])
    assert names == ["a", "b"]


def test_orthogonal_poly_closed_form() -> None:
    """poly(x, 2) on x = 1..5: columns (x - 3)/√10 and ((x-3)² - 2)/√14."""
    d = pd.DataFrame({"x": [1.0, 2, 3, 4, 5]})
    X = model_matrix("~ 0 + poly(x, 2)", d)
    assert list(X.columns) == ["poly(x, 2)1", "poly(x, 2)2"]
    x = d["x"].to_numpy()
    np.testing.assert_allclose(X.iloc[:, 0], (x - 3) / np.sqrt(10), atol=1e-14)
    np.testing.assert_allclose(X.iloc[:, 1], ((x - 3) ** 2 - 2) / np.sqrt(14), atol=1e-14)


def test_poly_and_scale_reuse_fit_parameters_on_new_data() -> None:
    """Predicting the fitting rows as new data reproduces the fitted values exactly, and a
    single new row is not re-centred (scale() of one value would be NaN)."""
    rng = np.random.default_rng(3)
    d = pd.DataFrame({"x": rng.uniform(0, 10, 120), "g": np.repeat(list("abcdefgh"), 15)})
    d["y"] = 1 + 0.5 * d["x"] - 0.03 * d["x"] ** 2 + rng.normal(0, 0.3, 120) + np.repeat(rng.normal(0, 1, 8), 15)
    m = lmer("y ~ poly(x, 2) + (1 | g)", d)
    np.testing.assert_allclose(m.predict(d), m.fitted, rtol=1e-12)
    m2 = lmer("y ~ scale(x) + I(scale(x)^2) + (1 | g)", d)
    one = d.iloc[[7]]
    assert np.isfinite(m2.predict(one).iloc[0])
    assert m2.predict(one).iloc[0] == pytest.approx(m2.fitted.iloc[7], rel=1e-12)
    # the same quadratic in another basis: same fitted values (REML criteria differ by the
    # constant log|det| of the change of basis, so compare the fits instead)
    np.testing.assert_allclose(m2.fitted, m.fitted, rtol=1e-6)


def test_offset_formula_and_argument_agree() -> None:
    """offset(2 * x) in the formula = offset= column = fitting y - 2x without an offset."""
    rng = np.random.default_rng(5)
    d = pd.DataFrame({"x": rng.normal(size=90), "g": np.repeat(list("abcdef"), 15)})
    d["y"] = 2 * d["x"] + 0.3 * d["x"] + rng.normal(size=90) + np.repeat(rng.normal(size=6), 15)
    d["o"] = 2 * d["x"]
    a = lmer("y ~ x + offset(2 * x) + (1 | g)", d)
    b = lmer("y ~ x + (1 | g)", d, offset="o")
    c = lmer("y ~ x + (1 | g)", d.assign(y=d["y"] - d["o"]))
    assert a.fixef["x"] == pytest.approx(c.fixef["x"], rel=1e-10)
    assert b.fixef["x"] == pytest.approx(c.fixef["x"], rel=1e-10)
    assert a.loglik == pytest.approx(c.loglik, rel=1e-12)
    np.testing.assert_allclose(a.fitted - d["o"], c.fitted, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a.predict(d.iloc[:5]), a.fitted.iloc[:5], rtol=1e-12)
    np.testing.assert_allclose(a.residuals, c.residuals, atol=1e-9)
    e = lmer("y ~ x + (1 | g)", d, offset=d["o"].to_numpy())
    assert e.fixef["x"] == pytest.approx(c.fixef["x"], rel=1e-10)
    with pytest.raises(FormulaError, match="offset= given as an array"):
        e.predict(d.iloc[:3])


def test_contrasts_argument_errors_name_the_factor() -> None:
    d = load_dataset("ergoStool")
    with pytest.raises(FormulaError, match="'Typo'.*not a factor of the fixed effects"):
        lmer("effort ~ Type + (1 | Subject)", d, contrasts={"Typo": "contr.sum"})
    with pytest.raises(FormulaError, match="factor 'Type'.*'contr.wrong' is not supported"):
        lmer("effort ~ Type + (1 | Subject)", d, contrasts={"Type": "contr.wrong"})
    # "sum" is accepted for "contr.sum"
    a = lmer("effort ~ Type + (1 | Subject)", d, contrasts={"Type": "sum"})
    assert list(a.fixef.index) == ["(Intercept)", "Type1", "Type2", "Type3"]
    # the intercept of sum-to-zero coding is the mean of the four Type means (balanced)
    assert a.fixef["(Intercept)"] == pytest.approx(d.groupby("Type", observed=True)["effort"].mean().mean(), rel=1e-10)


def test_random_terms_keep_default_contrasts() -> None:
    """As lme4: contrasts= codes only the fixed effects; (Type | Subject) keeps treatment."""
    d = load_dataset("Machines")
    spec = build_model_spec("score ~ Machine + (Machine | Worker)", d, contrasts={"Machine": "contr.sum"})
    assert spec.fixef_names == ["(Intercept)", "Machine1", "Machine2"]
    assert spec.terms[0].term_names == ["(Intercept)", "MachineB", "MachineC"]


def test_ordered_factor_gets_contr_poly_and_summary_prints() -> None:
    """lme4::cake: the issue's REML criterion 1638.62 (it was 1633.25 with treatment contrasts)."""
    d = load_dataset("cake")
    m = lmer("angle ~ recipe * temperature + (1 | recipe:replicate)", d)
    assert m.reml_criterion == pytest.approx(1638.62145988002, rel=1e-10)
    assert "temperature.L" in m.fixef.index and "recipeC:temperature^5" in m.fixef.index


def test_transformed_response_and_missing_rows() -> None:
    """log(y) drops rows where y is missing (R's model.frame), and y <= 0 gives a named
    error (log(0) = -inf is not a finite response)."""
    d = load_dataset("sleepstudy")
    d.loc[[3, 10], "Reaction"] = np.nan
    with pytest.warns(UserWarning, match="dropped 2 rows"):
        m = lmer("log(Reaction) ~ Days + (1 | Subject)", d)
    assert m.nobs == 178
    d.loc[5, "Reaction"] = 0.0
    with pytest.raises(ValueError, match="non-finite"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lmer("log(Reaction) ~ Days + (1 | Subject)", d)


def test_expression_on_factor_column_is_named_error() -> None:
    d = load_dataset("ergoStool")
    with pytest.raises(FormulaError, match="column 'Type' is used in an arithmetic expression"):
        lmer("effort ~ log(Type) + (1 | Subject)", d)


# ------------------------------------------------------------------ statsmodels honesty
def test_statsmodels_nonconvergence_is_reported() -> None:
    """issue 12: Orthodont distance ~ age * Sex + (age | Subject) stops above lme4's optimum
    with statsmodels; the backend must warn, mark the fit unconverged and not print it as
    converged."""
    from scoremix import ConvergenceWarning

    d = load_dataset("Orthodont")
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        m = lmer("distance ~ age * Sex + (age | Subject)", d, backend="statsmodels")
    assert not m.converged
    assert m.reml_criterion > 432.581661503 * (1 + 1e-6)  # lme4's tight optimum
    text = m.summary()
    assert "REML criterion at convergence" not in text
    assert "did NOT converge" in text


@pytest.mark.parametrize("model_id", ["igf", "earthquake"])
def test_statsmodels_silent_stop_is_caught_by_gradient_check(model_id: str) -> None:
    """statsmodels stops 2e-3 (IGF) and 3e-4 (Earthquake) above lme4's optimum; up to
    statsmodels 0.14 without a warning of its own, and lme4's gradient check on the profiled
    criterion catches it.  statsmodels 0.15 reports its own failure on Earthquake, which the
    backend passes on ("did not converge"); either way the fit is not called converged."""
    from scoremix import ConvergenceWarning
    from battery_helpers import MODEL_BY_ID, load_ref

    m = MODEL_BY_ID[model_id]
    with pytest.warns(ConvergenceWarning, match="max\\|grad\\||statsmodels backend did not converge"):
        res = lmer(m["formula"], load_dataset(m["dataset"]), backend="statsmodels")
    assert not res.converged
    assert -2 * res.loglik > load_ref(model_id)["criterion"] * (1 + 1e-5)


@pytest.mark.parametrize("model_id", ["igf", "penicillin_reml", "sleep_corr_reml", "pastes_nested_ml"])
def test_statsmodels_profiled_criterion_is_lme4s(model_id: str) -> None:
    """The backend's sparse profiled criterion at lme4's θ equals lme4's criterion, and its
    convergence statistic there is below lme4's tolerance (an independent check of both)."""
    from battery_helpers import MODEL_BY_ID, load_ref
    from scoremix.lme.backends.statsmodels_backend import GRAD_TOL, convergence_check, profiled_criterion

    m = MODEL_BY_ID[model_id]
    ref = load_ref(model_id)
    spec = build_model_spec(m["formula"], load_dataset(m["dataset"]))
    theta = np.atleast_1d(np.asarray(ref["theta"], dtype=float))
    assert profiled_criterion(spec, theta, m["REML"]) == pytest.approx(ref["criterion"], rel=1e-10)
    assert convergence_check(spec, theta, m["REML"])[0] < GRAD_TOL


def test_statsmodels_repeated_term_raises_named_error() -> None:
    d = load_dataset("Penicillin")
    with pytest.raises(UnsupportedModelError, match=r"\(1 \| plate\) repeats the columns"):
        lmer("diameter ~ 1 + (1 | plate) + (1 | plate) + (1 | sample)", d, backend="statsmodels")


@pytest.mark.parametrize("formula,dataset", [
    ("Reaction ~ Days + (Days | Subject) + (1 | Days)", "sleepstudy"),
    ("score ~ Machine + (Machine || Worker)", "Machines"),
    ("height ~ age + I(age^2) + (age + I(age^2) | Subject) + (1 | Occasion)", "Oxboys"),
])
def test_summary_mixed_term_shapes(formula: str, dataset: str) -> None:
    """summary() with one-column terms beside multi-column ones (the issue's IndexError):
    every random-effects row has lme4's columns, correlations in the lower triangle."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = lmer(formula, load_dataset(dataset))
    text = m.summary()
    block = text.split("Random effects:\n")[1].split("Number of obs")[0].splitlines()
    assert block[0].split()[:5] == ["Groups", "Name", "Variance", "Std.Dev.", "Corr"]
    rows = block[1:-1]  # without the header and the Residual row
    assert len(rows) == sum(len(t["term_names"]) for t in m.terms_info)
    k = 0
    for t in m.terms_info:
        for i, name in enumerate(t["term_names"]):
            tokens = rows[k].split()
            # group (first row only), name, variance, SD, then i correlations
            assert len(tokens) == (1 if i == 0 else 0) + 3 + i, rows[k]
            assert name in rows[k]
            k += 1
    assert block[-1].split()[0] == "Residual"


@pytest.mark.r
def test_model_matrix_live_r(rscript: str, tmp_path: Path) -> None:
    """R builds the matrices again now: identical to the stored reference, and to scoremix."""
    out = tmp_path / "mm.json"
    subprocess.run([rscript, str(R_DIR / "battery_model_matrix.R"), str(BATTERY / "data"), str(out)],
                   check=True, capture_output=True, text=True, timeout=300)
    live = json.loads(out.read_text())
    for cid, case in live["model_matrix"].items():
        assert case["columns"] == MM["model_matrix"][cid]["columns"]
        _compare_mm(case)
