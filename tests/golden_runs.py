"""Golden runs: one export per scenario (model, format, flags) for every test, worker and
session that only reads what it wrote (docs/testing.md, "Golden runs").

`golden_run(example, fmt, *flags)` (the fixture, tests/conftest.py) runs
`export-gelu MODEL FLAGS -o model.onnx --report report.json` once, on the bundled example
`example` saved as `fmt`, with the tests' timing (tests/cli_runs.py), and keeps the folder in
`session_cache`; every later call with the same scenario reads that folder. A test that
changes or adds files copies `GoldenRun.onnx` first (`copy_to`): the folder is shared.

The run happens in the folder it writes (relative names), so the report names
`model.onnx` and `report.json`, not a path that differs by worker.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.cli_runs import run_cli
from tests.session_cache import SessionCache


@dataclass(frozen=True)
class GoldenRun:
    """What one shared run wrote: the folder, its exit code, stdout and stderr."""

    folder: Path
    code: int
    out: str
    err: str

    @property
    def onnx(self) -> Path:
        return self.folder / "model.onnx"

    def report(self) -> dict[str, Any]:
        """The JSON report (a fresh dict each call)."""
        return json.loads((self.folder / "report.json").read_text())

    def copy_to(self, folder: Path, name: str = "model.onnx") -> Path:
        """The ONNX file copied into `folder` as `name` (golden runs keep their weights inside
        the file: the bundled examples are small)."""
        folder.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copyfile(self.onnx, folder / name))


def scenario_name(example: str, fmt: str, flags: Sequence[str]) -> str:
    """The cache entry's name: readable, and unique per flags."""
    digest = hashlib.sha256("\0".join(flags).encode()).hexdigest()[:10]
    return f"golden-{example}-{fmt}-{digest}"


def golden_runs(saved_model: Callable[[str, str], Path], cache: SessionCache
                ) -> Callable[..., GoldenRun]:
    """golden_run(example, fmt, *flags) → the shared run of that scenario (module docstring)."""

    def build(example: str, fmt: str, flags: Sequence[str]) -> Callable[[Path], None]:
        def run(folder: Path) -> None:
            res = run_cli(saved_model(example, fmt), *flags, "-o", "model.onnx",
                          "--report", "report.json", cwd=folder)
            (folder / "result.json").write_text(json.dumps(
                {"code": res.code, "out": res.out, "err": res.err}))

        return run

    def get(example: str, fmt: str, *flags: str) -> GoldenRun:
        folder = cache.folder(scenario_name(example, fmt, flags), build(example, fmt, flags))
        result = json.loads((folder / "result.json").read_text())
        return GoldenRun(folder, result["code"], result["out"], result["err"])

    return get
