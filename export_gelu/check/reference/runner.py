"""The runner every parity check compares against: the PyTorch model, or for an ONNX input the
input file itself in ONNX Runtime (its outputs paired by position when renamed)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from export_gelu.check.runners.deployed import renamed_outputs
from export_gelu.check.runners.ort_runner import ort_runner, output_names

if TYPE_CHECKING:
    import onnx
    from polygraphy.backend.base import BaseRunner
    from torch import nn

    from export_gelu.exporter.loading.loaded import LoadedModel


def model_runner(loaded: LoadedModel, feed: OrderedDict[str, np.ndarray],
                 outputs: Sequence[str], threads: int, device: str = "cpu", *,
                 module: nn.Module | None = None, onnx_name: str = "input-onnx") -> BaseRunner:
    """A polygraphy runner for `loaded` (exporter.loading.load.LoadedModel) whose outputs carry the
    deployed graph's names `outputs`. `module`: the untouched module to run (default: the
    loaded model's own); an ONNX input runs in ONNX Runtime as `onnx_name`."""
    if loaded.is_onnx:
        runner = ort_runner(loaded.path, threads=threads, name=onnx_name)  # plugins as math
        if output_names(loaded.path) != list(outputs):  # --output-names: pair by position
            runner = renamed_outputs(runner, list(outputs))
        return runner
    import torch

    from export_gelu.check.runners.torch_runner import TorchRunner
    from export_gelu.exporter.inputs.call_plan import plan_for
    from export_gelu.exporter.loading.model_dtype import model_float_dtype

    torch.set_num_threads(threads)
    module = loaded.reference_module() if module is None else module
    if module is None:  # (a model that is not ONNX is a module or a program)
        raise ValueError(f"{loaded.path}: no PyTorch module to run as the reference")
    return TorchRunner(module, feed, list(outputs), device=device, name="pytorch",
                       float_dtype=model_float_dtype(module), plan=plan_for(loaded, list(feed)))


def reference_runner(loaded: LoadedModel, reference_module: nn.Module | None,
                     feed: OrderedDict[str, np.ndarray], model: onnx.ModelProto, threads: int,
                     device: str = "cpu") -> BaseRunner:
    """The reference of `model` (the produced onnx.ModelProto), from `loaded` and its
    untouched `reference_module`."""
    return model_runner(loaded, feed, [o.name for o in model.graph.output], threads, device,
                        module=reference_module)
