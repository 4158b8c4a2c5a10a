"""Editing the one graph: fresh names, new tensors and nodes, changed links, a new node list.

Links are changed by identity: graphsurgeon's lists remove by equality, which confuses a node
with an unchanged clone of it. New nodes are made outside the node list; `set_nodes` places
them and unlinks whatever was made or replaced and is not in the new list."""

from __future__ import annotations

import copy
from collections.abc import Iterable

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper
from onnx_graphsurgeon.ir.tensor import LazyValues

from export_gelu.graph.index import (
    _MADE_AT,
    _META,
    _SRC,
    _edited,
    _version,
    graphs,
    is_output,
    producer,
    root_of,
    use_domain,
)
from export_gelu.graph.session import Names, session_of
from export_gelu.graph.types import (
    forget_types,
)
from export_gelu.graph.values import (
    constant_node,
)


def names(graph: gs.Graph) -> Names:
    """The name allocator of `graph`'s model: every node and tensor name, subgraphs too."""
    root = root_of(graph)
    session = session_of(root)
    found = session.names
    if found is None:
        taken: set[str] = set()
        for g in graphs(root):
            taken.update(n.name for n in g.nodes)
            taken.update(t.name for n in g.nodes for t in (*n.inputs, *n.outputs))
            taken.update(t.name for t in (*g.inputs, *g.outputs))
            src = session_of(g).src
            if isinstance(src, onnx.GraphProto):
                taken.update(i.name for i in src.initializer)
                taken.update(v.name for v in src.value_info)
        taken.discard("")
        found = session.names = Names(taken)
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
        session_of(root_of(graph)).names = None
    return changed


def _made(graph: gs.Graph) -> list[gs.Node]:
    return session_of(graph).made


def variable(graph: gs.Graph, base: str, elem_type: int | None = None,
             shape: Iterable | None = None) -> gs.Variable:
    """A new tensor with a fresh name (typed when `elem_type` is given: saved as value info)."""
    return gs.Variable(fresh_name(graph, base), dtype=elem_type or None,
                       shape=None if shape is None else list(shape))


def _made_now(tensor: gs.Constant) -> gs.Constant:
    _edited()
    tensor.__dict__[_MADE_AT] = _version()
    return tensor


def constant(graph: gs.Graph, values: np.ndarray, base: str) -> gs.Constant:
    """A new initializer holding `values`, with a fresh name."""
    return _made_now(gs.Constant(fresh_name(graph, base), np.asarray(values)))


def scalar(graph: gs.Graph, number: float, elem_type: int, base: str) -> gs.Constant:
    """A new scalar initializer of ONNX element type `elem_type` (bf16 included)."""
    name = fresh_name(graph, base)
    return _made_now(gs.Constant(name, LazyValues(helper.make_tensor(name, elem_type, [],
                                                                     [number]))))


def to_constant(tensor: gs.Tensor, values: np.ndarray) -> gs.Constant:
    """Make `tensor` (a node's output) a constant holding `values`, in place: its readers now
    read the value (its producer is to be dropped from the node list)."""
    return _made_now(tensor.to_constant(np.asarray(values)))


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
                  inputs=list(inputs), outputs=outs, domain=domain)
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


def _origin(node: gs.Node) -> object | None:
    """The NodeProto whose provenance (metadata_props) the node carries, if any has some."""
    d = node.__dict__
    src = d.get(_SRC) or d.get(_META)
    return src if src is not None and len(src.metadata_props) else None


def _inherit(new: list[gs.Node]) -> None:
    """New nodes made without `like=` take the provenance of the node they stand for: the
    node that wrote the same tensor (the one replaced), else the first reader of their
    outputs that has it (the op they were made for; new readers first get theirs), else the
    producer of one of their inputs. One mechanism for every pass: a rewritten or lowered op
    keeps the module of the op it replaced."""
    missing = [n for n in new if _origin(n) is None]
    for pick in (lambda n: [p for t in n.outputs for p in t.inputs if p is not n],
                 lambda n: [c for t in n.outputs for c in t.outputs if c is not n],
                 lambda n: [p for t in n.inputs for p in t.inputs]):
        progress = True
        while missing and progress:
            progress, still = False, []
            for n in missing:
                src = next((o for o in map(_origin, pick(n)) if o is not None), None)
                if src is None:
                    still.append(n)
                    continue
                n.__dict__[_META] = src
                progress = True
            missing = still


def set_nodes(graph: gs.Graph, nodes: list[gs.Node]) -> None:
    """Make `nodes` the graph's node list. Nodes of the old list or made since (`node`,
    `clone`) that are not in it are unlinked, and `Constant` nodes only they read go too.
    New nodes carry the provenance of the node they replace (`_inherit`)."""
    keep = {id(n) for n in nodes}
    _inherit([n for n in nodes if _SRC not in n.__dict__])
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
