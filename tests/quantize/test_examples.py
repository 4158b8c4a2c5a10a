"""The flow on the bundled examples, function by function: placement coverage, accuracy on
held-out feeds against fp32 and against ONNX Runtime's `quantize_static` defaults on the
same graph and data, the verdict against PyTorch at the graph's scales (and a wrong scale
failing it), FP8 at opset 19, the old-opset INT8 graph of 8.2 and the 7.x cache."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from export_gelu.quantize import (
    calibrate,
    judge,
    lower,
    method_for,
    plan_quantization,
    quality,
    read_calibration_cache,
    read_qdq,
    route_for,
    run_graph,
)
from export_gelu.quantize.cache import tensorrt_version_number
from export_gelu.quantize.reference import fake_quantized
from export_gelu.targets import resolve_profile
from tests.quantize.conftest import feeds_for, torch_runs


def quantize_static_defaults(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]
                             ) -> onnx.ModelProto:
    """ONNX Runtime's `quantize_static` with every default (QDQ, QInt8, MinMax, all ops)."""
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(feeds)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "in.onnx", Path(tmp) / "out.onnx"
        onnx.save(model, str(src))
        quantize_static(str(src), str(dst), Reader())
        return onnx.load(str(dst))


def _flow(model: onnx.ModelProto, target: str, precision: str, calib: list) -> tuple:
    plan = plan_quantization(model, precision)
    ranges = calibrate(model, plan.activations, calib, method_for(precision, None))
    return plan, lower(model, plan, ranges, route_for(resolve_profile(target), precision))


@pytest.fixture(scope="module")
def bert86(example_graph):
    model = example_graph("bert", "trt8.6")
    return model, feeds_for(model, 8, seed=1), feeds_for(model, 8, seed=2)


def test_bert_trt86_int8(bert86) -> None:
    """The issue's bar on a transformer: ≥ 90% of weight products quantized, no GELU cut
    (test_placement_zoo), ≥ 30 dB on held-out feeds and at least quantize_static's."""
    model, calib, held = bert86
    plan, quantized = _flow(model, "trt8.6", "int8", calib)
    assert plan.weight_products == 12 and plan.coverage >= 0.9
    fp32 = run_graph(model, held)
    ours = quality(fp32, run_graph(quantized.model, held))["output_0"].sqnr_db
    static = quality(fp32, run_graph(quantize_static_defaults(model, calib), held,
                                     exact=False))["output_0"].sqnr_db
    assert ours >= 30.0 and ours >= static, (ours, static)


@pytest.mark.slow  # the rule alone, fast: test_cache_and_metrics.py::test_judge_rule
def test_verdict_passes_and_a_wrong_scale_fails(bert86) -> None:
    from examples import models

    model, calib, held = bert86
    _, quantized = _flow(model, "trt8.6", "int8", calib)
    module = models.build("bert")
    fp32 = run_graph(model, held)

    def verdict(graph: onnx.ModelProto):
        with fake_quantized(module, read_qdq(graph)) as mirrored:
            reference = torch_runs(module, model, held)
        assert not mirrored.unmirrored and len(mirrored.modules) == 12
        return judge(fp32, run_graph(graph, held), reference)

    good = verdict(quantized.model)
    assert good.passed, [v.line() for v in good.outputs.values()]
    # one weight's DequantizeLinear scale ×4 (its QuantizeLinear keeps the right one)
    bad = onnx.ModelProto()
    bad.CopyFrom(quantized.model)
    inits = {i.name: i for i in bad.graph.initializer}
    dq = next(n for n in bad.graph.node if n.op_type == "DequantizeLinear"
              and "/weight" in n.name and "MatMul_7" in n.name)
    wrong = onnx.numpy_helper.to_array(inits[dq.input[1]]) * 4
    bad.graph.initializer.append(onnx.numpy_helper.from_array(wrong, "wrong_scale"))
    dq.input[1] = "wrong_scale"
    failed = verdict(bad)
    assert not failed.passed and failed.failed == ["output_0"]
    assert "missed" in failed.outputs["output_0"].line()


@pytest.mark.parametrize("target", ["trt9", "trt10"])
def test_fp8_at_opset_19_runs_in_onnxruntime(example_graph, target: str) -> None:
    model = example_graph("bert", target)  # trt9: opset 19, trt10: opset 20
    calib, held = feeds_for(model, 4, 1), feeds_for(model, 4, 2)
    plan, quantized = _flow(model, target, "fp8", calib)
    out = quantized.model
    onnx.checker.check_model(out)
    assert out.opset_import[0].version >= 19
    qdq = [n for n in out.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    types = {i.name: i.data_type for i in out.graph.initializer}
    assert {types[n.input[2]] for n in qdq} == {TensorProto.FLOAT8E4M3FN}
    weights_fp8 = [i for i in out.graph.initializer if i.data_type == TensorProto.FLOAT8E4M3FN
                   and len(i.dims) == 2]
    assert len(weights_fp8) == (12 if target == "trt10" else 0)  # pre-quantized from 10.0
    # ONNX Runtime's CPU provider runs FLOAT8E4M3FN Q/DQ (onnxruntime >= 1.16)
    sqnr = quality(run_graph(model, held), run_graph(out, held))["output_0"].sqnr_db
    assert 30.0 <= sqnr < 80.0, sqnr


def test_trt82_int8_is_opset_13_per_channel(example_graph) -> None:
    model = example_graph("bert", "trt8.2")
    assert model.opset_import[0].version == 13
    calib = feeds_for(model, 2, 1)
    plan, quantized = _flow(model, "trt8.2", "int8", calib)
    out = quantized.model
    assert out.opset_import[0].version == 13
    dqs = [n for n in out.graph.node if n.op_type == "DequantizeLinear"]
    per_channel = [n for n in dqs if any(a.name == "axis" for a in n.attribute)]
    assert len(per_channel) == len(plan.points) and len(dqs) == 2 * len(plan.points)
    # float weights → Q → DQ before 10.0: every weight DQ reads a QuantizeLinear
    producer = {o: n.op_type for n in out.graph.node for o in n.output}
    assert {producer[n.input[0]] for n in per_channel} == {"QuantizeLinear"}


def test_trt70_int8_is_the_fp32_graph_and_a_cache(example_graph) -> None:
    model = example_graph("bert", "trt8.2")  # opset 13 is fine for the cache: names only
    calib = feeds_for(model, 2, 1)
    plan, quantized = _flow(model, "trt7.0", "int8", calib)
    assert quantized.model is model and quantized.calibration_cache is not None
    header, scales = read_calibration_cache(quantized.calibration_cache)
    assert header == f"TRT-{tensorrt_version_number('7.0')}-EntropyCalibration2" == \
        "TRT-7000-EntropyCalibration2"
    names = {t for n in model.graph.node for t in n.output} | {i.name for i in model.graph.input}
    assert set(scales) == set(plan.activations) and set(scales) <= names
    for name, scale in scales.items():
        assert scale == pytest.approx(quantized.activation_scales[name], rel=1e-7)
