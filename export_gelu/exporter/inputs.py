"""Model inputs: `--input NAME:SHAPE[:DTYPE[:LOW,HIGH]]` specs, `.npz` files, example inputs."""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from export_gelu.errors import BadInputError

DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "int64": np.dtype(np.int64),
    "int32": np.dtype(np.int32),
    "bool": np.dtype(np.bool_),
}
#: Refuse inputs larger than this many elements (a typo like 1x128000000 should not eat RAM).
MAX_ELEMENTS = 1 << 28
DEFAULT_INT_RANGE = (0, 10)

SPEC_HELP = "NAME:SHAPE[:DTYPE[:LOW,HIGH]], e.g. input_ids:1x128:int64:0,30522"


@dataclass(frozen=True)
class InputSpec:
    """One `--input` flag, parsed."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    low: float | None = None
    high: float | None = None


def parse_input_spec(text: str) -> InputSpec:
    """Parse `NAME:SHAPE[:DTYPE[:LOW,HIGH]]`; raise BadInputError naming what is wrong."""
    parts = text.split(":")
    if len(parts) < 2 or len(parts) > 4 or not parts[0]:
        raise BadInputError(f"--input {text!r}: expected {SPEC_HELP}")
    name, shape_text = parts[0], parts[1]
    try:
        shape = tuple(int(d) for d in shape_text.lower().split("x")) if shape_text else ()
    except ValueError:
        raise BadInputError(f"--input {text!r}: shape {shape_text!r} is not like 1x128") from None
    if any(d <= 0 for d in shape):
        raise BadInputError(f"--input {text!r}: every dimension must be a positive integer")
    if int(np.prod(shape, dtype=np.float64)) > MAX_ELEMENTS:
        raise BadInputError(f"--input {text!r}: {np.prod(shape, dtype=np.float64):.3g} elements "
                            f"is more than the {MAX_ELEMENTS} allowed")
    dtype = np.dtype(np.float32)
    if len(parts) >= 3 and parts[2]:
        if parts[2] not in DTYPES:
            raise BadInputError(f"--input {text!r}: dtype {parts[2]!r} is not one of "
                                f"{', '.join(DTYPES)}")
        dtype = DTYPES[parts[2]]
    low = high = None
    if len(parts) == 4:
        try:
            low_s, high_s = parts[3].split(",")
            low, high = float(low_s), float(high_s)
        except ValueError:
            raise BadInputError(f"--input {text!r}: range {parts[3]!r} is not LOW,HIGH") from None
        if not (np.isfinite(low) and np.isfinite(high)) or low >= high:
            raise BadInputError(f"--input {text!r}: range needs finite LOW < HIGH")
    return InputSpec(name, shape, dtype, low, high)


def make_input(spec: InputSpec, rng: np.random.Generator) -> np.ndarray:
    """A random array for one spec: normal floats, or uniform within LOW,HIGH."""
    if spec.dtype.kind == "b":
        return rng.integers(0, 2, size=spec.shape).astype(np.bool_)
    if spec.dtype.kind in "iu":
        low, high = (spec.low, spec.high) if spec.low is not None else DEFAULT_INT_RANGE
        return rng.integers(int(low), int(high), size=spec.shape).astype(spec.dtype)
    if spec.low is not None:
        return rng.uniform(spec.low, spec.high, size=spec.shape).astype(spec.dtype)
    return rng.standard_normal(size=spec.shape).astype(spec.dtype)


def make_inputs(specs: list[InputSpec], seed: int = 0) -> dict[str, np.ndarray]:
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise BadInputError(f"--input: the same name is given twice ({', '.join(names)})")
    rng = np.random.default_rng(seed)
    return {s.name: make_input(s, rng) for s in specs}


def load_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Arrays from a `.npz` file, in the order they were saved; pickled objects are refused."""
    path = Path(path)
    if not path.is_file():
        raise BadInputError(f"--inputs {path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise BadInputError(f"--inputs {path}: not a readable .npz file ({exc})") from exc
    if not arrays:
        raise BadInputError(f"--inputs {path}: holds no arrays")
    for name, arr in arrays.items():
        if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
            raise BadInputError(f"--inputs {path}: array {name!r} holds NaN or inf")
    return arrays
