"""Progress lines for long steps: on a terminal only, quiet when stderr is not a TTY."""

from __future__ import annotations

import sys
import time


class Progress:
    """Announce steps and counters on stderr when it is a terminal."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._start = time.perf_counter()

    def step(self, message: str) -> None:
        if self.enabled:
            print(f"\r\x1b[K… {message}", file=sys.stderr, end="", flush=True)

    def update(self, done: int, total: int) -> None:
        if self.enabled:
            print(f"\r\x1b[K… timing {done}/{total}", file=sys.stderr, end="", flush=True)

    def done(self) -> None:
        if self.enabled:
            print("\r\x1b[K", file=sys.stderr, end="", flush=True)
