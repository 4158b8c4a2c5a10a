"""One capture for the graphs of a comparison (`--compare-forms`, `--gelu auto`, the chosen
form's export and every form of a `--bundle`): every GELU form exports the same model on the
same inputs, so a TorchScript model's capture (its TS2EPConverter conversion, then
torch.export at the example's sizes) is the same call each time. The first form captures and
takes the program; the program is saved (torch.export.save, in memory) before the fx passes
edit it, and every later form that makes the same call loads its own (about 0.15 s against
0.75 s for the bundled BERT and GPT-2). An nn.Module is captured per form as before: its
torch.export costs what loading the program does.

Each later form's program is a loaded copy, not a deep copy, for the reason program_copy.py
gives (a deep copy shares the fake mode and ShapeEnv, and a TorchScript BERT's second form then
exported another graph); its graphs are the fresh capture's, byte for byte.

Shared only where the call would be identical: the same precision, inputs equal in structure,
shape, dtype and values, the same call plan, and no ranged dims (a dynamic capture adds the
axes torch ties to the plan, which a loaded program would not do). A program that cannot be
saved or loaded is captured again, as before, and so is one whose weights exceed
COPY_LIMIT_BYTES (saving/weight_size.py): its saved copy, and each program loaded from it,
would hold the weights once more beside the model's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from export_gelu.exporter.capture.program_copy import SavedProgram, save_program
from export_gelu.exporter.saving.weight_size import COPY_LIMIT_BYTES, tensors_bytes

if TYPE_CHECKING:
    from export_gelu.exporter.inputs.call_plan import CallPlan
    from export_gelu.exporter.loading.loaded import Captured
    from export_gelu.exporter.torch_values import PyTree


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
    saved: SavedProgram | None
    why_not: str | None

    def fits(self, args: tuple[PyTree, ...], precision: str, plan: CallPlan | None) -> bool:
        return precision == self.precision and plan == self.plan \
            and _same_values(args, self.args)


@dataclass
class SharedCaptures:
    """The captures of one comparison's graphs (each form's loaded model holds the same one)."""

    calls: list[_Call] = field(default_factory=list)
    #: a program with more weights is captured per form, as before
    limit_bytes: int = COPY_LIMIT_BYTES

    def capture(self, args: tuple[PyTree, ...], precision: str, plan: CallPlan | None,
                fresh: Callable[[], Captured], loading: Callable[[], None]) -> Captured:
        """`fresh()`'s result for this call: the one made before for the same call, loaded
        afresh (`loading()` called first); else `fresh()`, remembered (saved before the
        caller edits it)."""
        for call in self.calls:
            if call.fits(args, precision, plan):
                if call.saved is None:
                    return None, call.why_not
                loading()
                loaded = call.saved.load()
                if loaded is not None:
                    return loaded, None
                break  # could not be loaded: capture again, as before
        program, why_not = fresh()
        if program is not None and tensors_bytes(
                (*program.state_dict.values(), *program.constants.values())) > self.limit_bytes:
            return program, why_not  # too big to hold a copy of: the next form captures too
        saved = save_program(program) if program is not None else None
        if program is None or saved is not None:
            self.calls.append(_Call(precision, args, plan, saved, why_not))
        return program, why_not
