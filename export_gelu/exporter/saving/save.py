"""An ONNX model written whole or not at all, with its `.data` when the weights go beside it:
staged, validated, fsynced and renamed in with the parts in atomic.py.

A new `.onnx` with external data never sits beside an old `.data` (or the reverse): the old
`.onnx` is removed before the new `.data` lands, and the new `.onnx` lands last. The external
data is written by `onnx_weights.stream_weights` straight into the staging folder under its
final relative name (never resolved against the working directory, so a re-run, or a stray
`out.onnx.data` in the working directory, changes nothing), and a path C++ cannot take (not
UTF-8) is validated from the model read back in Python.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import onnx

from export_gelu import onnx_weights
from export_gelu.atomic import (
    check_output_name,
    commit_renames,
    naming_output,
    printable,
    staging_dir,
)
from export_gelu.errors import BadInputError
from export_gelu.onnx_weights import WrittenWeights

#: Models whose tensors exceed this many bytes keep them in a side `.data` file (protobuf
#: cannot exceed 2 GiB); the environment variable lowers it, e.g. to keep `.onnx` files small.
EXTERNAL_DATA_THRESHOLD = 1 << 30
EXTERNAL_DATA_ENV = "EXPORT_GELU_EXTERNAL_DATA_THRESHOLD"


def external_data_threshold() -> int:
    """Bytes of tensors above which weights go to `.data` (capped at 1 GiB)."""
    value = os.environ.get(EXTERNAL_DATA_ENV, "")
    try:
        return min(int(value), EXTERNAL_DATA_THRESHOLD) if value else EXTERNAL_DATA_THRESHOLD
    except ValueError:
        raise BadInputError(f"{EXTERNAL_DATA_ENV}={value!r}: expected a number of bytes") from None


def _tensor_bytes(model: onnx.ModelProto) -> int:
    total = 0
    for init in model.graph.initializer:
        total += len(init.raw_data) if init.raw_data else 0
    return total


def save_onnx_atomic(model: onnx.ModelProto, out: Path, external_data: bool | None = None,
                     validate: Callable[[str], object] | None = None) -> list[Path]:
    """Save `model` to `out` (and `out.data` when external), never leaving a partial file.

    `validate(path)` runs on the staged file before anything is renamed into place. With
    external data, the tensors' bytes move out of `model` (it is left referencing the file).
    """
    return save_onnx_streaming(model, out, external_data, validate)[0]


def save_onnx_streaming(model: onnx.ModelProto, out: Path, external_data: bool | None = None,
                        validate: Callable[[str], object] | None = None,
                        on_bytes: Callable[[int], None] | None = None,
                        ) -> tuple[list[Path], WrittenWeights | None]:
    """`save_onnx_atomic`, streaming the weights of a graph loaded without them.

    A model holding lazy tensors (onnx_weights.load_graph) has their bytes copied from their
    file into `out.data` a chunk at a time (`on_bytes(n)` after each); the written tensors
    are then read from `out.data`. Small models (all tensors under the external-data
    threshold) are read in and saved whole, as before. Returns the paths written and, when
    weights were streamed, what was written (bytes, SHA-256).
    """
    lazy = onnx_weights.lazy_folder(model) is not None
    total = _tensor_bytes(model) + (onnx_weights.lazy_bytes(model) if lazy else 0)
    if external_data is None:
        external_data = total > external_data_threshold()
    if lazy and not external_data:
        onnx_weights.materialize(model)
        lazy = False
    data_name = out.name + ".data"
    final_data = out.parent / data_name
    if external_data:
        _check_data_name(out, data_name)
    written: WrittenWeights | None = None
    with staging_dir(out) as tmp:
        staged = tmp / out.name
        staged_data = tmp / data_name
        if external_data:
            try:
                with naming_output(final_data, tmp):
                    written = onnx_weights.stream_weights(
                        model, staged_data, data_name, on_bytes=on_bytes,
                        inline_attributes=lazy)
            except (onnx_weights.NanWeightError, onnx_weights.TruncatedWeightsError) as exc:
                raise BadInputError(str(exc)) from exc
        with naming_output(out, tmp), staged.open("wb") as fh:
            onnx.save_model(model, fh)  # a file object: no path is handed to C++ or resolved
            fh.flush()
            os.fsync(fh.fileno())
        if validate is not None:
            _validate_staged(validate, staged)
        if external_data:
            # give the weights the .onnx's (umask) mode, so whoever can read the graph can
            # read its weights
            os.chmod(staged_data, staged.stat().st_mode & 0o777)
            # old .onnx first: it must never be seen beside the new .data
            commit_renames([(staged_data, final_data), (staged, out)], remove_first=[out],
                    remove_after=[])
            onnx_weights.point_at(model, out.parent)
            return [out, final_data], written if lazy else None
        # no external data: the new .onnx lands, then any stale .data of an earlier run goes
        commit_renames([(staged, out)], remove_first=[], remove_after=[final_data])
    return [out], written


def _check_data_name(out: Path, data_name: str) -> None:
    """The `.data` file's name must fit the file system and, being written into the graph
    as its external-data location, be UTF-8."""
    check_output_name(out, ".data")
    try:
        os.fsencode(data_name).decode("utf-8")
    except UnicodeDecodeError:
        raise BadInputError(
            f"output {printable(out)}: its weights go to an external-data file, whose name the "
            "ONNX format stores as UTF-8 text, and this name is not UTF-8; choose a UTF-8 "
            f"name (or raise {EXTERNAL_DATA_ENV})") from None


def _validate_staged(validate: Callable[[str | onnx.ModelProto], object], staged: Path) -> None:
    """`validate(path)`, with a path C++ can take: the staged file's own, or one through an
    ASCII alias of its folder (fspaths); a file whose own name is not UTF-8 (it then has no
    external data) is validated as the model read back in Python."""
    from export_gelu.fspaths import utf8_alias, utf8_path

    if utf8_path(staged) is not None:
        validate(str(staged))
    elif utf8_path(staged.name) is not None:
        validate(os.path.join(utf8_alias(staged.parent), staged.name))
    else:
        with staged.open("rb") as fh:
            validate(onnx.load_model(fh, load_external_data=False))


