"""The one graph: onnx-graphsurgeon's `gs.Graph`, for every ONNX pass, recogniser and check.

`load(model)` imports a `ModelProto` with graphsurgeon's importer; `save(graph, model)` writes
the graph back into that same `ModelProto`, in place. Around those two, this module holds
what every pass shares, written once:

- the producer/consumer index: graphsurgeon's own tensor ↔ node links (`producer`,
  `consumers`, `users`). A subgraph node that reads an outer tensor is linked to it too, so
  an If/Loop/Scan body's read counts as a user;
- the one type inference (`infer_types`, `type_of`): ONNX shape inference on a skeleton
  of the graph (big initializers keep their dims, not their bytes; ONNX Runtime's contrib
  GELU ops typed through stand-ins), cached on the graph until its node list changes;
- the one subgraph walk (`walk`);
- constants (`value`, `literal`, `is_weights`): initializers and `Constant` nodes read on
  demand; a tensor left in its external-data file (`onnx_weights.load_graph`) stays a
  reference (graphsurgeon's `LazyValues` holds its `TensorProto`) and is read only when a
  pass asks for it with `external=True`;
- editing (`node`, `constant`, `clone`, `set_input`, `set_nodes`, `fresh_name`): new nodes
  with unique names; links changed by identity (graphsurgeon's lists remove by equality,
  which confuses a node with its unchanged clone).

What graphsurgeon's exporter would drop or reorder is carried across by `save`: a node that
no pass changed is written as its original `NodeProto` (metadata_props — the dynamo
exporter's module scopes —, doc_string, attributes graphsurgeon does not import); a changed
node gets those back from the node it was imported as (`like=` for new nodes: the module
scopes of the node they replace). Initializers are edited in place, in their order: a
weight no pass touched is never copied, and one no node read before the passes stays. Graph
inputs that are also initializers, value infos, the model's metadata, local functions no pass
changed, and the opset imports (plus any domain a new node uses) stay as they were.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper, numpy_helper
from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter, dtype_to_onnx
from onnx_graphsurgeon.ir.tensor import LazyValues, SparseValues
from onnx_graphsurgeon.logger import G_LOGGER

from export_gelu.onnx_weights import is_external, is_lazy, tensor_array

DEFAULT_DOMAINS = ("", "ai.onnx")
FLOAT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                         onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE})
#: Constants with more elements than this are never read as formula literals.
MAX_LITERAL_ELEMENTS = 64
#: Initializers up to this many elements keep their values in the inference skeleton.
_SKELETON_KEEP_ELEMENTS = 64
#: Values up to this many elements are kept once read (larger ones are read each time).
_CACHED_ELEMENTS = 4096

# What is kept on graphsurgeon's objects (their own attributes, as gs's `node.id` is):
_SRC = "_eg_src"  # node / graph / function: the proto it was imported from
_KEY = "_eg_key"  # node: its op, domain, tensor names and attributes on import
_META = "_eg_meta"  # new node: the NodeProto whose metadata_props it carries
_TYPE = "_eg_type"  # tensor: (dtype, shape) as imported, to tell a type a pass changed
_VALUE = "_eg_value"  # tensor: its value as last read (with what held it, and how read)
# graph-level entries live in the gs.Graph's __dict__ (its __getattr__ logs misses)
_G_ROOT, _G_MODEL, _G_TYPES, _G_NAMES, _G_MADE = ("_eg_root", "_eg_model", "_eg_types",
                                                  "_eg_names", "_eg_made")
_G_UNREAD, _G_INPUT_INITS, _G_DOMAINS = "_eg_unread", "_eg_input_inits", "_eg_domains"
_G_UNREAD_CONSTS = "_eg_unread_consts"
# edits counted (`_edited`), the count when the model last matched the graph, tensor maps
_G_SYNCED, _G_TENSORS = "_eg_synced", "_eg_tensors"
#: Edits made by the helpers here, counted (caches hold the count they were made at).
_EDITS = [0]

#: Attribute types graphsurgeon's importer reads (the others it skips: carried by `save`).
_GS_ATTR_TYPES = frozenset({onnx.AttributeProto.FLOAT, onnx.AttributeProto.INT,
                            onnx.AttributeProto.STRING, onnx.AttributeProto.TENSOR,
                            onnx.AttributeProto.GRAPH, onnx.AttributeProto.FLOATS,
                            onnx.AttributeProto.INTS, onnx.AttributeProto.STRINGS})


@dataclass(frozen=True)
class TensorType:
    """Element type and shape (ints, symbolic names, or None per dim; None when rank unknown)."""

    elem_type: int  # onnx.TensorProto.DataType, 0 when unknown
    shape: tuple[int | str | None, ...] | None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def last_dim(self) -> int | None:
        if not self.shape:
            return None
        last = self.shape[-1]
        return last if isinstance(last, int) else None

    def type_str(self) -> str | None:
        """'tensor(float)' and the like, as operator schemas spell type constraints."""
        if not self.elem_type:
            return None
        return f"tensor({onnx.TensorProto.DataType.Name(self.elem_type).lower()})"


# -- names ------------------------------------------------------------------------------------

class Names:
    """Allocates node and tensor names that are unique in the graph."""

    def __init__(self, taken: set[str]) -> None:
        self.taken = taken

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.taken:
            i += 1
            name = f"{base}_{i}"
        self.taken.add(name)
        return name


def _gdict(graph: gs.Graph) -> dict:
    return graph.__dict__


def root_of(graph: gs.Graph) -> gs.Graph:
    """The main graph a subgraph belongs to (the graph itself for the main graph)."""
    return _gdict(graph).get(_G_ROOT) or graph


def names(graph: gs.Graph) -> Names:
    """The name allocator of `graph`'s model: every node and tensor name, subgraphs too."""
    root = root_of(graph)
    found = _gdict(root).get(_G_NAMES)
    if found is None:
        taken: set[str] = set()
        for g in graphs(root):
            taken.update(n.name for n in g.nodes)
            taken.update(t.name for n in g.nodes for t in (*n.inputs, *n.outputs))
            taken.update(t.name for t in (*g.inputs, *g.outputs))
            src = _gdict(g).get(_SRC)
            if src is not None:
                taken.update(i.name for i in src.initializer)
                taken.update(v.name for v in src.value_info)
        taken.discard("")
        found = _gdict(root)[_G_NAMES] = Names(taken)
    return found


def fresh_name(graph: gs.Graph, base: str) -> str:
    """A tensor or node name not used anywhere in the model yet."""
    return names(graph).fresh(base or "t")


def unique_node_names(graph: gs.Graph) -> int:
    """Name unnamed nodes and rename duplicates in the main graph (ONNX Runtime refuses
    them); returns how many were renamed."""
    seen: set[str] = set()
    taken = {n.name for n in graph.nodes if n.name}
    changed = 0
    for i, node in enumerate(graph.nodes):
        if node.name and node.name not in seen:
            seen.add(node.name)
            continue
        base = node.name or f"{node.op}_{i}"
        name, k = base, 1
        while name in taken or name in seen:
            k += 1
            name = f"{base}__{k}"
        node.name = name
        seen.add(name)
        taken.add(name)
        changed += 1
    if changed:
        _gdict(root_of(graph)).pop(_G_NAMES, None)
    return changed


# -- import -----------------------------------------------------------------------------------

def _node_key(node: gs.Node) -> tuple:
    attrs = node.attrs
    return (node.op, node.domain, [t.name for t in node.inputs],
            [t.name for t in node.outputs],
            {k: list(v) if type(v) is list else v for k, v in attrs.items()} if attrs else {})


def _same_attrs(now: dict, then: dict) -> bool:
    if now.keys() != then.keys():
        return False
    for k, v in now.items():
        old = then[k]
        if isinstance(v, (gs.Tensor, gs.Graph, onnx.TensorProto, np.ndarray)) \
                or isinstance(old, (gs.Tensor, gs.Graph)):
            if v is not old:
                return False
        elif type(v) is not type(old) or v != old:
            return False
    return True


def _unchanged(node: gs.Node) -> bool:
    """Whether `node` is still what it was imported as (names of nodes aside)."""
    key = getattr(node, _KEY, None)
    if key is None:
        return False
    op, domain, ins, outs, attrs = key
    return (node.op == op and node.domain == domain and len(node.inputs) == len(ins)
            and all(t.name == n for t, n in zip(node.inputs, ins))
            and len(node.outputs) == len(outs)
            and all(t.name == n for t, n in zip(node.outputs, outs))
            and _same_attrs(node.attrs, attrs))


def _read_names(graph: gs.Graph) -> set[str]:
    """Every tensor name a node of `graph` or of its subgraphs reads, and its outputs."""
    found = {t.name for t in graph.outputs}
    for node in walk(graph):
        found.update(t.name for t in node.inputs)
    return found


def _pair(graph: gs.Graph, src: onnx.GraphProto | onnx.FunctionProto, root: gs.Graph) -> None:
    """Remember, on each graphsurgeon object, the proto it came from and how it looked."""
    d = _gdict(graph)
    d[_SRC] = src
    if graph is not root:
        d[_G_ROOT] = root
    for node, proto in zip(graph.nodes, src.node):
        nd = node.__dict__  # not setattr: gs.Node's __setattr__ is slow on 100k nodes
        nd[_SRC] = proto
        nd[_KEY] = _node_key(node)
        if node.attrs:
            for name, sub in node.attrs.items():
                if isinstance(sub, gs.Graph):
                    sub_src = next((a.g for a in proto.attribute if a.name == name), None)
                    if sub_src is not None:
                        _pair(sub, sub_src, root)
    for tensor in _own_tensors(graph).values():
        if isinstance(tensor, gs.Variable) and (tensor.dtype is not None
                                                or tensor.shape is not None):
            tensor.__dict__[_TYPE] = _type_key(tensor)
    if isinstance(src, onnx.GraphProto):
        read = _read_names(graph)
        d[_G_UNREAD] = {i.name for i in src.initializer} - read
        d[_G_INPUT_INITS] = {i.name for i in src.input} & {i.name for i in src.initializer}


def _type_key(tensor: gs.Tensor) -> tuple:
    shape = tensor.shape
    return (tensor.dtype, None if shape is None else list(shape))


def load(model: onnx.ModelProto) -> gs.Graph:
    """`model` as a graphsurgeon graph; initializers stay the model's own `TensorProto`s."""
    with G_LOGGER.suppress(G_LOGGER.ERROR):
        graph = gs.import_onnx(model)
    _pair(graph, model.graph, graph)
    for fn, proto in zip(graph.functions, model.functions):
        _pair(fn, proto, graph)
    _gdict(graph)[_G_MODEL] = model
    _gdict(graph)[_G_DOMAINS] = {i.domain: int(i.version) for i in model.opset_import}
    _gdict(graph)[_G_SYNCED] = _version(graph)
    return graph


@contextmanager
def editing(model: onnx.ModelProto) -> Iterator[gs.Graph]:
    """Load `model`, hand its graph to the block, and save it back into `model` after."""
    graph = load(model)
    yield graph
    save(graph, model)


# -- the walk and the index --------------------------------------------------------------------

def graphs(graph: gs.Graph) -> Iterator[gs.Graph]:
    """`graph` and its subgraphs (If/Loop/Scan bodies), recursively: the one subgraph walk."""
    yield graph
    for node in graph.nodes:
        for value in node.attrs.values():
            if isinstance(value, gs.Graph):
                yield from graphs(value)


def walk(graph: gs.Graph) -> Iterator[gs.Node]:
    """Every node of `graph` and of its subgraphs."""
    for g in graphs(graph):
        yield from g.nodes


def subgraphs(node: gs.Node) -> list[gs.Graph]:
    return [v for v in node.attrs.values() if isinstance(v, gs.Graph)]


def is_default(node: gs.Node) -> bool:
    """Whether the node is in the default ONNX domain."""
    return (node.domain or "") in DEFAULT_DOMAINS


def producer(tensor: gs.Tensor) -> gs.Node | None:
    return tensor.inputs[0] if tensor.inputs else None


def consumers(tensor: gs.Tensor) -> list[gs.Node]:
    """The nodes that read `tensor`, subgraph nodes included."""
    return list(tensor.outputs)


def is_output(graph: gs.Graph, tensor: gs.Tensor) -> bool:
    return any(o is tensor or o.name == tensor.name for o in graph.outputs)


def users(graph: gs.Graph, tensor: gs.Tensor) -> int:
    """How many node inputs read `tensor` (a subgraph's too), plus one for a graph output."""
    return len(tensor.outputs) + int(is_output(graph, tensor))


def is_used(graph: gs.Graph, tensor: gs.Tensor) -> bool:
    return not tensor.is_empty() and users(graph, tensor) > 0


def tensors(graph: gs.Graph) -> dict[str, gs.Tensor]:
    """Name → tensor of every tensor the graph's nodes and inputs/outputs use."""
    return _own_tensors(graph)


def node_named(graph: gs.Graph) -> dict[str, gs.Node]:
    return {n.name: n for n in graph.nodes}


def metadata_props(node: gs.Node) -> list[onnx.StringStringEntryProto]:
    """The node's metadata_props (the dynamo exporter's module scopes): those it was imported
    with, or those of the node it was made `like`."""
    src = node.__dict__.get(_SRC) or node.__dict__.get(_META)
    return list(src.metadata_props) if src is not None else []


def attr(node: gs.Node, name: str, default: object = None) -> object:
    return node.attrs.get(name, default)


def opset(graph: gs.Graph, domain: str = "") -> int:
    """The model's opset for `domain` (the default domain's: what `graph.opset` says)."""
    root = root_of(graph)
    if domain in DEFAULT_DOMAINS:
        return int(root.opset or 0)
    return _gdict(root).get(_G_DOMAINS, {}).get(domain, 0)


def use_domain(graph: gs.Graph, domain: str, version: int = 1) -> None:
    """Import `domain` at `version` when saved (a domain already imported stays as it is)."""
    _gdict(root_of(graph)).setdefault(_G_DOMAINS, {}).setdefault(domain, version)


def set_opset(graph: gs.Graph, version: int) -> None:
    """Set the default-domain opset of the model and of its local functions."""
    root = root_of(graph)
    root.opset = version
    for fn in root.functions:
        fn.opset = version


# -- constants --------------------------------------------------------------------------------

def overridable(graph: gs.Graph, tensor: gs.Tensor) -> bool:
    """An initializer that is also a graph input (a feed may replace its value)."""
    return tensor.name in _gdict(graph).get(_G_INPUT_INITS, ())


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
    try:
        return int(dtype_to_onnx(dtype))
    except (TypeError, ValueError, KeyError):
        return 0


def initializers(graph: gs.Graph) -> list[gs.Constant]:
    """Every initializer `save` would write: those the nodes read, and those no node read
    when the model was loaded (which stay; a pass may change their values)."""
    own = [t for t in _own_tensors(graph).values() if isinstance(t, gs.Constant)]
    d = _gdict(graph)
    unread = d.get(_G_UNREAD)
    if unread:
        found = d.setdefault(_G_UNREAD_CONSTS, {})
        for p in d[_SRC].initializer:
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


# -- types ------------------------------------------------------------------------------------

def _numel(dims: Iterable[int]) -> int:
    dims = list(dims)
    return int(np.prod(dims)) if dims else 1


def _has_inline_data(t: onnx.TensorProto) -> bool:
    return not is_external(t) and bool(
        t.raw_data or t.float_data or t.int32_data or t.int64_data or t.double_data
        or _numel(t.dims) == 0)


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
    model: onnx.ModelProto = _gdict(graph)[_G_MODEL]
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
    cached = _gdict(root).get(_G_TYPES)
    if cached is not None:
        return cached
    types: dict[str, TensorType] = {}
    d = _gdict(root)
    if d.get(_G_SYNCED, -1) == _version():  # the model holds the graph as it is
        sk = _typeable(skeleton(d[_G_MODEL]))
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
    _gdict(root)[_G_TYPES] = types
    return types


def forget_types(graph: gs.Graph) -> None:
    """Drop what is cached about the graph: its types, and the tensor maps (after the node
    list changed, or an edit not made with the helpers here: an attribute, a dtype)."""
    _gdict(root_of(graph)).pop(_G_TYPES, None)
    _edited(graph)


def type_of(graph: gs.Graph, tensor: gs.Tensor | str | None) -> TensorType | None:
    """What the model states or inference derives about one tensor (None: nothing)."""
    if tensor is None:
        return None
    name = tensor if isinstance(tensor, str) else tensor.name
    if not name:
        return None
    return infer_types(graph).get(name)


# -- editing ----------------------------------------------------------------------------------

def _made(graph: gs.Graph) -> list[gs.Node]:
    return _gdict(graph).setdefault(_G_MADE, [])


def variable(graph: gs.Graph, base: str, elem_type: int | None = None,
             shape: Iterable | None = None) -> gs.Variable:
    """A new tensor with a fresh name (typed when `elem_type` is given: saved as value info)."""
    return gs.Variable(fresh_name(graph, base), dtype=elem_type or None,
                       shape=None if shape is None else list(shape))


def constant(graph: gs.Graph, values: np.ndarray, base: str) -> gs.Constant:
    """A new initializer holding `values`, with a fresh name."""
    return gs.Constant(fresh_name(graph, base), np.asarray(values))


def constant_named(values: np.ndarray | onnx.TensorProto, name: str) -> gs.Constant:
    """A new initializer called exactly `name` (a value replacing a node's output)."""
    if isinstance(values, onnx.TensorProto):
        values.name = name
        return gs.Constant(name, LazyValues(values))
    return gs.Constant(name, np.asarray(values))


def scalar(graph: gs.Graph, number: float, elem_type: int, base: str) -> gs.Constant:
    """A new scalar initializer of ONNX element type `elem_type` (bf16 included)."""
    name = fresh_name(graph, base)
    return gs.Constant(name, LazyValues(helper.make_tensor(name, elem_type, [], [number])))


def node(graph: gs.Graph, op: str, inputs: Iterable[gs.Tensor], *, base: str = "",
         outputs: Iterable[gs.Tensor] | None = None, n_out: int = 1, domain: str | None = None,
         name: str | None = None, like: gs.Node | None = None, **attrs: object) -> gs.Node:
    """A new node (not yet in the graph's node list: `set_nodes` places it) with a unique
    name and fresh output tensors unless `outputs` are given; `like`: the node whose module
    scopes (metadata_props) it carries."""
    base = base or op
    outs = list(outputs) if outputs is not None else [
        variable(graph, f"{base}_{op.lower()}") for _ in range(n_out)]
    new = gs.Node(op, name or fresh_name(graph, f"{base}/{op}"), attrs=dict(attrs),
                  inputs=list(inputs), outputs=outs, domain=domain or None)
    if like is not None:
        src = getattr(like, _SRC, None) or getattr(like, _META, None)
        if src is not None:
            setattr(new, _META, src)
    if domain:
        use_domain(graph, domain)
    _made(graph).append(new)
    _edited(graph)
    return new


def clone(graph: gs.Graph, old: gs.Node) -> gs.Node:
    """A copy of `old` (same name, attributes, tensors) to change in place of it."""
    new = gs.Node(old.op, old.name, attrs=copy.copy(old.attrs), inputs=list(old.inputs),
                  outputs=list(old.outputs), domain=old.domain)
    src = getattr(old, _SRC, None)
    if src is not None:
        setattr(new, _SRC, src)
    _made(graph).append(new)
    return new


def _edited_node(node: gs.Node) -> None:
    """A node's links changed."""
    _edited()


def _unlink(items: list, obj: object) -> None:
    for i, item in enumerate(items):
        if item is obj:
            list.__delitem__(items, i)
            return


def set_input(node: gs.Node, index: int, tensor: gs.Tensor) -> None:
    """Make input `index` of `node` read `tensor` (links changed by identity)."""
    old = node.inputs[index]
    _unlink(old.outputs, node)
    list.__setitem__(node.inputs, index, tensor)
    list.append(tensor.outputs, node)
    _edited_node(node)


def set_output(node: gs.Node, index: int, tensor: gs.Tensor) -> None:
    """Make output `index` of `node` be `tensor`."""
    old = node.outputs[index]
    _unlink(old.inputs, node)
    list.__setitem__(node.outputs, index, tensor)
    list.append(tensor.inputs, node)
    _edited_node(node)


def trim_inputs(node: gs.Node, keep: int) -> None:
    """Drop the node's inputs from index `keep` on."""
    while len(node.inputs) > keep:
        tensor = list.pop(node.inputs)
        _unlink(tensor.outputs, node)
    _edited_node(node)


def trim_outputs(node: gs.Node, keep: int) -> None:
    """Drop the node's outputs from index `keep` on."""
    while len(node.outputs) > keep:
        tensor = list.pop(node.outputs)
        _unlink(tensor.inputs, node)
    _edited_node(node)


def detach(node: gs.Node) -> None:
    """Unlink `node` from every tensor it reads or writes."""
    for t in node.inputs:
        _unlink(t.outputs, node)
    for t in node.outputs:
        _unlink(t.inputs, node)
    list.clear(node.inputs)
    list.clear(node.outputs)
    _edited_node(node)


def set_nodes(graph: gs.Graph, nodes: list[gs.Node]) -> None:
    """Make `nodes` the graph's node list. Nodes of the old list or made since (`node`,
    `clone`) that are not in it are unlinked, and `Constant` nodes only they read go too."""
    keep = {id(n) for n in nodes}
    dropped = [n for n in (*graph.nodes, *_made(graph)) if id(n) not in keep]
    _made(graph).clear()
    released = [t for n in dropped for t in n.inputs]
    for n in dropped:
        detach(n)
    gone: set[int] = set()
    for t in released:
        const = constant_node(t)
        if const is not None and id(const) not in gone and id(const) in keep and not any(
                o.outputs or is_output(graph, o) for o in const.outputs):
            gone.add(id(const))
            detach(const)
    graph.nodes = [n for n in nodes if id(n) not in gone]
    forget_types(graph)


def drop_unread(graph: gs.Graph, tensors: Iterable[gs.Tensor]) -> None:
    """Remove the nodes that computed `tensors` and that nothing reads any more,
    transitively (a cone a fix stopped reading); graph outputs stay."""
    stack = list(tensors)
    dead: set[int] = set()
    while stack:
        t = stack.pop()
        node = producer(t)
        if node is None or id(node) in dead or any(o.outputs or is_output(graph, o)
                                                   for o in node.outputs):
            continue
        dead.add(id(node))
        ins = list(node.inputs)
        detach(node)
        stack.extend(ins)
    if dead:
        graph.nodes = [n for n in graph.nodes if id(n) not in dead]
        forget_types(graph)


# -- export -----------------------------------------------------------------------------------

def _constant_proto(tensor: gs.Constant) -> onnx.TensorProto:
    proto = proto_of(tensor)
    if proto is not None:
        proto.name = tensor.name
        return proto
    arr = np.asarray(tensor._values)
    out = numpy_helper.from_array(arr, tensor.name)
    return out


def _attribute(key: str, val: object, src: onnx.NodeProto | None) -> onnx.AttributeProto:
    if isinstance(val, gs.Constant):
        return helper.make_attribute(key, _constant_proto(val))
    if isinstance(val, np.ndarray):
        return helper.make_attribute(key, numpy_helper.from_array(val))
    if isinstance(val, (list, tuple)) and not val:
        old = next((a for a in (src.attribute if src is not None else ()) if a.name == key),
                   None)
        a = onnx.AttributeProto(name=key, type=old.type if old is not None
                                else onnx.AttributeProto.INTS)
        return a
    (out,) = OnnxExporter.export_attributes({key: val})
    return out


def _carry(proto: onnx.NodeProto, node: gs.Node) -> None:
    src = getattr(node, _SRC, None)
    if src is not None:
        proto.metadata_props.extend(src.metadata_props)
        proto.doc_string = src.doc_string
        if src.HasField("overload"):
            proto.overload = src.overload
        have = {a.name for a in proto.attribute}
        proto.attribute.extend(a for a in src.attribute if a.type not in _GS_ATTR_TYPES
                               and a.name not in have)
        return
    meta = getattr(node, _META, None)
    if meta is not None:
        proto.metadata_props.extend(meta.metadata_props)


def _node_proto(node: gs.Node, outer: frozenset[str]) -> onnx.NodeProto:
    """The node as a NodeProto: the one it was imported as when no pass changed it."""
    src = getattr(node, _SRC, None)
    has_graphs = any(isinstance(v, gs.Graph) for v in node.attrs.values())
    if src is not None and _unchanged(node):
        if not has_graphs and node.name == src.name:
            return src
        proto = onnx.NodeProto()
        proto.CopyFrom(src)
        proto.name = node.name
        if has_graphs:
            local = outer | _local_names(node)
            for a in proto.attribute:
                if a.type == onnx.AttributeProto.GRAPH and isinstance(node.attrs.get(a.name),
                                                                      gs.Graph):
                    a.g.CopyFrom(_graph_proto(node.attrs[a.name], local))
        return proto
    proto = helper.make_node(node.op, [t.name for t in node.inputs],
                             [t.name for t in node.outputs], name=node.name, domain=node.domain)
    for key, val in node.attrs.items():
        if isinstance(val, gs.Graph):
            proto.attribute.append(helper.make_attribute(
                key, _graph_proto(val, outer | _local_names(node))))
        else:
            proto.attribute.append(_attribute(key, val, src))
    _carry(proto, node)
    return proto


def node_protos(nodes: Iterable[gs.Node]) -> list[onnx.NodeProto]:
    """The nodes as NodeProtos (for a small model of a few of them, e.g. to evaluate)."""
    return [_node_proto(n, frozenset()) for n in nodes]


def _local_names(node: gs.Node) -> frozenset[str]:
    return frozenset(t.name for t in (*node.inputs, *node.outputs))


def _graph_proto(graph: gs.Graph, outer: frozenset[str]) -> onnx.GraphProto:
    """A subgraph as a GraphProto (its original one, edited where the passes changed it)."""
    src = _gdict(graph).get(_SRC)
    if src is None:
        return OnnxExporter.export_graph(graph, do_type_check=False)
    proto = onnx.GraphProto()
    proto.CopyFrom(src)
    _write(graph, proto, outer)
    return proto


def _value_info(tensor: gs.Tensor, original: onnx.ValueInfoProto | None = None
                ) -> onnx.ValueInfoProto:
    """The tensor's value info: its original one unless a pass changed its type."""
    if original is not None and (not original.type.HasField("tensor_type")
                                 or getattr(tensor, _TYPE, None) == _type_key(tensor)):
        return original
    if tensor.dtype is None and tensor.shape is None:
        return onnx.ValueInfoProto(name=tensor.name)
    return OnnxExporter.export_value_info_proto(tensor, do_type_check=False)


def _replace(field: object, items: list) -> None:
    """Make a repeated proto field hold `items` (nothing is written when it already does)."""
    if len(items) == len(field) and all(a is b for a, b in zip(items, field)):  # type: ignore
        return
    del field[:]  # type: ignore[attr-defined]  (the items stay valid: extend copies them)
    field.extend(items)  # type: ignore[attr-defined]


def _own_tensors(graph: gs.Graph) -> dict[str, gs.Tensor]:
    """graphsurgeon's tensor map of `graph`, kept until an edit made here (not to modify)."""
    d = _gdict(graph)
    version = _version(graph)
    cached = d.get(_G_TENSORS)
    if cached is not None and cached[0] == version:
        return cached[1]
    with G_LOGGER.suppress(G_LOGGER.ERROR):  # a subgraph output named like an outer tensor
        found = graph.tensors()
    d[_G_TENSORS] = (version, found)
    return found


def _version(graph: gs.Graph | None = None) -> int:
    """How many edits the helpers here have made (to any graph)."""
    return _EDITS[0]


def _edited(graph: gs.Graph | None = None) -> None:
    """Count an edit: tensor maps cached before it are stale."""
    _EDITS[0] += 1


def _write(graph: gs.Graph, proto: onnx.GraphProto, outer: frozenset[str]) -> None:
    """Write `graph` into `proto` (which holds what it was imported from), in place."""
    own = _own_tensors(graph)
    scope = outer | frozenset(own)
    known = {name for n in proto.node for name in (*n.input, *n.output)}
    _replace(proto.node, [_node_proto(n, scope) for n in graph.nodes])

    read = _read_names(graph)
    unread = _gdict(graph).get(_G_UNREAD, set())
    input_names = {i.name for i in proto.input}
    consts = {name: t for name, t in own.items() if isinstance(t, gs.Constant)
              and name not in outer and not isinstance(t._values, SparseValues)}
    inits = proto.initializer
    for i in reversed(range(len(inits))):
        p = inits[i]
        c = consts.pop(p.name, None)
        if c is None and p.name in unread:  # read by no node: a pass may have changed it
            c = _gdict(graph).get(_G_UNREAD_CONSTS, {}).get(p.name)
            if c is not None and proto_of(c) is not p:
                inits[i].CopyFrom(_constant_proto(c))
            continue
        if c is None:
            if p.name not in read and p.name not in unread and p.name not in input_names:
                del inits[i]  # no node reads it any more: the passes dropped its users
        elif proto_of(c) is not p:
            inits[i].CopyFrom(_constant_proto(c))  # values a pass changed
    inits.extend(_constant_proto(c) for c in consts.values())

    kept_inits = {i.name for i in inits}
    old_inputs = {v.name: v for v in proto.input}
    gs_inputs = {t.name: t for t in graph.inputs}
    inputs = []
    for vi in proto.input:
        if vi.name in gs_inputs:
            inputs.append(_value_info(gs_inputs.pop(vi.name), vi))
        elif vi.name in kept_inits:  # an initializer that is also an input
            init = next(i for i in inits if i.name == vi.name)
            tt = vi.type.tensor_type
            if vi.type.HasField("tensor_type") and tt.elem_type != init.data_type:
                vi = copy.copy(vi)  # a pass changed its type (DOUBLE → FLOAT)
                vi.type.tensor_type.elem_type = init.data_type
            inputs.append(vi)
    inputs += [_value_info(t, old_inputs.get(t.name)) for t in gs_inputs.values()]
    _replace(proto.input, inputs)
    old_outputs = {v.name: v for v in proto.output}
    _replace(proto.output, [_value_info(t, old_outputs.get(t.name)) for t in graph.outputs])

    io = {t.name for t in (*graph.inputs, *graph.outputs)}
    infos = []
    for vi in proto.value_info:
        t = own.get(vi.name)
        if isinstance(t, gs.Variable) and t.name not in io:
            infos.append(_value_info(t, vi))
        elif t is not None or vi.name in read or vi.name not in known:
            infos.append(vi)  # constants, io, and entries about no tensor of the graph
        # else: a tensor of the graph the passes removed
    stated = {vi.name for vi in proto.value_info}
    infos += [_value_info(t) for name, t in own.items()
              if name not in stated and name not in io and name not in outer
              and isinstance(t, gs.Variable) and (t.dtype is not None or t.shape is not None)]
    _replace(proto.value_info, infos)


def _opset_imports(graph: gs.Graph, imports: Iterable[onnx.OperatorSetIdProto]
                   ) -> list[onnx.OperatorSetIdProto]:
    out = [copy.copy(i) for i in imports]
    have = {i.domain for i in out}
    for imp in out:
        if imp.domain in DEFAULT_DOMAINS and graph.opset and imp.version != graph.opset:
            imp.version = int(graph.opset)
    if not have & set(DEFAULT_DOMAINS) and graph.opset:
        out.insert(0, helper.make_opsetid("", int(graph.opset)))
    wanted = _gdict(root_of(graph)).get(_G_DOMAINS, {})
    used = {n.domain for n in walk(graph)} | {n.domain for f in graph.functions
                                               for n in f.nodes}
    for domain in sorted(d for d in used if d and d not in have and d not in DEFAULT_DOMAINS):
        out.append(helper.make_opsetid(domain, wanted.get(domain, 1)))
    return out


def opset_imports(graph: gs.Graph) -> list[onnx.OperatorSetIdProto]:
    """The model's opset imports as `save` would write them now."""
    root = root_of(graph)
    return _opset_imports(root, _gdict(root)[_G_MODEL].opset_import)


def _write_function(fn: gs.Function, proto: onnx.FunctionProto) -> None:
    if fn.opset:
        for imp in proto.opset_import:
            if imp.domain in DEFAULT_DOMAINS and imp.version != fn.opset:
                imp.version = int(fn.opset)
    consts = [t for t in _own_tensors(fn).values() if isinstance(t, gs.Constant)]
    nodes = [_node_proto(n, frozenset()) for n in fn.nodes]
    if not consts and len(nodes) == len(proto.node) and all(
            a is b for a, b in zip(nodes, proto.node)):
        return
    # a function has no initializers: constants a pass made become Constant nodes
    made = [helper.make_node("Constant", [], [c.name], value=_constant_proto(c)) for c in consts]
    _replace(proto.node, made + nodes)


def save(graph: gs.Graph, model: onnx.ModelProto) -> onnx.ModelProto:
    """Write `graph` back into `model` (the model it was loaded from), in place; returns it."""
    with G_LOGGER.suppress(G_LOGGER.ERROR):
        _write(graph, model.graph, frozenset())
    for fn, proto in zip(graph.functions, model.functions):
        _write_function(fn, proto)
    imports = _opset_imports(graph, model.opset_import)
    if [(i.domain, i.version) for i in imports] != [(i.domain, i.version)
                                                   for i in model.opset_import]:
        del model.opset_import[:]
        model.opset_import.extend(imports)
    if graph.ir_version is not None and graph.ir_version != model.ir_version:
        model.ir_version = int(graph.ir_version)
    if _gdict(graph).get(_G_MODEL) is model:
        _gdict(graph)[_G_SYNCED] = _version(graph)
    return model


def has_subgraphs(model: onnx.ModelProto) -> bool:
    """Whether the model has local functions or a node with a subgraph (If/Loop/Scan)."""
    return bool(model.functions) or any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        for n in model.graph.node for a in n.attribute)


# -- a model without its weights ----------------------------------------------------------------

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
