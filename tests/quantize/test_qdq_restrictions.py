"""The static check knows the parser's Q/DQ restrictions like every other op's: a probe
graph per record, judged by every TensorRT profile; and the graphs export-gelu lowers pass
the check of the very versions they are lowered for."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from export_gelu.parse_check import incompatibilities
from export_gelu.quantize import TensorRange, lower, plan_quantization, route_for
from export_gelu.targets import TRT_PROFILES, resolve_profile
from export_gelu.trt_parser.restrictions import find_hits

NAMES = [p.name for p in TRT_PROFILES]


def span(first: str, last: str | None = None) -> set[str]:
    end = NAMES.index(last) + 1 if last else len(NAMES)
    return set(NAMES[NAMES.index(first):end])


def _probe(zero_point: np.ndarray | None = None, scale: float = 0.05, axis: int | None = None,
           zp_type: int | None = None, opset: int = 13, dq_data: np.ndarray | None = None
           ) -> onnx.ModelProto:
    """x → QuantizeLinear → DequantizeLinear → y (or an initializer → DequantizeLinear)."""
    inits = [numpy_helper.from_array(np.float32(scale), "s")]
    zp_inputs = []
    if zp_type is not None:
        inits.append(helper.make_tensor("zp", zp_type, [], [0]))
        zp_inputs = ["zp"]
    elif zero_point is not None:
        inits.append(numpy_helper.from_array(zero_point, "zp"))
        zp_inputs = ["zp"]
    attrs = {} if axis is None else {"axis": axis}
    if dq_data is not None:
        inits.append(numpy_helper.from_array(dq_data, "d"))
        nodes = [helper.make_node("DequantizeLinear", ["d", "s", *zp_inputs], ["y"], name="dq",
                                  **attrs)]
        inputs = []
    else:
        nodes = [helper.make_node("QuantizeLinear", ["x", "s", *zp_inputs], ["q"], name="q",
                                  **attrs),
                 helper.make_node("DequantizeLinear", ["q", "s", *zp_inputs], ["y"], name="dq",
                                  **attrs)]
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])]
    graph = helper.make_graph(nodes, "probe", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _flagged(model: onnx.ModelProto, key: str) -> set[str]:
    """The named TensorRT profiles on which record `key` hits `model`."""
    return {p.name for p in TRT_PROFILES
            if any(h.restriction.key.endswith(key) for h in find_hits(model, p.trt_version))}


INT8_ZERO = np.int8(0)

#: (probe, record key suffix, the profiles that flag it)
ROWS = [
    (lambda: _probe(INT8_ZERO), "explicit-precision-7x", span("trt7.0", "trt7.2")),
    (lambda: _probe(None), "missing-zero-point", span("trt7.0", "trt8.6")),
    (lambda: _probe(None), "no-zero-point-as-int8", span("trt9")),
    (lambda: _probe(np.int8(3)), "nonzero-zero-point", span("trt8.0")),
    (lambda: _probe(INT8_ZERO, scale=-0.5), "scale-not-positive", span("trt8.0")),
    (lambda: _probe(INT8_ZERO, axis=1), "per-tensor-axis", {"trt8.0"}),
    (lambda: _probe(np.uint8(0)), "uint8-zero-point-as-int8", span("trt8.0", "trt8.5")),
    (lambda: _probe(np.uint8(0)), "quantizelinear-uint8-zero-point", span("trt8.6")),
    (lambda: _probe(np.uint8(0), dq_data=np.zeros((2, 4), np.uint8)), "uint8-data",
     span("trt8.5")),
    (lambda: _probe(np.int32(0), dq_data=np.zeros(4, np.int32)), "int32-data", span("trt8.0")),
    (lambda: _probe(zp_type=TensorProto.FLOAT8E4M3FN, opset=19), "-fp8",
     span("trt7.0", "trt8.6")),
]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r[1])
def test_each_record_flags_its_versions(row) -> None:
    build, key, expected = row
    assert _flagged(build(), key) == expected


def test_a_clean_probe_is_flagged_only_on_7x() -> None:
    model = _probe(INT8_ZERO)
    for profile in TRT_PROFILES:
        reasons = incompatibilities(model, profile)
        assert bool(reasons) == profile.name.startswith("trt7"), (profile.name, reasons)


def test_the_7x_record_says_why_and_what_takes_it() -> None:
    reasons = incompatibilities(_probe(INT8_ZERO, opset=11), resolve_profile("trt7.2"))
    (reason,) = [r for r in reasons if r.startswith("QuantizeLinear")]
    assert "parses but computes wrong values on TensorRT 7.2" in reason
    assert "calibration cache" in reason and "TensorRT 8.0 and newer" in reason


@pytest.fixture(scope="module")
def bert_graphs(example_graph):
    return {t: example_graph("bert", t) for t in ("trt8.2", "trt8.6", "trt10")}


@pytest.mark.parametrize("target,precision", [
    ("trt8.0", "int8"), ("trt8.2", "int8"), ("trt8.6", "int8"), ("trt9", "int8"),
    ("trt9", "fp8"), ("trt10", "int8"), ("trt10", "fp8"), ("trt11", "int8"), ("trt11", "fp8")])
def test_lowered_graphs_pass_their_targets_check(bert_graphs, target: str,
                                                 precision: str) -> None:
    """The Q/DQ graph written for a version raises no Q/DQ restriction of that version."""
    source = {"trt8.0": "trt8.2", "trt8.2": "trt8.2", "trt8.6": "trt8.6"}.get(target, "trt10")
    model = bert_graphs[source]
    plan = plan_quantization(model, precision)
    ranges = {t: TensorRange(-3.0, 3.0) for t in plan.activations}
    profile = resolve_profile(target)
    out = lower(model, plan, ranges, route_for(profile, precision)).model
    hits = [h for h in find_hits(out, profile.trt_version) if "quantizelinear" in
            h.restriction.key]  # the graph's own hits (a Gather on 8.0) are not the point
    assert hits == [], [h.message(profile.trt_version) for h in hits]
    assert sum(n.op_type == "DequantizeLinear" for n in out.graph.node) == 2 * len(plan.points)
