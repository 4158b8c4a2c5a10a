"""Reading a Q/DQ graph back: which products are quantized, at which scales.

Works on any explicitly quantized graph, export-gelu's or another tool's: a product input
is quantized when it is a DequantizeLinear's output. The activation's scale and the
weight's scales (with their axis, as the DequantizeLinear states it) are the graph's own;
the weight's float values are what the graph dequantizes (a float initializer behind a
QuantizeLinear, or the stored integers or FP8 values times their scales).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import TensorProto

from export_gelu import graph as G
from export_gelu.graph.provenance import module_of
from export_gelu.quantize.placement import PRODUCT_OPS

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


@dataclass(frozen=True)
class QdqProduct:
    """One product of a Q/DQ graph whose inputs are dequantized."""

    node: str
    op: str
    module: str | None
    precision: str  # int8 | fp8 (the activation's quantized type)
    activation_scale: float | None  # None: the activation is not quantized
    weight_scale: np.ndarray | None  # per channel (1-D) or one (shape ())
    weight_axis: int | None  # the channel axis of weight_scale in the graph's weight layout
    weight: np.ndarray | None  # the float weight the graph quantizes (or dequantizes to)
    weight_name: str = ""  # the graph tensor the weight comes from


def is_qdq_graph(model: onnx.ModelProto) -> bool:
    """Whether the main graph holds a QuantizeLinear or DequantizeLinear."""
    return any(n.op_type in QDQ_OPS and n.domain in ("", "ai.onnx") for n in model.graph.node)


def _dq_feeding(tensor: gs.Tensor) -> gs.Node | None:
    node = G.producer(tensor)
    return node if node is not None and node.op == "DequantizeLinear" else None


def _elem_type(graph: gs.Graph, tensor: gs.Tensor) -> int:
    found = G.elem_type_of(tensor)
    typed = None if found else G.type_of(graph, tensor)
    return found or (typed.elem_type if typed is not None else 0)


def _precision(graph: gs.Graph, dq: gs.Node) -> str:
    types = [_elem_type(graph, t) for t in dq.inputs[:1] + dq.inputs[2:3] if not t.is_empty()]
    return "fp8" if TensorProto.FLOAT8E4M3FN in types else "int8"


def _values(tensor: gs.Tensor) -> np.ndarray | None:
    """A constant's values as float32 or its own integer type (FLOAT8 read as float32)."""
    value = G.value(tensor, external=True)
    if value is None:
        return None
    array = np.asarray(value)
    native = array.dtype.kind in "iub" or array.dtype in (np.float16, np.float32, np.float64)
    return array if native else array.astype(np.float32)


def _dequantized(graph: gs.Graph, dq: gs.Node) -> tuple[np.ndarray | None, str]:
    """The float weight behind a weight's DequantizeLinear, and its tensor's name."""
    data = dq.inputs[0]
    q = G.producer(data)
    if q is not None and q.op == "QuantizeLinear":
        src = q.inputs[0]
        return _values(src), src.name
    stored = _values(data)
    scale = _values(dq.inputs[1])
    if stored is None or scale is None:
        return None, data.name
    axis = _axis(graph, dq, stored.ndim)
    s = scale if scale.ndim == 0 or axis is None else scale.reshape(
        [-1 if i == axis else 1 for i in range(stored.ndim)])
    return (stored.astype(np.float32) * s).astype(np.float32), data.name


def _axis(graph: gs.Graph, dq: gs.Node, rank: int) -> int | None:
    scale = _values(dq.inputs[1])
    if scale is None or scale.size <= 1:
        return None
    axis = int(dq.attrs.get("axis", 1))
    return axis + rank if axis < 0 else axis


def _product(graph: gs.Graph, node: gs.Node) -> QdqProduct | None:
    ins = node.inputs
    if len(ins) < 2:
        return None
    act_dq, w_dq = _dq_feeding(ins[0]), _dq_feeding(ins[1])
    if act_dq is None and w_dq is None:
        return None
    act_scale = None
    if act_dq is not None:
        s = _values(act_dq.inputs[1])
        act_scale = float(s.reshape(-1)[0]) if s is not None and s.size == 1 else None
    weight = w_scale = None
    axis = None
    name = ""
    if w_dq is not None:
        weight, name = _dequantized(graph, w_dq)
        w_scale = _values(w_dq.inputs[1])
        axis = _axis(graph, w_dq, weight.ndim) if weight is not None else None
    dq = act_dq or w_dq
    assert dq is not None  # one of them is, checked above
    precision = _precision(graph, dq)
    return QdqProduct(node.name, node.op, module_of(node), precision, act_scale,
                      None if w_scale is None else np.asarray(w_scale, np.float32), axis,
                      weight, name)


def read_qdq(model: onnx.ModelProto) -> list[QdqProduct]:
    """Every product of `model` with a dequantized input, in graph order."""
    from onnx_graphsurgeon.logger import G_LOGGER

    found: list[QdqProduct] = []
    with G_LOGGER.suppress(G_LOGGER.ERROR), G.opened(model) as graph:  # quiet about FLOAT8
        for node in graph.nodes:
            if node.op in PRODUCT_OPS and G.is_default(node):
                product = _product(graph, node)
                if product is not None:
                    found.append(product)
    return found
