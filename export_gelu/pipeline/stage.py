"""A stage: a name, what it tells the user, and a function of the run's state. Stages run in
order under one clock (the report's `stage_seconds`) and one progress channel."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from export_gelu.atomic import all_or_nothing
from export_gelu.errors import OutOfMemory, out_of_memory


class Clock:
    """Wall seconds per stage: `lap(key)` charges the time since the previous lap to `key`."""

    def __init__(self) -> None:
        self.stages: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, key: str | None) -> None:
        now = time.perf_counter()
        if key is not None:
            self.stages[key] = self.stages.get(key, 0.0) + now - self._last
        self._last = now


@dataclass(frozen=True)
class StageIO:
    """The state fields a stage function reads and writes (RunState's names), as it declares
    them with `stage_io`; tests/pipeline/test_stage_dataflow.py holds the declaration to its
    code."""

    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()


F = TypeVar("F", bound=Callable[..., Any])


def stage_io(*, reads: Sequence[str] = (), writes: Sequence[str] = ()) -> Callable[[F], F]:
    """Declare what a stage function reads from the run's state and what it writes there."""
    def mark(fn: F) -> F:
        fn.__dict__["stage_io"] = StageIO(tuple(sorted(reads)), tuple(sorted(writes)))
        return fn
    return mark


#: The state a stage runs on (pipeline/state.py: the RunState of its command).
S = TypeVar("S")


def _always(_state: object) -> bool:
    return True


@dataclass(frozen=True)
class Stage(Generic[S]):
    """One named step of a run, on the state `S` of the command(s) it serves.

    `run(state)` does the work; `applies(state)` says whether it runs at all for this state
    (a skipped stage is not timed); `timed_as` is the report's `stage_seconds` key it is
    charged to ("": its own name; None: not timed, e.g. writing the report itself)."""

    name: str
    run: Callable[[S], None]
    applies: Callable[[S], bool] = _always
    timed_as: str | None = ""

    @property
    def io(self) -> StageIO | None:
        """What the stage's function declares it reads and writes (None: undeclared)."""
        found: StageIO | None = getattr(inspect.unwrap(self.run), "stage_io", None)
        return found

    @property
    def clock_key(self) -> str | None:
        return self.name if self.timed_as == "" else self.timed_as


#: What to try when a stage runs out of memory.
OOM_HINT = ("try smaller --input shapes or --dynamic ranges, fewer --threads, or a machine "
            "with more memory")


class _Timed(Protocol):
    """What the stage runner needs of a state: its clock."""

    @property
    def clock(self) -> Clock: ...


T = TypeVar("T", bound=_Timed)


def run_stages(stages: Sequence[Stage[T]], state: T) -> T:
    """Run `stages` in order on `state`, each charged to the state's clock; return `state`.
    All or nothing: when a stage raises, every output the run placed is removed again
    (atomic.py: all_or_nothing); running out of memory is exit 2 naming the stage."""
    with all_or_nothing():
        for stage in stages:
            if not stage.applies(state):
                continue
            _run_one(stage, state)
            state.clock.lap(stage.clock_key)
    return state


def _run_one(stage: Stage[T], state: T) -> None:
    try:
        stage.run(state)
    except Exception as exc:
        what = out_of_memory(exc)
        if what is None:
            raise
        raise OutOfMemory(f"out of memory in the {stage.name} stage ({what}); "
                          f"{OOM_HINT}") from exc
