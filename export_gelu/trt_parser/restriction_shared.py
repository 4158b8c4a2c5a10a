"""What the restriction rows ask of a node, and what their fixes (`passes/compat/trt_fixes/`)
share with them.

"Weights" below is the parser's word for a tensor it knows at import time: an initializer or
a `Constant` node's output (the `Constant` importer returns weights in every version, 7.0
`84b5be1` to 10.1 GA). Anything computed by another node, even from constants only, is a
tensor to it. `must_be_weights` registers a row of the "must be weights" family and notes in
`CONSTANT_INPUTS` which inputs the fix folds to initializers.

This module registers no row itself, so a fix may import it without changing the order of
`RESTRICTIONS` (that order is `restriction_rows.py`'s).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from export_gelu import graph as G
from export_gelu.trt_parser.restriction_records import restriction

_F32 = np.finfo(np.float32)

OTRT = "onnx/onnx-tensorrt"
#: The importer sources read for every line (tags as in docs/tensorrt-restrictions.md).
IMPORTERS = ("builtin_op_importers.cpp at 7.0 (84b5be1), release/7.1, release/7.2.1, "
             "release/8.0, release/8.2-GA, release/8.4-GA, release/8.5-GA, release/8.6-GA, "
             "9.3; onnxOpImporters.cpp at release/10.0-GA, release/10.1-GA")
CHANGELOG = f"{OTRT} docs/Changelog.md (main, through 10.15 GA)"

FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
          onnx.TensorProto.DOUBLE}

#: restriction key → (input indices that must be weights, the opset from which they are inputs)
CONSTANT_INPUTS: dict[str, tuple[tuple[int, ...], int]] = {}

#: Reduce ops and the opset from which their axes are an input.
REDUCE_AXES_INPUT = {"ReduceSum": 13, **{op: 18 for op in (
    "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")}}


# -- what detectors ask ----------------------------------------------------------------------

def opset_of(graph: gs.Graph) -> int:
    return G.opset(graph)


def given(node: gs.Node, index: int) -> gs.Tensor | None:
    """Input `index`, None when absent or left empty."""
    if len(node.inputs) > index and not node.inputs[index].is_empty():
        return node.inputs[index]
    return None


def rank_of(graph: gs.Graph, tensor: gs.Tensor) -> int | None:
    vt = G.type_of(graph, tensor)
    return None if vt is None else vt.rank


def shape_of(graph: gs.Graph, tensor: gs.Tensor | None) -> tuple | None:
    vt = G.type_of(graph, tensor)
    return None if vt is None else vt.shape


def computed_by(tensor: gs.Tensor) -> str:
    """Where a tensor that is not weights comes from, in words ('computed by Concat 'c'')."""
    producer = G.producer(tensor)
    if producer is not None:
        return f"computed by {producer.op} {producer.name or producer.outputs[0].name!r}"
    return "a graph input"


def computed_inputs(node: gs.Node, indices: tuple[int, ...],
                    labels: tuple[str, ...]) -> str | None:
    """'`axes` computed by Concat 'c'' for each given input of `indices` that is not weights."""
    found = [f"`{label}` {computed_by(t)}" for i, label in zip(indices, labels)
             if (t := given(node, i)) is not None and not G.is_weights(t)]
    return "; ".join(found) or None


def must_be_weights(*, key: str, op: str, inputs: tuple[int, ...], labels: tuple[str, ...],
                    from_opset: int, since: str | None, fixed_in: str | None,
                    parser_words: str, source: str,
                    when: Callable[[gs.Node, gs.Graph], bool] | None = None) -> None:
    """Register a record: inputs `inputs` of `op` (inputs from opset `from_opset`) must be
    weights on since <= version < fixed_in."""
    names = "/".join(f"`{label}`" for label in labels)

    def detect(node: gs.Node, graph: gs.Graph) -> str | None:
        if opset_of(graph) < from_opset or (when is not None and not when(node, graph)):
            return None
        return computed_inputs(node, inputs, labels)

    detect.__name__ = f"_detect_{key.replace('-', '_')}"
    restriction(key=key, op=op, condition=f"a computed {names} input (not an initializer or "
                "Constant)", since=since, fixed_in=fixed_in, parser_words=parser_words,
                source=source)(detect)
    CONSTANT_INPUTS[key] = (inputs, from_opset)


def einsum_terms(equation: str) -> tuple[list[str], str | None]:
    """('ij,jk->ik') → (['ij', 'jk'], 'ik'); the output is None for an implicit equation."""
    eq = equation.replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    return lhs.split(","), (rhs if "->" in eq else None)


def float32_exact_enough(value: np.ndarray) -> bool:
    """Whether every finite non-zero value lies in float32's normal range (inf/nan stay as
    they are): then rounding to float32 changes each value by at most 2**-24 relative."""
    finite = value[np.isfinite(value) & (value != 0)]
    mag = np.abs(finite)
    return not finite.size or bool((mag <= _F32.max).all() and (mag >= _F32.tiny).all())


def attr_tensors(node: gs.Node) -> list[gs.Constant]:
    """The tensor attributes of a node (a Constant's `value`, ConstantOfShape's …)."""
    return [v for v in node.attrs.values() if isinstance(v, gs.Constant)]


#: (op, input index) reads where clamping an INT64 constant to INT32 changes nothing: Slice
#: starts/ends are clamped to the dimension anyway, and Clip bounds to INT32 data.
CLAMP_SAFE_READS = {("Slice", 1), ("Slice", 2), ("Clip", 1), ("Clip", 2)}
