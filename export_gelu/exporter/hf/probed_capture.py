"""A folder graph's program as the dim probe captured it (hf/dim_probe.py), handed to the
capture step so the graph is captured once, not twice.

The probe calls torch.export on the graph's module and example inputs with the dims it keeps
(for an fp16/bf16 export of a generation graph, on a cast copy of the module and its inputs
cast alike, hf/graphs.py); the capture step (capture/capture.py) then calls it again with the
run's dims. When that second call would be the same call (the same module, inputs equal in
shape, dtype and values, the same dynamic shapes: each axis the same Dim name and range, or
`Dim.AUTO`), the probe's program is what it would return; the capture step takes it, once
(the fx passes edit it in place), and captures as before in every other case.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: One input's dynamic axes as compared: (axis, "auto") or (axis, (name, min, max)), sorted;
#: None for an input with none.
AxesKey = tuple[tuple[int, object], ...] | None


def shapes_key(dynamic_shapes: Sequence[object | None] | None) -> tuple[AxesKey, ...]:
    """torch.export's `dynamic_shapes` (one dict of axis → Dim or Dim.AUTO per input, or
    None) in a form two calls can be compared by."""
    import torch

    out: list[AxesKey] = []
    for axes in dynamic_shapes or ():
        if not axes:
            out.append(None)
            continue
        assert isinstance(axes, dict)  # what both callers build
        row: list[tuple[int, object]] = []
        for axis, dim in sorted(axes.items()):
            if dim is torch.export.Dim.AUTO:
                row.append((axis, "auto"))
            else:
                row.append((axis, (getattr(dim, "__name__", repr(dim)), getattr(dim, "min", None),
                                   getattr(dim, "max", None))))
        out.append(tuple(row))
    return tuple(out)


@dataclass
class ProbedCapture:
    """The program torch.export gave the dim probe, and the call that made it."""

    program: torch.export.ExportedProgram
    module: torch.nn.Module
    inputs: tuple[torch.Tensor, ...]
    shapes: tuple[AxesKey, ...]
    #: the run's precision the probe captured at: fp32 (the loaded module itself), or fp16/bf16
    #: (`module` is then a cast copy the export takes in place of making its own)
    precision: str = "fp32"

    def fits(self, module: torch.nn.Module, args: Sequence[object],
             dynamic_shapes: Sequence[object | None] | None) -> bool:
        """True when torch.export.export(module, args, dynamic_shapes=…) is the call the
        probe made: same module object, inputs equal (shape, dtype, values), same dims."""
        import torch

        if module is not self.module or len(args) != len(self.inputs):
            return False
        for a, b in zip(args, self.inputs):
            if not isinstance(a, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype \
                    or not torch.equal(a, b):
                return False
        # an input without dynamic axes is None in one spelling and absent in the other
        mine = self.shapes + (None,) * (len(args) - len(self.shapes))
        theirs = shapes_key(dynamic_shapes)
        theirs += (None,) * (len(args) - len(theirs))
        return mine == theirs
