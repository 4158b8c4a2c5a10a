"""Constants of the one graph: initializers and `Constant` nodes, read on demand. A tensor
left in its external-data file (`onnx_weights.load_graph`) stays a reference: graphsurgeon's
`LazyValues` holds its `TensorProto`, read only when a pass asks with `external=True`."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import numpy_helper
from onnx_graphsurgeon.exporters.onnx_exporter import dtype_to_onnx
from onnx_graphsurgeon.ir.tensor import LazyValues, SparseValues

from export_gelu.graph.index import (
    _VALUE,
    MAX_LITERAL_ELEMENTS,
    _own_tensors,
    is_default,
    producer,
)
from export_gelu.graph.session import session_of
from export_gelu.onnx_weights import is_external, is_lazy, tensor_array

#: Values up to this many elements are kept once read (larger ones are read each time).
_CACHED_ELEMENTS = 4096


def overridable(graph: gs.Graph, tensor: gs.Tensor) -> bool:
    """An initializer that is also a graph input (a feed may replace its value)."""
    return tensor.name in session_of(graph).input_inits


def constant_node(tensor: gs.Tensor) -> gs.Node | None:
    node = producer(tensor)
    return node if node is not None and node.op == "Constant" and is_default(node) else None


def is_weights(tensor: gs.Tensor) -> bool:
    """An initializer or a `Constant` node's output (what TensorRT's parser calls weights)."""
    return isinstance(tensor, gs.Constant) or constant_node(tensor) is not None


def is_constant(graph: gs.Graph, tensor: gs.Tensor) -> bool:
    """Weights whose value no feed can replace."""
    return is_weights(tensor) and not overridable(graph, tensor)


def elem_type_of(tensor: gs.Tensor) -> int:
    """The ONNX element type of a tensor (0 when unknown)."""
    if isinstance(tensor, gs.Constant) and isinstance(tensor._values, LazyValues):
        t = tensor._values.tensor
        return int(t.values.data_type if isinstance(t, onnx.SparseTensorProto)
                   else t.data_type)
    dtype = tensor.dtype
    if dtype is None:
        return 0
    if isinstance(dtype, int):
        return dtype
    found = _ONNX_TYPES.get(dtype)
    if found is None:
        try:
            found = int(dtype_to_onnx(dtype))
        except (TypeError, ValueError, KeyError):
            found = 0
        _ONNX_TYPES[dtype] = found
    return found


#: numpy dtype → ONNX element type, as graphsurgeon converts it (filled as met).
_ONNX_TYPES: dict[object, int] = {}


def initializers(graph: gs.Graph) -> list[gs.Constant]:
    """Every initializer `save` would write: those the nodes read, and those no node read
    when the model was loaded (which stay; a pass may change their values)."""
    own = [t for t in _own_tensors(graph).values() if isinstance(t, gs.Constant)]
    session = session_of(graph)
    unread = session.unread
    if unread and isinstance(session.src, onnx.GraphProto):
        found = session.unread_consts
        for p in session.src.initializer:
            if p.name in unread and p.name not in found:
                found[p.name] = gs.Constant(p.name, LazyValues(p))
        own += list(found.values())
    return own


def proto_of(tensor: gs.Constant) -> onnx.TensorProto | None:
    """The `TensorProto` a constant was imported as (None for values a pass made)."""
    values = tensor._values
    if isinstance(values, LazyValues) and not isinstance(values, SparseValues):
        return values.tensor
    return None


def _array(value: object, *, max_elements: int | None, external: bool) -> np.ndarray | None:
    if isinstance(value, gs.Constant):
        values = value._values
        if isinstance(values, SparseValues):
            return None
        if isinstance(values, LazyValues):
            value = values.tensor
        else:
            arr = np.asarray(values)
            return arr if max_elements is None or arr.size <= max_elements else None
    if isinstance(value, onnx.TensorProto):
        if max_elements is not None and int(np.prod(list(value.dims))) > max_elements:
            return None
        if is_external(value) and not (external and is_lazy(value)):
            return None
        return tensor_array(value)
    if isinstance(value, np.ndarray):
        return value if max_elements is None or value.size <= max_elements else None
    return None


def constant_node_value(node: gs.Node, *, max_elements: int | None = None,
                        external: bool = False) -> np.ndarray | None:
    """The value of a `Constant` node, whatever attribute holds it."""
    attrs = node.attrs
    if "value" in attrs:
        return _array(attrs["value"], max_elements=max_elements, external=external)
    if "value_float" in attrs:
        return np.array(attrs["value_float"], dtype=np.float32)
    if "value_floats" in attrs:
        return np.array(list(attrs["value_floats"]), dtype=np.float32)
    if "value_int" in attrs:
        return np.array(attrs["value_int"], dtype=np.int64)
    if "value_ints" in attrs:
        return np.array(list(attrs["value_ints"]), dtype=np.int64)
    return None


def value(tensor: gs.Tensor | None, *, max_elements: int | None = None,
          external: bool = False) -> np.ndarray | None:
    """The value of an initializer or a `Constant` node's output, else None.

    Larger than `max_elements`: None. A tensor whose bytes are in an external-data file:
    None, unless `external` (then a tensor left in its file by `onnx_weights.load_graph` is
    read from it)."""
    if tensor is None or tensor.is_empty():
        return None
    if isinstance(tensor, gs.Constant):
        held: object = tensor._values
        node = None
    else:
        node = constant_node(tensor)
        if node is None:
            return None
        held = node.attrs.get("value", node)
    cached = tensor.__dict__.get(_VALUE)
    if cached is not None and cached[0] is held and cached[1] == (max_elements, external):
        return cached[2]
    if node is None:
        arr = _array(tensor, max_elements=max_elements, external=external)
    else:
        arr = constant_node_value(node, max_elements=max_elements, external=external)
    if arr is None or arr.size <= _CACHED_ELEMENTS:  # weights are read anew, never kept
        tensor.__dict__[_VALUE] = (held, (max_elements, external), arr)
    return arr


def has_value(tensor: gs.Tensor) -> bool:
    """Whether `value(tensor)` would find a value (without reading it)."""
    if tensor.is_empty():
        return False
    if isinstance(tensor, gs.Constant):
        if isinstance(tensor._values, SparseValues):
            return False
        proto = proto_of(tensor)
        return proto is None or not is_external(proto)
    node = constant_node(tensor)
    if node is None:
        return False
    held = node.attrs.get("value")
    if isinstance(held, gs.Constant):
        return has_value(held)
    return any(k in node.attrs for k in ("value_float", "value_floats", "value_int",
                                         "value_ints"))


def literal(graph: gs.Graph, tensor: gs.Tensor | None) -> np.ndarray | None:
    """A small constant (≤ MAX_LITERAL_ELEMENTS, held in the model) no feed can replace."""
    if tensor is None or overridable(graph, tensor):
        return None
    return value(tensor, max_elements=MAX_LITERAL_ELEMENTS)


def array_of(held: object) -> np.ndarray | None:
    """The values a graphsurgeon Constant, a TensorProto or an array holds (else None)."""
    return _array(held, max_elements=None, external=True)


def attr_array(node: gs.Node, name: str) -> np.ndarray | None:
    """A tensor attribute's values (a graphsurgeon Constant, a TensorProto or an array)."""
    return array_of(node.attrs.get(name))


def _numel(dims: Iterable[int]) -> int:
    dims = list(dims)
    return int(np.prod(dims)) if dims else 1


def _has_inline_data(t: onnx.TensorProto) -> bool:
    return not is_external(t) and bool(
        t.raw_data or t.float_data or t.int32_data or t.int64_data or t.double_data
        or _numel(t.dims) == 0)


def _constant_proto(tensor: gs.Constant) -> onnx.TensorProto:
    proto = proto_of(tensor)
    if proto is not None:
        proto.name = tensor.name
        return proto
    arr = np.asarray(tensor._values)
    out = numpy_helper.from_array(arr, tensor.name)
    return out
