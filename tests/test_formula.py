"""lme4 formula parsing (scoremix.lme.formula).

Expected term labels come from R's ``terms.formula`` (stored by
``r_scripts/model_frame_reference.R``) and from lme4's ``findbars`` output quoted in the
comments (lme4 1.1-31).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scoremix.lme.errors import FormulaError
from scoremix.lme.formula import parse_dispersion, parse_formula

REFERENCE = json.loads(
    (Path(__file__).resolve().parents[1] / "tests" / "data" / "model_frame" / "model_frame_reference.json").read_text()
)


@pytest.mark.parametrize("ref", REFERENCE["terms"], ids=[t["rhs"] for t in REFERENCE["terms"]])
def test_fixed_terms_match_r_terms_formula(ref: dict) -> None:
    p = parse_formula("y ~ " + ref["rhs"])
    assert p.fixed.term_labels() == ref["labels"]
    assert p.fixed.intercept == bool(ref["intercept"])


def test_response_and_columns() -> None:
    p = parse_formula('score_logit ~ label*x + (0 + dummy(label, "spoof") | speaker) + (1 | attack/session)')
    assert p.response == "score_logit"
    # response, fixed, random left-hand sides, then grouping columns (session:attack first)
    assert p.columns == ["score_logit", "label", "x", "speaker", "session", "attack"]


def test_bars_are_removed_from_fixed_part() -> None:
    # lme4's nobars: y ~ (1|g) is y ~ 1; y ~ 0 + (1|g) has no intercept
    assert parse_formula("y ~ (1 | g)").fixed.intercept is True
    assert parse_formula("y ~ (1 | g)").fixed.terms == ()
    assert parse_formula("y ~ 0 + (1 | g)").fixed.intercept is False
    assert parse_formula("y ~ (1 | g) - 1").fixed.intercept is False
    assert parse_formula("y ~ (1 | g) + x").fixed.term_labels() == ["x"]


def test_double_bar_expansion() -> None:
    # lme4: findbars(y ~ (x*f || g)) -> 1 | g, 0 + x | g, 0 + f | g, 0 + x:f | g
    p = parse_formula("y ~ (x*f || g)")
    assert [r.label for r in p.random] == ["1 | g", "0 + x | g", "0 + f | g", "0 + x:f | g"]
    assert [r.lhs.intercept for r in p.random] == [True, False, False, False]
    assert [r.lhs.term_labels() for r in p.random] == [[], ["x"], ["f"], ["x:f"]]
    assert all(r.group == "g" and r.group_columns == ("g",) for r in p.random)
    # no intercept inside ||: only the slopes
    p = parse_formula("y ~ (0 + x || g)")
    assert [r.label for r in p.random] == ["0 + x | g"]


def test_slash_expansion_names() -> None:
    # lme4: (1 | g1/g2) -> 1 | g2:g1, 1 | g1 ; (1 | g1/g2/g3) -> g3:(g2:g1), g2:g1, g1
    p = parse_formula("y ~ (1 + x | g1/g2)")
    assert [r.label for r in p.random] == ["1 + x | g2:g1", "1 + x | g1"]
    assert [r.group_columns for r in p.random] == [("g2", "g1"), ("g1",)]
    p = parse_formula("y ~ (1 | g1/g2/g3)")
    assert [r.group for r in p.random] == ["g3:(g2:g1)", "g2:g1", "g1"]
    assert p.random[0].group_columns == ("g3", "g2", "g1")
    p = parse_formula("y ~ (1 | g1:g2:g3)")
    assert [r.group for r in p.random] == ["g1:g2:g3"]
    p = parse_formula("y ~ (x || g1/g2)")
    assert [r.label for r in p.random] == ["1 | g2:g1", "1 | g1", "0 + x | g2:g1", "0 + x | g1"]


def test_dummy_and_backquoted_names() -> None:
    p = parse_formula("y ~ (0 + dummy(label, 'spoof') | speaker)")
    (v,) = p.random[0].lhs.variables
    assert (v.label, v.column, v.level) == ('dummy(label, "spoof")', "label", "spoof")
    assert p.random[0].label == '0 + dummy(label, "spoof") | speaker'
    p = parse_formula("y ~ `my col` + x.1 + (1 | `spk id`)")
    assert p.fixed.term_labels() == ["`my col`", "x.1"]
    assert p.fixed.variables[0].column == "my col"
    assert p.random[0].group_columns == ("spk id",)


@pytest.mark.parametrize(
    "formula, pattern",
    [
        ("y ~ lag(x)", r"function lag\(\) is not supported"),
        ("y ~ ns(x, df = 1.5) + (1 | g)", r"ns\(\): df must be a whole number"),
        ("y ~ bs(x, knots = k)", r"knots must be a number or c\(\) of numbers"),
        ("y ~ I(x - mean(x, trim = 0.1))", r"only the data and na.rm"),
        ("y ~ poly(x, 1.5)", r"degree must be a positive whole number"),
        ("y ~ poly(x, 2, coefs = 1)", r"coefs"),
        ("y ~ scale(x, center = 3)", r"center must be TRUE or FALSE"),
        ("y ~ log(x, bass = 2)", r"log\(\) has no argument 'bass'"),
        ("y ~ x > 2", r"not a formula operator; wrap arithmetic in I\(\)"),
        ("y ~ x %o% a", r"not a formula operator"),
        ("y ~ I(pi)", r"reads no column"),
        ("factor(y) ~ x", r"must be numeric"),
        ("y ~ (1 | g) + offset((1 | h))", r"top-level summand|must be enclosed"),
        ("y ~ x + 1 | g", r"must be enclosed in parentheses"),
        ("y ~ x * (1 | g)", r"top-level summand"),
        ("y ~ x - (1 | g)", r"cannot be subtracted"),
        ("y ~ (1 | log(g))", r"grouping factor 'log\(g\)' is not supported"),
        ("y ~ (1 | g + h)", r"grouping factor 'g \+ h' is not supported"),
        ("y ~ x $ a", r"unexpected character '\$'"),
        ("y ~ x + (1 | g", r"expected '\)'"),
        ("y ~ x )", r"unexpected '\)'"),
        ("y ~", r"unexpected end of formula"),
        ("y x", r"has no '~'"),
        ("~ x", r"has no response"),
        ("(1 | g) ~ x", r"must be a column name or an expression"),
        ("y ~ x^1.5", r"power .* must be a positive integer"),
        ("y ~ x + 2", r"the number 2 is not a term"),
        ("y ~ dummy(label)", r"dummy\(\) needs a column and one quoted level"),
        ("y ~ dummy(label, c('a', 'b'))", r"dummy\(\) needs"),
        ("y ~ y + x", r"response 'y' is also a predictor"),
        ("y ~ (1 + x):f", r"intercept .* cannot be used with ':'"),
        ("y ~ x + 'a'", r"quoted string"),
        ("y ~ .", r"'\.'"),
    ],
)
def test_unsupported_syntax_raises(formula: str, pattern: str) -> None:
    with pytest.raises(FormulaError, match=pattern):
        parse_formula(formula)


def test_error_message_lists_supported_syntax() -> None:
    with pytest.raises(FormulaError) as exc:
        parse_formula("y ~ x + (1 | g) + (1 + x)(g)")
    assert "supported:" in str(exc.value) and "dummy(column" in str(exc.value)
    assert isinstance(exc.value, ValueError)
    with pytest.raises(FormulaError) as exc:
        parse_formula("y ~ lag(x)")
    assert "supported in expressions" in str(exc.value) and "poly(x, degree, raw)" in str(exc.value)


def test_parse_dispersion() -> None:
    assert parse_dispersion("~ label") == "label"
    assert parse_dispersion("~label") == "label"
    for bad in ["label", "~ label + x", "y ~ label", "~ 1", "~ log(x)"]:
        with pytest.raises(FormulaError):
            parse_dispersion(bad)


def test_expression_labels_are_rs_deparse() -> None:
    """Labels of expressions as R's deparse prints them (checked in R 4.2: spaces around
    + - * and %in%, none around / ^ %%, numbers with 15 significant digits, named
    arguments ``name = value``)."""
    f = parse_formula("y ~ I(x/2) + log(x, 2) + poly(x, 2, raw = TRUE) + I(1e3*x) + I(0.50*x) "
                      "+ exp(-x/100) + I(x%%2) + I((x - 3)^2) + log(y2, base = 2) + I(x^-1)")
    assert f.fixed.term_labels() == [
        "I(x/2)", "log(x, 2)", "poly(x, 2, raw = TRUE)", "I(1000 * x)", "I(0.5 * x)",
        "exp(-x/100)", "I(x%%2)", "I((x - 3)^2)", "log(y2, base = 2)", "I(x^-1)"]
    assert f.response == "y" and f.response_expr is None


def test_in_operator_redundant_parentheses_offset_and_response() -> None:
    """a %in% b is a:b (R's terms); ((x | g)) is (x | g); offset() is not a term; a
    transformed response keeps R's label and reads its columns."""
    f = parse_formula("log(y + 1) ~ b + a %in% b + offset(log(n)) + ((x | g))")
    assert f.fixed.term_labels() == ["b", "b:a"]
    assert f.response == "log(y + 1)" and f.response_columns == ["y"]
    assert [r.label for r in f.random] == ["x | g"]
    assert len(f.offsets) == 1
    assert f.columns == ["y", "n", "b", "a", "x", "g"]
    with pytest.raises(FormulaError, match="offset\\(\\) belongs to the fixed part"):
        parse_formula("y ~ x + (offset(z) | g)")
