"""What one graph of a Hugging Face export is (hf/graphs.py, hf/seq2seq.py): its file, the
module around the loaded model that takes and returns plain tensors, its inputs, output names
and dynamic dims; and the helpers every graph's module shares.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from export_gelu.exporter.hf import inputs as hi

if TYPE_CHECKING:
    import torch

    from export_gelu.exporter.hf.probed_capture import ProbedCapture
    from export_gelu.exporter.torch_values import TensorFeed

#: Outputs no graph returns: the loss needs labels; hidden states and attentions are off.
_SKIPPED_OUTPUTS = {"loss", "hidden_states", "attentions", "cache", "past_key_values"}
#: Ranges of the generation graphs' dims: MIN:OPT:MAX (OPT is the example inputs' size).
BATCH_RANGE = (1, hi.BATCH, 8)
PAST = 8  # the example inputs' past length


@dataclass(frozen=True)
class GraphDim:
    """A named dynamic dim of a graph: its range and the input axes that carry it.
    `derived`: its size follows from other dims (total = past + new), so torch works it out.
    `checked`: parity runs at its MIN, OPT, an odd size and MAX (a one-graph task's dims)."""

    name: str
    min: int
    opt: int
    max: int
    axes: tuple[tuple[str, int], ...]
    derived: bool = False
    checked: bool = False


@dataclass
class GraphSpec:
    """One graph of an export: its file name, the module, its inputs, outputs and dims."""

    file_name: str
    module: torch.nn.Module
    inputs: TensorFeed
    output_names: list[str]
    dims: list[GraphDim] = field(default_factory=list)
    role: str = "model"  # model | encoder | decoder | decoder_with_past
    #: the program the dim probe captured with `dims`, for the capture step to take
    probed: ProbedCapture | None = None


def _param(name: str) -> str:
    return name.replace(".", "_")


ModuleT = TypeVar("ModuleT", bound="torch.nn.Module")


def positional_module(cls: type[ModuleT], names: list[str]) -> ModuleT:
    """An instance of `cls` (a module class made for one graph) whose forward(*tensors)
    declares one parameter per input name, so torch.export binds its dynamic shapes and the
    exporters name the graph's inputs."""
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(_param(n), inspect.Parameter.POSITIONAL_OR_KEYWORD)
               for n in names]
    inner = cls.forward

    def forward(self: torch.nn.Module, *tensors: torch.Tensor) -> object:
        return inner(self, *tensors)

    sig = inspect.Signature(params)
    forward.__signature__ = sig  # type: ignore[attr-defined]  # read by inspect.signature
    cls.forward = forward
    return cls()


def forward_params(model: torch.nn.Module) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def tensor_fields(output: object) -> list[str]:
    import torch

    items = output.items() if isinstance(output, Mapping) else []  # a ModelOutput
    return [k for k, v in items if isinstance(v, torch.Tensor) and k not in _SKIPPED_OUTPUTS]
