"""SIGINT and SIGTERM on the command line: at any moment, one line and exit 130 or 143.

`handled_signals()` (entered on the first line of cli.main) installs the handlers before any
heavy import, in two phases:

- start-up (parsing flags, importing torch, onnx …): nothing has been written yet, so a
  signal prints the one line and ends the process at once (`os._exit`), without unwinding a
  half-imported library;
- work (from `work_begins()`, once the command's imports are done): a signal raises
  `Interrupted` (a KeyboardInterrupt), which unwinds through every `finally`, so staging
  folders are removed on the way out; the CLI prints the one line. Signals after the first
  are ignored while it unwinds. If the first lands where Python cannot raise it (a `__del__`,
  a weakref callback: "Exception ignored in …"), it is sent again until it unwinds the run.

Handlers exist only in the main thread; elsewhere (an embedding application) this does
nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from export_gelu.errors import Interrupted, interrupted_line

SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: Seconds before a signal swallowed by a `__del__` or callback is sent again.
RESEND_AFTER = 0.05


@dataclass
class _State:
    working: bool = False
    entered: bool = False  # inside handled_signals
    program: bool = False  # this process is the command line (not a library caller)
    previous: dict[int, Any] = field(default_factory=dict)  # the handlers we replaced
    signum: int | None = None  # the first signal received
    lost: bool = False  # its Interrupted was swallowed where Python cannot raise


_STATE: _State | None = None


def _exit_now(signum: int, _frame: object) -> None:
    """Start-up: nothing written yet; one line and exit, whatever is half-imported."""
    with contextlib.suppress(OSError):
        os.write(2, (interrupted_line(signum) + "\n").encode())
    os._exit(128 + signum)


def _raise_interrupted(signum: int, _frame: object) -> None:
    state = _STATE
    if state is None:
        raise Interrupted(signum)
    if state.signum is not None and not state.lost:
        return  # the first signal is unwinding the run: later ones wait for it
    state.signum = state.signum or signum
    state.lost = False
    raise Interrupted(state.signum)


def _on_unraisable(previous: Callable[[sys.UnraisableHookArgs], object]
                   ) -> Callable[[sys.UnraisableHookArgs], None]:
    """An unraisablehook that re-sends a signal whose Interrupted was swallowed, quietly."""

    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        state = _STATE
        if isinstance(unraisable.exc_value, Interrupted) and state is not None:
            state.lost = True
            timer = threading.Timer(RESEND_AFTER, os.kill, (os.getpid(), state.signum))
            timer.daemon = True
            timer.start()
            return
        previous(unraisable)

    return hook


def install_startup_handlers(program: bool = False) -> None:
    """Start-up phase handlers (one line, exit at once), as early as possible: cli.py calls
    this on its first line when it is the program being run (`program`), so that a signal
    during its own imports is already one line. Idempotent; `handled_signals` adopts it."""
    global _STATE
    if threading.current_thread() is not threading.main_thread() or _STATE is not None:
        return
    _STATE = _State(program=program)
    # a signal ignored when we started (`cmd &` in a script, nohup) stays ignored
    _STATE.previous = {s: signal.signal(s, _exit_now) for s in SIGNALS
                       if signal.getsignal(s) is not signal.SIG_IGN}


@contextlib.contextmanager
def handled_signals() -> Iterator[None]:
    """SIGINT/SIGTERM end the run with one line (start-up phase until `work_begins`);
    the previous handlers and unraisablehook are restored on the way out."""
    global _STATE
    if threading.current_thread() is not threading.main_thread() or \
            (_STATE is not None and _STATE.entered):
        yield
        return
    install_startup_handlers()
    state = _STATE
    assert state is not None
    state.entered = True
    old_hook = sys.unraisablehook
    sys.unraisablehook = _on_unraisable(old_hook)
    try:
        yield
    finally:
        for sig, handler in state.previous.items():
            # the program is ending: a late signal (a burst of Ctrl-C, one during interpreter
            # shutdown) must not print a traceback after the one line; a library caller gets
            # its handlers back
            signal.signal(sig, signal.SIG_IGN if state.program else handler)
        sys.unraisablehook = old_hook
        _STATE = None


def work_begins() -> None:
    """From here a signal unwinds the run (removing what it staged) instead of exiting."""
    if _STATE is None or _STATE.working:
        return
    _STATE.working = True
    for sig in SIGNALS:
        if signal.getsignal(sig) is _exit_now:
            signal.signal(sig, _raise_interrupted)
