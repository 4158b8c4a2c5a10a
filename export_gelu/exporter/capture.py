"""Capture a loaded model as a torch.export ExportedProgram, the graph the fx passes work on."""

from __future__ import annotations

import copy
from typing import Any

import torch

from export_gelu.exporter.load import LoadedModel
from export_gelu.exporter.to_onnx import quiet_exporter

PRECISION_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def cast_args(args: tuple[Any, ...], precision: str) -> tuple[Any, ...]:
    """Floating tensors cast to the precision's dtype; other tensors unchanged."""
    dtype = PRECISION_DTYPES[precision]
    return tuple(a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                 for a in args)


def module_for_precision(loaded: LoadedModel, precision: str) -> Any:
    """The module to export: the original, or a cast copy for fp16/bf16 (the original stays)."""
    module = loaded.reference_module()
    if precision == "fp32":
        return module
    return copy.deepcopy(module).to(PRECISION_DTYPES[precision])


def capture(loaded: LoadedModel, module: Any, args: tuple[Any, ...], precision: str,
            dynamic_shapes: tuple[Any, ...] | None = None) -> tuple[Any, str | None]:
    """An ExportedProgram for `module` on `args`, or (None, why not) when capture fails.

    `dynamic_shapes` (torch.export's, one entry per argument) keeps those axes symbolic; a
    range the model does not allow is bad input (exit 2), not a capture failure.
    """
    if loaded.exported is not None and precision == "fp32":
        return loaded.exported, None
    if dynamic_shapes is not None and isinstance(module, torch.jit.ScriptModule):
        return None, ("TS2EPConverter keeps the traced shapes; the TorchScript module is "
                      "exported with dynamic_axes instead")
    try:
        with quiet_exporter(), torch.no_grad():
            if isinstance(module, torch.jit.ScriptModule):
                from torch._export.converter import TS2EPConverter

                return TS2EPConverter(module, args).convert(), None
            return torch.export.export(module, args, dynamic_shapes=dynamic_shapes,
                                       strict=False), None
    except Exception as exc:  # noqa: BLE001 - any capture failure means "no fx passes"
        if dynamic_shapes is not None:
            from export_gelu.exporter.dynamic import constraint_violation

            refused = constraint_violation(exc, ())
            if refused is not None:
                raise refused from exc
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return None, f"{type(exc).__name__}: {first}"
