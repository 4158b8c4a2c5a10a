"""Graph-level GELU passes: find every GELU in an ONNX graph, canonicalize, lower per target.

    recognise.py   existing GELU ops, exporter shapes (patterns.py), formulas (formulas.py)
    lower.py       what each site becomes for a target, `--gelu` and precision
    emit.py        the nodes of each form
    hygiene.py     unique names; splicing rewrites into the ModelProto
    merge.py       fx sites + ONNX sites → one list for the report
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from export_gelu.errors import TargetUnmetError
from export_gelu.passes.onnx.emit import Names, SiteBuilder
from export_gelu.passes.onnx.hygiene import Rewrite, apply_rewrites, ensure_unique_node_names
from export_gelu.passes.onnx.lower import (
    Lowering,
    action_text,
    added_error,
    choose,
    half_x_elsewhere,
)
from export_gelu.passes.onnx.merge import merge_sites, module_of
from export_gelu.passes.onnx.plugin_form import refuse_plugin_where_unavailable
from export_gelu.passes.onnx.recognise import Match, bias_to_fold, find_matches, gemm_fusion_takes
from export_gelu.passes.onnx.view import GraphView, constant_node_value, skeleton
from export_gelu.passes.sites import GeluSite
from export_gelu.targets import TargetProfile

FORMS = ("keep", "erf", "tanh", "sigmoid", "plugin")


def _site(view: GraphView, m: Match, action: str = "kept", error: float = 0.0,
          emitted: list[str] | None = None) -> GeluSite:
    features = f" [{', '.join(sorted(m.features))}]" if m.features else ""
    return GeluSite(m.root, m.kind, m.shape + features, action=action,
                    module=module_of(view.nodes[m.root]), level="onnx", added_max_error=error,
                    onnx_nodes=list(m.nodes), emitted=emitted or [])


def find_sites(model: onnx.ModelProto) -> list[GeluSite]:
    """Every GELU site in `model`, without changing it (for `inspect`)."""
    light = skeleton(model)  # node names may need fixing; the weights are not needed
    ensure_unique_node_names(light)
    view = GraphView(light)
    return [_site(view, m) for m in find_matches(view)]


def _full_constant(view: GraphView, tensor: str) -> np.ndarray:
    init = view.initializers.get(tensor)
    if init is not None:
        from export_gelu.onnx_weights import tensor_array

        return tensor_array(init)
    value = constant_node_value(view.producer[tensor])
    if value is None:
        raise TargetUnmetError(f"cannot read the bias {tensor!r}")
    return value


def _structure(nodes: list[onnx.NodeProto], x: str, consts: dict[str, float]) -> tuple:
    """Nodes in order as (op, attributes, inputs); inputs as "x", a literal or a node index."""
    index: dict[str, int] = {}
    out = []
    for i, node in enumerate(nodes):
        refs: list[object] = []
        for name in node.input:
            if name == x:
                refs.append("x")
            elif name in index:
                refs.append(index[name])
            elif name in consts:
                refs.append(round(consts[name], 6))
            else:
                refs.append(f"tensor {name}")
        attrs = tuple(sorted(str(a) for a in node.attribute))
        out.append((node.domain, node.op_type, attrs, tuple(refs)))
        index.update((o, i) for o in node.output)
    return tuple(out)


def _already_in_form(view: GraphView, m: Match, b: SiteBuilder, x: str) -> bool:
    """True when the site is already written exactly as the emitter would write it."""
    if m.bias_node:
        return False
    old = sorted((view.nodes[n] for n in m.nodes), key=lambda n: view.order[n.name])
    old_consts: dict[str, float] = {}
    for node in old:
        for name in node.input:
            arr = view.constant(name)
            if arr is not None and arr.size == 1:
                old_consts[name] = float(arr.reshape(()))
    new_consts = {t.name: float(numpy_helper.to_array(t).reshape(())) for t in b.initializers
                  if not t.dims}
    return _structure(old, m.x, old_consts) == _structure(b.nodes, x, new_consts)


def _bias_operand(view: GraphView, m: Match, lowering: Lowering, b: SiteBuilder,
                  x: str) -> tuple[str, object]:
    """(x, bias) as the emitter takes them; a bias it cannot take becomes an Add before it."""
    if not m.has_bias:
        return x, None
    values = m.bias_values
    if lowering.bias == "attribute":
        return x, values if m.bias is None else _full_constant(view, m.bias).reshape(-1)
    bt = view.type(m.bias) if m.bias is not None else None
    usable = bt is not None and bt.elem_type == b.elem_type and (
        lowering.bias == "" or (bt.shape is not None and len(bt.shape) == 1))
    if m.bias is not None and usable:
        tensor = m.bias
    else:
        if values is None:
            values = _full_constant(view, m.bias)  # type: ignore[arg-type]
        tensor = b.const_array(np.asarray(values).reshape(-1), "bias")
    if lowering.bias == "input":
        return x, tensor
    return b.node("Add", [x, tensor]), None


def _rewrite(view: GraphView, m: Match, lowering: Lowering, names: Names, opset: int,
             elem_type: int) -> tuple[Rewrite, SiteBuilder]:
    """The nodes that replace site `m` with `lowering`."""
    xt = view.type(m.x)
    root = view.nodes[m.root]
    b = SiteBuilder(m.root, names, elem_type, xt.shape if xt else None, opset,
                    list(root.metadata_props))
    x = m.x
    if xt is not None and xt.elem_type != elem_type:
        x = b.node("Cast", [x], to=elem_type)
    x, bias = _bias_operand(view, m, lowering, b, x)
    lowering.emit(b, x, m.output, bias)
    out_type = view.type(m.output)
    if out_type is not None and m.output not in view.typed | view.graph_outputs:
        b.value_info.append(onnx.helper.make_tensor_value_info(
            m.output, out_type.elem_type, out_type.shape))
    rewrite = Rewrite(m.root, set(m.nodes), b.nodes, b.initializers, b.value_info, b.domains)
    return rewrite, b


def run_onnx_passes(model: onnx.ModelProto, profile: TargetProfile, form: str = "keep",
                    precision: str = "fp32") -> tuple[onnx.ModelProto, list[GeluSite]]:
    """Rewrite `model`'s GELUs for `profile` (in place); returns the model and the sites found.

    `form` is `--gelu` (keep|erf|tanh|sigmoid|plugin); a site's math changes only when a
    form asks for it, and its `added_max_error` says what that costs.
    """
    if form not in FORMS:
        raise TargetUnmetError(f"--gelu {form!r}: choose one of {', '.join(FORMS)}")
    if form == "plugin":
        refuse_plugin_where_unavailable(profile)
    ensure_unique_node_names(model)
    view = GraphView(model)
    opset = view.opset()
    names = Names({n.name for n in model.graph.node} | set(view.producer) | set(view.types)
                  | {i.name for i in model.graph.input} | set(view.initializers))
    sites: list[GeluSite] = []
    rewrites: list[Rewrite] = []
    site_types: dict[str, object] = {}  # GELU outputs typed by their input (contrib ops)
    for m in sorted(find_matches(view), key=lambda m: view.order[m.root]):
        out_type = view.type(m.output) or view.type(m.x) or site_types.get(m.x)
        if out_type is not None:
            site_types[m.output] = out_type
        if out_type is None:
            sites.append(_site(view, m, "kept: its tensor type is unknown, so not rewritten"))
            continue
        elem_type = out_type.elem_type
        lowering, notes = choose(m, profile, form, precision, opset, elem_type,
                                 half_x_elsewhere(view, m))
        if form == "plugin" and lowering.kind == "tanh" and elem_type not in (
                onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16):
            raise TargetUnmetError(f"--gelu plugin: {m.root} computes in "
                                   f"{onnx.TensorProto.DataType.Name(elem_type)}; the plugin "
                                   "takes fp32 and fp16 only")
        fold = (bias_to_fold(view, m, graph_input_bias=lowering.bias == "input")
                if lowering.bias else None)
        if fold is not None and lowering.bias_to_gemm and gemm_fusion_takes(view, *fold):
            notes = [*notes, f"bias Add {fold[0]} left for ONNX Runtime's MatMul+Add→Gemm "
                             "fusion"]
            fold = None
        if fold is not None:
            m.bias_node, m.x, m.bias = fold
            m.nodes.append(m.bias_node)
            if not view.is_constant(m.bias):
                notes = [*notes, f"its bias {m.bias} is a graph input, read at run time"]
        error = added_error(m.kind, lowering.kind)
        rw, b = _rewrite(view, m, lowering, names, opset, elem_type)
        if _already_in_form(view, m, b, m.x):
            names.taken.difference_update(n.name for n in b.nodes)
            last = b.nodes[-1]
            op = f"{last.domain}.{last.op_type}" if last.domain else last.op_type
            sites.append(_site(view, m, f"kept: already {lowering.name.format(op=op)}", error))
            continue
        rewrites.append(rw)
        action = action_text(m, lowering, b.nodes[-1], m.bias_node, notes)
        sites.append(_site(view, m, action, error, [n.name for n in b.nodes]))
    apply_rewrites(model, view, rewrites)
    return model, sites


__all__ = ["run_onnx_passes", "find_sites", "merge_sites", "FORMS"]
