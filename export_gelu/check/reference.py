"""The runner that export's parity checks compare against: the PyTorch model, or for an ONNX
input the input file itself in ONNX Runtime (its outputs paired by position when renamed)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np


def reference_runner(loaded: Any, reference_module: Any, feed: OrderedDict[str, np.ndarray],
                     model: Any, threads: int, device: str = "cpu") -> Any:
    """A polygraphy runner for the reference of `model` (the produced onnx.ModelProto), from
    `loaded` (exporter.load.LoadedModel) and its untouched `reference_module`."""
    from export_gelu.check.ort_runner import ort_runner, output_names
    from export_gelu.check.torch_runner import TorchRunner
    from export_gelu.exporter.call_plan import plan_for
    from export_gelu.exporter.model_dtype import model_float_dtype

    outputs = [o.name for o in model.graph.output]
    if loaded.is_onnx:
        runner = ort_runner(loaded.path, threads=threads, name="input-onnx")  # plugins as math
        if output_names(loaded.path) != outputs:  # --output-names: pair by position
            from export_gelu.check.deployed import renamed_outputs

            runner = renamed_outputs(runner, outputs)
        return runner
    import torch

    torch.set_num_threads(threads)
    return TorchRunner(reference_module, feed, outputs, device=device, name="pytorch",
                       float_dtype=model_float_dtype(reference_module),
                       plan=plan_for(loaded, list(feed)))
