"""One program for several independent cases: for the tests whose point is a fresh process
(a package hidden by `sitecustomize`, a fresh interpreter's stderr) but not one process per
case. Each cold interpreter importing torch costs 4 to 8 CPU seconds; one program running
seven cases one after another costs that once.

`run_cases(cases)` starts `python -m tests.child_cases CASES RESULTS` (this file) and returns
each case's exit code, stdout and stderr by name, as `CliResult`s: a module- or
session-scoped fixture runs it, and each parametrized test asserts on its own case.

In the program, each case gets what a program of its own would give it:
- its own stdout and stderr, captured at the file descriptors (os.dup2), so what a C or C++
  library writes to fd 2 (ONNX Runtime's logger, torch's warnings) is the case's too;
- Python's warnings shown again (`warnings.catch_warnings()` per case resets the
  once-per-place registries), so a warning shown in an earlier case is shown in this one;
- the exit code the console script would give (`sys.exit(main(argv))`: `SystemExit`'s code;
  an exception that escapes prints its traceback on stderr and gives 1, as Python does).
What the program imports first (`import export_gelu.cli` and `preload`) is the case named
`STARTUP`, with its own stdout and stderr: a test that reads a case's stderr as a whole
program's reads `startup.err + case.err` (`stderr_of`).
What a case cannot get here is a fresh import state: a module imported by an earlier case
stays imported (as with `run_cli` in the test's process); cases that depend on that need a
program of their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.cli_runs import CliResult, with_test_timing

#: The pseudo-case holding what the program's imports printed.
STARTUP = "(startup)"


@dataclass(frozen=True)
class Case:
    """`argv`: `export-gelu ARGV` as the console script runs it (with the tests' timing,
    tests/cli_runs.py); or `code`: Python source executed as a script's body. `cwd`: where it
    runs (default: the program's own working directory)."""

    name: str
    argv: Sequence[str] = ()
    code: str | None = None
    cwd: str | None = None


def run_cases(cases: Sequence[Case], *, env: Mapping[str, str] | None = None,
              cwd: str | os.PathLike | None = None, preload: Sequence[str] = (),
              timeout: float = 900) -> dict[str, CliResult]:
    """Run `cases` one after another in one new Python program (`env` its environment,
    `cwd` its working directory; the repository root by default), after importing
    `export_gelu.cli` and the modules `preload` names: each case's result by name, and the
    imports' as `STARTUP`."""
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="child-cases-") as folder:
        spec, results = Path(folder) / "cases.json", Path(folder) / "results.json"
        spec.write_text(json.dumps({"preload": list(preload),
                                    "cases": [asdict(c) for c in cases]}))
        environ = dict(os.environ if env is None else env)
        environ["PYTHONPATH"] = os.pathsep.join(
            filter(None, [environ.get("PYTHONPATH"), str(root)]))
        proc = subprocess.run([sys.executable, "-m", "tests.child_cases", str(spec),
                               str(results)], cwd=cwd or root, env=environ,
                              capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0 and results.is_file(), \
            f"the cases' program failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
        got = json.loads(results.read_text())
    return {name: CliResult(r["code"], r["out"], r["err"]) for name, r in got.items()}


def stderr_of(results: Mapping[str, CliResult], name: str) -> str:
    """What a program of its own running case `name` would have printed on stderr: the
    imports' output, then the case's."""
    return results[STARTUP].err + results[name].err


# ---------------------------------------------------------------- in the program


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _captured(run: Callable[[], int]) -> dict[str, object]:
    """Run `run` with fds 1 and 2 (and sys.stdout/stderr over them) sent to files of its own,
    warnings shown afresh: its exit code and what it wrote."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            with warnings.catch_warnings():
                try:
                    code = run()
                except SystemExit as exc:
                    code = _exit_code(exc)
                except BaseException:  # noqa: BLE001 - as Python reports an escaped one
                    traceback.print_exc()
                    code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        texts = []
        for f in (out, err):
            f.seek(0)
            texts.append(f.read().decode("utf-8", "replace"))
    return {"code": code, "out": texts[0], "err": texts[1]}


def _run_case(case: dict) -> int:
    here = os.getcwd()
    if case["cwd"]:
        os.chdir(case["cwd"])
    try:
        if case["code"] is not None:
            exec(compile(case["code"], f"<case {case['name']}>", "exec"),  # noqa: S102
                 {"__name__": "__main__"})
            return 0
        from export_gelu.cli import main

        return main([str(a) for a in with_test_timing(case["argv"])])
    finally:
        os.chdir(here)


def _import_all(names: Sequence[str]) -> int:
    import importlib

    for name in ["export_gelu.cli", *names]:
        importlib.import_module(name)
    return 0


def _main(spec_path: str, results_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    results = {STARTUP: _captured(lambda: _import_all(spec["preload"]))}
    for case in spec["cases"]:
        results[case["name"]] = _captured(lambda case=case: _run_case(case))
    Path(results_path).write_text(json.dumps(results))


if __name__ == "__main__":
    _main(*sys.argv[1:])
