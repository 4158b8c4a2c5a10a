"""Independent copies of an ExportedProgram, for passes that rewrite it in place and for the
exports that follow one another (every GELU form of `--compare-forms`, calibration).

A copy is the program saved (`torch.export.save`, in memory) and loaded again: a loaded program
has its own fake mode and ShapeEnv. `copy.deepcopy` does not give it one: it copies every
node's fake value (`meta["val"]`: FakeTensors and SymInts) as itself, so every deep copy shares
the original's FakeTensorMode and ShapeEnv, and what one export leaves in them changes the next
one's graph. A program with unbacked symbols (a slice end read with `.item()`, a converted
TorchScript BERT) had its second form's dynamo export fail on the symbols the first left
pending (`PendingUnbackedSymbolNotFound`) and exported after `run_decompositions`: another
graph (docs/testing.md). Only a program torch cannot save or load is deep-copied.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: torch's loggers that report on a program being saved or loaded (e.g. "Symbol u1 did not
#: appear in the graph that was deserialized", for an unbacked symbol a runtime assert names)
_SERDE_LOGGERS = ("torch._export.serde.serialize", "torch.export")
#: export-gelu's own attributes of a program (capture.py), which saving does not keep
_OWN_PREFIX = "export_gelu_"


@contextlib.contextmanager
def _quiet_serde() -> Iterator[None]:
    """torch's saving and loading without its log lines and warnings (about torch's own
    internals: the user can do nothing about them)."""
    loggers = [logging.getLogger(n) for n in _SERDE_LOGGERS]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


@dataclass(frozen=True)
class SavedProgram:
    """A program saved in memory, and export-gelu's own attributes of it."""

    data: bytes
    own: dict[str, object]

    def load(self) -> torch.export.ExportedProgram | None:
        """A new program from the saved one (its own fake mode and ShapeEnv); None when torch
        cannot load it."""
        import torch

        try:
            with _quiet_serde():
                program = torch.export.load(io.BytesIO(self.data))
        except Exception:  # noqa: BLE001 - the caller falls back (a deep copy, a new capture)
            return None
        vars(program).update({k: copy.copy(v) for k, v in self.own.items()})
        return program


def save_program(program: torch.export.ExportedProgram) -> SavedProgram | None:
    """`program` saved in memory; None when torch cannot save it."""
    import torch

    buffer = io.BytesIO()
    try:
        with _quiet_serde():
            torch.export.save(program, buffer)
    except Exception:  # noqa: BLE001 - the caller falls back (a deep copy, a new capture)
        return None
    own = {k: copy.copy(v) for k, v in vars(program).items() if k.startswith(_OWN_PREFIX)}
    return SavedProgram(buffer.getvalue(), own)


def copy_program(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """A copy of `program` with its own fake mode and ShapeEnv (saved and loaded); a deep copy
    where torch cannot save or load it."""
    saved = save_program(program)
    loaded = saved.load() if saved is not None else None
    if loaded is not None:
        return loaded
    with warnings.catch_warnings():  # torch 2.13 warns about its own LeafSpec check
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        return copy.deepcopy(program)
