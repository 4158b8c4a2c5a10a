"""Load any supported model file: what it is (by content, model_files/detect.py), and the loader
that takes it (torch files: torch_files.py, with its pickle policy; ONNX: onnx_checks.py; a
Hugging Face folder: its graphs, hf/)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from export_gelu.errors import BadInputError
from export_gelu.exporter.loading.loaded import LoadedModel, first_line
from export_gelu.exporter.loading.onnx_checks import check_external_data, check_onnx_valid
from export_gelu.exporter.loading.torch_files import (
    load_exported,
    load_pickled,
    load_state_dict,
    load_torchscript,
    load_weights_only,
    read_safetensors,
    refuse_nan,
    refused_global,
)
from export_gelu.exporter.loading.user_code import import_user_module
from export_gelu.exporter.model_files.detect import ModelFormat, detect_format

if TYPE_CHECKING:
    from export_gelu.exporter.hf.graph_spec import GraphSpec


def _graph_loaded(path: Path, spec: GraphSpec, notes: list[str], task: str) -> LoadedModel:
    """One graph of a Hugging Face folder as a loaded model the export stages take."""
    return LoadedModel(path, ModelFormat.HF_FOLDER, module=spec.module,
                       example_inputs=tuple(spec.inputs.values()),
                       input_names=list(spec.inputs), output_names=list(spec.output_names),
                       notes=list(notes), task=task, dims=list(spec.dims),
                       file_name=spec.file_name, probed=spec.probed)


def _load_hf_folder(path: Path, task: str | None, allow_pickle: bool,
                    inputs: Sequence[str] = (), inputs_npz: str | None = None,
                    static: bool = False, *, sizes_opset: int = 0,
                    sizes_precision: str = "fp32") -> LoadedModel:
    """A save_pretrained folder: one graph (on the user's inputs when given), or (an
    encoder–decoder) the folder's graphs."""
    from export_gelu.exporter.hf.diffusers_folder import load_diffusers_folder
    from export_gelu.exporter.hf.folder import is_diffusers_folder, load_folder
    from export_gelu.exporter.hf.graphs import given_inputs, graphs_for
    from export_gelu.exporter.hf.tasks import DECODER, SEQ2SEQ

    fm = (load_diffusers_folder(path, task, allow_pickle) if is_diffusers_folder(path)
          else load_folder(path, task, allow_pickle))
    refuse_nan(path, fm.model.state_dict())
    one_graph = fm.task.kind not in (DECODER, SEQ2SEQ) or (fm.task.kind == DECODER
                                                           and not fm.task.with_past)
    given = given_inputs(fm, list(inputs), inputs_npz) if one_graph else None
    specs = graphs_for(fm, given, static, sizes_opset, sizes_precision)
    if fm.task.kind == DECODER and not one_graph and not fm.task.with_past \
            and (inputs or inputs_npz):
        given = given_inputs(fm, list(inputs), inputs_npz)  # its past route fell through
        specs = graphs_for(fm, given, static, sizes_opset, sizes_precision)
    name = fm.task.name
    generation = fm if fm.task.with_past else None
    if len(specs) == 1:
        loaded = _graph_loaded(path, specs[0], fm.notes, name)
        loaded.generation = generation
        return loaded
    graphs = [_graph_loaded(path, s, [], name) for s in specs]
    return LoadedModel(path, ModelFormat.HF_FOLDER, module=fm.model, notes=fm.notes, task=name,
                       graphs=graphs, generation=generation)


def load_model(path: str | Path, *, allow_pickle: bool = False,
               model_factory: str | None = None, imports: Sequence[str] = (),
               task: str | None = None, inputs: Sequence[str] = (),
               inputs_npz: str | None = None, static: bool = False,
               sizes_opset: int = 0, sizes_precision: str = "fp32",
               needs_inputs: bool = False) -> LoadedModel:
    """Load any supported model file, refusing to run pickled code unless allowed.

    `imports`: modules to import first (`--import`), whose pytree types an ExportedProgram's
    inputs or outputs use. A folder holding `config.json` is a Hugging Face save_pretrained
    folder, loaded for `task` (optimum's task names; default: from its architectures), its
    one-graph tasks dynamic in batch and sequence unless `static` (image and audio sizes too,
    where the model takes them, when the export's opset `sizes_opset` is 18 or more).
    `needs_inputs`: nothing gives the run its inputs but the model's own examples (a state_dict
    refused for want of a factory then names the missing inputs in the same message)."""
    path = Path(path)
    if path.is_dir() and (path / "model_index.json").is_file() \
            and not (path / "config.json").is_file():
        models = sorted(p.name for p in path.iterdir() if (p / "config.json").is_file())
        raise BadInputError(f"{path}: a diffusers pipeline folder (model_index.json); export "
                            f"the folder of one of its models: {', '.join(models) or 'none'}")
    if path.is_dir() and (path / "config.json").is_file():
        return _load_hf_folder(path, task, allow_pickle, inputs, inputs_npz, static,
                               sizes_opset=sizes_opset, sizes_precision=sizes_precision)
    detected = detect_format(path)
    fmt = detected.format
    if fmt is ModelFormat.SAFETENSORS:
        return load_state_dict(path, read_safetensors(path), model_factory, fmt,
                                needs_inputs)
    user_modules = [import_user_module(m) for m in imports]  # before anything unpickles
    if fmt is ModelFormat.ONNX:
        data_files = check_external_data(path)
        check_onnx_valid(path)
        return LoadedModel(path, fmt, onnx_path=path, data_files=data_files)
    if fmt is ModelFormat.EXPORTED_PROGRAM:
        return load_exported(path, detected, allow_pickle)
    if fmt is ModelFormat.TORCHSCRIPT:
        return load_torchscript(path, allow_pickle)

    # A torch.save pickle: weights_only first; that never runs code from the file.
    with path.open("rb") as fh:
        is_zip = fh.read(2) == b"PK"
    obj = load_weights_only(path, is_zip)
    if isinstance(obj, Mapping):
        return load_state_dict(path, obj, model_factory, needs_inputs=needs_inputs)
    if not isinstance(obj, BaseException):
        raise BadInputError(f"{path}: holds a {type(obj).__name__}, not a model or state_dict")
    refused = refused_global(obj)
    if refused is None and not allow_pickle:
        raise BadInputError(f"{path}: corrupt or truncated torch.save file "
                            f"({type(obj).__name__}: {first_line(obj)})")
    if model_factory and allow_pickle:  # the module that builds it defines its classes
        user_modules.append(import_user_module(model_factory.partition(":")[0]))
    return load_pickled(path, detected, allow_pickle, refused, user_modules)
