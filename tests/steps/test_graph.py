"""steps/graph.py: save (the graph written and validated, kept as a skeleton) and make_graph
(an ONNX input or a torch model to the graph written for the target, each part timed)."""

from __future__ import annotations

from pathlib import Path

import onnx

from export_gelu.run import Run
from export_gelu.steps.graph import make_graph, save
from tests.onnx_graphs import feed, hand_graph, max_diff, run_ort
from tests.steps.step_inputs import export_inputs_of, export_request, onnx_model


def test_save_writes_the_graph_and_keeps_a_skeleton(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "out.onnx"  # -o sub/out.onnx: the folder made here
    written = save(hand_graph("erf commuted"), out, Run())
    got = onnx.load(str(out))
    onnx.checker.check_model(got)
    x = feed(got)
    assert max_diff(run_ort(got, x), run_ort(hand_graph("erf commuted"), x)) == 0
    assert written.path == out and written.data is None and written.weights is None
    assert sorted(p.name for p in out.parent.iterdir()) == ["out.onnx"]
    # the graph stays as a skeleton: its structure without the weights' bytes
    assert [n.op_type for n in written.skeleton.graph.node] == [n.op_type for n in got.graph.node]
    (weight,) = [t for t in written.skeleton.graph.initializer if len(t.dims) == 2]
    assert list(weight.dims) == [16, 16] and not weight.raw_data and not weight.float_data


def test_make_graph_of_an_onnx_input(tmp_path: Path) -> None:
    request = export_request(onnx_model(tmp_path), tmp_path, target="trt8.6")
    run = Run()
    saved = make_graph(request, tmp_path / "out.onnx", export_inputs_of(request), run)
    assert list(run.seconds) == ["load", "onnx_passes", "checks", "save"]
    assert saved.path == tmp_path / "out.onnx" and saved.path.is_file()
    assert saved.exporter == "none (ONNX input)" and saved.compatibility == {"trt8.6": []}
    assert [s.kind for s in saved.gelu_sites] == ["tanh"] and saved.opset == 17


def test_make_graph_of_a_program(program: Path, tmp_path: Path) -> None:
    request = export_request(program, tmp_path, target="onnx")
    saved = make_graph(request, tmp_path / "out.onnx", export_inputs_of(request), Run())
    assert saved.opset == 20 and saved.op_counts["Gelu"] == 1
    (site,) = saved.gelu_sites
    assert site.module == "act" and "ONNX Gelu" in site.action
