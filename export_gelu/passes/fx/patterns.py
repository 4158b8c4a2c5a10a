"""The fx level's GELU rules, derived from the formula catalogue (`passes/gelu_catalogue.py`).

Each catalogue entry is read into the polynomial algebra of `expr.py`. The matched graph is
brought to the same canonical form, so one rule covers every operand order, bracketing,
distribution and cube spelling: GPT-2's `gelu_new`, `gelu_accurate`, `gelu_fast`, Bloom and
Megatron are all the one `tanh formula` (see docs/gelu.md). Literals are compared with a
relative tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

from torch import fx

from export_gelu.passes import gelu_catalogue as catalogue
from export_gelu.passes.fx.expr import Fn, Leaf, Poly, apply
from export_gelu.passes.gelu_constants import (  # noqa: F401 - re-exported
    INV_SQRT_2,
    LITERAL_RTOL,
    QUICK_ALPHA,
    SQRT_2_OVER_PI,
    TANH_BETA,
)


class PolyAlgebra(catalogue.Algebra[Poly]):
    """Catalogue formulas as canonical polynomials over the variable `x`."""

    def var(self) -> Poly:
        return Poly.var("x")

    def const(self, value: float) -> Poly:
        return Poly.const(value)

    def add(self, a: Poly, b: Poly) -> Poly:
        return a + b

    def mul(self, a: Poly, b: Poly) -> Poly:
        return a * b

    def fn(self, name: str, a: Poly) -> Poly:
        return apply(name, a)

    def div(self, a: Poly, divisor: float) -> Poly:
        return a / divisor

    def pow(self, a: Poly, exponent: int) -> Poly:
        return a**exponent


GeluRule = catalogue.GeluRule[Poly]


def _derive(entries: tuple[catalogue.Spelling, ...]) -> tuple[GeluRule, ...]:
    """One rule per distinct polynomial: spellings of one formula collapse into the first."""
    algebra = PolyAlgebra()
    found: list[GeluRule] = []
    for e in entries:
        poly = catalogue.evaluate(e.math, algebra)
        if not any(r.kind == e.kind and same_form(r.formula, poly) for r in found):
            found.append(GeluRule(e.formula, e.kind, poly))
    return tuple(found)


_RULES = catalogue.Derived(_derive)


def rules() -> tuple[GeluRule, ...]:
    """The rules, derived from the catalogue as it stands."""
    return _RULES.get()


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
        if same(head, candidate) and _pairs_up(rest, [*right[:i], *right[i + 1:]], same):
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
    for rule in rules():
        if same_form(rule.formula, form):
            return rule, node
    return None


RULES: tuple[GeluRule, ...] = rules()
