"""Model inputs: `--input NAME:SHAPE[:DTYPE[:LOW,HIGH]]` specs and `.npz` files.

Both are refused with a one-line reason when they could not be what the user meant: a shape
that is not positive integers or is too large to allocate, a range that the dtype cannot
hold, an `.npz` whose arrays are pickled objects, hold NaN/inf, have a dtype no model input
takes, or declare more elements than allowed (checked from the header, before reading).
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

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
DEFAULT_INT_RANGE = (0, 10)
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


def make_input(spec: InputSpec, rng: np.random.Generator) -> np.ndarray:
    """A random array for one spec: normal floats, or uniform within LOW,HIGH."""
    if spec.dtype.kind == "b":
        return rng.integers(0, 2, size=spec.shape).astype(np.bool_)
    if spec.dtype.kind in "iu":
        low, high = ((spec.low, spec.high) if spec.low is not None and spec.high is not None
                     else DEFAULT_INT_RANGE)  # (a range always has both ends)
        return rng.integers(int(low), int(high), size=spec.shape).astype(spec.dtype)
    if spec.low is not None and spec.high is not None:
        return rng.uniform(spec.low, spec.high, size=spec.shape).astype(spec.dtype)
    return rng.standard_normal(size=spec.shape).astype(spec.dtype)


def make_inputs(specs: list[InputSpec], seed: int = 0) -> dict[str, np.ndarray]:
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise BadInputError(f"--input: the same name is given twice ({', '.join(names)})")
    rng = np.random.default_rng(seed)
    return {s.name: make_input(s, rng) for s in specs}


def _npy_header(fh, where: str) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype from a .npy header, without reading the data."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(fh)
        read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, _fortran, dtype = read(fh)
    except Exception as exc:  # noqa: BLE001 - numpy raises ValueError and others on garbage
        raise BadInputError(f"{where}: not a NumPy array ({exc})") from exc
    return tuple(int(d) for d in shape), np.dtype(dtype)


def _check_npz_array(where: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
    if dtype.hasobject:
        raise BadInputError(f"{where} holds Python objects (a pickle); only numeric arrays "
                            "are read (save with np.savez and plain dtypes)")
    if dtype not in DTYPES.values():
        fix = " (save it with .astype(np.float32))" if dtype.kind == "f" else ""
        raise BadInputError(f"{where} is {dtype}; inputs must be one of "
                            f"{', '.join(DTYPES)}{fix}")
    if any(d < 0 for d in shape) or float(np.prod(shape, dtype=np.float64)) > MAX_ELEMENTS:
        raise BadInputError(f"{where} declares shape {shape}, more than the {MAX_ELEMENTS} "
                            "elements allowed")


def load_npz(path: str | Path, fileobj: BinaryIO | None = None) -> dict[str, np.ndarray]:
    """Arrays from a `.npz` file, in the order they were saved (read from `fileobj`, the file
    already opened, when given: a bundle's, opened by untrusted_files.py's rule).

    Each member's header is checked (dtype, element count) before its data is read, so
    pickled object arrays and oversized declarations never reach memory.
    """
    path = Path(path)
    if fileobj is None and not path.is_file():
        raise BadInputError(f"--inputs {path}: no such file")
    arrays: dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(fileobj if fileobj is not None else path) as zf:
            for info in zf.infolist():
                if info.is_dir():
                    continue
                if not info.filename.endswith(".npy"):
                    raise BadInputError(f"--inputs {path}: member {info.filename!r} is not a "
                                        ".npy array (not a NumPy .npz file)")
                name = info.filename[:-4]
                where = f"--inputs {path}: array {name!r}"
                with zf.open(info) as fh:
                    shape, dtype = _npy_header(fh, where)
                    _check_npz_array(where, shape, dtype)
                with zf.open(info) as fh:
                    arrays[name] = np.lib.format.read_array(fh, allow_pickle=False)
    except BadInputError:
        raise
    except (ValueError, OSError, zipfile.BadZipFile, EOFError, RuntimeError) as exc:
        raise BadInputError(f"--inputs {path}: not a readable .npz file "
                            f"({type(exc).__name__}: {exc})") from exc
    if not arrays:
        raise BadInputError(f"--inputs {path}: holds no arrays")
    for name, arr in arrays.items():
        if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
            raise BadInputError(f"--inputs {path}: array {name!r} holds NaN or inf")
    return arrays

