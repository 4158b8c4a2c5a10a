"""Fixes for the records of `trt_parser/restriction_rows_weights.py`, `_reduce.py`,
`_trilu.py`, `_einsum.py`, `_pad.py` and `_limits.py` (contract: see `apply.py`).

- Computed inputs the parser needs as weights (Slice/Squeeze/Unsqueeze/Reduce axes, Split
  sizes, Clip bounds, float Range, TopK K): when the input is constant in fact, its value is
  computed once in ONNX Runtime and stored as an initializer. "Constant in fact" means its cone
  reads initializers and Constant nodes only, or also `Shape`/`Size` of tensors whose shape is
  static in the graph (a Shape → Gather → Unsqueeze chain on static dims). The cone nodes
  nothing else reads are dropped by `fit_restrictions`.
- Trilu of rank > 3 on 8.5: Reshape to [-1, H, W], Trilu, Reshape back.
- Einsum with an ellipsis before 9.0: the ellipsis spelled out in letters (what the 9.0
  parser does itself), when every operand's ellipsis covers the same number of dims.
- Reduce* with an opset-18 axes input on TensorRT < 10 (the axes are ignored): rewritten
  through ReduceSum (whose axes input is honoured) or TopK.
- Pad with an opset-18 axes input before 10.0: full-rank pads instead.
- ScatterND reduction='none' on 10.0–10.8: the attribute dropped (it is the default).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from export_gelu import graph as G
from export_gelu.passes.compat.opset.fold_constant_ops import constant_value
from export_gelu.passes.compat.trt_fixes.registry import fix
from export_gelu.trt_parser.restriction_shared import (
    CONSTANT_INPUTS,
    REDUCE_AXES_INPUT,
    einsum_terms,
    given,
    shape_of,
)
from export_gelu.trt_parser.restrictions import RESTRICTIONS


def static_shape_leaf(graph: gs.Graph) -> Callable[[gs.Node], dict | None]:
    """Shape/Size of a tensor whose shape is static, as known values (a cone leaf)."""

    def dims_of(shape_node: gs.Node) -> tuple | None:
        shape = shape_of(graph, shape_node.inputs[0])
        if shape is None:
            return None
        start = int(shape_node.attrs.get("start", 0))
        end = shape_node.attrs.get("end", None)
        return shape[start:] if end is None else shape[start:int(end)]

    def leaf(node: gs.Node) -> dict[str, np.ndarray] | None:
        if not G.is_default(node):
            return None
        if node.op == "Gather":  # one static dim of a partly symbolic shape
            shape_node = G.producer(node.inputs[0])
            idx = G.value(node.inputs[1])
            if shape_node is None or shape_node.op != "Shape" or idx is None:
                return None
            dims = dims_of(shape_node)
            if dims is None or not all(-len(dims) <= int(i) < len(dims) for i in idx.ravel()):
                return None
            picked = np.array(dims, dtype=object)[idx.astype(np.int64)]
            if not all(isinstance(d, int) for d in np.ravel(picked)):
                return None
            return {node.outputs[0].name: np.asarray(picked.astype(np.int64))}
        if node.op not in ("Shape", "Size"):
            return None
        dims = dims_of(node)
        if dims is None or not all(isinstance(d, int) for d in dims):
            return None
        if node.op == "Size":
            return {node.outputs[0].name: np.array(int(np.prod(dims)), np.int64)}
        return {node.outputs[0].name: np.array(dims, np.int64)}

    return leaf


def known_value(graph: gs.Graph, tensor: gs.Tensor | None) -> np.ndarray | None:
    """The value of `tensor` when it is constant in fact (see the module docstring)."""
    return constant_value(graph, tensor, static_shape_leaf(graph))


Fix = Callable[[gs.Node, gs.Graph], "list[gs.Node] | None"]


def _fold_inputs(indices: tuple[int, ...]) -> Fix:
    def fold(node: gs.Node, graph: gs.Graph) -> list[gs.Node] | None:
        folded: dict[int, gs.Constant] = {}
        for i in indices:
            tensor = given(node, i)
            if tensor is None or G.is_weights(tensor):
                continue
            value = known_value(graph, tensor)
            if value is None:
                return None
            folded[i] = G.constant(graph, value, f"{tensor.name}_folded")
        if not folded:
            return None
        new = G.clone(graph, node)
        for i, const in folded.items():
            G.set_input(new, i, const)
        return [new]

    return fold


for _key, (_indices, _) in CONSTANT_INPUTS.items():
    fix(_key, "folded to initializers (constant in fact)")(_fold_inputs(_indices))


@fix("trilu-rank", "reshaped to 3-D around the Trilu")
def _trilu_3d(node: gs.Node, graph: gs.Graph) -> list[gs.Node] | None:
    x = node.inputs[0]
    shape = shape_of(graph, x)
    if shape is None or len(shape) < 4:
        return None
    base = node.name or node.outputs[0].name

    def const(values: list[int], hint: str) -> gs.Constant:
        return G.constant(graph, np.array(values, np.int64), f"{base}_{hint}")

    nodes: list[gs.Node] = []
    if all(isinstance(d, int) for d in shape):
        to_3d: gs.Tensor = const([-1, shape[-2], shape[-1]], "3d")
        back: gs.Tensor = const(list(shape), "shape")
    else:
        full = G.node(graph, "Shape", [x], base=base)
        hw = G.node(graph, "Slice", [full.outputs[0], const([-2], "m2"), const([len(shape)], "r"),
                                     const([0], "ax")], base=base)
        cat = G.node(graph, "Concat", [const([-1], "m1"), hw.outputs[0]], base=base, axis=0)
        nodes += [full, hw, cat]
        to_3d, back = cat.outputs[0], full.outputs[0]
    flat = G.node(graph, "Reshape", [x, to_3d], base=base)
    tri = G.clone(graph, node)
    tri.name = G.fresh_name(graph, f"{base}/Trilu3d")
    G.set_input(tri, 0, flat.outputs[0])
    out = node.outputs[0]
    G.set_output(tri, 0, G.variable(graph, f"{base}_trilu3d"))
    back_node = G.node(graph, "Reshape", [tri.outputs[0], back], base=base, outputs=[out])
    return [*nodes, flat, tri, back_node]


@fix("einsum-ellipsis", "spelled out without an ellipsis")
def _einsum_letters(node: gs.Node, graph: gs.Graph) -> list[gs.Node] | None:
    eq = node.attrs.get("equation", "")
    eq = eq.decode() if isinstance(eq, bytes) else str(eq)
    terms, out = einsum_terms(eq)
    if len(terms) != len(node.inputs):
        return None
    spans = set()
    for term, tensor in zip(terms, node.inputs):
        if "..." in term:
            shape = shape_of(graph, tensor)
            if shape is None:
                return None
            spans.add(len(shape) - len(term.replace("...", "")))
    if len(spans) != 1 or min(spans) < 0:
        return None  # operands with different ellipsis ranks broadcast: not rewritten
    used = set(eq)
    free = [c for c in "abcdefghijklmnopqrstuvwxyz" if c not in used]
    span = spans.pop()
    if span > len(free):
        return None
    letters = "".join(free[:span])
    if out is None:
        labels = "".join(t.replace("...", "") for t in terms)
        once = sorted(c for c in set(labels) if labels.count(c) == 1)
        out = (letters if any("..." in t for t in terms) else "") + "".join(once)
    new_eq = ",".join(t.replace("...", letters) for t in terms) + "->" + \
        out.replace("...", letters)
    new = G.clone(graph, node)
    new.attrs["equation"] = new_eq
    return [new]


@fix("scatternd-reduction-attribute", "lost the default reduction='none' attribute")
def _scatternd_default(node: gs.Node, graph: gs.Graph) -> list[gs.Node] | None:
    new = G.clone(graph, node)
    new.attrs.pop("reduction", None)
    return [new]


@fix("pad-axes-input", "given full-rank pads instead of an axes input")
def _pad_full_rank(node: gs.Node, graph: gs.Graph) -> list[gs.Node] | None:
    shape = shape_of(graph, node.inputs[0])
    pads = known_value(graph, node.inputs[1])
    axes = known_value(graph, given(node, 3))
    if shape is None or pads is None or axes is None or pads.size != 2 * axes.size:
        return None
    rank, n = len(shape), axes.size
    full = np.zeros(2 * rank, np.int64)
    for j, a in enumerate(int(a) % rank for a in axes.ravel()):
        full[a], full[a + rank] = pads.ravel()[j], pads.ravel()[j + n]
    new = G.clone(graph, node)
    G.set_input(new, 1, G.constant(graph, full, f"{node.inputs[1].name}_full"))
    G.trim_inputs(new, 3)
    return [new]


# -- Reduce* whose opset-18 axes input the parser ignores (< 10.0) --------------------------

def _reduce_through_sum(node: gs.Node, graph: gs.Graph) -> list[gs.Node] | None:
    """The same reduction from ReduceSum(axes input) and TopK(k=1, axis), keepdims=1 inside,
    then Squeeze when the node had keepdims=0."""
    x, op = node.inputs[0], node.op
    shape = shape_of(graph, x)
    axes = known_value(graph, given(node, 1))
    if shape is None or axes is None or op == "ReduceProd":
        return None
    rank = len(shape)
    axes_list = sorted({int(a) % rank for a in axes.ravel()})
    keep = int(node.attrs.get("keepdims", 1))
    base = node.name or node.outputs[0].name
    vt = G.type_of(graph, x)
    if op == "ReduceMean" and (vt is None or not vt.elem_type):
        return None
    if op not in ("ReduceMean", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum",
                  "ReduceLogSumExp", "ReduceMax", "ReduceMin"):
        return None
    axes_c = G.constant(graph, np.array(axes_list, np.int64), f"{base}_axes")
    nodes: list[gs.Node] = []

    def add(op_type: str, *inputs: gs.Tensor, **attrs: Any) -> gs.Tensor:
        n = G.node(graph, op_type, list(inputs), base=base, **attrs)
        nodes.append(n)
        return n.outputs[0]

    def rsum(t: gs.Tensor) -> gs.Tensor:
        return add("ReduceSum", t, axes_c, keepdims=1)

    def extreme(t: gs.Tensor, largest: int) -> gs.Tensor:
        k = G.constant(graph, np.array([1], np.int64), f"{base}_k")
        for a in axes_list:
            n = G.node(graph, "TopK", [t, k], base=base, n_out=2, axis=a, largest=largest,
                       sorted=1)
            nodes.append(n)
            t = n.outputs[0]
        return t

    if op == "ReduceMean":
        dims = [shape[a] for a in axes_list]
        assert vt is not None  # a ReduceMean without a known type returned above
        if all(isinstance(d, int) for d in dims):
            dtype = onnx.helper.tensor_dtype_to_np_dtype(vt.elem_type)
            count: gs.Tensor = G.constant(graph, np.array(np.prod(dims), dtype), f"{base}_n")
        else:  # the count from the run-time shape; ReduceProd without axes reduces all
            picked = add("Gather", add("Shape", x), axes_c)
            count = add("Cast", add("ReduceProd", picked, keepdims=0),
                        to=vt.elem_type)
        y = add("Div", rsum(x), count)
    elif op == "ReduceSumSquare":
        y = rsum(add("Mul", x, x))
    elif op == "ReduceL1":
        y = rsum(add("Abs", x))
    elif op == "ReduceL2":
        y = add("Sqrt", rsum(add("Mul", x, x)))
    elif op == "ReduceLogSum":
        y = add("Log", rsum(x))
    elif op == "ReduceLogSumExp":
        m = extreme(x, 1)
        y = add("Add", add("Log", rsum(add("Exp", add("Sub", x, m)))), m)
    else:
        y = extreme(x, 1 if op == "ReduceMax" else 0)
    out = node.outputs[0]
    last = nodes[-1]
    if keep:
        G.set_output(last, next(i for i, t in enumerate(last.outputs) if t is y), out)
    else:
        nodes.append(G.node(graph, "Squeeze", [y, axes_c], base=base, outputs=[out]))
    return nodes


for _op in REDUCE_AXES_INPUT:
    if _op not in ("ReduceSum", "ReduceProd"):
        fix(f"{_op.lower()}-axes-ignored",
            "rewritten through ReduceSum/TopK, whose axes the parser honours")(
            _reduce_through_sum)


def fold_computed_inputs(graph: gs.Graph) -> int:
    """Fold, on any version, every input of the must-be-weights rows that is computed but
    constant in fact (the down-converter needs such axes/sizes as attributes too). Returns
    the number of inputs folded; the cones nothing else reads are dropped."""
    wanted: dict[str, list[tuple[int, ...]]] = {}
    for r in RESTRICTIONS:
        if r.key in CONSTANT_INPUTS:
            indices, from_opset = CONSTANT_INPUTS[r.key]
            wanted.setdefault(r.op, []).append((from_opset, *indices))
    if not any(n.op in wanted for n in graph.nodes):
        return 0
    opset = G.opset(graph)
    released: list[gs.Tensor] = []
    for node in graph.nodes:
        if not G.is_default(node):
            continue
        for from_opset, *at in wanted.get(node.op, ()):
            for i in at if opset >= from_opset else ():
                tensor = given(node, i)
                if tensor is None or G.is_weights(tensor):
                    continue
                value = known_value(graph, tensor)
                if value is not None:
                    G.set_input(node, i, G.constant(graph, value, f"{tensor.name}_folded"))
                    released.append(tensor)
    if released:
        G.forget_types(graph)
        G.drop_unread(graph, released)
    return len(released)
