"""The model's own names for its outputs, and giving them to the exported graph.

Exporters name graph outputs after internal values (`255` from the TorchScript exporter,
`view_27` from dynamo); deployment code binds outputs by name. The names come from what the
model returns: a Hugging Face output object's fields (`last_hidden_state`, `logits`, …) or
a dict's keys, joined with `.` when nested (`encoder_hidden_states.0`); tuple positions and a
bare tensor become `output_0`, `output_1`, … . `--output-names a,b` overrides them (its
grammar: export_gelu/flags/output_names.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import onnx

from export_gelu import graph as G
from export_gelu.errors import BadInputError
from export_gelu.exporter.torch_compat import tree_children
from export_gelu.graph.provenance import torch_props

if TYPE_CHECKING:
    from torch.utils._pytree import TreeSpec


def _join(prefix: str, key: object) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def _spec_keys(spec: TreeSpec) -> list[str] | None:
    """Field names of a dict-like treespec node (dict, OrderedDict, ModelOutput, namedtuple)."""
    context = spec.context
    n = len(tree_children(spec))
    if isinstance(context, (list, tuple)) and len(context) == n and \
            all(isinstance(k, str) for k in context):
        return list(context)
    fields = getattr(context, "_fields", None) or getattr(spec.type, "_fields", None)
    if fields and len(fields) == n:
        return list(fields)
    return None


def _walk_spec(spec: TreeSpec, prefix: str, out: list[str]) -> None:
    if spec.is_leaf():
        out.append(prefix)
        return
    keys = _spec_keys(spec)
    for i, child in enumerate(tree_children(spec)):
        key: object = keys[i] if keys else (i if prefix else f"output_{i}")
        _walk_spec(child, _join(prefix, key), out)


def names_from_spec(spec: TreeSpec | None) -> list[str]:
    """Output names from an output treespec (`ExportedProgram.call_spec.out_spec`)."""
    if spec is None:
        return []
    out: list[str] = []
    _walk_spec(spec, "", out)
    return [n or "output_0" for n in out]


def _walk_value(value: object, prefix: str, out: list[str]) -> None:
    import torch

    if isinstance(value, torch.Tensor):
        out.append(prefix or "output_0")
    elif isinstance(value, Mapping) or hasattr(value, "to_tuple") and hasattr(value, "items"):
        for key, item in value.items():
            if item is not None:
                _walk_value(item, _join(prefix, key), out)
    elif isinstance(value, (list, tuple)):
        fields = getattr(value, "_fields", None)
        for i, item in enumerate(value):
            label: object = fields[i] if fields else (i if prefix else f"output_{i}")
            _walk_value(item, _join(prefix, label), out)


def names_from_value(value: object) -> list[str]:
    """Output names from what the model returned, in `flatten_outputs` order."""
    out: list[str] = []
    _walk_value(value, "", out)
    return out


def rename_outputs(model: onnx.ModelProto, names: Sequence[str]) -> list[tuple[str, str]]:
    """Give the graph's outputs `names`, in order, in place; return the (old, new) pairs that
    changed. A tensor that is also a graph input, an initializer, or another output is copied
    through an Identity instead, so every output has a name of its own."""
    graph = model.graph
    if len(names) != len(graph.output):
        raise ValueError(f"{len(names)} names for {len(graph.output)} outputs")
    taken = {o for n in graph.node for o in n.output} | {i.name for i in graph.input} | \
        {i.name for i in graph.initializer}
    olds = [o.name for o in graph.output]
    clash = [n for n in names if n in taken and n not in olds]
    if clash:
        raise BadInputError(f"output name {clash[0]!r} is already a tensor of the graph "
                            "(an input or an inner value); choose another")
    moved = [n for n, o in zip(names, olds) if n != o and n in olds]
    if moved:
        raise BadInputError(f"output name {moved[0]!r} is another output's name in the graph; "
                            "choose names that do not swap the graph's own")
    produced = {o for n in graph.node for o in n.output}
    renames: dict[str, str] = {}
    changed: list[tuple[str, str]] = []
    counts = {o: olds.count(o) for o in olds}
    for out, new in zip(graph.output, names):
        old = out.name
        if old == new:
            continue
        shared = counts[old] > 1 or old not in produced or old in renames
        if shared:
            identity = onnx.helper.make_node("Identity", [old], [new], name=f"output_name_{new}")
            made_by = next((n for n in graph.node if old in n.output), None)
            if made_by is not None:  # the output's own module and source line
                identity.metadata_props.extend(torch_props(made_by))
            graph.node.append(identity)
        else:
            renames[old] = new
        out.name = new
        changed.append((old, new))
    if renames:
        for node in G.all_node_protos(graph):
            node.input[:] = [renames.get(i, i) for i in node.input]
            node.output[:] = [renames.get(o, o) for o in node.output]
        for vi in graph.value_info:
            vi.name = renames.get(vi.name, vi.name)
    return changed

