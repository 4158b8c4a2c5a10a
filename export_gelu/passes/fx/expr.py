"""Canonical expression trees over fx nodes: the shape a pattern is matched against.

Products and sums are flattened into unordered argument lists (so `0.5*x*(…)`,
`x*0.5*(…)` and `x*(0.5*(…))` are one tree), `a / c` becomes `a * (1/c)`, `pow(a, 3)`
becomes `a*a*a`, and constants inside one product or sum are folded. Flattening stops at
a node with more than one user: that value is shared, so it becomes a leaf, and a formula
whose intermediate is shared can never match.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import fx

aten = torch.ops.aten

_MUL = {aten.mul.Tensor, aten.mul.Scalar}
_ADD = {aten.add.Tensor, aten.add.Scalar}
_DIV = {aten.div.Tensor, aten.div.Scalar}
_POW = {aten.pow.Tensor_Scalar}
UNARY = {aten.tanh.default: "tanh", aten.erf.default: "erf", aten.sigmoid.default: "sigmoid"}


@dataclass(frozen=True)
class Leaf:
    node: fx.Node


@dataclass(frozen=True)
class Const:
    value: float


@dataclass(frozen=True)
class Op:
    kind: str  # mul | add | tanh | erf | sigmoid
    args: tuple[Expr, ...]


Expr = Leaf | Const | Op


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _fold(kind: str, args: list[Expr]) -> Op:
    consts = [a.value for a in args if isinstance(a, Const)]
    rest = [a for a in args if not isinstance(a, Const)]
    if kind == "mul":
        value = math.prod(consts) if consts else 1.0
        if consts and value != 1.0:
            rest.append(Const(value))
    else:
        value = sum(consts) if consts else 0.0
        if consts and value != 0.0:
            rest.append(Const(value))
    return Op(kind, tuple(rest))


Scalars = dict[fx.Node, float]


def _child(arg: object, nodes: set[fx.Node], scalars: Scalars) -> Expr:
    number = _number(arg)
    if number is not None:
        return Const(number)
    if isinstance(arg, fx.Node):
        if arg in scalars:
            return Const(scalars[arg])
        if len(arg.users) == 1:
            return build(arg, nodes, scalars)
        return Leaf(arg)
    raise ValueError(f"unsupported argument {arg!r}")


def build(node: fx.Node, nodes: set[fx.Node] | None = None, scalars: Scalars | None = None
          ) -> Expr:
    """The canonical tree rooted at `node`; `nodes` collects the fx nodes it spans.

    `scalars` maps nodes that hold a one-element constant (lifted tensor constants, as
    TorchScript conversion leaves them) to their value.
    """
    nodes = set() if nodes is None else nodes
    scalars = {} if scalars is None else scalars
    if node.op != "call_function":
        return Leaf(node)
    target = node.target
    try:
        if target in _MUL or target in _ADD:
            if target in _ADD and node.kwargs.get("alpha", 1) != 1:
                return Leaf(node)
            kind = "mul" if target in _MUL else "add"
            flat: list[Expr] = []
            for arg in node.args[:2]:
                child = _child(arg, nodes, scalars)
                if isinstance(child, Op) and child.kind == kind:
                    flat.extend(child.args)
                else:
                    flat.append(child)
            nodes.add(node)
            return _fold(kind, flat)
        if target in _DIV:
            arg1 = node.args[1]
            divisor = scalars.get(arg1) if isinstance(arg1, fx.Node) else _number(arg1)
            if divisor is None or divisor == 0 or node.kwargs.get("rounding_mode") is not None:
                return Leaf(node)
            head = _child(node.args[0], nodes, scalars)
            flat = list(head.args) if isinstance(head, Op) and head.kind == "mul" else [head]
            nodes.add(node)
            return _fold("mul", [*flat, Const(1.0 / divisor)])
        if target in _POW:
            if _number(node.args[1]) != 3.0:
                return Leaf(node)
            base = _child(node.args[0], nodes, scalars)
            nodes.add(node)
            return Op("mul", (base, base, base))
        if target in UNARY:
            child = _child(node.args[0], nodes, scalars)
            nodes.add(node)
            return Op(UNARY[target], (child,))
    except ValueError:
        return Leaf(node)
    return Leaf(node)
