"""pipeline/onnx_stages.py's stages on hand-built states: onnx_input (an ONNX input at the
opset it is exported at), onnx_passes (the GELU rewrite and the fit to the target) and
target_check (the target's static verdict)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from export_gelu import graph as one_graph
from export_gelu.errors import TargetUnmetError
from export_gelu.parse_check import model_opset
from export_gelu.pipeline.onnx_stages import onnx_input, onnx_passes, target_check
from tests.onnx_graphs import feed, hand_graph, max_diff, run_ort
from tests.steps.step_inputs import export_state, onnx_model, with_loaded


def test_onnx_input_converts_up_where_the_target_gains(tmp_path: Path) -> None:
    """opset 17 for --target onnx: converted up to 20 (native Gelu), same numbers."""
    state = with_loaded(export_state(onnx_model(tmp_path), tmp_path, target="onnx"))
    onnx_input(state)
    assert model_opset(state.graph) == 20
    assert state.profile.name == "onnx"
    assert state.report.exporter == "none (ONNX input)"
    assert "opset-conversion" in [n.code for n in state.report.notes]
    x = feed(state.graph)
    assert max_diff(run_ort(state.graph, x), run_ort(hand_graph("tanh x*x*x"), x)) < 1e-5


def test_onnx_input_with_a_lower_opset_caps_the_profile(tmp_path: Path) -> None:
    state = with_loaded(export_state(onnx_model(tmp_path), tmp_path, target="ort", opset=14))
    onnx_input(state)
    assert state.profile.opset == 14 and state.checked.profile.opset != 14
    assert model_opset(state.graph) == 17  # converted down later, by the target fit
    assert any("converted down to opset 14" in n for n in state.report.notes)


def test_onnx_input_renames_outputs_on_request(tmp_path: Path) -> None:
    state = with_loaded(export_state(onnx_model(tmp_path), tmp_path, output_names="logits"))
    onnx_input(state)
    assert [o.name for o in state.graph.graph.output] == ["logits"]


def _passes_state(tmp_path: Path, target: str, gelu: str = "keep"):  # noqa: ANN202
    state = with_loaded(export_state(onnx_model(tmp_path), tmp_path, target=target, gelu=gelu))
    state.graph = onnx.load(str(state.model_path))
    return state


def test_onnx_passes_rewrites_the_tanh_site_for_onnx_runtime(tmp_path: Path) -> None:
    state = _passes_state(tmp_path, "ort")
    onnx_passes(state)
    assert state.gs_graph is not None  # the one graph, kept for target_check
    rep = state.report
    assert [(s.kind, s.level) for s in rep.gelu_sites] == [("tanh", "onnx")]
    assert rep.gelu_sites[0].emitted[0].endswith("/FastGelu")
    assert rep.op_counts == {"MatMul": 1, "Add": 1, "com.microsoft.FastGelu": 1}
    assert rep.opset == 17
    ops = [n.op_type for n in state.graph.graph.node]
    assert "FastGelu" in ops and "Tanh" not in ops  # written back into state.graph


def test_onnx_passes_lowers_to_erf_when_asked(tmp_path: Path) -> None:
    state = _passes_state(tmp_path, "onnx", gelu="erf")
    state.graph = onnx.version_converter.convert_version(state.graph, 20)
    onnx_passes(state)
    (site,) = state.report.gelu_sites
    assert site.kind == "tanh" and site.added_max_error > 0  # tanh → erf changes the math
    assert "Tanh" not in state.report.op_counts


def test_target_check_records_the_verdict_and_frees_the_graph(tmp_path: Path) -> None:
    state = _passes_state(tmp_path, "trt8.6")
    state.gs_graph = one_graph.load(state.graph)
    target_check(state)
    assert state.gs_graph is None
    assert state.report.compatibility == {"trt8.6": []}
    (takers,) = [n for n in state.report.notes if n.code == "trt-takers"]
    assert takers.startswith("TensorRT versions that parse the output as is: ")
    assert takers.endswith("trt8.4–trt11")
    assert state.report.dynamic is None  # no --dynamic dims


def test_target_check_refuses_a_graph_the_target_cannot_parse(tmp_path: Path) -> None:
    """An opset-20 Gelu is beyond TensorRT 8.2's parser: the stage exits 3 (a bug, said so)."""
    state = _passes_state(tmp_path, "trt8.2")
    state.graph = onnx.load(str(onnx_model(tmp_path, "tanh x*x*x", "g.onnx")))
    g20 = onnx.version_converter.convert_version(state.graph, 20)
    state.graph = g20
    state.gs_graph = one_graph.load(g20)
    with pytest.raises(TargetUnmetError, match="does not fit trt8.2: .*a bug in export-gelu"):
        target_check(state)
    assert state.gs_graph is None
    assert state.report.compatibility["trt8.2"]
