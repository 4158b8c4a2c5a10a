"""Python code run in the test's own process as `python -c CODE` or `python FILE` would run it,
for the docs' runnable blocks (tests/docs_runner.py): a fresh `__main__` module, `sys.argv`
and `sys.path[0]` as the interpreter sets them, the folder and environment given, stdout and
stderr written where the caller says (one stream for `2>&1`), the exit code an interpreter
would end with (an uncaught exception: its traceback on stderr, 1; `SystemExit`: its code).

That saves a fresh interpreter importing torch (about 4-5 CPU seconds) per `python -c` line
and Python block. What a program would start afresh, the run must not leave behind for later
tests, so everything it can change is put back after it: the whole of `os.environ`, the
current folder, `sys.argv`, `sys.path`, `sys.modules["__main__"]`, the modules imported from
the run's folder, the warnings filters (a warning the code causes is printed on its stderr,
as a program prints it), the handlers, levels and switches of the loggers that existed
before, and the random states of `random`, numpy and torch and torch's grad mode and default
dtype. Modules of installed libraries it imported stay imported, as another test's imports
do. What needs a fresh interpreter (an import-time behaviour, the console script) stays a
program: tests/docs_runner.py decides which.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import random
import sys
import traceback
import types
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO


def _show_on_stderr(message: Warning | str, category: type[Warning], filename: str,
                    lineno: int, file: TextIO | None = None, line: str | None = None) -> None:
    """Print a warning as a program does: on (the redirected) stderr, at the time it is shown."""
    (file or sys.stderr).write(warnings.formatwarning(message, category, filename, lineno, line))


@contextlib.contextmanager
def _environment_kept() -> Iterator[None]:
    """os.environ as a whole and the current folder, put back after (the code may set both)."""
    saved, here = dict(os.environ), os.getcwd()
    try:
        yield
    finally:
        os.chdir(here)
        for key in [k for k in os.environ if k not in saved]:
            del os.environ[key]
        for key, value in saved.items():
            if os.environ.get(key) != value:
                os.environ[key] = value


@contextlib.contextmanager
def _logging_kept() -> Iterator[None]:
    """The loggers that exist now keep their handlers, level and switches; `logging.disable`'s
    level too. Loggers made during the run belong to libraries it imported: left as made."""
    manager = logging.Logger.manager
    loggers = [logging.root, *(lg for lg in list(manager.loggerDict.values())
                               if isinstance(lg, logging.Logger))]
    saved = [(lg, list(lg.handlers), lg.level, lg.propagate, lg.disabled) for lg in loggers]
    disabled = manager.disable
    try:
        yield
    finally:
        for lg, handlers, level, propagate, off in saved:
            lg.handlers[:] = handlers
            lg.setLevel(level)
            lg.propagate, lg.disabled = propagate, off
        logging.disable(disabled)


@contextlib.contextmanager
def _random_kept() -> Iterator[None]:
    """The random states of random, numpy and torch (when imported), torch's grad mode and
    default dtype: a block's `torch.manual_seed(0)` does not reseed the tests after it."""
    state = random.getstate()
    np = sys.modules.get("numpy")
    np_state = np.random.get_state() if np is not None else None
    torch: Any = sys.modules.get("torch")
    torch_state = (torch.random.get_rng_state(), torch.is_grad_enabled(),
                   torch.get_default_dtype()) if torch is not None else None
    try:
        yield
    finally:
        random.setstate(state)
        if np is not None:
            np.random.set_state(np_state)
        if torch is not None and torch_state is not None:
            torch.random.set_rng_state(torch_state[0])
            torch.set_grad_enabled(torch_state[1])
            torch.set_default_dtype(torch_state[2])


@contextlib.contextmanager
def _interpreter_kept(folder: Path) -> Iterator[None]:
    """sys.argv, sys.path and `__main__` put back; modules imported from `folder` forgotten
    (a later run's `import helper` must find its own folder's file)."""
    argv, path, main = list(sys.argv), list(sys.path), sys.modules.get("__main__")
    before = set(sys.modules)
    try:
        yield
    finally:
        sys.argv[:], sys.path[:] = argv, path
        if main is not None:
            sys.modules["__main__"] = main
        for name in set(sys.modules) - before:
            file = getattr(sys.modules[name], "__file__", None)
            if file and Path(file).resolve().is_relative_to(folder.resolve()):
                del sys.modules[name]


def _exit_code(exc: SystemExit) -> int:
    """The exit status an interpreter ends with on `exc`."""
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)
    return 1


def run_python(args: list[str], out: TextIO, err: TextIO, env: dict[str, str | None],
               cwd: Path) -> int:
    """`python ARGS` in this process: ARGS is `["-c", CODE]` or `[FILE]` (relative to
    `cwd`). `out`/`err` receive stdout/stderr (the same object: one stream in write order);
    `env` is set (None: unset) for the run. The exit code."""
    if args[0] == "-c":
        source, filename, path0 = args[1], "<string>", cwd
    else:
        script = (cwd / args[0]).resolve()
        source, filename, path0 = script.read_text(encoding="utf-8"), str(script), script.parent
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    if filename != "<string>":
        main.__file__ = filename
    with _environment_kept(), _logging_kept(), _random_kept(), _interpreter_kept(cwd), \
            warnings.catch_warnings(), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        for key, value in env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        os.chdir(cwd)
        warnings.showwarning = _show_on_stderr
        sys.argv[:] = ["-c", *args[2:]] if args[0] == "-c" else args
        sys.path.insert(0, str(path0))
        sys.modules["__main__"] = main
        try:
            exec(compile(source, filename, "exec"), main.__dict__)  # noqa: S102 - the docs' code
        except SystemExit as exc:
            return _exit_code(exc)
        except Exception as exc:  # noqa: BLE001 - as the interpreter ends: traceback, exit 1
            traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next
                                      if exc.__traceback__ else None)
            return 1
        finally:
            sys.stdout.flush()
    return 0
