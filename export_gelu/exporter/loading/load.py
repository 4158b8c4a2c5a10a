"""Load a model file safely: what it is, the module to run, and inputs it carries.

Pickle policy: no Python pickle from the file is executed unless `allow_pickle` is set.
- torch.save files are loaded with `weights_only=True` first (tensors and containers only);
  what that refuses is a pickled module, refused with the risk explained.
- ExportedProgram archives are loaded with every inner `torch.load` forced to
  `weights_only` (torch.export.load otherwise falls back to full unpickling of sample inputs
  and pickled weights), and archives holding AOTInductor libraries or pickled opaque objects
  are refused outright.
- TorchScript archives are read by TorchScript's own unpickler, which builds no Python objects;
  but TorchScript is code, so it is loaded only after `containment` finds nothing in it that
  would run while loading (`__setstate__`, custom C++ classes), and kept only if every
  compiled function computes on tensors (no `torch.from_file`, `torch.save`, RPC, ops of
  other namespaces). ExportedPrograms' graphs get the same check after loading, before
  anything runs them. `allow_pickle` (`--trust-model`) skips these checks.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from export_gelu.errors import BadInputError
from export_gelu.exporter.inputs.specs import SPEC_HELP
from export_gelu.exporter.loading.user_code import (
    defined_in,
    import_user_module,
    main_classes,
    main_pickle_module,
)
from export_gelu.exporter.model_files import archive_versions, containment
from export_gelu.exporter.model_files.detect import Detected, ModelFormat, detect_format
from export_gelu.exporter.model_files.model_reads import contained, model_root
from export_gelu.exporter.torch_compat import ignore_unlift_noise
from export_gelu.flags.factory import factory_parts
from export_gelu.fspaths import utf8_path

PICKLE_RISK = (
    "loading it runs arbitrary Python code from the file; "
    "pass --trust-model (alias --allow-pickle) only if you trust where it came from"
)
#: Keys under which training checkpoints nest the model's state_dict.
_NESTED_STATE_KEYS = ("state_dict", "model_state_dict", "model", "module", "net")
_FORCE_WEIGHTS_ONLY = "TORCH_FORCE_WEIGHTS_ONLY_LOAD"
_FORCE_NO_WEIGHTS_ONLY = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"


@dataclass
class LoadedModel:
    """A loaded model: exactly one of `exported`, `module` or `onnx_path` is the main artifact."""

    path: Path
    format: ModelFormat
    module: Any = None  # torch.nn.Module or torch.jit.ScriptModule
    exported: Any = None  # torch.export.ExportedProgram
    onnx_path: Path | None = None
    example_inputs: tuple[Any, ...] | None = None
    input_names: list[str] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)  # the model's own, when it has them
    notes: list[str] = field(default_factory=list)
    data_files: list[Path] = field(default_factory=list)  # an ONNX input's external data
    trusted: bool = False  # loaded with --trust-model: its code was not checked
    # -- a Hugging Face folder (hf/folder.py, hf/graphs.py) ---------------------------------
    task: str = ""  # the task it is exported for (optimum's name)
    dims: list[Any] = field(default_factory=list)  # hf.graph_spec.GraphDim: its dims
    file_name: str = ""  # the graph's file in a multi-graph output folder
    graphs: list[LoadedModel] = field(default_factory=list)  # the graphs a folder exports
    generation: Any = None  # hf.folder.FolderModel, for the greedy-decode check
    #: keyword arguments that are no tensors (use_cache=False, a mode string), passed on
    #: every call as given: constants of the call, as torch.export keeps them
    call_constants: tuple[tuple[str, Any], ...] = ()

    @property
    def is_onnx(self) -> bool:
        return self.format is ModelFormat.ONNX

    def reference_module(self) -> Any:
        """The original model as a callable module (before any pass), for parity checks."""
        if self.exported is not None:
            return self.exported.module()
        return self.module


def _first_line(exc: BaseException, limit: int = 200) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:limit]


def _import_callable(spec: str) -> Any:
    """Resolve 'pkg.module:function' to a callable, with the working directory importable."""
    mod_name, attr = factory_parts(spec)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(mod_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's to fix
        raise BadInputError(f"--model-factory {spec!r}: cannot import {mod_name!r} "
                            f"({type(exc).__name__}: {_first_line(exc)})") from exc
    try:
        obj: Any = module
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError as exc:
        raise BadInputError(f"--model-factory {spec!r}: {mod_name} has no {attr!r}") from exc
    if not callable(obj):
        raise BadInputError(f"--model-factory {spec!r}: {attr!r} is not callable")
    return obj


def _call_factory(spec: str) -> Any:
    import torch

    factory = _import_callable(spec)
    try:
        module = factory()
    except Exception as exc:  # noqa: BLE001 - the factory is the user's code
        raise BadInputError(f"--model-factory {spec!r}: calling it raised "
                            f"{type(exc).__name__}: {_first_line(exc)}") from exc
    if not isinstance(module, torch.nn.Module):
        raise BadInputError(f"--model-factory {spec!r} returned {type(module).__name__}, "
                            "not a torch.nn.Module")
    return module


@contextlib.contextmanager
def forced_weights_only() -> Iterator[None]:
    """Every `torch.load` inside, even one asking for `weights_only=False`, is weights-only."""
    saved = {k: os.environ.get(k) for k in (_FORCE_WEIGHTS_ONLY, _FORCE_NO_WEIGHTS_ONLY)}
    os.environ[_FORCE_WEIGHTS_ONLY] = "1"
    os.environ.pop(_FORCE_NO_WEIGHTS_ONLY, None)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _refused_global(exc: BaseException) -> str | None:
    """The global a weights-only load refused (`builtins.exec`), or None if it refused none."""
    match = re.search(r"Unsupported global: GLOBAL (\S+)", str(exc))
    if match:
        return match.group(1)
    if "Weights only load failed" in str(exc):
        return "an object that is not a tensor or container"
    return None


def _load_weights_only(path: Path, is_zip: bool) -> Any:
    """The object a torch.save file holds, loaded weights-only; or the exception it raised."""
    import torch

    try:
        # mmap keeps big checkpoints file-backed; legacy (non-zip) files cannot be mapped
        return torch.load(str(path), map_location="cpu", weights_only=True, mmap=is_zip)
    except Exception as exc:  # noqa: BLE001 - refusal and corruption are sorted by the caller
        return exc


def _unwrap_checkpoint(state: Mapping[str, Any]) -> tuple[Mapping[str, Any], str | None]:
    """A training checkpoint's nested state_dict (`{"model": {...}, "optimizer": ...}`)."""
    import torch

    if all(isinstance(v, torch.Tensor) for v in state.values()):
        return state, None
    for key in _NESTED_STATE_KEYS:
        inner = state.get(key)
        if isinstance(inner, Mapping) and inner and \
                all(isinstance(v, torch.Tensor) for v in inner.values()):
            return inner, key
    return state, None


def nonfinite_weights(state: Mapping[str, Any], limit: int = 3) -> list[str]:
    """Names of floating tensors holding NaN (checked in chunks, never a full-size copy)."""
    import torch

    bad = []
    for name, value in state.items():
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            continue
        flat = value.detach().reshape(-1)
        if any(bool(torch.isnan(chunk).any()) for chunk in flat.split(1 << 24)):
            bad.append(name)
            if len(bad) >= limit:
                break
    return bad


def _refuse_nan(path: Path, state: Mapping[str, Any]) -> None:
    bad = nonfinite_weights(state)
    if bad:
        raise BadInputError(f"{path}: weight {bad[0]!r} holds NaN (a corrupt or diverged "
                            f"checkpoint{'; also ' + ', '.join(bad[1:]) if bad[1:] else ''}); "
                            "its outputs could not be verified")


def _load_state_dict(path: Path, state: Mapping[str, Any], factory: str | None,
                     fmt: ModelFormat = ModelFormat.STATE_DICT,
                     needs_inputs: bool = False) -> LoadedModel:
    state, nested = _unwrap_checkpoint(state)
    tensors = sum(1 for _ in state)
    if not factory and needs_inputs:  # both said at once, not one per run
        raise BadInputError(
            f"{path}: holds a state_dict (weights only, {tensors} entries): no model and no "
            "example inputs; pass --model-factory pkg.module:function that builds the "
            f"nn.Module, and --input {SPEC_HELP} (one per forward() argument) or --inputs "
            "FILE.npz")
    if not factory:
        raise BadInputError(
            f"{path}: holds a state_dict (weights only, {tensors} entries) and no model; "
            "pass --model-factory pkg.module:function that builds the nn.Module"
        )
    module = _call_factory(factory)
    try:
        module.load_state_dict(state, strict=True)
    except (RuntimeError, TypeError, ValueError, KeyError, AttributeError) as exc:
        first = str(exc).strip().splitlines()
        raise BadInputError(
            f"{path}: the state_dict does not fit the module from {factory}: "
            f"{' '.join(line.strip() for line in first[:3])[:400]}"
        ) from exc
    _refuse_nan(path, module.state_dict())
    module.eval()
    notes = [f"state_dict loaded into {factory}()"]
    if nested:
        notes.append(f"the file is a training checkpoint; its {nested!r} entry was loaded")
    return LoadedModel(path, fmt, module=module, notes=notes)


def _load_pickled(path: Path, detected: Detected, allow_pickle: bool,
                  refused: str | None, modules: Sequence[ModuleType] = ()) -> LoadedModel:
    import torch

    names = detected.pickle_globals[:5] or ([refused] if refused else [])
    classes = ", ".join(names) or "unknown classes"
    in_script = main_classes([*detected.pickle_globals, *([refused] if refused else [])])
    if not allow_pickle and in_script:
        raise BadInputError(
            f"{path}: a pickled nn.Module whose class {in_script[0]} was defined in the script "
            f"that saved it; {PICKLE_RISK}. To load it: --allow-pickle --import SCRIPT.py (the "
            "script that defines it); safer: save it in that script with torch.export.save")
    if not allow_pickle:
        raise BadInputError(
            f"{path}: a pickled Python object (it names {classes}), not plain weights; "
            f"{PICKLE_RISK}. Safer: save it with torch.export.save, torch.jit.save, or as a "
            "state_dict with --model-factory"
        )
    missing = [c for c in in_script if not defined_in(modules, c)]
    if missing:
        raise BadInputError(
            f"{path}: its class {missing[0]} was defined in the script that saved it, which "
            "export-gelu cannot import by that name; pass the script with --import SCRIPT.py "
            "(or save the model in it with torch.export.save)")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        with open(path, "rb") as fh:
            is_zip = fh.read(2) == b"PK"
        # mmap keeps a big model's weights file-backed (legacy non-zip files cannot be mapped)
        obj = torch.load(str(path), map_location="cpu", weights_only=False, mmap=is_zip,
                         pickle_module=main_pickle_module(modules))
    except ModuleNotFoundError as exc:
        raise BadInputError(
            f"{path}: the pickle needs module {exc.name!r}, which cannot be imported from "
            f"{os.getcwd()}; run from the folder that holds {exc.name} (its .py file or "
            "package)"
        ) from exc
    except AttributeError as exc:
        raise BadInputError(
            f"{path}: the pickle names a class its module does not define here "
            f"({_first_line(exc)}); pass the module or script that defines it with --import"
        ) from exc
    except Exception as exc:  # noqa: BLE001
        raise BadInputError(f"{path}: could not unpickle "
                            f"({type(exc).__name__}: {_first_line(exc)})") from exc
    if not isinstance(obj, torch.nn.Module):
        raise BadInputError(f"{path}: unpickled a {type(obj).__name__}, not an nn.Module")
    _refuse_nan(path, obj.state_dict())
    obj.eval()
    return LoadedModel(path, ModelFormat.PICKLED_MODULE, module=obj,
                       notes=["pickled module loaded with --allow-pickle"])


def _load_exported(path: Path, detected: Detected, allow_pickle: bool) -> LoadedModel:
    import pickle

    import torch

    from export_gelu.exporter.inputs.call_plan import example_tensors
    from export_gelu.exporter.loading.pytree_types import register_archive_types
    from export_gelu.exporter.onnx_export.output_names import names_from_spec
    from export_gelu.exporter.onnx_export.to_onnx import quiet_exporter

    if detected.code_members and not allow_pickle:
        shown = ", ".join(detected.code_members[:3])
        raise BadInputError(f"{path}: the ExportedProgram archive holds compiled or pickled "
                            f"code ({shown}); {PICKLE_RISK}")
    if not allow_pickle:
        containment.refuse(path, "ExportedProgram archive",
                           containment.program_archive_findings(path))
    archive = archive_versions.refuse_unreadable(path)  # another torch's file, this can't read
    ignore_unlift_noise()  # torch 2.6 warns at every .module() of such a program
    notes = register_archive_types(path)
    guard = contextlib.nullcontext() if allow_pickle else forced_weights_only()
    try:
        with guard, quiet_exporter(), path.open("rb") as fh:
            ep = torch.export.load(fh)
    except pickle.UnpicklingError as exc:
        refused = _refused_global(exc) or "a non-tensor object"
        raise BadInputError(f"{path}: the ExportedProgram archive holds pickled Python objects "
                            f"(it names {refused}), not just tensors; {PICKLE_RISK}") from exc
    except Exception as exc:  # noqa: BLE001
        raise archive_versions.program_load_failure(path, archive, exc) from exc
    if not allow_pickle:
        containment.refuse(path, "ExportedProgram", containment.program_findings(ep))
    _refuse_nan(path, ep.state_dict)
    args, kwargs = ep.example_inputs or ((), {})
    names = [s for s in ep.graph_signature.user_inputs if isinstance(s, str)]
    # constants it was saved with (None, bools, ints, a dict of Nones) are passed as saved
    example = example_tensors(ep, args, kwargs) if (args or kwargs) else None
    return LoadedModel(path, ModelFormat.EXPORTED_PROGRAM, exported=ep, example_inputs=example,
                       input_names=names, notes=notes, trusted=allow_pickle,
                       output_names=names_from_spec(ep.call_spec.out_spec))


def load_script_module(path: Path, trusted: bool = False) -> Any:
    """A TorchScript file as a ScriptModule, checked (`containment`) before it loads and
    before anything calls it, unless `trusted`."""
    import torch
    from torch.jit._recursive import wrap_cpp_module

    if not trusted:
        containment.refuse(path, "TorchScript file", containment.archive_findings(path))
    try:
        # what torch.jit.load does, keeping the unit (torch's stub for these two lacks the
        # restore-shapes flag that torch.jit.load passes)
        jit_c: Any = torch._C
        unit = jit_c.CompilationUnit()
        fs_path = utf8_path(path)
        if fs_path is not None:
            cpp = jit_c.import_ir_module(unit, fs_path, torch.device("cpu"), {}, False)
        else:  # a name C++ cannot take: the bytes
            cpp = jit_c.import_ir_module_from_buffer(unit, path.read_bytes(),
                                                     torch.device("cpu"), {}, False)
        module = wrap_cpp_module(cpp)
    except Exception as exc:  # noqa: BLE001
        raise archive_versions.script_load_failure(path, exc) from exc
    if not trusted:
        containment.refuse(path, "TorchScript code", containment.script_findings(unit, module))
    return module


def _load_torchscript(path: Path, trusted: bool) -> LoadedModel:
    module = load_script_module(path, trusted)
    _refuse_nan(path, module.state_dict())
    module.eval()
    notes = ["TorchScript loaded with --trust-model: its code was not checked"] if trusted else []
    return LoadedModel(path, ModelFormat.TORCHSCRIPT, module=module, notes=notes,
                       trusted=trusted)


def _read_safetensors(path: Path) -> Mapping[str, Any]:
    """A safetensors file's tensors (no code runs: the format holds a JSON header and bytes)."""
    try:
        from safetensors.torch import load_file
    except ImportError as exc:
        raise BadInputError(f"{path}: a safetensors file needs the safetensors package "
                            "(pip install safetensors)") from exc
    try:
        return load_file(str(path), device="cpu")
    except Exception as exc:  # noqa: BLE001 - SafetensorError and others: a corrupt file
        raise BadInputError(f"{path}: corrupt or truncated safetensors file "
                            f"({type(exc).__name__}: {_first_line(exc)})") from exc


def _graph_loaded(path: Path, spec: Any, notes: list[str], task: str) -> LoadedModel:
    """One graph of a Hugging Face folder as a loaded model the export stages take."""
    return LoadedModel(path, ModelFormat.HF_FOLDER, module=spec.module,
                       example_inputs=tuple(spec.inputs.values()),
                       input_names=list(spec.inputs), output_names=list(spec.output_names),
                       notes=list(notes), task=task, dims=list(spec.dims),
                       file_name=spec.file_name)


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
    _refuse_nan(path, fm.model.state_dict())
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
        return _load_state_dict(path, _read_safetensors(path), model_factory, fmt,
                                needs_inputs)
    user_modules = [import_user_module(m) for m in imports]  # before anything unpickles
    if fmt is ModelFormat.ONNX:
        data_files = check_external_data(path)
        check_onnx_valid(path)
        return LoadedModel(path, fmt, onnx_path=path, data_files=data_files)
    if fmt is ModelFormat.EXPORTED_PROGRAM:
        return _load_exported(path, detected, allow_pickle)
    if fmt is ModelFormat.TORCHSCRIPT:
        return _load_torchscript(path, allow_pickle)

    # A torch.save pickle: weights_only first; that never runs code from the file.
    with path.open("rb") as fh:
        is_zip = fh.read(2) == b"PK"
    obj = _load_weights_only(path, is_zip)
    if isinstance(obj, Mapping):
        return _load_state_dict(path, obj, model_factory, needs_inputs=needs_inputs)
    if not isinstance(obj, BaseException):
        raise BadInputError(f"{path}: holds a {type(obj).__name__}, not a model or state_dict")
    refused = _refused_global(obj)
    if refused is None and not allow_pickle:
        raise BadInputError(f"{path}: corrupt or truncated torch.save file "
                            f"({type(obj).__name__}: {_first_line(obj)})")
    if model_factory and allow_pickle:  # the module that builds it defines its classes
        user_modules.append(import_user_module(model_factory.partition(":")[0]))
    return _load_pickled(path, detected, allow_pickle, refused, user_modules)


def _external_refs(model: Any) -> Iterator[tuple[str, dict[str, str]]]:
    """(tensor name, external_data entries) of every tensor stored outside the file,
    subgraphs' included."""
    from export_gelu.onnx_weights import all_tensors, is_external

    for tensor in all_tensors(model):
        if is_external(tensor):
            yield tensor.name, {e.key: e.value for e in tensor.external_data}


def refuse_unknown_opset(path: Path, model: Any) -> None:
    """Exit 2 when the model declares an ONNX opset newer than any this onnx knows: its ops'
    meaning cannot be known, so no conversion of it can be trusted."""
    import onnx

    known = onnx.defs.onnx_opset_version()
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx") and entry.version > known:
            raise BadInputError(f"{path}: declares ONNX opset {entry.version}, which export-gelu "
                                f"does not know (it knows opsets 1 to {known}, those of onnx "
                                f"{onnx.__version__}); export the model at opset {known} or "
                                "lower")


def check_external_data(path: Path) -> list[Path]:
    """Refuse external-data references that escape the model's folder, point at missing files
    or reach past a file's end; return the files referenced."""
    from export_gelu.onnx_file import read_structure

    try:
        model = read_structure(path)
    except Exception as exc:  # noqa: BLE001
        raise BadInputError(f"{path}: not a readable ONNX file ({_first_line(exc)})") from exc
    refuse_unknown_opset(path, model)
    base = path.resolve().parent  # where onnx_weights.load_graph reads the data from
    root = model_root(base)
    sizes: dict[Path, int] = {}
    for name, info in _external_refs(model):
        location = info.get("location", "")
        if "\x00" in location or not location:
            raise BadInputError(f"{path}: tensor {name!r} has no usable external-data "
                                f"location ({location!r})")
        target = contained(root, base, location, path,
                           f"tensor {name!r} keeps its data at")
        if target not in sizes:
            if not target.is_file():
                raise BadInputError(f"{path}: tensor {name!r} keeps its data in {location!r}, "
                                    "which is missing (copy the .data file with the .onnx)")
            sizes[target] = target.stat().st_size
        try:
            offset = int(info.get("offset", 0))
            length = int(info["length"]) if "length" in info else sizes[target] - offset
        except ValueError as exc:
            raise BadInputError(f"{path}: tensor {name!r} has a malformed external-data "
                                "offset or length") from exc
        if offset < 0 or length < 0 or offset + length > sizes[target]:
            raise BadInputError(f"{path}: tensor {name!r} needs bytes {offset}..{offset + length}"
                                f" of {location!r}, which holds {sizes[target]}: truncated")
    return sorted(sizes)


def check_onnx_valid(path: Path) -> None:
    """Refuse an ONNX file that onnx.checker rejects: no output made from it could pass.
    A path C++ cannot take (not UTF-8) is checked as the model read in Python (its external
    data was checked by `check_external_data`)."""
    import onnx

    try:
        fs_path = utf8_path(path)
        if fs_path is None:
            with path.open("rb") as fh:
                onnx.checker.check_model(onnx.load_model(fh, load_external_data=False))
            return
        onnx.checker.check_model(fs_path)
    except Exception as exc:  # noqa: BLE001 - ValidationError and C++ errors
        raise BadInputError(f"{path}: not a valid ONNX model (onnx.checker: "
                            f"{_first_line(exc)})") from exc


def load_onnx_model(path: str | Path) -> Any:
    """An ONNX file after checking every data reference is sound: small tensors read in, large
    external ones left in their file and read on demand (onnx_weights.load_graph), so the
    weights are never held while the graph is rewritten."""
    from export_gelu.onnx_weights import load_graph

    path = Path(path)
    check_external_data(path)
    try:
        model = load_graph(path)
    except Exception as exc:  # noqa: BLE001 - onnx raises ValidationError, OSError, DecodeError
        raise BadInputError(f"{path}: cannot load the ONNX model with its external data "
                            f"({type(exc).__name__}: {_first_line(exc)})") from exc
    bad = nan_initializers(model)
    if bad:
        raise BadInputError(f"{path}: initializer {bad[0]!r} holds NaN (a corrupt model); "
                            "its outputs could not be verified")
    return model


def nan_initializers(model: Any, limit: int = 3) -> list[str]:
    """Names of floating initializers holding NaN (those left in their file are checked as
    they are streamed into the output)."""
    import numpy as np
    from onnx import numpy_helper

    from export_gelu.onnx_weights import is_lazy

    bad = []
    for init in model.graph.initializer:
        if is_lazy(init):
            continue
        arr = numpy_helper.to_array(init)
        if arr.dtype.kind == "f" and bool(np.isnan(arr).any()):
            bad.append(init.name)
            if len(bad) >= limit:
                break
    return bad
