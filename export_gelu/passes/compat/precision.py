"""An exported graph module in fp16/bf16: its float32 literals and constants retargeted too.

`module.to(torch.float16)` casts parameters and buffers, but a module unlifted from an
ExportedProgram also holds what tracing baked in for float32: `dtype=torch.float32`
arguments (`aten.to`, `aten._to_copy`, `aten.full` …), float32 tensor constants (lifted
tensors such as an empty KV cache) and `_assert_tensor_metadata(dtype=float32)` checks. Left
alone they make the fp16 module mix dtypes and fail. This pass retargets them all to the
requested dtype, so the graph computes in one precision, as a TensorRT fp16 build would. A
float32 upcast the model's author wrote deliberately (say, in a norm) is retargeted as well:
export from the nn.Module itself to keep it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

_ASSERT_METADATA = getattr(torch.ops.aten, "_assert_tensor_metadata", None)


def _retarget_dtype_args(node: fx.Node, dtype: torch.dtype) -> bool:
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return False
    args, kwargs = list(node.args), dict(node.kwargs)
    changed = False
    for i, arg in enumerate(schema.arguments):
        if arg.name != "dtype":
            continue
        if i < len(args) and args[i] is torch.float32:
            args[i] = dtype
            changed = True
        elif kwargs.get("dtype") is torch.float32:
            kwargs["dtype"] = dtype
            changed = True
    if changed:
        node.args, node.kwargs = tuple(args), kwargs
    return changed


def _cast_constant(gm: fx.GraphModule, target: str, dtype: torch.dtype) -> bool:
    *path, name = target.split(".")
    owner: Any = gm
    for part in path:
        owner = getattr(owner, part)
    value = getattr(owner, name, None)
    if not isinstance(value, torch.Tensor) or value.dtype != torch.float32:
        return False
    cast = value.to(dtype)
    if isinstance(value, torch.nn.Parameter):
        cast = torch.nn.Parameter(cast, requires_grad=value.requires_grad)
    setattr(owner, name, cast)
    return True


def retarget_precision(gm: fx.GraphModule, dtype: torch.dtype) -> int:
    """Retarget float32 literals, constants and dtype checks of `gm` to `dtype`, in place.

    Parameters and buffers are expected to be cast already (`module.to(dtype)`); returns the
    number of nodes and constants changed.
    """
    changed = 0
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op == "get_attr":
            changed += _cast_constant(gm, str(node.target), dtype)
        elif node.op == "call_function":
            if _ASSERT_METADATA is not None and node.target in (
                    _ASSERT_METADATA.default,) and not node.users:
                graph.erase_node(node)
                changed += 1
            elif _retarget_dtype_args(node, dtype):
                changed += 1
    if changed:
        graph.lint()
        gm.recompile()
    return changed


def retarget_program(program: Any, dtype: torch.dtype) -> int:
    """The same for a captured ExportedProgram, in place: its graph's float32 literals and
    its float32 lifted constants (a TorchScript model converted with TS2EPConverter keeps the
    dtypes its trace recorded). Returns the number of nodes and constants changed."""
    changed = retarget_precision(program.graph_module, dtype)
    for name, value in list(program.constants.items()):
        if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
            program.constants[name] = value.to(dtype)
            changed += 1
    return changed
