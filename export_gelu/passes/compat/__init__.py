"""Fit a graph to a target profile beyond GELU: opset ceiling and ops the target lacks.

Two hooks, called by the export pipeline:
- (the torch-level rewrite an old opset needs, attention lowered for the TorchScript exporter,
  is `exporter/onnx_export/to_onnx.py: prepare_program_for_opset`)
  before export (attention, which the TorchScript exporter cannot emit below opset 14).
- `fit_to_profile(model, profile)`: ONNX-level rewrites after the GELU passes, in order:
  LayerNormalization expansion (targets without it, or an opset below 17), IsNaN → Equal
  (TensorRT < 8.2), Pow(x, 2) → Mul(x, x) (TensorRT), opset down-conversion to the ceiling,
  then the fixes for the parser's per-op restrictions (`trt_fixes/`).
  Whatever still does not fit is reported as an unmet target (exit 3) naming the op and the
  targets that would take it.

Rooms: `opset/` (`adapters`: one op's version changes each, `downconvert`: the driver,
`upconvert`, `fold_constant_ops`), `layernorm/` (`expand`, `fuse`, `match_types`),
`trt_fixes/` (`apply` runs the fixes `gather` and its siblings register in `registry`;
`isnan_to_equal`, `pow2_to_mul`), `precision/` (`retarget`: torch programs, `fp16_islands`)
and `torchscript_export/` (`attention`, `view_writes`: torch programs). The ONNX
ones edit the one graph of `export_gelu.graph` (onnx-graphsurgeon's `gs.Graph`): the
pipeline hands `fit_to_profile` its loaded graph; given a ModelProto, it loads one (only when
a step could apply) and saves it back at the end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import onnx
import onnx_graphsurgeon as gs

from export_gelu import graph as G
from export_gelu.errors import TargetUnmetError
from export_gelu.targets import TargetProfile

if TYPE_CHECKING:
    from torch import fx
    from torch.export import ExportedProgram


def _unfixable(graph: gs.Graph, profile: TargetProfile) -> list[str]:
    from export_gelu.parse_check import opset_problem, takers_text
    from export_gelu.targets import PLUGIN_OP

    ops = sorted({n.op for n in G.walk(graph) if G.is_default(n)
                  and n.op != PLUGIN_OP and not profile.supports(n.op)})
    problems = [f"op {op} is not parsed by {profile.name} and export-gelu has no rewrite for "
                f"it (taken by {takers_text(op)})" for op in ops]
    opset = opset_problem(G.opset(graph), profile)
    if opset and "below floor" in opset:
        problems.append(f"{opset}: export-gelu did not convert this graph up")
    return problems


def _nothing_to_do(model: onnx.ModelProto, profile: TargetProfile, target_opset: int) -> bool:
    """Whether no step of `fit_to_profile` can apply, told from the main graph's op types
    alone (a model with subgraphs or local functions is always looked at in full)."""
    from export_gelu.parse_check import model_opset, op_counts, opset_problem
    from export_gelu.passes.compat.opset.downconvert import has_form_at
    from export_gelu.trt_parser.restrictions import could_hit

    opset = model_opset(model)
    if opset > target_opset or G.has_subgraphs(model) or opset_problem(opset, profile):
        return False
    if profile.runtime == "trt" and could_hit(model, profile.trt_version):
        return False
    ops = [op for op in op_counts(model) if "." not in op]  # default-domain ops
    return not any(not profile.supports(op) or not has_form_at(op, target_opset)
                   or op in ("LayerNormalization", "IsNaN")
                   or (op == "Pow" and profile.runtime == "trt") for op in ops)


def fit_to_profile(model: onnx.ModelProto | gs.Graph, profile: TargetProfile
                   ) -> tuple[onnx.ModelProto | gs.Graph, list[str]]:
    """`model` rewritten to fit `profile`'s opset ceiling and ops; notes for the report.

    A ModelProto is edited in place (loaded only when a step could apply); a graph loaded
    with `export_gelu.graph.load` is edited in place and not saved.
    """
    if isinstance(model, gs.Graph):
        return model, _fit(model, profile)
    from export_gelu.parse_check import model_opset

    if _nothing_to_do(model, profile, min(model_opset(model), profile.opset_ceiling)):
        return model, []
    with G.opened(model, write=True) as graph:
        return model, _fit(graph, profile)


def _fit(graph: gs.Graph, profile: TargetProfile) -> list[str]:
    from export_gelu.passes.compat.layernorm.expand import expand_all_layernorms
    from export_gelu.passes.compat.layernorm.match_types import match_layernorm_types
    from export_gelu.passes.compat.opset.downconvert import downconvert, has_form_at
    from export_gelu.passes.compat.opset.fold_constant_ops import fold_constant_ops
    from export_gelu.passes.compat.trt_fixes.isnan_to_equal import isnan_to_equal
    from export_gelu.passes.compat.trt_fixes.pow2_to_mul import pow2_to_mul

    opset = G.opset(graph)
    target_opset = min(opset, profile.opset_ceiling)
    notes: list[str] = []
    ops = {n.op for n in graph.nodes if G.is_default(n)}
    expand_ln = "LayerNormalization" in ops and (not profile.supports("LayerNormalization")
                                                 or target_opset < 17)

    def lacking(node: gs.Node) -> bool:
        return not profile.supports(node.op) or not has_form_at(node.op, target_opset)

    if "LayerNormalization" in ops and (n := match_layernorm_types(graph)):
        notes.append(f"{n} LayerNormalization node(s): scale/bias cast to the input's element "
                     "type (ONNX types them alike)")
    folded = fold_constant_ops(graph, lacking)
    if folded:
        kinds = ", ".join(sorted(set(folded)))
        notes.append(f"{len(folded)} {kinds} node(s) computed from constants only folded to "
                     f"their values ({profile.name} lacks {kinds})")
    if expand_ln:
        n = expand_all_layernorms(graph, opset)
        notes.append(f"{n} LayerNormalization node(s) expanded to ReduceMean/Sub/Mul/Sqrt/Div "
                     f"({profile.name} has no LayerNormalization)")
    if "IsNaN" in ops and not profile.supports("IsNaN") and (n := isnan_to_equal(graph)):
        notes.append(f"{n} IsNaN node(s) rewritten as Not(Equal(x, x)) ({profile.name} has no "
                     "IsNaN)")
    if "Pow" in ops and profile.runtime == "trt" and (n := pow2_to_mul(graph)):
        notes.append(f"{n} Pow(x, 2) node(s) rewritten as Mul(x, x)")
    if profile.runtime == "trt":  # rewrites that replace an op the parser lacks (CastLike)
        from export_gelu.passes.compat.trt_fixes.apply import fit_restrictions

        notes.extend(fit_restrictions(graph, profile.trt_version, profile.name, early=True))
    if opset > target_opset:
        if profile.runtime == "trt":  # computed axes/sizes that are constant in fact
            from export_gelu.passes.compat.trt_fixes.inputs import fold_computed_inputs

            if n := fold_computed_inputs(graph):
                notes.append(f"{n} computed axes/sizes/bounds input(s) constant in fact folded "
                             "to initializers")
        notes.extend(downconvert(graph, target_opset))
    if profile.runtime == "trt":
        from export_gelu.passes.compat.trt_fixes.apply import fit_restrictions

        notes.extend(fit_restrictions(graph, profile.trt_version, profile.name))
    problems = _unfixable(graph, profile)
    if problems:
        raise TargetUnmetError("; ".join(problems))
    return notes


def fit_module_precision(module: object, precision: str) -> list[str]:
    """Make a module unlifted from an ExportedProgram compute in `precision` throughout.

    Its parameters are cast already; float32 literals and constants baked in by tracing are
    retargeted here (see `precision/retarget.py`). Other modules are left as they are.
    """
    import torch
    from torch import fx

    from export_gelu.passes.compat.precision.retarget import retarget_precision

    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    if precision not in dtypes or not isinstance(module, fx.GraphModule):
        return []
    n = retarget_precision(module, dtypes[precision])
    return [f"{n} float32 literal(s)/constant(s) of the exported graph retargeted to "
            f"{precision}"] * bool(n) + _clamp_note(module, precision)


def _clamp_note(gm: fx.GraphModule, precision: str, earlier: list[str] | None = None) -> list[str]:
    from export_gelu.passes.compat.precision.retarget import clamped_literals

    where = list(dict.fromkeys([*(earlier or []), *clamped_literals(gm)]))
    if not where:
        return []
    shown = ", ".join(where[:6]) + (f" and {len(where) - 6} more" if len(where) > 6 else "")
    return [f"float literals beyond {precision}'s range (masks such as "
            f"torch.finfo(torch.float32).min) clamped to its largest finite value in: {shown}"]


def fit_program_precision(program: ExportedProgram | None, precision: str) -> list[str]:
    """`fit_module_precision` for a captured ExportedProgram (in place)."""
    import torch

    from export_gelu.passes.compat.precision.retarget import retarget_program

    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    if precision not in dtypes or program is None:
        return []
    n = retarget_program(program, dtypes[precision])
    return [f"{n} float32 literal(s)/constant(s) of the captured graph retargeted to "
            f"{precision}"] * bool(n) + _clamp_note(program.graph_module, precision,
                                            getattr(program, "export_gelu_clamped", []))
