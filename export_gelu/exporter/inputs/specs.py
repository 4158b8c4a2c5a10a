"""Model inputs: `--input NAME:SHAPE[:DTYPE[:LOW,HIGH]]` specs and `.npz` files.

Both are refused with a one-line reason when they could not be what the user meant: a shape
that is not positive integers or is too large to allocate, a range that the dtype cannot
hold, an `.npz` whose arrays are pickled objects, hold NaN/inf, have a dtype no model input
takes, or declare more elements than allowed (checked from the header, before reading).
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import IO, BinaryIO

import numpy as np

from export_gelu.errors import BadInputError
from export_gelu.flags.input_spec import (  # noqa: F401 - the grammar, re-exported
    DTYPES,
    MAX_ELEMENTS,
    SPEC_HELP,
    InputSpec,
    parse_input_spec,
)

DEFAULT_INT_RANGE = (0, 10)


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


def _npy_header(fh: IO[bytes], where: str) -> tuple[tuple[int, ...], np.dtype]:
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

