"""What each PyTorch module produced on a feed: forward hooks on the original model, one call.

A `.pt2` program runs unflattened (`torch.export.unflatten`), so its submodules are called as
modules and their hooks fire; its parameters are the program's own tensors, not copies. A
TorchScript module takes no hooks: it records nothing.
"""

from __future__ import annotations

import traceback
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class ModuleOutput:
    """One module's output on the feed (float64) and the line of the model that called it."""

    name: str
    value: np.ndarray
    call_site: str = ""  # file.py:LINE, the innermost frame outside torch


def hookable_module(loaded: Any) -> Any:
    """The model as a module whose submodules run as modules (hooks fire), or None."""
    import torch

    if loaded.exported is not None:
        return torch.export.unflatten(loaded.exported)
    module = loaded.module
    if isinstance(module, torch.nn.Module) and not isinstance(module, torch.jit.ScriptModule):
        return module
    return None


def _call_site() -> str:
    """`file:line` of the model's code that called the module being hooked, or ""."""
    from export_gelu.graph.provenance import is_model_frame

    for frame in reversed(traceback.extract_stack()[:-2]):
        if is_model_frame(frame.filename) and "/polygraphy/" not in frame.filename:
            return f"{frame.filename}:{frame.lineno}"
    return ""


def program_sources(exported: Any) -> dict[str, str]:
    """Module path → `file.py:LINE` of its last op, from an ExportedProgram's own records
    (each fx node's `nn_module_stack` and `stack_trace`): an unflattened program's calls
    run generated code, so a hook cannot see the model's lines."""
    from export_gelu.graph.provenance import source_in

    sources: dict[str, str] = {}
    for node in exported.graph.nodes:
        stack = node.meta.get("nn_module_stack") or {}
        line = source_in(node.meta.get("stack_trace") or "") or ""
        if not line:
            continue
        for path, _type in stack.values():
            if path:
                sources[str(path)] = line
    return sources


def record_module_outputs(root: Any, loaded: Any, feed: Mapping[str, np.ndarray],
                          wanted: Collection[str], device: str = "cpu"
                          ) -> dict[str, ModuleOutput]:
    """The outputs of `root`'s (`hookable_module(loaded)`) modules named in `wanted` (paths
    as `named_modules` gives them) when the model runs on `feed` (as the deployed graph
    takes it); a module called more than once, or returning anything but one floating-point
    tensor, is left out."""
    import torch

    from export_gelu.check.torch_runner import TorchRunner
    from export_gelu.exporter.call_plan import plan_for
    from export_gelu.exporter.model_dtype import model_float_dtype

    if root is None or not wanted:
        return {}
    seen: dict[str, ModuleOutput | None] = {}
    wanted = set(wanted)

    def hook_for(name: str) -> Any:
        def hook(_module: Any, _args: Any, output: Any) -> None:
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
    found = {n: v for n, v in seen.items() if v is not None}
    if loaded.exported is not None:
        for name, line in program_sources(loaded.exported).items():
            if name in found:
                found[name].call_site = line
    return found
