"""torch's ONNX exporter builds its ATen-to-ONNX registry once per test process, not once per
export.

`torch.onnx.export(dynamo=True)` builds a registry of ATen-to-ONNX functions for every export
(`ONNXRegistry.from_torchlib`, torch/onnx/_internal/exporter/_registration.py): onnxscript's
`get_torchlib_ops()` re-reads the source of about 500 traced functions to learn each one's
domain (`TracedOnnxFunction.function_ir` parses the source on every access), then torch
builds a signature for each of about 540 functions. That is about a CPU second per export on
this project's machine, the same registry every time. The tests export hundreds of times, so
the tests' processes keep the first registry built for each set of arguments and hand each
export a copy (its tables copied, so what an export registers stays its own); the functions
and their signatures are the same objects torch would build again, so what an export writes
is unchanged (tests/tooling/test_harness.py compares a copy with a fresh registry).

The product does not do this (a user's run exports once or a few times); where torch has no
such method (another layout), nothing is kept.
"""

from __future__ import annotations

import copy
import functools
import importlib.abc
import importlib.machinery
import inspect
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

#: The module that defines the registry.
MODULE = "torch.onnx._internal.exporter._registration"


def _copy(registry: Any) -> Any:
    """A registry of the same class whose tables (dicts, lists, sets, and the lists a dict
    holds) are new, the functions in them shared."""
    new = object.__new__(type(registry))
    for name, value in vars(registry).items():
        if isinstance(value, dict):
            value = {k: copy.copy(v) if isinstance(v, (list, set, dict)) else v
                     for k, v in value.items()}
        elif isinstance(value, (list, set)):
            value = copy.copy(value)
        setattr(new, name, value)
    return new


def _keep(module: types.ModuleType) -> None:
    """`module.ONNXRegistry.from_torchlib` built once per arguments, a copy each call."""
    cls = getattr(module, "ONNXRegistry", None)
    method = inspect.getattr_static(cls, "from_torchlib", None) if cls else None
    build = getattr(method, "__func__", None)
    if build is None or getattr(build, "__kept__", False):
        return
    built: dict[Any, Any] = {}

    @functools.wraps(build)
    def from_torchlib(klass: type, *args: Any, **kwargs: Any) -> Any:
        key = (klass, args, tuple(sorted(kwargs.items())))
        try:
            hash(key)
        except TypeError:
            return build(klass, *args, **kwargs)
        if key not in built:
            built[key] = build(klass, *args, **kwargs)
        return _copy(built[key])

    from_torchlib.__kept__ = True  # type: ignore[attr-defined]
    cls.from_torchlib = classmethod(from_torchlib)  # type: ignore[union-attr]


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `patch(module)` once `name` has been imported (then leaves sys.meta_path)."""

    def __init__(self, name: str, patch: Callable[[types.ModuleType], None]) -> None:
        self.name, self.patch = name, patch

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        run = getattr(loader, "exec_module", None)
        if run is None:
            return spec

        def exec_module(module: types.ModuleType) -> None:
            run(module)
            self.patch(module)

        loader.exec_module = exec_module  # type: ignore[union-attr]
        return spec


def keep_torchlib_registry() -> None:
    """Keep torch's registry for the process: now if its module is loaded, else when it is
    (tests/conftest.py, before any test imports it)."""
    if MODULE in sys.modules:
        _keep(sys.modules[MODULE])
    elif not any(isinstance(f, _AfterImport) and f.name == MODULE for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(MODULE, _keep))
