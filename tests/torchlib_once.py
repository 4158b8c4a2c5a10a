"""torch's ONNX exporter reads onnxscript's torchlib once per test process, not once per export.

`torch.onnx.export(dynamo=True)` builds a registry of ATen-to-ONNX functions for every export
(torch/onnx/_internal/exporter/_registration.py, `ONNXRegistry.from_torchlib`). To fill it,
onnxscript's `get_torchlib_ops()` (onnxscript/_framework_apis/torch_2_5.py) re-reads the source
of about 500 traced functions to learn each one's domain (`TracedOnnxFunction.function_ir` is
a property that parses the source on every access): about one CPU second per export on this
project's machine, the same list every time. The tests export hundreds of times, so the
tests' processes keep the list (`functools.cache`, handed out as a new list each call); torch
still builds a fresh registry from it for each export, so what an export writes is unchanged
(tests/tooling/test_harness.py compares the kept list with a fresh one).

The product does not do this (a user's run exports once or a few times); where onnxscript has
no such function (another layout), nothing is kept.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

#: The module that defines `get_torchlib_ops`; onnxscript's other `torch_2_N` modules import
#: it from there, after it has run.
MODULE = "onnxscript._framework_apis.torch_2_5"


def _keep(module: types.ModuleType) -> None:
    """`module.get_torchlib_ops` computed once, a new list each call."""
    compute = getattr(module, "get_torchlib_ops", None)
    if compute is None or getattr(compute, "__kept__", False):
        return
    once = functools.cache(compute)

    @functools.wraps(compute)
    def get_torchlib_ops() -> list[Any]:
        return list(once())

    get_torchlib_ops.__kept__ = True  # type: ignore[attr-defined]
    module.get_torchlib_ops = get_torchlib_ops  # type: ignore[attr-defined]


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


def keep_torchlib_ops() -> None:
    """Keep onnxscript's torchlib list for the process: now if onnxscript's module is loaded,
    else when it is (tests/conftest.py, before any test imports it)."""
    if MODULE in sys.modules:
        _keep(sys.modules[MODULE])
    elif not any(isinstance(f, _AfterImport) and f.name == MODULE for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(MODULE, _keep))
