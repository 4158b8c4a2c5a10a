"""The `--dynamic` plan a run follows: each dim with its range and axes, the axes per input (the
TensorRT profile), torch.export's `dynamic_shapes`, and the inputs at the sizes parity checks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from export_gelu.exporter.feeds.dynamic_axes import DynamicAxis
from export_gelu.flags.dynamic import DimRange


@dataclass(frozen=True)
class InputTemplate:
    """One model input with its named dims: how to make it at any size of those dims."""

    name: str
    dtype: str  # a key of inputs.DTYPES
    dims: tuple[int | str, ...]  # a str is a named dim
    low: float | None = None
    high: float | None = None

    def spec(self, sizes: dict[str, int]) -> str:
        """The `--input` spec of this input with every named dim at `sizes`."""
        shape = "x".join(str(sizes[d]) if isinstance(d, str) else str(d) for d in self.dims)
        text = f"{self.name}:{shape}:{self.dtype}"
        if self.low is not None and self.high is not None:
            text += f":{self.low:g},{self.high:g}"
        return text


def np_dtype_name(dtype: Any) -> str:
    """The `--input` dtype word for a numpy dtype (the names inputs.DTYPES uses)."""
    return np.dtype(dtype).name


@dataclass
class DynamicPlan:
    """The dynamic dims of one run, resolved against the model."""

    dims: list[DimRange] = field(default_factory=list)  # resolved: name and axes filled in
    templates: list[InputTemplate] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    symbols: dict[str, str] = field(default_factory=dict)  # a program's symbol → dim name
    generated: bool = False  # the feed is made from the templates (no --input was needed)

    def __bool__(self) -> bool:
        return bool(self.dims)

    @property
    def ranged(self) -> list[DimRange]:
        """Dims whose range holds more than one size."""
        return [d for d in self.dims if d.min < d.max]

    def axes(self) -> list[DynamicAxis]:
        """One DynamicAxis per input axis, the TensorRT optimization profile's ranges."""
        return [DynamicAxis(inp, axis, d.min, d.opt, d.max, d.name)
                for d in self.dims for inp, axis in d.axes]

    def sizes(self, which: str) -> dict[str, int]:
        """Every dim at `which`: min, opt, max, or odd (an odd size strictly between)."""
        if which == "odd":
            return {d.name: odd_between(d) for d in self.dims}
        return {d.name: getattr(d, which) for d in self.dims}

    def points(self) -> list[tuple[str, dict[str, int]]]:
        """(label, sizes) where parity runs: opt first, then min, odd and max; no repeats."""
        seen: list[dict[str, int]] = []
        out = []
        for label in ("opt", "min", "odd", "max"):
            sizes = self.sizes(label)
            if sizes not in seen:
                seen.append(sizes)
                out.append((label, sizes))
        return out

    def specs(self, sizes: dict[str, int]) -> list[str]:
        return [t.spec(sizes) for t in self.templates]

    def free_axes(self) -> set[tuple[str, int]]:
        """Axes torch.export may leave as symbols of their own (`Dim.AUTO`, never made static):
        none here; a model's declared plan names its derived dims' axes (hf_dims.py)."""
        return set()

    def torch_dynamic_shapes(self, input_names: Sequence[str]) -> tuple[Any, ...]:
        """torch.export's `dynamic_shapes`: one Dim per named dim, shared by its axes (capture
        itself uses dynamic_capture.dynamic_shapes, which lets torch tie the other axes)."""
        import torch

        made = {d.name: torch.export.Dim(d.name, min=d.min, max=d.max) for d in self.ranged}
        per_input: dict[str, dict[int, Any]] = {n: {} for n in input_names}
        for d in self.ranged:
            for inp, axis in d.axes:
                per_input[inp][axis] = made[d.name]
        return tuple(per_input[n] or None for n in input_names)

    def to_json(self) -> list[dict[str, Any]]:
        return [{"name": d.name, "min": d.min, "opt": d.opt, "max": d.max,
                 "axes": [f"{i}:{a}" for i, a in d.axes]} for d in self.dims]


def odd_between(d: DimRange) -> int:
    """An odd size strictly between OPT and MAX (else MIN and OPT), or OPT when none exists."""
    for lo, hi in ((d.opt, d.max), (d.min, d.opt)):
        mid = (lo + hi) // 2
        for cand in (mid | 1, (mid | 1) - 2, (mid | 1) + 2):
            if lo < cand < hi:
                return cand
    return d.opt
