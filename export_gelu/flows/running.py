"""What every command runs in: its `Run` (progress, step timing, notes), the all-or-nothing
transaction over the files it writes, its request's ONNX parses (each file once), and the
removal of the folders a big model's weights passed through, however the run ends."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from export_gelu.exporter.saving.workdir import workdirs_of_this_run
from export_gelu.onnx_file import parsing_once
from export_gelu.options import RunOptions
from export_gelu.progress import Progress
from export_gelu.results.request import Request
from export_gelu.run import Run


@contextlib.contextmanager
def command_run(request: Request[RunOptions], progress: Progress | None = None
                ) -> Iterator[Run]:
    """A run for `request`: a failure inside removes what it wrote, and the exporter's
    weights folders beside the output go when it ends (a run that failed before saving
    the graph left them until the process exited: in a long-lived Python, for good)."""
    run = Run(progress)
    with workdirs_of_this_run(), parsing_once(request.parsed), run.transaction():
        yield run
