r"""R's printing of formula expressions (``deparse``), shared by the formula parser and the
expression evaluator.

Syntax-tree nodes are tuples: ``("name", s)``, ``("num", text)``, ``("str", s)``,
``("call", fname, args)``, ``("named", argname, node)`` (a ``name = value`` argument),
``("paren", node)``, ``("bin", op, left, right)``, ``("unary", op, node)``.
"""

from __future__ import annotations

import re

__all__ = ["r_name", "deparse", "format_number", "PRECEDENCE"]

_SYNTACTIC = re.compile(r"^((\.[A-Za-z._]|[A-Za-z])[A-Za-z0-9._]*|\.)$")

#: R's operator precedence (higher binds tighter)
PRECEDENCE = {"|": 1, "||": 1, "<": 1.5, "<=": 1.5, ">": 1.5, ">=": 1.5, "==": 1.5, "!=": 1.5,
              "+": 2, "-": 2, "*": 3, "/": 3, "%": 3.5, ":": 4, "^": 6}

#: operators R deparses without surrounding spaces
_TIGHT = (":", "^", "/")


def r_name(name: str) -> str:
    """How R deparses a symbol: back-quoted unless it is a syntactic name."""
    if _SYNTACTIC.match(name) and not re.match(r"^\.\d", name):
        return name
    return "`" + name.replace("`", "\\`") + "`"


def format_number(text: str) -> str:
    """R's ``deparse`` of a numeric constant: 15 significant digits, fixed notation unless
    scientific is shorter (``1000``, ``0.5``, ``1e+05``, ``1e-05``)."""
    try:
        v = float(text)
    except ValueError:
        return text
    if v == 0:
        return "0"
    fixed = f"{v:.15g}"
    if "e" in fixed:
        fixed = f"{v:.15f}".rstrip("0").rstrip(".") if abs(v) >= 1 else fixed
    mant, exp = f"{v:.14e}".split("e")
    mant = mant.rstrip("0").rstrip(".")
    e = int(exp)
    sci = f"{mant}e{'-' if e < 0 else '+'}{abs(e):02d}"
    if "e" in fixed or len(sci) < len(fixed):
        return sci
    return fixed


def _prec(op: str) -> float:
    if op.startswith("%"):
        return PRECEDENCE["%"]
    return PRECEDENCE[op]


def deparse(node: object) -> str:
    """R's ``deparse`` of an expression (spacing as R prints it; parentheses as written,
    plus those needed by synthetic nodes)."""
    kind = node[0]  # type: ignore[index]
    if kind == "name":
        return r_name(node[1])  # type: ignore[index]
    if kind == "num":
        return format_number(node[1])  # type: ignore[index]
    if kind == "str":
        return '"' + node[1].replace("\\", "\\\\").replace('"', '\\"') + '"'  # type: ignore[index]
    if kind == "named":
        return f"{node[1]} = {deparse(node[2])}"  # type: ignore[index]
    if kind == "call":
        return f"{node[1]}(" + ", ".join(deparse(a) for a in node[2]) + ")"  # type: ignore[index]
    if kind == "paren":
        return "(" + deparse(node[1]) + ")"  # type: ignore[index]
    if kind == "unary":
        return node[1] + deparse(node[2])  # type: ignore[index]
    _, op, left, right = node  # type: ignore[misc]
    lt, rt = deparse(left), deparse(right)
    # synthetic nodes: parentheses for a right operand of the same precedence (left-assoc)
    if right[0] == "bin" and _prec(right[1]) <= _prec(op) and op != "^":
        rt = "(" + rt + ")"
    if left[0] == "bin" and _prec(left[1]) < _prec(op):
        lt = "(" + lt + ")"
    if op in _TIGHT or op in ("%%", "%/%"):
        return f"{lt}{op}{rt}"
    return f"{lt} {op} {rt}"
