"""An independent copy of an ExportedProgram, for passes that rewrite it in place."""

from __future__ import annotations

import copy
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def copy_program(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """A deep copy of `program`, without torch's own deprecation noise.

    Copying a program re-creates its pytree specs, and torch 2.13 warns (FutureWarning,
    from inside `copyreg`) about its own `LeafSpec` check each time; the user can do
    nothing about it, so it is not printed.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        return copy.deepcopy(program)
