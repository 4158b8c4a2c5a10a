"""Bring an ONNX model down to an older opset, or say exactly which ops cannot come down.

For every default-domain node whose op version differs between the model's opset and the
target: run the op's adapter (`adapters.py`) when it has one, then check the result against
the target's operator schema (attributes, input count, input types). Attributes the target
lacks are dropped when they hold the newer version's default. Everything that cannot come
down is collected and reported at once (exit 3), naming each op and why.
"""

from __future__ import annotations

import onnx
from onnx import defs, helper

from export_gelu.errors import TargetUnmetError
from export_gelu.passes.compat.adapters import ADAPTERS, CannotConvert, Step
from export_gelu.passes.compat.graph import GraphEditor, drop_attr, infer_types, set_default_opset

_DEFAULT = ("", "ai.onnx")


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
    return helper.get_attribute_value(default)


def _allowed_types(schema: defs.OpSchema, index: int) -> list[str] | None:
    if not schema.inputs:
        return None
    formal = schema.inputs[min(index, len(schema.inputs) - 1)]
    for tc in schema.type_constraints:
        if tc.type_param_str == formal.type_str:
            return list(tc.allowed_type_strs)
    return [formal.type_str] if formal.type_str.startswith("tensor(") else None


def fit_schema(node: onnx.NodeProto, step: Step) -> str | None:
    """Make `node` valid at `step.tgt` by dropping default-valued new attributes; else why not."""
    target = _schema(node.op_type, step.tgt)
    if target is None:
        since = _schema(node.op_type, step.src)
        where = f"from opset {since.since_version}" if since else "in no ONNX opset"
        return f"exists only {where}"
    source = _schema(node.op_type, step.src)
    for attr in list(node.attribute):
        if attr.name in target.attributes:
            continue
        if helper.get_attribute_value(attr) == _default(source, attr.name):
            drop_attr(node, attr.name)
            continue
        return f"attribute {attr.name} has no equivalent at opset {step.tgt}"
    while node.input and not node.input[-1]:
        del node.input[-1]
    if len(node.input) > target.max_input:
        return f"takes {len(node.input)} inputs; opset {step.tgt} allows {target.max_input}"
    for i, name in enumerate(node.input):
        vt = step.ed.type_of(name) if name else None
        tstr = vt.type_str() if vt is not None else None
        allowed = _allowed_types(target, i)
        if tstr and allowed is not None and tstr not in allowed:
            return f"input type {tstr} is not allowed at opset {step.tgt}"
    return None


def _convert_graph(graph: onnx.GraphProto, step: Step, problems: dict[str, str]) -> int:
    """Convert `graph` (and its subgraphs) in place; returns how many nodes changed."""
    ed = step.ed
    changed = 0
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        for attr in node.attribute:
            subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for sub in subs:
                sub_step = Step(GraphEditor(sub, ed.types, outer=ed), step.src, step.tgt)
                changed += _convert_graph(sub, sub_step, problems)
        if node.domain not in _DEFAULT or _schema(node.op_type, step.src) is None:
            nodes.append(node)  # custom ops (e.g. a TensorRT plugin) are not versioned
            continue
        src, tgt = _schema(node.op_type, step.src), _schema(node.op_type, step.tgt)
        if tgt is not None and src is not None and src.since_version == tgt.since_version:
            nodes.append(node)
            continue
        adapter = ADAPTERS.get(node.op_type)
        try:
            new = adapter(node, step) if adapter else [node]
        except CannotConvert as exc:
            problems.setdefault(node.op_type, str(exc))
            nodes.append(node)
            continue
        before = [n.SerializeToString() for n in new]
        for n in new:
            why = fit_schema(n, step)
            if why:
                problems.setdefault(n.op_type, why)
        nodes.extend(new)
        ed.replaced(node, new)
        if new != [node] or before != [n.SerializeToString() for n in new]:
            changed += 1
    ed.commit(nodes)
    return changed


#: The IR version of the first onnx release that had each opset (older parsers check it).
def ir_version_for_opset(opset: int) -> int:
    for _release, ir, ai_onnx, *_rest in helper.VERSION_TABLE:
        if ai_onnx >= opset:
            return int(ir)
    return onnx.IR_VERSION


def downconvert(model: onnx.ModelProto, target: int) -> list[str]:
    """Rewrite `model` in place to opset `target`; returns notes, raises TargetUnmetError."""
    from export_gelu.compat import model_opset

    source = model_opset(model)
    if source <= target:
        return []
    types = infer_types(model)
    problems: dict[str, str] = {}
    changed = _convert_graph(model.graph, Step(GraphEditor(model.graph, types), source, target),
                             problems)
    for fn in model.functions:
        fn_graph = onnx.GraphProto(node=fn.node)
        changed += _convert_graph(fn_graph, Step(GraphEditor(fn_graph), source, target),
                                  problems)
        fn.ClearField("node")  # a function has no initializers: new constants become nodes
        fn.node.extend(helper.make_node("Constant", [], [i.name], value=i)
                       for i in fn_graph.initializer)
        fn.node.extend(fn_graph.node)
    if problems:
        details = "; ".join(f"{op} {why}" for op, why in sorted(problems.items()))
        raise TargetUnmetError(f"cannot bring opset {source} down to {target}: {details}")
    set_default_opset(model, target)
    ir = ir_version_for_opset(target)
    if model.functions:
        ir = max(ir, 8)  # local functions need IR 8
    model.ir_version = min(model.ir_version, ir)
    return [f"down-converted opset {source} → {target} ({changed} node(s) adapted)"]
