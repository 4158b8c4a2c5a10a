"""Every GELU formula the passes recognise, each written once, as math.

An entry is a formula over one variable `x`, written with ordinary operators
(`0.5 * x * (1 + erf(x * INV_SQRT_2))`). It is not tied to a level: `evaluate()` reads it into
any `Algebra`, and each pass level derives its matcher from that reading:

- the fx level (`passes/fx/patterns.py`) reads it as an expanded polynomial, so spellings that
  differ only by bracketing, distribution or operand order become one rule there;
- the ONNX level (`passes/onnx/formulas.py`) reads it as an order-free expression tree (sums
  and products flattened, constants folded), so each structurally different spelling is its
  own rule there;
- the tests read it as torch code and as ONNX nodes, to show both levels find every entry.

Adding a spelling is adding one `Spelling` to `ENTRIES`.

ONNX has no `Erfc` and no `Ndtr` op: a graph can only hold those functions written out with
`Erf` (the dynamo exporter writes `torch.erfc(u)` as `Sub(1, Erf(u))` and `ndtr(u)` as
`0.5·(1 + Erf(u·(1/√2)))`). An algebra that lacks a function gets it through `IDENTITIES`,
so the ONNX level matches those written-out forms. `x·ndtr(x)` written out is then the erf
formula itself, found under that name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

from export_gelu.passes.gelu_constants import INV_SQRT_2, QUICK_ALPHA, SQRT_2_OVER_PI, TANH_BETA

T = TypeVar("T")

#: The functions a GELU formula is written with.
FUNCTIONS = ("tanh", "erf", "erfc", "sigmoid", "ndtr")


@dataclass(frozen=True)
class Math:
    """A formula: `op` is x | const | add | mul | neg | div | pow | one of FUNCTIONS."""

    op: str
    args: tuple[Math, ...] = ()
    value: float = 0.0  # const: the number; div: the divisor; pow: the exponent

    def __add__(self, other: Math | float) -> Math:
        return Math("add", (self, _lift(other)))

    def __radd__(self, other: float) -> Math:
        return Math("add", (_lift(other), self))

    def __mul__(self, other: Math | float) -> Math:
        return Math("mul", (self, _lift(other)))

    def __rmul__(self, other: float) -> Math:
        return Math("mul", (_lift(other), self))

    def __neg__(self) -> Math:
        return Math("neg", (self,))

    def __sub__(self, other: Math | float) -> Math:
        return self + (-_lift(other))

    def __rsub__(self, other: float) -> Math:
        return _lift(other) + (-self)

    def __truediv__(self, divisor: float) -> Math:
        return Math("div", (self,), float(divisor))

    def __pow__(self, exponent: int) -> Math:
        return Math("pow", (self,), float(exponent))


def _lift(value: Math | float) -> Math:
    return value if isinstance(value, Math) else Math("const", (), float(value))


x = Math("x")


def tanh(a: Math) -> Math:
    return Math("tanh", (a,))


def erf(a: Math) -> Math:
    return Math("erf", (a,))


def erfc(a: Math) -> Math:
    return Math("erfc", (a,))


def sigmoid(a: Math) -> Math:
    return Math("sigmoid", (a,))


def ndtr(a: Math) -> Math:
    return Math("ndtr", (a,))


#: How a function is written with the others, for an algebra that lacks it.
IDENTITIES: dict[str, Callable[[Math], Math]] = {
    "erfc": lambda u: 1 - erf(u),
    "ndtr": lambda u: 0.5 * (1 + erf(u * INV_SQRT_2)),
}


class Algebra(Generic[T]):
    """How one level builds values: override what it has natively (`functions` lists the
    GELU functions it has; the others are read through IDENTITIES)."""

    functions: frozenset[str] = frozenset(FUNCTIONS)

    def var(self) -> T:
        raise NotImplementedError

    def const(self, value: float) -> T:
        raise NotImplementedError

    def add(self, a: T, b: T) -> T:
        raise NotImplementedError

    def mul(self, a: T, b: T) -> T:
        raise NotImplementedError

    def fn(self, name: str, a: T) -> T:
        raise NotImplementedError

    def neg(self, a: T) -> T:
        return self.mul(self.const(-1.0), a)

    def div(self, a: T, divisor: float) -> T:
        return self.mul(a, self.const(1.0 / divisor))

    def pow(self, a: T, exponent: int) -> T:
        out = a
        for _ in range(exponent - 1):
            out = self.mul(out, a)
        return out


def evaluate(formula: Math, algebra: Algebra[T]) -> T:
    """The formula read into `algebra`."""
    op, args = formula.op, formula.args
    if op == "x":
        return algebra.var()
    if op == "const":
        return algebra.const(formula.value)
    if op in FUNCTIONS and op not in algebra.functions:
        return evaluate(IDENTITIES[op](args[0]), algebra)
    vals = [evaluate(a, algebra) for a in args]
    if op == "add":
        return algebra.add(vals[0], vals[1])
    if op == "mul":
        return algebra.mul(vals[0], vals[1])
    if op == "neg":
        return algebra.neg(vals[0])
    if op == "div":
        return algebra.div(vals[0], formula.value)
    if op == "pow":
        return algebra.pow(vals[0], int(formula.value))
    if op in FUNCTIONS:
        return algebra.fn(op, vals[0])
    raise ValueError(f"unknown operation {op!r}")


@dataclass(frozen=True)
class Spelling:
    """One way a GELU of kind `kind` (exact | tanh | quick) is written.

    `name` is what the ONNX level reports for it; `formula` names the function it computes up
    to algebra, which is what the fx level reports (spellings of one formula are one
    polynomial there).
    """

    name: str
    kind: str
    formula: str
    math: Math


C = SQRT_2_OVER_PI
B = TANH_BETA

#: The catalogue, in the order the ONNX level tries it (first match wins).
ENTRIES: tuple[Spelling, ...] = (
    Spelling("erf formula 0.5·x·(1+erf(x/√2))", "exact", "erf formula",
             0.5 * x * (1 + erf(x * INV_SQRT_2))),
    Spelling("tanh formula 0.5·x·(1+tanh(√(2/π)·(x+0.044715·x³)))", "tanh", "tanh formula",
             0.5 * x * (1 + tanh(C * (x + B * x**3)))),
    Spelling("tanh formula, factored (gelu_fast / Megatron / Bloom)", "tanh", "tanh formula",
             0.5 * x * (1 + tanh(C * x * (1 + B * x * x)))),
    Spelling("tanh formula, distributed √(2/π)·x + 0.0356774·x³", "tanh", "tanh formula",
             0.5 * x * (1 + tanh(C * x + C * B * x**3))),
    Spelling("tanh formula, factored and distributed x·(√(2/π) + 0.0356774·x²)", "tanh",
             "tanh formula", 0.5 * x * (1 + tanh(x * (C + C * B * x * x)))),
    Spelling("tanh formula as sigmoid x·σ(2√(2/π)·(x+0.044715·x³))", "tanh",
             "tanh formula as sigmoid", x * sigmoid(2 * C * (x + B * x**3))),
    Spelling("QuickGELU x·σ(1.702·x)", "quick", "QuickGELU x*sigmoid(1.702x)",
             x * sigmoid(QUICK_ALPHA * x)),
    Spelling("erfc formula 0.5·x·erfc(−x/√2)", "exact", "erfc formula",
             0.5 * x * erfc(-x * INV_SQRT_2)),
    Spelling("x·ndtr(x)", "exact", "x*ndtr(x)", x * ndtr(x)),
)


@dataclass(frozen=True)
class GeluRule(Generic[T]):
    """A formula that computes a GELU of kind `kind` (exact | tanh | quick), as one level's
    algebra holds it (a polynomial at the fx level, a tree at the ONNX level)."""

    name: str
    kind: str
    formula: T


class Derived(Generic[T]):
    """A level's rules derived from ENTRIES, re-derived when ENTRIES is replaced."""

    def __init__(self, derive: Callable[[tuple[Spelling, ...]], T]) -> None:
        self._derive = derive
        self._from: tuple[Spelling, ...] | None = None
        self._rules: T | None = None

    def get(self) -> T:
        entries = ENTRIES  # looked up on each call: a test may extend it at run time
        if entries is not self._from:
            self._rules, self._from = self._derive(entries), entries
        return cast(T, self._rules)  # set just above, or on an earlier call

