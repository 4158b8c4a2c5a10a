"""The ONNX level's GELU rules, derived from the formula catalogue, and a matcher that
ignores operand order.

Each catalogue entry (`passes/gelu_catalogue.py`) is read into the expression-tree algebra of
`expr.py`: products and sums unordered and flattened, constants folded, `Pow(x,3)` and
`x*x*x` the same tree, so one rule covers every operand order and bracketing an exporter or a
hand-written model uses. ONNX has no `Erfc`/`Ndtr` op, so those entries are read through
their `Erf` identities (what the dynamo exporter writes). Literals match within a relative
tolerance (`expr.LITERAL_RTOL`, one ulp for fp16 literals).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

from export_gelu.passes import gelu_catalogue as catalogue
from export_gelu.passes.gelu_constants import (  # noqa: F401 - re-exported
    INV_SQRT_2,
    QUICK_ALPHA,
    SQRT_2_OVER_PI,
    TANH_BETA,
)
from export_gelu.passes.onnx.expr import Const, Expr, Leaf, Op, product, total


@dataclass(frozen=True)
class Var:
    name: str = "x"


Pattern = Var | Const | Op


def _as_exprs(*patterns: Pattern) -> tuple[Expr, ...]:
    """A formula is an expression tree with Var where a tree built from a graph has a Leaf:
    expr's folding (total, product, Op) builds both alike."""
    return cast(tuple[Expr, ...], patterns)


def _pattern_args(pat: Op) -> tuple[Pattern, ...]:
    """A formula's Op holds patterns (Var where an expression holds a Leaf)."""
    return cast(tuple[Pattern, ...], pat.args)


def _as_pattern(expr: Expr) -> Pattern:
    """What `total`/`product` fold from patterns is a pattern (see `_as_exprs`)."""
    return cast(Pattern, expr)


class TreeAlgebra(catalogue.Algebra[Pattern]):
    """Catalogue formulas as the trees `expr.build_tree` builds from ONNX nodes."""

    functions = frozenset(("tanh", "erf", "sigmoid"))  # the ONNX ops of that name

    def var(self) -> Pattern:
        return Var()

    def const(self, value: float) -> Pattern:
        return Const(float(value))

    def add(self, a: Pattern, b: Pattern) -> Pattern:
        return _as_pattern(total(_as_exprs(a, b)))

    def mul(self, a: Pattern, b: Pattern) -> Pattern:
        return _as_pattern(product(_as_exprs(a, b)))

    def fn(self, name: str, a: Pattern) -> Pattern:
        return Op(name, _as_exprs(a))


GeluRule = catalogue.GeluRule[Pattern]


def _key(p: Pattern) -> str:
    """The same text for trees equal up to argument order (literals to 12 digits)."""
    if isinstance(p, Var):
        return p.name
    if isinstance(p, Const):
        return f"{p.value:.12g}"
    args = sorted(_key(a) for a in _pattern_args(p))
    return f"{p.kind}({','.join(args)})"


def _derive(entries: tuple[catalogue.Spelling, ...]) -> tuple[GeluRule, ...]:
    """One rule per distinct tree, in catalogue order (`x·ndtr(x)` written with `Erf` is
    the erf formula's tree, so it is found under that name)."""
    algebra = TreeAlgebra()
    found: dict[str, GeluRule] = {}
    for e in entries:
        tree = catalogue.evaluate(e.math, algebra)
        found.setdefault(_key(tree), GeluRule(e.name, e.kind, tree))
    return tuple(found.values())


_RULES = catalogue.Derived(_derive)


def rules() -> tuple[GeluRule, ...]:
    """The rules, derived from the catalogue as it stands, in its order."""
    return _RULES.get()


#: The ONNX ops a tree of each outermost kind can be rooted at.
_ROOTS_OF = {"mul": ("Mul", "Div"), "add": ("Add", "Sub")}


def root_ops() -> frozenset[str]:
    """The op types a GELU formula's output node can have, by the rules' outermost ops."""
    return frozenset(op for r in rules() if isinstance(r.formula, Op)
                     for op in _ROOTS_OF.get(r.formula.kind, ()))


RULES: tuple[GeluRule, ...] = rules()


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
            yield from _match_seq(_pattern_args(pat), args, bound)
        return
    yield from _match_seq(_pattern_args(pat), expr.args, bound)


def _match_seq(pats: tuple[Pattern, ...], exprs: tuple[Expr, ...],
               bound: dict[str, Leaf]) -> Iterator[dict[str, Leaf]]:
    if not pats:
        yield bound
        return
    for b in _match(pats[0], exprs[0], bound):
        yield from _match_seq(pats[1:], exprs[1:], b)


def match_formula(expr: Expr) -> tuple[GeluRule, Leaf] | None:
    """The first rule that `expr` computes, and the leaf bound to `x`."""
    for rule in rules():
        for binding in _match(rule.formula, expr, {}):
            return rule, binding["x"]
    return None
