"""A float64 model cast down on request: exported in float32 (or fp16), checked against itself.

By default a float64 model is exported, run and compared in float64 (`model_dtype.py`).
`--cast-down` asks for float32 instead, and `--precision fp16`/`bf16` is a request to cast
too. The model is then copied to float32 before anything else (parameters, buffers, and the
float64 literals and constants a trace baked in, clamped to float32's range), so the rest of
the run is the ordinary float32 path (fp16 and bf16 cast further from there, as for any
float32 model), while the parity reference stays the float64 original: the report's parity
numbers are the error the cast costs, and a note states it.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from export_gelu.exporter.loading.loaded import LoadedModel
from export_gelu.exporter.loading.model_dtype import is_float64

if TYPE_CHECKING:
    from collections.abc import MutableMapping

    import numpy as np
    import torch


#: A feed: input name → array (an OrderedDict in feed order).
FeedT = TypeVar("FeedT", bound="MutableMapping[str, np.ndarray]")
_DTYPE_NAMES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


@dataclass
class CastDown:
    """The float32 copy to export, and the float64 original that parity compares against."""

    loaded: LoadedModel  # the float32 copy (exported, its feed made in float32)
    reference: torch.nn.Module | None  # the float64 original, the parity reference
    precision: str  # the precision the graph is exported in
    requested_by: str  # "--cast-down" or "--precision fp16"
    retargeted: int = 0  # float64 literals/constants of a traced graph moved to float32

    def fit_feed(self, feed: FeedT) -> FeedT:
        """`feed` with float64 arrays (typed `--input`s, an npz) as float32, as the copy takes."""
        import numpy as np

        for name, arr in feed.items():
            if getattr(arr, "dtype", None) == np.float64:
                feed[name] = arr.astype(np.float32)
        return feed

    def note(self) -> str:
        """What was cast, for the report."""
        extra = (f"; {self.retargeted} float64 literal(s)/constant(s) of its graph retargeted"
                 if self.retargeted else "")
        return (f"a float64 model cast down to {_DTYPE_NAMES[self.precision]} on request "
                f"({self.requested_by}){extra}; parity is measured against the float64 model")

    def measured_note(self, parity: object) -> str | None:
        """The error the cast costs, as measured by the parity run (None when it did not run)."""
        outputs = getattr(parity, "outputs", None) or {}
        if getattr(parity, "status", "skipped") == "skipped" or not outputs:
            return None
        worst_abs = max(o.max_abs for o in outputs.values())
        worst_rel = max(o.max_rel for o in outputs.values())
        scale = max(o.ref_scale for o in outputs.values())
        return (f"cast-down error measured against the float64 model: max abs {worst_abs:.3g}, "
                f"max rel {worst_rel:.3g} (|ref| ≤ {scale:.3g}; tolerance atol "
                f"{getattr(parity, 'atol', 0.0):g}, rtol {getattr(parity, 'rtol', 0.0):g})")


def _cast_tensors(values: tuple[torch.Tensor, ...] | None, dtype: torch.dtype
                  ) -> tuple[torch.Tensor, ...] | None:
    import torch

    if values is None:
        return None
    return tuple(v.to(dtype) if isinstance(v, torch.Tensor) and v.dtype == torch.float64
                 else v for v in values)


def _float32_program(program: torch.export.ExportedProgram
                     ) -> tuple[torch.export.ExportedProgram, int]:
    """An ExportedProgram in float32: its module cast, retargeted, and captured again."""
    import torch

    from export_gelu.exporter.onnx_export.to_onnx import quiet_exporter
    from export_gelu.passes.compat.precision.retarget import retarget_precision

    gm = program.module()
    gm.to(torch.float32)
    changed = retarget_precision(gm, torch.float32, source=torch.float64)
    args, kwargs = program.example_inputs or ((), {})
    args = _cast_tensors(tuple(args), torch.float32) or ()
    kwargs = dict(zip(kwargs, _cast_tensors(tuple(kwargs.values()), torch.float32) or ()))
    with quiet_exporter(), torch.no_grad():
        return torch.export.export(gm, args, kwargs or None, strict=False), changed


def _float32_copy(loaded: LoadedModel) -> tuple[LoadedModel, int]:
    import torch

    examples = _cast_tensors(loaded.example_inputs, torch.float32)
    if loaded.exported is not None:
        program, changed = _float32_program(loaded.exported)
        return dataclasses.replace(loaded, exported=program, example_inputs=examples,
                                   notes=list(loaded.notes)), changed
    assert loaded.module is not None  # a torch model that is no program is a module
    with warnings.catch_warnings():  # a ScriptModule's .to() reads each parameter's .grad
        warnings.simplefilter("ignore", UserWarning)
        module = copy.deepcopy(loaded.module).to(torch.float32)
    return dataclasses.replace(loaded, module=module, example_inputs=examples,
                               notes=list(loaded.notes)), 0


def cast_down_on_request(loaded: LoadedModel, precision: str, cast_down: bool
                         ) -> tuple[CastDown | None, list[str]]:
    """The cast (None when the model stays as it is) and notes for the report.

    A float64 torch model is cast when `cast_down` is set or `precision` is not fp32;
    `cast_down` on another model changes nothing and says so.
    """
    original = None if loaded.is_onnx else loaded.reference_module()
    if not is_float64(original):
        if not cast_down:
            return None, []
        what = ("an ONNX input keeps its own types" if loaded.is_onnx
                else "the model does not compute in float64")
        return None, [f"--cast-down: nothing cast ({what})"]
    if not cast_down and precision == "fp32":
        return None, []
    copy32, changed = _float32_copy(loaded)
    by = "--cast-down" if cast_down else f"--precision {precision}"
    return CastDown(copy32, original, precision, by, changed), []
