"""A model handed over in memory (the Python API): an `nn.Module` or an `ExportedProgram`,
with the example inputs it is called on, as a LoadedModel the export stages take.

It has no file: the output must be named (`output=`), no device bundle can point back at it,
and the report names it `<in memory: ClassName>`. Its example inputs are `args` (in
`forward()`'s order) and `kwargs` (by parameter name): tensors, and keyword arguments that
are no tensors (`use_cache=False`, an int, a string, None) kept as constants of every call;
an ExportedProgram without them uses the example inputs it was exported with.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from export_gelu.errors import BadInputError
from export_gelu.exporter.hf.cache import cache_configs
from export_gelu.exporter.loading.loaded import LoadedModel
from export_gelu.exporter.loading.torch_files import nonfinite_weights
from export_gelu.exporter.model_files.detect import ModelFormat
from export_gelu.notes import Note

if TYPE_CHECKING:
    import torch

    from export_gelu.exporter.torch_values import PyTree


def is_in_memory(model: object) -> bool:
    """An object to export as it is, not a path to load."""
    return not isinstance(model, (str, Path))


def label(model: object) -> Path:
    """How reports and messages name an in-memory model."""
    return Path(f"<in memory: {type(model).__name__}>")


def _positional_names(module: torch.nn.Module, count: int) -> list[str]:
    try:
        params = [p for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params[:count]]
    return names + [f"input_{i}" for i in range(len(names), count)]


def is_call_constant(value: object) -> bool:
    """A keyword argument torch.export keeps as a constant of the call: None, a bool, an int,
    a float or a string (a tuple or list of them too)."""
    if isinstance(value, (tuple, list)):
        return all(is_call_constant(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def _tensors(values: Sequence[PyTree], names: Sequence[str], what: str
             ) -> tuple[torch.Tensor, ...]:
    import torch

    tensors: list[torch.Tensor] = []
    for i, value in enumerate(values):
        name = names[i] if i < len(names) else f"input {i}"
        if not isinstance(value, torch.Tensor):
            raise BadInputError(f"{what}: {name} is a {type(value).__name__}; the example "
                                "inputs must be tensors (keyword arguments may also be None, a "
                                "bool, an int, a float or a string: constants of the call)")
        tensors.append(value)
    return tuple(tensors)


def from_memory(model: object, args: Sequence[PyTree] | None = None,
                kwargs: Mapping[str, PyTree] | None = None) -> LoadedModel:
    """An nn.Module or ExportedProgram, with its example inputs, as a LoadedModel."""
    import torch

    from export_gelu.exporter.onnx_export.output_names import names_from_spec

    args, kwargs = tuple(args or ()), dict(kwargs or {})
    where = label(model)
    if isinstance(model, torch.export.ExportedProgram):
        names = [s for s in model.graph_signature.user_inputs if isinstance(s, str)]
        if not (args or kwargs) and model.example_inputs:
            args, kwargs = model.example_inputs
        example = _tensors((*args, *kwargs.values()), names, str(where)) if args or kwargs \
            else None
        bad = nonfinite_weights(model.state_dict)
        if bad:
            raise BadInputError(f"{where}: weight {bad[0]!r} holds NaN")
        return LoadedModel(where, ModelFormat.IN_MEMORY_PROGRAM, exported=model,
                           example_inputs=example, input_names=names,
                           output_names=names_from_spec(model.call_spec.out_spec))
    if not isinstance(model, torch.nn.Module):
        raise BadInputError(f"export() takes a path, an nn.Module or an ExportedProgram, not a "
                            f"{type(model).__name__}")
    constants = tuple((k, v) for k, v in kwargs.items() if is_call_constant(v))
    kwargs = {k: v for k, v in kwargs.items() if not is_call_constant(v)}
    names = _positional_names(model, len(args)) + list(kwargs)
    example = _tensors((*args, *kwargs.values()), names, str(where)) if names else None
    bad = nonfinite_weights(model.state_dict())
    if bad:
        raise BadInputError(f"{where}: weight {bad[0]!r} holds NaN")
    notes: list[str] = []
    if _caches(model):
        notes.append(Note("a transformers model with use_cache: exported as one graph without "
                          "its key/value cache (use_cache=False while exporting, as the "
                          "Hugging Face folder route does; config restored afterwards); for "
                          "the with-past graphs export its save_pretrained folder with --task "
                          "text-generation-with-past", "no-cache"))
    if model.training:
        notes.append(Note("the module was in training mode: exported and checked in eval mode "
                          "(its mode is restored afterwards)", "eval-mode"))
    if constants:
        notes.append(Note("keyword arguments that are no tensors kept as constants of every "
                          "call, as given: " + ", ".join(f"{k}={v!r}" for k, v in constants),
                          "call-constants"))
    return LoadedModel(where, ModelFormat.IN_MEMORY_MODULE, module=model, example_inputs=example,
                       input_names=names, notes=notes, call_constants=constants)


def _caches(model: object) -> bool:
    """A transformers model one of whose configs (its own, or a sub-config only: a
    VisionEncoderDecoder's decoder) asks for a key/value cache in its outputs."""
    return bool(cache_configs(model))


@contextlib.contextmanager
def without_cache(model: object) -> Iterator[None]:
    """`use_cache` off in every config of a transformers model while exporting it (a cache
    in the outputs is no tensor a one-graph export can name), restored afterwards."""
    configs = cache_configs(model)
    for config in configs:
        config.use_cache = False
    try:
        yield
    finally:
        for config in configs:
            config.use_cache = True
