"""Code the user names for loading (`--import`, `--model-factory`): imported from the working
directory or from a script's path, and where a pickle's classes live when the script that
saved it defined them (`__main__`).

A module pickled from `python train.py` names its class `__main__.Net`; when export-gelu
unpickles it, `__main__` is export-gelu, so the name is looked up in the modules the user
named instead (`--import train.py`, or the `--model-factory` module), never elsewhere.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pickle
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from export_gelu.errors import BadInputError

#: The module name a script's classes are pickled under.
MAIN = "__main__"


def _cwd_importable() -> None:
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def is_script(spec: str) -> bool:
    """`--import train.py` (or a path to a .py file): a script, imported from its file."""
    return spec.endswith(".py") or os.sep in spec or "/" in spec


def import_user_module(spec: str) -> types.ModuleType:
    """`--import MODULE` (importable from the working directory too) or `--import
    path/to/script.py` (imported from that file under its stem's name; its `if __name__ ==
    "__main__":` block does not run). Raises BadInputError saying why it cannot be imported."""
    try:
        if not is_script(spec):
            _cwd_importable()
            return importlib.import_module(spec)
        path = Path(spec)
        if not path.is_file():
            raise FileNotFoundError(f"no file {spec}")
        name = path.stem
        loaded_from = getattr(sys.modules[name], "__file__", None) if name in sys.modules else None
        if loaded_from and Path(loaded_from).resolve() == path.resolve():
            return sys.modules[name]
        loaded = importlib.util.spec_from_file_location(name, path)
        if loaded is None or loaded.loader is None:
            raise ImportError(f"{spec} is not a Python file")
        module = importlib.util.module_from_spec(loaded)
        sys.modules[name] = module
        _cwd_importable()
        sys.path.insert(0, str(path.resolve().parent))  # the script's own imports
        try:
            loaded.loader.exec_module(module)
        finally:
            sys.path.remove(str(path.resolve().parent))
        return module
    except BadInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's module: any failure is theirs
        sys.modules.pop(Path(spec).stem if is_script(spec) else "", None)
        line = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise BadInputError(f"--import {spec}: cannot import it ({type(exc).__name__}: "
                            f"{line})") from exc


def main_classes(pickled: Sequence[str]) -> list[str]:
    """The `__main__.Name` globals among a pickle's globals: classes of the saving script."""
    return sorted({g for g in pickled if g.startswith(MAIN + ".")})


def main_pickle_module(modules: Sequence[types.ModuleType]) -> Any:
    """A `pickle` stand-in for torch.load(pickle_module=...) whose Unpickler looks `__main__`
    names up in `modules` (the user's --import / --model-factory modules), in order."""

    class Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if module == MAIN:
                for candidate in modules:
                    if hasattr(candidate, name):
                        return getattr(candidate, name)
            return super().find_class(module, name)

    shim: Any = types.ModuleType("export_gelu_pickle")  # attributes set below
    shim.Unpickler = Unpickler
    shim.load = pickle.load
    shim.__dict__["UnpicklingError"] = pickle.UnpicklingError
    return shim


def defined_in(modules: Sequence[types.ModuleType], qualified: str) -> bool:
    """Whether one of `modules` defines `__main__.Name`'s Name."""
    name = qualified.split(".", 1)[1].split(".")[0]
    return any(hasattr(m, name) for m in modules)
