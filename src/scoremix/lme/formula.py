r"""Parse lme4 model formulas into terms (no data needed).

A formula ``response ~ fixed + (expr | group) + …`` is split into

* the **fixed part**, expanded like R's ``terms.formula``: operators ``+``, ``-``, ``:``
  (interaction), ``*`` (``a*b = a + b + a:b``), ``/`` (``a/b = a + a:b``), ``^``
  (``(a+b+c)^2`` = all terms up to order 2), parentheses, the intercept ``1`` /
  ``0`` / ``-1``; terms are ordered by order of interaction, then by first appearance,
  and variables inside a term by their first appearance in the formula;
* the **random part**, expanded like ``lme4::findbars``: ``(x || g)`` becomes
  ``(1 | g) + (0 + x | g)``, ``(e | g1/g2)`` becomes ``(e | g2:g1) + (e | g1)``.

With :math:`T` the set of terms and :math:`\mathbb{1}` the intercept, the fixed part of
the linear predictor is :math:`\eta = \beta_0 \mathbb{1} + \sum_{t \in T} X_t \beta_t`, where
``X_t`` is the row-wise product of the columns of the variables of ``t`` (built by
:mod:`scoremix.lme.model_frame`).

Supported syntax, everything else raises :class:`~scoremix.lme.errors.FormulaError`:
column names (R names or ``\`back quoted\```), ``1``/``0``, ``+ - : * / ^ ( )``,
``dummy(column, "level")`` and ``(expr | group)`` / ``(expr || group)`` terms whose
group is a column, ``g1:g2`` or ``g1/g2``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from scoremix.lme.errors import FormulaError
from scoremix.lme.rsyntax import deparse, r_name
from scoremix.lme.transforms import (
    CONSTANTS,
    FACTOR_FUNCTIONS,
    expression_columns,
    validate_expression,
)

__all__ = [
    "Variable",
    "TermSet",
    "RandomPart",
    "ParsedFormula",
    "parse_formula",
    "parse_dispersion",
    "parse_one_sided",
    "SUPPORTED_SYNTAX",
]

SUPPORTED_SYNTAX = (
    "supported: response ~ fixed + (expr | group); fixed/expr use column names, 1, 0, "
    "+, -, :, *, /, ^, %in%, parentheses, dummy(column, \"level\"), factor(), ordered(), "
    "I(), log(), exp(), sqrt() and other elementwise functions, scale(), poly(x, k[, raw = "
    "TRUE]) and offset(); the response may be an expression such as log(y); group is a "
    "column, g1:g2 or g1/g2; (expr || group) gives independent terms"
)

_r_name = r_name
_deparse = deparse


# --------------------------------------------------------------------------- tokens
_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<name>(?:[A-Za-z]|\.(?![0-9]))[A-Za-z0-9._]*)
  | (?P<bq>`(?:[^`\\]|\\.)*`)
  | (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<op>\|\||%[^%\s]*%|<=|>=|==|!=|[<>=~+\-*/:^|(),])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str
    pos: int


def _tokenize(s: str) -> list[_Tok]:
    toks: list[_Tok] = []
    pos = 0
    while pos < len(s):
        m = _TOKEN_RE.match(s, pos)
        if m is None:
            raise FormulaError(
                f"cannot parse formula {s!r}: unexpected character {s[pos]!r} at position "
                f"{pos}; {SUPPORTED_SYNTAX}"
            )
        kind = m.lastgroup or ""
        if kind != "ws":
            text = m.group(0)
            if kind == "bq":
                kind, text = "name", text[1:-1].replace("\\`", "`")
            elif kind == "str":
                text = text[1:-1]
            toks.append(_Tok(kind, text, pos))
        pos = m.end()
    toks.append(_Tok("end", "", len(s)))
    return toks


# --------------------------------------------------------------------------- AST
# Nodes are tuples: ("name", str) ("num", str) ("str", str) ("call", fname, args)
# ("paren", node) ("bin", op, left, right) ("unary", op, node).


class _Parser:
    """Recursive descent with R's operator precedence (low → high):
    ``~`` < ``| ||`` < ``+ -`` < ``* /`` < ``:`` < unary ``+ -`` < ``^``."""

    def __init__(self, text: str):
        self.text = text
        self.toks = _tokenize(text)
        self.i = 0

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def take(self) -> _Tok:
        t = self.toks[self.i]
        self.i += 1
        return t

    def expect(self, text: str) -> None:
        t = self.take()
        if t.text != text or t.kind not in ("op",):
            where = "end of formula" if t.kind == "end" else repr(t.text)
            raise FormulaError(
                f"cannot parse formula {self.text!r}: expected {text!r} at position {t.pos}, "
                f"found {where}"
            )

    def is_op(self, *ops: str) -> bool:
        t = self.peek()
        return t.kind == "op" and t.text in ops

    def formula(self) -> tuple[object | None, object]:
        lhs = None
        if not self.is_op("~"):
            lhs = self.bar()
        if not self.is_op("~"):
            raise FormulaError(
                f"formula {self.text!r} has no '~'; write it as 'response ~ predictors'"
            )
        self.take()
        rhs = self.bar()
        if self.peek().kind != "end":
            t = self.peek()
            raise FormulaError(
                f"cannot parse formula {self.text!r}: unexpected {t.text!r} at position {t.pos}; "
                f"{SUPPORTED_SYNTAX}"
            )
        return lhs, rhs

    def bar(self) -> object:
        node = self.compare()
        while self.is_op("|", "||"):
            op = self.take().text
            node = ("bin", op, node, self.compare())
        return node

    def compare(self) -> object:
        node = self.sum()
        while self.is_op("<", "<=", ">", ">=", "==", "!="):
            op = self.take().text
            node = ("bin", op, node, self.sum())
        return node

    def sum(self) -> object:
        node = self.prod()
        while self.is_op("+", "-"):
            op = self.take().text
            node = ("bin", op, node, self.prod())
        return node

    def prod(self) -> object:
        node = self.special()
        while self.is_op("*", "/"):
            op = self.take().text
            node = ("bin", op, node, self.special())
        return node

    def special(self) -> object:
        node = self.colon()
        while self.peek().kind == "op" and self.peek().text.startswith("%"):
            op = self.take().text
            node = ("bin", op, node, self.colon())
        return node

    def colon(self) -> object:
        node = self.unary()
        while self.is_op(":"):
            self.take()
            node = ("bin", ":", node, self.unary())
        return node

    def unary(self) -> object:
        if self.is_op("-", "+"):
            op = self.take().text
            return ("unary", op, self.unary())
        return self.power()

    def power(self) -> object:
        node = self.atom()
        if self.is_op("^"):
            self.take()
            node = ("bin", "^", node, self.unary())
        return node

    def argument(self) -> object:
        """A call argument: ``expr`` or ``name = expr``."""
        t = self.peek()
        nxt = self.toks[self.i + 1]
        if t.kind == "name" and nxt.kind == "op" and nxt.text == "=":
            self.i += 2
            return ("named", t.text, self.bar())
        return self.bar()

    def atom(self) -> object:
        t = self.take()
        if t.kind == "name":
            if self.is_op("("):
                self.take()
                args: list[object] = []
                if not self.is_op(")"):
                    args.append(self.argument())
                    while self.is_op(","):
                        self.take()
                        args.append(self.argument())
                self.expect(")")
                return ("call", t.text, tuple(args))
            return ("name", t.text)
        if t.kind == "num":
            return ("num", t.text)
        if t.kind == "str":
            return ("str", t.text)
        if t.kind == "op" and t.text == "(":
            inner = self.bar()
            self.expect(")")
            return ("paren", inner)
        where = "end of formula" if t.kind == "end" else repr(t.text)
        raise FormulaError(
            f"cannot parse formula {self.text!r}: unexpected {where} at position {t.pos}; "
            f"{SUPPORTED_SYNTAX}"
        )


# --------------------------------------------------------------------------- terms
@dataclass(frozen=True)
class Variable:
    r"""One variable of a formula.

    Attributes
    ----------
    label:
        R's name of the variable (its deparsed expression): ``x``, ```my col```,
        ``dummy(label, "spoof")``.
    column:
        the data column it reads.
    level:
        for ``dummy(column, "level")`` the level; the variable is then the numeric
        indicator :math:`1\{column = level\}`.
    kind:
        ``"column"`` (a data column), ``"dummy"``, ``"expr"`` (an R expression such as
        ``log(x)``, ``I(x^2)``, ``poly(x, 2)``, ``scale(x)``, evaluated by
        :mod:`scoremix.lme.transforms`) or ``"factor"`` (``factor(e)``, ``ordered(e)``).
    expr:
        the syntax tree of an ``"expr"``/``"factor"`` variable.
    columns:
        every data column the variable reads.
    """

    label: str
    column: str
    level: str | None = None
    kind: str = "column"
    expr: object = None
    columns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.columns:
            object.__setattr__(self, "columns", (self.column,))


@dataclass(frozen=True)
class TermSet:
    """The expanded right-hand side of a (sub)formula, as R's ``terms`` object.

    Attributes
    ----------
    intercept:
        whether the intercept column is included.
    variables:
        the variables in order of first appearance (R's ``variables`` attribute).
    terms:
        each term a tuple of indices into ``variables`` (sorted), in R's order: by order
        of interaction, then by first appearance.
    """

    intercept: bool
    variables: tuple[Variable, ...]
    terms: tuple[tuple[int, ...], ...]

    def term_labels(self) -> list[str]:
        """R's ``term.labels``: ``["label", "x", "label:x"]``."""
        return [":".join(self.variables[i].label for i in t) for t in self.terms]


@dataclass(frozen=True)
class RandomPart:
    """One random-effects term ``(lhs | group)`` after ``||`` and ``/`` expansion.

    Attributes
    ----------
    lhs:
        the terms of the left-hand side (model matrix ``~ lhs``).
    group_columns:
        the columns whose interaction is the grouping factor, in the written order
        (``("g2", "g1")`` for ``g2:g1``).
    group:
        the grouping name as lme4 prints it (``"g2:g1"``, ``"g3:(g2:g1)"``).
    label:
        the term as lme4 deparses it (``"1 + x | g2:g1"``, ``"0 + x | g"``).
    """

    lhs: TermSet
    group_columns: tuple[str, ...]
    group: str
    label: str
    #: ``"us"`` (unstructured ``T_k``), ``"diag"`` (lme4 2.0's ``diag()``: one variance
    #: per model-matrix column, no correlations), ``"cs"``/``"cs_hom"`` or
    #: ``"ar1"``/``"ar1_het"`` (lmer and glmer)
    structure: str = "us"


@dataclass(frozen=True)
class ParsedFormula:
    """A parsed lme4 formula.

    Attributes
    ----------
    formula:
        the text as given.
    response:
        the response column.
    fixed:
        the fixed-effects terms.
    random:
        the random-effects terms in formula order (before lme4's sorting by number of
        levels, which needs the data).
    response_expr:
        the syntax tree of a transformed response (``log(y)``), ``None`` for a column;
        ``response`` is then R's label of it.
    offsets:
        syntax trees of the ``offset(e)`` terms of the fixed part (summed, coefficient 1).
    """

    formula: str
    response: str
    fixed: TermSet
    random: tuple[RandomPart, ...]
    response_expr: object = None
    offsets: tuple[object, ...] = ()

    @property
    def response_columns(self) -> list[str]:
        """The columns the response reads (``[response]`` unless it is an expression)."""
        if self.response_expr is None:
            return [self.response]
        return expression_columns(self.response_expr)

    @property
    def columns(self) -> list[str]:
        """Every data column the formula reads (response first, no duplicates)."""
        cols = list(self.response_columns)
        for off in self.offsets:
            cols.extend(expression_columns(off))
        sets = [self.fixed] + [r.lhs for r in self.random]
        for ts in sets:
            for v in ts.variables:
                cols.extend(v.columns)
        for r in self.random:
            cols.extend(r.group_columns)
        return list(dict.fromkeys(cols))


_Term = frozenset  # a term: frozenset of variable indices


class _Expander:
    """Expand an AST into R's terms, with a variable registry in appearance order."""

    def __init__(self, text: str):
        self.text = text
        self.variables: list[Variable] = []
        self.index: dict[str, int] = {}
        self.offsets: list[object] = []
        self.allow_offset = False

    def err(self, msg: str) -> FormulaError:
        return FormulaError(f"in formula {self.text!r}: {msg}")

    def variable(self, node: object) -> int:
        kind = node[0]  # type: ignore[index]
        if kind == "name":
            if node[1] == ".":  # type: ignore[index]
                raise self.err("'.' (all other columns) is not supported; name the predictors")
            var = Variable(_r_name(node[1]), node[1])  # type: ignore[index]
        else:  # call, validated
            _, fname, args = node  # type: ignore[misc]
            if fname in FACTOR_FUNCTIONS:
                if len(args) != 1 or args[0][0] == "named":
                    raise self.err(f"{_deparse(node)}: {fname}() takes one argument here")
                validate_expression(args[0], self.text)
                cols = tuple(expression_columns(args[0]))
                if not cols:
                    raise self.err(f"{_deparse(node)} reads no column")
                var = Variable(_deparse(node), cols[0], None, "factor", node, cols)
            elif fname != "dummy":
                validate_expression(node, self.text)
                cols = tuple(expression_columns(node))
                if not cols:
                    raise self.err(f"{_deparse(node)} reads no column of the data")
                var = Variable(_deparse(node), cols[0], None, "expr", node, cols)
            elif len(args) != 2 or args[0][0] != "name" or args[1][0] != "str":
                raise self.err(
                    f"{_deparse(node)}: dummy() needs a column and one quoted level, "
                    'as in dummy(label, "spoof")'
                )
            else:
                var = Variable(_deparse(node), args[0][1], args[1][1], "dummy")
        if var.label not in self.index:
            self.index[var.label] = len(self.variables)
            self.variables.append(var)
        return self.index[var.label]

    def collect(self, node: object) -> None:
        """Register variables in order of appearance (R's ``all.vars`` order)."""
        kind = node[0]  # type: ignore[index]
        if kind == "call" and node[1] == "offset":  # type: ignore[index]
            return
        if kind in ("name", "call"):
            self.variable(node)
        elif kind == "paren":
            self.collect(node[1])  # type: ignore[index]
        elif kind == "unary":
            self.collect(node[2])  # type: ignore[index]
        elif kind == "bin":
            if node[1] in ("|", "||"):  # type: ignore[index]
                raise self.err(
                    "a random-effects term (expr | group) must be a top-level summand in "
                    f"its own parentheses, found {_deparse(node)!r} nested in an expression"
                )
            self.collect(node[2])  # type: ignore[index]
            if node[1] != "^":  # type: ignore[index]
                self.collect(node[3])  # type: ignore[index]

    def expand(self, node: object) -> tuple[list[frozenset], bool | None]:
        """Return (ordered unique terms, intercept directive or None)."""
        kind = node[0]  # type: ignore[index]
        if kind == "call" and node[1] == "offset":  # type: ignore[index]
            if not self.allow_offset:
                raise self.err(f"{_deparse(node)}: offset() belongs to the fixed part of the formula")
            if len(node[2]) != 1 or node[2][0][0] == "named":  # type: ignore[index]
                raise self.err(f"{_deparse(node)}: offset() takes one expression")
            validate_expression(node[2][0], self.text)  # type: ignore[index]
            self.offsets.append(node[2][0])  # type: ignore[index]
            return [], None
        if kind in ("name", "call"):
            return [_Term({self.variable(node)})], None
        if kind == "num":
            if node[1] in ("1", "1.0"):  # type: ignore[index]
                return [], True
            if node[1] in ("0", "0.0"):  # type: ignore[index]
                return [], False
            raise self.err(f"the number {node[1]} is not a term; use 1 or 0 for the intercept")  # type: ignore[index]
        if kind == "str":
            raise self.err(f"a quoted string {_deparse(node)} is not a term")
        if kind == "paren":
            return self.expand(node[1])  # type: ignore[index]
        if kind == "unary":
            terms, icpt = self.expand(node[2])  # type: ignore[index]
            if node[1] == "+":  # type: ignore[index]
                return terms, icpt
            return [], (None if icpt is None else not icpt)
        _, op, left, right = node  # type: ignore[misc]
        if op in ("|", "||"):
            raise self.err(
                f"random-effects term {_deparse(node)!r} must be enclosed in parentheses "
                "and added to the formula, as in y ~ x + (1 | g)"
            )
        if op == "^":
            if right[0] != "num" or not re.fullmatch(r"\d+", right[1]) or int(right[1]) < 1:
                raise self.err(f"the power in {_deparse(node)!r} must be a positive integer")
            base, icpt = self.expand(left)
            if icpt is not None:
                raise self.err(f"0/1 cannot be raised to a power in {_deparse(node)!r}")
            out = list(base)
            for _ in range(int(right[1]) - 1):
                out = _add(_add(out, base), _interact(out, base))
            return out, None
        if op not in (":", "*", "/", "%in%", "+", "-"):
            raise self.err(
                f"operator {op!r} in {_deparse(node)!r} is not a formula operator; wrap "
                f"arithmetic in I(), as in I(x {op} 2)")
        lt, li = self.expand(left)
        rt, ri = self.expand(right)
        if op == "+":
            return _add(lt, rt), (ri if ri is not None else li)
        if op == "-":
            out = [t for t in lt if t not in set(rt)]
            icpt = li
            if ri is not None:
                icpt = not ri
            return out, icpt
        if li is not None or ri is not None:
            raise self.err(
                f"the intercept (1 or 0) cannot be used with {op!r} in {_deparse(node)!r}; "
                "add or remove it with + and -"
            )
        if op in (":", "%in%"):  # R's terms() treats a %in% b as a:b
            return _interact(lt, rt), None
        if op == "*":
            return _add(_add(lt, rt), _interact(lt, rt)), None
        if op == "/":
            allvars = _Term().union(*lt) if lt else _Term()
            return _add(lt, [allvars | t for t in rt]), None
        raise self.err(f"operator {op!r} is not supported")  # pragma: no cover

    def termset(self, node: object | None, default_intercept: bool = True) -> TermSet:
        if node is None:
            return TermSet(default_intercept, tuple(self.variables), ())
        self.collect(node)
        terms, icpt = self.expand(node)
        intercept = default_intercept if icpt is None else icpt
        # stable sort by order of interaction (R's keep.order = FALSE)
        ordered = sorted((t for t in terms if t), key=len)
        return TermSet(
            intercept,
            tuple(self.variables),
            tuple(tuple(sorted(t)) for t in ordered),
        )


def _add(a: list[frozenset], b: list[frozenset]) -> list[frozenset]:
    out = list(a)
    seen = set(a)
    for t in b:
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


def _interact(a: list[frozenset], b: list[frozenset]) -> list[frozenset]:
    return _add([], [x | y for x in a for y in b])


# --------------------------------------------------------------------------- random
def _split_bars(node: object, text: str) -> tuple[object | None, list[object]]:
    """Remove the ``(e | g)`` summands from the right-hand side (lme4's ``nobars``)
    and return (fixed part or None, bar nodes in order)."""
    inner = node
    while inner[0] == "paren":  # type: ignore[index]
        inner = inner[1]  # type: ignore[index]
    if inner is not node and inner[0] == "bin" and inner[1] in ("|", "||"):  # type: ignore[index]
        return None, [inner]  # redundant parentheses ((x | g)) are allowed, as in lme4
    if inner[0] == "call" and inner[1] in _IMPLEMENTED and _contains_bar(inner):  # type: ignore[index]
        return None, [(_structure_of(inner, text), _structured_bar(inner, text))]
    if node[0] == "bin" and node[1] in ("|", "||"):  # type: ignore[index]
        raise FormulaError(
            f"in formula {text!r}: the random-effects term {_deparse(node)!r} must be enclosed "
            "in parentheses and added to the formula, as in y ~ x + (1 | g)"
        )
    if node[0] == "bin" and node[1] in ("+", "-"):  # type: ignore[index]
        left, lbars = _split_bars(node[2], text)  # type: ignore[index]
        if node[1] == "+":  # type: ignore[index]
            right, rbars = _split_bars(node[3], text)  # type: ignore[index]
        else:
            right, rbars = node[3], []  # type: ignore[index]
            if _contains_bar(right):
                raise FormulaError(
                    f"in formula {text!r}: a random-effects term cannot be subtracted"
                )
        bars = lbars + rbars
        if left is None and right is None:
            return None, bars
        if left is None:
            if node[1] == "-":  # type: ignore[index]
                return ("unary", "-", right), bars
            return right, bars
        if right is None:
            return left, bars
        return ("bin", node[1], left, right), bars  # type: ignore[index]
    if node[0] == "call" and node[1] in _STRUCTURED and _contains_bar(node):  # type: ignore[index]
        raise FormulaError(
            f"in formula {text!r}: the structured covariance {node[1]}() of lme4 2.0 "  # type: ignore[index]
            f"({_deparse(node)!r}) is not supported; use an unstructured (x | g) or "
            "independent (x || g) term")
    if _contains_bar(node):
        raise FormulaError(
            f"in formula {text!r}: a random-effects term (expr | group) must be a top-level "
            f"summand in its own parentheses, as in y ~ x + (1 | g); found {_deparse(node)!r}"
        )
    return node, []


def _structured_bar(node: object, text: str) -> object:
    """The ``(expr | group)`` inside ``diag()``/``cs()``/``ar1()``."""
    args = [a for a in node[2] if a[0] != "named"]  # type: ignore[index]
    bar = args[0] if len(args) == 1 else None
    while bar is not None and bar[0] == "paren":  # type: ignore[index]
        bar = bar[1]  # type: ignore[index]
    if bar is None or not (bar[0] == "bin" and bar[1] == "|"):  # type: ignore[index]
        raise FormulaError(
            f"in formula {text!r}: {node[1]}() takes one random-effects term (expr | group) "  # type: ignore[index]
            f"and optionally hom = TRUE/FALSE; found {_deparse(node)!r}")
    return bar


def _structure_of(node: object, text: str) -> str:
    """lme4 2.0's structure: ``diag`` (heterogeneous variances), ``cs`` (heterogeneous
    variances, one correlation; ``cs_hom`` with ``hom = TRUE``), ``ar1`` (one variance,
    correlation ``ρ^|i-j|``; ``ar1_het`` with ``hom = FALSE``)."""
    name = node[1]  # type: ignore[index]
    hom = {"diag": False, "cs": False, "ar1": True}[name]
    for a in node[2]:  # type: ignore[index]
        if a[0] != "named":
            continue
        if a[1] != "hom" or a[2] not in (("name", "TRUE"), ("name", "FALSE"),
                                          ("name", "T"), ("name", "F")):
            raise FormulaError(f"in formula {text!r}: {name}() takes one random-effects term "
                               f"and optionally hom = TRUE/FALSE; found {_deparse(node)!r}")
        hom = a[2][1] in ("TRUE", "T")
    if name == "diag":
        if hom:
            raise FormulaError(f"in formula {text!r}: diag(..., hom = TRUE) (one common "
                               "variance) is not supported; use diag(...) or (1 | g)")
        return "diag"
    if name == "cs":
        return "cs_hom" if hom else "cs"
    return "ar1" if hom else "ar1_het"


#: the structures parsed (``diag``, ``cs``, ``ar1``; lmer and glmer)
_IMPLEMENTED = ("diag", "cs", "ar1")

#: lme4 2.0 / glmmTMB covariance-structure wrappers of a random term
_STRUCTURED = ("us", "ou", "exp", "gau", "mat", "toep", "homcs", "homdiag",
               "hetar1", "homar1", "rr")


def _contains_bar(node: object) -> bool:
    if node[0] == "bin":  # type: ignore[index]
        return node[1] in ("|", "||") or _contains_bar(node[2]) or _contains_bar(node[3])  # type: ignore[index]
    if node[0] in ("paren", "unary"):  # type: ignore[index]
        return _contains_bar(node[-1])  # type: ignore[index]
    if node[0] == "call":  # type: ignore[index]
        return any(_contains_bar(a) for a in node[2])  # type: ignore[index]
    return False


def _group_tree(node: object, text: str) -> object:
    """Validate a grouping expression: names combined with ``:`` and ``/``."""
    kind = node[0]  # type: ignore[index]
    if kind == "name":
        return node
    if kind == "paren":
        return _group_tree(node[1], text)  # type: ignore[index]
    if kind == "bin" and node[1] in (":", "/"):  # type: ignore[index]
        return ("bin", node[1], _group_tree(node[2], text), _group_tree(node[3], text))  # type: ignore[index]
    raise FormulaError(
        f"in formula {text!r}: grouping factor {_deparse(node)!r} is not supported; "
        "use a column, g1:g2 (interaction) or g1/g2 (nesting)"
    )


def _slash_terms(node: object) -> list[object]:
    """lme4's ``expandSlash``: ``g1/g2`` → ``[g2:g1, g1]``; ``g1/g2/g3`` →
    ``[g3:(g2:g1), g2:g1, g1]``."""
    if node[0] == "bin" and node[1] == "/":  # type: ignore[index]
        outer = _slash_terms(node[2])  # type: ignore[index]
        inner_first = outer[0]
        rights = _slash_terms(node[3])  # type: ignore[index]
        if len(rights) != 1:
            raise FormulaError(
                f"grouping factor {_deparse(node)!r}: nesting inside the right side of '/' "
                "is not supported"
            )
        return [("bin", ":", rights[0], inner_first)] + outer
    if _has_slash(node):
        raise FormulaError(f"unparseable formula for grouping factor {_deparse(node)!r}")
    return [node]


def _has_slash(node: object) -> bool:
    if node[0] == "bin":  # type: ignore[index]
        return node[1] == "/" or _has_slash(node[2]) or _has_slash(node[3])  # type: ignore[index]
    return False


def _flatten_group(node: object) -> tuple[str, ...]:
    if node[0] == "name":  # type: ignore[index]
        return (node[1],)  # type: ignore[index]
    return _flatten_group(node[2]) + _flatten_group(node[3])  # type: ignore[index]


def _random_parts(bar: object, text: str) -> list[RandomPart]:
    structure = "us"
    if isinstance(bar[0], str) and bar[0] not in ("bin",):  # type: ignore[index]
        structure, bar = bar[0], bar[1]  # type: ignore[index]
    _, op, lhs, group = bar  # type: ignore[misc]
    gtree = _group_tree(group, text)
    ex = _Expander(text)
    ts = ex.termset(lhs)
    sub: list[tuple[str, TermSet]] = []
    if op == "||":
        # lme4's expandDoubleVerts: (1 | g) + (0 + t | g) for every term label t
        if ts.intercept:
            sub.append(("1", TermSet(True, (), ())))
        for t in ts.terms:
            vars_ = tuple(ts.variables[i] for i in t)
            sub.append((
                "0 + " + ":".join(v.label for v in vars_),
                TermSet(False, vars_, (tuple(range(len(vars_))),)),
            ))
    else:
        sub.append((_deparse(lhs), ts))
    parts = []
    for lhs_text, lhs_ts in sub:
        for g in _slash_terms(gtree):
            gname = _deparse(g)
            parts.append(RandomPart(lhs_ts, _flatten_group(g), gname, f"{lhs_text} | {gname}",
                                    structure))
    return parts


@lru_cache(maxsize=256)
def parse_formula(formula: str) -> ParsedFormula:
    """Parse an lme4 formula.

    Parameters
    ----------
    formula:
        ``"score ~ label * x + (1 | speaker) + (1 | attack)"``.

    Returns
    -------
    ParsedFormula
        response, fixed terms (R's ``terms.formula`` expansion and order) and the
        random-effects terms (``findbars`` expansion of ``||`` and ``/``).

    Raises
    ------
    FormulaError
        for a malformed formula or unsupported syntax (functions other than
        ``dummy()``, ``offset()``, ``I()``, a bar outside parentheses, …).
    """
    if not isinstance(formula, str):
        raise FormulaError(f"formula must be a string, got {type(formula).__name__}")
    lhs, rhs = _Parser(formula).formula()
    if lhs is None:
        raise FormulaError(f"formula {formula!r} has no response; write 'response ~ predictors'")
    response_expr = None
    if lhs[0] == "name":  # type: ignore[index]
        response = lhs[1]  # type: ignore[index]
    elif lhs[0] in ("call", "paren", "unary", "bin") and not _contains_bar(lhs):  # type: ignore[index]
        if lhs[0] == "call" and lhs[1] in FACTOR_FUNCTIONS + ("dummy", "offset"):  # type: ignore[index]
            raise FormulaError(f"response {_deparse(lhs)!r} of formula {formula!r} must be numeric")
        validate_expression(lhs, formula)
        if not expression_columns(lhs):
            raise FormulaError(f"response {_deparse(lhs)!r} of formula {formula!r} reads no column")
        response, response_expr = _deparse(lhs), lhs
    else:
        raise FormulaError(
            f"response {_deparse(lhs)!r} of formula {formula!r} must be a column name or an "
            "expression of columns such as log(y)"
        )
    fixed_node, bars = _split_bars(rhs, formula)
    ex = _Expander(formula)
    ex.allow_offset = True
    fixed = ex.termset(fixed_node)
    for v in fixed.variables:
        if v.kind == "column" and v.column == response:
            raise FormulaError(f"in formula {formula!r}: the response {response!r} is also a predictor")
    random: list[RandomPart] = []
    for bar in bars:
        random.extend(_random_parts(bar, formula))
    return ParsedFormula(formula, response, fixed, tuple(random), response_expr, tuple(ex.offsets))


@lru_cache(maxsize=64)
def parse_one_sided(formula: str) -> TermSet:
    """Parse a one-sided fixed-effects formula ``"~ poly(x, 2) * f"`` (R's ``terms`` of a
    ``model.matrix`` formula; no random-effects terms, no offsets)."""
    if not isinstance(formula, str):
        raise FormulaError(f"formula must be a string, got {type(formula).__name__}")
    lhs, rhs = _Parser(formula).formula()
    if lhs is not None:
        raise FormulaError(f"formula {formula!r} must be one-sided ('~ x + f')")
    if _contains_bar(rhs):
        raise FormulaError(f"formula {formula!r}: random-effects terms have no model matrix here")
    return _Expander(formula).termset(rhs)


@lru_cache(maxsize=64)
def parse_dispersion(dispersion: str) -> str:
    """Parse a one-sided dispersion formula ``"~ label"`` and return the column name.

    The residual variance is then class specific,
    :math:`\\operatorname{Var}(\\varepsilon_i) = \\sigma^2_{c(i)}` with :math:`c(i)` the
    level of the column on row ``i``.
    """
    if not isinstance(dispersion, str):
        raise FormulaError(f"dispersion must be a string like '~ label', got {type(dispersion).__name__}")
    lhs, rhs = _Parser(dispersion).formula()
    if lhs is not None or rhs[0] != "name":  # type: ignore[index]
        raise FormulaError(
            f"dispersion formula {dispersion!r} is not supported: write a one-sided formula "
            "with a single factor column, as in '~ label'"
        )
    return rhs[1]  # type: ignore[index]
