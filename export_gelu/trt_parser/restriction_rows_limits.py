"""Restriction rows of what single layers do not take: Resize other than the 7.0 importer's
one form, ScatterND's `reduction`, TopK's K above ITopKLayer's bound. None has a rewrite
but dropping ScatterND's explicit reduction='none'."""

from __future__ import annotations

import onnx_graphsurgeon as gs

from export_gelu import graph as G
from export_gelu.trt_parser.restriction_records import restriction
from export_gelu.trt_parser.restriction_shared import (
    CHANGELOG,
    OTRT,
    computed_by,
    given,
    opset_of,
)


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
        found.append(f"`scales` {computed_by(scales) if scales is not None else 'missing'}")
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
