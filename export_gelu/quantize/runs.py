"""Running a graph in ONNX Runtime (CPU) on several feeds, for calibration checks, the
verdict's numbers and the sensitivity sweep.

A Q/DQ graph is run as written (`exact`, the default): ONNX Runtime's QDQ fusions
(`QDQSelectorActionTransformer`) are turned off, so every DequantizeLinear computes what
ONNX says and the numbers are the graph's, not one kernel's. Measured with onnxruntime 1.32
(docs/quantization.md): its DQ → Gemm → QGemm fusion computes a per-channel weight wrongly
(max error 2.25 on a random 8×64×32 product that the unfused graph computes within 6e-6),
and its U8S8 MatMulIntegerToFloat kernels round differently from the graph. The benchmarks
time the fused graphs, which is what an ONNX Runtime user runs.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from export_gelu.passes.ort_session import make_session

#: Above this a graph is handed to ONNX Runtime as a file with external data.
_INLINE_BYTES = 1 << 30
#: The ONNX Runtime transformer that fuses Q/DQ groups into integer kernels.
QDQ_FUSIONS = "QDQSelectorActionTransformer"


def run_graph(model: onnx.ModelProto, feeds: Sequence[Mapping[str, np.ndarray]],
              threads: int = 1, exact: bool = True) -> list[dict[str, np.ndarray]]:
    """Every output of `model` on each feed (keyed by the graph's input names); `exact`:
    without ONNX Runtime's QDQ fusions."""
    from export_gelu.passes.onnx.plugin_math import plugin_nodes, plugins_as_math

    if plugin_nodes(model):
        work = onnx.ModelProto()
        work.CopyFrom(model)
        plugins_as_math(work)  # ONNX Runtime lacks the TensorRT GELU plugin: run its math
        model = work
    disabled = [QDQ_FUSIONS] if exact else None
    with tempfile.TemporaryDirectory(prefix="export-gelu-run-") as tmp:
        if model.ByteSize() > _INLINE_BYTES:
            path = Path(tmp) / "model.onnx"
            onnx.save(model, str(path), save_as_external_data=True)
            session = make_session(path, threads=threads, disabled_optimizers=disabled)
        else:
            session = make_session(model.SerializeToString(), threads=threads,
                                   disabled_optimizers=disabled)
        names = [o.name for o in session.get_outputs()]
        return [dict(zip(names, session.run(None, dict(feed)))) for feed in feeds]
