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
import onnx_graphsurgeon as gs

from export_gelu import graph as G

# LITERAL_RTOL is the fx level's too; literals stored in fp16/bf16 also get one ulp.
from export_gelu.passes.gelu_constants import LITERAL_RTOL  # noqa: E402

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

    tensor: gs.Tensor | None = field(compare=False)
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
    nodes: list[gs.Node] = field(default_factory=list)  # expanded nodes, root first
    features: set[str] = field(default_factory=set)  # "Pow", "Constant nodes", "Cast", ...


def _literal_rtol(arr: np.ndarray) -> float:
    if arr.dtype.kind != "f":
        return LITERAL_RTOL
    return max(LITERAL_RTOL, float(np.finfo(arr.dtype).eps)) if arr.dtype.itemsize < 4 \
        else LITERAL_RTOL


# -- leaves ---------------------------------------------------------------------------------

def _is_exact_upcast(graph: gs.Graph, node: gs.Node) -> bool:
    src = G.type_of(graph, node.inputs[0])
    return src is not None and (src.elem_type, int(node.attrs.get("to", 0))) in _EXACT_UPCASTS


def leaf_key(graph: gs.Graph, tensor: gs.Tensor) -> str:
    """The tensor an exact up-cast (fp16→fp32 …) or Identity chain starts from."""
    seen = 0
    while seen < 8:
        node = G.producer(tensor)
        if node is None or not G.is_default(node) or not node.inputs:
            return tensor.name
        if node.op == "Identity" or (node.op == "Cast" and _is_exact_upcast(graph, node)):
            tensor = node.inputs[0]
        else:
            return tensor.name
        seen += 1
    return tensor.name


def _const(graph: gs.Graph, tensor: gs.Tensor, tree: Tree) -> Const | None:
    arr = G.literal(graph, tensor)
    if arr is None or arr.size != 1 or arr.dtype.kind not in "fiu":
        return None
    if G.constant_node(tensor) is not None:
        tree.features.add("Constant nodes")
    number = float(arr.reshape(()))
    return Const(number, _literal_rtol(arr), arr.dtype.kind in "iu" or number.is_integer())


# -- trees ----------------------------------------------------------------------------------

def build_tree(graph: gs.Graph, root: gs.Node) -> Tree:
    """The expression `root` computes, expanded through single-use intermediates."""
    tree = Tree(Leaf(None, ""))
    out = root.outputs[0]
    tree.expr = _node_expr(graph, root, tree, 0) or Leaf(out, out.name)
    return tree


def _tensor(graph: gs.Graph, tensor: gs.Tensor, tree: Tree, depth: int) -> Expr:
    const = _const(graph, tensor, tree)
    if const is not None:
        return const
    leaf = Leaf(tensor, leaf_key(graph, tensor))
    node = G.producer(tensor)
    if (node is None or depth >= MAX_DEPTH or len(tree.nodes) >= MAX_NODES
            or G.users(graph, tensor) != 1 or len(node.outputs) != 1):
        return leaf
    return _node_expr(graph, node, tree, depth + 1) or leaf


def _node_expr(graph: gs.Graph, node: gs.Node, tree: Tree, depth: int) -> Expr | None:
    """The node as an expression, or None when it is not one the formulas use."""
    if not G.is_default(node):
        return None
    op, ins = node.op, list(node.inputs)
    if any(t.is_empty() for t in ins):
        return None
    if op in ("Mul", "Add") and len(ins) == 2:
        tree.nodes.append(node)
        args = tuple(_tensor(graph, t, tree, depth) for t in ins)
        return product(args) if op == "Mul" else total(args)
    if op == "Neg" and len(ins) == 1:
        tree.nodes.append(node)
        return product((_tensor(graph, ins[0], tree, depth), MINUS_ONE))
    if op in ("Div", "Sub") and len(ins) == 2:
        const = _const(graph, ins[1], tree)
        if const is None and op == "Sub":  # c − b, as ONNX writes erfc(u) = 1 − erf(u)
            first = _const(graph, ins[0], tree)
            if first is None:
                return None
            tree.nodes.append(node)
            return total((first, product((_tensor(graph, ins[1], tree, depth), MINUS_ONE))))
        if const is None or (op == "Div" and const.value == 0.0):
            return None
        tree.nodes.append(node)
        a = _tensor(graph, ins[0], tree, depth)
        if op == "Div":
            tree.features.add("Div")
            return product((a, Const(1.0 / const.value, const.rtol)))
        return total((a, Const(-const.value, const.rtol)))
    if op == "Pow" and len(ins) == 2:
        exponent = _const(graph, ins[1], tree)
        if exponent is None or exponent.value not in (2.0, 3.0):
            return None
        tree.nodes.append(node)
        tree.features.add("Pow")
        base = _tensor(graph, ins[0], tree, depth)
        return product((base,) * int(exponent.value))
    if op in _FUNCS and len(ins) == 1:
        tree.nodes.append(node)
        return Op(_FUNCS[op], (_tensor(graph, ins[0], tree, depth),))
    if op in ("Cast", "Identity") and len(ins) == 1:
        if op == "Cast":
            src = G.type_of(graph, ins[0])
            if int(node.attrs.get("to", 0)) not in G.FLOAT_TYPES or src is None \
                    or src.elem_type not in G.FLOAT_TYPES:
                return None
            tree.features.add("Cast")
        tree.nodes.append(node)
        return _tensor(graph, ins[0], tree, depth)
    return None


def _fold(kind: str, args: tuple[Expr, ...]) -> Expr:
    flat: list[Expr] = []
    consts: list[Const] = []
    for a in args:
        parts = a.args if isinstance(a, Op) and a.kind == kind else (a,)
        for p in parts:
            if isinstance(p, Const):
                consts.append(p)
            else:
                flat.append(p)
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
