"""The calibration cache's text, the metrics, and numpy's fake-quantization against what
ONNX Runtime's QuantizeLinear → DequantizeLinear computes."""

from __future__ import annotations

import math
import struct

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from export_gelu.errors import BadInputError, TargetUnmetError, failure_outcome
from export_gelu.quantize import calibration_cache_text, read_calibration_cache
from export_gelu.quantize.cache import hex_scale, scale_hex, tensorrt_version_number
from export_gelu.quantize.formats import FP8, INT8, fake_quantize
from export_gelu.quantize.metrics import cosine, sqnr_db, top1_agreement
from export_gelu.quantize.runs import run_graph


def test_cache_text_is_tensorrts_format() -> None:
    scales = {"/LayerNorm_output_0": 0.0235, "x": 1.5}
    text = calibration_cache_text(scales, "8.6.1")
    lines = text.splitlines()
    assert lines[0] == "TRT-8601-EntropyCalibration2"
    assert lines[1] == f"/LayerNorm_output_0: {struct.pack('>f', 0.0235).hex()}"
    assert lines[2] == "x: 3fc00000"  # 1.5 in float32 bits
    header, back = read_calibration_cache(text)
    assert header == lines[0]
    assert back == {k: pytest.approx(v, rel=1e-7) for k, v in scales.items()}


def test_the_example_of_the_readers_source_decodes() -> None:
    """onnxruntime's TensorRT reader documents `data_0: 4000889d` under `TRT-7103-…`."""
    assert tensorrt_version_number("7.1.3") == 7103
    assert tensorrt_version_number("8.6.1") == 8601
    assert tensorrt_version_number("10.3.0") == 100300
    assert hex_scale("4000889d") == pytest.approx(2.00833, rel=1e-5)
    assert scale_hex(hex_scale("4000889d")) == "4000889d"


def test_cache_refuses_what_it_cannot_hold() -> None:
    with pytest.raises(TargetUnmetError, match="':'") as err:
        calibration_cache_text({"a:b": 1.0}, "7.0")
    assert failure_outcome(err.value).code == 3
    with pytest.raises(BadInputError, match="no 'TRT-' header"):
        read_calibration_cache("x: 3fc00000\n")
    with pytest.raises(BadInputError, match="line 2"):
        read_calibration_cache("TRT-7000-EntropyCalibration2\nnot a line\n")


def test_metrics() -> None:
    ref = np.array([[3.0, 1.0, 0.0], [0.0, 2.0, 1.0]])
    assert sqnr_db(ref, ref) == math.inf
    noisy = ref + 0.1 * np.array([[1, -1, 1], [-1, 1, -1]])
    assert sqnr_db(ref, noisy) == pytest.approx(10 * math.log10(15 / 0.06))
    assert cosine(ref, 2 * ref) == pytest.approx(1.0)
    assert cosine(ref, -ref) == pytest.approx(-1.0)
    assert top1_agreement(ref, noisy) == 1.0
    assert top1_agreement(ref, ref[:, ::-1]) == 0.5


def _qdq_graph(elem_type: int, scale: float, opset: int) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.float32(scale), "s"),
             helper.make_tensor("zp", elem_type, [], [0])]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [4096])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4096])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("fmt,elem_type,opset", [(INT8, TensorProto.INT8, 13),
                                                 (FP8, TensorProto.FLOAT8E4M3FN, 19)])
def test_fake_quantize_is_what_qdq_computes(fmt, elem_type: int, opset: int) -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(4000) * 3, [0.05, -0.05, 0.15, 1e3, -1e3],
                        np.arange(91) * 0.025 - 1.1]).astype(np.float32)
    scale = float(fmt.scale(4.0))
    (out,) = run_graph(_qdq_graph(elem_type, scale, opset), [{"x": x}])
    np.testing.assert_array_equal(fake_quantize(x, scale, fmt), out["y"])


def test_the_graph_half_imports_neither_torch_nor_onnxruntime() -> None:
    """Editing graphs needs neither: torch is imported by reference.py only, ONNX Runtime
    where a graph is run or calibrated."""
    import subprocess
    import sys

    code = ("import sys, export_gelu.quantize as q; "
            "print(sorted(m for m in ('torch', 'onnxruntime') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_judge_rule() -> None:
    """A graph as far from the reference as rounding passes; one farther from it than the
    reference is from fp32 fails, its line saying which bound it missed."""
    from export_gelu.quantize import judge

    rng = np.random.default_rng(0)
    fp32 = [{"y": rng.standard_normal((4, 16)).astype(np.float32)} for _ in range(3)]
    reference = [{"y": r["y"] + 0.01 * rng.standard_normal((4, 16))} for r in fp32]
    close = [{"y": r["y"] + 1e-6 * rng.standard_normal((4, 16))} for r in reference]
    far = [{"y": r["y"] + 0.05 * rng.standard_normal((4, 16))} for r in reference]
    assert judge(fp32, close, reference).passed
    verdict = judge(fp32, far, reference, logits=("y",))
    assert not verdict.passed and verdict.failed == ["y"]
    line = verdict.outputs["y"].line()
    assert line.startswith("FAIL y: SQNR") and "top-1" in line and line.endswith("missed")
    assert verdict.to_json()["passed"] is False
