"""Sensitivity and the automatic mixed precision on a model with one outlier-heavy layer:
fc2 reads a GELU output two of whose channels are ~300× the rest (its weights on them as
much smaller), so one per-tensor INT8 scale leaves the others a level or two; the sweep
names fc2 first, and the automatic mode keeps exactly fc2 in float to reach the target,
measured again."""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest

from export_gelu.quantize import (
    DEFAULT_TARGET_SQNR_DB,
    auto_keep,
    calibrate,
    lower,
    method_for,
    plan_quantization,
    quality,
    route_for,
    run_graph,
    sensitivity,
)
from export_gelu.targets import resolve_profile
from tests.quantize.outlier_mlp import outlier_mlp


def _outlier_model() -> onnx.ModelProto:
    import torch

    model = outlier_mlp()
    buf = io.BytesIO()
    torch.onnx.export(model, (torch.randn(64, 16),), buf, dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    return onnx.load_from_string(buf.getvalue())


@pytest.fixture(scope="module")
def setup():
    model = _outlier_model()
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((64, 16)).astype(np.float32)} for _ in range(4)]
    plan = plan_quantization(model, "int8")
    assert [p.module for p in plan.points] == ["fc1", "fc2", "fc3"]
    assert {p.op for p in plan.points} == {"Gemm"} and {p.weight_axis for p in plan.points} == {0}
    ranges = calibrate(model, plan.activations, feeds, method_for("int8", None))
    return model, plan, ranges, route_for(resolve_profile("trt8.6"), "int8"), feeds


def test_sensitivity_names_the_outlier_layer_first(setup) -> None:
    model, plan, ranges, route, feeds = setup
    ranking = sensitivity(model, plan, ranges, route, feeds)
    assert [s.module for s in ranking][0] == "fc2"
    assert ranking[0].sqnr_db < DEFAULT_TARGET_SQNR_DB < ranking[1].sqnr_db


def test_auto_keeps_the_fewest_modules_to_reach_the_target(setup) -> None:
    model, plan, ranges, route, feeds = setup
    full = quality(run_graph(model, feeds),
                   run_graph(lower(model, plan, ranges, route).model, feeds))["y"].sqnr_db
    assert full < DEFAULT_TARGET_SQNR_DB
    result = auto_keep(model, plan, ranges, route, feeds)
    assert result.kept == ("fc2",) and result.met
    assert result.sqnr_db >= DEFAULT_TARGET_SQNR_DB
    assert [kept for kept, _ in result.steps] == [(), ("fc2",)]
    assert "keeping 1 module(s) in float: fc2" in result.summary()
    kept_plan = result.quantized.plan
    assert [p.module for p in kept_plan.points] == ["fc1", "fc3"]
    assert any(s.module == "fc2" and "kept in higher precision" in s.reason
               for s in kept_plan.skipped)
    # the written graph leaves fc2 without Q/DQ: what a TensorRT bundle then pins to fp32
    producer = {o: n.op_type for n in result.quantized.model.graph.node for o in n.output}
    fc2 = next(n for n in result.quantized.model.graph.node if n.name == "/fc2/Gemm")
    assert producer.get(fc2.input[0]) != "DequantizeLinear"


def test_keep_precision_by_name(setup) -> None:
    model, _, _, _, _ = setup
    plan = plan_quantization(model, "int8", keep=("fc3",))
    assert [p.module for p in plan.points] == ["fc1", "fc2"]
    assert plan.keep == ("fc3",)
