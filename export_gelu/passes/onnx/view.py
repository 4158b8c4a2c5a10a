"""A read-only index over an ONNX graph: who produces and who consumes each tensor, which
tensors are small constants (initializers or `Constant` nodes), and every tensor's type.

Types come from ONNX shape inference run on a *skeleton* of the model (large initializers
keep their dims but not their bytes), so a model with gigabytes of weights, or one loaded
without its external data, is inferred without copying them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

#: Constants with more elements than this are never read as GELU literals.
MAX_LITERAL_ELEMENTS = 64
#: Initializers up to this many elements keep their values in the inference skeleton.
_SKELETON_KEEP_ELEMENTS = 64

DEFAULT_DOMAINS = ("", "ai.onnx")
FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
               onnx.TensorProto.DOUBLE}


@dataclass(frozen=True)
class TensorType:
    """Element type and shape (ints, symbolic names, or None per dim; None when rank unknown)."""

    elem_type: int
    shape: tuple[int | str | None, ...] | None

    @property
    def last_dim(self) -> int | None:
        if not self.shape:
            return None
        last = self.shape[-1]
        return last if isinstance(last, int) else None


def _type_of(value_info: onnx.ValueInfoProto) -> TensorType | None:
    if not value_info.type.HasField("tensor_type"):
        return None
    tt = value_info.type.tensor_type
    if not tt.elem_type:
        return None
    shape = None
    if tt.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                      for d in tt.shape.dim)
    return TensorType(tt.elem_type, shape)


def _numel(dims: object) -> int:
    return int(np.prod(list(dims))) if len(dims) else 1  # type: ignore[arg-type]


def _has_inline_data(t: onnx.TensorProto) -> bool:
    external = t.data_location == onnx.TensorProto.EXTERNAL
    return not external and bool(
        t.raw_data or t.float_data or t.int32_data or t.int64_data or t.double_data
        or _numel(t.dims) == 0)


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


#: Elementwise contrib ops ONNX shape inference cannot type, as standard ops that type alike.
_TYPED_LIKE = {("com.microsoft", "Gelu"): "Identity", ("com.microsoft", "QuickGelu"): "Identity",
               ("com.microsoft", "FastGelu"): "Add", ("com.microsoft", "BiasGelu"): "Add"}


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


def infer_types(model: onnx.ModelProto) -> dict[str, TensorType]:
    """Every tensor's type that the model states or that shape inference can derive."""
    types: dict[str, TensorType] = {}
    try:
        inferred = onnx.shape_inference.infer_shapes(_typeable(skeleton(model)),
                                                     strict_mode=False)
        infos = [*inferred.graph.input, *inferred.graph.output, *inferred.graph.value_info]
    except Exception:  # noqa: BLE001 - inference is best effort; stated types still count
        infos = [*model.graph.input, *model.graph.output, *model.graph.value_info]
    for vi in infos:
        t = _type_of(vi)
        if t is not None:
            types[vi.name] = t
    for init in model.graph.initializer:
        types[init.name] = TensorType(init.data_type, tuple(int(d) for d in init.dims))
    return types


def _subgraph_names(node: onnx.NodeProto) -> set[str]:
    """Names a node's subgraphs (If/Loop/Scan bodies) read, recursively."""
    names: set[str] = set()
    for attr in node.attribute:
        graphs = list(attr.graphs) + ([attr.g] if attr.HasField("g") else [])
        for g in graphs:
            for inner in g.node:
                names.update(inner.input)
                names |= _subgraph_names(inner)
    return names


def constant_node_value(node: onnx.NodeProto) -> np.ndarray | None:
    """The value of a `Constant` node, whatever attribute holds it."""
    for attr in node.attribute:
        if attr.name == "value":
            return numpy_helper.to_array(attr.t)
        if attr.name == "value_float":
            return np.array(attr.f, dtype=np.float32)
        if attr.name == "value_floats":
            return np.array(list(attr.floats), dtype=np.float32)
        if attr.name == "value_int":
            return np.array(attr.i, dtype=np.int64)
        if attr.name == "value_ints":
            return np.array(list(attr.ints), dtype=np.int64)
    return None


class GraphView:
    """Producers, consumers, graph outputs, small constants and types of one graph."""

    def __init__(self, model: onnx.ModelProto, types: dict[str, TensorType] | None = None):
        self.model = model
        graph = model.graph
        self.nodes: dict[str, onnx.NodeProto] = {}
        self.order: dict[str, int] = {}
        self.producer: dict[str, onnx.NodeProto] = {}
        self.consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
        self.outer_reads: set[str] = set()  # read from inside a subgraph: an extra, hidden user
        for i, node in enumerate(graph.node):
            self.nodes[node.name] = node
            self.order[node.name] = i
            for out in node.output:
                if out:
                    self.producer[out] = node
            for inp in node.input:
                if inp:
                    self.consumers[inp].append(node)
            self.outer_reads |= _subgraph_names(node)
        self.graph_outputs = {o.name for o in graph.output}
        self.graph_inputs = {i.name for i in graph.input}
        self.typed = {v.name for v in graph.value_info}  # tensors the model states a type for
        self.initializers = {t.name: t for t in graph.initializer}
        self.types = types if types is not None else infer_types(model)
        self._const_cache: dict[str, np.ndarray | None] = {}

    def opset(self, domain: str = "") -> int:
        for imp in self.model.opset_import:
            if imp.domain == domain or (domain == "" and imp.domain == "ai.onnx"):
                return int(imp.version)
        return 0

    def users(self, tensor: str) -> int:
        """How many node inputs read `tensor`, plus one for a graph output or subgraph read."""
        extra = int(tensor in self.graph_outputs) + int(tensor in self.outer_reads)
        return len(self.consumers.get(tensor, ())) + extra

    def constant(self, tensor: str) -> np.ndarray | None:
        """The value of a small constant tensor (initializer or `Constant` node), else None."""
        if tensor in self._const_cache:
            return self._const_cache[tensor]
        value = None
        init = self.initializers.get(tensor)
        if init is not None:
            if (tensor not in self.graph_inputs and _numel(init.dims) <= MAX_LITERAL_ELEMENTS
                    and _has_inline_data(init)):
                value = numpy_helper.to_array(init)
        else:
            node = self.producer.get(tensor)
            if node is not None and node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS:
                arr = constant_node_value(node)
                if arr is not None and arr.size <= MAX_LITERAL_ELEMENTS:
                    value = arr
        self._const_cache[tensor] = value
        return value

    def is_constant(self, tensor: str) -> bool:
        """True for any initializer (whatever its size) or `Constant` node output."""
        if tensor in self.initializers:
            return tensor not in self.graph_inputs
        node = self.producer.get(tensor)
        return node is not None and node.op_type == "Constant"

    def type(self, tensor: str) -> TensorType | None:
        return self.types.get(tensor)
