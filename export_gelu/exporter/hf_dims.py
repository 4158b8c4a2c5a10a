"""The dynamic dims a Hugging Face graph declares (hf_graphs.GraphDim) as the run's
DynamicPlan, when the user ranges none with `--dynamic`.

A derived dim (the attention mask's `total_sequence_length`, past + new tokens) is in the
plan for naming and for the TensorRT profile, but not ranged on its own: torch.export gets
`Dim.AUTO` for its axes and works out how it follows from the others. Parity runs at the
example inputs' sizes (no templates: the generation check runs the other sizes a decoding
loop meets).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from export_gelu.exporter.dynamic import DimRange, DynamicPlan
from export_gelu.notes import Note


@dataclass
class DeclaredPlan(DynamicPlan):
    """A DynamicPlan from the model's own declared dims; `derived` names the dims torch
    derives from the others."""

    derived: set[str] = field(default_factory=set)

    @property
    def ranged(self) -> list[DimRange]:
        return [d for d in self.dims if d.min < d.max and d.name not in self.derived]

    def free_axes(self) -> set[tuple[str, int]]:
        """The derived dims' axes: torch.export works out their sizes (`Dim.AUTO`)."""
        return {key for d in self.dims if d.name in self.derived for key in d.axes}

    def torch_dynamic_shapes(self, input_names: Sequence[str]) -> tuple[Any, ...]:
        import torch

        shapes = [dict(s or {}) for s in super().torch_dynamic_shapes(input_names)]
        index = {n: i for i, n in enumerate(input_names)}
        for inp, axis in self.free_axes():
            if inp in index:
                shapes[index[inp]][axis] = torch.export.Dim.AUTO
        return tuple(s or None for s in shapes)


def declared_plan(dims: Sequence[Any]) -> DeclaredPlan:
    """The plan for a graph's GraphDims."""
    plan = DeclaredPlan(derived={d.name for d in dims if d.derived})
    plan.dims = [DimRange(d.name, d.min, d.opt, d.max, tuple(d.axes)) for d in dims]
    plan.notes.append(Note("dynamic dims as the model declares them: " + ", ".join(
        f"{d.name} {d.min}..{d.max}" + (" (derived)" if d.derived else "") for d in dims),
        "declared-dims"))
    return plan
