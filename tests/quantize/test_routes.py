"""Which route each target takes, read from the parser's data, and the refusals (exit 3)."""

from __future__ import annotations

import pytest

from export_gelu.errors import TargetUnmetError, failure_outcome
from export_gelu.quantize import CALIBRATION_CACHE, QDQ, route_for
from export_gelu.targets import resolve_profile
from export_gelu.trt_parser.quantization import SUPPORT, quantization_support

#: target → (int8 route kind, weight form, zero point required, fp8 taken)
EXPECTED = {
    "trt7.0": (CALIBRATION_CACHE, "none", False, False),
    "trt7.1": (CALIBRATION_CACHE, "none", False, False),
    "trt7.2": (CALIBRATION_CACHE, "none", False, False),
    "trt8.0": (QDQ, "float_q_dq", True, False),
    "trt8.2": (QDQ, "float_q_dq", True, False),
    "trt8.4": (QDQ, "float_q_dq", True, False),
    "trt8.5": (QDQ, "float_q_dq", True, False),
    "trt8.6": (QDQ, "float_q_dq", True, False),
    "trt9": (QDQ, "float_q_dq", False, True),
    "trt10": (QDQ, "quantized_dq", False, True),
    "trt11": (QDQ, "quantized_dq", False, True),
    "ort": (QDQ, "quantized_dq", True, True),
    "onnx": (QDQ, "quantized_dq", True, True),
}


@pytest.mark.parametrize("target", sorted(EXPECTED))
def test_route_per_target(target: str) -> None:
    kind, weights, zero_point, fp8 = EXPECTED[target]
    profile = resolve_profile(target)
    route = route_for(profile, "int8")
    assert (route.kind, route.weights, route.zero_point_required) == (kind, weights, zero_point)
    assert route.weight_per_channel == (kind == QDQ)
    if kind == QDQ:
        assert route.min_opset == 13 <= profile.opset  # the per-channel axis: opset 13
    if fp8:
        fp8_route = route_for(profile, "fp8")
        assert fp8_route.kind == QDQ and fp8_route.min_opset == 19
        assert not fp8_route.weight_per_channel
    else:
        with pytest.raises(TargetUnmetError) as err:
            route_for(profile, "fp8")
        outcome = failure_outcome(err.value)
        assert outcome.code == 3
        assert "fp8" in outcome.line and f"TensorRT {profile.trt_version}" in outcome.line
        assert "TensorRT 9.0 and newer (trt9, trt10, trt11)" in outcome.line


def test_exact_versions_follow_their_record() -> None:
    assert quantization_support("8.0.3").per_tensor_axis_refused
    assert not quantization_support("8.2.3").per_tensor_axis_refused
    assert quantization_support("10.16").calibration_cache
    assert not quantization_support("11.5").calibration_cache
    assert route_for(resolve_profile("trt9.3"), "fp8").kind == QDQ
    assert route_for(resolve_profile("trt7.2.1"), "int8").kind == CALIBRATION_CACHE


def test_records_are_ordered_and_cite_their_sources() -> None:
    from export_gelu.trt_parser.versions import version_key

    keys = [version_key(s.since) for s in SUPPORT]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert all("@" in s.source or "guide" in s.source for s in SUPPORT)
    # Q/DQ imported as IQuantizeLayer from 8.0 on; 7.x only takes a calibration cache
    assert [s.since for s in SUPPORT if not s.explicit_int8] == ["7.0"]


def test_onnxruntime_takes_int8_weights_in_7_bits(example_graph) -> None:
    """ONNX Runtime's U8S8 kernels saturate with full-range weights on x86 without VNNI:
    `--target ort` writes INT8 weights within [-63, 63]; TensorRT and plain ONNX get 127."""
    import numpy as np
    import onnx

    from export_gelu.quantize import TensorRange, lower, plan_quantization

    assert route_for(resolve_profile("ort"), "int8").weight_qmax == 63
    assert route_for(resolve_profile("ort"), "fp8").weight_qmax == 0
    assert {route_for(resolve_profile(t), "int8").weight_qmax
            for t in ("onnx", "trt8.6", "trt10")} == {0}
    model = example_graph("bert", "trt10")
    plan = plan_quantization(model, "int8")
    ranges = {t: TensorRange(-3.0, 3.0) for t in plan.activations}
    for target, top in (("ort", 63), ("trt10", 127)):
        out = lower(model, plan, ranges, route_for(resolve_profile(target), "int8")).model
        weights = [onnx.numpy_helper.to_array(i) for i in out.graph.initializer
                   if i.data_type == onnx.TensorProto.INT8 and len(i.dims) == 2]
        assert len(weights) == len(plan.points)
        assert max(int(np.abs(w).max()) for w in weights) == top


def test_unknown_precision_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="int8 or fp8|quantized precision"):
        route_for(resolve_profile("trt10"), "int4")
