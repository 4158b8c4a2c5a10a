"""GELU formulas as the math they match, and a matcher that ignores operand order.

Each rule is a formula over one variable `x`. Products and sums are unordered and
flattened, constants folded, `Pow(x,3)` and `x*x*x` the same tree (see `expr.py`), so one
rule covers every operand order and bracketing an exporter or a hand-written model uses.
Literals match within a relative tolerance (`expr.LITERAL_RTOL`, one ulp for fp16 literals).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

from export_gelu.passes.gelu_constants import (  # noqa: F401 - re-exported
    INV_SQRT_2,
    QUICK_ALPHA,
    SQRT_2_OVER_PI,
    TANH_BETA,
)
from export_gelu.passes.onnx.expr import Const, Expr, Leaf, Op


@dataclass(frozen=True)
class Var:
    name: str = "x"


Pattern = Var | Const | Op


def _lift(a: Pattern | float) -> Pattern:
    return Const(float(a)) if isinstance(a, (int, float)) else a


def mul(*args: Pattern | float) -> Op:
    return Op("mul", tuple(_lift(a) for a in args))


def add(*args: Pattern | float) -> Op:
    return Op("add", tuple(_lift(a) for a in args))


def tanh(a: Pattern) -> Op:
    return Op("tanh", (a,))


def erf(a: Pattern) -> Op:
    return Op("erf", (a,))


def sigmoid(a: Pattern) -> Op:
    return Op("sigmoid", (a,))


x = Var()
c = SQRT_2_OVER_PI


@dataclass(frozen=True)
class GeluRule:
    """A formula that computes a GELU of kind `kind` (exact | tanh | quick)."""

    name: str
    kind: str
    formula: Op


RULES: tuple[GeluRule, ...] = (
    GeluRule("erf formula 0.5·x·(1+erf(x/√2))", "exact",
             mul(0.5, x, add(1, erf(mul(INV_SQRT_2, x))))),
    GeluRule("tanh formula 0.5·x·(1+tanh(√(2/π)·(x+0.044715·x³)))", "tanh",
             mul(0.5, x, add(1, tanh(mul(c, add(x, mul(TANH_BETA, x, x, x))))))),
    GeluRule("tanh formula, factored (gelu_fast / Megatron / Bloom)", "tanh",
             mul(0.5, x, add(1, tanh(mul(c, x, add(1, mul(TANH_BETA, x, x))))))),
    GeluRule("tanh formula, distributed √(2/π)·x + 0.0356774·x³", "tanh",
             mul(0.5, x, add(1, tanh(add(mul(c, x), mul(c * TANH_BETA, x, x, x)))))),
    GeluRule("tanh formula, factored and distributed x·(√(2/π) + 0.0356774·x²)", "tanh",
             mul(0.5, x, add(1, tanh(mul(x, add(c, mul(c * TANH_BETA, x, x))))))),
    GeluRule("tanh formula as sigmoid x·σ(2√(2/π)·(x+0.044715·x³))", "tanh",
             mul(x, sigmoid(mul(2 * c, add(x, mul(TANH_BETA, x, x, x)))))),
    GeluRule("QuickGELU x·σ(1.702·x)", "quick", mul(x, sigmoid(mul(QUICK_ALPHA, x)))),
)


def close(ref: float, lit: Const) -> bool:
    """A literal equals a formula's constant within the literal's tolerance."""
    if lit.integral and float(ref).is_integer():
        return lit.value == ref
    return math.isclose(lit.value, ref, rel_tol=lit.rtol, abs_tol=1e-12)


def _match(pat: Pattern, expr: Expr, bound: dict[str, Leaf]) -> Iterator[dict[str, Leaf]]:
    """Every binding of the pattern's variables under which `pat` equals `expr`."""
    if isinstance(pat, Var):
        if not isinstance(expr, Leaf):
            return
        have = bound.get(pat.name)
        if have is None:
            yield {**bound, pat.name: expr}
        elif have.key == expr.key:
            yield bound
        return
    if isinstance(pat, Const):
        if isinstance(expr, Const) and close(pat.value, expr):
            yield bound
        return
    if not isinstance(expr, Op) or expr.kind != pat.kind or len(expr.args) != len(pat.args):
        return
    if pat.kind in ("mul", "add"):
        seen: set[tuple[int, ...]] = set()
        for order in itertools.permutations(range(len(expr.args))):
            args = tuple(expr.args[i] for i in order)
            key = tuple(id(a) for a in args)
            if key in seen:
                continue
            seen.add(key)
            yield from _match_seq(pat.args, args, bound)
        return
    yield from _match_seq(pat.args, expr.args, bound)


def _match_seq(pats: tuple[Pattern, ...], exprs: tuple[Expr, ...],
               bound: dict[str, Leaf]) -> Iterator[dict[str, Leaf]]:
    if not pats:
        yield bound
        return
    for b in _match(pats[0], exprs[0], bound):
        yield from _match_seq(pats[1:], exprs[1:], b)


def match_formula(expr: Expr) -> tuple[GeluRule, Leaf] | None:
    """The first rule that `expr` computes, and the leaf bound to `x`."""
    for rule in RULES:
        for binding in _match(rule.formula, expr, {}):
            return rule, binding["x"]
    return None
