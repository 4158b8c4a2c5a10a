"""Lower canonical `aten.gelu` sites to the GELU *kind* asked for with `--gelu`.

The fx level only changes what function a site computes (`erf` → exact, `tanh`,
`sigmoid` → x*sigmoid(1.702x)); the node form a runtime wants (native `Gelu`, a contrib
op, expanded or fp16-safe primitives, the TensorRT plugin) is emitted by the ONNX-level
passes. `keep` and `plugin` leave every site's kind alone here.
"""

from __future__ import annotations

import torch
from torch import fx

from export_gelu.passes.fx.canonicalize import GELU, gelu_kind
from export_gelu.passes.fx.patterns import QUICK_ALPHA
from export_gelu.passes.sites import GeluSite, added_max_error

aten = torch.ops.aten

#: Forms the fx level applies itself; the others (`keep`, `plugin`) are left to the ONNX level.
FX_FORMS = ("erf", "tanh", "sigmoid")
_META_KEYS = ("val", "tensor_meta", "nn_module_stack", "stack_trace")


def _copy_meta(src: fx.Node, *dst: fx.Node) -> None:
    for node in dst:
        node.meta.update({k: v for k, v in src.meta.items() if k in _META_KEYS})


def _to_sigmoid(graph: fx.Graph, node: fx.Node) -> fx.Node:
    """Replace `node` (an aten.gelu) by x*sigmoid(1.702x)."""
    x = node.args[0]
    with graph.inserting_before(node):
        scaled = graph.call_function(aten.mul.Tensor, (x, QUICK_ALPHA))
        gate = graph.call_function(aten.sigmoid.default, (scaled,))
        out = graph.call_function(aten.mul.Tensor, (x, gate))
    _copy_meta(node, scaled, gate, out)
    node.replace_all_uses_with(out)
    graph.erase_node(node)
    return out


def _set_approximate(node: fx.Node, approximate: str) -> None:
    node.args = node.args[:1]
    node.kwargs = {**node.kwargs, "approximate": approximate}


def lower_gelus(gm: fx.GraphModule, sites: list[GeluSite], form: str) -> None:
    """Make every exact/tanh site compute `form` (erf, tanh or sigmoid); QuickGELU stays.

    Each changed site's action says what was done and `added_max_error` states the
    worst-case absolute error the change adds over the site's own math.
    """
    if form not in FX_FORMS:
        return
    by_name = {s.name: s for s in sites if s.kind != "quick"}
    graph = gm.graph
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not GELU or node.name not in by_name:
            continue
        site = by_name[node.name]
        kind = gelu_kind(node)
        if form == "sigmoid":
            _to_sigmoid(graph, node)
            site.action = f"changed {kind} → x*sigmoid(1.702x) (--gelu sigmoid; changes the math)"
        elif (form == "tanh") != (kind == "tanh"):
            wanted = "tanh" if form == "tanh" else "none"
            _set_approximate(node, wanted)
            target = "tanh" if form == "tanh" else "exact"
            site.action = (f"changed {kind} → {target}: aten.gelu(approximate={wanted}) "
                           f"(--gelu {form}; changes the math)")
        else:
            continue
        site.added_max_error = added_max_error(kind, form)
        changed = True
    if changed:
        graph.lint()
        gm.recompile()
