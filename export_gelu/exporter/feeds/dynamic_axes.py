"""One input axis's range for a TensorRT optimization profile, and the check that the produced
graph can honour it (the axis is dynamic there, the parity input lies inside the range)."""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from export_gelu.errors import BadInputError


@dataclass(frozen=True)
class DynamicAxis:
    """One input axis's range: input `name`, `axis`, MIN/OPT/MAX, and the dim it carries."""

    name: str
    axis: int
    min: int
    opt: int
    max: int
    dim: str = ""  # the named dim (batch, seq) this axis carries, when it has one


def parse_dynamic(text: str) -> DynamicAxis:
    try:
        name, rest = text.split(":", 1)
        axis_s, dims = rest.split("=")
        lo, opt, hi = (int(v) for v in dims.split(":"))
        axis = int(axis_s)
    except ValueError:
        raise BadInputError(f"--dynamic {text!r}: expected NAME:AXIS=MIN:OPT:MAX, "
                            "e.g. input_ids:1=16:128:512") from None
    if not 0 < lo <= opt <= hi:
        raise BadInputError(f"--dynamic {text!r}: need 0 < MIN <= OPT <= MAX")
    return DynamicAxis(name, axis, lo, opt, hi)


def check_dynamic(dynamic: list[DynamicAxis], model: onnx.ModelProto,
                  shapes: dict[str, tuple[int, ...]]) -> None:
    """Refuse `--dynamic` ranges the produced graph or the feed cannot honour (exit 2)."""
    inputs = {i.name: i for i in model.graph.input}
    for d in dynamic:
        flag = f"--dynamic {d.name}:{d.axis}={d.min}:{d.opt}:{d.max}"
        if d.name not in shapes or d.name not in inputs:
            raise BadInputError(f"{flag}: the graph has no input {d.name!r} (inputs: "
                                f"{', '.join(shapes) or 'none'})")
        dims = inputs[d.name].type.tensor_type.shape.dim
        if not -len(dims) <= d.axis < len(dims):
            raise BadInputError(f"{flag}: input {d.name!r} has rank {len(dims)}")
        dim = dims[d.axis]
        if dim.HasField("dim_value"):
            raise BadInputError(f"{flag}: axis {d.axis} of {d.name!r} is static "
                                f"({dim.dim_value}) in the graph; TensorRT can only range a "
                                "dynamic axis (export the model with that axis dynamic)")
        size = shapes[d.name][d.axis]
        if not d.min <= size <= d.max:
            raise BadInputError(f"{flag}: the parity input has {size} there, outside "
                                f"[{d.min}, {d.max}]")
