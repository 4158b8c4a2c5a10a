"""steps/quantize.py: the fp32 graph an export made, quantized for its target in its place."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx

from export_gelu.quantize.cache import calibration_cache_text
from export_gelu.run import Run
from export_gelu.steps.quantize import (
    cache_simulation,
    fp32_request,
    quant_summary,
    quantize_graph,
    variants,
)
from tests.steps.step_inputs import export_inputs_of, export_request, main_feed, saved_graph


def test_variants_keep_dtypes_shapes_and_integer_ranges() -> None:
    feed = {"x": main_feed(0)["x"], "ids": np.array([[3, 7, 9]], np.int64)}
    made = variants(feed, 3, seed=5)
    assert len(made) == 3
    for v in made:
        assert v["x"].shape == feed["x"].shape and v["x"].dtype == np.float32
        assert not np.array_equal(v["x"], feed["x"])
        assert v["ids"].dtype == np.int64 and 3 <= v["ids"].min() and v["ids"].max() <= 9


def test_quantize_graph_writes_tinys_int8_graph_in_place(tiny: tuple[Path, Path],
                                                         tmp_path: Path) -> None:
    program, graph = tiny
    request = export_request(program, tmp_path, target="trt8.6", precision="int8")
    path = tmp_path / "out.onnx"
    shutil.copy(graph, path)
    run = Run()
    saved, result = quantize_graph(request, saved_graph(request, path),
                                   export_inputs_of(request), run)
    written = onnx.load(str(path))
    ops = [n.op_type for n in written.graph.node]
    assert ops.count("QuantizeLinear") >= 1 and ops.count("DequantizeLinear") >= 2
    assert (result.quantized, result.weight_products, result.gelu_qdq) == (1, 1, 0)
    assert result.verdict is not None and result.verdict.passed
    assert not result.real_data
    assert any("generated inputs" in str(n) for n in run.notes)
    assert saved.op_counts.get("QuantizeLinear", 0) >= 1
    row = quant_summary(result)
    assert (row["precision"], row["passed"], row["quantized"], row["weight_products"],
            row["qdq_inside_gelu"]) == ("int8", True, 1, 1, 0)
    assert isinstance(row["sqnr_db"], float) and row["sqnr_db"] > 20


def test_fp32_request_makes_the_graph_in_fp32_only_when_quantizing(program: Path,
                                                                   tmp_path: Path) -> None:
    int8 = export_request(program, tmp_path, target="trt8.6", precision="int8")
    made = fp32_request(int8)
    assert made.options.precision == "fp32" and made.options.target == "trt8.6"
    assert int8.options.precision == "int8"
    plain = export_request(program, tmp_path, target="trt8.6")
    assert fp32_request(plain) is plain


def test_cache_simulation_quantizes_exactly_the_products_the_cache_holds(
        tiny: tuple[Path, Path]) -> None:
    """Tiny's one weight product: with its activation's scale in the cache it is quantized at
    that scale (weights per channel); with a cache naming no tensor of it, nothing is."""
    graph = onnx.load(str(tiny[1]))
    product = next(n for n in graph.graph.node if n.op_type in ("MatMul", "Gemm"))
    activation = product.input[0]
    sim = cache_simulation(graph, calibration_cache_text({activation: 0.05}, "7.0"))
    quantizers = [n for n in sim.graph.node if n.op_type == "QuantizeLinear"]
    assert any(n.input[0] == activation for n in quantizers)
    scales = {i.name: onnx.numpy_helper.to_array(i) for i in sim.graph.initializer}
    assert any(n.input[0] == activation and np.isclose(float(scales[n.input[1]]), 0.05)
               for n in quantizers)
    bare = cache_simulation(graph, calibration_cache_text({"not_a_tensor": 0.05}, "7.0"))
    assert [n for n in bare.graph.node if n.op_type == "QuantizeLinear"] == []
