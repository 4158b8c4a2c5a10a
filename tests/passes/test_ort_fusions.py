"""What ONNX Runtime's own online optimizer (CPU EP, default level) does with each exporter's
GELU shape: the gaps `--target ort` / `--target onnx` fill (docs/onnxruntime.md). A shape is
placed between two MatMuls, or made the graph output; the test reads the graph ORT runs."""

from __future__ import annotations

import pytest

from export_gelu.passes.onnx.exporter_shapes import SHAPES
from tests.onnx_graphs import exporter_shape_graph, ort_session_ops

_GELU_OPS = ("com.microsoft.Gelu", "com.microsoft.FastGelu", "com.microsoft.QuickGelu")

#: (formula, first exporter) → the fused op ORT runs, inside a graph / as the graph output.
#: None: left unfused (Erf or Tanh still run).
EXPECTED = {
    ("F.gelu(x)", "dynamo 18"): (None, None),
    ("F.gelu(x, approximate='tanh')", "dynamo 18"): (None, None),
    ("gelu_new", "dynamo 18"): ("com.microsoft.FastGelu", None),
    ("gelu_fast / Bloom", "dynamo 18"): ("com.microsoft.FastGelu", None),
    ("gelu_python", "dynamo 18"): ("com.microsoft.Gelu", "com.microsoft.Gelu"),
    ("quick_gelu", "dynamo 18"): ("com.microsoft.QuickGelu", "com.microsoft.QuickGelu"),
    ("F.gelu(x)", "torchscript 13"): ("com.microsoft.Gelu", "com.microsoft.Gelu"),
    ("F.gelu(x, approximate='tanh')", "torchscript 13"): (None, None),
}


def _fused(ran) -> str | None:  # noqa: ANN001 - Counter
    fused = [op for op in _GELU_OPS if ran[op]]
    assert len(fused) <= 1
    return fused[0] if fused else None


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{s.formula} [{s.exporters[0]}]" for s in SHAPES])
def test_orts_online_fusion_of_each_exporter_shape(shape):
    inside, as_output = EXPECTED[(shape.formula, shape.exporters[0])]
    for gelu_is_output, expected in ((False, inside), (True, as_output)):
        ran = ort_session_ops(exporter_shape_graph(shape, gelu_is_output=gelu_is_output))
        assert _fused(ran) == expected, (gelu_is_output, dict(ran))
        if expected is None:
            assert ran["Erf"] + ran["Tanh"] == 1
