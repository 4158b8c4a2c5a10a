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

from dataclasses import dataclass

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper

from export_gelu import graph as G


@dataclass
class LayerNormPattern:
    """One expanded LayerNorm: its input, constants, output and the nodes that compute it."""

    x: gs.Tensor
    epsilon: float
    scale: gs.Tensor | None
    bias: gs.Tensor | None
    output: gs.Tensor
    nodes: list[gs.Node]


def _op(tensor: gs.Tensor, op_type: str) -> gs.Node | None:
    node = G.producer(tensor)
    return node if node is not None and node.op == op_type and G.is_default(node) else None


def _only_user(graph: gs.Graph, tensor: gs.Tensor, node: gs.Node) -> bool:
    users = G.consumers(tensor)
    return not G.is_output(graph, tensor) and len(users) == 1 and users[0] is node


def _scalar(tensor: gs.Tensor) -> float | None:
    value = G.value(tensor)
    return float(value.reshape(())) if value is not None and value.size == 1 else None


def _vector(tensor: gs.Tensor, size: int | None) -> bool:
    value = G.value(tensor)
    return value is not None and value.ndim == 1 and size is not None \
        and value.shape[0] == size


def _last_axis_mean(graph: gs.Graph, node: gs.Node | None, of: gs.Tensor) -> bool:
    if node is None or node.inputs[0] is not of or node.attrs.get("keepdims", 1) != 1:
        return False
    axes = node.attrs.get("axes")
    if axes is None and len(node.inputs) > 1:
        value = G.value(node.inputs[1])
        axes = None if value is None else [int(a) for a in value.reshape(-1)]
    vt = G.type_of(graph, of)
    rank = vt.rank if vt is not None else None
    return axes is not None and len(axes) == 1 and (
        axes[0] == -1 or (rank is not None and axes[0] == rank - 1))


def _match(graph: gs.Graph, div: gs.Node) -> LayerNormPattern | None:
    if len(div.inputs) != 2:
        return None
    d, den = div.inputs
    sub = _op(d, "Sub")
    sqrt = _op(den, "Sqrt")
    if sub is None or sqrt is None or not _only_user(graph, den, div) or len(sub.inputs) != 2:
        return None
    x, mean = sub.inputs
    mean_node = _op(mean, "ReduceMean")
    if not _last_axis_mean(graph, mean_node, x) or not _only_user(graph, mean, sub):
        return None
    add = _op(sqrt.inputs[0], "Add")
    if add is None or not _only_user(graph, sqrt.inputs[0], sqrt) or len(add.inputs) != 2:
        return None
    var, eps_in = add.inputs if _scalar(add.inputs[1]) is not None else add.inputs[::-1]
    eps = _scalar(eps_in)
    var_node = _op(var, "ReduceMean")
    if eps is None or var_node is None or not _only_user(graph, var, add):
        return None
    square = G.producer(var_node.inputs[0])
    if not _last_axis_mean(graph, var_node, var_node.inputs[0]) or square is None \
            or not _only_user(graph, var_node.inputs[0], var_node):
        return None
    if square.op == "Pow":
        if square.inputs[0] is not d or _scalar(square.inputs[1]) != 2.0:
            return None
    elif square.op != "Mul" or len(square.inputs) != 2 or not all(
            t is d for t in square.inputs):
        return None
    if {id(n) for n in G.consumers(d)} != {id(square), id(div)} or G.is_output(graph, d):
        return None
    nodes = [mean_node, sub, square, var_node, add, sqrt, div]
    out, scale, bias = div.outputs[0], None, None
    vt = G.type_of(graph, x)
    size = vt.shape[-1] if vt is not None and vt.shape else None
    for op_type in ("Mul", "Add"):
        users = G.consumers(out)
        if len(users) != 1 or G.is_output(graph, out) or users[0].op != op_type \
                or not G.is_default(users[0]):
            break
        other = [i for i in users[0].inputs if i is not out]
        if len(other) != 1 or not _vector(other[0], size if isinstance(size, int) else None):
            break
        if op_type == "Mul":
            scale = other[0]
        else:
            if scale is None:
                break
            bias = other[0]
        nodes.append(users[0])
        out = users[0].outputs[0]
    if scale is None and not isinstance(size, int):
        return None  # a scale of ones needs the last axis size
    return LayerNormPattern(x, eps, scale, bias, out, nodes)


def _find(graph: gs.Graph) -> list[LayerNormPattern]:
    return [hit for node in graph.nodes if node.op == "Div" and G.is_default(node)
            and (hit := _match(graph, node)) is not None]


def count_layernorms(model: onnx.ModelProto) -> int:
    """How many expanded LayerNorms the main graph holds."""
    with G.opened(model) as graph:
        return len(_find(graph))


def fuse_layernorms(model: onnx.ModelProto) -> int:
    """Replace every expanded LayerNorm by `LayerNormalization` (the model must be at opset
    17 or later), in place; returns how many."""
    with G.opened(model, write=True) as graph:
        return _fuse(graph)


def _fuse(graph: gs.Graph) -> int:
    found = _find(graph)
    if not found:
        return 0
    replace: dict[int, gs.Node] = {}
    drop: set[int] = set()
    for hit in found:
        scale = hit.scale
        if scale is None:
            vt = G.type_of(graph, hit.x)
            # _match leaves the scale out only where it read the last axis's size
            assert vt is not None and vt.shape and isinstance(vt.shape[-1], int)
            np_dtype = helper.tensor_dtype_to_np_dtype(vt.elem_type)
            scale = G.constant(graph, np.ones(vt.shape[-1], np_dtype), "ln_scale")
        inputs = [hit.x, scale] + ([hit.bias] if hit.bias is not None else [])
        ln = G.node(graph, "LayerNormalization", inputs, base=hit.nodes[-1].name or "ln",
                    outputs=[hit.output], axis=-1, epsilon=hit.epsilon)
        drop.update(id(n) for n in hit.nodes)
        replace[id(hit.nodes[-1])] = ln
    nodes: list[gs.Node] = []
    for n in graph.nodes:
        if id(n) in replace:
            nodes.append(replace[id(n)])
        elif id(n) not in drop:
            nodes.append(n)
    G.set_nodes(graph, nodes)
    return len(found)
