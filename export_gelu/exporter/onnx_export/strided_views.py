"""`as_strided` lowered by the TorchScript exporter against the layout it was traced on.

`x.as_strided(size, stride)` reads `x`'s memory: element (i, j, …) of the result is the one
at memory offset i·stride[0] + j·stride[1] + … from `x`'s first element. torch's own lowering
(`symbolic_opset9.as_strided`) writes it as a Gather on `x` flattened in its *logical* order,
which is the same only when `x` is contiguous. A view that is not (Longformer's
`q.transpose(1, 2).reshape(b·h, s, d)`, a view whose batch and head dims merge) comes out
reading the wrong elements: the graph is silently wrong, by as much as the values it mixes up
differ (2% of Longformer's output under random weights).

The trace knows the layout: each traced value's type carries the strides eager had. This
module's lowering maps the memory offsets `as_strided` reads back to `x`'s logical indices
through those strides (a constant Gather, static sizes) and, where it cannot (sizes or
strides not static, or an offset outside `x`'s own elements), stops the export with that
reason rather than writing a graph that reads other elements. A contiguous input keeps
torch's own lowering (dynamic sizes included).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from torch._C import Value
    from torch.onnx._internal.torchscript_exporter.jit_utils import GraphContext

_OP = "aten::as_strided"


class StridedLoweringError(ValueError):
    """`as_strided` on a layout the graph cannot reproduce (the exporter's cause)."""


def contiguous_strides(sizes: Sequence[int]) -> list[int]:
    """Strides of a contiguous tensor of `sizes`."""
    strides, step = [], 1
    for size in reversed(sizes):
        strides.append(step)
        step *= max(size, 1)
    return strides[::-1]


def logical_indices(in_sizes: Sequence[int], in_strides: Sequence[int], out_sizes: Sequence[int],
                    out_strides: Sequence[int], offset: int = 0) -> np.ndarray:
    """For each element of `as_strided(out_sizes, out_strides, offset)` on a tensor laid out
    as (`in_sizes`, `in_strides`), the index of the element it reads in that tensor flattened
    in logical order. Raises StridedLoweringError when it reads memory outside the tensor."""
    logical = np.arange(int(np.prod(in_sizes, dtype=np.int64)), dtype=np.int64)
    memory = np.zeros(logical.shape, np.int64)
    if logical.size:
        memory = sum((grid * stride for grid, stride in
                      zip(np.indices(tuple(in_sizes), np.int64), in_strides)),
                     np.zeros(tuple(in_sizes), np.int64)).reshape(-1)
    span = int(memory.max()) + 1 if memory.size else 0
    where = np.full(span, -1, np.int64)
    where[memory] = logical  # an element stored twice (stride 0) holds one value: either index
    read = offset + sum((grid * stride for grid, stride in
                         zip(np.indices(tuple(out_sizes), np.int64), out_strides)),
                        np.zeros(tuple(out_sizes), np.int64))
    if read.size and (read.min() < 0 or read.max() >= span or (where[read] < 0).any()):
        raise StridedLoweringError(
            f"as_strided(size={list(out_sizes)}, stride={list(out_strides)}) reads memory "
            f"outside its input (sizes {list(in_sizes)}, strides {list(in_strides)}): no "
            "ONNX graph reads the same elements")
    return where[read] if read.size else read


def _traced_layout(value: object) -> tuple[list[int], list[int]] | None:
    """The sizes and strides the trace recorded for a value, when both are complete."""
    kind = getattr(value, "type", lambda: None)()
    try:
        sizes, strides = kind.sizes(), kind.strides()  # type: ignore[union-attr]
    except (AttributeError, RuntimeError):
        return None
    if sizes is None or strides is None or None in sizes or None in strides:
        return None
    return list(sizes), list(strides)


def _static_ints(value: Value) -> list[int] | None:
    from torch.onnx._internal.torchscript_exporter import symbolic_helper

    if symbolic_helper._is_value(value) and not symbolic_helper._is_constant(value):
        return None
    got = symbolic_helper._maybe_get_const(value, "is")
    return [int(v) for v in got] if isinstance(got, (list, tuple)) else None


def _traced_output(g: GraphContext) -> tuple[list[int], list[int]] | None:
    """The sizes and strides the trace recorded for the `as_strided` being lowered."""
    node = getattr(g, "original_node", None)
    return _traced_layout(node.output()) if node is not None else None


def _traced_input(g: GraphContext) -> tuple[list[int], list[int]] | None:
    """The layout the trace recorded for the tensor `as_strided` reads (the value the lowering
    receives is the ONNX one, whose type shape inference may have left without sizes)."""
    node = getattr(g, "original_node", None)
    return _traced_layout(node.inputsAt(0)) if node is not None else None


def as_strided_lowering(static: bool) -> Callable[..., Value]:
    """The lowering registered for `aten::as_strided` while the TorchScript exporter runs;
    `static`: no axis of the export is dynamic, so the sizes the trace saw are the graph's."""

    def as_strided(g: GraphContext, self: Value, sizes: Value, strides: Value,
                   offset: Value | None = None) -> Value:
        import torch
        from torch.onnx._internal.torchscript_exporter import symbolic_helper, symbolic_opset9

        layout = _traced_input(g) or _traced_layout(self)
        if layout is not None and layout[1] == contiguous_strides(layout[0]):
            return symbolic_opset9.as_strided(g, self, sizes, strides, offset)
        out_sizes, out_strides = _static_ints(sizes), _static_ints(strides)
        traced = _traced_output(g) if static else None
        if traced is not None:
            out_sizes = out_sizes if out_sizes is not None else traced[0]
            out_strides = out_strides if out_strides is not None else traced[1]
        if layout is None or out_sizes is None or out_strides is None:
            raise StridedLoweringError(
                "as_strided on a tensor that is not contiguous"
                + (" (its layout was not traced)" if layout is None else
                   " at sizes that vary with a dynamic axis")
                + ": the graph would read other elements than eager PyTorch (export with "
                "static shapes)")
        start = 0 if offset is None or symbolic_helper._is_none(offset) else \
            symbolic_helper._maybe_get_const(offset, "i")
        if not isinstance(start, int):
            raise StridedLoweringError("as_strided with a storage offset that is not static")
        index = logical_indices(layout[0], layout[1], out_sizes, out_strides, start)
        flat = g.op("Reshape", self,
                    g.op("Constant", value_t=torch.tensor([-1], dtype=torch.int64)))
        return g.op("Gather", flat, g.op("Constant", value_t=torch.from_numpy(index)))

    return as_strided


@contextlib.contextmanager
def layout_true_as_strided(opset: int, static: bool) -> Iterator[None]:
    """`as_strided_lowering` in place of torch's lowering for one TorchScript export."""
    import torch

    torch.onnx.register_custom_op_symbolic(_OP, as_strided_lowering(static), opset)
    try:
        yield
    finally:
        torch.onnx.unregister_custom_op_symbolic(_OP, opset)
