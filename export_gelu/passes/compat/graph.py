"""Small editing helpers over an ONNX graph: constants, value types, fresh names, new nodes.

The compat passes edit the `onnx` protobuf directly so that initializers they do not touch
(and their external data) stay byte-for-byte as they were.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from export_gelu.graph import Names, skeleton


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


@dataclass(frozen=True)
class ValueType:
    """What shape inference knows about one tensor."""

    elem_type: int  # onnx.TensorProto.DataType, 0 when unknown
    shape: tuple[int | str | None, ...] | None  # None: rank unknown; None/str dims: not static

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    def type_str(self) -> str | None:
        """'tensor(float)' and the like, as operator schemas spell type constraints."""
        if not self.elem_type:
            return None
        return f"tensor({onnx.TensorProto.DataType.Name(self.elem_type).lower()})"


def _value_type(vi: onnx.ValueInfoProto) -> ValueType | None:
    t = vi.type
    if not t.HasField("tensor_type"):
        return None
    tt = t.tensor_type
    shape = None
    if tt.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                      for d in tt.shape.dim)
    return ValueType(tt.elem_type, shape)


def infer_types(model: onnx.ModelProto) -> dict[str, ValueType]:
    """Types and shapes of every tensor ONNX shape inference can reach (best effort)."""
    light = skeleton(model)  # weights stay behind: inference reads dims and types only
    try:
        inferred = onnx.shape_inference.infer_shapes(light, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - inference is advisory; fall back to what the file says
        inferred = light
    g = inferred.graph
    types: dict[str, ValueType] = {}
    for vi in [*g.input, *g.value_info, *g.output]:
        vt = _value_type(vi)
        if vt is not None:
            types[vi.name] = vt
    for init in model.graph.initializer:
        types[init.name] = ValueType(init.data_type, tuple(init.dims))
    return types


class GraphEditor:
    """Constant lookup, unique names and node construction for one graph."""

    def __init__(self, graph: onnx.GraphProto, types: dict[str, ValueType] | None = None,
                 outer: GraphEditor | None = None) -> None:
        self.graph = graph
        self.types = types or {}
        self._inits = {i.name: i for i in graph.initializer}
        self._const_nodes = {n.output[0]: n for n in graph.node
                             if n.op_type == "Constant" and n.domain in ("", "ai.onnx")}
        self._outer = outer
        taken = {n.name for n in graph.node} | {o for n in graph.node for o in n.output}
        taken |= set(self._inits) | {i.name for i in graph.input}
        self._names = Names(taken | outer._names.taken if outer is not None else taken)
        self.new_initializers: list[onnx.TensorProto] = []
        self._orphans: set[str] = set()

    # -- reading ---------------------------------------------------------------------------
    def constant(self, name: str) -> np.ndarray | None:
        """The value of `name` when it is an initializer or a Constant node's output."""
        if not name:
            return None
        if name in self._inits:
            init = self._inits[name]
            if init.data_location == onnx.TensorProto.EXTERNAL:
                return None
            return numpy_helper.to_array(init)
        node = self._const_nodes.get(name)
        if node is not None:
            return constant_node_value(node)
        return self._outer.constant(name) if self._outer is not None else None

    def type_of(self, name: str) -> ValueType | None:
        vt = self.types.get(name)
        if vt is None and self._outer is not None:
            return self._outer.type_of(name)
        return vt

    # -- writing ---------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        """A tensor or node name not used anywhere in the graph yet."""
        return self._names.fresh(base or "t")

    def const(self, value: np.ndarray, base: str) -> str:
        """A new initializer holding `value`; returns its name."""
        name = self.fresh(base)
        tensor = numpy_helper.from_array(np.asarray(value), name)
        self.new_initializers.append(tensor)
        self._inits[name] = tensor
        return name

    def const_named(self, value: np.ndarray, name: str) -> None:
        """A new initializer called exactly `name` (the output of a node it replaces)."""
        tensor = numpy_helper.from_array(np.asarray(value), name)
        self.new_initializers.append(tensor)
        self._inits[name] = tensor

    def scalar(self, value: float, elem_type: int, base: str) -> str:
        """A new scalar initializer of ONNX element type `elem_type` (bf16 included)."""
        name = self.fresh(base)
        tensor = helper.make_tensor(name, elem_type, [], [value])
        self.new_initializers.append(tensor)
        self._inits[name] = tensor
        return name

    def node(self, op: str, inputs: list[str], base: str, n_out: int = 1,
             outputs: list[str] | None = None, **attrs: object) -> onnx.NodeProto:
        """A new default-domain node with a unique name and fresh output names."""
        outs = outputs if outputs is not None else [self.fresh(f"{base}_{op.lower()}")
                                                    for _ in range(n_out)]
        return helper.make_node(op, inputs, outs, name=self.fresh(f"{base}/{op}"), **attrs)

    def replaced(self, old: onnx.NodeProto, new: list[onnx.NodeProto]) -> None:
        """Record that `new` replaces `old`: constants only `old` read are pruned at commit."""
        kept = {i for n in new for i in n.input}
        self._orphans.update(i for i in old.input if i and i not in kept)

    def commit(self, nodes: list[onnx.NodeProto]) -> None:
        """Replace the graph's node list with `nodes`, add the new initializers, and drop the
        constants that replaced nodes alone read (other unused constants stay as they were)."""
        self.graph.ClearField("node")
        self.graph.node.extend(nodes)
        self.graph.initializer.extend(self.new_initializers)
        self.new_initializers = []
        if self._orphans:
            _prune(self.graph, self._orphans)
            self._orphans = set()


def _read_names(graph: onnx.GraphProto) -> set[str]:
    names = {o.name for o in graph.output}
    for node in graph.node:
        names.update(node.input)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs):
                names |= _read_names(sub)
    return names


def _prune(graph: onnx.GraphProto, candidates: set[str]) -> None:
    dead = candidates - _read_names(graph)
    if not dead:
        return
    inits = [i for i in graph.initializer if i.name not in dead]
    if len(inits) != len(graph.initializer):
        graph.ClearField("initializer")
        graph.initializer.extend(inits)
    nodes = [n for n in graph.node if not (n.op_type == "Constant" and n.output[0] in dead)]
    if len(nodes) != len(graph.node):
        graph.ClearField("node")
        graph.node.extend(nodes)


def attr_value(node: onnx.NodeProto, name: str, default: object = None) -> object:
    for attr in node.attribute:
        if attr.name == name:
            return helper.get_attribute_value(attr)
    return default


def set_attr(node: onnx.NodeProto, name: str, value: object) -> None:
    drop_attr(node, name)
    node.attribute.append(helper.make_attribute(name, value))


def drop_attr(node: onnx.NodeProto, name: str) -> None:
    keep = [a for a in node.attribute if a.name != name]
    node.ClearField("attribute")
    node.attribute.extend(keep)


def clone(node: onnx.NodeProto) -> onnx.NodeProto:
    return copy.deepcopy(node)


def set_default_opset(model: onnx.ModelProto, version: int) -> None:
    """Set the default-domain opset import (and those of local functions) to `version`."""
    for imports in [model.opset_import, *(f.opset_import for f in model.functions)]:
        found = False
        for imp in imports:
            if imp.domain in ("", "ai.onnx"):
                imp.version = version
                found = True
        if not found and imports is model.opset_import:
            imports.append(helper.make_opsetid("", version))
