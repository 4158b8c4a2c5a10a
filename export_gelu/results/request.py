"""What a run was asked, and what it loaded.

- `Request`: what the run was asked, its options checked (exit 2/3 before any work);
- `Source`: what was loaded, one of four kinds (`ModuleSource`, `ProgramSource`,
  `OnnxSource`, `GraphsSource`), told apart by `kind` (and by isinstance).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Literal, TypeVar

from export_gelu.exporter.loading.loaded import LoadedModel
from export_gelu.onnx_file import ParsedFiles
from export_gelu.options import Checked, RunOptions
from export_gelu.targets import TargetProfile

#: The options record of one command (ExportOptions, VerifyOptions, FormsOptions, ...).
OptionsT_co = TypeVar("OptionsT_co", bound=RunOptions, covariant=True)


@dataclass(frozen=True)
class Request(Generic[OptionsT_co]):
    """One run's options (checked: `checked` holds what checking resolved), the model it
    reads, verify's DEPLOYED, a model handed over in memory (None: read `model`), and the
    ONNX files the run has parsed (each once: onnx_file.py), from checking the options on."""

    options: OptionsT_co
    checked: Checked
    model: Path
    deployed: Path | None = None
    in_memory: LoadedModel | None = None
    parsed: ParsedFiles = field(default_factory=ParsedFiles, compare=False, repr=False)

    @property
    def profile(self) -> TargetProfile:
        """The target profile the options resolved (export and verify --bundle)."""
        profile: TargetProfile = self.checked.profile
        return profile


# -- what was loaded --------------------------------------------------------------------------

@dataclass(frozen=True)
class ModuleSource:
    """A PyTorch module to run and export: a pickled or TorchScript module, a state_dict
    with its factory's module, a model handed over in memory."""

    loaded: LoadedModel
    kind: Literal["module"] = "module"


@dataclass(frozen=True)
class ProgramSource:
    """A torch.export ExportedProgram (its module runs as the reference)."""

    loaded: LoadedModel
    kind: Literal["program"] = "program"


@dataclass(frozen=True)
class OnnxSource:
    """An ONNX file: exported as it is (its GELUs found by the ONNX passes alone)."""

    loaded: LoadedModel
    kind: Literal["onnx"] = "onnx"


@dataclass(frozen=True)
class GraphsSource:
    """A Hugging Face folder whose task exports several graphs (an encoder-decoder's
    encoder_model, decoder_model and decoder_with_past_model): each one a LoadedModel."""

    loaded: LoadedModel
    kind: Literal["graphs"] = "graphs"

    @property
    def graphs(self) -> list[LoadedModel]:
        return self.loaded.graphs


#: What `steps.load.load` returns.
Source = ModuleSource | ProgramSource | OnnxSource | GraphsSource
#: A source with one graph to make: what every command but a several-graph export takes.
OneGraphSource = ModuleSource | ProgramSource | OnnxSource


def source_of(loaded: LoadedModel) -> Source:
    """The kind of source `loaded` is."""
    if loaded.graphs:
        return GraphsSource(loaded)
    if loaded.is_onnx:
        return OnnxSource(loaded)
    if loaded.exported is not None:
        return ProgramSource(loaded)
    return ModuleSource(loaded)


def one_graph_source(loaded: LoadedModel) -> OneGraphSource:
    """The kind of source `loaded` is, known to be one graph (a form's copy of a model that
    was loaded as one, a graph of a folder)."""
    source = source_of(loaded)
    if isinstance(source, GraphsSource):
        raise TypeError(f"{loaded.path}: several graphs where one was expected")
    return source
