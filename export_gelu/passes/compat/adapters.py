"""Opset adapters: rewrite one node from a newer op version to the form an older opset takes.

`onnx.version_converter` has no adapter for several changes real transformer exports hit
(Split 18 `num_outputs`, Reduce* axes-as-input at 18, LayerNormalization, …) and stops at the
first one. Each adapter here handles one op's changes across the versions it spans and
returns the replacement nodes, already in the target opset's form; an adapter that cannot
keep the math raises `CannotConvert` with the reason. Ops whose newer versions only widen
the allowed types need no adapter: the converter checks their attributes, inputs and types
against the target schema instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx

from export_gelu.passes.compat.graph import GraphEditor, attr_value, clone, drop_attr, set_attr
from export_gelu.passes.compat.layernorm import expand_layernorm


class CannotConvert(Exception):
    """This node cannot be expressed at the target opset without changing its math."""


@dataclass
class Step:
    """One down-conversion: where the node lives and which opsets it spans."""

    ed: GraphEditor
    src: int  # the model's opset
    tgt: int  # the opset to reach

    def crosses(self, version: int) -> bool:
        """True when an op version introduced at `version` is above the target, below src."""
        return self.tgt < version <= self.src


Adapter = Callable[[onnx.NodeProto, Step], list[onnx.NodeProto]]
ADAPTERS: dict[str, Adapter] = {}


def adapts(*ops: str) -> Callable[[Adapter], Adapter]:
    def register(fn: Adapter) -> Adapter:
        for op in ops:
            ADAPTERS[op] = fn
        return fn
    return register


def _const_input(node: onnx.NodeProto, index: int, step: Step, what: str) -> np.ndarray | None:
    """The constant value of input `index` (None when absent); raises when computed."""
    if len(node.input) <= index or not node.input[index]:
        return None
    value = step.ed.constant(node.input[index])
    if value is None:
        raise CannotConvert(f"its {what} is computed at run time; opset {step.tgt} needs it as "
                            "an attribute")
    return value


def _trim_inputs(node: onnx.NodeProto, keep: int) -> None:
    del node.input[keep:]


def _rank(name: str, step: Step) -> int | None:
    vt = step.ed.type_of(name)
    return None if vt is None else vt.rank


# -- axes as inputs (Reduce*, Squeeze, Unsqueeze, Split) → attributes ----------------------

_REDUCE_AXES_INPUT = {"ReduceSum": 13, **{op: 18 for op in (
    "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")}}


@adapts(*_REDUCE_AXES_INPUT)
def reduce_axes_to_attribute(node: onnx.NodeProto, step: Step) -> list[onnx.NodeProto]:
    """Reduce*(X, axes) → Reduce*(X) with `axes` attribute; empty axes + noop → Identity."""
    if not step.crosses(_REDUCE_AXES_INPUT[node.op_type]):
        return [node]
    new = clone(node)
    axes = _const_input(node, 1, step, "axes input")
    noop = int(attr_value(node, "noop_with_empty_axes", 0))
    drop_attr(new, "noop_with_empty_axes")
    _trim_inputs(new, 1)
    if axes is None or axes.size == 0:
        if noop:
            return [step.ed.node("Identity", [node.input[0]], node.name,
                                 outputs=list(node.output))]
        return [new]  # no axes: reduce over all dimensions, as before
    set_attr(new, "axes", [int(a) for a in axes.reshape(-1)])
    return [new]


@adapts("Squeeze", "Unsqueeze")
def squeeze_axes_to_attribute(node: onnx.NodeProto, step: Step) -> list[onnx.NodeProto]:
    if not step.crosses(13):
        return [node]
    new = clone(node)
    axes = _const_input(node, 1, step, "axes input")
    _trim_inputs(new, 1)
    if axes is not None:
        set_attr(new, "axes", [int(a) for a in axes.reshape(-1)])
    elif node.op_type == "Unsqueeze":
        raise CannotConvert("Unsqueeze without axes")
    return [new]


@adapts("Split")
def split_sizes(node: onnx.NodeProto, step: Step) -> list[onnx.NodeProto]:
    """Split-18 `num_outputs` → explicit sizes; Split-13 `split` input → attribute below 13."""
    new = clone(node)
    n_out = len(node.output)
    sizes = None
    if step.crosses(18) and attr_value(node, "num_outputs") is not None:
        n_out = int(attr_value(node, "num_outputs"))
        drop_attr(new, "num_outputs")
        axis = int(attr_value(node, "axis", 0))
        vt = step.ed.type_of(node.input[0])
        dim = None
        if vt is not None and vt.shape is not None and -len(vt.shape) <= axis < len(vt.shape):
            d = vt.shape[axis]
            dim = d if isinstance(d, int) and d > 0 else None
        if dim is not None and dim % n_out:
            chunk = -(-dim // n_out)  # Split-18 makes the last chunk the smaller one
            sizes = [chunk] * (n_out - 1) + [dim - chunk * (n_out - 1)]
        elif dim is None:
            raise CannotConvert(f"num_outputs={n_out} on an axis of unknown size")
        # evenly divisible: older Split splits equally by the number of outputs
    else:
        split = _const_input(node, 1, step, "split input")
        sizes = None if split is None else [int(s) for s in split.reshape(-1)]
    _trim_inputs(new, 1)
    if sizes is not None:
        if step.tgt >= 13:
            new.input.append(step.ed.const(np.array(sizes, np.int64), f"{node.name}_split"))
        else:
            set_attr(new, "split", sizes)
    return [new]


# -- ops whose inputs or attributes changed shape -------------------------------------------

@adapts("Pad")
def pad_axes(node: onnx.NodeProto, step: Step) -> list[onnx.NodeProto]:
    """Pad-18 `axes` input → full-rank pads; Pad-19 `wrap` mode has no older form."""
    if step.crosses(19) and attr_value(node, "mode", b"constant") in (b"wrap", "wrap"):
        raise CannotConvert("mode 'wrap' exists from opset 19")
    if not step.crosses(18) or len(node.input) < 4 or not node.input[3]:
        return [node]
    axes = _const_input(node, 3, step, "axes input")
    pads = _const_input(node, 1, step, "pads input")
    rank = _rank(node.input[0], step)
    if rank is None or pads is None or axes is None:
        raise CannotConvert("pads on selected axes of an input of unknown rank")
    full = np.zeros(2 * rank, np.int64)
    n = len(axes)
    for i, a in enumerate(int(x) % rank for x in axes.reshape(-1)):
        full[a], full[a + rank] = pads[i], pads[i + n]
    new = clone(node)
    _trim_inputs(new, 3)
    new.input[1] = step.ed.const(full, f"{node.name}_pads")
    return [new]


@adapts("Resize")
def resize_inputs(node: onnx.NodeProto, step: Step) -> list[onnx.NodeProto]:
    """Resize-18/19 options without older forms are refused; Resize-11 needs roi and scales."""
    new = clone(node)
    if step.crosses(19) and attr_value(node, "coordinate_transformation_mode", b"") in (
            b"half_pixel_symmetric", "half_pixel_symmetric"):
        raise CannotConvert("coordinate_transformation_mode 'half_pixel_symmetric' exists from "
                            "opset 19")
    if step.crosses(18) and attr_value(node, "axes") is not None:
        raise CannotConvert("the 'axes' attribute exists from opset 18")
    if step.crosses(13):
        while len(new.input) < 3:
            new.input.append("")
        for i in (1, 2):  # roi and scales are required inputs before 13; empty means unused
            if not new.input[i]:
                new.input[i] = step.ed.const(np.zeros(0, np.float32), f"{node.name}_empty")
    return [new]


@adapts("Shape")
def shape_start_end(node: onnx.NodeProto, step: Step) -> list[onnx.NodeProto]:
    """Shape-15 `start`/`end` → Shape + Slice."""
    start, end = attr_value(node, "start"), attr_value(node, "end")
    if not step.crosses(15) or (start is None and end is None):
        return [node]
    ed = step.ed
    full = ed.node("Shape", [node.input[0]], node.name)
    begin = ed.const(np.array([start or 0], np.int64), f"{node.name}_start")
    stop = ed.const(np.array([end if end is not None else np.iinfo(np.int64).max], np.int64),
                    f"{node.name}_end")
    cut = ed.node("Slice", [full.output[0], begin, stop], node.name, outputs=list(node.output))
    return [full, cut]


@adapts("Softmax", "LogSoftmax", "Hardmax")
def softmax_axis(node: onnx.NodeProto, step: Step) -> list[onnx.NodeProto]:
    """Version 13 normalizes along one axis; older versions flatten from `axis` onward.

    They agree when the axis is the last one; otherwise the axis is moved last and back.
    """
    if not step.crosses(13):
        return [node]
    rank = _rank(node.input[0], step)
    axis = int(attr_value(node, "axis", -1))
    if axis == -1 or (rank is not None and axis == rank - 1):
        new = clone(node)
        set_attr(new, "axis", -1)
        return [new]
    if rank is None:
        raise CannotConvert(f"axis {axis} on an input of unknown rank")
    axis %= rank
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    ed = step.ed
    t_in = ed.node("Transpose", [node.input[0]], node.name, perm=perm)
    op = ed.node(node.op_type, [t_in.output[0]], node.name, axis=-1)
    t_out = ed.node("Transpose", [op.output[0]], node.name, outputs=list(node.output),
                    perm=perm)
    return [t_in, op, t_out]


@adapts("Constant")
def constant_value(node: onnx.NodeProto, step: Step) -> list[onnx.NodeProto]:
    """Constant-12 `value_float(s)` / `value_int(s)` → a `value` tensor."""
    if not step.crosses(12):
        return [node]
    value = step.ed.constant(node.output[0])
    if value is None or attr_value(node, "value") is not None:
        return [node]
    return [onnx.helper.make_node("Constant", [], list(node.output), name=node.name,
                                  value=onnx.numpy_helper.from_array(value))]


@adapts("Dropout")
def dropout_to_identity(node: onnx.NodeProto, step: Step) -> list[onnx.NodeProto]:
    """Inference-mode Dropout is the identity; a used mask or training mode is refused."""
    if len(node.output) > 1 and node.output[1]:
        raise CannotConvert("its mask output is used")
    training = _const_input(node, 2, step, "training_mode input")
    if training is not None and bool(training):
        raise CannotConvert("training_mode is on")
    return [step.ed.node("Identity", [node.input[0]], node.name, outputs=[node.output[0]])]


@adapts("Cast")
def cast_saturate(node: onnx.NodeProto, step: Step) -> list[onnx.NodeProto]:
    """Cast-19 `saturate` only affects float8 targets, which older opsets cannot name anyway."""
    if not step.crosses(19) or attr_value(node, "saturate") is None:
        return [node]
    new = clone(node)
    drop_attr(new, "saturate")
    return [new]


@adapts("GridSample")
def grid_sample_modes(node: onnx.NodeProto, step: Step) -> list[onnx.NodeProto]:
    """GridSample-20 mode names → the GridSample-16 names; N-d sampling is refused."""
    if not step.crosses(20):
        return [node]
    rank = _rank(node.input[0], step)
    if rank is not None and rank != 4:
        raise CannotConvert("only 4-D GridSample exists before opset 20")
    new = clone(node)
    mode = attr_value(node, "mode", b"linear")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    set_attr(new, "mode", {"linear": "bilinear", "cubic": "bicubic"}.get(mode, mode))
    return [new]


@adapts("GroupNormalization")
def group_norm(node: onnx.NodeProto, step: Step) -> list[onnx.NodeProto]:
    if step.crosses(21):
        raise CannotConvert("GroupNormalization-18 scales per group, -21 per channel")
    return [node]


@adapts("GreaterOrEqual", "LessOrEqual")
def or_equal_as_not(node: onnx.NodeProto, step: Step) -> list[onnx.NodeProto]:
    """GreaterOrEqual / LessOrEqual (opset 12) → Not(Less) / Not(Greater): the same on
    integers (a dynamic export's size and position comparisons); on floats NaN compares
    false both ways, so there they are refused."""
    if not step.crosses(12):
        return [node]
    for name in node.input:
        vt = step.ed.type_of(name)
        if vt is None or not vt.elem_type or vt.elem_type in _FLOAT_TYPES:
            raise CannotConvert("it compares floats (or tensors of unknown type), where "
                                "Not(Less) differs on NaN")
    strict = "Less" if node.op_type == "GreaterOrEqual" else "Greater"
    test = step.ed.node(strict, list(node.input), node.name)
    return [test, step.ed.node("Not", [test.output[0]], node.name, outputs=list(node.output))]


_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                onnx.TensorProto.BFLOAT16}


@adapts("LayerNormalization")
def layernorm_primitives(node: onnx.NodeProto, step: Step) -> list[onnx.NodeProto]:
    if not step.crosses(17):
        return [node]
    return expand_layernorm(step.ed, node, step.tgt)


#: Ops that pass sizes through, or combine them into sizes that stay >= 1 (data input first).
_SIZE_KEEPING = {"Concat": None, "Mul": None, "Add": None, "Unsqueeze": 1, "Squeeze": 1,
                 "Cast": 1, "Identity": 1, "Gather": 1, "Slice": 1, "Reshape": 1}


def _nonzero_sizes(name: str, step: Step, producers: dict[str, onnx.NodeProto],
                   depth: int = 0) -> bool:
    """True when tensor `name` is built only from tensor sizes (`Shape`) and constants without
    a 0: a dynamic shape such as Concat(Shape(x)[0], Shape(x)[1], 4, 16). Sizes of the
    non-empty tensors a `--dynamic` range (MIN >= 1) allows are never 0."""
    value = step.ed.constant(name)
    if value is not None:
        return not (value == 0).any()
    node = producers.get(name)
    if node is None or depth > 12:
        return False
    if node.op_type == "Shape":
        return True
    if node.op_type not in _SIZE_KEEPING:
        return False
    reads = node.input if _SIZE_KEEPING[node.op_type] is None else node.input[:1]
    return all(_nonzero_sizes(i, step, producers, depth + 1) for i in reads if i)


@adapts("Reshape")
def reshape_allowzero(node: onnx.NodeProto, step: Step) -> list[onnx.NodeProto]:
    """Reshape-14 `allowzero=1` only differs from older Reshape when the shape holds a 0:
    never for a constant shape without 0, nor for one built from tensor sizes (the dynamo
    exporter's dynamic Reshape)."""
    if not step.crosses(14) or not attr_value(node, "allowzero", 0):
        return [node]
    producers = {o: n for n in step.ed.graph.node for o in n.output}
    if not _nonzero_sizes(node.input[1], step, producers):
        raise CannotConvert("allowzero=1 with a shape that may hold 0")
    new = clone(node)
    drop_attr(new, "allowzero")
    return [new]
