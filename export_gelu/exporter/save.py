"""Write ONNX files atomically (beside, then rename), with external data for large models."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import onnx

from export_gelu.errors import BadInputError

#: Models whose tensors exceed this many bytes keep them in a side `.data` file.
EXTERNAL_DATA_THRESHOLD = 1 << 30


def check_output_path(out: Path, inputs: list[Path]) -> None:
    """Fail early (exit 2) on an output we could not or must not write."""
    if not out.parent.exists():
        raise BadInputError(f"output directory {out.parent} does not exist")
    if not out.parent.is_dir():
        raise BadInputError(f"output directory {out.parent} is not a directory")
    if not os.access(out.parent, os.W_OK):
        raise BadInputError(f"output directory {out.parent} is not writable")
    for path in inputs:
        if path.exists() and out.resolve() == path.resolve():
            raise BadInputError(f"refusing to overwrite the input {path} with the output")


def _tensor_bytes(model: onnx.ModelProto) -> int:
    total = 0
    for init in model.graph.initializer:
        total += len(init.raw_data) if init.raw_data else 0
    return total


@contextlib.contextmanager
def staging_dir(out: Path) -> Iterator[Path]:
    """A temporary directory beside `out`, removed whatever happens."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def save_onnx_atomic(model: onnx.ModelProto, out: Path, external_data: bool | None = None,
                     validate: Callable[[str], object] | None = None) -> list[Path]:
    """Save `model` to `out` (and `out.data` when external), never leaving a partial file.

    `validate(path)` runs on the staged file before anything is renamed into place.
    """
    if external_data is None:
        external_data = _tensor_bytes(model) > EXTERNAL_DATA_THRESHOLD
    data_name = out.name + ".data"
    written: list[Path] = []
    with staging_dir(out) as tmp:
        staged = tmp / out.name
        if external_data:
            onnx.save_model(model, str(staged), save_as_external_data=True,
                            all_tensors_to_one_file=True, location=data_name, size_threshold=1024)
        else:
            onnx.save_model(model, str(staged))
        if validate is not None:
            validate(str(staged))
        staged_data = tmp / data_name
        if staged_data.exists():
            os.replace(staged_data, out.parent / data_name)
            written.append(out.parent / data_name)
        elif (out.parent / data_name).exists():
            (out.parent / data_name).unlink()  # a stale side file from an earlier run
        os.replace(staged, out)
        written.insert(0, out)
    return written


def write_text_atomic(text: str, out: Path) -> None:
    """Write a text file (a report) beside, then rename."""
    with staging_dir(out) as tmp:
        staged = tmp / out.name
        staged.write_text(text, encoding="utf-8")
        os.replace(staged, out)
