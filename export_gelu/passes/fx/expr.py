"""Canonical forms of fx arithmetic: every node as a polynomial over atoms.

An atom is a leaf value (an fx node the form does not look into) or one of the functions
a GELU is written with (tanh, erf, erfc, sigmoid, ndtr) applied to a polynomial. Products
are expanded, like terms collected and constants folded, so `0.5*x*(1+t)`, `x*0.5*(…)`,
`x*(0.5+0.5*t)`, `(x+x*t)/2`, `pow(x,3)`, `x**3.0` and `x*x*x` all reach one form.

A node with more than one user is a leaf: its value is shared, so a formula whose
intermediate is used elsewhere can never match (rewriting it would orphan that user).
The same algebra builds the patterns (`patterns.py`), so a rule is written as its math.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast

import torch
from torch import fx

aten = torch.ops.aten

#: A form with more terms than this is opaque (a leaf): GELU formulas have at most four.
MAX_TERMS = 16


@dataclass(frozen=True)
class Var:
    """A pattern variable (the `x` a formula is written over)."""

    name: str = "x"


@dataclass(frozen=True)
class Leaf:
    """A value the form does not look into: an fx node, or a pattern `Var`."""

    ref: fx.Node | Var

    @property
    def key(self) -> str:
        return f"0:{self.ref.name}"


@dataclass(frozen=True)
class Fn:
    """A GELU building-block function applied to a polynomial."""

    name: str  # tanh | erf | erfc | sigmoid | ndtr
    arg: Poly

    @property
    def key(self) -> str:
        return f"1:{self.name}({self.arg.key})"


Atom = Leaf | Fn
Monomial = tuple[Atom, ...]  # sorted by key; a power repeats its atom


def _number_math(name: str) -> Callable[[float], float]:
    return {
        "tanh": math.tanh, "erf": math.erf, "erfc": math.erfc,
        "sigmoid": lambda v: 1.0 / (1.0 + math.exp(-v)),
        "ndtr": lambda v: 0.5 * math.erfc(-v / math.sqrt(2.0)),
        "sqrt": math.sqrt, "rsqrt": lambda v: 1.0 / math.sqrt(v),
        "reciprocal": lambda v: 1.0 / v, "exp": math.exp, "log": math.log,
    }[name]


@dataclass(frozen=True)
class Poly:
    """A sum of coefficient × monomial terms; the empty monomial is the constant term."""

    terms: tuple[tuple[Monomial, float], ...]

    # -- construction -------------------------------------------------------------------
    @staticmethod
    def const(value: float) -> Poly:
        return Poly(((((), float(value)),)) if value != 0.0 else ())

    @staticmethod
    def atom(atom: Atom) -> Poly:
        return Poly((((atom,), 1.0),))

    @staticmethod
    def var(name: str = "x") -> Poly:
        return Poly.atom(Leaf(Var(name)))

    @staticmethod
    def _collect(pairs: Iterator[tuple[Monomial, float]]) -> Poly:
        acc: dict[Monomial, float] = {}
        for mono, coef in pairs:
            acc[mono] = acc.get(mono, 0.0) + coef
        terms = tuple(sorted(((m, c) for m, c in acc.items() if c != 0.0),
                             key=lambda t: _mono_key(t[0])))
        if len(terms) > MAX_TERMS:
            raise TooLarge
        return Poly(terms)

    # -- algebra (patterns are written with these operators) -----------------------------
    def __add__(self, other: Poly | float) -> Poly:
        other = _lift(other)
        return Poly._collect(iter(self.terms + other.terms))

    __radd__ = __add__

    def __mul__(self, other: Poly | float) -> Poly:
        other = _lift(other)
        return Poly._collect(
            (tuple(sorted(m1 + m2, key=lambda a: a.key)), c1 * c2)
            for m1, c1 in self.terms for m2, c2 in other.terms)

    __rmul__ = __mul__

    def __neg__(self) -> Poly:
        return self * -1.0

    def __sub__(self, other: Poly | float) -> Poly:
        return self + (-_lift(other))

    def __rsub__(self, other: Poly | float) -> Poly:
        return _lift(other) + (-self)

    def __truediv__(self, other: float) -> Poly:
        return self * (1.0 / other)

    def __pow__(self, exponent: int) -> Poly:
        out = Poly.const(1.0)
        for _ in range(exponent):
            out = out * self
        return out

    # -- inspection ---------------------------------------------------------------------
    @property
    def constant(self) -> float | None:
        """The value when the polynomial is a constant, else None."""
        if not self.terms:
            return 0.0
        if len(self.terms) == 1 and self.terms[0][0] == ():
            return self.terms[0][1]
        return None

    @property
    def key(self) -> str:
        return "+".join(f"{c!r}*{_mono_key(m)}" for m, c in self.terms)

    def atoms(self) -> Iterator[Atom]:
        """Every atom, nested ones included."""
        for mono, _c in self.terms:
            for atom in mono:
                yield atom
                if isinstance(atom, Fn):
                    yield from atom.arg.atoms()

    def leaves(self) -> set[fx.Node | Var]:
        return {a.ref for a in self.atoms() if isinstance(a, Leaf)}

    def has_function(self) -> bool:
        return any(isinstance(a, Fn) for a in self.atoms())


def _mono_key(mono: Monomial) -> str:
    return "*".join(a.key for a in mono)


def _lift(value: Poly | float) -> Poly:
    return value if isinstance(value, Poly) else Poly.const(float(value))


class TooLarge(Exception):
    """A form grew past MAX_TERMS: treat the node as opaque."""


def apply(name: str, arg: Poly) -> Poly:
    """`name(arg)`: folded when `arg` is constant, an `Fn` atom otherwise."""
    value = arg.constant
    if value is not None:
        return Poly.const(_number_math(name)(value))
    return Poly.atom(Fn(name, arg))


# -- fx nodes → polynomials ---------------------------------------------------------------

_MUL = {aten.mul.Tensor, aten.mul.Scalar}
_ADD = {aten.add.Tensor, aten.add.Scalar}
_SUB = {aten.sub.Tensor, aten.sub.Scalar}
_RSUB = {aten.rsub.Tensor, aten.rsub.Scalar}
_DIV = {aten.div.Tensor, aten.div.Scalar}
_POW = {aten.pow.Tensor_Scalar}
#: Functions a GELU is written with: they become atoms.
FUNCTIONS = {aten.tanh.default: "tanh", aten.erf.default: "erf", aten.special_erf.default: "erf",
             aten.erfc.default: "erfc", aten.sigmoid.default: "sigmoid",
             aten.special_ndtr.default: "ndtr"}
#: Functions folded when their argument is a constant (e.g. `sqrt(tensor(2.0))`); else opaque.
CONSTANT_ONLY = {aten.sqrt.default: "sqrt", aten.rsqrt.default: "rsqrt",
                 aten.reciprocal.default: "reciprocal", aten.exp.default: "exp",
                 aten.log.default: "log"}
ARITHMETIC = _MUL | _ADD | _SUB | _RSUB | _DIV | _POW | {aten.neg.default, aten.square.default}

Scalars = dict[fx.Node, float]


class FormBuilder:
    """Builds (and caches) the polynomial of each node of one graph."""

    def __init__(self, scalars: Scalars | None = None) -> None:
        self.scalars: Scalars = dict(scalars or {})
        self._cache: dict[fx.Node, Poly] = {}

    def form(self, node: fx.Node) -> Poly:
        """The node's own form (it is the root, so its user count does not matter)."""
        if node not in self._cache:
            try:
                poly = self._build(node)
            except (TooLarge, ValueError, OverflowError, ZeroDivisionError, RecursionError):
                poly = None
            self._cache[node] = poly if poly is not None else Poly.atom(Leaf(node))
        return self._cache[node]

    def _operand(self, arg: object) -> Poly:
        """The form of an argument as seen from its user: shared nodes are leaves."""
        if isinstance(arg, bool):
            raise ValueError("boolean operand")
        if isinstance(arg, (int, float)):
            return Poly.const(float(arg))
        if isinstance(arg, fx.Node):
            if arg in self.scalars:
                return Poly.const(self.scalars[arg])
            if len(arg.users) == 1:
                return self.form(arg)
            return Poly.atom(Leaf(arg))
        raise ValueError(f"unsupported operand {arg!r}")

    def _alpha(self, node: fx.Node) -> float:
        alpha = node.kwargs.get("alpha", 1)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
            raise ValueError("symbolic alpha")
        return float(alpha)

    def _build(self, node: fx.Node) -> Poly | None:
        if node.op != "call_function":
            return None
        t, args = node.target, node.args
        if t in _MUL:
            return self._operand(args[0]) * self._operand(args[1])
        if t in _ADD:
            return self._operand(args[0]) + self._alpha(node) * self._operand(args[1])
        if t in _SUB:
            return self._operand(args[0]) - self._alpha(node) * self._operand(args[1])
        if t in _RSUB:
            return self._operand(args[1]) - self._alpha(node) * self._operand(args[0])
        if t is aten.neg.default:
            return -self._operand(args[0])
        if t is aten.square.default:
            return self._operand(args[0]) ** 2
        if t in _DIV:
            divisor = self._operand(args[1]).constant
            if divisor is None or divisor == 0.0 or node.kwargs.get("rounding_mode") is not None:
                return None
            return self._operand(args[0]) / divisor
        if t in _POW:
            exponent = args[1]
            if isinstance(exponent, bool) or exponent not in (0, 1, 2, 3, 4):
                return None
            return self._operand(args[0]) ** int(cast(float, exponent))  # one of 0..4
        if t in FUNCTIONS:
            return apply(FUNCTIONS[t], self._operand(args[0]))
        if t in CONSTANT_ONLY:
            arg = self._operand(args[0])
            return apply(CONSTANT_ONLY[t], arg) if arg.constant is not None else None
        return None


__all__ = ["Poly", "Leaf", "Fn", "Var", "FormBuilder", "apply", "ARITHMETIC", "FUNCTIONS",
           "MAX_TERMS", "Scalars"]
