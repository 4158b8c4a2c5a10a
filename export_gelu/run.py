"""What every step of one command shares: the progress channel, the wall time of each step (the
report's `stage_seconds`), the notes the steps leave for the report, and the all-or-nothing
transaction over the files the run writes.

A command makes one `Run` and hands it to the steps that announce, time or note something:

    run = Run(progress)
    with run.transaction():
        with run.step("load"):
            source = load(request, run)

Nothing else lives here: what a step makes is its return value (results.py), never a field of
the run.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator

from export_gelu.atomic import all_or_nothing
from export_gelu.errors import OutOfMemory, out_of_memory
from export_gelu.notes import Note
from export_gelu.progress import Progress

#: What to try when a step runs out of memory.
OOM_HINT = ("try smaller --input shapes or --dynamic ranges, fewer --threads, or a machine "
            "with more memory")


class Run:
    """One command's progress, step clock, notes and output transaction."""

    def __init__(self, progress: Progress | None = None) -> None:
        self.progress = progress if progress is not None else Progress(enabled=False)
        #: wall seconds per step key, in the order the steps first ran
        self.seconds: dict[str, float] = {}
        #: what the steps found worth saying, in the order they said it
        self.notes: list[str] = []

    def part(self) -> Run:
        """A run for one part of this one (a graph of several, a GELU form): the same progress
        channel, notes and a clock of its own."""
        return Run(self.progress)

    def add_seconds(self, seconds: dict[str, float]) -> None:
        """Charge a part's step times (`part().seconds`) to this run's clock."""
        for key, spent in seconds.items():
            self.seconds[key] = self.seconds.get(key, 0.0) + spent

    def say(self, message: str) -> None:
        """Announce a step on the progress channel."""
        self.progress.step(message)

    def note(self, message: str, code: str) -> None:
        """A note for the report (`code`: what tools and tests match)."""
        self.notes.append(Note(message, code))

    def add_notes(self, notes: Iterable[str]) -> None:
        """Notes already made (notes.tagged), in order."""
        self.notes.extend(notes)

    @contextlib.contextmanager
    def step(self, key: str, *, name: str | None = None) -> Iterator[None]:
        """Time the block as step `key` (its wall seconds added to `seconds[key]` when it
        ends without raising). Running out of memory in it is exit 2 naming the step (`name`,
        default `key`) and what to try."""
        start = time.perf_counter()
        try:
            yield
        except Exception as exc:
            what = out_of_memory(exc)
            if what is None:
                raise
            raise OutOfMemory(f"out of memory in the {name or key} stage ({what}); "
                              f"{OOM_HINT}") from exc
        self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - start

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Run]:
        """All or nothing: when the block raises, every output it placed is removed again
        (atomic.py: all_or_nothing), the file it replaced included."""
        with all_or_nothing():
            yield self
