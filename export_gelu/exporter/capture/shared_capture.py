"""One capture for the graphs of a comparison (`--compare-forms`, `--gelu auto`): every GELU
form exports the same model on the same inputs, so a TorchScript model's capture (its
TS2EPConverter conversion, then torch.export at the example's sizes) is the same call each
time. The first form captures and takes the program; the program is saved (torch.export.save,
in memory) before the fx passes edit it, and every later form that makes the same call loads
its own (about 0.15 s against 0.75 s for the bundled BERT and GPT-2). An nn.Module is captured
per form as before: its torch.export costs what loading the program does.

Why not `copy.deepcopy`: a deep copy shares the program's fake values (every node's
`meta["val"]`: FakeTensors and SymInts are copied as themselves), hence their FakeTensorMode
and ShapeEnv, with the original and with every other copy. The dynamo exporter retraces the
program in that mode, and what one form's export leaves in it changes the next form's graph: a
TorchScript BERT's second form failed with `PendingUnbackedSymbolNotFound` on the unbacked
symbols the first form's export had left pending, and was exported after
`run_decompositions` (83 nodes against 73). A loaded program has its own mode and ShapeEnv;
its graphs are the fresh capture's, byte for byte (docs/testing.md).

Shared only where the call would be identical: the same precision, inputs equal in structure,
shape, dtype and values, the same call plan, and no ranged dims (a dynamic capture adds the
axes torch ties to the plan, which a loaded program would not do). A program that cannot be
saved or loaded is captured again, as before.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from export_gelu.exporter.inputs.call_plan import CallPlan
    from export_gelu.exporter.loading.loaded import Captured
    from export_gelu.exporter.torch_values import PyTree


#: torch's loggers that report on a program being saved or loaded (e.g. "Symbol u1 did not
#: appear in the graph that was deserialized", for an unbacked symbol a runtime assert names)
_SERDE_LOGGERS = ("torch._export.serde.serialize", "torch.export")


@contextlib.contextmanager
def _quiet_serde() -> Iterator[None]:
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


def _same_values(a: PyTree, b: PyTree) -> bool:
    """Whether two inputs are the same call's: same structure, tensors equal in shape, dtype
    and values, other leaves equal."""
    import torch
    from torch.utils import _pytree

    leaves_a, spec_a = _pytree.tree_flatten(a)
    leaves_b, spec_b = _pytree.tree_flatten(b)
    if spec_a != spec_b:
        return False
    for x, y in zip(leaves_a, leaves_b):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)) \
                    or x.shape != y.shape or x.dtype != y.dtype or not torch.equal(x, y):
                return False
        elif type(x) is not type(y) or not _equal(x, y):
            return False
    return True


def _equal(x: object, y: object) -> bool:
    try:
        return bool(x == y)
    except Exception:  # noqa: BLE001 - no single truth value (an array): not the same call
        return False


@dataclass
class _Call:
    """One capture call and what it gave: the program saved, or why there was none."""

    precision: str
    args: tuple[PyTree, ...]
    plan: CallPlan | None
    saved: bytes | None
    extra: dict[str, object]  # export-gelu's own attributes of the program
    why_not: str | None

    def fits(self, args: tuple[PyTree, ...], precision: str, plan: CallPlan | None) -> bool:
        return precision == self.precision and plan == self.plan \
            and _same_values(args, self.args)


@dataclass
class SharedCaptures:
    """The captures of one comparison's graphs (each form's loaded model holds the same one)."""

    calls: list[_Call] = field(default_factory=list)

    def capture(self, args: tuple[PyTree, ...], precision: str, plan: CallPlan | None,
                fresh: Callable[[], Captured]) -> Captured:
        """`fresh()`'s result for this call: the one made before for the same call, loaded
        afresh; else `fresh()`, remembered (saved before the caller edits it)."""
        for call in self.calls:
            if call.fits(args, precision, plan):
                if call.saved is None:
                    return None, call.why_not
                loaded = _load(call.saved, call.extra)
                if loaded is not None:
                    return loaded, None
                break  # could not be loaded: capture again, as before
        program, why_not = fresh()
        saved = _save(program) if program is not None else None
        if program is None or saved is not None:
            extra = {k: copy.copy(v) for k, v in vars(program).items()
                     if k.startswith("export_gelu_")} if program is not None else {}
            self.calls.append(_Call(precision, args, plan, saved, extra, why_not))
        return program, why_not


def _save(program: torch.export.ExportedProgram) -> bytes | None:
    import torch

    buffer = io.BytesIO()
    try:
        with _quiet_serde():
            torch.export.save(program, buffer)
    except Exception:  # noqa: BLE001 - a program torch cannot save is captured per form
        return None
    return buffer.getvalue()


def _load(saved: bytes, extra: dict[str, object]) -> torch.export.ExportedProgram | None:
    import torch

    try:
        with _quiet_serde():
            program = torch.export.load(io.BytesIO(saved))
    except Exception:  # noqa: BLE001 - captured again instead
        return None
    vars(program).update({k: copy.copy(v) for k, v in extra.items()})
    return program
