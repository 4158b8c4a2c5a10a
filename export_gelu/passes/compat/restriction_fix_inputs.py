"""Fixes for the records of `trt_parser/restriction_rows_inputs.py` (contract: see
`restriction_fixes.py`).

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

import numpy as np
import onnx

from export_gelu.passes.compat.fold_constant_ops import constant_value
from export_gelu.passes.compat.graph import attr_value, clone, drop_attr, set_attr
from export_gelu.passes.compat.restriction_fixes import fix
from export_gelu.trt_parser.restriction_rows_inputs import (
    CONSTANT_INPUTS,
    REDUCE_AXES_INPUT,
    einsum_terms,
    given,
    is_weights,
    shape_of,
)
from export_gelu.trt_parser.restrictions import RESTRICTIONS, GraphContext


def static_shape_leaf(ctx: GraphContext) -> Callable[[onnx.NodeProto], dict | None]:
    """Shape/Size of a tensor whose shape is static, as known values (a cone leaf)."""

    def dims_of(shape_node: onnx.NodeProto) -> tuple | None:
        shape = shape_of(ctx, shape_node.input[0])
        if shape is None:
            return None
        start = int(attr_value(shape_node, "start", 0))
        end = attr_value(shape_node, "end", None)
        return shape[start:] if end is None else shape[start:int(end)]

    def leaf(node: onnx.NodeProto) -> dict[str, np.ndarray] | None:
        if node.domain not in ("", "ai.onnx"):
            return None
        if node.op_type == "Gather":  # one static dim of a partly symbolic shape
            shape_node = ctx.producer.get(node.input[0])
            idx = ctx.constant(node.input[1])
            if shape_node is None or shape_node.op_type != "Shape" or idx is None:
                return None
            dims = dims_of(shape_node)
            if dims is None or not all(-len(dims) <= int(i) < len(dims) for i in idx.ravel()):
                return None
            picked = np.array(dims, dtype=object)[idx.astype(np.int64)]
            if not all(isinstance(d, int) for d in np.ravel(picked)):
                return None
            return {node.output[0]: np.asarray(picked.astype(np.int64))}
        if node.op_type not in ("Shape", "Size"):
            return None
        dims = dims_of(node)
        if dims is None or not all(isinstance(d, int) for d in dims):
            return None
        if node.op_type == "Size":
            return {node.output[0]: np.array(int(np.prod(dims)), np.int64)}
        return {node.output[0]: np.array(dims, np.int64)}

    return leaf


def known_value(ctx: GraphContext, name: str) -> np.ndarray | None:
    """The value of `name` when it is constant in fact (see the module docstring)."""
    return constant_value(ctx.model, ctx.editor, name, static_shape_leaf(ctx))


Fix = Callable[[onnx.NodeProto, GraphContext], "list[onnx.NodeProto] | None"]


def _fold_inputs(indices: tuple[int, ...]) -> Fix:
    def fold(node: onnx.NodeProto, ctx: GraphContext) -> list[onnx.NodeProto] | None:
        new = clone(node)
        changed = False
        for i in indices:
            name = given(node, i)
            if not name or is_weights(ctx, name):
                continue
            value = known_value(ctx, name)
            if value is None:
                return None
            new.input[i] = ctx.editor.const(value, f"{name}_folded")
            changed = True
        return [new] if changed else None

    return fold


for _key, (_indices, _) in CONSTANT_INPUTS.items():
    fix(_key, "folded to initializers (constant in fact)")(_fold_inputs(_indices))


@fix("trilu-rank", "reshaped to 3-D around the Trilu")
def _trilu_3d(node: onnx.NodeProto, ctx: GraphContext) -> list[onnx.NodeProto] | None:
    x = node.input[0]
    shape = shape_of(ctx, x)
    if shape is None or len(shape) < 4:
        return None
    ed, base = ctx.editor, node.name or node.output[0]
    nodes: list[onnx.NodeProto] = []
    if all(isinstance(d, int) for d in shape):
        to_3d = ed.const(np.array([-1, shape[-2], shape[-1]], np.int64), f"{base}_3d")
        back = ed.const(np.array(shape, np.int64), f"{base}_shape")
    else:
        full = ed.node("Shape", [x], base)
        hw = ed.node("Slice", [full.output[0], ed.const(np.array([-2], np.int64), f"{base}_m2"),
                               ed.const(np.array([len(shape)], np.int64), f"{base}_r"),
                               ed.const(np.array([0], np.int64), f"{base}_ax")], base)
        cat = ed.node("Concat", [ed.const(np.array([-1], np.int64), f"{base}_m1"),
                                 hw.output[0]], base, axis=0)
        nodes += [full, hw, cat]
        to_3d, back = cat.output[0], full.output[0]
    flat = ed.node("Reshape", [x, to_3d], base)
    tri = clone(node)
    tri.name = ed.fresh(f"{base}/Trilu3d")
    tri.input[0] = flat.output[0]
    tri.output[0] = ed.fresh(f"{base}_trilu3d")
    out = ed.node("Reshape", [tri.output[0], back], base, outputs=[node.output[0]])
    return [*nodes, flat, tri, out]


@fix("einsum-ellipsis", "spelled out without an ellipsis")
def _einsum_letters(node: onnx.NodeProto, ctx: GraphContext) -> list[onnx.NodeProto] | None:
    eq = attr_value(node, "equation", b"")
    eq = eq.decode() if isinstance(eq, bytes) else str(eq)
    terms, out = einsum_terms(eq)
    if len(terms) != len(node.input):
        return None
    spans = set()
    for term, name in zip(terms, node.input):
        if "..." in term:
            shape = shape_of(ctx, name)
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
    new = clone(node)
    set_attr(new, "equation", new_eq)
    return [new]


@fix("scatternd-reduction-attribute", "lost the default reduction='none' attribute")
def _scatternd_default(node: onnx.NodeProto, ctx: GraphContext) -> list[onnx.NodeProto] | None:
    new = clone(node)
    drop_attr(new, "reduction")
    return [new]


@fix("pad-axes-input", "given full-rank pads instead of an axes input")
def _pad_full_rank(node: onnx.NodeProto, ctx: GraphContext) -> list[onnx.NodeProto] | None:
    shape = shape_of(ctx, node.input[0])
    pads = known_value(ctx, node.input[1])
    axes = known_value(ctx, given(node, 3))
    if shape is None or pads is None or axes is None or pads.size != 2 * axes.size:
        return None
    rank, n = len(shape), axes.size
    full = np.zeros(2 * rank, np.int64)
    for j, a in enumerate(int(a) % rank for a in axes.ravel()):
        full[a], full[a + rank] = pads.ravel()[j], pads.ravel()[j + n]
    new = clone(node)
    new.input[1] = ctx.editor.const(full, f"{node.input[1]}_full")
    del new.input[3:]
    return [new]


# -- Reduce* whose opset-18 axes input the parser ignores (< 10.0) --------------------------

def _reduce_through_sum(node: onnx.NodeProto, ctx: GraphContext) -> list[onnx.NodeProto] | None:
    """The same reduction from ReduceSum(axes input) and TopK(k=1, axis), keepdims=1 inside,
    then Squeeze when the node had keepdims=0."""
    x, op = node.input[0], node.op_type
    shape = shape_of(ctx, x)
    axes = known_value(ctx, given(node, 1))
    if shape is None or axes is None or op == "ReduceProd":
        return None
    rank = len(shape)
    axes_list = sorted({int(a) % rank for a in axes.ravel()})
    keep = int(attr_value(node, "keepdims", 1))
    ed, base = ctx.editor, node.name or node.output[0]
    axes_c = ed.const(np.array(axes_list, np.int64), f"{base}_axes")
    nodes: list[onnx.NodeProto] = []

    def add(op_type: str, *inputs: str, **attrs: object) -> str:
        n = ed.node(op_type, list(inputs), base, **attrs)
        nodes.append(n)
        return n.output[0]

    def rsum(t: str) -> str:
        return add("ReduceSum", t, axes_c, keepdims=1)

    def extreme(t: str, largest: int) -> str:
        k = ed.const(np.array([1], np.int64), f"{base}_k")
        for a in axes_list:
            n = ed.node("TopK", [t, k], base, n_out=2, axis=a, largest=largest, sorted=1)
            nodes.append(n)
            t = n.output[0]
        return t

    if op == "ReduceMean":
        dims = [shape[a] for a in axes_list]
        vt = ctx.type_of(x)
        if vt is None or not vt.elem_type:
            return None
        if all(isinstance(d, int) for d in dims):
            dtype = onnx.helper.tensor_dtype_to_np_dtype(vt.elem_type)
            count = ed.const(np.array(np.prod(dims), dtype), f"{base}_n")
        else:  # the count from the run-time shape; ReduceProd without axes reduces all
            picked = add("Gather", add("Shape", x), axes_c)
            count = add("Cast", add("ReduceProd", picked, keepdims=0), to=vt.elem_type)
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
    elif op in ("ReduceMax", "ReduceMin"):
        y = extreme(x, 1 if op == "ReduceMax" else 0)
    else:
        return None
    last = nodes[-1]
    if keep:
        last.output[list(last.output).index(y)] = node.output[0]
    else:
        nodes.append(ed.node("Squeeze", [y, axes_c], base, outputs=[node.output[0]]))
    return nodes


for _op in REDUCE_AXES_INPUT:
    if _op not in ("ReduceSum", "ReduceProd"):
        fix(f"{_op.lower()}-axes-ignored",
            "rewritten through ReduceSum/TopK, whose axes the parser honours")(
            _reduce_through_sum)


def fold_computed_inputs(model: onnx.ModelProto) -> int:
    """Fold, on any version, every input of the must-be-weights rows that is computed but
    constant in fact (the down-converter needs such axes/sizes as attributes too). Returns
    the number of inputs folded; the cones nothing else reads are dropped."""
    from export_gelu.passes.compat.restriction_fixes import drop_unread_producers
    from export_gelu.trt_parser.restriction_rows_inputs import opset_of

    wanted: dict[str, list[tuple[int, ...]]] = {}
    for r in RESTRICTIONS:
        if r.key in CONSTANT_INPUTS:
            indices, from_opset = CONSTANT_INPUTS[r.key]
            wanted.setdefault(r.op, []).append((from_opset, *indices))
    if not any(n.op_type in wanted for n in model.graph.node):
        return 0
    ctx = GraphContext(model)
    opset = opset_of(ctx)
    released: set[str] = set()
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        for from_opset, *indices in wanted.get(node.op_type, ()):
            for i in indices if opset >= from_opset else ():
                name = given(node, i)
                if not name or is_weights(ctx, name):
                    continue
                value = known_value(ctx, name)
                if value is not None:
                    node.input[i] = ctx.editor.const(value, f"{name}_folded")
                    released.add(name)
    if released:
        ctx.editor.commit(list(model.graph.node))
        drop_unread_producers(model.graph, released)
    return len(released)
