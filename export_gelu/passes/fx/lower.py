"""Lower canonical `aten.gelu` sites to the GELU form asked for with `--gelu`."""

from __future__ import annotations

import torch
from torch import fx

from export_gelu.passes.fx.canonicalize import GELU, gelu_kind
from export_gelu.passes.fx.patterns import QUICK_ALPHA
from export_gelu.passes.sites import FORM_MAX_ERROR, GeluSite

aten = torch.ops.aten

#: Forms the fx level applies itself; the others (`keep`, `plugin`) are left to the ONNX level.
FX_FORMS = ("erf", "tanh", "sigmoid")
_META_KEYS = ("val", "tensor_meta", "nn_module_stack", "stack_trace")


def _copy_meta(src: fx.Node, *dst: fx.Node) -> None:
    for node in dst:
        node.meta.update({k: v for k, v in src.meta.items() if k in _META_KEYS})


def _to_sigmoid(graph: fx.Graph, node: fx.Node) -> fx.Node:
    x = node.args[0]
    with graph.inserting_before(node):
        scaled = graph.call_function(aten.mul.Tensor, (x, QUICK_ALPHA))
        gate = graph.call_function(aten.sigmoid.default, (scaled,))
        out = graph.call_function(aten.mul.Tensor, (x, gate))
    _copy_meta(node, scaled, gate, out)
    node.replace_all_uses_with(out)
    graph.erase_node(node)
    return out


def lower_gelus(gm: fx.GraphModule, sites: list[GeluSite], form: str) -> None:
    """Change every exact/tanh site to `form` (erf, tanh or sigmoid); QuickGELU stays."""
    if form not in FX_FORMS:
        return
    by_name = {s.name: s for s in sites if s.kind != "quick"}
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not GELU or node.name not in by_name:
            continue
        site = by_name[node.name]
        if form == "sigmoid":
            _to_sigmoid(graph, node)
            site.action = "lowered to x*sigmoid(1.702x) (changes the math; opt-in)"
            site.added_max_error = FORM_MAX_ERROR["sigmoid"]
            continue
        wanted = "tanh" if form == "tanh" else "none"
        if gelu_kind(node) == ("tanh" if wanted == "tanh" else "exact"):
            continue
        node.kwargs = {**node.kwargs, "approximate": wanted}
        site.action = f"changed {site.kind} → {'tanh' if wanted == 'tanh' else 'exact'} (opt-in)"
        site.added_max_error = FORM_MAX_ERROR["tanh"]
    graph.lint()
    gm.recompile()
