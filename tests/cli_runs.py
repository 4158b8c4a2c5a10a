"""How the tests run export-gelu: the command line in this process or as a program, and the
Python API, each timing one run without a warm-up unless the test asks for more.

A command that checks parity also times every runner (`--iterations 50 --warmup 5` by
default): over a few hundred runs in the tests that is minutes of CPU spent timing, when only
the latency tests read the times. So the tests' default is `TEST_TIMING`: a run the test
starts without `--iterations` or `--warmup` (CLI) or without `iterations=` or `warmup=` (API)
gets one timed run and no warm-up; the report still has its latency section, from one run. A
test that passes either flag or keyword keeps exactly what it passed (and the product's
default for the other), and so do calls given a whole `options=` record. The product itself
has no switch for this.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

#: The timing a test's run gets unless it asks for other (flag → value).
TEST_TIMING = {"--iterations": "1", "--warmup": "0"}
#: The commands that time their runs (the export is the command without a name).
_UNTIMED = ("inspect",)
#: The API functions that take `iterations=` and `warmup=`.
_TIMED_API = ("export", "verify", "compare_forms")


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def report(self, path: Path) -> dict:
        return json.loads(path.read_text())

    # the names of subprocess.CompletedProcess, for tests that ran the program before
    @property
    def returncode(self) -> int:
        return self.code

    @property
    def stdout(self) -> str:
        return self.out

    @property
    def stderr(self) -> str:
        return self.err


def _given(argv: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def with_test_timing(argv: Sequence[Any]) -> list[Any]:
    """`argv` with `TEST_TIMING` added after the command's name, unless the command times
    nothing, the test gave `--iterations` or `--warmup`, or it asks for help or the
    version. Arguments keep their type (a bytes path stays bytes)."""
    words = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in argv]
    if not words or words[0] in _UNTIMED or "--" in words or \
            any(w in ("-h", "--help", "--version") for w in words) or \
            any(_given(words, flag) for flag in TEST_TIMING):
        return list(argv)
    at = 1 if words[0] == "verify" else 0
    timing = [w for pair in TEST_TIMING.items() for w in pair]
    return [*argv[:at], *timing, *argv[at:]]


@contextlib.contextmanager
def _environment(env: Mapping[str, str | None] | None, cwd: str | os.PathLike | bytes | None
                 ) -> Iterator[None]:
    """os.environ with `env` set (None: unset), in `cwd`; both restored after."""
    saved = {k: os.environ.get(k) for k in env or {}}
    here = os.getcwd()
    try:
        for k, v in (env or {}).items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(here)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def in_process(out: TextIO, err: TextIO, env: Mapping[str, str | None] | None = None,
               cwd: str | os.PathLike | bytes | None = None) -> Iterator[None]:
    """Run a program's `main` here as it would run on its own: stdout written to `out`,
    stderr to `err` (the same object: one stream in write order, as `2>&1`), os.environ with
    `env` set (None: unset) and `cwd` entered; all restored after."""
    with _environment(env, cwd), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        yield


def run_cli_into(out: TextIO, err: TextIO, *argv: str | os.PathLike | bytes,
                 env: Mapping[str, str | None] | None = None,
                 cwd: str | os.PathLike | bytes | None = None) -> int:
    """`run_cli`, writing stdout to `out` and stderr to `err` (see `in_process`): the exit
    code."""
    from export_gelu.cli import main

    args = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a)
            for a in with_test_timing(argv)]
    with in_process(out, err, env, cwd):
        return main(args)


def run_cli(*argv: str | os.PathLike | bytes, env: Mapping[str, str | None] | None = None,
            cwd: str | os.PathLike | bytes | None = None) -> CliResult:
    """Run `export-gelu ARGV` in this process (the console script's code path: `main`), with
    the tests' timing (`with_test_timing`). Bytes arguments are decoded as Python decodes a
    program's arguments (os.fsdecode); `env` entries are set (None: unset) and `cwd` entered
    for the run only."""
    out, err = io.StringIO(), io.StringIO()
    code = run_cli_into(out, err, *argv, env=env, cwd=cwd)
    return CliResult(code, out.getvalue(), err.getvalue())


def cli_command(*argv: str | os.PathLike | bytes) -> list[str | bytes]:
    """The command line that runs `export-gelu ARGV` as a program (`python -m
    export_gelu.cli`), with the tests' timing: for the tests that need a process of its own
    (signals, a fresh interpreter, the console script's exit)."""
    args = [a if isinstance(a, bytes) else str(a) for a in with_test_timing(argv)]
    return [sys.executable, "-m", "export_gelu.cli", *args]


def _with_test_timing_keywords(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("options") is None and not {"iterations", "warmup"} & kwargs.keys():
            kwargs.update(iterations=int(TEST_TIMING["--iterations"]),
                          warmup=int(TEST_TIMING["--warmup"]))
        return func(*args, **kwargs)

    call.__test_timing__ = True  # type: ignore[attr-defined]
    return call


def time_api_calls_once() -> None:
    """Give `export_gelu.export`, `verify` and `compare_forms` the tests' timing (keywords
    `iterations=` and `warmup=` when a call gives neither, nor `options=`), however a test
    imports them: run before the test modules are imported (tests/conftest.py)."""
    import export_gelu
    from export_gelu import api

    for name in _TIMED_API:
        func = getattr(api, name)
        if not getattr(func, "__test_timing__", False):
            setattr(api, name, _with_test_timing_keywords(func))
        setattr(export_gelu, name, getattr(api, name))



@contextlib.contextmanager
def forgetting_imports(*folders: str | os.PathLike) -> Iterator[None]:
    """After the block, this process forgets what a run imported from `folders` (the user's
    scripts and modules: `--import`, `--model-factory`, a pickle's classes) and `sys.path` is
    as before, as when that run's program ended: the next run in this process imports them
    afresh, or cannot. Modules from anywhere else (torch, the package) stay."""
    roots = [Path(f).resolve() for f in folders]
    path = list(sys.path)
    before = set(sys.modules)
    try:
        yield
    finally:
        sys.path[:] = path
        for name in set(sys.modules) - before:
            file = getattr(sys.modules[name], "__file__", None)
            if file and any(Path(file).resolve().is_relative_to(r) for r in roots):
                del sys.modules[name]
        importlib.invalidate_caches()
