"""steps/localize.py: localize_graph (where the written or deployed graph starts to differ
from PyTorch) and localize_device (the same from the module-boundary tensors a device handed
back)."""

from __future__ import annotations

from pathlib import Path

from export_gelu.check.runners.deployed import feed_for, open_deployed
from export_gelu.check.verdict.parity import ParityResult
from export_gelu.exporter.loading.load import load_model
from export_gelu.run import Run
from export_gelu.steps.localize import (
    bundle_tensors,
    engine_not_localized,
    localize_device,
    localize_graph,
    localizes,
)
from export_gelu.tolerances import resolve_tolerances
from tests.steps.step_inputs import main_feed, onnx_model, scaled_weights

TOL = resolve_tolerances("fp32")
PASSED = ParityResult("passed")  # (--localize on a passing run: no tie check)


def _feed(graph: Path):  # noqa: ANN202
    return feed_for(open_deployed(graph), main_feed())


def test_localizes_a_failure_or_when_asked() -> None:
    assert localizes(ParityResult("failed"), False)
    assert localizes(ParityResult("passed"), True) and not localizes(ParityResult("passed"), False)
    assert not localizes(ParityResult("skipped"), True)


def test_localize_names_the_module_whose_weights_are_wrong(tiny: tuple[Path, Path],
                                                           tmp_path: Path) -> None:
    program, graph = tiny
    wrong = scaled_weights(graph, tmp_path / "wrong.onnx", 1.3)  # fc's weight ×1.3
    found = localize_graph(load_model(program), wrong, _feed(wrong), TOL, parity=PASSED,
                           threads=1,
                           device="cpu", run=Run())
    assert found.method == "modules", found.reason
    assert found.first is not None and found.first.torch_module == "fc"
    assert found.first.op_type in ("MatMul", "Gemm", "Add") and found.first.max_abs > 0.01
    by_module = {m.module: m for m in found.modules}
    assert not by_module["fc"].passed and by_module["fc"].max_abs > 0.01


def test_localize_on_a_right_graph_finds_no_divergence(tiny: tuple[Path, Path]) -> None:
    program, graph = tiny
    found = localize_graph(load_model(program), graph, _feed(graph), TOL, parity=PASSED,
                           threads=1,
                           device="cpu", run=Run())
    assert found.method == "modules" and found.first is None
    assert {m.module for m in found.modules} == {"fc", "act"}
    assert all(m.passed for m in found.modules)
    assert bundle_tensors(load_model(program), graph)  # a bundle asks the device for them


def test_localize_an_onnx_model_goes_node_by_node(tmp_path: Path) -> None:
    """An ONNX MODEL has no PyTorch modules: DEPLOYED is compared node by node with itself
    run in float64 (wrong weights compute the same there: no divergence)."""
    model = onnx_model(tmp_path)
    wrong = scaled_weights(model, tmp_path / "wrong.onnx", 1.3)
    found = localize_graph(load_model(model), wrong, _feed(wrong), TOL, parity=PASSED,
                           threads=1,
                           device="cpu", run=Run())
    assert found.method == "nodes", found.reason
    assert found.first is None
    assert found.modules[0].module.startswith("MatMul") and found.modules[0].depth == 0
    assert all(m.passed for m in found.modules)
    assert bundle_tensors(load_model(model), wrong) == []


def test_an_engine_is_not_localized() -> None:
    found = engine_not_localized()
    assert found.method == "none" and "TensorRT engine" in found.reason


def test_localize_device_without_module_outputs_says_how_to_get_them(
        tiny: tuple[Path, Path]) -> None:
    program, graph = tiny
    found = localize_device(load_model(program), graph, _feed(graph), TOL, {},
                            device_outputs={}, parity=PASSED, threads=1, device="cpu", run=Run())
    assert found.method == "none"
    assert "run `sh run_on_device.sh localize`" in found.reason


def test_judged_and_quant_localizes_follow_the_int8_verdict() -> None:
    from export_gelu.quantize.judge import QuantVerdict
    from export_gelu.results.quantize import QdqGraph, QdqJudged
    from export_gelu.steps.localize import judged, quant_localizes

    read = QdqGraph("int8", "float_q_dq", 1, 1, 0)
    not_judged = QdqJudged(read, 1, None, "an ONNX MODEL")
    passed = QdqJudged(read, 1, QuantVerdict({}))
    assert not judged(None) and not judged(not_judged) and judged(passed)
    failed_fp32 = ParityResult("failed", "over tolerance", 1e-4, 1e-3, ["pytorch", "ort"])
    assert not quant_localizes(passed, failed_fp32, asked=False)  # judged at its scales
    assert quant_localizes(passed, failed_fp32, asked=True)
    assert quant_localizes(None, failed_fp32, asked=False) == localizes(failed_fp32, False)
