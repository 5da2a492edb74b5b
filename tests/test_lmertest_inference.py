"""lmerTest inference: Satterthwaite / Kenward–Roger t tests, type I–III F tests, ranova.

References: ``tests/data/lmertest/<model>.json`` written by
``r_scripts/lmertest_reference.R`` (lmerTest 3 + pbkrtest on tight lme4 fits), plus a live
re-run of the script for one model when R is present, plus closed forms (Welch's df, a
balanced one-way layout, numDeriv's extrapolation on polynomials).
"""

from __future__ import annotations

import json
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import scoremix as sm
from scoremix.lme.anova_tables import AnovaError, doolittle, term_contrasts, zapsmall
from scoremix.lme.ddf import contest_md, satterthwaite_info
from scoremix.lme.errors import DdfError
from scoremix.lme.numderiv import richardson_hessian, richardson_jacobian

REPO_ROOT = Path(__file__).resolve().parents[1]
TEST_DATA = REPO_ROOT / "tests" / "data"

REF_DIR = TEST_DATA / "lmertest"
MODELS = sorted(p.stem for p in REF_DIR.glob("*.json"))
RTOL = 1e-4


def load_reference(name: str, folder: Path = REF_DIR) -> tuple[dict, pd.DataFrame]:
    ref = json.loads((folder / f"{name}.json").read_text())
    df = pd.read_csv(folder / f"{name}.csv")
    for col, levels in ref["factors"].items():
        levels = [levels] if isinstance(levels, str) else list(levels)
        df[col] = pd.Categorical(df[col].astype(str), categories=levels)
    return ref, df


def table(t: dict) -> pd.DataFrame:
    cols = {k: [np.nan if v is None else float(v) for v in vals] for k, vals in t["columns"].items()}
    return pd.DataFrame(cols, index=list(t["rownames"]))


def fit(ref: dict, df: pd.DataFrame) -> sm.LmerResult:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.lmer(ref["formula"], df, REML=ref["REML"], weights=ref["weights"])


def assert_table(ours: pd.DataFrame, theirs: pd.DataFrame, what: str, rtol: float = RTOL) -> None:
    assert list(ours.index) == list(theirs.index), f"{what}: rows {list(ours.index)} vs {list(theirs.index)}"
    for col in theirs.columns:
        a = ours[col].to_numpy(float)
        b = theirs[col].to_numpy(float)
        assert np.array_equal(np.isnan(a), np.isnan(b)), f"{what}[{col}]: NA pattern {a} vs {b}"
        ok = ~np.isnan(b)
        np.testing.assert_allclose(a[ok], b[ok], rtol=rtol, atol=1e-12, err_msg=f"{what}[{col}]")


@pytest.fixture(scope="module")
def fits() -> dict:
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            ref, df = load_reference(name)
            cache[name] = (ref, fit(ref, df))
        return cache[name]
    return get


def test_battery_is_large_enough():
    assert len(MODELS) >= 10, MODELS


@pytest.mark.parametrize("name", MODELS)
def test_coef_tables_match_lmertest(name, fits):
    ref, m = fits(name)
    assert -2 * m.loglik == pytest.approx(ref["criterion"], rel=1e-8)
    assert_table(m.coef_table("Satterthwaite"), table(ref["coef_satterthwaite"]), f"{name} Satterthwaite")
    lme4 = m.coef_table("lme4")
    assert list(lme4.columns) == ["Estimate", "Std. Error", "t value"]
    if "coef_kenward_roger" in ref and ref["weights"] is None:
        assert_table(m.coef_table("Kenward-Roger"), table(ref["coef_kenward_roger"]), f"{name} KR")


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("type_", [1, 2, 3])
def test_anova_tables_match_lmertest(name, type_, fits):
    ref, m = fits(name)
    assert_table(sm.anova(m, type=type_), table(ref[f"anova_{type_}_satterthwaite"]),
                 f"{name} type {type_} Satterthwaite")
    key = f"anova_{type_}_kenward_roger"
    if key in ref and ref["weights"] is None:
        assert_table(sm.anova(m, type=type_, ddf="Kenward-Roger"), table(ref[key]),
                     f"{name} type {type_} KR")


@pytest.mark.parametrize("name", MODELS)
def test_lme4_anova_matches(name, fits):
    """``anova(m, ddf = "lme4")``: lme4's sequential table (npar, Sum Sq, Mean Sq, F value)."""
    ref, m = fits(name)
    assert_table(sm.anova(m, ddf="lme4"), table(ref["anova_lme4"]), f"{name} lme4 anova")


@pytest.mark.parametrize("name", MODELS)
def test_ranova_matches_lmertest(name, fits):
    ref, m = fits(name)
    assert_table(sm.ranova(m), table(ref["ranova"]), f"{name} ranova")


def test_kenward_roger_with_weights_is_pbkrtest_on_the_rescaled_model(fits):
    """pbkrtest ignores prior weights (its residual G is I); scoremix uses W⁻¹.  The model
    rescaled by sqrt(w) has unit weights and the same likelihood, so pbkrtest is right there."""
    _, m = fits("sleep_weights")
    ref_u, _ = fits("sleep_weights_unit")
    theirs = table(ref_u["coef_kenward_roger"])
    theirs.index = ["(Intercept)", "Days"]
    assert_table(m.coef_table("Kenward-Roger"), theirs, "weighted KR")
    ours_s = m.coef_table("Satterthwaite")
    theirs_s = table(ref_u["coef_satterthwaite"])
    theirs_s.index = ["(Intercept)", "Days"]
    assert_table(ours_s, theirs_s, "weighted Satterthwaite vs rescaled")


@pytest.mark.r
def test_live_lmertest_reference(rscript, tmp_path):
    """Re-run the R script for one model and compare with the stored reference."""
    proc = subprocess.run([rscript, str(REPO_ROOT / "r_scripts" / "lmertest_reference.R"),
                           str(tmp_path), "tvbo"], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 and "lmerTest" in proc.stderr and "there is no package" in proc.stderr:
        pytest.skip("R package lmerTest or pbkrtest is not installed")
    assert proc.returncode == 0, proc.stderr
    live, df = load_reference("tvbo", tmp_path)
    m = fit(live, df)
    assert_table(m.coef_table(), table(live["coef_satterthwaite"]), "live Satterthwaite")
    assert_table(sm.anova(m), table(live["anova_3_satterthwaite"]), "live type III")
    assert_table(sm.anova(m, ddf="KR"), table(live["anova_3_kenward_roger"]), "live type III KR")


# ---------------------------------------------------------------------------- closed forms
def test_satterthwaite_dispersion_model_is_welch():
    """``y ~ label + (1 | g)`` with ``dispersion = "~ label"`` on data whose levels of ``g``
    all have mean residual 0: the random-effect variance is estimated at 0 (a boundary
    where the deviance is even in θ, so θ drops out of the df), the REML residual variances
    are the groups' sample variances, and Satterthwaite's df of the ``label`` contrast is
    Welch's ``(s_a²/n_a + s_b²/n_b)² / Σ_d (s_d²/n_d)²/(n_d − 1)``."""
    rng = np.random.default_rng(3)
    rows = []
    for k in range(12):
        for lab, mu, sd, reps in (("a", 1.0, 0.5, 2), ("b", 3.0, 2.0, 3)):
            for _ in range(reps):
                r = abs(rng.normal(0, sd))
                rows += [(f"g{k}", lab, mu + r), (f"g{k}", lab, mu - r)]
    df = pd.DataFrame(rows, columns=["g", "label", "y"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = sm.lmer("y ~ label + (1 | g)", df, dispersion="~ label")
    assert m.theta.iloc[0] == pytest.approx(0.0, abs=1e-6)
    s2 = df.groupby("label")["y"].var(ddof=1)
    n = df.groupby("label")["y"].size()
    np.testing.assert_allclose(m.sigma_by.to_numpy() ** 2, s2.to_numpy(), rtol=1e-6)
    v = s2 / n
    welch = v.sum() ** 2 / ((v ** 2) / (n - 1)).sum()
    tab = m.coef_table()
    assert tab.loc["labelb", "df"] == pytest.approx(welch, rel=1e-6)
    assert tab.loc["labelb", "Std. Error"] == pytest.approx(np.sqrt(v.sum()), rel=1e-6)
    t = (df[df.label == "b"].y.mean() - df[df.label == "a"].y.mean()) / np.sqrt(v.sum())
    assert tab.loc["labelb", "Pr(>|t|)"] == pytest.approx(2 * stats.t.sf(abs(t), welch), rel=1e-5)


def test_balanced_one_way_intercept_df_is_groups_minus_one():
    """Balanced one-way random effects, ``y ~ 1 + (1 | g)`` (REML, interior optimum):
    ``Var(μ̂) = (σ_g² + σ²/r)/a`` is estimated by ``MS_between/(a r)`` with ``a − 1`` df, so
    Satterthwaite's df is exactly ``a − 1`` and Kenward–Roger's too."""
    rng = np.random.default_rng(7)
    a, r = 9, 4
    g = np.repeat(np.arange(a), r)
    y = 2.0 + rng.normal(0, 1.0, a)[g] + rng.normal(0, 0.7, a * r)
    df = pd.DataFrame({"y": y, "g": [f"s{i}" for i in g]})
    m = sm.lmer("y ~ 1 + (1 | g)", df)
    ms_between = r * np.var(df.groupby("g").y.mean().to_numpy(), ddof=1)
    for ddf in ("Satterthwaite", "Kenward-Roger"):
        tab = m.coef_table(ddf)
        assert tab.loc["(Intercept)", "df"] == pytest.approx(a - 1, rel=1e-6)
        assert tab.loc["(Intercept)", "Std. Error"] == pytest.approx(np.sqrt(ms_between / (a * r)), rel=1e-6)


def test_richardson_derivatives_are_exact_on_polynomials():
    f = lambda x: x[0] ** 3 * x[1] + 2 * x[1] ** 2 - x[0] * x[2] ** 2  # noqa: E731
    x = np.array([1.3, -0.7, 0.0])
    H = richardson_hessian(f, x)
    want = np.array([[6 * x[0] * x[1], 3 * x[0] ** 2, -2 * x[2]],
                     [3 * x[0] ** 2, 4.0, 0.0],
                     [-2 * x[2], 0.0, -2 * x[0]]])
    # exact up to rounding: at x_2 = 0 the step is numDeriv's eps = 1e-4, and the second
    # difference loses ~1e-16/1e-8 to cancellation before extrapolation
    np.testing.assert_allclose(H, want, rtol=1e-6, atol=1e-8)
    J = richardson_jacobian(lambda x: np.array([np.sin(x[0]) * x[1], x[1] ** 2]), np.array([0.4, 2.0]))
    np.testing.assert_allclose(J, [[np.cos(0.4) * 2.0, np.sin(0.4)], [0.0, 4.0]], atol=1e-10)


def test_doolittle_and_zapsmall_match_r():
    A = np.array([[4.0, 2.0, 2.0], [2.0, 3.0, 1.0], [2.0, 1.0, 3.0]])
    L, U = doolittle(A)
    np.testing.assert_allclose(L @ U, A, atol=1e-12)
    np.testing.assert_allclose(np.diag(L), 1.0)
    assert np.allclose(np.triu(L, 1), 0) and np.allclose(np.tril(U, -1), 0)
    # zapsmall(c(1, 1e-9, 123.456789)) in R: 1.0000 0.0000 123.4568
    np.testing.assert_allclose(zapsmall(np.array([1, 1e-9, 123.456789])), [1, 0, 123.4568])


# ---------------------------------------------------------------------------- API and errors
def test_summary_prints_lmertest_layout(fits):
    _, m = fits("ham")
    text = m.summary(ddf="Satterthwaite")
    assert "t-tests use Satterthwaite's method" in text
    assert "Pr(>|t|)" in text and "Signif. codes" in text
    assert "Pr(>|t|)" not in m.summary()
    assert "Kenward-Roger's method" in m.summary(ddf="KR")


def test_type3_hypotheses_are_lmertest_for_treatment_contrasts(fits):
    """ham: Product (4 levels) × Information (2): the type III hypothesis of Information is
    the average of its simple effects over Product (SAS's type III), i.e. the row
    ``Information2 + (P2:I2 + P3:I2 + P4:I2)/4``."""
    _, m = fits("ham")
    L = term_contrasts(m, 3)["Information"]
    names = list(m.fixef.index)
    want = np.zeros(len(names))
    want[names.index("Information2")] = 1.0
    for k in (2, 3, 4):
        want[names.index(f"Product{k}:Information2")] = 0.25
    assert L.shape == (1, len(names))
    np.testing.assert_allclose(L[0] / L[0][names.index("Information2")], want, atol=1e-7)


def test_anova_dispatch_keeps_model_comparison(fits):
    _, m = fits("sleep_slopes")
    df = pd.read_csv(REF_DIR / "sleep_slopes.csv")
    m0 = sm.lmer("Reaction ~ Days + (1 | Subject)", df)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lrt = sm.anova(m0, m)
    assert list(lrt.columns) == ["npar", "AIC", "BIC", "logLik", "deviance", "Chisq", "Df", "Pr(>Chisq)"]
    with pytest.raises(ValueError, match="type= applies"):
        sm.anova(m0, m, type=3)


def test_named_errors(fits):
    ref, m_ml = fits("sleep_slopes_ml")
    with pytest.raises(DdfError, match="only available for REML"):
        m_ml.coef_table("Kenward-Roger")
    with pytest.raises(AnovaError, match="only available for REML"):
        sm.anova(m_ml, ddf="Kenward-Roger")
    with pytest.raises(ValueError, match="unknown ddf method"):
        m_ml.coef_table("Welch")
    with pytest.raises(ValueError, match="unknown anova type"):
        sm.anova(m_ml, type=4)
    bare = sm.LmerResult.from_dict(m_ml.to_dict())
    with pytest.raises(DdfError, match="needs the model spec|need the model spec"):
        bare.coef_table()


def test_fstat_ddf_combines_rows_as_lmertest(fits):
    """A 2-row contrast of two coefficients with their own df: the F test's DenDF is
    ``2E/(E − 2)`` with ``E = Σ ν_m/(ν_m − 2)`` over the eigen-rotated rows."""
    _, m = fits("tvbo")
    info = satterthwaite_info(m)
    L = np.eye(len(m.fixef))[1:3]
    V = info.vcov_beta
    d, P = np.linalg.eigh(L @ V @ L.T)
    rows = P.T @ L
    nu = []
    for r in rows:
        g = np.array([r @ J @ r for J in info.jac])
        nu.append(2 * (r @ V @ r) ** 2 / (g @ info.vcov_varpar @ g))
    E = sum(v / (v - 2) for v in nu)
    res = contest_md(m, L)
    assert res["DenDF"] == pytest.approx(2 * E / (E - 2), rel=1e-10)
    b = m.fixef.to_numpy()
    F = (L @ b) @ np.linalg.solve(L @ V @ L.T, L @ b) / 2
    assert res["F value"] == pytest.approx(F, rel=1e-10)


def test_type3_of_other_codings_maps_treatment_hypotheses():
    """Factors coded by other contrasts (``contr.sum``, ``contr.poly``): lmerTest builds the
    type III hypotheses on the treatment-coded ``X_t`` and maps them by ``X_t⁺X``.  The
    model is the same, so every F test must be the same as with treatment contrasts (here
    ``temperature`` recoded as ``d_j − 1/6``, a reparameterisation ``X' = X A``)."""
    import dataclasses
    from scoremix.lme.api import fit_spec
    ref, df = load_reference("cake_unordered")
    m = fit(ref, df)
    ft = m.spec.fixed_terms
    X = m.spec.X.copy()
    cols = np.flatnonzero(ft.assign == 2)
    X[:, cols] = X[:, cols] - 1.0 / (len(cols) + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m2 = fit_spec(dataclasses.replace(m.spec, X=X), REML=True)
    assert -2 * m2.loglik == pytest.approx(-2 * m.loglik, rel=1e-10)
    want = table(ref["anova_3_satterthwaite"])
    assert_table(sm.anova(m2, type=3), want, "type III, recoded temperature")


def test_missing_cell_warns_as_lmertest(fits):
    _, m = fits("ham_missing_cell")
    assert "Product4:Information2" in m.spec.dropped_fixef
    with pytest.warns(UserWarning, match="Missing cells for: Product4:Information2"):
        sm.anova(m, type=3)
