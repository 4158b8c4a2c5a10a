"""What every command runs in: its `Run` (progress, step timing, notes), the all-or-nothing
transaction over the files it writes, and its request's ONNX parses (each file once)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from export_gelu.onnx_file import parsing_once
from export_gelu.options import RunOptions
from export_gelu.progress import Progress
from export_gelu.results.request import Request
from export_gelu.run import Run


@contextlib.contextmanager
def command_run(request: Request[RunOptions], progress: Progress | None = None
                ) -> Iterator[Run]:
    """A run for `request`: a failure inside removes what it wrote."""
    run = Run(progress)
    with parsing_once(request.parsed), run.transaction():
        yield run
