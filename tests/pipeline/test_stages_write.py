"""pipeline/write.py's save stage on a hand-built state: the graph written and validated,
the report pointing at it, the graph kept as a skeleton."""

from __future__ import annotations

from pathlib import Path

import onnx

from export_gelu.pipeline.write import save
from tests.onnx_graphs import feed, hand_graph, max_diff, run_ort
from tests.steps.step_inputs import export_state, onnx_model


def test_save_writes_the_graph_and_says_where(tmp_path: Path) -> None:
    state = export_state(onnx_model(tmp_path), tmp_path)
    state.graph = hand_graph("erf commuted")
    state.output = tmp_path / "sub" / "out.onnx"  # -o sub/out.onnx: the folder made here
    save(state)
    written = onnx.load(str(state.output))
    onnx.checker.check_model(written)
    x = feed(written)
    assert max_diff(run_ort(written, x), run_ort(hand_graph("erf commuted"), x)) == 0
    assert state.report.output == str(state.output)
    assert state.report.external_data is None and state.report.weights is None
    assert sorted(p.name for p in state.output.parent.iterdir()) == ["out.onnx"]
    # the graph stays as a skeleton: its structure without the weights' bytes
    assert [n.op_type for n in state.graph.graph.node] == [n.op_type for n in written.graph.node]
    (weight,) = [t for t in state.graph.graph.initializer if len(t.dims) == 2]
    assert list(weight.dims) == [16, 16] and not weight.raw_data and not weight.float_data
