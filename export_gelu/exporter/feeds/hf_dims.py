"""The dynamic dims a Hugging Face graph declares (hf/graph_spec.py: GraphDim) as the run's
DynamicPlan, when the user ranges none with `--dynamic`.

A derived dim (the attention mask's `total_sequence_length`, past + new tokens) is in the
plan for naming and for the TensorRT profile, but not ranged on its own: torch.export gets
`Dim.AUTO` for its axes and works out how it follows from the others. Parity runs at the
example inputs' sizes for the generation graphs (the generation check runs the other sizes a
decoding loop meets); a one-graph task's dims (`checked`) are also checked at MIN, an odd
size and MAX, on inputs made by role like the example ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from export_gelu.exporter.feeds.dynamic_plan import DynamicPlan, InputTemplate
from export_gelu.flags.dynamic import DimRange
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


def _templates(plan: DynamicPlan, names: Sequence[str], examples: Sequence[Any]
               ) -> list[InputTemplate]:
    """Each example input with its ranged axes named: made again at every size checked."""
    named = {key: d.name for d in plan.dims for key in d.axes}
    out = []
    for name, tensor in zip(names, examples):
        row = tuple(named.get((name, axis), int(size)) for axis, size in enumerate(tensor.shape))
        out.append(InputTemplate(name, str(tensor.detach().cpu().numpy().dtype), row))
    return out


def declared_plan(dims: Sequence[Any], names: Sequence[str] = (),
                  examples: Sequence[Any] = ()) -> DeclaredPlan:
    """The plan for a graph's GraphDims; with templates from the example inputs (`names`,
    `examples`) when every dim is `checked`."""
    plan = DeclaredPlan(derived={d.name for d in dims if d.derived})
    plan.dims = [DimRange(d.name, d.min, d.opt, d.max, tuple(d.axes)) for d in dims]
    if dims and all(d.checked for d in dims) and examples:
        plan.templates = _templates(plan, names, examples)
    how = ("a folder's one graph is dynamic by default (--static keeps the example sizes)"
           if dims and all(d.checked for d in dims) else "as the model declares them")
    plan.notes.append(Note(f"dynamic dims, {how}: " + ", ".join(
        f"{d.name} {d.min}..{d.max}" + (" (derived)" if d.derived else "") for d in dims),
        "declared-dims"))
    return plan
