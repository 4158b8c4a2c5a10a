"""Torch files loaded safely: torch.save pickles and state_dicts, ExportedPrograms, TorchScript,
safetensors, and --model-factory modules.

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
from pathlib import Path
from types import ModuleType
from typing import Any

from export_gelu.errors import BadInputError
from export_gelu.exporter.inputs.specs import SPEC_HELP
from export_gelu.exporter.loading.loaded import LoadedModel, first_line
from export_gelu.exporter.loading.user_code import (
    defined_in,
    main_classes,
    main_pickle_module,
)
from export_gelu.exporter.model_files import archive_checks, archive_versions, containment
from export_gelu.exporter.model_files.detect import Detected, ModelFormat
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


def _import_callable(spec: str) -> Any:
    """Resolve 'pkg.module:function' to a callable, with the working directory importable."""
    mod_name, attr = factory_parts(spec)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(mod_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's to fix
        raise BadInputError(f"--model-factory {spec!r}: cannot import {mod_name!r} "
                            f"({type(exc).__name__}: {first_line(exc)})") from exc
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
                            f"{type(exc).__name__}: {first_line(exc)}") from exc
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


def refused_global(exc: BaseException) -> str | None:
    """The global a weights-only load refused (`builtins.exec`), or None if it refused none."""
    match = re.search(r"Unsupported global: GLOBAL (\S+)", str(exc))
    if match:
        return match.group(1)
    if "Weights only load failed" in str(exc):
        return "an object that is not a tensor or container"
    return None


def load_weights_only(path: Path, is_zip: bool) -> Any:
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


def refuse_nan(path: Path, state: Mapping[str, Any]) -> None:
    bad = nonfinite_weights(state)
    if bad:
        raise BadInputError(f"{path}: weight {bad[0]!r} holds NaN (a corrupt or diverged "
                            f"checkpoint{'; also ' + ', '.join(bad[1:]) if bad[1:] else ''}); "
                            "its outputs could not be verified")


def load_state_dict(path: Path, state: Mapping[str, Any], factory: str | None,
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
    refuse_nan(path, module.state_dict())
    module.eval()
    notes = [f"state_dict loaded into {factory}()"]
    if nested:
        notes.append(f"the file is a training checkpoint; its {nested!r} entry was loaded")
    return LoadedModel(path, fmt, module=module, notes=notes)


def load_pickled(path: Path, detected: Detected, allow_pickle: bool,
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
            f"({first_line(exc)}); pass the module or script that defines it with --import"
        ) from exc
    except Exception as exc:  # noqa: BLE001
        raise BadInputError(f"{path}: could not unpickle "
                            f"({type(exc).__name__}: {first_line(exc)})") from exc
    if not isinstance(obj, torch.nn.Module):
        raise BadInputError(f"{path}: unpickled a {type(obj).__name__}, not an nn.Module")
    refuse_nan(path, obj.state_dict())
    obj.eval()
    return LoadedModel(path, ModelFormat.PICKLED_MODULE, module=obj,
                       notes=["pickled module loaded with --allow-pickle"])


def load_exported(path: Path, detected: Detected, allow_pickle: bool) -> LoadedModel:
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
                           archive_checks.program_archive_findings(path))
    archive = archive_versions.refuse_unreadable(path)  # another torch's file, this can't read
    ignore_unlift_noise()  # torch 2.6 warns at every .module() of such a program
    notes = register_archive_types(path)
    guard = contextlib.nullcontext() if allow_pickle else forced_weights_only()
    try:
        with guard, quiet_exporter(), path.open("rb") as fh:
            ep = torch.export.load(fh)
    except pickle.UnpicklingError as exc:
        refused = refused_global(exc) or "a non-tensor object"
        raise BadInputError(f"{path}: the ExportedProgram archive holds pickled Python objects "
                            f"(it names {refused}), not just tensors; {PICKLE_RISK}") from exc
    except Exception as exc:  # noqa: BLE001
        raise archive_versions.program_load_failure(path, archive, exc) from exc
    if not allow_pickle:
        containment.refuse(path, "ExportedProgram", containment.program_findings(ep))
    refuse_nan(path, ep.state_dict)
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
        containment.refuse(path, "TorchScript file", archive_checks.archive_findings(path))
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


def load_torchscript(path: Path, trusted: bool) -> LoadedModel:
    module = load_script_module(path, trusted)
    refuse_nan(path, module.state_dict())
    module.eval()
    notes = ["TorchScript loaded with --trust-model: its code was not checked"] if trusted else []
    return LoadedModel(path, ModelFormat.TORCHSCRIPT, module=module, notes=notes,
                       trusted=trusted)


def read_safetensors(path: Path) -> Mapping[str, Any]:
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
                            f"({type(exc).__name__}: {first_line(exc)})") from exc
