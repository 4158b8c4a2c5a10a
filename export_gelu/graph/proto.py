"""The one graph to and from its `ModelProto`: `load` imports with graphsurgeon's importer,
`save` writes back into the same model, in place, keeping what graphsurgeon's exporter would
drop or reorder.

A node no pass changed is written as its original `NodeProto` (metadata_props — the dynamo
exporter's module scopes —, doc_string, overload, attributes graphsurgeon does not import); a
changed node gets those back from the node it was imported as (a new node made `like=`
another carries that node's module scopes). Initializers are edited in place, in their order:
a weight no pass touched is never copied, and one no node read before the passes stays.
Graph inputs that are also initializers, value infos (a type a pass changed is rewritten),
the model's metadata, local functions no pass changed, sparse initializers and the opset
imports (plus any domain a new node uses) stay as they were.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol, TypeVar

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper, numpy_helper
from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter
from onnx_graphsurgeon.ir.tensor import SparseValues
from onnx_graphsurgeon.logger import G_LOGGER

from export_gelu.graph.index import (
    _KEY,
    _MADE_AT,
    _META,
    _SRC,
    _TYPE,
    DEFAULT_DOMAINS,
    _own_tensors,
    _version,
    graphs,
    root_of,
    walk,
)
from export_gelu.graph.session import loaded_model, session_of
from export_gelu.graph.values import (
    _constant_proto,
    proto_of,
)

M = TypeVar("M")


class _Repeated(Protocol[M]):
    """What `_replace` uses of a repeated proto field (protobuf ships no type stubs)."""

    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[M]: ...
    def __delitem__(self, key: slice) -> None: ...
    def extend(self, items: Iterable[M]) -> None: ...

#: Attribute types graphsurgeon's importer reads (the others it skips: carried by `save`).
_GS_ATTR_TYPES = frozenset({onnx.AttributeProto.FLOAT, onnx.AttributeProto.INT,
                            onnx.AttributeProto.STRING, onnx.AttributeProto.TENSOR,
                            onnx.AttributeProto.GRAPH, onnx.AttributeProto.FLOATS,
                            onnx.AttributeProto.INTS, onnx.AttributeProto.STRINGS})


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


def _read_names(graph: gs.Graph, own: dict[str, gs.Tensor]) -> set[str]:
    """Every tensor name the graph's nodes use (`own`: its tensor map), its outputs, and what
    the nodes of its subgraphs read."""
    found = set(own)
    for node in graph.nodes:
        for value in node.attrs.values():
            if isinstance(value, gs.Graph):
                found.update(t.name for n in walk(value) for t in n.inputs)
    return found


def _pair(graph: gs.Graph, src: onnx.GraphProto | onnx.FunctionProto, root: gs.Graph) -> None:
    """Remember, on each graphsurgeon object, the proto it came from and how it looked."""
    session = session_of(graph)
    session.src = src
    if graph is not root:
        session.root = root
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
        read = _read_names(graph, _own_tensors(graph))
        session.unread = {i.name for i in src.initializer} - read
        session.input_inits = {i.name for i in src.input} & {i.name for i in src.initializer}


def _type_key(tensor: gs.Tensor) -> tuple:
    shape = tensor.shape
    return (tensor.dtype, None if shape is None else list(shape))


def close(graph: gs.Graph) -> None:
    """Be done with `graph` (it is unusable after): empty its nodes, tensors and graphs.
    graphsurgeon's nodes and tensors sit in reference cycles (each link list points back at
    its owner) and its constants hold the model's own `TensorProto`s, so without this a big
    model's weights would stay in memory after the model was dropped, until the cyclic
    garbage collector ran."""
    objects: list[object] = []
    for g in [*graphs(graph), *graph.functions]:
        for node in g.nodes:
            objects.append(node)
            objects += [*node.inputs, *node.outputs]
            objects += [v for v in node.attrs.values() if isinstance(v, gs.Tensor)]
        objects += [*g.inputs, *g.outputs]
        objects.append(g)
    for obj in objects:
        obj.__dict__.clear()


@contextmanager
def opened(model: onnx.ModelProto, *, write: bool = False) -> Iterator[gs.Graph]:
    """`model` loaded for the block (and saved back into it after, with `write`); closed
    at the end, error or not."""
    graph = load(model)
    try:
        yield graph
        if write:
            save(graph, model)
    finally:
        close(graph)


def load(model: onnx.ModelProto) -> gs.Graph:
    """`model` as a graphsurgeon graph; initializers stay the model's own `TensorProto`s."""
    with G_LOGGER.suppress(G_LOGGER.ERROR):
        graph = gs.import_onnx(model)
    _pair(graph, model.graph, graph)
    for fn, proto in zip(graph.functions, model.functions):
        _pair(fn, proto, graph)
    session = session_of(graph)
    session.model = model
    session.domains = {i.domain: int(i.version) for i in model.opset_import}
    session.synced = _version(graph)
    return graph


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
        if src.HasField("doc_string"):
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
    src = session_of(graph).src
    if not isinstance(src, onnx.GraphProto):
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


def _replace(field: _Repeated[M], items: list[M]) -> None:
    """Make a repeated proto field hold `items` (nothing is written when it already does)."""
    if len(items) == len(field) and all(a is b for a, b in zip(items, field)):
        return
    del field[:]  # the items stay valid: extend copies them
    field.extend(items)


def _write(graph: gs.Graph, proto: onnx.GraphProto, outer: frozenset[str]) -> None:
    """Write `graph` into `proto` (which holds what it was imported from), in place."""
    own = _own_tensors(graph)
    scope = outer | frozenset(own)
    stale = [vi.name for vi in proto.value_info if vi.name not in own]
    known = {name for n in proto.node for name in (*n.input, *n.output)} if stale else set()
    _replace(proto.node, [_node_proto(n, scope) for n in graph.nodes])

    read = _read_names(graph, own)
    unread = session_of(graph).unread or set()
    input_names = {i.name for i in proto.input}
    consts = {name: t for name, t in own.items() if isinstance(t, gs.Constant)
              and name not in outer and not isinstance(t._values, SparseValues)}
    inits = proto.initializer
    for i in reversed(range(len(inits))):
        p = inits[i]
        c = consts.pop(p.name, None)
        if c is None and p.name in unread:  # read by no node: a pass may have changed it
            c = session_of(graph).unread_consts.get(p.name)
            if c is not None and proto_of(c) is not p:
                inits[i].CopyFrom(_constant_proto(c))
            continue
        if c is None:
            if p.name not in read and p.name not in unread and p.name not in input_names:
                del inits[i]  # no node reads it any more: the passes dropped its users
        elif proto_of(c) is not p:
            inits[i].CopyFrom(_constant_proto(c))  # values a pass changed
    inits.extend(_constant_proto(c) for c in sorted(  # new ones, in the order made
        consts.values(), key=lambda c: c.__dict__.get(_MADE_AT, 0)))

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
    wanted = session_of(root_of(graph)).domains
    used = {n.domain for n in walk(graph)} | {n.domain for f in graph.functions
                                               for n in f.nodes}
    for domain in sorted(d for d in used if d and d not in have and d not in DEFAULT_DOMAINS):
        out.append(helper.make_opsetid(domain, wanted.get(domain, 1)))
    return out


def opset_imports(graph: gs.Graph) -> list[onnx.OperatorSetIdProto]:
    """The model's opset imports as `save` would write them now."""
    root = root_of(graph)
    return _opset_imports(root, loaded_model(root).opset_import)


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
    if session_of(graph).model is model:
        session_of(graph).synced = _version(graph)
    return model


def has_subgraphs(model: onnx.ModelProto) -> bool:
    """Whether the model has local functions or a node with a subgraph (If/Loop/Scan)."""
    return bool(model.functions) or any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        for n in model.graph.node for a in n.attribute)


def all_node_protos(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The nodes of a `GraphProto` and of its subgraphs (If/Loop/Scan bodies), in order: the
    one walk for code that reads a model without loading it as a graph."""
    out: list[onnx.NodeProto] = []
    for node in graph.node:
        out.append(node)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                out.extend(all_node_protos(sub))
    return out
