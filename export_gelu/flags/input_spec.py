"""`--input NAME:SHAPE[:DTYPE[:LOW,HIGH]]`: one model input's name, shape, dtype and range.

A spec is refused with a one-line reason when it could not be what the user meant: a shape
that is not positive integers or is too large to allocate, a range that the dtype cannot hold.
(Making arrays from a spec and reading `.npz` files is exporter/inputs/specs.py's.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from export_gelu.errors import BadInputError

DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "float64": np.dtype(np.float64),
    "int64": np.dtype(np.int64),
    "int32": np.dtype(np.int32),
    "bool": np.dtype(np.bool_),
}
#: Refuse inputs larger than this many elements (a typo like 1x128000000 should not eat RAM).
MAX_ELEMENTS = 1 << 28
_NAME = re.compile(r"^\S+$")
_DIM = re.compile(r"^[0-9]+$")

SPEC_HELP = "NAME:SHAPE[:DTYPE[:LOW,HIGH]], e.g. input_ids:1x128:int64:0,30522"


@dataclass(frozen=True)
class InputSpec:
    """One `--input` flag, parsed."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    low: float | None = None
    high: float | None = None


def _dtype_bounds(dtype: np.dtype) -> tuple[float, float]:
    """The finite values `dtype` can hold (bool: 0..1)."""
    if dtype.kind == "b":
        return 0.0, 1.0
    info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
    return float(info.min), float(info.max)


def _parse_range(text: str, spec: str, dtype: np.dtype) -> tuple[float, float]:
    try:
        low_s, high_s = text.split(",")
        low, high = float(low_s), float(high_s)
    except ValueError:
        raise BadInputError(f"--input {spec!r}: range {text!r} is not LOW,HIGH") from None
    if not (np.isfinite(low) and np.isfinite(high)) or low >= high:
        raise BadInputError(f"--input {spec!r}: range needs finite LOW < HIGH")
    if dtype.kind == "b":
        raise BadInputError(f"--input {spec!r}: a bool input takes no range")
    if dtype.kind in "iu":
        if low != int(low) or high != int(high):
            raise BadInputError(f"--input {spec!r}: an integer input needs integer LOW,HIGH "
                                "(HIGH is exclusive, e.g. 0,30522)")
        lo, hi = _dtype_bounds(dtype)
        if low < lo or high - 1 > hi:
            raise BadInputError(f"--input {spec!r}: range {text} does not fit {dtype.name}")
    else:
        lo, hi = _dtype_bounds(dtype)
        if low < lo or high > hi:
            raise BadInputError(f"--input {spec!r}: range {text} does not fit {dtype.name} "
                                f"(finite values are within ±{hi:.6g})")
    return low, high


def check_shape(shape: tuple[int, ...], what: str) -> None:
    """Refuse a shape with non-positive dimensions or more than MAX_ELEMENTS elements."""
    if any(d <= 0 for d in shape):
        raise BadInputError(f"{what}: every dimension must be a positive integer")
    elements = float(np.prod(shape, dtype=np.float64))
    if elements > MAX_ELEMENTS:
        raise BadInputError(f"{what}: {elements:.3g} elements is more than the {MAX_ELEMENTS} "
                            "allowed (check the shape)")


def parse_input_spec(text: str) -> InputSpec:
    """Parse `NAME:SHAPE[:DTYPE[:LOW,HIGH]]`; raise BadInputError naming what is wrong."""
    parts = text.split(":")
    if len(parts) < 2 or len(parts) > 4 or not parts[0]:
        raise BadInputError(f"--input {text!r}: expected {SPEC_HELP}")
    name, shape_text = parts[0], parts[1]
    if not _NAME.match(name):
        raise BadInputError(f"--input {text!r}: {name!r} is not an input name")
    dims = shape_text.lower().split("x") if shape_text else []
    if any(not _DIM.match(d) for d in dims):
        if any(d.startswith("-") and _DIM.match(d[1:]) for d in dims):
            raise BadInputError(f"--input {text!r}: every dimension must be a positive integer")
        raise BadInputError(f"--input {text!r}: shape {shape_text!r} is not like 1x128")
    shape = tuple(int(d) for d in dims)
    check_shape(shape, f"--input {text!r}")
    dtype = np.dtype(np.float32)
    if len(parts) >= 3 and parts[2]:
        if parts[2] not in DTYPES:
            raise BadInputError(f"--input {text!r}: dtype {parts[2]!r} is not one of "
                                f"{', '.join(DTYPES)}")
        dtype = DTYPES[parts[2]]
    low = high = None
    if len(parts) == 4:
        low, high = _parse_range(parts[3], text, dtype)
    return InputSpec(name, shape, dtype, low, high)
