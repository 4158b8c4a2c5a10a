"""Writes into views (`x[..., 0] = y`) of an ExportedProgram made functional for the
TorchScript exporter.

torch.export keeps `x[..., 0] = y` as `copy_(select(x, -1, 0), y)` in its graph. Traced
through `program.module()`, the TorchScript exporter drops that write: the ONNX graph reads
`x` as it was before it (SAM's point coordinates, divided by the image size in place, came
out unscaled). This pass rewrites each such `copy_` into the tensor it makes, with ops every
opset has:

    select(x, d, i) ← y:        cat([x[:i], y.unsqueeze(d), x[i+1:]], d)
    slice(x, d, a, b) ← y:      cat([x[:a], y, x[b:]], d)

applied from the written view out to its base; every later use of the base, or of a view
of it taken before the write, reads the new tensor. A write this pass cannot follow (a
strided slice, a symbolic size, a write into another kind of view) is left as it was.
"""

from __future__ import annotations

import torch
from torch import fx
from torch.export import ExportedProgram

from export_gelu.passes.compat.torchscript_export.attention import Emit, _emitter, _val

aten = torch.ops.aten
#: The in-place writes followed: `copy_(dst, src)` and `fill_(dst, value)`.
_WRITES = (aten.copy_.default, aten.fill_.Tensor, aten.fill_.Scalar)
_SELECT = aten.select.int
_SLICE = aten.slice.Tensor
_VIEWS = (_SELECT, _SLICE)


def _chain(dst: fx.Node) -> list[fx.Node] | None:
    """The select/slice views from `dst` back to its base (innermost first), or None."""
    chain: list[fx.Node] = []
    node: object = dst
    while isinstance(node, fx.Node) and node.op == "call_function" and node.target in _VIEWS:
        chain.append(node)
        node = node.args[0]
    return chain if chain and isinstance(node, fx.Node) else None


def _bounds(view: fx.Node) -> tuple[int, int, int] | None:
    """(dim, start, end) of `view` in its parent, all static and normalized; None if not."""
    parent = _val(view.args[0])
    if parent is None or not isinstance(view.args[1], int):
        return None
    dim = view.args[1] % parent.dim()
    size = parent.shape[dim]
    if not isinstance(size, int):
        return None
    if view.target is _SELECT:
        index = view.args[2]
        if not isinstance(index, int):
            return None  # a symbolic index
        index = index + size if index < 0 else index
        return (dim, index, index + 1) if 0 <= index < size else None
    start = view.args[2] if len(view.args) > 2 else None
    end = view.args[3] if len(view.args) > 3 else None
    step = view.args[4] if len(view.args) > 4 else 1
    if step != 1 or not all(isinstance(v, int | None) for v in (start, end)):
        return None
    lo, hi, _ = slice(start, end).indices(size)
    return dim, lo, max(lo, hi)


def _scatter(emit: Emit, view: fx.Node, value: fx.Node) -> fx.Node:
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


def _aliases(node: fx.Node) -> bool:
    """Whether `node` returns a view of its input (torch's schema says so)."""
    schema = getattr(node.target, "_schema", None)
    returns = schema.returns if schema is not None else []
    return (node.op == "call_function" and node.target not in _WRITES and len(returns) == 1
            and returns[0].alias_info is not None)


def _views_of(base: fx.Node, later: set[fx.Node]) -> list[fx.Node]:
    """The views of `base` (views of views too) defined before the write, parents first."""
    found: list[fx.Node] = []
    todo = [base]
    while todo:
        for user in todo.pop(0).users:
            if user not in later and _aliases(user) and user not in found:
                found.append(user)
                todo.append(user)
    return found


def _rewrite(graph: fx.Graph, copy: fx.Node) -> bool:
    dst, src = copy.args[0], copy.args[1]
    if not isinstance(dst, fx.Node):
        return False  # (_chain would say None)
    chain = _chain(dst)
    dv = _val(dst)
    sv = _val(src) if isinstance(src, fx.Node) else None
    scalar = copy.target is aten.fill_.Scalar
    if copy.users or chain is None or dv is None or (sv is None and not scalar):
        return False
    if not all(isinstance(s, int) for s in dv.shape) or any(_bounds(v) is None for v in chain):
        return False
    base = chain[-1].args[0]
    assert isinstance(base, fx.Node)  # _chain ends at a node
    later = _later(graph, copy)
    # views of base taken before the write and read after it would show the old values:
    # each is taken again from the written tensor
    stale = _views_of(base, later)
    emit = _emitter(graph, copy)
    with graph.inserting_before(copy):
        if scalar:
            value = emit(aten.full.default, list(dv.shape), src, dtype=dv.dtype)
        else:
            assert isinstance(src, fx.Node) and sv is not None  # sv is src's value
            value = src
            if sv.dtype != dv.dtype:
                value = emit(aten.to.dtype, value, dv.dtype)
            if tuple(sv.shape) != tuple(dv.shape):
                value = emit(aten.expand.default, value, list(dv.shape))
        for view in chain:
            value = _scatter(emit, view, value)
        again: dict[fx.Node, fx.Node] = {base: value}
        for view in stale:  # parents first: a view's parent is taken again before it
            taken_from = view.args[0]
            assert isinstance(taken_from, fx.Node)  # a view's input is a tensor
            parent = again.get(taken_from, taken_from)
            again[view] = emit(view.target, parent, *view.args[1:])
            again[view].meta["val"] = _val(view)
    for old_node, new_node in again.items():
        for user in [u for u in old_node.users if u in later]:
            user.replace_input_with(old_node, new_node)
    graph.erase_node(copy)
    for view in reversed(stale):  # taken again but read by nothing after the write
        if not again[view].users:
            graph.erase_node(again[view])
    return True


def functionalize_view_writes(program: ExportedProgram) -> int:
    """Rewrite every `copy_`/`fill_` into a select/slice view of an ExportedProgram in place;
    returns how many."""
    gm = program.graph_module
    copies = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in _WRITES]
    done = sum(_rewrite(gm.graph, n) for n in copies)
    if done:
        gm.graph.lint()
        gm.recompile()
    return done
