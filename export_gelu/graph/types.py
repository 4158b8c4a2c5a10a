"""The one type inference: ONNX shape inference (with data propagation) on a skeleton of the
graph — big initializers keep their dims, not their bytes; ONNX Runtime's contrib GELU ops are
typed through standard stand-ins — cached on the graph until its node list changes."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.ir.tensor import SparseValues

from export_gelu.graph.index import (
    _edited,
    _own_tensors,
    _version,
    graphs,
    root_of,
)
from export_gelu.graph.proto import (
    _node_proto,
    _opset_imports,
    _value_info,
)
from export_gelu.graph.session import TensorType, loaded_model, session_of
from export_gelu.graph.values import (
    _constant_proto,
    _has_inline_data,
    _numel,
    elem_type_of,
    proto_of,
)

#: Initializers up to this many elements keep their values in the inference skeleton.
_SKELETON_KEEP_ELEMENTS = 64


def _type_of(vi: onnx.ValueInfoProto) -> TensorType | None:
    if not vi.type.HasField("tensor_type"):
        return None
    tt = vi.type.tensor_type
    shape = None
    if tt.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                      for d in tt.shape.dim)
    return TensorType(tt.elem_type, shape)


#: Elementwise contrib ops ONNX shape inference cannot type, as standard ops that type alike.
_TYPED_LIKE = {("com.microsoft", "Gelu"): "Identity", ("com.microsoft", "QuickGelu"): "Identity",
               ("com.microsoft", "FastGelu"): "Add", ("com.microsoft", "BiasGelu"): "Add"}


def _stub(tensor: gs.Constant) -> onnx.TensorProto:
    """An initializer for inference: small values kept, others their dims and type only."""
    proto = proto_of(tensor)
    if proto is not None:
        if _numel(proto.dims) <= _SKELETON_KEEP_ELEMENTS and _has_inline_data(proto):
            return proto
        stub = onnx.TensorProto(name=tensor.name, data_type=proto.data_type)
        stub.dims.extend(proto.dims)
        return stub
    if isinstance(tensor._values, np.ndarray) and tensor._values.size <= _SKELETON_KEEP_ELEMENTS:
        return _constant_proto(tensor)
    stub = onnx.TensorProto(name=tensor.name, data_type=elem_type_of(tensor))
    stub.dims.extend(int(d) for d in tensor.shape)
    return stub


def _typeable(sk: onnx.ModelProto) -> onnx.ModelProto:
    """`sk` with contrib GELU ops replaced by stand-ins, so types flow through them."""
    for node in sk.graph.node:
        stand_in = _TYPED_LIKE.get((node.domain, node.op_type))
        if stand_in is not None:
            node.domain = ""
            node.op_type = stand_in if len(node.input) == 2 else "Identity"
            del node.input[2:]
            del node.attribute[:]
    return sk


def skeleton_of(graph: gs.Graph) -> onnx.ModelProto:
    """The graph as a model without the bytes of its large initializers, for inference."""
    model = loaded_model(graph)
    sk = onnx.ModelProto(ir_version=graph.ir_version or model.ir_version)
    sk.opset_import.extend(_opset_imports(graph, model.opset_import))
    sk.functions.extend(model.functions)
    g = sk.graph
    g.name = model.graph.name
    own = _own_tensors(graph)
    scope = frozenset(own)
    g.node.extend(_node_proto(n, scope) for n in graph.nodes)
    _typeable(sk)
    g.initializer.extend(_stub(t) for t in own.values()
                         if isinstance(t, gs.Constant) and not isinstance(t._values, SparseValues))
    g.input.extend(_value_info(t) for t in graph.inputs)
    g.output.extend(_value_info(t) for t in graph.outputs)
    io = {t.name for t in (*graph.inputs, *graph.outputs)}
    g.value_info.extend(_value_info(t) for t in own.values()
                        if isinstance(t, gs.Variable) and t.name not in io
                        and (t.dtype is not None or t.shape is not None))
    return sk


def infer_types(graph: gs.Graph) -> dict[str, TensorType]:
    """Every tensor's type that the model states or that ONNX shape inference can derive
    (cached until the node list changes: `set_nodes`)."""
    root = root_of(graph)
    session = session_of(root)
    cached = session.types
    if cached is not None:
        return cached
    types: dict[str, TensorType] = {}
    if session.synced == _version():  # the model holds the graph as it is
        sk = _typeable(skeleton(loaded_model(root)))
    else:
        sk = skeleton_of(root)
    try:
        inferred = onnx.shape_inference.infer_shapes(sk, strict_mode=False, data_prop=True)
        infos = [*inferred.graph.input, *inferred.graph.output, *inferred.graph.value_info]
    except Exception:  # noqa: BLE001 - inference is best effort; stated types still count
        infos = [*sk.graph.input, *sk.graph.output, *sk.graph.value_info]
    for vi in infos:
        t = _type_of(vi)
        if t is not None:
            types[vi.name] = t
    for g in graphs(root):
        for t in _own_tensors(g).values():
            if isinstance(t, gs.Constant):
                types[t.name] = TensorType(elem_type_of(t), tuple(int(d) for d in t.shape))
    session.types = types
    return types


def forget_types(graph: gs.Graph) -> None:
    """Drop what is cached about the graph: its types, and the tensor maps (after the node
    list changed, or an edit not made with the helpers here: an attribute, a dtype)."""
    session_of(root_of(graph)).types = None
    _edited(graph)


def type_of(graph: gs.Graph, tensor: gs.Tensor | str | None) -> TensorType | None:
    """What the model states or inference derives about one tensor (None: nothing)."""
    if tensor is None:
        return None
    name = tensor if isinstance(tensor, str) else tensor.name
    if not name:
        return None
    return infer_types(graph).get(name)


def skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model without the bytes of its large initializers (dims and types kept)."""
    sk = onnx.ModelProto()
    sk.ir_version = model.ir_version
    sk.opset_import.extend(model.opset_import)
    sk.functions.extend(model.functions)
    g = sk.graph
    g.name = model.graph.name
    g.node.extend(model.graph.node)
    g.input.extend(model.graph.input)
    g.output.extend(model.graph.output)
    g.value_info.extend(model.graph.value_info)
    for t in model.graph.initializer:
        if _numel(t.dims) <= _SKELETON_KEEP_ELEMENTS and _has_inline_data(t):
            g.initializer.add().CopyFrom(t)
        else:
            stub = g.initializer.add()
            stub.name, stub.data_type = t.name, t.data_type
            stub.dims.extend(t.dims)
    return sk
