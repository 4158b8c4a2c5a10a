"""Graph hygiene: unique node names, and splicing rewrites into the original ModelProto.

Rewrites are spliced into the model in place rather than round-tripped through
graphsurgeon's exporter, which would drop node `metadata_props` (the dynamo exporter's
module scopes), doc strings and unused initializers, and reorder initializers. Only the
nodes of rewritten sites change; every other node, initializer (external data included)
and value info stays as it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx

from export_gelu.passes.onnx.view import GraphView, _subgraph_names


def ensure_unique_node_names(model: onnx.ModelProto) -> int:
    """Name unnamed nodes and rename duplicates (ONNX Runtime refuses them); returns count."""
    seen: set[str] = set()
    taken = {n.name for n in model.graph.node if n.name}
    changed = 0
    for i, node in enumerate(model.graph.node):
        if node.name and node.name not in seen:
            seen.add(node.name)
            continue
        base = node.name or f"{node.op_type}_{i}"
        name, k = base, 1
        while name in taken or name in seen:
            k += 1
            name = f"{base}__{k}"
        node.name = name
        seen.add(name)
        taken.add(name)
        changed += 1
    return changed


@dataclass
class Rewrite:
    """Replace the nodes `remove` with `nodes`, placed where `anchor` (the site's root) was."""

    anchor: str
    remove: set[str]
    nodes: list[onnx.NodeProto]
    initializers: list[onnx.TensorProto] = field(default_factory=list)
    value_info: list[onnx.ValueInfoProto] = field(default_factory=list)
    domains: dict[str, int] = field(default_factory=dict)


def _set_opset(model: onnx.ModelProto, domain: str, version: int) -> None:
    for imp in model.opset_import:
        if imp.domain == domain:
            return
    model.opset_import.append(onnx.helper.make_opsetid(domain, version))


def apply_rewrites(model: onnx.ModelProto, view: GraphView, rewrites: list[Rewrite]) -> None:
    """Splice `rewrites` into `model` (in place); drop constants only the old nodes used."""
    if not rewrites:
        return
    graph = model.graph
    removed = set().union(*(r.remove for r in rewrites))
    by_anchor = {r.anchor: r for r in rewrites}
    old_inputs = {t for name in removed for t in view.nodes[name].input if t}
    old_outputs = {t for name in removed for t in view.nodes[name].output if t}

    kept: list[onnx.NodeProto] = []
    for node in graph.node:
        rw = by_anchor.get(node.name)
        if rw is not None:
            kept.extend(rw.nodes)
        if node.name not in removed:
            kept.append(node)

    read: set[str] = {o.name for o in graph.output}
    for node in kept:
        read.update(node.input)
        read |= _subgraph_names(node)
    produced = {o for node in kept for o in node.output}
    dead_consts = {t for t in old_inputs if t not in read}
    final = [n for n in kept if not (n.op_type == "Constant" and n.output
                                     and n.output[0] in dead_consts)]
    new_nodes = [onnx.NodeProto() for _ in final]
    for dst, src in zip(new_nodes, final):
        dst.CopyFrom(src)
    del graph.node[:]
    graph.node.extend(new_nodes)

    graph_inputs = {i.name for i in graph.input}
    for i in reversed(range(len(graph.initializer))):
        name = graph.initializer[i].name
        if name in dead_consts and name not in graph_inputs:
            del graph.initializer[i]
    gone = (old_outputs | dead_consts) - produced - read
    for i in reversed(range(len(graph.value_info))):
        if graph.value_info[i].name in gone:
            del graph.value_info[i]
    for rw in rewrites:
        graph.initializer.extend(rw.initializers)
        graph.value_info.extend(rw.value_info)
        for domain, version in rw.domains.items():
            _set_opset(model, domain, version)
