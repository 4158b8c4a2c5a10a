"""Progress for long steps, on stderr: on a terminal one line redrawn in place (with counters);
in a pipe (CI, a `make` log) one plain line per step as it starts; nothing with `--quiet` (or
EXPORT_GELU_QUIET=1 in the environment)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

from export_gelu.shown import shown as one_name

#: The environment variable that silences progress, as `--quiet` does.
QUIET_ENV = "EXPORT_GELU_QUIET"


class Progress:
    """Announce steps on stderr: redrawn in place on a terminal, one plain line per step in a
    pipe, nothing when disabled (`enabled=False`, `--quiet`, EXPORT_GELU_QUIET=1)."""

    def __init__(self, enabled: bool | None = None, quiet: bool = False) -> None:
        """`enabled`: None tells a terminal from a pipe by stderr (and EXPORT_GELU_QUIET=1 in
        the environment silences it); True draws as on a terminal; False (or `quiet`) says
        nothing."""
        if quiet or (enabled is None and os.environ.get(QUIET_ENV, "") not in ("", "0")):
            enabled = False
        self.enabled = enabled is not False
        self.terminal = enabled is True or (enabled is None and sys.stderr.isatty())
        self._start = time.perf_counter()
        self._last = ""

    def _show(self, text: str) -> None:
        if self.enabled and self.terminal:
            elapsed = time.perf_counter() - self._start
            print(f"\r\x1b[K… {text}  [{elapsed:.0f}s]", file=sys.stderr, end="", flush=True)

    def step(self, message: str) -> None:
        """A step starts: redrawn on a terminal; in a pipe one line `… message [Ns]` (a name
        in it shown by shown.py's rule: one line, no control character)."""
        message = one_name(message, 300)
        if self.enabled and not self.terminal and message != self._last:
            elapsed = time.perf_counter() - self._start
            print(f"… {message}  [{elapsed:.0f}s]", file=sys.stderr, flush=True)
        self._last = message
        self._show(message)

    def update(self, done: int, total: int, what: str = "timing") -> None:
        self._show(f"{what} {done}/{total}")

    def bytes_done(self, done: int, total: int, what: str, started: float) -> None:
        """`what 3.2/16.0 GB, 850 MB/s, 15 s left` (started: time.perf_counter() at 0 bytes)."""
        if not self.terminal:
            return
        seconds = max(time.perf_counter() - started, 1e-6)
        rate = done / seconds
        left = (total - done) / rate if rate > 0 and total > done else 0.0
        self._show(f"{what} {done / 1e9:.1f}/{total / 1e9:.1f} GB, {rate / 1e6:.0f} MB/s, "
                   f"{left:.0f} s left")

    def byte_counter(self, total: int, what: str) -> Callable[[int], None]:
        """A callback counting bytes as they are written, shown at most every 0.2 s."""
        started = time.perf_counter()
        done, shown = 0, 0.0

        def count(n: int) -> None:
            nonlocal done, shown
            done += n
            now = time.perf_counter()
            if now - shown >= 0.2 or done >= total:
                shown = now
                self.bytes_done(done, total, what, started)

        return count

    def done(self) -> None:
        if self.terminal:
            print("\r\x1b[K", file=sys.stderr, end="", flush=True)
