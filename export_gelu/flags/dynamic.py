"""`--dynamic`: the three spellings of a dynamic dim and its range, and the dims an `--input`
spec names (which input axes a dim then covers is exporter/feeds/dynamic.py's).

All three end in `=MIN:OPT:MAX`:

- `DIM=MIN:OPT:MAX` ranges every input axis named DIM.
- `DIM=INPUT:AXIS[,INPUT:AXIS…]=MIN:OPT:MAX` names the axes DIM covers explicitly.
- `INPUT:AXIS=MIN:OPT:MAX` ranges one axis (the TensorRT-style form, given once per input).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from export_gelu.errors import BadInputError

FLAG_FORMS = "DIM=MIN:OPT:MAX, DIM=INPUT:AXIS[,INPUT:AXIS]=MIN:OPT:MAX or INPUT:AXIS=MIN:OPT:MAX"
FLAG_EXAMPLE = "e.g. --dynamic batch=1:8:32 --dynamic seq=1:128:512"
DIM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NUMBER = re.compile(r"^[0-9]+$")


@dataclass(frozen=True)
class DimRange:
    """One `--dynamic` flag: a dim's range and, when spelled out, the axes it covers."""

    name: str  # '' for the INPUT:AXIS form: the dim is named after what the model calls it
    min: int
    opt: int
    max: int
    axes: tuple[tuple[str, int], ...] = ()  # () = every axis the model names `name`
    flag: str = ""

    @property
    def label(self) -> str:
        return f"--dynamic {self.flag}" if self.flag else f"dim {self.name!r}"


def _parse_range(text: str, flag: str) -> tuple[int, int, int]:
    parts = text.split(":")
    if len(parts) != 3 or not all(NUMBER.match(p) for p in parts):
        raise BadInputError(f"--dynamic {flag!r}: expected {FLAG_FORMS} ({FLAG_EXAMPLE})")
    lo, opt, hi = (int(p) for p in parts)
    if not 0 < lo <= opt <= hi:
        raise BadInputError(f"--dynamic {flag!r}: need 0 < MIN <= OPT <= MAX "
                            f"(got MIN {lo}, OPT {opt}, MAX {hi})")
    return lo, opt, hi


def _parse_axis(text: str, flag: str) -> tuple[str, int]:
    name, sep, axis = text.rpartition(":")
    if not sep or not name or not re.match(r"^-?[0-9]+$", axis):
        raise BadInputError(f"--dynamic {flag!r}: {text!r} is not INPUT:AXIS (e.g. input_ids:0)")
    return name, int(axis)


def parse_dynamic_flag(text: str) -> DimRange:
    """Parse one `--dynamic` flag in any of its three forms; exit 2 naming what is wrong."""
    left, sep, right = text.rpartition("=")
    if not sep or not left:
        raise BadInputError(f"--dynamic {text!r}: expected {FLAG_FORMS} ({FLAG_EXAMPLE})")
    lo, opt, hi = _parse_range(right, text)
    if "=" in left:
        name, axes_text = left.split("=", 1)
        axes = tuple(_parse_axis(a, text) for a in axes_text.split(","))
    elif ":" in left:
        name, axes = "", (_parse_axis(left, text),)
    else:
        name, axes = left, ()
    if name and not DIM_NAME.match(name):
        raise BadInputError(f"--dynamic {text!r}: dim name {name!r} must be a letter or _ "
                            "followed by letters, digits or _")
    return DimRange(name, lo, opt, hi, axes, text)


def split_named_dims(spec: str) -> tuple[str, dict[int, str]]:
    """`input_ids:batchxseq:int64:0,1000` → (the spec with 0 for each name, {0: batch, 1: seq}).

    Dims are separated by `x` as in `1x128`, so a dim name used here cannot contain an `x`
    (map such a dim with `--dynamic NAME=INPUT:AXIS=…`).
    """
    parts = spec.split(":")
    if len(parts) < 2:
        return spec, {}
    dims = parts[1].split("x") if parts[1] else []
    named = {i: d for i, d in enumerate(dims) if DIM_NAME.match(d) and not NUMBER.match(d)}
    if not named:
        return spec, {}
    parts[1] = "x".join("0" if i in named else d for i, d in enumerate(dims))
    return ":".join(parts), named
