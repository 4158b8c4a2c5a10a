"""An expanded LayerNorm (as the TorchScript exporter writes it below opset 17) fused back
into one `LayerNormalization` (opset 17), for targets that parse it (TensorRT 8.6+, `onnx`).

Matched over the last axis, every intermediate used only inside the pattern:

    mean = ReduceMean(x)            d = Sub(x, mean)
    var  = ReduceMean(Pow(d, 2) | Mul(d, d))
    y    = Div(d, Sqrt(Add(var, ε)))  [· γ] [+ β]      γ, β constant vectors over the last axis

The fusion only runs inside `upconvert.convert_up`, whose ONNX Runtime check compares the
graph before and after.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from export_gelu.passes.compat.graph import GraphEditor, attr_value, infer_types

_DEFAULT = ("", "ai.onnx")


@dataclass
class LayerNormPattern:
    """One expanded LayerNorm: its input, constants, output and the nodes that compute it."""

    x: str
    epsilon: float
    scale: str | None
    bias: str | None
    output: str
    nodes: list[onnx.NodeProto]


class _Graph:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.ed = GraphEditor(model.graph, infer_types(model))
        self.producer = {o: n for n in model.graph.node for o in n.output}
        self.consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
        for n in model.graph.node:
            for i in set(n.input):
                self.consumers[i].append(n)
        self.outputs = {o.name for o in model.graph.output}

    def op(self, name: str, op_type: str) -> onnx.NodeProto | None:
        node = self.producer.get(name)
        return node if node is not None and node.op_type == op_type \
            and node.domain in _DEFAULT else None

    def only_user(self, name: str, node: onnx.NodeProto) -> bool:
        users = self.consumers.get(name, [])
        return name not in self.outputs and len(users) == 1 and users[0] is node

    def scalar(self, name: str) -> float | None:
        value = self.ed.constant(name)
        return float(value.reshape(())) if value is not None and value.size == 1 else None

    def vector(self, name: str, size: int | None) -> bool:
        value = self.ed.constant(name)
        return value is not None and value.ndim == 1 and size is not None \
            and value.shape[0] == size

    def last_axis_mean(self, node: onnx.NodeProto | None, of: str) -> bool:
        if node is None or node.input[0] != of or attr_value(node, "keepdims", 1) != 1:
            return False
        axes = attr_value(node, "axes")
        if axes is None and len(node.input) > 1:
            value = self.ed.constant(node.input[1])
            axes = None if value is None else [int(a) for a in value.reshape(-1)]
        vt = self.ed.type_of(of)
        rank = vt.rank if vt is not None else None
        return axes is not None and len(axes) == 1 and (
            axes[0] == -1 or (rank is not None and axes[0] == rank - 1))


def _match(g: _Graph, div: onnx.NodeProto) -> LayerNormPattern | None:
    d, den = div.input
    sub = g.op(d, "Sub")
    sqrt = g.op(den, "Sqrt")
    if sub is None or sqrt is None or not g.only_user(den, div):
        return None
    x, mean = sub.input
    mean_node = g.op(mean, "ReduceMean")
    if not g.last_axis_mean(mean_node, x) or not g.only_user(mean, sub):
        return None
    add = g.op(sqrt.input[0], "Add")
    if add is None or not g.only_user(sqrt.input[0], sqrt):
        return None
    var, eps_name = add.input if g.scalar(add.input[1]) is not None else add.input[::-1]
    eps = g.scalar(eps_name)
    var_node = g.op(var, "ReduceMean")
    if eps is None or var_node is None or not g.only_user(var, add):
        return None
    square = g.producer.get(var_node.input[0])
    if not g.last_axis_mean(var_node, var_node.input[0]) or square is None \
            or not g.only_user(var_node.input[0], var_node):
        return None
    if square.op_type == "Pow":
        if square.input[0] != d or g.scalar(square.input[1]) != 2.0:
            return None
    elif square.op_type != "Mul" or list(square.input) != [d, d]:
        return None
    if {id(n) for n in g.consumers.get(d, [])} != {id(square), id(div)} or d in g.outputs:
        return None
    nodes = [mean_node, sub, square, var_node, add, sqrt, div]
    out, scale, bias = div.output[0], None, None
    vt = g.ed.type_of(x)
    size = vt.shape[-1] if vt is not None and vt.shape else None
    for op_type in ("Mul", "Add"):
        users = g.consumers.get(out, [])
        if len(users) != 1 or out in g.outputs or users[0].op_type != op_type \
                or users[0].domain not in _DEFAULT:
            break
        other = [i for i in users[0].input if i != out]
        if len(other) != 1 or not g.vector(other[0], size if isinstance(size, int) else None):
            break
        if op_type == "Mul":
            scale = other[0]
        else:
            if scale is None:
                break
            bias = other[0]
        nodes.append(users[0])
        out = users[0].output[0]
    if scale is None and not isinstance(size, int):
        return None  # a scale of ones needs the last axis size
    return LayerNormPattern(x, eps, scale, bias, out, nodes)  # type: ignore[arg-type]


def find_layernorms(model: onnx.ModelProto) -> list[LayerNormPattern]:
    """Every expanded LayerNorm of the main graph."""
    g = _Graph(model)
    found: list[LayerNormPattern] = []
    for node in model.graph.node:
        if node.op_type == "Div" and node.domain in _DEFAULT:
            hit = _match(g, node)
            if hit is not None:
                found.append(hit)
    return found


def fuse_layernorms(model: onnx.ModelProto) -> int:
    """Replace every expanded LayerNorm by `LayerNormalization` (the model must be at opset
    17 or later), in place; returns how many."""
    found = find_layernorms(model)
    if not found:
        return 0
    g = _Graph(model)
    ed = g.ed
    replace: dict[int, list[onnx.NodeProto]] = {}
    drop: set[int] = set()
    for hit in found:
        scale = hit.scale
        if scale is None:
            vt = ed.type_of(hit.x)
            np_dtype = helper.tensor_dtype_to_np_dtype(vt.elem_type) if vt else np.float32
            scale = ed.const(np.ones(vt.shape[-1], np_dtype), "ln_scale")  # type: ignore[union-attr]
        inputs = [hit.x, scale] + ([hit.bias] if hit.bias else [])
        ln = ed.node("LayerNormalization", inputs, hit.nodes[-1].name or "ln",
                     outputs=[hit.output], axis=-1, epsilon=hit.epsilon)
        for n in hit.nodes:
            ed.replaced(n, [ln])
            drop.add(id(n))
        replace[id(hit.nodes[-1])] = [ln]
    nodes: list[onnx.NodeProto] = []
    for n in model.graph.node:
        if id(n) in replace:
            nodes.extend(replace[id(n)])
        elif id(n) not in drop:
            nodes.append(n)
    ed.commit(nodes)
    return len(found)
