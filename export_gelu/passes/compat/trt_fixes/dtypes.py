"""Fixes for the element-type restrictions (`export_gelu.trt_parser.dtype_rows`): DOUBLE to
FLOAT on 7.x where the values allow it, CastLike to Cast, integer Pow to forms with the same
values, and INT64 constants out of INT32 range clamped into it where every value they reach
is a Slice start/end or Clip bound (which clamp anyway: torch's exporter writes INT64_MAX
for an open slice end); other such constants have no fix: no rewrite can keep their
values."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_graphsurgeon as gs
from onnx import TensorProto, helper

from export_gelu import graph as G
from export_gelu.passes.compat.trt_fixes.registry import fix, graph_fix
from export_gelu.trt_parser.restriction_shared import (
    CLAMP_SAFE_READS,
    attr_tensors,
    float32_exact_enough,
)

_FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16)


def _max_relative_change(value: np.ndarray) -> float:
    finite = value[np.isfinite(value) & (value != 0)]
    if not finite.size:
        return 0.0
    return float(np.max(np.abs(finite.astype(np.float32).astype(np.float64) - finite)
                        / np.abs(finite)))


def _double_tensors_of(graph: gs.Graph) -> list[tuple[gs.Node | None, gs.Constant]]:
    """Every DOUBLE tensor value the graph holds: initializers (node None) and node attribute
    tensors (with their node)."""
    found: list[tuple[gs.Node | None, gs.Constant]] = [
        (None, i) for i in G.initializers(graph) if G.elem_type_of(i) == TensorProto.DOUBLE]
    found += [(n, t) for n in graph.nodes for t in attr_tensors(n)
              if G.elem_type_of(t) == TensorProto.DOUBLE]
    return found


@graph_fix("double-tensors")
def _double_to_float(graph: gs.Graph) -> str | None:
    """DOUBLE inputs, outputs, initializers, constants and Cast targets → FLOAT.

    Refuses (None) when a DOUBLE value is external data it cannot read (a tensor left in its
    file by onnx_weights.load_graph is read, and comes back inline in float32) or lies outside
    float32's range, or when something other than those makes DOUBLE (then the graph keeps
    its DOUBLE and the hit is reported)."""
    tensors = _double_tensors_of(graph)
    values = []
    for _node, t in tensors:
        v = G.array_of(t)  # attribute tensors have no name; a weight left in a file is read
        if v is None or not float32_exact_enough(v):
            return None
        values.append(v)
    worst = max((_max_relative_change(v) for v in values), default=0.0)
    for (node, t), v in zip(tensors, values, strict=True):
        if node is None:
            t.values = v.astype(np.float32)
        else:  # a new attribute value, so the node is written anew
            key = next(k for k, a in node.attrs.items() if a is t)
            node.attrs[key] = gs.Constant(t.name, v.astype(np.float32))
    casts = 0
    for n in graph.nodes:
        for name in ("to", "dtype"):
            value = n.attrs.get(name)
            if isinstance(value, int) and not isinstance(value, bool) \
                    and value == TensorProto.DOUBLE:
                n.attrs[name] = TensorProto.FLOAT
                casts += 1
    io = 0
    io_names = {t.name for t in (*graph.inputs, *graph.outputs)}
    for t in G.tensors(graph).values():
        if isinstance(t, gs.Variable) and t.dtype is not None \
                and G.elem_type_of(t) == TensorProto.DOUBLE:
            t.dtype = TensorProto.FLOAT
            io += t.name in io_names
    if not (tensors or casts or io):
        return None  # nothing of ours made the DOUBLE that is left
    return (f"DOUBLE tensors converted to FLOAT ({len(tensors)} constant(s), {casts} Cast/dtype "
            f"attribute(s), {io} graph input/output(s)): constants rounded to float32 (largest "
            f"relative change {worst:.1e}), and arithmetic that ran in double now runs in "
            "float32 (about 7 significant digits instead of 16)")


@fix("castlike-no-importer", "rewritten as Cast to the type of their second input", early=True)
def _castlike_to_cast(node: gs.Node, graph: gs.Graph) -> list[gs.Node] | None:
    vt = G.type_of(graph, node.inputs[1])
    if vt is None or not vt.elem_type:
        return None
    attrs: dict[str, Any] = {"to": vt.elem_type}
    saturate = node.attrs.get("saturate")
    if saturate is not None and G.opset(graph) >= 19:
        attrs["saturate"] = saturate
    return [G.node(graph, "Cast", [node.inputs[0]], outputs=[node.outputs[0]],
                   name=node.name or G.fresh_name(graph, "CastLike/Cast"), like=node, **attrs)]


@fix("pow-integer-exponent", "given the same exponent values as a float constant")
def _float_exponent(node: gs.Node, graph: gs.Graph) -> list[gs.Node] | None:
    """A constant integer exponent as a constant of the base's float type, when every value
    converts exactly (|e| <= 2**24 for float32, 2048 for float16)."""
    e = G.value(node.inputs[1])
    base = G.type_of(graph, node.inputs[0])
    if e is None or base is None or base.elem_type not in _FLOAT_TYPES:
        return None
    f = e.astype(helper.tensor_dtype_to_np_dtype(base.elem_type))
    if not np.array_equal(f.astype(np.float64), e.astype(np.float64)):
        return None
    new = G.clone(graph, node)
    G.set_input(new, 1, G.constant(graph, f, f"{node.inputs[1].name}_float"))
    return [new]


#: The largest constant exponent an integer Pow is expanded for (that many Muls, less one).
MAX_MUL_EXPONENT = 8


@fix("pow-integer-base", f"rewritten as a chain of integer Mul (constant exponent 1 to "
     f"{MAX_MUL_EXPONENT})")
def _pow_as_muls(node: gs.Node, graph: gs.Graph) -> list[gs.Node] | None:
    """x ** k for a constant integer-valued k in 1..8 as x * x * … (exact integer arithmetic,
    the same values as Pow's), when the exponent cannot broadcast the base to a new shape."""
    e = G.value(node.inputs[1])
    base = G.type_of(graph, node.inputs[0])
    if e is None or e.size != 1 or base is None or base.rank is None or e.ndim > base.rank:
        return None
    k = float(e.reshape(()))
    if k != int(k) or not 1 <= k <= MAX_MUL_EXPONENT:
        return None
    x = node.inputs[0]
    out = node.outputs[0]
    label = node.name or out.name
    if k == 1:
        return [G.node(graph, "Identity", [x], base=label, outputs=[out])]
    nodes: list[gs.Node] = []
    acc = x
    for i in range(int(k) - 1):
        last = i == int(k) - 2
        mul = G.node(graph, "Mul", [acc, x], base=label, outputs=[out] if last else None)
        nodes.append(mul)
        acc = mul.outputs[0]
    return nodes


_INT32 = np.iinfo(np.int32)
#: (op, input index) reads that pass an integer tensor's values on unchanged (reshaped,
#: concatenated, cast between the integer types); Concat passes every input's.
_PASSES_VALUES = {("Cast", 0), ("Reshape", 0), ("Unsqueeze", 0), ("Squeeze", 0),
                  ("Identity", 0), ("Flatten", 0), ("Expand", 0)}
_INTEGER_CASTS = (TensorProto.INT64, TensorProto.INT32)


def _only_clamped_reads(tensor: gs.Tensor, graph: gs.Graph, depth: int = 0) -> bool:
    """Every value of `tensor` reaches only Slice starts/ends and Clip bounds, through ops
    that pass values on unchanged (`_PASSES_VALUES`), and never a graph output."""
    if depth > 8 or G.is_output(graph, tensor):
        return False
    for node in G.consumers(tensor):
        for index, inp in enumerate(node.inputs):
            if inp is not tensor or (node.op, index) in CLAMP_SAFE_READS:
                continue
            passes = node.op == "Concat" or (node.op, index) in _PASSES_VALUES
            if node.op == "Cast" and node.attrs.get("to") not in _INTEGER_CASTS:
                passes = False
            if not passes or not all(_only_clamped_reads(o, graph, depth + 1)
                                     for o in node.outputs):
                return False
    return True


def _clamped(value: np.ndarray | None) -> np.ndarray | None:
    """`value` clamped into the INT32 range, or None when it is in range already."""
    if value is None or value.dtype != np.int64 or not value.size:
        return None
    if int(value.min()) >= _INT32.min and int(value.max()) <= _INT32.max:
        return None
    return np.asarray(np.clip(value, _INT32.min, _INT32.max), dtype=np.int64)


@graph_fix("int64-out-of-int32")
def _clamp_slice_bounds(graph: gs.Graph) -> str | None:
    """INT64 constants outside the INT32 range whose values only ever bound a Slice or a Clip
    (through Cast/Reshape/Concat/… copies), clamped into the INT32 range: the same slice, and
    no value for TensorRT's parser to clamp. Refuses (None) when there is none such."""
    clamped = 0
    for init in G.initializers(graph):
        if G.elem_type_of(init) != TensorProto.INT64:
            continue
        new = _clamped(G.value(init))
        if new is not None and _only_clamped_reads(init, graph):
            init.values = new
            clamped += 1
    for node in graph.nodes:
        if node.op != "Constant" or not G.is_default(node) or not node.outputs:
            continue
        held = node.attrs.get("value")
        new = _clamped(G.array_of(held)) if isinstance(held, gs.Constant) else None
        if new is not None and isinstance(held, gs.Constant) \
                and _only_clamped_reads(node.outputs[0], graph):
            node.attrs["value"] = gs.Constant(held.name, new)
            clamped += 1
    if not clamped:
        return None
    return (f"{clamped} INT64 constant(s) outside the INT32 range (INT64_MAX: an open slice end, "
            "as torch's exporter writes it) clamped to the INT32 range; they only bound a Slice "
            "or Clip, which clamps them to the dimension anyway: the same values")
