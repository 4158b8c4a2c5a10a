"""ONNX nodes → expression trees that a GELU formula can be matched against.

Products and sums are flattened into unordered argument lists and their constants folded,
`Div(a, c)` becomes `a·(1/c)`, `Sub(a, c)` becomes `a + (−c)`, `Sub(c, b)` becomes
`c + (−1)·b` and `Neg(a)` becomes `(−1)·a`, `Pow(a, 2|3)` a product,
and float `Cast`/`Identity` nodes are transparent. Only single-use intermediates are
expanded: a tensor with another user, or that is a graph output, is a leaf, so a formula
that needs it to be an intermediate cannot match and is never rewritten.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx

# LITERAL_RTOL is the fx level's too; literals stored in fp16/bf16 also get one ulp.
from export_gelu.passes.gelu_constants import LITERAL_RTOL  # noqa: E402
from export_gelu.passes.onnx.view import DEFAULT_DOMAINS, FLOAT_TYPES, GraphView

#: The deepest and largest trees built from one root (a GELU spans at most ~12 nodes).
MAX_DEPTH = 12
MAX_NODES = 32

_FUNCS = {"Tanh": "tanh", "Erf": "erf", "Sigmoid": "sigmoid"}
_T = onnx.TensorProto
#: Casts that change no value (so a tensor and its cast are the same variable).
_EXACT_UPCASTS = {(_T.FLOAT16, _T.FLOAT), (_T.FLOAT16, _T.DOUBLE), (_T.BFLOAT16, _T.FLOAT),
                  (_T.BFLOAT16, _T.DOUBLE), (_T.FLOAT, _T.DOUBLE)}


@dataclass(frozen=True)
class Leaf:
    """A tensor the tree does not look into; `key` identifies equal values (exact up-casts)."""

    tensor: str
    key: str


@dataclass(frozen=True)
class Const:
    """A folded scalar literal and the relative error it may carry (its dtype's rounding)."""

    value: float
    rtol: float = LITERAL_RTOL
    integral: bool = False


@dataclass(frozen=True)
class Op:
    kind: str  # mul | add | tanh | erf | sigmoid
    args: tuple[Expr, ...]


Expr = Leaf | Const | Op

#: −1 as `Neg` and `c − b` contribute it: exact, so it adds nothing to a folded literal's rtol.
MINUS_ONE = Const(-1.0, 0.0, True)


@dataclass
class Tree:
    """An expression tree and what it spans in the graph."""

    expr: Expr
    nodes: list[str] = field(default_factory=list)  # expanded nodes, root first
    features: set[str] = field(default_factory=set)  # "Pow", "Constant nodes", "Cast", ...


def _literal_rtol(arr: np.ndarray) -> float:
    if arr.dtype.kind != "f":
        return LITERAL_RTOL
    return max(LITERAL_RTOL, float(np.finfo(arr.dtype).eps)) if arr.dtype.itemsize < 4 \
        else LITERAL_RTOL


def _cast_to(node: onnx.NodeProto) -> int:
    return next((a.i for a in node.attribute if a.name == "to"), 0)


class TreeBuilder:
    """Builds trees over one graph view; `build(node)` starts at a candidate root."""

    def __init__(self, view: GraphView) -> None:
        self.view = view

    # -- leaves -------------------------------------------------------------------------
    def leaf_key(self, tensor: str) -> str:
        """The tensor an exact up-cast (fp16→fp32 …) or Identity chain starts from."""
        seen = 0
        while seen < 8:
            node = self.view.producer.get(tensor)
            if node is None or node.domain not in DEFAULT_DOMAINS:
                return tensor
            if node.op_type == "Identity":
                tensor = node.input[0]
            elif node.op_type == "Cast" and self._is_exact_upcast(node):
                tensor = node.input[0]
            else:
                return tensor
            seen += 1
        return tensor

    def _is_exact_upcast(self, node: onnx.NodeProto) -> bool:
        src = self.view.type(node.input[0])
        return src is not None and (src.elem_type, _cast_to(node)) in _EXACT_UPCASTS

    def _const(self, tensor: str, tree: Tree) -> Const | None:
        arr = self.view.constant(tensor)
        if arr is None or arr.size != 1 or arr.dtype.kind not in "fiu":
            return None
        producer = self.view.producer.get(tensor)
        if producer is not None and producer.op_type == "Constant":
            tree.features.add("Constant nodes")
        value = float(arr.reshape(()))
        return Const(value, _literal_rtol(arr), arr.dtype.kind in "iu" or value.is_integer())

    # -- trees --------------------------------------------------------------------------
    def build(self, root: onnx.NodeProto) -> Tree:
        tree = Tree(Leaf("", ""))
        tree.expr = self._node_expr(root, tree, 0) or Leaf(root.output[0], root.output[0])
        return tree

    def _tensor(self, tensor: str, tree: Tree, depth: int) -> Expr:
        const = self._const(tensor, tree)
        if const is not None:
            return const
        leaf = Leaf(tensor, self.leaf_key(tensor))
        node = self.view.producer.get(tensor)
        if (node is None or depth >= MAX_DEPTH or len(tree.nodes) >= MAX_NODES
                or self.view.users(tensor) != 1 or len(node.output) != 1):
            return leaf
        return self._node_expr(node, tree, depth + 1) or leaf

    def _node_expr(self, node: onnx.NodeProto, tree: Tree, depth: int) -> Expr | None:
        """The node as an expression, or None when it is not one the formulas use."""
        if node.domain not in DEFAULT_DOMAINS:
            return None
        op, ins = node.op_type, list(node.input)
        if op in ("Mul", "Add") and len(ins) == 2:
            tree.nodes.append(node.name)
            args = tuple(self._tensor(t, tree, depth) for t in ins)
            return product(args) if op == "Mul" else total(args)
        if op == "Neg" and len(ins) == 1:
            tree.nodes.append(node.name)
            return product((self._tensor(ins[0], tree, depth), MINUS_ONE))
        if op in ("Div", "Sub") and len(ins) == 2:
            const = self._const(ins[1], tree)
            if const is None and op == "Sub":  # c − b, as ONNX writes erfc(u) = 1 − erf(u)
                first = self._const(ins[0], tree)
                if first is None:
                    return None
                tree.nodes.append(node.name)
                return total((first, product((self._tensor(ins[1], tree, depth), MINUS_ONE))))
            if const is None or (op == "Div" and const.value == 0.0):
                return None
            tree.nodes.append(node.name)
            a = self._tensor(ins[0], tree, depth)
            if op == "Div":
                tree.features.add("Div")
                return product((a, Const(1.0 / const.value, const.rtol)))
            return total((a, Const(-const.value, const.rtol)))
        if op == "Pow" and len(ins) == 2:
            exponent = self._const(ins[1], tree)
            if exponent is None or exponent.value not in (2.0, 3.0):
                return None
            tree.nodes.append(node.name)
            tree.features.add("Pow")
            base = self._tensor(ins[0], tree, depth)
            return product((base,) * int(exponent.value))
        if op in _FUNCS and len(ins) == 1:
            tree.nodes.append(node.name)
            return Op(_FUNCS[op], (self._tensor(ins[0], tree, depth),))
        if op in ("Cast", "Identity") and len(ins) == 1:
            if op == "Cast":
                src = self.view.type(ins[0])
                if _cast_to(node) not in FLOAT_TYPES or src is None \
                        or src.elem_type not in FLOAT_TYPES:
                    return None
                tree.features.add("Cast")
            tree.nodes.append(node.name)
            return self._tensor(ins[0], tree, depth)
        return None


def _fold(kind: str, args: tuple[Expr, ...]) -> Expr:
    flat: list[Expr] = []
    consts: list[Const] = []
    for a in args:
        parts = a.args if isinstance(a, Op) and a.kind == kind else (a,)
        for p in parts:
            (consts if isinstance(p, Const) else flat).append(p)  # type: ignore[arg-type]
    if consts:
        if kind == "mul":
            value = math.prod(c.value for c in consts)
        else:
            value = math.fsum(c.value for c in consts)
        rtol = sum(c.rtol for c in consts) if len(consts) > 1 else consts[0].rtol
        neutral = 1.0 if kind == "mul" else 0.0
        if value != neutral or not flat:
            flat.append(Const(value, rtol, all(c.integral for c in consts)))
    if len(flat) == 1:
        return flat[0]
    return Op(kind, tuple(flat))


def product(args: tuple[Expr, ...]) -> Expr:
    """The flattened product of `args`, constants folded."""
    return _fold("mul", args)


def total(args: tuple[Expr, ...]) -> Expr:
    """The flattened sum of `args`, constants folded."""
    return _fold("add", args)
