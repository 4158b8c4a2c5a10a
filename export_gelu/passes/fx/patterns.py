"""GELU formulas as patterns, written as the math they match (KNOWLEDGE.md §3).

Each rule is a formula over one variable `x`; products and sums are unordered, so one
rule covers every operand order and bracketing. A rule names the canonical GELU it
stands for (`exact`, `tanh` or `quick`) and the spellings it covers.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

from torch import fx

from export_gelu.passes.fx.expr import Const, Expr, Leaf, Op

#: Relative tolerance for literals: accepts 0.7978845608, 0.79788456 and √(2/π), rejects 0.8.
LITERAL_RTOL = 1e-4

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
INV_SQRT_2 = 1.0 / math.sqrt(2.0)
TANH_BETA = 0.044715
QUICK_ALPHA = 1.702


@dataclass(frozen=True)
class Var:
    name: str = "x"


Pattern = Var | Const | Op


def mul(*args: Pattern | float) -> Op:
    return Op("mul", tuple(Const(float(a)) if isinstance(a, (int, float)) else a for a in args))


def add(*args: Pattern | float) -> Op:
    return Op("add", tuple(Const(float(a)) if isinstance(a, (int, float)) else a for a in args))


def tanh(a: Pattern) -> Op:
    return Op("tanh", (a,))


def erf(a: Pattern) -> Op:
    return Op("erf", (a,))


def sigmoid(a: Pattern) -> Op:
    return Op("sigmoid", (a,))


x = Var()

# The two ways the tanh argument is written: expanded (GPT-2's gelu_new) or factored
# (gelu_fast, Megatron, Bloom). `pow(x,3)` and `x*x*x` are the same tree here.
TANH_ARG_EXPANDED = mul(SQRT_2_OVER_PI, add(x, mul(TANH_BETA, x, x, x)))
TANH_ARG_FACTORED = mul(SQRT_2_OVER_PI, x, add(1, mul(TANH_BETA, x, x)))


@dataclass(frozen=True)
class GeluRule:
    """A formula that computes a GELU of kind `kind`."""

    name: str
    kind: str
    formula: Op


RULES: tuple[GeluRule, ...] = (
    GeluRule("tanh formula (gelu_new / gelu_accurate)", "tanh",
             mul(0.5, x, add(1, tanh(TANH_ARG_EXPANDED)))),
    GeluRule("tanh formula, factored (gelu_fast / Bloom / Megatron)", "tanh",
             mul(0.5, x, add(1, tanh(TANH_ARG_FACTORED)))),
    GeluRule("tanh formula as sigmoid", "tanh",
             mul(x, sigmoid(mul(2.0 * SQRT_2_OVER_PI, add(x, mul(TANH_BETA, x, x, x)))))),
    GeluRule("erf formula (gelu_python / ESM / TF)", "exact",
             mul(0.5, x, add(1, erf(mul(INV_SQRT_2, x))))),
    GeluRule("QuickGELU x*sigmoid(1.702x)", "quick", mul(x, sigmoid(mul(QUICK_ALPHA, x)))),
)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=LITERAL_RTOL, abs_tol=1e-12)


def _match(pat: Pattern, expr: Expr, bound: dict[str, fx.Node]) -> Iterator[dict[str, fx.Node]]:
    """Yield every binding of the pattern's variables under which `pat` equals `expr`."""
    if isinstance(pat, Var):
        if not isinstance(expr, Leaf):
            return
        if pat.name in bound:
            if bound[pat.name] is expr.node:
                yield bound
            return
        yield {**bound, pat.name: expr.node}
        return
    if isinstance(pat, Const):
        if isinstance(expr, Const) and _close(pat.value, expr.value):
            yield bound
        return
    if not isinstance(expr, Op) or expr.kind != pat.kind or len(expr.args) != len(pat.args):
        return
    if pat.kind in ("mul", "add"):
        seen: set[tuple[int, ...]] = set()
        for order in itertools.permutations(range(len(expr.args))):
            key = tuple(order)
            if key in seen:
                continue
            seen.add(key)
            yield from _match_seq(pat.args, tuple(expr.args[i] for i in order), bound)
        return
    yield from _match_seq(pat.args, expr.args, bound)


def _match_seq(pats: tuple[Pattern, ...], exprs: tuple[Expr, ...],
               bound: dict[str, fx.Node]) -> Iterator[dict[str, fx.Node]]:
    if not pats:
        yield bound
        return
    for b in _match(pats[0], exprs[0], bound):
        yield from _match_seq(pats[1:], exprs[1:], b)


def match_rule(expr: Expr) -> tuple[GeluRule, fx.Node] | None:
    """The first rule that `expr` computes, and the node bound to `x`."""
    for rule in RULES:
        for binding in _match(rule.formula, expr, {}):
            return rule, binding["x"]
    return None
