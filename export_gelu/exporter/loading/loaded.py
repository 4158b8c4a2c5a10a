"""A loaded model: the record every loader returns (the module, program or ONNX file to export, and
what it carries), and the one-line form of a loader's error."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from export_gelu.exporter.model_files.detect import ModelFormat

if TYPE_CHECKING:
    import torch

    from export_gelu.exporter.hf.folder import FolderModel
    from export_gelu.exporter.hf.graph_spec import GraphDim
    from export_gelu.exporter.hf.probed_capture import ProbedCapture
    from export_gelu.exporter.inputs.call_plan import CallPlan
    from export_gelu.exporter.torch_values import PyTree

#: A capture's result: the program, or None and why not.
Captured = tuple["torch.export.ExportedProgram | None", "str | None"]


class FormCaptures(Protocol):
    """The captures the forms of one comparison share: capture/shared_capture.py's
    SharedCaptures (named by what it does here: loading sits below capture)."""

    def capture(self, args: tuple[PyTree, ...], precision: str, plan: CallPlan | None,
                fresh: Callable[[], Captured], loading: Callable[[], None]) -> Captured:
        """`fresh()`'s result for this call, made once per call (`loading()` announces a
        later call's copy)."""
        ...


@dataclass
class LoadedModel:
    """A loaded model: exactly one of `exported`, `module` or `onnx_path` is the main artifact."""

    path: Path
    format: ModelFormat
    module: torch.nn.Module | None = None  # a torch.jit.ScriptModule too
    exported: torch.export.ExportedProgram | None = None
    onnx_path: Path | None = None
    example_inputs: tuple[torch.Tensor, ...] | None = None
    input_names: list[str] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)  # the model's own, when it has them
    notes: list[str] = field(default_factory=list)
    data_files: list[Path] = field(default_factory=list)  # an ONNX input's external data
    trusted: bool = False  # loaded with --trust-model: its code was not checked
    # -- a Hugging Face folder (hf/folder.py, hf/graphs.py) ---------------------------------
    task: str = ""  # the task it is exported for (optimum's name)
    dims: list[GraphDim] = field(default_factory=list)  # its dims
    file_name: str = ""  # the graph's file in a multi-graph output folder
    graphs: list[LoadedModel] = field(default_factory=list)  # the graphs a folder exports
    generation: FolderModel | None = None  # for the greedy-decode check
    #: keyword arguments that are no tensors (use_cache=False, a mode string), passed on
    #: every call as given: constants of the call, as torch.export keeps them
    call_constants: tuple[tuple[str, PyTree], ...] = ()
    #: a folder graph's program as its dim probe captured it: the capture step takes it
    #: (once) where it would make the same call (hf/probed_capture.py)
    probed: ProbedCapture | None = None
    #: a `--compare-forms` / `--gelu auto` form's: the captures a TorchScript model's forms
    #: share (capture/shared_capture.py; steps/forms.py hands each form the same one)
    captures: FormCaptures | None = None

    @property
    def is_onnx(self) -> bool:
        return self.format is ModelFormat.ONNX

    def reference_module(self) -> torch.nn.Module | None:
        """The original model as a callable module (before any pass), for parity checks."""
        if self.exported is not None:
            return self.exported.module()
        return self.module


def first_line(exc: BaseException, limit: int = 200) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:limit]
