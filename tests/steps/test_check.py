"""steps/check.py: check (parity of the written graph against the reference, through the one
checker) and check_shapes (parity at every size of the --dynamic ranges)."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx

from export_gelu.check.runners.devices import resolve_device
from export_gelu.check.verdict.parity import ParityResult, skipped
from export_gelu.options import ExportOptions
from export_gelu.results.export import ExportInputs, GraphCheck, SavedGraph, Verdict
from export_gelu.run import Run
from export_gelu.steps.check import (
    CheckContext,
    check,
    check_shapes,
    checks_shapes,
    export_tolerances,
    no_kernel,
)
from tests.steps.step_inputs import (
    export_inputs_of,
    export_request,
    onnx_model,
    saved_graph,
    scaled_weights,
)


def _written(tmp_path: Path, written: Path | None = None, **options: object
             ) -> tuple[CheckContext, SavedGraph]:
    """An ONNX input (its own reference) and the graph the export wrote (a copy of it, or
    `written`)."""
    model = onnx_model(tmp_path)
    request = export_request(model, tmp_path, **options)
    shutil.copyfile(written or model, tmp_path / "out.onnx")
    inputs = export_inputs_of(request)
    return _context(request.options, inputs), saved_graph(request, tmp_path / "out.onnx")


def _context(options: ExportOptions, inputs: ExportInputs) -> CheckContext:
    return CheckContext(inputs, options, resolve_device("cpu"), None,
                        export_tolerances([], inputs.run_precision, options))


def test_check_passes_the_same_graph(tmp_path: Path) -> None:
    ctx, saved = _written(tmp_path)
    verdict = check(ctx, saved, Run())
    parity = verdict.parity
    assert parity.status == "passed", parity.reason
    assert parity.runners == ["input-onnx", "onnxruntime"]
    (out,) = parity.outputs.values()
    assert out.max_abs < 1e-6 and out.elements == 2 * 4 * 16
    assert (parity.atol, parity.rtol) == (1e-4, 1e-3)  # fp32's, no GELU form changed
    assert verdict.reference is not None and verdict.reference.name == "input-onnx"
    assert [r.name for r in verdict.checked.providers] == ["onnxruntime"]
    assert set(verdict.checked.latency) == {"input-onnx", "onnxruntime"}


def test_check_fails_a_wrong_graph_naming_the_output(tmp_path: Path) -> None:
    wrong = scaled_weights(onnx_model(tmp_path, name="src.onnx"), tmp_path / "wrong.onnx", 1.5)
    ctx, saved = _written(tmp_path, wrong)
    parity = check(ctx, saved, Run()).parity
    assert parity.status == "failed"
    (name, out), = parity.outputs.items()
    assert not out.passed and out.max_abs > 0.1
    assert name in parity.reason


def _symbolic_batch(src: Path, dst: Path) -> Path:
    model = onnx.load(str(src))
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(model, dst)
    return dst


def test_check_shapes_checks_each_size_of_the_range(tmp_path: Path) -> None:
    model = _symbolic_batch(onnx_model(tmp_path, name="fixed.onnx"), tmp_path / "dyn.onnx")
    request = export_request(model, tmp_path, dynamic=("batch=1:2:5",))
    shutil.copyfile(model, tmp_path / "out.onnx")
    inputs = export_inputs_of(request)
    ctx, saved = _context(request.options, inputs), saved_graph(request, tmp_path / "out.onnx")
    passed = Verdict(GraphCheck(ParityResult("passed")), saved.graph)  # the main check ran
    assert checks_shapes(request.options, inputs, passed.parity)
    assert not checks_shapes(request.options, inputs, skipped("--no-verify"))
    verdict = check_shapes(ctx, saved, passed, Run())
    sizes = sorted(s.sizes["batch"] for s in verdict.shapes)
    assert sizes[0] == 1 and sizes[-1] == 5 and 2 in sizes
    for shape in verdict.shapes:
        assert shape.inputs["x"] == [shape.sizes["batch"], 4, 16]
        result = shape.by_runner["onnxruntime"]
        assert result.status == "passed" and max(o.max_abs for o in result.outputs.values()) < 1e-5
    assert verdict.parity.status == "passed"


def test_ort_missing_is_none_where_onnxruntime_imports() -> None:
    from export_gelu.steps.check import ort_missing

    assert ort_missing() is None  # the test environment has onnxruntime


def test_no_kernel_names_the_op_onnx_runtime_lacks_and_nothing_else() -> None:
    lacking = no_kernel(RuntimeError("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find "
                                     "an implementation for Where(16) node with name 'w'"))
    assert lacking == ("ONNX Runtime (CPU) has no kernel for an op of the written graph: "
                       "Could not find an implementation for Where(16) node with name 'w'")
    assert no_kernel(RuntimeError("[ONNXRuntimeError] : 1 : FAIL : shape mismatch")) is None
