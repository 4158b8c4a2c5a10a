"""Where a big model's weights go between the exporter and the output: a hidden folder beside
the output (same filesystem, so never a RAM-backed /tmp), named like a staging folder so a
run killed with SIGKILL has it removed by the next save there (exporter/save.py)."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

_CURRENT: ContextVar[Path | None] = ContextVar("export_gelu_weights_workdir", default=None)
_MADE: list[Path] = []


def weights_workdir(out: Path) -> Path:
    """A new hidden folder beside `out`, removed by `release_workdirs` (or at exit)."""
    from export_gelu.exporter.save import _HOST, STAGING_TAG, clean_stale_staging

    clean_stale_staging(out.parent)
    prefix = f".{out.name}.{STAGING_TAG}-{os.getpid()}@{_HOST}.weights."
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=out.parent))
    if not _MADE:
        atexit.register(release_workdirs)
    _MADE.append(folder)
    return folder


def release_workdirs() -> None:
    """Remove every folder `weights_workdir` made (their weights are in the output now)."""
    while _MADE:
        shutil.rmtree(_MADE.pop(), ignore_errors=True)


@contextlib.contextmanager
def exporting_weights_to(folder: Path | None) -> Iterator[None]:
    """Within: exporters write the weights into `folder` and hand back the graph with its
    weights left there (onnx_weights.load_graph); None: in memory, as for small models."""
    token = _CURRENT.set(folder)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current_workdir() -> Path | None:
    return _CURRENT.get()
