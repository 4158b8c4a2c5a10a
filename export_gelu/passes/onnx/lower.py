"""Lower: choose what each canonical GELU site becomes for a target, `--gelu` and precision.

A site's *math* changes only when asked (`--gelu erf|tanh|sigmoid|plugin`), and the action
says what that costs. The *op* it is written as follows the target profile's
`gelu_lowering`: ONNX `Gelu` (graph opset ≥ 20), ORT contrib ops, or primitives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from export_gelu import graph as G
from export_gelu.passes.onnx import emit
from export_gelu.passes.onnx.plugin_form import site_bias
from export_gelu.passes.onnx.recognise import Match
from export_gelu.passes.sites import added_max_error
from export_gelu.targets import TargetProfile

#: --gelu FORM → the kind every exact/tanh site becomes (QuickGELU sites never change).
FORM_KIND = {"erf": "exact", "tanh": "tanh", "sigmoid": "quick", "plugin": "tanh"}
_HALF_TYPES = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)


@dataclass(frozen=True)
class Lowering:
    """What one site becomes: a description, whether it folds a bias Add, and its emitter."""

    name: str
    kind: str  # the kind of GELU it computes
    bias: str  # how it takes a bias Add folded into it: "" (it can't) | "input" | "attribute"
    emit: Callable[..., None]  # (builder, x, out, bias) -> None
    #: leave a MatMul's bias Add to the runtime's MatMul+Add→Gemm fusion instead of folding it
    bias_to_gemm: bool = False


def added_error(site_kind: str, new_kind: str) -> float:
    """Worst-case absolute error a kind change adds (docs/gelu.md)."""
    return added_max_error(site_kind, new_kind)


def _no_bias(fn: Callable[..., None]) -> Callable[..., None]:
    def run(b: emit.SiteBuilder, x: gs.Tensor, out: gs.Tensor, bias: object) -> None:
        fn(b, x, out)
    return run


def _ort(kind: str) -> Lowering:
    def run(b: emit.SiteBuilder, x: gs.Tensor, out: gs.Tensor, bias: gs.Tensor | None) -> None:
        emit.ort_gelu(b, x, out, kind, bias)
    return Lowering("{op} (ONNX Runtime contrib op)", kind, "" if kind == "quick" else "input",
                    run, bias_to_gemm=True)


def _plugin(trt_version: str) -> Lowering:
    def run(b: emit.SiteBuilder, x: gs.Tensor, out: gs.Tensor, bias: np.ndarray | None) -> None:
        emit.trt_plugin(b, x, out, site_bias(bias, b.shape, b.prefix, trt_version))
    return Lowering(f"TensorRT {emit.PLUGIN_OP} (computes the tanh form)", "tanh", "attribute",
                    run)


def _primitives(kind: str, fp16_safe: bool, half_x_elsewhere: bool) -> Lowering:
    if kind == "exact":
        return Lowering("erf primitives (Div/Erf/Add/Mul/Mul)", "exact", "",
                        _no_bias(emit.erf_primitives))
    if kind == "tanh":
        name = ("tanh primitives, fp16-safe (factored, no Pow, tanh argument bounded)"
                if fp16_safe else "tanh primitives (factored, no Pow)")
        if half_x_elsewhere:
            name += ("; not in ONNX Runtime's FastGelu order: another node also computes its "
                     "input · 0.5, which that fusion would break")
        return Lowering(name, "tanh", "", _no_bias(partial(
            emit.tanh_primitives, fp16_safe=fp16_safe, ort_fusable=not half_x_elsewhere)))
    return Lowering("x·Sigmoid(1.702·x) primitives", "quick", "",
                    _no_bias(emit.sigmoid_primitives))


def half_x_elsewhere(graph: gs.Graph, site: Match) -> bool:
    """True when a node outside `site` computes site.x · 0.5 (a Mul by a constant 0.5)."""
    for node in G.consumers(site.x):
        if site.covers(node) or node.op != "Mul" or not G.is_default(node):
            continue
        others = [i for i in node.inputs if i is not site.x]
        value = G.literal(graph, others[0]) if len(others) == 1 else None
        if value is not None and value.size == 1 and float(value.reshape(())) == 0.5:
            return True
    return False


def choose(site: Match, profile: TargetProfile, form: str, precision: str, opset: int, *,
           elem_type: int, half_x_taken: bool = False) -> tuple[Lowering, list[str]]:
    """The lowering for one site, and notes on why (for the site's action).

    `half_x_taken`: another node computes the site's input · 0.5 (`half_x_elsewhere`).
    """
    notes: list[str] = []
    kind = site.kind if site.kind == "quick" or form == "keep" else FORM_KIND[form]
    if form == "plugin" and site.kind != "quick":
        return _plugin(profile.trt_version), notes
    fp16_safe = precision == "fp16" or elem_type in _HALF_TYPES
    if elem_type == onnx.TensorProto.DOUBLE and kind != "quick":
        notes.append("float64: ONNX Runtime's fused GELU kernels lack float64 or lose its "
                     "precision (docs/real-models.md), so primitives")
        return _primitives(kind, False, half_x_taken), notes
    if profile.gelu_lowering == "ort_contrib":
        return _ort(kind), notes
    if profile.gelu_lowering == "onnx_gelu" and kind != "quick":
        if opset >= 20 and "Gelu" in profile.ops:
            approx = "tanh" if kind == "tanh" else "none"

            def run(b: emit.SiteBuilder, x: gs.Tensor, out: gs.Tensor, bias: object) -> None:
                emit.onnx_gelu(b, x, out, approx)
            return Lowering(f"ONNX Gelu(approximate={approx})", kind, "", run), notes
        notes.append(f"graph opset {opset} < 20 has no Gelu op")
    return _primitives(kind, fp16_safe, half_x_taken), notes


def action_text(site: Match, lowering: Lowering, last: gs.Node, folded: gs.Node | None,
                notes: list[str]) -> str:
    """The report's sentence for what a site became (`last`: the node it now ends in)."""
    op = f"{last.domain}.{last.op}" if last.domain else last.op
    parts = [f"rewritten to {lowering.name.format(op=op)}"]
    if folded is not None:
        parts.append(f"bias Add {folded.name} folded in")
    if site.kind != lowering.kind:
        err = added_error(site.kind, lowering.kind)
        parts.append(f"changes {site.kind} → {lowering.kind}: adds up to {err:.3g} (opt-in)")
    parts += notes
    return "; ".join(parts)
