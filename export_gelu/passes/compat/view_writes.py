"""Writes into views (`x[..., 0] = y`) of an ExportedProgram made functional for the
TorchScript exporter.

torch.export keeps `x[..., 0] = y` as `copy_(select(x, -1, 0), y)` in its graph. Traced
through `program.module()`, the TorchScript exporter drops that write: the ONNX graph reads
`x` as it was before it (SAM's point coordinates, divided by the image size in place, came
out unscaled). This pass rewrites each such `copy_` into the tensor it makes, with ops every
opset has:

    select(x, d, i) ← y:        cat([x[:i], y.unsqueeze(d), x[i+1:]], d)
    slice(x, d, a, b) ← y:      cat([x[:a], y, x[b:]], d)

applied from the written view out to its base, and every later use of the base reads the
new tensor. A write this pass cannot follow (a view kept from before the write and read
after it, a strided slice, a symbolic size) is left as it was.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from export_gelu.passes.compat.attention import _emitter, _val

aten = torch.ops.aten
_COPY = aten.copy_.default
_SELECT = aten.select.int
_SLICE = aten.slice.Tensor
_VIEWS = (_SELECT, _SLICE)


def _chain(dst: fx.Node) -> list[fx.Node] | None:
    """The select/slice views from `dst` back to its base (innermost first), or None."""
    chain: list[fx.Node] = []
    node: Any = dst
    while isinstance(node, fx.Node) and node.op == "call_function" and node.target in _VIEWS:
        chain.append(node)
        node = node.args[0]
    return chain if chain and isinstance(node, fx.Node) else None


def _bounds(view: fx.Node) -> tuple[int, int, int] | None:
    """(dim, start, end) of `view` in its parent, all static and normalized; None if not."""
    parent = _val(view.args[0])
    if parent is None:
        return None
    dim = int(view.args[1]) % parent.dim()
    size = parent.shape[dim]
    if not isinstance(size, int):
        return None
    if view.target is _SELECT:
        index = int(view.args[2])
        index = index + size if index < 0 else index
        return (dim, index, index + 1) if 0 <= index < size else None
    start = view.args[2] if len(view.args) > 2 else None
    end = view.args[3] if len(view.args) > 3 else None
    step = view.args[4] if len(view.args) > 4 else 1
    if step != 1 or not all(isinstance(v, int | None) for v in (start, end)):
        return None
    lo, hi, _ = slice(start, end).indices(size)
    return dim, lo, max(lo, hi)


def _scatter(emit: Any, view: fx.Node, value: fx.Node) -> fx.Node:
    """The parent of `view` with `value` written where `view` looks (`_bounds` known)."""
    bounds = _bounds(view)
    assert bounds is not None
    dim, lo, hi = bounds
    parent = view.args[0]
    size = _val(parent).shape[dim]
    if view.target is _SELECT:
        value = emit(aten.unsqueeze.default, value, dim)
    pieces = []
    if lo > 0:
        pieces.append(emit(_SLICE, parent, dim, 0, lo))
    pieces.append(value)
    if hi < size:
        pieces.append(emit(_SLICE, parent, dim, hi, size))
    if len(pieces) == 1:
        return value
    out = emit(aten.cat.default, pieces, dim)
    out.meta["val"] = _val(parent)  # its shape and dtype, for a later write into it
    return out


def _later(graph: fx.Graph, node: fx.Node) -> set[fx.Node]:
    order = list(graph.nodes)
    return set(order[order.index(node) + 1:])


def _rewrite(graph: fx.Graph, copy: fx.Node) -> bool:
    dst, src = copy.args[0], copy.args[1]
    chain = _chain(dst)
    dv, sv = _val(dst), _val(src) if isinstance(src, fx.Node) else None
    if copy.users or chain is None or dv is None or sv is None:
        return False
    if not all(isinstance(s, int) for s in dv.shape) or any(_bounds(v) is None for v in chain):
        return False
    base = chain[-1].args[0]
    later = _later(graph, copy)
    # a view of base taken before the write and read after it would see the old values
    if any(u in later for v in chain for u in v.users):
        return False
    emit = _emitter(graph, copy)
    with graph.inserting_before(copy):
        value = src
        if sv.dtype != dv.dtype:
            value = emit(aten.to.dtype, value, dv.dtype)
        if tuple(sv.shape) != tuple(dv.shape):
            value = emit(aten.expand.default, value, list(dv.shape))
        for view in chain:
            value = _scatter(emit, view, value)
    for user in [u for u in base.users if u in later]:
        user.replace_input_with(base, value)
    graph.erase_node(copy)
    return True


def functionalize_view_writes(program: Any) -> int:
    """Rewrite every `copy_` into a select/slice view of an ExportedProgram; how many."""
    gm = program.graph_module
    copies = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is _COPY]
    done = sum(_rewrite(gm.graph, n) for n in copies)
    if done:
        gm.graph.lint()
        gm.recompile()
    return done
