"""Write outputs atomically: stage beside the target, validate, fsync, rename.

Every file (the `.onnx`, its `.data`, the report) is written into a hidden staging directory
in the output's own folder, so the final step is a same-filesystem `rename`. Whatever
interrupts a run, a reader sees either the previous complete file or the new complete file,
never a partial one:

- Python exceptions, Ctrl-C and SIGTERM (the CLI turns it into KeyboardInterrupt) remove the
  staging directory on the way out.
- SIGINT/SIGTERM arriving during the renames are held until the renames are done.
- SIGKILL (or a power cut) can leave the staging directory behind. Its name records the
  owning process (`.out.onnx.export-gelu-<pid>@<host>.<random>`); the next save into the
  same folder removes staging directories whose process is gone.
- A new `.onnx` with external data never sits beside an old `.data` (or the reverse): the old
  `.onnx` is removed before the new `.data` lands, and the new `.onnx` lands last.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import onnx

from export_gelu import onnx_weights
from export_gelu.errors import BadInputError
from export_gelu.onnx_weights import WrittenWeights

#: Models whose tensors exceed this many bytes keep them in a side `.data` file (protobuf
#: cannot exceed 2 GiB); the environment variable lowers it, e.g. to keep `.onnx` files small.
EXTERNAL_DATA_THRESHOLD = 1 << 30
EXTERNAL_DATA_ENV = "EXPORT_GELU_EXTERNAL_DATA_THRESHOLD"
STAGING_TAG = "export-gelu"
_HOST = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())[:40] or "host"
_STAGING_RE = re.compile(rf"^\..+\.{STAGING_TAG}-(\d+)@([A-Za-z0-9_-]+)\.[^/]+$")


def check_output_path(out: Path, inputs: list[Path]) -> None:
    """Fail early (exit 2) on an output we could not or must not write."""
    if not out.name or out.name in (".", ".."):
        raise BadInputError(f"output {out} is not a file name")
    if not out.parent.exists():
        raise BadInputError(f"output directory {out.parent} does not exist")
    if not out.parent.is_dir():
        raise BadInputError(f"output directory {out.parent} is not a directory")
    if out.is_dir():
        raise BadInputError(f"output {out} is a directory; give a file name")
    if not os.access(out.parent, os.W_OK):
        raise BadInputError(f"output directory {out.parent} is not writable")
    written = {out.resolve(): "the output", Path(str(out.resolve()) + ".data"): "its .data"}
    for path in inputs:
        if path.exists() and path.resolve() in written:
            raise BadInputError(f"refusing to overwrite the input {path} with "
                                f"{written[path.resolve()]} ({out})")


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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def clean_stale_staging(directory: Path) -> list[Path]:
    """Remove staging directories in `directory` left by processes that no longer run here."""
    removed = []
    try:
        entries = list(directory.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = _STAGING_RE.match(entry.name)
        if not match or not entry.is_dir() or match.group(2) != _HOST:
            continue
        pid = int(match.group(1))
        if pid != os.getpid() and not _pid_alive(pid):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


@contextlib.contextmanager
def staging_dir(out: Path) -> Iterator[Path]:
    """A hidden directory beside `out`, named after this process, removed whatever happens."""
    clean_stale_staging(out.parent)
    prefix = f".{out.name}.{STAGING_TAG}-{os.getpid()}@{_HOST}."
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=out.parent))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM (delivered on exit) so a multi-file commit is not cut in half."""
    sigs = {signal.SIGINT, signal.SIGTERM}
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _commit(moves: list[tuple[Path, Path]], remove_first: list[Path],
            remove_after: list[Path]) -> None:
    """Renames in order, with removals before/after; signals held throughout."""
    with signals_deferred():
        for path in remove_first:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        for src, dst in moves:
            os.replace(src, dst)
        for path in remove_after:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        with contextlib.suppress(OSError):
            _fsync(moves[-1][1].parent)


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
    written: WrittenWeights | None = None
    with staging_dir(out) as tmp:
        staged = tmp / out.name
        staged_data = tmp / data_name
        if lazy:
            try:
                written = onnx_weights.stream_weights(model, staged_data, data_name,
                                                      on_bytes=on_bytes)
            except onnx_weights.NanWeightError as exc:
                raise BadInputError(str(exc)) from exc
            onnx.save_model(model, str(staged))
        elif external_data:
            onnx.save_model(model, str(staged), save_as_external_data=True,
                            all_tensors_to_one_file=True, location=data_name, size_threshold=1024)
        else:
            onnx.save_model(model, str(staged))
        if validate is not None:
            validate(str(staged))
        if staged_data.exists():
            # onnx creates external data 0600; give it the .onnx's (umask) mode, so whoever
            # can read the graph can read its weights
            os.chmod(staged_data, staged.stat().st_mode & 0o777)
        for path in (staged_data, staged):
            if path.exists():
                _fsync(path)
        if staged_data.exists():
            # old .onnx first: it must never be seen beside the new .data
            _commit([(staged_data, final_data), (staged, out)], remove_first=[out],
                    remove_after=[])
            if lazy:
                onnx_weights.point_at(model, out.parent)
            return [out, final_data], written
        # no external data: the new .onnx lands, then any stale .data of an earlier run goes
        _commit([(staged, out)], remove_first=[], remove_after=[final_data])
    return [out], written


def write_text_atomic(text: str, out: Path) -> None:
    """Write a text file (a report) beside, then rename."""
    with staging_dir(out) as tmp:
        staged = tmp / out.name
        staged.write_text(text, encoding="utf-8")
        _fsync(staged)
        _commit([(staged, out)], remove_first=[], remove_after=[])
