"""GELU formulas as patterns, written as the math they match (docs/gelu.md).

Each rule is a formula over one variable `x`, built with the polynomial algebra of
`expr.py`. The matched graph is brought to the same canonical form, so one rule covers
every operand order, bracketing, distribution and cube spelling: GPT-2's `gelu_new`,
`gelu_accurate`, `gelu_fast`, Bloom and Megatron are all the one `tanh formula`.
Literals are compared with a relative tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from torch import fx

from export_gelu.passes.fx.expr import Fn, Leaf, Poly, apply
from export_gelu.passes.gelu_constants import (  # noqa: F401 - re-exported
    INV_SQRT_2,
    LITERAL_RTOL,
    QUICK_ALPHA,
    SQRT_2_OVER_PI,
    TANH_BETA,
)

x = Poly.var("x")


def tanh(a: Poly) -> Poly:
    return apply("tanh", a)


def erf(a: Poly) -> Poly:
    return apply("erf", a)


def erfc(a: Poly) -> Poly:
    return apply("erfc", a)


def sigmoid(a: Poly) -> Poly:
    return apply("sigmoid", a)


def ndtr(a: Poly) -> Poly:
    return apply("ndtr", a)


#: The tanh approximation's argument; factored (`c*x*(1+β*x*x)`), distributed or with
#: `pow(x,3)`, it is this one polynomial.
TANH_ARG = SQRT_2_OVER_PI * (x + TANH_BETA * x**3)


@dataclass(frozen=True)
class GeluRule:
    """A formula that computes a GELU of kind `kind` (exact | tanh | quick)."""

    name: str
    kind: str
    formula: Poly


RULES: tuple[GeluRule, ...] = (
    GeluRule("tanh formula", "tanh", 0.5 * x * (1 + tanh(TANH_ARG))),
    GeluRule("tanh formula as sigmoid", "tanh", x * sigmoid(2 * TANH_ARG)),
    GeluRule("erf formula", "exact", 0.5 * x * (1 + erf(x * INV_SQRT_2))),
    GeluRule("erfc formula", "exact", 0.5 * x * erfc(-x * INV_SQRT_2)),
    GeluRule("x*ndtr(x)", "exact", x * ndtr(x)),
    GeluRule("QuickGELU x*sigmoid(1.702x)", "quick", x * sigmoid(QUICK_ALPHA * x)),
)


def close(a: float, b: float) -> bool:
    """Literal equality within LITERAL_RTOL."""
    return math.isclose(a, b, rel_tol=LITERAL_RTOL, abs_tol=1e-12)


T = TypeVar("T")


def _pairs_up(left: Sequence[T], right: Sequence[T], same: Callable[[T, T], bool]) -> bool:
    """Whether the two sequences can be paired one to one so that every pair is `same`."""
    if len(left) != len(right):
        return False
    if not left:
        return True
    head, rest = left[0], left[1:]
    for i, candidate in enumerate(right):
        if same(head, candidate) and _pairs_up(rest, right[:i] + right[i + 1:], same):
            return True
    return False


def _same_atom(p: object, e: object) -> bool:
    if isinstance(p, Leaf) and isinstance(e, Leaf):
        return True  # both sides have exactly one leaf (checked in match_rule)
    if isinstance(p, Fn) and isinstance(e, Fn):
        return p.name == e.name and same_form(p.arg, e.arg)
    return False


def same_form(pattern: Poly, expr: Poly) -> bool:
    """Equal polynomials, literals within tolerance (terms and factors in any order)."""
    return _pairs_up(pattern.terms, expr.terms,
                     lambda p, e: close(p[1], e[1]) and _pairs_up(p[0], e[0], _same_atom))


def match_rule(form: Poly) -> tuple[GeluRule, fx.Node] | None:
    """The rule whose formula `form` computes, and the node that plays `x`; else None."""
    if not form.has_function():
        return None
    leaves = form.leaves()
    if len(leaves) != 1:
        return None
    (node,) = leaves
    if not isinstance(node, fx.Node):
        return None
    for rule in RULES:
        if same_form(rule.formula, form):
            return rule, node
    return None
