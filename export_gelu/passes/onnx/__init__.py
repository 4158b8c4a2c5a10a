"""Graph-level GELU passes: find every GELU in an ONNX graph, canonicalize, lower per target.

    recognise.py   existing GELU ops, exporter shapes (patterns.py), formulas (formulas.py)
    lower.py       what each site becomes for a target, `--gelu` and precision
    emit.py        the nodes of each form
    merge.py       fx sites + ONNX sites → one list for the report

The graph is the one graph of `export_gelu.graph` (onnx-graphsurgeon's `gs.Graph`): loaded
from the model, the sites' nodes replaced where they stood, saved back into the same model
(nodes and weights the passes do not touch stay as they were).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from export_gelu import graph as G
from export_gelu.errors import TargetUnmetError
from export_gelu.passes.forms import GELU_FORMS, check_form_name
from export_gelu.passes.onnx.emit import SiteBuilder
from export_gelu.passes.onnx.lower import (
    Lowering,
    action_text,
    added_error,
    choose,
    half_x_elsewhere,
)
from export_gelu.passes.onnx.merge import merge_sites, module_of
from export_gelu.passes.onnx.plugin_form import refuse_plugin_where_unavailable
from export_gelu.passes.onnx.recognise import (
    Match,
    bias_to_fold,
    find_matches,
    folded_identities,
    gemm_fusion_takes,
    runtime_bias_note,
)
from export_gelu.passes.sites import GeluSite
from export_gelu.targets import TargetProfile

FORMS = GELU_FORMS


def _site(m: Match, action: str = "kept", error: float = 0.0,
          emitted: list[str] | None = None) -> GeluSite:
    features = f" [{', '.join(sorted(m.features))}]" if m.features else ""
    return GeluSite(m.root.name, m.kind, m.shape + features, action=action,
                    module=module_of(m.root), level="onnx", added_max_error=error,
                    onnx_nodes=[n.name for n in m.nodes], emitted=emitted or [])


def find_sites(model: onnx.ModelProto) -> list[GeluSite]:
    """Every GELU site in `model`, without changing it (for `inspect`)."""
    with G.opened(model) as graph:  # the weights stay where they are: none is read
        G.unique_node_names(graph)  # on the graph only: `model` is not saved into
        return [_site(m) for m in find_matches(graph)]


def _full_constant(tensor: gs.Tensor) -> np.ndarray:
    value = G.value(tensor, external=True)
    if value is None:
        raise TargetUnmetError(f"cannot read the bias {tensor.name!r}")
    return value


def _attr_key(value: object) -> object:
    arr = G.array_of(value)
    if arr is not None:
        return (str(arr.dtype), arr.shape, arr.tobytes())
    if isinstance(value, list):
        return tuple(_attr_key(v) for v in value)
    if isinstance(value, float):  # as the node stores it
        return float(np.float32(value))
    return value.decode() if isinstance(value, bytes) else value


def _structure(graph: gs.Graph, nodes: list[gs.Node], x: gs.Tensor) -> tuple:
    """Nodes in order as (op, attributes, inputs); inputs as "x", a literal or a node index."""
    index: dict[int, int] = {}
    out = []
    for i, node in enumerate(nodes):
        refs: list[object] = []
        for t in node.inputs:
            lit = G.literal(graph, t)
            if t is x:
                refs.append("x")
            elif id(t) in index:
                refs.append(index[id(t)])
            elif lit is not None and lit.size == 1:
                refs.append(round(float(lit.reshape(())), 6))
            else:
                refs.append(f"tensor {t.name}")
        attrs = tuple(sorted((k, repr(_attr_key(v))) for k, v in node.attrs.items()))
        out.append((node.domain or "", node.op, attrs, tuple(refs)))
        index.update((id(o), i) for o in node.outputs)
    return tuple(out)


def _already_in_form(graph: gs.Graph, m: Match, b: SiteBuilder, x: gs.Tensor,
                     order: dict[int, int]) -> bool:
    """True when the site is already written exactly as the emitter would write it."""
    if m.bias_node is not None or len(m.nodes) != len(b.nodes):
        return False
    old = sorted(m.nodes, key=lambda n: order[id(n)])
    if [n.op for n in old] != [n.op for n in b.nodes]:
        return False
    return _structure(graph, old, m.x) == _structure(graph, b.nodes, x)


def _bias_operand(graph: gs.Graph, m: Match, lowering: Lowering, b: SiteBuilder,
                  x: gs.Tensor) -> tuple[gs.Tensor, object]:
    """(x, bias) as the emitter takes them; a bias it cannot take becomes an Add before it."""
    if not m.has_bias:
        return x, None
    values = m.bias_values
    if lowering.bias == "attribute":
        return x, values if m.bias is None else _full_constant(m.bias).reshape(-1)
    bt = G.type_of(graph, m.bias) if m.bias is not None else None
    usable = bt is not None and bt.elem_type == b.elem_type and (
        lowering.bias == "" or (bt.shape is not None and len(bt.shape) == 1))
    if m.bias is not None and usable:
        tensor: gs.Tensor = m.bias
    else:
        if values is None:
            values = _full_constant(m.bias)
        tensor = b.const_array(np.asarray(values).reshape(-1), "bias")
    if lowering.bias == "input":
        return x, tensor
    return b.node("Add", [x, tensor]), None


def _build(graph: gs.Graph, m: Match, lowering: Lowering, opset: int,
           elem_type: int) -> SiteBuilder:
    """The nodes that replace site `m` with `lowering` (not placed yet)."""
    xt = G.type_of(graph, m.x)
    b = SiteBuilder(graph, m.root.name, elem_type, xt.shape if xt else None, opset, like=m.root)
    x = m.x
    if xt is not None and xt.elem_type != elem_type:
        x = b.node("Cast", [x], to=elem_type)
    x, bias = _bias_operand(graph, m, lowering, b, x)
    lowering.emit(b, x, m.output, bias)
    return b


def _type_output(graph: gs.Graph, m: Match) -> None:
    """State the site output's type (a value info) when the model did not."""
    out = m.output
    out_type = G.type_of(graph, out)
    if out_type is not None and out.dtype is None and not G.is_output(graph, out):
        out.dtype = out_type.elem_type
        out.shape = None if out_type.shape is None else list(out_type.shape)


def run_onnx_passes(model: onnx.ModelProto | gs.Graph, profile: TargetProfile,
                    form: str = "keep", precision: str = "fp32"
                    ) -> tuple[onnx.ModelProto | gs.Graph, list[GeluSite]]:
    """Rewrite `model`'s GELUs for `profile` (in place); returns the model and the sites found.

    `form` is `--gelu` (keep|erf|tanh|sigmoid|plugin); a site's math changes only when a
    form asks for it, and its `added_max_error` says what that costs. A graph loaded with
    `export_gelu.graph.load` is edited in place and not saved (the caller saves it).
    """
    check_form_name(form)  # bad input (exit 2), as options.validate says it
    if form == "plugin":
        refuse_plugin_where_unavailable(profile)
    if isinstance(model, onnx.ModelProto):
        with G.opened(model, write=True) as graph:
            return model, _rewrite_sites(graph, profile, form, precision)
    return model, _rewrite_sites(model, profile, form, precision)


def _rewrite_sites(graph: gs.Graph, profile: TargetProfile, form: str,
                   precision: str) -> list[GeluSite]:
    G.unique_node_names(graph)
    G.infer_types(graph)  # before any edit: inferred from the model as loaded, then kept
    opset = G.opset(graph)
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    sites: list[GeluSite] = []
    placed: dict[int, list[gs.Node]] = {}  # site root → the nodes written in its place
    removed: set[int] = set()
    site_types: dict[int, G.TensorType] = {}  # GELU outputs typed by their input (contrib ops)
    for m in sorted(find_matches(graph), key=lambda m: order[id(m.root)]):
        out_type = G.type_of(graph, m.output) or G.type_of(graph, m.x) or site_types.get(
            id(m.x))
        if out_type is not None:
            site_types[id(m.output)] = out_type
        if out_type is None:
            sites.append(_site(m, "kept: its tensor type is unknown, so not rewritten"))
            continue
        elem_type = out_type.elem_type
        lowering, notes = choose(m, profile, form, precision, opset, elem_type=elem_type,
                                 half_x_taken=half_x_elsewhere(graph, m))
        if form == "plugin" and lowering.kind == "tanh" and elem_type not in (
                onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16):
            raise TargetUnmetError(f"--gelu plugin: {m.root.name} computes in "
                                   f"{onnx.TensorProto.DataType.Name(elem_type)}; the plugin "
                                   "takes fp32 and fp16 only")
        fold = (bias_to_fold(graph, m, runtime_bias=lowering.bias == "input")
                if lowering.bias else None)
        if fold is not None and lowering.bias_to_gemm and gemm_fusion_takes(graph, *fold):
            notes = [*notes, f"bias Add {fold[0].name} left for ONNX Runtime's MatMul+Add→Gemm "
                             "fusion"]
            fold = None
        if fold is not None:
            m.bias_node, m.x, m.bias = fold
            m.nodes.append(m.bias_node)
            m.nodes.extend(folded_identities(graph, m.bias_node, m.bias))
            if not G.is_constant(graph, m.bias):
                notes = [*notes, runtime_bias_note(graph, m.bias)]
        error = added_error(m.kind, lowering.kind)
        b = _build(graph, m, lowering, opset, elem_type)
        if _already_in_form(graph, m, b, m.x, order):
            G.names(graph).taken.difference_update(n.name for n in b.nodes)
            last = b.nodes[-1]
            op = f"{last.domain}.{last.op}" if last.domain else last.op
            sites.append(_site(m, f"kept: already {lowering.name.format(op=op)}", error))
            continue
        _type_output(graph, m)
        placed[id(m.root)] = b.nodes
        removed.update(id(n) for n in m.nodes)
        action = action_text(m, lowering, b.nodes[-1], m.bias_node, notes)
        sites.append(_site(m, action, error, [n.name for n in b.nodes]))
    nodes: list[gs.Node] = []
    for node in graph.nodes:
        nodes.extend(placed.get(id(node), ()))
        if id(node) not in removed:
            nodes.append(node)
    G.set_nodes(graph, nodes)  # also unlinks what kept sites' builders made
    return sites


__all__ = ["run_onnx_passes", "find_sites", "merge_sites", "FORMS"]
