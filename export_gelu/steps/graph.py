"""`make_graph`: from a loaded model and its feed to the graph written for the target (what
export runs once and `--compare-forms` once per GELU form):

    ONNX input:  onnx_input ───────────────────────┐
    torch model: capture → fx_passes → export ─────┴→ onnx_passes → checks → save
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx

from export_gelu.exporter.saving.save import save_onnx_streaming
from export_gelu.exporter.saving.workdir import release_workdirs
from export_gelu.graph import skeleton
from export_gelu.onnx_weights import WrittenWeights, lazy_bytes
from export_gelu.options import ExportOptions
from export_gelu.results.export import ExportInputs, SavedGraph
from export_gelu.results.request import Request
from export_gelu.run import Run
from export_gelu.steps.onnx_graph import ONNX_INPUT, onnx_input, onnx_passes, target_check
from export_gelu.steps.torch_graph import from_torch


@dataclass(frozen=True)
class Written:
    """A graph as saved: the file, its external data (None: none), the weights streamed into
    it (a big graph's), and the graph without its weights' bytes."""

    path: Path
    data: Path | None
    weights: WrittenWeights | None
    skeleton: onnx.ModelProto


def save(model: onnx.ModelProto, out: Path, run: Run) -> Written:
    """`model` written beside `out`, validated, then renamed into place (a big graph's
    weights streamed from their file with a byte counter)."""
    run.say(f"writing {out}")
    out.parent.mkdir(exist_ok=True)  # -o DIR/: its parent was checked (output_plan)
    size = lazy_bytes(model)
    counter = run.progress.byte_counter(size, f"writing {out.name}.data") if size else None
    try:
        written, streamed = save_onnx_streaming(model, out,
                                                validate=onnx.checker.check_model,
                                                on_bytes=counter)
    finally:
        release_workdirs()  # the exporter's copy of a big model's weights is in `out` now
    return Written(written[0], written[1] if len(written) > 1 else None, streamed,
                   skeleton(model))  # the in-memory copy of the weights is freed


def make_graph(request: Request[ExportOptions], output: Path, inputs: ExportInputs, run: Run
               ) -> SavedGraph:
    """The graph for `request`'s target, written to `output`."""
    profile = request.profile
    if inputs.is_onnx:
        with run.step("load", name="onnx_input"):
            given = onnx_input(request, inputs, run)
        model, profile, fx_sites, exporter = given.model, given.profile, [], ONNX_INPUT
    else:
        made = from_torch(request, inputs, output, run)
        model, fx_sites, exporter = made.model, made.fx_sites, made.exporter
    with run.step("onnx_passes"):
        rewritten = onnx_passes(model, fx_sites, profile, request.options, run)
    with run.step("checks"):
        fit = target_check(model, rewritten, profile, inputs, run)
    with run.step("save"):
        written = save(model, output, run)
    return SavedGraph(written.path, written.data, written.weights, written.skeleton, profile,
                      exporter, rewritten.opset, rewritten.op_counts, rewritten.gelu_sites,
                      fit.compatibility, fit.dynamic_profile)
