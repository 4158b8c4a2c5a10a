"""steps/quantize.py: the fp32 graph an export made, quantized for its target in its place."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx

from export_gelu.run import Run
from export_gelu.steps.quantize import quantize_graph, variants
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
