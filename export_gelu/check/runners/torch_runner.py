"""A polygraphy runner for a PyTorch module (polygraphy's own needs CUDA: docs/polygraphy.md)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from polygraphy.backend.base import BaseRunner
from polygraphy.common import TensorMetadata
from polygraphy.datatype import DataType

from export_gelu.errors import TargetUnmetError
from export_gelu.exporter.capture.fallback import mixes_dtypes
from export_gelu.exporter.inputs.call_plan import call

if TYPE_CHECKING:
    from export_gelu.exporter.inputs.call_plan import CallPlan


def flatten_outputs(value: Any) -> list[torch.Tensor]:
    """Tensors of a model's output in order (tuples, lists, dicts and HF ModelOutputs)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict) or hasattr(value, "to_tuple"):
        items = value.to_tuple() if hasattr(value, "to_tuple") else tuple(value.values())
        return [t for v in items for t in flatten_outputs(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in flatten_outputs(v)]
    return []


class TorchRunner(BaseRunner):
    """Calls `module(*inputs)` with inputs taken from the feed dict in `input_names` order.

    Outputs are named `output_names` (the deployed graph's names) so Comparator can pair them.
    """

    def __init__(self, module: Callable[..., object], inputs: dict[str, np.ndarray],
                 output_names: Sequence[str], device: str = "cpu", *, name: str | None = None,
                 float_dtype: torch.dtype | None = torch.float32,
                 plan: CallPlan | None = None) -> None:
        """`inputs`: example arrays, in forward() order (their names, dtypes and shapes);
        `plan` (a CallPlan): which of them the model takes by keyword (default: none)."""
        super().__init__(name=name or "torch", prefix="torch-runner")
        self.module = module
        self.input_names = list(inputs)
        self._input_meta = dtype_metadata(inputs)
        self.float_dtype = float_dtype
        self.output_names = list(output_names)
        self.device = device
        self.plan = plan

    def activate_impl(self) -> None:
        if hasattr(self.module, "to") and self.device != "cpu":
            self.module = self.module.to(self.device)
        if self.device.startswith("cuda"):
            # the reference must be true fp32: TF32 matmuls/convolutions would add ~1e-3 error
            self._tf32: tuple[bool, bool] | None = (torch.backends.cuda.matmul.allow_tf32,
                                                    torch.backends.cudnn.allow_tf32)
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False

    def get_input_metadata_impl(self) -> TensorMetadata:
        return self._input_meta

    def infer_impl(self, feed_dict: dict[str, np.ndarray]) -> OrderedDict[str, np.ndarray]:
        args = [self._tensor(feed_dict[n]) for n in self.input_names]
        # no_grad, not inference_mode: a TorchScript model the profiling executor has run with
        # grad enabled keeps differentiable subgraphs that save their inputs for backward, and
        # inference-mode tensors cannot be saved ("Inference tensors cannot be saved for
        # backward"; docs/exporters.md)
        with torch.no_grad():
            if self.device.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
            try:
                out = self.module(*args) if self.plan is None else \
                    call(self.module, self.plan, tuple(args))
            except RuntimeError as exc:
                cause = traced_reference_error(self.module, args, exc)
                if cause is None:
                    raise
                raise cause from exc
            if self.device.startswith("cuda"):
                torch.cuda.synchronize()
            self.inference_time = time.perf_counter() - start
        tensors = flatten_outputs(out)
        names = self.output_names or [f"output_{i}" for i in range(len(tensors))]
        if len(tensors) != len(names):
            raise RuntimeError(f"the PyTorch model returned {len(tensors)} tensors but the "
                               f"deployed graph has {len(names)} outputs")
        return OrderedDict((n, _numpy(t)) for n, t in zip(names, tensors))

    def _tensor(self, value: np.ndarray) -> torch.Tensor:
        t = torch.as_tensor(np.asarray(value)).to(self.device)
        if self.float_dtype is not None and t.is_floating_point():
            t = t.to(self.float_dtype)
        return t

    def deactivate_impl(self) -> None:
        tf32 = getattr(self, "_tf32", None)
        if tf32 is not None:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
            self._tf32 = None


def _numpy(t: torch.Tensor) -> np.ndarray:
    """A tensor as numpy; bfloat16, which numpy has no type for, widened exactly to float32."""
    t = t.detach().cpu()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def dtype_metadata(arrays: dict[str, np.ndarray]) -> TensorMetadata:
    meta = TensorMetadata()
    for name, arr in arrays.items():
        meta.add(name, dtype=DataType.from_dtype(arr.dtype), shape=arr.shape)
    return meta


def traced_reference_error(module: object, args: Sequence[torch.Tensor], exc: RuntimeError
                           ) -> TargetUnmetError | None:
    """A ScriptModule whose trace fixed one float type cannot run as a reference in another:
    the error naming that cause (exit 3), or None for any other failure."""
    if not isinstance(module, torch.jit.ScriptModule) or not mixes_dtypes(str(exc)):
        return None
    given = sorted({str(a.dtype).removeprefix("torch.") for a in args
                    if isinstance(a, torch.Tensor) and a.is_floating_point()})
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    first = next((ln for ln in lines if mixes_dtypes(ln)), lines[0] if lines else "")
    return TargetUnmetError(
        f"PyTorch cannot run this ScriptModule as the reference parity compares with "
        f"(inputs {', '.join(given) or 'given'}): the dtype traced into it is the cause, "
        f"torch.jit.trace/script recorded the float type of the tensors it made, and run "
        f"in another it mixes the two ({first}); trace the float32 model and export with "
        f"--precision fp16, or save the model with torch.export.save and export that, or "
        f"check this one with --no-verify")
