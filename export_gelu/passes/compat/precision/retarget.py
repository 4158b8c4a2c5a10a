"""An exported graph module in fp16/bf16: its float32 literals and constants retargeted too.

`module.to(torch.float16)` casts parameters and buffers, but a module unlifted from an
ExportedProgram also holds what tracing baked in for float32: `dtype=torch.float32`
arguments (`aten.to`, `aten._to_copy`, `aten.full` …), float32 tensor constants (lifted
tensors such as an empty KV cache) and `_assert_tensor_metadata(dtype=float32)` checks. Left
alone they make the fp16 module mix dtypes and fail. This pass retargets them all to the
requested dtype, so the graph computes in one precision, as a TensorRT fp16 build would. A
float32 upcast the model's author wrote deliberately (say, in a norm) is retargeted as well:
export from the nn.Module itself to keep it.

Float literals beyond the target type's range are clamped to its largest finite value:
masks written with `torch.finfo(torch.float32).min` (DeBERTa, T5, many others) would make an
fp16 `masked_fill`/`full` fail ("value cannot be converted to type c10::Half without
overflow"), and float32 constants holding such values would turn into ±inf. A large negative
finite mask bias stays a large negative bias (−65504 in fp16), which softmax treats the same.
`clamped_literals(gm)` lists the nodes changed, for the report.
"""

from __future__ import annotations

import torch
from torch import fx
from torch.export import ExportedProgram
from torch.fx.node import Argument

_ASSERT_METADATA = getattr(torch.ops.aten, "_assert_tensor_metadata", None)


def _retarget_dtype_args(node: fx.Node, dtype: torch.dtype,
                         source: torch.dtype = torch.float32) -> bool:
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return False
    args, kwargs = list(node.args), dict(node.kwargs)
    changed = False
    for i, arg in enumerate(schema.arguments):
        if arg.name != "dtype":
            continue
        if i < len(args) and args[i] is source:
            args[i] = dtype
            changed = True
        elif kwargs.get("dtype") is source:
            kwargs["dtype"] = dtype
            changed = True
    if changed:
        node.args, node.kwargs = tuple(args), kwargs
    return changed


def _clamp(value: Argument, dtype: torch.dtype) -> Argument:
    """A float literal (or a list of them) clamped to `dtype`'s finite range; ±inf stay."""
    if isinstance(value, (list, tuple)):
        return type(value)(_clamp(v, dtype) for v in value)
    if isinstance(value, float) and value == value and abs(value) != float("inf"):
        top = torch.finfo(dtype).max
        return max(-top, min(top, value))
    return value


def _clamp_literals(node: fx.Node, dtype: torch.dtype) -> bool:
    args = tuple(_clamp(a, dtype) for a in node.args)
    kwargs = {k: _clamp(v, dtype) for k, v in node.kwargs.items() if k != "dtype"}
    kwargs.update({k: v for k, v in node.kwargs.items() if k == "dtype"})
    if args == tuple(node.args) and kwargs == dict(node.kwargs):
        return False
    node.args, node.kwargs = args, kwargs
    node.meta["export_gelu_clamped"] = str(dtype).replace("torch.", "")
    return True


def _clamped_tensor(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`value` cast to `dtype`, its finite values beyond the range clamped first."""
    top = torch.finfo(dtype).max
    finite = torch.isfinite(value)
    if bool((finite & (value.abs() > top)).any()):
        value = torch.where(finite, value.clamp(-top, top), value)
    return value.to(dtype)


def clamped_literals(gm: fx.GraphModule) -> list[str]:
    """Names of the nodes whose float literals `retarget_precision` clamped."""
    return [n.name for n in gm.graph.nodes if "export_gelu_clamped" in n.meta]


def _cast_constant(gm: fx.GraphModule, target: str, dtype: torch.dtype,
                   source: torch.dtype = torch.float32) -> bool:
    *path, name = target.split(".")
    owner: object = gm
    for part in path:
        owner = getattr(owner, part)
    value = getattr(owner, name, None)
    if not isinstance(value, torch.Tensor) or value.dtype != source:
        return False
    cast = _clamped_tensor(value, dtype)
    if isinstance(value, torch.nn.Parameter):
        cast = torch.nn.Parameter(cast, requires_grad=value.requires_grad)
    setattr(owner, name, cast)
    return True


def retarget_precision(gm: fx.GraphModule, dtype: torch.dtype,
                       source: torch.dtype = torch.float32) -> int:
    """Retarget `source` (float32) literals, constants and dtype checks of `gm` to `dtype`,
    in place (`source` float64: a float64 model cast down, `exporter/capture/cast_down.py`).

    Parameters and buffers are expected to be cast already (`module.to(dtype)`); returns the
    number of nodes and constants changed.
    """
    changed = 0
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op == "get_attr":
            changed += _cast_constant(gm, str(node.target), dtype, source)
        elif node.op == "call_function":
            if _ASSERT_METADATA is not None and node.target in (
                    _ASSERT_METADATA.default,) and not node.users:
                graph.erase_node(node)
                changed += 1
            elif _retarget_dtype_args(node, dtype, source) | _clamp_literals(node, dtype):
                changed += 1
    if changed:
        graph.lint()
        gm.recompile()
    return changed


def retarget_program(program: ExportedProgram, dtype: torch.dtype) -> int:
    """The same for a captured ExportedProgram, in place: its graph's float32 literals and
    its float32 lifted constants (a TorchScript model converted with TS2EPConverter keeps the
    dtypes its trace recorded). Returns the number of nodes and constants changed."""
    changed = retarget_precision(program.graph_module, dtype)
    for name, value in list(program.constants.items()):
        if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
            program.constants[name] = _clamped_tensor(value, dtype)
            changed += 1
    return changed
