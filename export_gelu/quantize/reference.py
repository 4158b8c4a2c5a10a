"""PyTorch running the same quantization as a Q/DQ graph: the fake-quant reference.

Inside `fake_quantized(module, products)`, each module whose ONNX product the graph
quantizes (found through the node metadata, `graph/provenance.py`) computes with
- its weight fake-quantized at the graph's weight scales, per channel along the axis that
  is the graph's channel axis in the module's own layout (nn.Linear's [out, in] is the
  transpose of MatMul's [K, N]; Conv and transformers' Conv1D match the graph's layout);
- its input fake-quantized at the graph's activation scale, per tensor (a forward pre-hook);
and everything else in float32, as the graph. The weights are put back on leaving. The
weight is the module's own (not the graph's), so a graph whose scale disagrees with its own
integers (a DequantizeLinear scale ×4) is seen as wrong.

torch is imported here only; the rest of `export_gelu.quantize` edits graphs without it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from export_gelu.quantize.formats import FP8
from export_gelu.quantize.read_qdq import QdqProduct

if TYPE_CHECKING:
    import torch
    from torch import nn


@dataclass
class Mirrored:
    """What the reference mirrors of the graph: the modules, and the products it could not."""

    modules: list[str] = field(default_factory=list)
    unmirrored: list[str] = field(default_factory=list)  # "node: why"


def _fake(x: torch.Tensor, scale: torch.Tensor, precision: str,
          axis: int | None) -> torch.Tensor:
    import torch

    if axis is not None and scale.ndim == 1:
        shape = [1] * x.ndim
        shape[axis] = scale.numel()
        scale = scale.reshape(shape)
    if precision == "fp8":
        q = torch.clamp(x / scale, -FP8.qmax, FP8.qmax).to(torch.float8_e4m3fn)
        return q.to(x.dtype) * scale
    return torch.clamp(torch.round(x / scale), -128, 127) * scale


def _match_weight(module: nn.Module, product: QdqProduct
                  ) -> tuple[Any, int | None, np.ndarray] | str:
    """(the module's parameter, its channel axis in the module's layout, its values in the
    graph's layout) for the graph's weight, or why none matches: the parameter closest in
    value, as is or transposed."""
    weight = product.weight
    if weight is None:
        return "the graph's weight is not a readable constant"
    best: tuple[float, Any, int | None, np.ndarray] | None = None
    for param in module.parameters(recurse=False):
        p = param.detach().cpu().numpy()
        layouts = [(p, False)]
        if p.ndim == 2:
            layouts.append((p.T, True))
        for view, transposed in layouts:
            if view.shape != weight.shape:
                continue
            err = float(np.max(np.abs(view - weight))) if weight.size else 0.0
            axis = product.weight_axis
            if transposed and axis is not None:
                axis = 1 - axis
            if best is None or err < best[0]:
                best = (err, param, axis, view)
    if best is None:
        return "no parameter of its module has the graph's weight shape"
    # How far a dequantized weight may be from the float one: half an INT8 step, or FP8's
    # relative half-step (2**-4) at the largest value a scale maps (448·scale).
    scale = float(np.max(product.weight_scale)) if product.weight_scale is not None else 0.0
    tolerance = scale * (0.51 if product.precision == "int8" else FP8.qmax / 16 * 1.05)
    if best[0] > max(1e-5, tolerance):
        return f"no parameter of its module holds the graph's weight (off by {best[0]:.3g})"
    return best[1], best[2], best[3]


def _submodule(module: nn.Module, path: str) -> nn.Module | None:
    """`module`'s submodule at `path`, or None; a ScriptModule has no get_submodule, so its
    named modules are searched."""
    try:
        return module.get_submodule(path)
    except AttributeError:
        return None
    except RuntimeError:  # "get_submodule is not supported on ScriptModules"
        return dict(module.named_modules()).get(path)


@contextmanager
def fake_quantized(module: nn.Module, products: Sequence[QdqProduct]) -> Iterator[Mirrored]:
    """`module` computing, for the block, as the Q/DQ graph `products` (read_qdq) say."""
    import torch

    mirrored = Mirrored()
    saved: list[tuple[Any, torch.Tensor]] = []
    hooks: list[Any] = []
    seen: set[str] = set()
    try:
        for product in products:
            if product.module is None:
                mirrored.unmirrored.append(f"{product.node}: no module recorded")
                continue
            sub = _submodule(module, product.module)
            if sub is None:
                mirrored.unmirrored.append(f"{product.node}: no module {product.module!r}")
                continue
            if product.module in seen:
                mirrored.unmirrored.append(f"{product.node}: {product.module} has another "
                                           "quantized product")
                continue
            match = _match_weight(sub, product) if product.weight_scale is not None else None
            if isinstance(match, str):
                mirrored.unmirrored.append(f"{product.node}: {match}")
                continue
            seen.add(product.module)
            with torch.no_grad():
                if match is not None:
                    param, axis, _ = match
                    saved.append((param, param.data.clone()))
                    scale = torch.tensor(np.array(product.weight_scale), dtype=param.dtype)
                    param.data = _fake(param.data, scale, product.precision, axis)
            if product.activation_scale is not None:
                hooks.append(sub.register_forward_pre_hook(
                    _input_hook(product.activation_scale, product.precision)))
            mirrored.modules.append(product.module)
        yield mirrored
    finally:
        for hook in hooks:
            hook.remove()
        with torch.no_grad():
            for param, data in saved:
                param.data = data


def _input_hook(scale: float, precision: str) -> Any:
    import torch

    def hook(_: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        if not args or not isinstance(args[0], torch.Tensor) or not args[0].is_floating_point():
            return None
        s = torch.tensor(scale, dtype=args[0].dtype)
        return (_fake(args[0], s, precision, None), *args[1:])

    return hook


def float_weights(module: nn.Module, products: Sequence[QdqProduct]) -> dict[str, np.ndarray]:
    """The module's own float weight, in the graph's layout, for each quantized weight of
    the graph it matches (by the graph tensor the weight comes from): what the graph computes
    without its Q/DQ (the form's own error, quantize/judge.py). A weight no parameter holds
    (a wrong scale among them) is left out."""
    found: dict[str, np.ndarray] = {}
    for product in products:
        if product.weight_scale is None or product.module is None:
            continue
        sub = _submodule(module, product.module)
        if sub is None:
            continue
        match = _match_weight(sub, product)
        if not isinstance(match, str):
            found[product.weight_name] = np.array(match[2], dtype=np.float32)  # a copy
    return found
