"""The floating dtype a model computes in, so float64 models are fed and checked in float64.

`--precision fp32` means "the model's own precision" for a float64 model (ONNX Runtime's
fusion tests have such models): its inputs are made and passed as float64, the graph is
exported in float64 and compared with PyTorch in float64.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def model_float_dtype(module: object) -> torch.dtype:
    """torch.float64 when every floating parameter and buffer of `module` is float64, else
    torch.float32 (the reference runner casts float inputs to this)."""
    import torch

    tensors: list[torch.Tensor] = []
    for getter in ("parameters", "buffers"):
        fn = getattr(module, getter, None)
        if fn is not None:
            try:
                tensors.extend(t for t in fn() if t.is_floating_point())
            except Exception:  # noqa: BLE001 - an exotic module: assume float32
                return torch.float32
    if tensors and all(t.dtype == torch.float64 for t in tensors):
        return torch.float64
    return torch.float32


def is_float64(module: object) -> bool:
    import torch

    return module is not None and model_float_dtype(module) == torch.float64


def feed_precision(module: object, precision: str) -> str:
    """The dtype name inputs are cast to: "fp64" for a float64 model at fp32, else precision."""
    return "fp64" if precision == "fp32" and is_float64(module) else precision
