"""What differs between the torch releases export-gelu supports (2.6 to the newest; docs/
torch-versions.md), one function per difference, so the rest of the exporter is written once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.utils._pytree import TreeSpec


def tree_children(spec: TreeSpec) -> list[TreeSpec]:
    """A pytree TreeSpec's child specs: `children()` from torch 2.7 or so, the
    `children_specs` attribute before (torch 2.6 has only that)."""
    children = getattr(spec, "children", None)
    if callable(children):
        return list(children())
    return list(spec.children_specs)


#: Warnings torch 2.6 prints each time `ExportedProgram.module()` unlifts a program that holds
#: lifted tensor constants (later releases do not): noise about torch's own graph, nothing
#: the user can act on.
_UNLIFT_NOISE = (r"Attempted to insert a get_attr Node with no underlying reference",
                 r"Node .* does not reference an nn\.Module, nn\.Parameter, or buffer")


def ignore_unlift_noise() -> None:
    """Filter `_UNLIFT_NOISE` for the rest of the process (idempotent)."""
    import warnings

    for message in _UNLIFT_NOISE:
        warnings.filterwarnings("ignore", message=message, category=UserWarning)


def dynamo_export_options() -> dict[str, Any]:
    """Keywords for `torch.onnx.export(dynamo=True)` that make every supported torch write
    the same graph: torch 2.6 does not run onnxscript's optimizer unless asked (`optimize`
    defaults to False there, True later), and without it leaves `aten.split` as
    SplitToSequence/SequenceAt, which no TensorRT version parses."""
    import inspect

    import torch

    params = inspect.signature(torch.onnx.export).parameters
    return {"optimize": True} if "optimize" in params else {}
