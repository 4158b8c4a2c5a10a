"""Load a model file safely: what it is, the module to run, and inputs it carries."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from export_gelu.errors import BadInputError
from export_gelu.exporter.detect import Detected, ModelFormat, detect_format

PICKLE_RISK = (
    "loading it runs arbitrary Python code from the file; "
    "pass --allow-pickle only if you trust where it came from"
)


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
    notes: list[str] = field(default_factory=list)

    @property
    def is_onnx(self) -> bool:
        return self.format is ModelFormat.ONNX

    def reference_module(self) -> Any:
        """The original model as a callable module (before any pass), for parity checks."""
        if self.exported is not None:
            return self.exported.module()
        return self.module


def _import_callable(spec: str) -> Any:
    """Resolve 'pkg.module:function' to a callable, with the working directory importable."""
    if ":" not in spec:
        raise BadInputError(f"--model-factory {spec!r}: expected the form pkg.module:function")
    mod_name, _, attr = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(mod_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's to fix
        raise BadInputError(
            f"--model-factory {spec!r}: cannot import {mod_name!r} ({exc})"
        ) from exc
    try:
        obj: Any = module
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError as exc:
        raise BadInputError(f"--model-factory {spec!r}: {mod_name} has no {attr!r}") from exc
    if not callable(obj):
        raise BadInputError(f"--model-factory {spec!r}: {attr!r} is not callable")
    return obj


def _load_weights_only(path: Path) -> Any:
    import pickle

    import torch

    try:
        return torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
    except (pickle.UnpicklingError, RuntimeError, AttributeError, ValueError, TypeError) as exc:
        return exc
    except Exception as exc:  # noqa: BLE001
        return exc


def _load_state_dict(path: Path, state: Mapping[str, Any], factory: str | None) -> LoadedModel:
    import torch

    if not factory:
        raise BadInputError(
            f"{path}: holds a state_dict (weights only, {len(state)} tensors) and no model; "
            "pass --model-factory pkg.module:function that builds the nn.Module"
        )
    module = _import_callable(factory)()
    if not isinstance(module, torch.nn.Module):
        raise BadInputError(f"--model-factory {factory!r} returned {type(module).__name__}, "
                            "not a torch.nn.Module")
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        raise BadInputError(
            f"{path}: the state_dict does not fit the module from {factory}: "
            f"{' '.join(line.strip() for line in first[:3])}"
        ) from exc
    module.eval()
    return LoadedModel(path, ModelFormat.STATE_DICT, module=module,
                       notes=[f"state_dict loaded into {factory}()"])


def _load_pickled(path: Path, detected: Detected, allow_pickle: bool) -> LoadedModel:
    import torch

    classes = ", ".join(detected.pickle_globals[:5]) or "unknown classes"
    if not allow_pickle:
        raise BadInputError(
            f"{path}: a pickled nn.Module (it names {classes}); {PICKLE_RISK}. "
            "Safer: save it with torch.export.save, torch.jit.save, or as a state_dict "
            "with --model-factory"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=False)
    except (ModuleNotFoundError, AttributeError) as exc:
        raise BadInputError(
            f"{path}: the pickle needs code that cannot be imported here ({exc}); "
            "run from the directory that holds the model's package"
        ) from exc
    except Exception as exc:  # noqa: BLE001
        raise BadInputError(f"{path}: could not unpickle ({type(exc).__name__}: {exc})") from exc
    if not isinstance(obj, torch.nn.Module):
        raise BadInputError(f"{path}: unpickled a {type(obj).__name__}, not an nn.Module")
    obj.eval()
    return LoadedModel(path, ModelFormat.PICKLED_MODULE, module=obj,
                       notes=["pickled module loaded with --allow-pickle"])


def load_model(path: str | Path, *, allow_pickle: bool = False,
               model_factory: str | None = None) -> LoadedModel:
    """Load any supported model file, refusing to run pickled code unless allowed."""
    path = Path(path)
    detected = detect_format(path)
    fmt = detected.format
    if fmt is ModelFormat.ONNX:
        return LoadedModel(path, fmt, onnx_path=path)

    import torch

    if fmt is ModelFormat.EXPORTED_PROGRAM:
        try:
            with path.open("rb") as fh:
                ep = torch.export.load(fh)
        except Exception as exc:  # noqa: BLE001
            raise BadInputError(f"{path}: corrupt ExportedProgram archive "
                                f"({type(exc).__name__}: {str(exc)[:200]})") from exc
        args, kwargs = ep.example_inputs or ((), {})
        names = [s for s in ep.graph_signature.user_inputs if isinstance(s, str)]
        example = tuple(args) + tuple(kwargs.values()) if (args or kwargs) else None
        return LoadedModel(path, fmt, exported=ep, example_inputs=example, input_names=names)
    if fmt is ModelFormat.TORCHSCRIPT:
        try:
            module = torch.jit.load(str(path), map_location="cpu")
        except Exception as exc:  # noqa: BLE001
            raise BadInputError(f"{path}: corrupt TorchScript archive "
                                f"({type(exc).__name__}: {str(exc)[:200]})") from exc
        module.eval()
        return LoadedModel(path, fmt, module=module)

    # A torch.save pickle: weights_only first; that never runs code from the file.
    obj = _load_weights_only(path)
    if isinstance(obj, Mapping):
        return _load_state_dict(path, obj, model_factory)
    if isinstance(obj, Exception) and fmt is ModelFormat.STATE_DICT:
        raise BadInputError(f"{path}: corrupt or truncated torch.save file ({obj})")
    if not isinstance(obj, Exception):
        raise BadInputError(f"{path}: holds a {type(obj).__name__}, not a model or state_dict")
    return _load_pickled(path, detected, allow_pickle)
