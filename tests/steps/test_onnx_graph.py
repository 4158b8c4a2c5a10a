"""steps/onnx_graph.py: onnx_input (an ONNX input at the opset it is exported at),
onnx_passes (the GELU rewrite and the fit to the target) and target_check (the target's
static verdict)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from export_gelu import graph as one_graph
from export_gelu.errors import TargetUnmetError
from export_gelu.parse_check import model_opset
from export_gelu.run import Run
from export_gelu.steps.onnx_graph import Rewritten, onnx_input, onnx_passes, target_check
from tests.onnx_graphs import feed, hand_graph, max_diff, run_ort
from tests.steps.step_inputs import export_inputs_of, export_request, onnx_model


def test_onnx_input_converts_up_where_the_target_gains(tmp_path: Path) -> None:
    """opset 17 for --target onnx: converted up to 20 (native Gelu), same numbers."""
    request = export_request(onnx_model(tmp_path), tmp_path, target="onnx")
    run = Run()
    given = onnx_input(request, export_inputs_of(request), run)
    assert model_opset(given.model) == 20 and given.profile.name == "onnx"
    assert "opset-conversion" in [n.code for n in run.notes]
    x = feed(given.model)
    assert max_diff(run_ort(given.model, x), run_ort(hand_graph("tanh x*x*x"), x)) < 1e-5


def test_onnx_input_with_a_lower_opset_caps_the_profile(tmp_path: Path) -> None:
    request = export_request(onnx_model(tmp_path), tmp_path, target="ort", opset=14)
    run = Run()
    given = onnx_input(request, export_inputs_of(request), run)
    assert given.profile.opset == 14 and request.profile.opset != 14
    assert model_opset(given.model) == 17  # converted down later, by the target fit
    assert any("converted down to opset 14" in n for n in run.notes)


def test_onnx_input_renames_outputs_on_request(tmp_path: Path) -> None:
    request = export_request(onnx_model(tmp_path), tmp_path, output_names="logits")
    given = onnx_input(request, export_inputs_of(request), Run())
    assert [o.name for o in given.model.graph.output] == ["logits"]


def test_onnx_passes_rewrites_the_tanh_site_for_onnx_runtime(tmp_path: Path) -> None:
    request = export_request(onnx_model(tmp_path), tmp_path, target="ort")
    model = onnx.load(str(request.model))
    done = onnx_passes(model, [], request.profile, request.options, Run())
    assert done.graph is not None  # the one graph, kept for target_check
    assert [(s.kind, s.level) for s in done.gelu_sites] == [("tanh", "onnx")]
    assert done.gelu_sites[0].emitted[0].endswith("/FastGelu")
    assert done.op_counts == {"MatMul": 1, "Add": 1, "com.microsoft.FastGelu": 1}
    assert done.opset == 17
    ops = [n.op_type for n in model.graph.node]
    assert "FastGelu" in ops and "Tanh" not in ops  # written back into the model


def test_onnx_passes_lowers_to_erf_when_asked(tmp_path: Path) -> None:
    request = export_request(onnx_model(tmp_path), tmp_path, target="onnx", gelu="erf")
    model = onnx.version_converter.convert_version(onnx.load(str(request.model)), 20)
    done = onnx_passes(model, [], request.profile, request.options, Run())
    (site,) = done.gelu_sites
    assert site.kind == "tanh" and site.added_max_error > 0  # tanh → erf changes the math
    assert "Tanh" not in done.op_counts


def _rewritten(model: onnx.ModelProto) -> Rewritten:
    return Rewritten(one_graph.load(model), [], model_opset(model), {})


def test_target_check_gives_the_verdict_and_closes_the_graph(tmp_path: Path) -> None:
    request = export_request(onnx_model(tmp_path), tmp_path, target="trt8.6")
    model = onnx.load(str(request.model))
    rewritten, run = _rewritten(model), Run()
    fit = target_check(model, rewritten, request.profile, export_inputs_of(request), run)
    assert fit.compatibility == {"trt8.6": []} and fit.dynamic_profile is None
    assert vars(rewritten.graph) == {}  # closed: the model's weights are not kept alive
    (takers,) = [n for n in run.notes if n.code == "trt-takers"]
    assert takers.startswith("TensorRT versions that parse the output as is: ")
    assert takers.endswith("trt8.4–trt11")


def test_target_check_refuses_a_graph_the_target_cannot_parse(tmp_path: Path) -> None:
    """An opset-20 Gelu is beyond TensorRT 8.2's parser: exit 3 (a bug, said so)."""
    request = export_request(onnx_model(tmp_path), tmp_path, target="trt8.2")
    g20 = onnx.version_converter.convert_version(onnx.load(str(request.model)), 20)
    with pytest.raises(TargetUnmetError, match="does not fit trt8.2: .*a bug in export-gelu"):
        target_check(g20, _rewritten(g20), request.profile, export_inputs_of(request), Run())
