"""Progress lines for long steps: on a terminal only, quiet when stderr is not a TTY."""

from __future__ import annotations

import sys
import time


class Progress:
    """Announce steps and counters on stderr when it is a terminal; say nothing otherwise."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._start = time.perf_counter()

    def _show(self, text: str) -> None:
        if self.enabled:
            elapsed = time.perf_counter() - self._start
            print(f"\r\x1b[K… {text}  [{elapsed:.0f}s]", file=sys.stderr, end="", flush=True)

    def step(self, message: str) -> None:
        self._show(message)

    def update(self, done: int, total: int, what: str = "timing") -> None:
        self._show(f"{what} {done}/{total}")

    def done(self) -> None:
        if self.enabled:
            print("\r\x1b[K", file=sys.stderr, end="", flush=True)
