"""Restriction rows of Pad: computed `pads`/`constant_value`/`axes` inputs, an `axes` input
before 10.0, padding other than constant zeros, the 7.0 importer's reading, and the dims 7.x
and 8.0 pad."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from export_gelu import graph as G
from export_gelu.trt_parser.restriction_records import restriction
from export_gelu.trt_parser.restriction_shared import (
    CHANGELOG,
    OTRT,
    given,
    must_be_weights,
    opset_of,
)


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
