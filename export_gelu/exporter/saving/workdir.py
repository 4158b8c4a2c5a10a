"""Where a big model's weights go between the exporter and the output: a hidden folder beside
the output (same filesystem, so never a RAM-backed /tmp), named like a staging folder so a
run killed with SIGKILL has it removed by the next save there (exporter/saving/save.py)."""

from __future__ import annotations

import atexit
import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

_CURRENT: ContextVar[Path | None] = ContextVar("export_gelu_weights_workdir", default=None)
_MADE: list[Path] = []
_AT_EXIT: list[bool] = []  # release_workdirs registered with atexit (once per process)
#: The folders the current command made (`workdirs_of_this_run`); None outside a command.
_RUN: ContextVar[list[Path] | None] = ContextVar("export_gelu_run_workdirs", default=None)


def weights_workdir(out: Path) -> Path:
    """A new hidden folder beside `out` (its name bounded like a staging folder's, whatever
    `out` is called), removed by `release_workdirs` (or at exit)."""
    from export_gelu.atomic import clean_stale_staging, signals_deferred, staging_prefix

    clean_stale_staging(out.parent)
    if not _AT_EXIT:
        atexit.register(release_workdirs)
        _AT_EXIT.append(True)
    with signals_deferred():  # made and recorded as one: a signal cannot fall between
        folder = Path(tempfile.mkdtemp(prefix=staging_prefix(out, "weights."), dir=out.parent))
        _MADE.append(folder)
        run = _RUN.get()
        if run is not None:
            run.append(folder)
    return folder


def release_workdirs() -> None:
    """Remove the folders `weights_workdir` made (their weights are in the output now): the
    current command's inside `workdirs_of_this_run`, so a command running beside it in
    another thread keeps its own; every one outside (at exit)."""
    run = _RUN.get()
    mine = list(run) if run is not None else list(_MADE)
    for folder in mine:
        with contextlib.suppress(ValueError):
            _MADE.remove(folder)
        shutil.rmtree(folder, ignore_errors=True)
    if run is not None:
        run.clear()


@contextlib.contextmanager
def workdirs_of_this_run() -> Iterator[None]:
    """Within: the folders made belong to this command, and are removed when it ends,
    however it ends."""
    token = _RUN.set([])
    try:
        yield
    finally:
        release_workdirs()
        _RUN.reset(token)


@contextlib.contextmanager
def exporting_weights_to(folder: Path | None) -> Iterator[None]:
    """Within: exporters write the weights into `folder` and hand back the graph with its
    weights left there (onnx_weights.load_graph); None: in memory, as for small models.
    A write the disk refuses there names the folder (exit 2, errors.py)."""
    from export_gelu.atomic import naming_output

    token = _CURRENT.set(folder)
    try:
        with naming_output(folder) if folder is not None else contextlib.nullcontext():
            yield
    finally:
        _CURRENT.reset(token)


def current_workdir() -> Path | None:
    """The folder exporters write a big model's weights into (as a path C++ can take)."""
    from export_gelu.fspaths import utf8_alias

    folder = _CURRENT.get()
    return None if folder is None else Path(utf8_alias(folder))


def refused_write(exc: BaseException) -> BaseException | None:
    """An exporter's OSError without an errno while it wrote a big model's weights into the
    work folder (numpy's "4096 requested and 1920 written": the file system took part of a
    write, when full or at a file-size limit) as the WorldError it is; else None."""
    from export_gelu.errors import WorldError

    folder = _CURRENT.get()
    if folder is None or not isinstance(exc, OSError) or exc.errno is not None:
        return None
    return WorldError(f"writing the model's weights into {folder}: the file system took only "
                      f"part of a write ({exc}); is the disk full, or a file-size limit "
                      "(ulimit -f) set?")
