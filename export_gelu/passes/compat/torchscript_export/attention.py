"""aten.scaled_dot_product_attention → matmul / softmax primitives, for exports below opset 14.

The TorchScript exporter has no ONNX form for SDPA below opset 14, and HF transformers use
SDPA by default. This pass rewrites each SDPA node of an ExportedProgram in place into the
math it computes, with ops every opset and every TensorRT version here parse (no Where, no
IsNaN, no -inf):

    s      = sqrt(scale)                      # q and k scaled before the matmul (fp16-safe)
    scores = (q * s) @ (k * s)^T
    bool mask m:  scores + (1 - m) * BIG      # BIG = finfo(fp16).min / 2 = -32752
    float mask m: scores + max(m, BIG)
    is_causal:    the same with m = (j <= i)
    p      = softmax(scores, -1) * keep       # keep = 0 on rows that mask everything
    out    = p @ v

`exp(BIG - max) == 0` exactly, so every row that keeps at least one key gives the same values
as a -inf mask; fully masked rows give 0, as PyTorch's SDPA does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import fx
from torch.export import ExportedProgram
from torch.fx.node import Argument

from export_gelu.errors import TargetUnmetError

aten = torch.ops.aten
SDPA = aten.scaled_dot_product_attention.default

#: The masked-out bias: finite in fp16 (half its minimum), bf16 and fp32, so a fully masked
#: row never meets inf - inf; exp(scores + _BIG - max) is 0 in every one of them.
_BIG = torch.finfo(torch.float16).min / 2


def _val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, fx.Node) else None


def _arg(node: fx.Node, index: int, name: str, default: Any) -> Any:
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


#: Adds one aten call to the fx graph: (op, *args, **kwargs) -> the new node.
Emit = Callable[..., fx.Node]


#: The meta of the SDPA node every node emitted for it keeps: where it came from, so the
#: exporter writes the module and source line of the attention it computes.
_WHERE = ("nn_module_stack", "stack_trace")


def _emitter(graph: fx.Graph, origin: fx.Node) -> Emit:
    """An `Emit` for `graph` (calls land where `graph.inserting_before` says); each node
    emitted carries `origin`'s module stack and stack trace."""
    where = {k: origin.meta[k] for k in _WHERE if k in origin.meta}

    def emit(op: Callable[..., object], *args: Argument, **kwargs: Argument) -> fx.Node:
        node = graph.call_function(op, args, kwargs)
        node.meta.update(where)
        return node

    return emit


def _dim(e: Emit, t: fx.Node, axis: int) -> int | fx.Node:
    """Size of `t` along `axis`: an int when static, else a `sym_size` node."""
    size = _val(t).shape[axis]
    return size if isinstance(size, int) else e(aten.sym_size.int, t, axis)


def _repeat_heads(e: Emit, t: fx.Node, groups: int) -> fx.Node:
    """(B, Hk, S, E) → (B, Hk*groups, S, E), head h repeated `groups` times (GQA): a Gather
    with the constant index [0, …, 0, 1, …] (Expand would bring Where in)."""
    heads = int(_val(t).shape[-3])
    index = e(aten.div.Tensor_mode, e(aten.arange.default, heads * groups, dtype=torch.int64),
              groups, rounding_mode="floor")
    return e(aten.index_select.default, t, -3, index)


def _lower_one(graph: fx.Graph, node: fx.Node) -> None:
    # the op's schema makes these three tensors, so graph nodes
    q, k, v = cast(tuple[fx.Node, fx.Node, fx.Node], node.args[:3])
    mask = _arg(node, 3, "attn_mask", None)
    dropout_p = float(_arg(node, 4, "dropout_p", 0.0))
    is_causal = bool(_arg(node, 5, "is_causal", False))
    scale = _arg(node, 6, "scale", None)
    gqa = bool(_arg(node, 7, "enable_gqa", False))
    qv = _val(q)
    if qv is None:
        raise TargetUnmetError("scaled_dot_product_attention without shape metadata cannot be "
                               "lowered below opset 14")
    if dropout_p:
        raise TargetUnmetError(f"attention with dropout_p={dropout_p} (a model in training "
                               "mode?) cannot be exported for inference")
    big = _BIG
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(int(qv.shape[-1]))
    s = math.sqrt(scale)
    e = _emitter(graph, node)
    with graph.inserting_before(node):
        if gqa and _val(k).shape[-3] != qv.shape[-3]:
            groups = int(qv.shape[-3] // _val(k).shape[-3])
            k, v = _repeat_heads(e, k, groups), _repeat_heads(e, v, groups)
        qs = e(aten.mul.Tensor, q, s)
        ks = e(aten.mul.Tensor, k, s)
        scores = e(aten.matmul.default, qs, e(aten.transpose.int, ks, -2, -1))
        keep = None
        if is_causal:
            n_q, n_k = _dim(e, q, -2), _dim(e, k, -2)
            rows = e(aten.arange.default, n_q, dtype=torch.int64)
            cols = e(aten.arange.default, n_k, dtype=torch.int64)
            mask = e(aten.le.Tensor, e(aten.unsqueeze.default, cols, 0),
                     e(aten.unsqueeze.default, rows, 1))
        if mask is not None and (is_causal or _val(mask).dtype == torch.bool):
            m = e(aten.to.other, mask, scores)  # the dtype scores have when traced
            bias = e(aten.mul.Tensor, e(aten.rsub.Scalar, m, 1.0), big)
            keep = e(aten.amax.default, m, [-1], True)
            scores = e(aten.add.Tensor, scores, bias)
        elif mask is not None:
            bias = e(aten.clamp.default, mask, big)
            keep = e(aten.to.other, e(aten.gt.Scalar, e(aten.amax.default, mask, [-1], True),
                                      float("-inf")), scores)
            scores = e(aten.add.Tensor, scores, bias)
        probs = e(aten.softmax.int, scores, -1)
        if keep is not None:
            probs = e(aten.mul.Tensor, probs, keep)
        out = e(aten.matmul.default, probs, v)
    out.meta.update({k_: v_ for k_, v_ in node.meta.items() if k_ in ("val", "nn_module_stack",
                                                                       "stack_trace")})
    node.replace_all_uses_with(out)
    graph.erase_node(node)


def lower_attention(program: ExportedProgram) -> int:
    """Rewrite every SDPA node of an ExportedProgram in place; returns how many."""
    gm = program.graph_module
    nodes = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is SDPA]
    for node in nodes:
        _lower_one(gm.graph, node)
    if nodes:
        gm.graph.lint()
        gm.recompile()
    return len(nodes)
