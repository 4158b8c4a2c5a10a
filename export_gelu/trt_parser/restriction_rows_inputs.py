"""Restriction records, part two: inputs the parser needs as constants, Trilu rank, Einsum
equations, and the check-only rows (Pad, Resize, ScatterND, TopK, If, Loop).

Every record cites the parser source it was read from. "Weights" below is the parser's word
for a tensor it knows at import time: an initializer or a `Constant` node's output (the
`Constant` importer returns weights in every version, 7.0 `84b5be1` to 10.1 GA). Anything
computed by another node, even from constants only, is a tensor to it.

`CONSTANT_INPUTS` says, for the keys of the "must be weights" family, which inputs the fix
(`passes/compat/trt_fixes/inputs.py`) folds to initializers.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from export_gelu import graph as G
from export_gelu.trt_parser.restriction_records import restriction

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


def _computed_by(tensor: gs.Tensor) -> str:
    producer = G.producer(tensor)
    if producer is not None:
        return f"computed by {producer.op} {producer.name or producer.outputs[0].name!r}"
    return "a graph input"


def computed_inputs(node: gs.Node, indices: tuple[int, ...],
                    labels: tuple[str, ...]) -> str | None:
    """'`axes` computed by Concat 'c'' for each given input of `indices` that is not weights."""
    found = [f"`{label}` {_computed_by(t)}" for i, label in zip(indices, labels)
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


# -- the "must be weights" family ------------------------------------------------------------

must_be_weights(
    key="slice-axes-computed", op="Slice", inputs=(3,), labels=("axes",), from_opset=10,
    since=None, fixed_in="10.3",
    parser_words="\"This version of TensorRT does not support dynamic axes.\" (starts, ends and "
                 "steps may be tensors); 10.3 GA: \"Added support for tensor `axes` inputs for "
                 "`Slice` nodes\"",
    source=f"{OTRT} {IMPORTERS} (Slice: ASSERT axes.allValuesKnown()); {CHANGELOG}")

must_be_weights(
    key="squeeze-axes-computed", op="Squeeze", inputs=(1,), labels=("axes",), from_opset=13,
    since=None, fixed_in="10.7",
    parser_words="\"Squeeze axes input must be an initializer!\"; 10.7 GA: \"Added dynamic "
                 "axes support for `Squeeze` and `Unsqueeze` operations\"",
    source=f"{OTRT} {IMPORTERS} (Squeeze, opset >= 13: ASSERT inputs.at(1).is_weights()); "
           f"{CHANGELOG}")

must_be_weights(
    key="unsqueeze-axes-computed", op="Unsqueeze", inputs=(1,), labels=("axes",),
    from_opset=13, since=None, fixed_in="10.7",
    parser_words="\"Axes input for unsqueeze operation should be a constant tensor.\"; 10.7 GA: "
                 "\"Added dynamic axes support for `Squeeze` and `Unsqueeze` operations\"",
    source=f"{OTRT} {IMPORTERS} (Unsqueeze, opset >= 13: ASSERT axesInput.allValuesKnown()); "
           f"{CHANGELOG}")

must_be_weights(
    key="split-sizes-computed", op="Split", inputs=(1,), labels=("split",), from_opset=13,
    since=None, fixed_in="8.2",
    parser_words="\"Split input 'split', if specified, must be an initializer!\"; from 8.2 a "
                 "tensor `split` is read as a shape tensor",
    source=f"{OTRT} builtin_op_importers.cpp release/8.0 and release/8.2-GA (Split); "
           f"docs/operators.md release/8.0 \"`split` must be an initializer\"")

must_be_weights(
    key="clip-bounds-computed", op="Clip", inputs=(1, 2), labels=("min", "max"),
    from_opset=11, since=None, fixed_in="8.2",
    parser_words="\"Clip min value must be an initializer!\" / \"Clip max value must be an "
                 "initializer!\"; from 8.2 tensor bounds go through elementwise Max/Min",
    source=f"{OTRT} builtin_op_importers.cpp 7.0 (84b5be1), release/8.0, release/8.2-GA "
           f"(Clip); docs/operators.md 7.x/8.0 \"min and max clip values must be an "
           f"initializer\"")


def _float_range(node: gs.Node, graph: gs.Graph) -> bool:
    vt = G.type_of(graph, node.inputs[0])
    return vt is not None and vt.elem_type in FLOATS


must_be_weights(
    key="range-float-computed", op="Range", inputs=(0, 1, 2),
    labels=("start", "limit", "delta"), from_opset=11, since=None, fixed_in="8.4",
    when=_float_range,
    parser_words="floating-point Range is imported only when start, limit and delta are all "
                 "initializers, else \"For range operator with dynamic inputs, this version "
                 "of TensorRT only supports INT32!\"; 8.4 GA: \"Added dynamic shape support "
                 "for `Range` for floating point types\"",
    source=f"{OTRT} builtin_op_importers.cpp 7.0 (84b5be1), release/8.2-GA, release/8.4-GA "
           f"(Range); {CHANGELOG}")

must_be_weights(
    key="topk-k-computed", op="TopK", inputs=(1,), labels=("K",), from_opset=10,
    since=None, fixed_in="8.6",
    parser_words="\"This version of TensorRT only supports input K as an initializer.\"; "
                 "8.6 EA: \"Added support for `TopK` operators with dynamic `K` values\"",
    source=f"{OTRT} builtin_op_importers.cpp 7.0 (84b5be1) to release/8.5-GA, "
           f"release/8.6-GA (TopK); {CHANGELOG}")

#: Reduce ops and the opset from which their axes are an input.
REDUCE_AXES_INPUT = {"ReduceSum": 13, **{op: 18 for op in (
    "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")}}

for _op, _from in REDUCE_AXES_INPUT.items():
    must_be_weights(
        key=f"{_op.lower()}-axes-computed", op=_op, inputs=(1,), labels=("axes",),
        from_opset=_from, since=None, fixed_in=None,
        parser_words="\"Axis input must be an initializer!\" (reduceTensor); docs/operators.md "
                     "10.0-10.15 \"`axes` must be an initializer\"" + (
                         "" if _op == "ReduceSum" else "; before 10.0 the importer does not "
                         "read an axes input at all"),
        source=f"{OTRT} onnx2trt_utils.cpp release/8.0, 9.3 and importerUtils.cpp "
               f"release/10.1-GA (reduceTensor); docs/operators.md release/10.0-GA, 10.15")


def _axes_ignored(node: gs.Node, graph: gs.Graph) -> str | None:
    """The constant axes input of an opset-18 Reduce op, when ignoring it changes the result
    (computed axes are the axes-computed row's)."""
    axes_in = given(node, 1)
    if opset_of(graph) < 18 or axes_in is None or not G.is_weights(axes_in):
        return None
    axes = G.value(axes_in)
    rank = rank_of(graph, node.inputs[0])
    if axes is None:
        return "axes held in external data"
    if axes.size == 0 and not node.attrs.get("noop_with_empty_axes", 0):
        return None  # empty axes reduce everything: what the parser does anyway
    if rank is not None and {int(a) % rank for a in axes.ravel()} == set(range(rank)):
        return None
    return f"axes {axes.ravel().tolist()} of a rank-{rank} input"


for _op, _from in REDUCE_AXES_INPUT.items():
    if _op == "ReduceSum":
        continue
    restriction(
        key=f"{_op.lower()}-axes-ignored", op=_op,
        condition="a constant `axes` input (opset >= 18) that does not cover every axis",
        since=None, fixed_in="10.0", silent=True,
        parser_words=f"the {_op} importer passes no axes input to reduceTensor, so it reduces "
                     "over every axis; 10.0 passes inputs.at(1)",
        source=f"{OTRT} builtin_op_importers.cpp release/8.6-GA, 9.0-GA, 9.3 and "
               f"onnxOpImporters.cpp release/10.0-GA ({_op})")(_axes_ignored)


# -- Trilu ---------------------------------------------------------------------------------

@restriction(key="trilu-rank", op="Trilu", condition="an input of rank other than 2 or 3",
             since="8.5", fixed_in="8.6",
             parser_words="\"Trilu input must have 2 or 3 input dimensions!\"; 8.6 GA: "
                          "\"Added support for N-D `Trilu`\"",
             source=f"{OTRT} builtin_op_importers.cpp release/8.5-GA and release/8.6-GA "
                    f"(Trilu); {CHANGELOG}")
def _trilu_rank(node: gs.Node, graph: gs.Graph) -> str | None:
    rank = rank_of(graph, node.inputs[0])
    return f"rank {rank}" if rank is not None and rank not in (2, 3) else None


# -- Einsum --------------------------------------------------------------------------------

EINSUM_WORDS = ("IEinsumLayer: \"TensorRT does not support ellipsis, diagonal operations or "
                "more than two inputs for Einsum\"; docs/operators.md 8.2-8.6: \"Ellipsis and "
                "diagonal operations are not supported. Broadcasting between inputs is not "
                "supported\"")
EINSUM_SOURCE = (f"NVIDIA/TensorRT include/NvInfer.h release/8.2 to release/10.11 (IEinsumLayer; "
                 f"the note is gone in release/10.12); {OTRT} docs/operators.md release/8.2-GA "
                 f"to 9.0-EA; builtin_op_importers.cpp 9.0-GA and onnxOpImporters.cpp "
                 f"release/10.1-GA (Einsum: processEllipsisAndImplicitOutput); {CHANGELOG} "
                 f"(10.12 GA)")


def einsum_terms(equation: str) -> tuple[list[str], str | None]:
    """('ij,jk->ik') → (['ij', 'jk'], 'ik'); the output is None for an implicit equation."""
    eq = equation.replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    return lhs.split(","), (rhs if "->" in eq else None)


def _equation(node: gs.Node) -> str:
    value = node.attrs.get("equation", "")
    return value.decode() if isinstance(value, bytes) else str(value)


@restriction(key="einsum-ellipsis", op="Einsum", condition="an ellipsis ('...') in the equation",
             since=None, fixed_in="9.0", parser_words=EINSUM_WORDS + "; from 9.0 GA the "
             "parser spells the ellipsis out in letters itself", source=EINSUM_SOURCE)
def _einsum_ellipsis(node: gs.Node, graph: gs.Graph) -> str | None:
    eq = _equation(node)
    return f"equation {eq!r}" if "..." in eq else None


@restriction(key="einsum-inputs", op="Einsum", condition="more than two inputs",
             since=None, fixed_in="9.0", parser_words=EINSUM_WORDS + "; from 9.0 GA the "
             "parser splits it into two-input Einsums", source=EINSUM_SOURCE)
def _einsum_inputs(node: gs.Node, graph: gs.Graph) -> str | None:
    return f"{len(node.inputs)} inputs" if len(node.inputs) > 2 else None


@restriction(key="einsum-diagonal", op="Einsum",
             condition="a diagonal (a label repeated within one operand)",
             since=None, fixed_in="10.12", parser_words=EINSUM_WORDS, source=EINSUM_SOURCE)
def _einsum_diagonal(node: gs.Node, graph: gs.Graph) -> str | None:
    terms, _ = einsum_terms(_equation(node))
    for term in terms:
        letters = [c for c in term.replace("...", "") if c.isalpha()]
        repeated = sorted({c for c in letters if letters.count(c) > 1})
        if repeated:
            return f"operand {term!r} repeats {''.join(repeated)!r}"
    return None


def einsum_dims(term: str, shape: tuple) -> dict[str, object] | None:
    """Label → dim of one operand ('...' dims as '.0', '.1', … from the right); None when the
    operand's rank does not fit the term."""
    left, dots, right = term.partition("...")
    n_ell = len(shape) - len(left) - len(right)
    if n_ell < 0 or (not dots and n_ell):
        return None
    dims: dict[str, object] = {}
    for c, d in zip(left, shape):
        dims[c] = d
    for k in range(n_ell):
        dims[f".{n_ell - 1 - k}"] = shape[len(left) + k]
    for c, d in zip(right, shape[len(left) + n_ell:]):
        dims[c] = d
    return dims


@restriction(key="einsum-broadcast", op="Einsum",
             condition="broadcasting between inputs (a shared label or ellipsis dims of "
                       "different sizes or ranks)",
             since=None, fixed_in="10.12", parser_words=EINSUM_WORDS, source=EINSUM_SOURCE)
def _einsum_broadcast(node: gs.Node, graph: gs.Graph) -> str | None:
    terms, _ = einsum_terms(_equation(node))
    if len(terms) != len(node.inputs):
        return None
    seen: dict[str, object] = {}
    ranks = set()
    for term, tensor in zip(terms, node.inputs):
        shape = shape_of(graph, tensor)
        if shape is None:
            continue
        if "..." in term:
            ranks.add(len(shape) - len(term.replace("...", "")))
        dims = einsum_dims(term, shape)
        if dims is None:
            continue
        for label, d in dims.items():
            other = seen.setdefault(label, d)
            if isinstance(d, int) and isinstance(other, int) and d != other:
                return f"label {label.lstrip('.')!r} is {other} in one input and {d} in another"
    if len(ranks) > 1:
        return f"ellipsis ranks {sorted(ranks)} differ between inputs"
    return None


# -- check-only rows: Pad, Resize, ScatterND, TopK, If, Loop --------------------------------

def _pads(node: gs.Node, graph: gs.Graph) -> tuple[list[int] | None, float | None]:
    """(pads, constant value) of a Pad node at any opset; None where not constant."""
    if opset_of(graph) < 11:
        pads = node.attrs.get("pads", None)
        return (list(pads) if pads is not None else None), float(node.attrs.get("value", 0.0))
    pads = G.value(node.inputs[1])
    fill = given(node, 2)
    value = G.value(fill) if fill is not None else np.zeros(())
    return (None if pads is None else [int(p) for p in pads.ravel()],
            None if value is None or value.size != 1 else float(value.ravel()[0]))


def _padded_dims(node: gs.Node, graph: gs.Graph) -> tuple[list[int], int] | None:
    """(dims with non-zero padding, rank), when pads are constant (no opset-18 `axes`)."""
    pads, _ = _pads(node, graph)
    if pads is None or given(node, 3) is not None:
        return None
    half = len(pads) // 2
    return [d for d in range(half) if pads[d] or pads[d + half]], half


def _mode(node: gs.Node) -> str:
    mode = node.attrs.get("mode", "constant")
    return mode.decode() if isinstance(mode, bytes) else str(mode)


PAD_SOURCE = (f"{OTRT} builtin_op_importers.cpp and onnx2trt_utils.cpp (Pad, "
              f"convertOnnxPadding) at 84b5be1 (7.0), release/7.1, release/7.2.1, release/8.0, "
              f"release/8.2-GA; operators.md 7.x (\"Zero-padding on last 2 dimensions only\"), "
              f"release/8.0 (\"Zero-constant padding on two dimensions only\"); {CHANGELOG} "
              f"(8.2 EA: \"Updated `Pad` layer to support ND padding, along with `edge` and "
              f"`reflect` padding mode support\")")

must_be_weights(
    key="pad-pads-computed", op="Pad", inputs=(1, 2), labels=("pads", "constant_value"),
    from_opset=11, since="7.1", fixed_in="8.2",
    parser_words="\"The input pads is required to be an initializer.\" / \"The input "
                 "constant_value is required to be an initializer.\"; from 8.2 tensor pads "
                 "are taken",
    source=PAD_SOURCE)


PAD_AXES_WORDS = "\"TensorRT does not support dynamic axes for pad!\""

must_be_weights(
    key="pad-axes-computed", op="Pad", inputs=(3,), labels=("axes",), from_opset=18,
    since="10.0", fixed_in="10.4",
    parser_words=PAD_AXES_WORDS + " (a tensor `axes`); 10.4 GA: \"Added support for tensor "
                 "`axes` for `Pad` operations\"",
    source=f"{OTRT} onnxOpImporters.cpp release/10.0-GA, release/10.1-GA (Pad); {CHANGELOG}")


@restriction(key="pad-axes-input", op="Pad", condition="an `axes` input (opset >= 18)",
             since=None, fixed_in="10.0",
             parser_words=PAD_AXES_WORDS + " (any `axes` input, an initializer too); 10.0 "
                          "reads an initializer `axes`",
             source=f"{OTRT} builtin_op_importers.cpp release/8.6-GA, 9.3 and "
                    f"onnxOpImporters.cpp release/10.0-GA (Pad)")
def _pad_axes(node: gs.Node, graph: gs.Graph) -> str | None:
    axes = given(node, 3)
    return f"`axes` {axes.name!r}" if opset_of(graph) >= 18 and axes is not None else None


@restriction(key="pad-nonzero", op="Pad",
             condition="padding other than constant zeros", since=None, fixed_in="8.2",
             parser_words="\"This version of TensorRT only supports constant 0 padding!\"",
             source=PAD_SOURCE)
def _pad_nonzero(node: gs.Node, graph: gs.Graph) -> str | None:
    pads, value = _pads(node, graph)
    if pads is not None and not any(pads):
        return None  # a no-op Pad
    if _mode(node) != "constant":
        return f"mode {_mode(node)!r}"
    return f"constant_value {value}" if value not in (0.0, None) else None


@restriction(key="pad-trt7.0", op="Pad",
             condition="a Pad 7.0 reads wrongly (pads as an input, or not a 4-D tensor)",
             since=None, fixed_in="7.1",
             parser_words="the importer reads the `pads` attribute only (opset >= 11 Pad has "
                          "none: OnnxAttrs::get throws) and \"only supports padding on the outer "
                          "two dimensions on 4D tensors!\"",
             source=f"{OTRT} builtin_op_importers.cpp at 84b5be1 (7.0) (Pad)")
def _pad_70(node: gs.Node, graph: gs.Graph) -> str | None:
    if opset_of(graph) >= 11:
        return "`pads` is an input at opset >= 11"
    pads, _ = _pads(node, graph)
    return f"pads {pads}" if pads is None or len(pads) != 8 else None


@restriction(key="pad-outer-dims", op="Pad",
             condition="padding outside the last two dims", since=None, fixed_in="8.0",
             parser_words="convertOnnxPadding refuses non-zero pads before the last two dims "
                          "(7.x); operators.md 7.x: \"Zero-padding on last 2 dimensions only\"",
             source=PAD_SOURCE)
def _pad_outer(node: gs.Node, graph: gs.Graph) -> str | None:
    found = _padded_dims(node, graph)
    if found is None:
        return None
    dims, rank = found
    outer = [d for d in dims if d < rank - 2]
    return f"padded dim(s) {outer} of a rank-{rank} input" if outer and len(dims) <= 2 else None


@restriction(key="pad-many-dims", op="Pad", condition="padding on more than two dims",
             since=None, fixed_in="8.2",
             parser_words="\"TensorRT only supports 2D padding!\" (8.0; 7.x: the last two dims "
                          "only)", source=PAD_SOURCE)
def _pad_many(node: gs.Node, graph: gs.Graph) -> str | None:
    found = _padded_dims(node, graph)
    return f"padded dims {found[0]}" if found is not None and len(found[0]) > 2 else None


def _text(node: gs.Node, name: str, default: str) -> str:
    value = node.attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else str(value)


@restriction(key="resize-trt7.0", op="Resize",
             condition="a Resize other than asymmetric nearest-floor/linear with constant scales",
             since=None, fixed_in="7.1",
             parser_words="\"This version of TensorRT only supports asymmetric resize!\"; \"does "
                          "not support cubic interpolation!\"; \"only supports floor "
                          "nearest_mode!\"; \"Resize scales must be an initializer!\"; "
                          "operators.md: \"Asymmetric coordinate transformation mode only. "
                          "Nearest or Linear resizing mode only. \"floor\" mode only\"",
             source=f"{OTRT} builtin_op_importers.cpp and operators.md at 84b5be1 (7.0) (Resize)")
def _resize_70(node: gs.Node, graph: gs.Graph) -> str | None:
    opset = opset_of(graph)
    mode = _text(node, "mode", "nearest")
    found = []
    if opset >= 11:
        ctm = _text(node, "coordinate_transformation_mode", "half_pixel")
        nearest = _text(node, "nearest_mode", "round_prefer_floor")
        if ctm != "asymmetric":
            found.append(f"coordinate_transformation_mode {ctm!r}")
        if mode == "cubic":
            found.append("mode 'cubic'")
        if mode == "nearest" and nearest != "floor":
            found.append(f"nearest_mode {nearest!r}")
    scales = given(node, 2 if opset >= 11 else 1)
    if not (opset >= 11 and given(node, 3) is not None) and not (
            scales is not None and G.is_weights(scales)):
        found.append(f"`scales` {_computed_by(scales) if scales is not None else 'missing'}")
    return ", ".join(found) or None


def _reduction(node: gs.Node) -> str | None:
    value = node.attrs.get("reduction", None)
    return value.decode() if isinstance(value, bytes) else value


SCATTER_SOURCE = (f"{OTRT} builtin_op_importers.cpp release/8.2-GA to 9.3 and "
                  f"onnxOpImporters.cpp release/10.0-GA, release/10.1-GA (ScatterND); "
                  f"docs/operators.md 10.0-10.15; {CHANGELOG} (10.9 GA)")


@restriction(key="scatternd-reduction", op="ScatterND",
             condition="a `reduction` other than 'none'", since=None, fixed_in=None,
             parser_words="before 10.0 the importer never reads `reduction` (the updates "
             "overwrite instead of accumulating: wrong values); from 10.0 \"Attribute reduction "
             "is not supported.\"; docs 10.15: \"`reduction` other than `none` is not "
             "supported\"", source=SCATTER_SOURCE)
def _scatternd_reduction(node: gs.Node, graph: gs.Graph) -> str | None:
    red = _reduction(node)
    return f"reduction {red!r}" if red not in (None, "none") else None


@restriction(key="scatternd-reduction-attribute", op="ScatterND",
             condition="an explicit reduction='none' attribute", since="10.0", fixed_in="10.9",
             parser_words="\"Attribute reduction is not supported.\" (any `reduction` "
             "attribute); 10.9 GA: \"Fixed support for opset 18+ ScatterND\"",
             source=SCATTER_SOURCE)
def _scatternd_attribute(node: gs.Node, graph: gs.Graph) -> str | None:
    return "reduction 'none'" if _reduction(node) == "none" else None


#: The largest K ITopKLayer takes.
TOPK_MAX_K = 3840


@restriction(key="topk-k-too-large", op="TopK", condition=f"K above {TOPK_MAX_K}",
             since=None, fixed_in=None,
             parser_words=f"ITopKLayer::setK: \"Currently only values up to {TOPK_MAX_K} are "
                          f"supported\"; docs/operators.md 10.1-10.15: \"`K` input must be less "
                          f"than {TOPK_MAX_K}\"",
             source=f"NVIDIA/TensorRT include/NvInfer.h release/7.0 to release/11.1 "
                    f"(ITopKLayer); {OTRT} docs/operators.md release/10.1-GA")
def _topk_k(node: gs.Node, graph: gs.Graph) -> str | None:
    if opset_of(graph) < 10:
        k = node.attrs.get("k", None)
    else:
        value = G.value(given(node, 1))
        k = int(value.ravel()[0]) if value is not None and value.size == 1 else None
    return f"K = {k}" if k is not None and k > TOPK_MAX_K else None


def _branch_shapes(node: gs.Node) -> list[tuple[tuple | None, tuple | None]]:
    """(then shape, else shape) per output of an If node, from the branches' declared types."""
    def shapes(name: str) -> list[tuple | None]:
        body = node.attrs.get(name, None)
        out = []
        for t in ([] if not isinstance(body, gs.Graph) else body.outputs):
            out.append(None if t.shape is None else
                       tuple(d if isinstance(d, int) else None for d in t.shape))
        return out

    return list(zip(shapes("then_branch"), shapes("else_branch")))


def _broadcastable(a: tuple, b: tuple) -> bool:
    return all(x is None or y is None or x == y or 1 in (x, y)
               for x, y in zip(reversed(a), reversed(b)))


IF_SOURCE = (f"{OTRT} docs/operators.md release/8.0 to release/10.0-GA (\"must have broadcastable "
             f"shapes\"), release/10.1-GA and 10.15 (\"must have the same rank\"); "
             f"onnxOpImporters.cpp release/10.1-GA (If: a constant condition imports one branch)")


@restriction(key="if-branch-shapes", op="If",
             condition="branch outputs of shapes that do not broadcast", since=None,
             fixed_in="10.1", parser_words="\"Output tensors of the two conditional branches "
             "must have broadcastable shapes\"", source=IF_SOURCE)
def _if_broadcast(node: gs.Node, graph: gs.Graph) -> str | None:
    if G.is_weights(node.inputs[0]):
        return None
    for i, (a, b) in enumerate(_branch_shapes(node)):
        if a is not None and b is not None and not _broadcastable(a, b):
            return f"output {i}: {list(a)} vs {list(b)}"
    return None


@restriction(key="if-branch-rank", op="If", condition="branch outputs of different ranks",
             since="10.1", fixed_in=None, parser_words="\"Output tensors of the two "
             "conditional branches must have the same rank\"", source=IF_SOURCE)
def _if_rank(node: gs.Node, graph: gs.Graph) -> str | None:
    if G.is_weights(node.inputs[0]):
        return None
    for i, (a, b) in enumerate(_branch_shapes(node)):
        if a is not None and b is not None and len(a) != len(b):
            return f"output {i}: rank {len(a)} vs {len(b)}"
    return None


@restriction(key="loop-scan-length", op="Loop",
             condition="scan outputs whose length no trip count fixes (no `M`, or a body that "
                       "can stop early)", since=None, fixed_in=None, silent=True,
             parser_words="without a trip count the scan outputs get a dummy length of 1024 and "
                          "\"must not be used in the rest of the model\"; docs 10.1-10.15: \"Scan "
                          "output length cannot be dynamic\"",
             source=f"{OTRT} builtin_op_importers.cpp release/8.0 (Loop: "
                    f"MAX_SCAN_OUTPUT_LENGTH); docs/operators.md release/10.1-GA, 10.15")
def _loop_scan(node: gs.Node, graph: gs.Graph) -> str | None:
    body = node.attrs.get("body", None)
    if not isinstance(body, gs.Graph):
        return None
    n_carried = len(node.inputs) - 2
    scans = [o for o in node.outputs[n_carried:] if G.is_used(graph, o)]
    if not scans:
        return None
    if given(node, 0) is None:
        return "no trip count `M`"
    if len(body.inputs) < 2 or not body.outputs:  # malformed body: the checker's business
        return None
    cond_in, cond_out = body.inputs[1], body.outputs[0]
    p = G.producer(cond_out)
    stays = cond_out.name == cond_in.name or (p is not None and p.op == "Identity"
                                              and p.inputs[0].name == cond_in.name)
    cond = G.value(given(node, 1)) if given(node, 1) is not None else np.array(True)
    if not stays or (cond is None or not bool(np.asarray(cond).all())):
        return "the body computes its own `cond`" if not stays else "a computed `cond`"
    return None
