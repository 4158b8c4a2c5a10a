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

    def bytes_done(self, done: int, total: int, what: str, started: float) -> None:
        """`what 3.2/16.0 GB, 850 MB/s, 15 s left` (started: time.perf_counter() at 0 bytes)."""
        if not self.enabled:
            return
        seconds = max(time.perf_counter() - started, 1e-6)
        rate = done / seconds
        left = (total - done) / rate if rate > 0 and total > done else 0.0
        self._show(f"{what} {done / 1e9:.1f}/{total / 1e9:.1f} GB, {rate / 1e6:.0f} MB/s, "
                   f"{left:.0f} s left")

    def byte_counter(self, total: int, what: str):  # -> Callable[[int], None]
        """A callback counting bytes as they are written, shown at most every 0.2 s."""
        started = time.perf_counter()
        state = {"done": 0, "shown": 0.0}

        def count(n: int) -> None:
            state["done"] += n
            now = time.perf_counter()
            if now - state["shown"] >= 0.2 or state["done"] >= total:
                state["shown"] = now
                self.bytes_done(state["done"], total, what, started)

        return count

    def done(self) -> None:
        if self.enabled:
            print("\r\x1b[K", file=sys.stderr, end="", flush=True)
