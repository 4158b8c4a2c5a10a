"""A Hugging Face folder's export shared by test files: tests/exporter/test_hf_folders.py's
row and tests/flows/test_export_flow.py's several-graphs test read one export of the tiny
BART instead of making two (docs/testing.md, "Shared folder exports").

`folder_export(cache, name, target)` saves examples/hf_folders.py's `name` (once per test run,
`session_cache`) and exports it for `target` through the export command's own steps, as
`export-gelu FOLDER --target TARGET -o out --report report.json --iterations 0` runs them
once its flags are parsed (flows/export.py's `export_report`: `command_run`, `export`,
`build_report`, `write_report`), once per test run for every worker. It keeps what the flow
returned (its type and its graphs, which the report cannot show), the report as built
(pickled) and as written (JSON), and the exit code. The run happens in the folder it writes
(relative names, as golden runs do), so the report names `out`, not a path that differs by
worker. Tests read the folder; none writes into it.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.session_cache import SessionCache

OUTPUT = "out"  # the export's -o, relative to the entry's folder
REPORT = "report.json"


@dataclass(frozen=True)
class FolderExport:
    """What one shared folder export left: the entry's folder, the flow's return (type name
    and graph names), the exit code, and the report."""

    folder: Path
    result: str  # type(export(...)).__name__: GraphsExport or GraphExport
    parts: list[str]  # a GraphsExport's graphs in the order it exported them ([] for one)
    code: int  # the report's exit code, as the command returns it

    @property
    def out(self) -> Path:
        return self.folder / OUTPUT

    def report_json(self) -> dict[str, Any]:
        """The report as write_report wrote it (a fresh dict each call)."""
        return json.loads((self.folder / REPORT).read_text())

    def report(self) -> Any:  # noqa: ANN401 - export_gelu.report.report.Report
        """The report as build_report built it from the flow's result."""
        return pickle.loads((self.folder / "report.pickle").read_bytes())


@contextlib.contextmanager
def _inside(folder: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def saved_folder(cache: SessionCache, name: str) -> Path:
    """examples/hf_folders.py's `name` saved once per test run (read-only: copy to change)."""
    from examples.hf_folders import save_folder

    return cache.folder(f"hf-{name}", lambda d: save_folder(name, d / name)) / name


def folder_export(cache: SessionCache, name: str, target: str) -> FolderExport:
    """The shared export of folder `name` for `target` (module docstring)."""
    model = saved_folder(cache, name)

    def build(folder: Path) -> None:
        from export_gelu.flows.export import export
        from export_gelu.flows.running import command_run
        from export_gelu.options import ExportOptions
        from export_gelu.report.build import build_report
        from export_gelu.report.write import write_report
        from export_gelu.steps.request import prepare

        options = ExportOptions(target=target, output=OUTPUT, report=REPORT, iterations=0)
        with _inside(folder):
            request = prepare(options, model)
            with command_run(request) as run:
                result = export(request, run)
                report = write_report(build_report(result), request.options, run.progress)
        parts = list(getattr(result, "parts", {}))
        (folder / "report.pickle").write_bytes(pickle.dumps(report))
        (folder / "result.json").write_text(json.dumps(
            {"result": type(result).__name__, "parts": parts, "code": report.exit_code}))

    folder = cache.folder(f"hf-export-{name}-{target}", build)
    facts = json.loads((folder / "result.json").read_text())
    return FolderExport(folder, facts["result"], facts["parts"], facts["code"])
