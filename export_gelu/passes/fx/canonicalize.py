"""Find every GELU in a captured graph and turn each formula into one `aten.gelu` node."""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from export_gelu.passes.fx import expr as ex
from export_gelu.passes.fx.patterns import match_rule
from export_gelu.passes.sites import GeluSite

aten = torch.ops.aten
GELU = aten.gelu.default
_ROOTS = ex._MUL | ex._DIV
_META_KEYS = ("val", "tensor_meta", "nn_module_stack", "stack_trace", "source_fn_stack")


def module_path(node: fx.Node) -> str:
    """The dotted module path a node came from (its innermost `nn_module_stack` entry)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path, _cls = list(stack.values())[-1]
    return str(path).replace("L['self'].", "").replace("L__self__", "").lstrip(".")


def _module_class(node: fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    _path, cls = list(stack.values())[-1]
    return cls if isinstance(cls, str) else getattr(cls, "__qualname__", str(cls))


def gelu_kind(node: fx.Node) -> str:
    approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    return "tanh" if approximate == "tanh" else "exact"


def _builtin_source(node: fx.Node) -> str:
    cls = _module_class(node)
    return "nn.GELU" if cls.endswith("GELU") and "activation" in cls else "F.gelu / aten.gelu"


def scalar_constants(program: Any) -> ex.Scalars:
    """Placeholders of an ExportedProgram that hold one-element constant tensors, by value."""
    sig = program.graph_signature
    sources = {**sig.inputs_to_buffers, **sig.inputs_to_lifted_tensor_constants}
    tensors = {**program.state_dict, **program.constants}
    found: ex.Scalars = {}
    for node in program.graph_module.graph.nodes:
        if node.op != "placeholder" or node.name not in sources:
            continue
        value = tensors.get(sources[node.name])
        if isinstance(value, torch.Tensor) and value.numel() == 1 and value.is_floating_point():
            found[node] = float(value.item())
    return found


def canonicalize_gelus(gm: fx.GraphModule, scalars: ex.Scalars | None = None) -> list[GeluSite]:
    """Rewrite hand-written GELU formulas into `aten.gelu`; return every site (QuickGELU too).

    QuickGELU is reported with kind `quick` and left as it is: it is a different function.
    """
    scalars = scalars or {}
    graph = gm.graph
    sites: list[GeluSite] = []
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is GELU:
            sites.append(GeluSite(node.name, gelu_kind(node), _builtin_source(node),
                                  module=module_path(node)))
            continue
        if node.target not in _ROOTS:
            continue
        spanned: set[fx.Node] = set()
        tree = ex.build(node, spanned, scalars)
        found = match_rule(tree)
        if found is None:
            continue
        rule, x_node = found
        if rule.kind == "quick":
            sites.append(GeluSite(node.name, "quick", rule.name,
                                  action="kept (QuickGELU is a different function)",
                                  module=module_path(node)))
            continue
        with graph.inserting_before(node):
            approximate = "tanh" if rule.kind == "tanh" else "none"
            new = graph.call_function(GELU, (x_node,), {"approximate": approximate})
        new.meta.update({k: v for k, v in node.meta.items() if k in _META_KEYS})
        node.replace_all_uses_with(new)
        sites.append(GeluSite(new.name, rule.kind, rule.name,
                              action=f"canonicalized to aten.gelu(approximate={approximate})",
                              module=module_path(node)))
        changed = True
    if changed:
        graph.eliminate_dead_code()
        graph.lint()
        gm.recompile()
    return sites
