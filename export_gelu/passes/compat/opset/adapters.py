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
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from export_gelu import graph as G
from export_gelu.passes.compat.layernorm.expand import expand_layernorm


class CannotConvert(Exception):
    """This node cannot be expressed at the target opset without changing its math."""


@dataclass
class Step:
    """One down-conversion: the graph the node lives in and which opsets it spans."""

    graph: gs.Graph  # the main graph, a subgraph, or a local function
    src: int  # the model's opset
    tgt: int  # the opset to reach
    #: () → tensor name → type, inferred on first use, before the node lists change (None:
    #: a local function, whose tensors inference does not type)
    types: Callable[[], dict[str, G.TensorType]] | None = None

    def crosses(self, version: int) -> bool:
        """True when an op version introduced at `version` is above the target, below src."""
        return self.tgt < version <= self.src

    def type_of(self, tensor: gs.Tensor | None) -> G.TensorType | None:
        if self.types is None or tensor is None or tensor.is_empty():
            return None
        return self.types().get(tensor.name)

    def inside(self, graph: gs.Graph) -> Step:
        """The same step for a subgraph."""
        return Step(graph, self.src, self.tgt, self.types)

    def const(self, values: np.ndarray, base: str) -> gs.Constant:
        return G.constant(self.graph, values, base)

    def node(self, op: str, inputs: list[gs.Tensor], base: str, **kw: Any) -> gs.Node:
        return G.node(self.graph, op, inputs, base=base, **kw)


Adapter = Callable[[gs.Node, Step], list[gs.Node]]
ADAPTERS: dict[str, Adapter] = {}


def adapts(*ops: str) -> Callable[[Adapter], Adapter]:
    def register(fn: Adapter) -> Adapter:
        for op in ops:
            ADAPTERS[op] = fn
        return fn
    return register


def _given(node: gs.Node, index: int) -> gs.Tensor | None:
    if len(node.inputs) > index and not node.inputs[index].is_empty():
        return node.inputs[index]
    return None


def _const_input(node: gs.Node, index: int, step: Step, what: str) -> np.ndarray | None:
    """The constant value of input `index` (None when absent); raises when computed."""
    tensor = _given(node, index)
    if tensor is None:
        return None
    value = G.value(tensor)
    if value is None:
        raise CannotConvert(f"its {what} is computed at run time; opset {step.tgt} needs it as "
                            "an attribute")
    return value


def _rank(tensor: gs.Tensor, step: Step) -> int | None:
    vt = step.type_of(tensor)
    return None if vt is None else vt.rank


def _text(node: gs.Node, name: str, default: str) -> str:
    value = node.attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else str(value)


# -- axes as inputs (Reduce*, Squeeze, Unsqueeze, Split) → attributes ----------------------

_REDUCE_AXES_INPUT = {"ReduceSum": 13, **{op: 18 for op in (
    "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")}}


@adapts(*_REDUCE_AXES_INPUT)
def reduce_axes_to_attribute(node: gs.Node, step: Step) -> list[gs.Node]:
    """Reduce*(X, axes) → Reduce*(X) with `axes` attribute; empty axes + noop → Identity."""
    if not step.crosses(_REDUCE_AXES_INPUT[node.op]):
        return [node]
    axes = _const_input(node, 1, step, "axes input")
    noop = int(node.attrs.get("noop_with_empty_axes", 0))
    if (axes is None or axes.size == 0) and noop:
        return [step.node("Identity", [node.inputs[0]], node.name, outputs=list(node.outputs))]
    new = G.clone(step.graph, node)
    new.attrs.pop("noop_with_empty_axes", None)
    G.trim_inputs(new, 1)
    if axes is not None and axes.size:
        new.attrs["axes"] = [int(a) for a in axes.reshape(-1)]
    return [new]  # no axes: reduce over all dimensions, as before


@adapts("Squeeze", "Unsqueeze")
def squeeze_axes_to_attribute(node: gs.Node, step: Step) -> list[gs.Node]:
    if not step.crosses(13):
        return [node]
    axes = _const_input(node, 1, step, "axes input")
    if axes is None and node.op == "Unsqueeze":
        raise CannotConvert("Unsqueeze without axes")
    new = G.clone(step.graph, node)
    G.trim_inputs(new, 1)
    if axes is not None:
        new.attrs["axes"] = [int(a) for a in axes.reshape(-1)]
    return [new]


@adapts("Split")
def split_sizes(node: gs.Node, step: Step) -> list[gs.Node]:
    """Split-18 `num_outputs` → explicit sizes; Split-13 `split` input → attribute below 13."""
    sizes = None
    drop_num_outputs = False
    if step.crosses(18) and node.attrs.get("num_outputs") is not None:
        n_out = int(node.attrs["num_outputs"])
        drop_num_outputs = True
        axis = int(node.attrs.get("axis", 0))
        vt = step.type_of(node.inputs[0])
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
    new = G.clone(step.graph, node)
    if drop_num_outputs:
        new.attrs.pop("num_outputs", None)
    G.trim_inputs(new, 1)
    if sizes is not None:
        if step.tgt >= 13:
            new.inputs.append(step.const(np.array(sizes, np.int64), f"{node.name}_split"))
        else:
            new.attrs["split"] = sizes
    return [new]


# -- ops whose inputs or attributes changed shape -------------------------------------------

@adapts("Pad")
def pad_axes(node: gs.Node, step: Step) -> list[gs.Node]:
    """Pad-18 `axes` input → full-rank pads; Pad-19 `wrap` mode has no older form."""
    if step.crosses(19) and _text(node, "mode", "constant") == "wrap":
        raise CannotConvert("mode 'wrap' exists from opset 19")
    if not step.crosses(18) or _given(node, 3) is None:
        return [node]
    axes = _const_input(node, 3, step, "axes input")
    pads = _const_input(node, 1, step, "pads input")
    rank = _rank(node.inputs[0], step)
    if rank is None or pads is None or axes is None:
        raise CannotConvert("pads on selected axes of an input of unknown rank")
    full = np.zeros(2 * rank, np.int64)
    n = len(axes)
    for i, a in enumerate(int(x) % rank for x in axes.reshape(-1)):
        full[a], full[a + rank] = pads[i], pads[i + n]
    new = G.clone(step.graph, node)
    G.trim_inputs(new, 3)
    G.set_input(new, 1, step.const(full, f"{node.name}_pads"))
    return [new]


@adapts("Resize")
def resize_inputs(node: gs.Node, step: Step) -> list[gs.Node]:
    """Resize-18/19 options without older forms are refused; Resize-11 needs roi and scales."""
    if step.crosses(19) and _text(node, "coordinate_transformation_mode",
                                  "") == "half_pixel_symmetric":
        raise CannotConvert("coordinate_transformation_mode 'half_pixel_symmetric' exists from "
                            "opset 19")
    if step.crosses(18) and node.attrs.get("axes") is not None:
        raise CannotConvert("the 'axes' attribute exists from opset 18")
    new = G.clone(step.graph, node)
    if step.crosses(13):
        while len(new.inputs) < 3:
            new.inputs.append(gs.Variable.empty())
        for i in (1, 2):  # roi and scales are required inputs before 13; empty means unused
            if new.inputs[i].is_empty():
                G.set_input(new, i, step.const(np.zeros(0, np.float32), f"{node.name}_empty"))
    return [new]


@adapts("Shape")
def shape_start_end(node: gs.Node, step: Step) -> list[gs.Node]:
    """Shape-15 `start`/`end` → Shape + Slice."""
    start, end = node.attrs.get("start"), node.attrs.get("end")
    if not step.crosses(15) or (start is None and end is None):
        return [node]
    full = step.node("Shape", [node.inputs[0]], node.name)
    begin = step.const(np.array([start or 0], np.int64), f"{node.name}_start")
    stop = step.const(np.array([end if end is not None else np.iinfo(np.int64).max], np.int64),
                      f"{node.name}_end")
    cut = step.node("Slice", [full.outputs[0], begin, stop], node.name,
                    outputs=list(node.outputs))
    return [full, cut]


@adapts("Softmax", "LogSoftmax", "Hardmax")
def softmax_axis(node: gs.Node, step: Step) -> list[gs.Node]:
    """Version 13 normalizes along one axis; older versions flatten from `axis` onward.

    They agree when the axis is the last one; otherwise the axis is moved last and back.
    """
    if not step.crosses(13):
        return [node]
    rank = _rank(node.inputs[0], step)
    axis = int(node.attrs.get("axis", -1))
    if axis == -1 or (rank is not None and axis == rank - 1):
        new = G.clone(step.graph, node)
        new.attrs["axis"] = -1
        return [new]
    if rank is None:
        raise CannotConvert(f"axis {axis} on an input of unknown rank")
    axis %= rank
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    t_in = step.node("Transpose", [node.inputs[0]], node.name, perm=perm)
    op = step.node(node.op, [t_in.outputs[0]], node.name, axis=-1)
    t_out = step.node("Transpose", [op.outputs[0]], node.name, outputs=list(node.outputs),
                      perm=perm)
    return [t_in, op, t_out]


@adapts("Constant")
def constant_value(node: gs.Node, step: Step) -> list[gs.Node]:
    """Constant-12 `value_float(s)` / `value_int(s)` → a `value` tensor."""
    if not step.crosses(12):
        return [node]
    value = G.value(node.outputs[0])
    if value is None or node.attrs.get("value") is not None:
        return [node]
    return [step.node("Constant", [], node.name, name=node.name, outputs=list(node.outputs),
                      value=gs.Constant("", np.asarray(value)))]


@adapts("Dropout")
def dropout_to_identity(node: gs.Node, step: Step) -> list[gs.Node]:
    """Inference-mode Dropout is the identity; a used mask or training mode is refused."""
    if len(node.outputs) > 1 and not node.outputs[1].is_empty():
        raise CannotConvert("its mask output is used")
    training = _const_input(node, 2, step, "training_mode input")
    if training is not None and bool(training):
        raise CannotConvert("training_mode is on")
    return [step.node("Identity", [node.inputs[0]], node.name, outputs=[node.outputs[0]])]


@adapts("Cast")
def cast_saturate(node: gs.Node, step: Step) -> list[gs.Node]:
    """Cast-19 `saturate` only affects float8 targets, which older opsets cannot name anyway."""
    if not step.crosses(19) or node.attrs.get("saturate") is None:
        return [node]
    new = G.clone(step.graph, node)
    new.attrs.pop("saturate", None)
    return [new]


@adapts("GridSample")
def grid_sample_modes(node: gs.Node, step: Step) -> list[gs.Node]:
    """GridSample-20 mode names → the GridSample-16 names; N-d sampling is refused."""
    if not step.crosses(20):
        return [node]
    rank = _rank(node.inputs[0], step)
    if rank is not None and rank != 4:
        raise CannotConvert("only 4-D GridSample exists before opset 20")
    new = G.clone(step.graph, node)
    mode = _text(node, "mode", "linear")
    new.attrs["mode"] = {"linear": "bilinear", "cubic": "bicubic"}.get(mode, mode)
    return [new]


@adapts("GroupNormalization")
def group_norm(node: gs.Node, step: Step) -> list[gs.Node]:
    if step.crosses(21):
        raise CannotConvert("GroupNormalization-18 scales per group, -21 per channel")
    return [node]


@adapts("GreaterOrEqual", "LessOrEqual")
def or_equal_as_not(node: gs.Node, step: Step) -> list[gs.Node]:
    """GreaterOrEqual / LessOrEqual (opset 12) → Not(Less) / Not(Greater): the same on
    integers (a dynamic export's size and position comparisons); on floats NaN compares
    false both ways, so there they are refused."""
    if not step.crosses(12):
        return [node]
    for tensor in node.inputs:
        vt = step.type_of(tensor)
        if vt is None or not vt.elem_type or vt.elem_type in _FLOAT_TYPES:
            raise CannotConvert("it compares floats (or tensors of unknown type), where "
                                "Not(Less) differs on NaN")
    strict = "Less" if node.op == "GreaterOrEqual" else "Greater"
    test = step.node(strict, list(node.inputs), node.name)
    return [test, step.node("Not", [test.outputs[0]], node.name, outputs=list(node.outputs))]


_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                onnx.TensorProto.BFLOAT16}


def _picks(node: gs.Node, step: Step, steps: list[tuple[str, gs.Tensor]]) -> list[gs.Node]:
    """`node`'s first input through Where(COMPARE(value, other), value, other) for each
    (COMPARE, other) of `steps` in turn (Greater keeps the larger: Max; Less the smaller:
    Min), the last writing `node`'s outputs; an Identity when `steps` is empty. Exact for
    every integer (Less, Greater and Where take them from opset 9), broadcasting as Max."""
    value, nodes = node.inputs[0], []
    for i, (compare, other) in enumerate(steps, start=1):
        test = step.node(compare, [value, other], node.name)
        pick = step.node("Where", [test.outputs[0], value, other], node.name,
                         **({"outputs": list(node.outputs)} if i == len(steps) else {}))
        nodes += [test, pick]
        value = pick.outputs[0]
    return nodes or [step.node("Identity", [value], node.name, outputs=list(node.outputs))]


def _integer_inputs(node: gs.Node, step: Step) -> bool:
    """Every given input of `node` has a known integer type (floats: the target's op takes
    them, and fit_schema checks)."""
    types = [step.type_of(t) for t in node.inputs if not t.is_empty()]
    return all(vt is not None and vt.elem_type and vt.elem_type not in _FLOAT_TYPES
               for vt in types)


@adapts("Clip")
def integer_clip_as_where(node: gs.Node, step: Step) -> list[gs.Node]:
    """Clip takes integers from opset 12 (DeBERTa's clamped relative positions): below it,
    Clip(x, lo, hi) on integers is Min(Max(x, lo), hi), each as `_picks` writes it."""
    if not step.crosses(12) or not _integer_inputs(node, step):
        return [node]
    bounds = [(compare, _given(node, index)) for index, compare in ((1, "Greater"),
                                                                     (2, "Less"))]
    return _picks(node, step, [(c, b) for c, b in bounds if b is not None])


@adapts("Max", "Min")
def integer_max_min_as_where(node: gs.Node, step: Step) -> list[gs.Node]:
    """Max and Min take integers from opset 12 (a decoder's mask and size arithmetic on
    int64): below it each pair as `_picks` writes it."""
    if not step.crosses(12) or not _integer_inputs(node, step):
        return [node]
    compare = "Greater" if node.op == "Max" else "Less"
    return _picks(node, step, [(compare, other) for other in node.inputs[1:]])


@adapts("LayerNormalization")
def layernorm_primitives(node: gs.Node, step: Step) -> list[gs.Node]:
    if not step.crosses(17):
        return [node]
    return expand_layernorm(step.graph, node, step.tgt, step.type_of)


#: Ops that pass sizes through, or combine them into sizes that stay >= 1 (data input first).
_SIZE_KEEPING = {"Concat": None, "Mul": None, "Add": None, "Unsqueeze": 1, "Squeeze": 1,
                 "Cast": 1, "Identity": 1, "Gather": 1, "Slice": 1, "Reshape": 1}


def _nonzero_sizes(tensor: gs.Tensor, depth: int = 0) -> bool:
    """True when `tensor` is built only from tensor sizes (`Shape`) and constants without a
    0: a dynamic shape such as Concat(Shape(x)[0], Shape(x)[1], 4, 16). Sizes of the
    non-empty tensors a `--dynamic` range (MIN >= 1) allows are never 0."""
    value = G.value(tensor)
    if value is not None:
        return not (value == 0).any()
    node = G.producer(tensor)
    if node is None or depth > 12:
        return False
    if node.op == "Shape":
        return True
    if node.op not in _SIZE_KEEPING:
        return False
    reads = node.inputs if _SIZE_KEEPING[node.op] is None else node.inputs[:1]
    return all(_nonzero_sizes(i, depth + 1) for i in reads if not i.is_empty())


@adapts("Reshape")
def reshape_allowzero(node: gs.Node, step: Step) -> list[gs.Node]:
    """Reshape-14 `allowzero=1` only differs from older Reshape when the shape holds a 0:
    never for a constant shape without 0, nor for one built from tensor sizes (the dynamo
    exporter's dynamic Reshape)."""
    if not step.crosses(14) or not node.attrs.get("allowzero", 0):
        return [node]
    if not _nonzero_sizes(node.inputs[1]):
        raise CannotConvert("allowzero=1 with a shape that may hold 0")
    new = G.clone(step.graph, node)
    new.attrs.pop("allowzero", None)
    return [new]
