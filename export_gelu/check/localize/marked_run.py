"""A graph run once in ONNX Runtime with some of its intermediate tensors marked as outputs
(a copy: the user's file is never written): what the first divergence and the tie check read
the graph's own values from."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx


def run_with_outputs(path: Path, names: list[str], feed: Mapping[str, np.ndarray],
                     threads: int) -> dict[str, np.ndarray]:
    """`path`'s graph with `names` marked as outputs (a copy, through polygraphy's
    ModifyOutputs), run once in ONNX Runtime on `feed`. The copy holds no weights of its own:
    a graph whose weights are in external-data files gets its copy written beside it under a
    temporary name (so the files resolve), and removed after."""
    import onnx
    from polygraphy.backend.onnx import ModifyOutputs

    from export_gelu.check.runners.quiet import quiet_polygraphy

    model = onnx.load(str(path), load_external_data=False)
    external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    with quiet_polygraphy(silent=True):
        marked = ModifyOutputs(model, outputs=[o.name for o in model.graph.output] + names,
                               copy=False)()
    if not external:
        with tempfile.TemporaryDirectory(prefix="export-gelu-localize-") as tmp:
            return _run_copy(marked, Path(tmp) / "marked.onnx", feed, threads)
    fd, name = tempfile.mkstemp(prefix=f".{path.stem}.localize-", suffix=".onnx",
                                dir=path.parent)
    os.close(fd)
    try:
        return _run_copy(marked, Path(name), feed, threads)
    finally:
        Path(name).unlink(missing_ok=True)


def _run_copy(marked: onnx.ModelProto, copy: Path, feed: Mapping[str, np.ndarray], threads: int
              ) -> dict[str, np.ndarray]:
    import onnx

    from export_gelu.check.runners.ort_runner import ort_runner
    from export_gelu.check.runners.quiet import quiet_polygraphy

    onnx.save(marked, str(copy))
    runner = ort_runner(copy, threads=threads, name="onnxruntime-marked")
    with quiet_polygraphy(silent=True), runner:
        return dict(runner.infer(dict(feed)))
