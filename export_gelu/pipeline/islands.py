"""fp16 exports: overflow sites kept in fp32 (passes/compat/precision/fp16_islands.py), the graph
rewritten in place and verified again, the islands listed in the report.

ONNX Runtime's CPU provider computes many fp16 ops in fp32 (it inserts Casts where it has no
fp16 kernel), so an overflow may not show in parity here while TensorRT or a GPU provider,
computing in fp16, gives inf or NaN there. The sites are therefore found from the values
themselves (the graph run in fp32), whether parity here failed or not.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx

from export_gelu.check.deployed import deployed_feed
from export_gelu.exporter.saving.save import save_onnx_atomic
from export_gelu.notes import Note
from export_gelu.passes.compat.precision.fp16_islands import overflow_sites, with_islands
from export_gelu.pipeline.state import ExportState, need

ISLANDS_NOTE = ("fp16 overflow: {sites} exceed fp16's range (|x| > 65504) in the graph run "
                "in fp32; kept in fp32 ({nodes} node(s) with Casts at their edges), the graph "
                "rewritten and verified again (parity before: {before})")


def finds_islands(state: ExportState) -> bool:
    """An fp16 graph of a small model (its weights not streamed), written here and checked in
    ONNX Runtime."""
    parity = state.parity
    return bool(state.run_precision == "fp16" and state.output is not None
                and state.output.is_file() and state.weights is None and state.engine is None
                and parity is not None and parity.status != "skipped"
                and parity.nondeterministic is None)


def fix_overflow(state: ExportState, recheck: Callable[[ExportState], None]) -> None:
    """Find the sites; when there are any, rewrite the output with fp32 islands and call
    `recheck(state)` (parity again, on the rewritten graph: `state.parity` anew)."""
    rep, output = state.report, need(state.output, "output")
    model = onnx.load(str(output))
    try:
        sites = overflow_sites(model, deployed_feed(state.feed, model))
        if not sites:
            return
        fixed, islands = with_islands(model, sites)
        onnx.checker.check_model(fixed)
    except Exception as exc:  # noqa: BLE001 - the graph as written stands; say why
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        rep.notes.append(Note(f"fp16 overflow sites not looked for or not fixed ({first}); the "
                              "graph is as exported", "fp16-islands-skipped"))
        return
    save_onnx_atomic(fixed, output, external_data=False)
    state.graph = fixed
    before = need(state.parity, "parity")
    state.progress.step(f"verifying again with {len(islands)} fp32 island(s)")
    recheck(state)
    need(state.parity, "parity").islands = [i.to_json() for i in islands]
    worst = max((o.max_abs for o in before.outputs.values()), default=float("nan"))
    rep.notes.append(Note(ISLANDS_NOTE.format(
        sites=", ".join(f"{i.tensor} ({i.op_type} {i.node}, max |x| {i.max_abs:.3g})"
                        for i in islands),
        nodes=len({n for i in islands for n in i.nodes}),
        before=f"{before.status}, max abs {worst:.3g}"), "fp16-islands"))
