"""The types of what the exporter's rooms hand each other: torch's values under one name each.

Imported for annotations only (torch is imported where it runs, not at import time)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from collections import OrderedDict

    import torch

#: A value torch takes or gives as a pytree: a tensor, or tensors nested in tuples, lists,
#: dicts and a model's output objects, with plain constants among them. It is passed along,
#: or taken apart with isinstance and torch.utils._pytree; never read as one type.
PyTree: TypeAlias = object
#: A graph's example inputs: input name → tensor, in the graph's input order.
TensorFeed: TypeAlias = "OrderedDict[str, torch.Tensor]"
#: What torch.export's `dynamic_shapes` takes per input: axis → a `Dim` (or `Dim.AUTO`, a
#: hint torch keeps private), None for an input static in every axis.
AxisDims: TypeAlias = "dict[int, object] | None"
#: A JSON object read from a model file (config, preprocessor config, a program's JSON).
JsonObject: TypeAlias = "dict[str, object]"
