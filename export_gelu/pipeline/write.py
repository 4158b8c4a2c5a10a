"""The save stage: the graph written beside its final name, validated, then renamed into
place; a big model's weights streamed from their file with a byte counter."""

from __future__ import annotations

import onnx

from export_gelu.exporter.saving.save import save_onnx_streaming
from export_gelu.exporter.saving.workdir import release_workdirs
from export_gelu.graph import skeleton
from export_gelu.onnx_weights import lazy_bytes
from export_gelu.pipeline.stage import stage_io
from export_gelu.pipeline.state import ExportState, need


@stage_io(reads=("graph", "output"), writes=("graph", "weights"))
def save(state: ExportState) -> None:
    """graph → output (+ .data: the weights streamed there, a big graph's); the graph kept as
    a skeleton (its weights are on disk)."""
    rep, out, model = state.report, need(state.output, "output"), need(state.graph, "graph")
    state.progress.step(f"writing {out}")
    out.parent.mkdir(exist_ok=True)  # -o DIR/: its parent was checked (output_plan)
    size = lazy_bytes(model)
    counter = state.progress.byte_counter(size, f"writing {out.name}.data") if size else None
    try:
        written, streamed = save_onnx_streaming(model, out,
                                                validate=onnx.checker.check_model,
                                                on_bytes=counter)
    finally:
        release_workdirs()  # the exporter's copy of a big model's weights is in `out` now
    state.weights = streamed
    if streamed is not None:
        rep.weights = streamed.to_json()
    state.graph = skeleton(model)  # free the in-memory copy of the weights
    rep.output = str(written[0])
    rep.external_data = str(written[1]) if len(written) > 1 else None
