"""What each PyTorch module produced on a feed, from one run of the original model.

An `nn.Module` runs with forward hooks on its submodules. An ExportedProgram (`.pt2`) runs
its own graph through an fx Interpreter: each fx node records the modules it was called in
(`nn_module_stack`) and the line of the model that made it (`stack_trace`), so a module's
output is the value of the last node of its scope that a node outside it reads — the same
rule the ONNX side uses (`divergence.module_sites`). The weights are the model's own tensors
in both routes, never copies. A TorchScript module takes no hooks: it records nothing.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from export_gelu.graph.provenance import is_model_frame, source_in

if TYPE_CHECKING:
    from torch import fx, nn
    from torch.export import ExportedProgram

    from export_gelu.exporter.loading.loaded import LoadedModel


@dataclass
class ModuleOutput:
    """One module's output on the feed (float64) and the line of the model that made it."""

    name: str
    value: np.ndarray
    call_site: str = ""  # file.py:LINE, the innermost frame outside torch


def _hookable(loaded: LoadedModel) -> nn.Module | None:
    """An `nn.Module` (not TorchScript) whose submodules run as modules, or None."""
    import torch

    module = loaded.module
    if isinstance(module, torch.nn.Module) and not isinstance(module, torch.jit.ScriptModule):
        return module
    return None


def _scopes(node: fx.Node) -> list[str]:
    return [str(path) for path, _type in (node.meta.get("nn_module_stack") or {}).values()
            if path]


def module_names(loaded: LoadedModel | None) -> set[str] | None:
    """The module paths of the model (`named_modules`' names); None when it has no modules to
    compare (an ONNX or TorchScript model)."""
    if loaded is None or loaded.is_onnx:
        return None
    if loaded.exported is not None:
        return {s for n in loaded.exported.graph.nodes for s in _scopes(n)}
    root = _hookable(loaded)
    return None if root is None else {n for n, _ in root.named_modules() if n}


def record_module_outputs(loaded: LoadedModel, feed: Mapping[str, np.ndarray],
                          wanted: Collection[str], device: str = "cpu", *,
                          module: nn.Module | None = None
                          ) -> dict[str, ModuleOutput]:
    """The outputs of the modules named in `wanted` when the model runs on `feed` (as the
    deployed graph takes it); a module called more than once, or whose output is not one
    floating-point tensor, is left out. `module`: an `nn.Module` standing for the model (one
    computing as a Q/DQ graph, quantize/reference.py), run with hooks in its place."""
    if not wanted:
        return {}
    if module is not None:
        return _from_hooks(module, loaded, feed, set(wanted), device)
    if loaded.exported is not None:
        return _from_program(loaded.exported, feed, set(wanted))
    root = _hookable(loaded)
    return {} if root is None else _from_hooks(root, loaded, feed, set(wanted), device)


def _call_site() -> str:
    """`file:line` of the model's code that called the module being hooked, or ""."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if is_model_frame(frame.filename) and "polygraphy" not in frame.filename:
            return f"{frame.filename}:{frame.lineno}"
    return ""


def _from_hooks(root: nn.Module, loaded: LoadedModel, feed: Mapping[str, np.ndarray],
                wanted: set[str], device: str) -> dict[str, ModuleOutput]:
    import torch

    from export_gelu.check.runners.torch_runner import TorchRunner
    from export_gelu.exporter.inputs.call_plan import plan_for
    from export_gelu.exporter.loading.model_dtype import model_float_dtype

    seen: dict[str, ModuleOutput | None] = {}

    def hook_for(name: str) -> Callable[[nn.Module, tuple[object, ...], object], None]:
        def hook(_module: nn.Module, _args: tuple[object, ...], output: object) -> None:
            if name in seen or not (isinstance(output, torch.Tensor)
                                    and output.is_floating_point()):
                seen[name] = None  # called twice, or not one float tensor: not comparable
                return
            value = output.detach().to("cpu", torch.float64).numpy()
            seen[name] = ModuleOutput(name, value, _call_site())
        return hook

    handles = [m.register_forward_hook(hook_for(n)) for n, m in root.named_modules()
               if n in wanted]
    try:
        runner = TorchRunner(root, dict(feed), [], device=device, name="pytorch-modules",
                             float_dtype=model_float_dtype(root),
                             plan=plan_for(loaded, list(feed)))
        with runner:
            runner.infer(dict(feed))
    finally:
        for handle in handles:
            handle.remove()
    return {n: v for n, v in seen.items() if v is not None}


def _last_nodes(graph: fx.Graph, wanted: set[str]) -> dict[str, fx.Node]:
    """Module path → the last fx node of its scope whose value leaves the scope."""
    last: dict[str, fx.Node] = {}
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        for path in set(_scopes(node)) & wanted:
            if any(u.op == "output" or path not in _scopes(u) for u in node.users):
                last[path] = node
    return last


def _from_program(program: ExportedProgram, feed: Mapping[str, np.ndarray], wanted: set[str]
                  ) -> dict[str, ModuleOutput]:
    import torch
    from torch import fx
    from torch.utils._pytree import tree_leaves

    from export_gelu.exporter.onnx_export.to_onnx import quiet_exporter

    with quiet_exporter():
        gm = program.module()
    watch: dict[str, list[str]] = {}
    for path, node in _last_nodes(gm.graph, wanted).items():
        watch.setdefault(node.name, []).append(path)
    found: dict[str, ModuleOutput] = {}

    class Recorder(fx.Interpreter):
        def run_node(self, n: fx.Node) -> object:
            result = super().run_node(n)
            paths = watch.get(n.name, [])
            if paths and isinstance(result, torch.Tensor) and result.is_floating_point():
                value = result.detach().to("cpu", torch.float64).numpy()
                line = source_in(n.meta.get("stack_trace") or "") or ""
                found.update((p, ModuleOutput(p, value, line)) for p in paths)
            return result

    def tensor(a: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(np.ascontiguousarray(a))
        return t.float() if t.is_floating_point() and t.dtype != torch.float64 else t

    with torch.no_grad(), quiet_exporter():  # see check/runners/torch_runner.py
        Recorder(gm).run(*tree_leaves(tuple(tensor(a) for a in feed.values())))
    return found
