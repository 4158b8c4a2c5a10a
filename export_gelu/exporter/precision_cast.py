"""The cast to a run's precision: each precision's dtype, inputs cast (`cast_args`), and a
module's cast copy (`cast_copy`), whose weights derived from weights are computed in float32
before the cast (`fold_weights`, below).

A weight-normalized convolution (`weight_norm`: weight = g · v / ‖v‖, wav2vec2, HuBERT,
SEW, SEW-D's positional conv) computes its weight from two parameters on every call. Cast
to fp16 first, that computation runs in fp16: the dynamo exporter writes it as ONNX ops
whose constant folding sums the squares in fp16, and the folded weight is off by several
fp16 ulps (SEW-D: 2.6e-4 on weights of scale 0.1, where the float32 weight rounded once to
fp16 is off by 1.5e-5 and `model.half()` in PyTorch by 4.6e-5). Computing such weights in
float32 and casting the result once gives the weight a float32 model has, rounded once.

For an `nn.Module` the parametrizations (and old-style `weight_norm` hooks) of the copy
about to be cast are baked into plain parameters; for a module unlifted from an
ExportedProgram (an fx GraphModule) each computation that reads only parameters and
buffers, and yields no more values than it reads, is evaluated and stored as a buffer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, overload

import torch
from torch import fx

if TYPE_CHECKING:
    from export_gelu.exporter.torch_values import PyTree

#: Each precision's dtype. "fp64" is not a `--precision`: it is fp32's meaning for a float64
#: model (its own dtype).
PRECISION_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
                    "fp64": torch.float64}


@overload
def cast_args(args: tuple[torch.Tensor, ...], precision: str) -> tuple[torch.Tensor, ...]: ...
@overload
def cast_args(args: tuple[PyTree, ...], precision: str) -> tuple[PyTree, ...]: ...
def cast_args(args: tuple[PyTree, ...], precision: str) -> tuple[PyTree, ...]:
    """Floating tensors cast to the precision's dtype; other values unchanged."""
    dtype = PRECISION_DTYPES[precision]
    return tuple(a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                 for a in args)


def _bake_parametrizations(module: torch.nn.Module) -> int:
    """Parametrized tensors and `weight_norm` hooks of `module` baked into plain
    parameters, in place; the number baked."""
    from torch.nn.utils import parametrize

    baked = 0
    for sub in list(module.modules()):
        if parametrize.is_parametrized(sub):
            baked += _bake_one(sub)
        for key, hook in list(sub._forward_pre_hooks.items()):
            remove = getattr(hook, "remove", None)
            if type(hook).__name__ == "WeightNorm" and callable(remove):  # old weight_norm
                remove(sub)
                del sub._forward_pre_hooks[key]
                baked += 1
    return baked


def _bake_one(sub: torch.nn.Module) -> int:
    """`sub`'s parametrized tensors as plain parameters, in place; the number baked.

    Not `remove_parametrizations`: it deletes the property from the module's class, which a
    deep copy shares with the original (the original would lose its `weight`). The copy gets
    its own class back instead: parametrize derives the class it installs from the
    module's own."""
    with torch.no_grad():
        names = [name for name, _ in sub.get_submodule("parametrizations").named_children()]
        values = {name: getattr(sub, name).detach().clone() for name in names}
    del sub._modules["parametrizations"]
    sub.__class__ = sub.__class__.__bases__[0]
    for name, value in values.items():
        sub.register_parameter(name, torch.nn.Parameter(value, requires_grad=False))
    return len(values)


def _attr(gm: fx.GraphModule, target: str) -> torch.Tensor | None:
    """The tensor `target` (a dotted get_attr path) names in `gm`; None when no tensor."""
    owner: object = gm
    for part in target.split("."):
        owner = getattr(owner, part)
    return owner if isinstance(owner, torch.Tensor) else None


def _weight_only_nodes(gm: fx.GraphModule) -> dict[fx.Node, int]:
    """Nodes computed from parameters and buffers only → how many values they read."""
    read: dict[fx.Node, int] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = _attr(gm, str(node.target))
            if isinstance(value, torch.Tensor):
                read[node] = value.numel()
        elif node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            schema = node.target._schema
            if schema.is_mutable or torch.Tag.nondeterministic_seeded in node.target.tags:
                continue
            inputs = node.all_input_nodes
            if inputs and all(i in read for i in inputs):
                read[node] = sum(read[i] for i in inputs)
    return read


def _fold_graph(gm: fx.GraphModule) -> int:
    """Each float computation of `gm` that reads only its weights and is read by the rest
    of the graph, evaluated (in the module's dtype) and stored as a buffer; the number."""
    read = _weight_only_nodes(gm)
    frontier = [n for n in read if n.op == "call_function"
                and any(u not in read for u in n.users)]
    if not frontier:
        return 0
    values: dict[fx.Node, torch.fx.node.Argument] = {}
    for node in gm.graph.nodes:  # topological order
        if node not in read:
            continue
        if node.op == "get_attr":
            values[node] = _attr(gm, str(node.target))
        else:
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda a: values[a])
            with torch.no_grad():
                values[node] = node.target(*args, **kwargs)
    folded = 0
    for i, node in enumerate(frontier):
        value = values[node]
        if (not isinstance(value, torch.Tensor) or not value.is_floating_point()
                or value.numel() > read[node]):
            continue
        name = f"_export_gelu_weight_{i}"
        gm.register_buffer(name, value.detach().clone())
        with gm.graph.inserting_before(node):
            attr = gm.graph.get_attr(name)
        attr.meta = dict(node.meta)
        node.replace_all_uses_with(attr)
        folded += 1
    if folded:
        for node in reversed(list(read)):  # what only the folded nodes read
            if not node.users:
                gm.graph.erase_node(node)
        gm.graph.lint()
        gm.recompile()
    return folded


def fold_weights(module: torch.nn.Module) -> int:
    """`module` (a copy about to be cast to fp16/bf16) with its weights computed from
    weights made plain, in its current (float32) precision, in place; the number made."""
    if isinstance(module, torch.jit.ScriptModule):
        return 0  # its graph is fixed by its trace
    if isinstance(module, fx.GraphModule):
        return _fold_graph(module) + _bake_parametrizations(module)
    if isinstance(module, torch.nn.Module):
        return _bake_parametrizations(module)
    return 0


def cast_copy(module: torch.nn.Module, precision: str) -> torch.nn.Module:
    """A copy of `module` computing in `precision` (fp16/bf16), its derived weights computed
    in float32 first (fold_weights); `module` stays as it is."""
    import copy

    cast = copy.deepcopy(module)
    fold_weights(cast)
    return cast.to(PRECISION_DTYPES[precision])
