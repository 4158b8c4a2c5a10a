"""Bring an ONNX model down to an older opset, or say exactly which ops cannot come down.

For every default-domain node whose op version differs between the model's opset and the
target: run the op's adapter (`adapters.py`) when it has one, then check the result against
the target's operator schema (attributes, input count, input types). Attributes the target
lacks are dropped when they hold the newer version's default. Everything that cannot come
down is collected and reported at once (exit 3), naming each op and why.
"""

from __future__ import annotations

import functools
import re

import onnx
import onnx_graphsurgeon as gs
from onnx import defs, helper

from export_gelu import graph as G
from export_gelu.errors import TargetUnmetError
from export_gelu.passes.compat.opset.adapters import ADAPTERS, CannotConvert, Step


def _schema(op: str, opset: int) -> defs.OpSchema | None:
    try:
        return defs.get_schema(op, opset, "")
    except Exception:  # noqa: BLE001 - onnx raises SchemaError when there is none
        return None


def has_form_at(op: str, opset: int) -> bool:
    """Whether a default-domain op exists at `opset` (unknown, custom ops count as present)."""
    return _schema(op, opset) is not None or _schema(op, 10_000) is None


def _default(schema: defs.OpSchema | None, attr: str) -> object:
    if schema is None or attr not in schema.attributes:
        return None
    default = schema.attributes[attr].default_value
    if not default.name:
        return None
    value = helper.get_attribute_value(default)
    return value.decode() if isinstance(value, bytes) else value


def _allowed_types(schema: defs.OpSchema, index: int) -> list[str] | None:
    if not schema.inputs:
        return None
    formal = schema.inputs[min(index, len(schema.inputs) - 1)]
    for tc in schema.type_constraints:
        if tc.type_param_str == formal.type_str:
            return list(tc.allowed_type_strs)
    return [formal.type_str] if formal.type_str.startswith("tensor(") else None


def fit_schema(node: gs.Node, step: Step) -> str | None:
    """Make `node` valid at `step.tgt` by dropping default-valued new attributes; else why not."""
    target = _schema(node.op, step.tgt)
    if target is None:
        since = next((s for s in map(functools.partial(_schema, node.op),
                                     range(step.tgt + 1, step.src + 1)) if s is not None), None)
        where = f"from opset {since.since_version}" if since else "in no ONNX opset"
        return f"exists only {where}"
    source = _schema(node.op, step.src)
    for name, value in list(node.attrs.items()):
        if name in target.attributes:
            continue
        if value == _default(source, name):
            del node.attrs[name]
            continue
        return f"attribute {name} has no equivalent at opset {step.tgt}"
    while node.inputs and node.inputs[-1].is_empty():
        G.trim_inputs(node, len(node.inputs) - 1)
    if len(node.inputs) > target.max_input:
        return f"takes {len(node.inputs)} inputs; opset {step.tgt} allows {target.max_input}"
    for i, tensor in enumerate(node.inputs):
        vt = step.type_of(tensor) if not tensor.is_empty() else None
        tstr = vt.type_str() if vt is not None else None
        allowed = _allowed_types(target, i)
        if tstr and allowed is not None and tstr not in allowed:
            first = _type_allowed_from(node.op, i, tstr, step)
            return (f"input type {tstr} is not allowed at opset {step.tgt}"
                    + (f", only from opset {first}" if first else ""))
    return None


def _type_allowed_from(op: str, index: int, tstr: str, step: Step) -> int | None:
    """The first opset above the target whose `op` takes `tstr` at input `index`."""
    for opset in range(step.tgt + 1, step.src + 1):
        schema = _schema(op, opset)
        allowed = _allowed_types(schema, index) if schema is not None else None
        if allowed is not None and tstr in allowed:
            return schema.since_version if schema is not None else opset
    return None


_FROM_OPSET = re.compile(r"from opset (\d+)")


def _way_out(op: str, why: str) -> str:
    """The targets that take `op` at the opset it needs, when the refusal names one."""
    from export_gelu.parse_check import opset_takers_text

    needed = _FROM_OPSET.search(why)
    if needed is None:
        return ""
    return f" (targets whose opset takes it: {opset_takers_text(op, int(needed[1]))})"


def _signature(node: gs.Node) -> str:
    return repr((node.op, [t.name for t in node.inputs], [t.name for t in node.outputs],
                 sorted((k, repr(v)) for k, v in node.attrs.items())))


def _convert_graph(step: Step, problems: dict[str, str]) -> int:
    """Convert `step.graph` (and its subgraphs) in place; returns how many nodes changed."""
    graph = step.graph
    changed = 0
    nodes: list[gs.Node] = []
    for node in list(graph.nodes):
        for sub in G.subgraphs(node):
            changed += _convert_graph(step.inside(sub), problems)
        if not G.is_default(node) or _schema(node.op, step.src) is None:
            nodes.append(node)  # custom ops (e.g. a TensorRT plugin) are not versioned
            continue
        src, tgt = _schema(node.op, step.src), _schema(node.op, step.tgt)
        if tgt is not None and src is not None and src.since_version == tgt.since_version:
            nodes.append(node)
            continue
        adapter = ADAPTERS.get(node.op)
        try:
            new = adapter(node, step) if adapter else [node]
        except CannotConvert as exc:
            problems.setdefault(node.op, str(exc))
            nodes.append(node)
            continue
        before = [_signature(n) for n in new]
        for n in new:
            why = fit_schema(n, step)
            if why:
                problems.setdefault(n.op, why)
        nodes.extend(new)
        after = [_signature(n) for n in new]
        if len(new) != 1 or after != [_signature(node)] or before != after:
            changed += 1
    G.set_nodes(graph, nodes)
    return changed


#: The IR version of the first onnx release that had each opset (older parsers check it).
def ir_version_for_opset(opset: int) -> int:
    for _release, ir, ai_onnx, *_rest in helper.VERSION_TABLE:
        if ai_onnx >= opset:
            return int(ir)
    return onnx.IR_VERSION


def downconvert(model: onnx.ModelProto | gs.Graph, target: int) -> list[str]:
    """Rewrite the graph in place to opset `target`; returns notes, raises TargetUnmetError."""
    if isinstance(model, onnx.ModelProto):
        with G.opened(model, write=True) as graph:
            return downconvert(graph, target)
    graph = model
    source = G.opset(graph)
    if source <= target:
        return []
    problems: dict[str, str] = {}
    # the types as they are before any node list changes (inferred only if an adapter asks)
    types = functools.cache(lambda: dict(G.infer_types(graph)))
    changed = _convert_graph(Step(graph, source, target, types), problems)
    for fn in graph.functions:  # a function has no initializers: new ones become Constants
        changed += _convert_graph(Step(fn, source, target), problems)
    if problems:
        details = "; ".join(f"{op} {why}{_way_out(op, why)}"
                            for op, why in sorted(problems.items()))
        raise TargetUnmetError(f"cannot bring opset {source} down to {target}: {details}")
    G.set_opset(graph, target)
    ir = ir_version_for_opset(target)
    if graph.functions:
        ir = max(ir, 8)  # local functions need IR 8
    graph.ir_version = min(int(graph.ir_version), ir)
    return [f"down-converted opset {source} → {target} ({changed} node(s) adapted)"]

