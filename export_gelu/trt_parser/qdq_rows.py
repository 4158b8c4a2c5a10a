"""Restriction records about QuantizeLinear / DequantizeLinear (see `restrictions.py`).

Each condition is registered once per op it concerns. Read from onnx/onnx-tensorrt
(`file@ref:line`); `quantization.py` beside this file says which route each version takes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_graphsurgeon as gs
from onnx import TensorProto

from export_gelu import graph as G
from export_gelu.trt_parser.restriction_records import Detector, restriction

_OTT = "onnx/onnx-tensorrt"
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


def _input(node: gs.Node, i: int) -> gs.Tensor | None:
    ins = node.inputs
    return ins[i] if len(ins) > i and not ins[i].is_empty() else None


def elem_type(graph: gs.Graph, tensor: gs.Tensor | None) -> int:
    """The element type of a tensor (0 when unknown)."""
    if tensor is None:
        return 0
    found = G.elem_type_of(tensor)
    if found:
        return found
    typed = G.type_of(graph, tensor)
    return typed.elem_type if typed is not None else 0


def _type_name(t: int) -> str:
    return TensorProto.DataType.Name(t) if t else "unknown"


def _both(key: str, condition: str, since: str | None, fixed_in: str | None, words: str,
          source: str, *, silent: bool = False, ops: tuple[str, ...] = QDQ_OPS
          ) -> Callable[[Detector], Detector]:
    """Register one restriction per op of `ops` with the decorated detector."""

    def register(fn: Detector) -> Detector:
        for op in ops:
            restriction(key=f"{op.lower()}-{key}", op=op, condition=condition, since=since,
                        fixed_in=fixed_in, parser_words=words, source=source,
                        silent=silent)(fn)
        return fn

    return register


@_both("explicit-precision-7x", "explicit quantization", None, "8.0",
       "imported as an IScaleLayer with an INT8/FLOAT output type, which quantizes only in a "
       "kEXPLICIT_PRECISION network; trtexec 7.x never creates one, and NVIDIA: the Q/DQ "
       "importer \"is not ready in 7.x\" (use dynamic ranges: a calibration cache)",
       f"{_OTT} builtin_op_importers.cpp@84b5be1:2117 and :783, @release/7.1:2275, "
       "@release/7.2.1:2304; NVIDIA/TensorRT samples/common/sampleEngines.cpp@release/7.0:472; "
       "NVIDIA/TensorRT issue 994", silent=True)
def _any_qdq(node: gs.Node, graph: gs.Graph) -> str | None:
    scale = _input(node, 1)
    return f"scale {scale.name!r}" if scale is not None else "no scale"


@_both("missing-zero-point", "no zero point input", None, "9.0",
       "ASSERT(inputs.size() == 3) \"This version of TensorRT requires 3 inputs for the "
       "DequantizeLinear operator.\" (8.6: \"… for the INT8 QuantizeLinear/DequantizeLinear "
       "operator\"); 9.0 takes two",
       f"{_OTT} builtin_op_importers.cpp@84b5be1:2119, @release/8.0:1022, @release/8.6-GA:1216, "
       "@9.0-GA:1179")
def _missing_zero_point(node: gs.Node, graph: gs.Graph) -> str | None:
    return None if _input(node, 2) is not None else f"{len(node.inputs)} inputs"


@_both("scale-not-initializer", "a computed scale or zero point", None, "8.0",
       "ASSERT(inputs.at(1).is_weights()) and ASSERT(inputs.at(2).is_weights()) (operators.md: "
       "\"Scales and zero-point value must be initializers\"); 8.0: \"Added support for tensor "
       "scales\"",
       f"{_OTT} builtin_op_importers.cpp@84b5be1:2127-2128, @release/7.2.1 operators.md:42; "
       "docs/Changelog.md 8.0")
def _computed_scale(node: gs.Node, graph: gs.Graph) -> str | None:
    computed = [t.name for t in (_input(node, 1), _input(node, 2))
                if t is not None and not G.is_weights(t)]
    return f"computed {', '.join(repr(n) for n in computed)}" if computed else None


def _constant(tensor: gs.Tensor | None) -> np.ndarray | None:
    if tensor is None:
        return None
    try:
        return G.value(tensor, max_elements=1 << 20)
    except (ValueError, TypeError):  # a type numpy cannot hold (float8): not read
        return None


@_both("nonzero-zero-point", "a non-zero zero point", "8.0", None,
       "\"TRT only supports symmetric quantization - zeroPt must be all zeros\"",
       f"{_OTT} builtin_op_importers.cpp@release/8.0:1058, @release/8.6-GA:1220, "
       "@9.0-GA:1253")
def _nonzero_zero_point(node: gs.Node, graph: gs.Graph) -> str | None:
    zp = _constant(_input(node, 2))
    if zp is None or zp.dtype.kind not in "iu" or not zp.size or not zp.any():
        return None
    return f"zero point values {np.unique(zp)[:4].tolist()}"


@_both("scale-not-positive", "a scale that is not positive", "8.0", None,
       "\"Scale coefficients must all be positive\"",
       f"{_OTT} builtin_op_importers.cpp@release/8.0:1039, @release/8.2-GA:1150")
def _scale_not_positive(node: gs.Node, graph: gs.Graph) -> str | None:
    scale = _constant(_input(node, 1))
    if scale is None or scale.dtype.kind != "f" or not scale.size:
        return None
    bad = scale[~(scale > 0)]
    return f"scale values down to {float(bad.min())}" if bad.size else None


@_both("per-tensor-axis", "an axis attribute with a single scale", "8.0", "8.2",
       "\"Quantization axis attribute is not valid with a single quantization scale\"; 8.2 "
       "ignores the axis of a per-tensor scale",
       f"{_OTT} builtin_op_importers.cpp@release/8.0:1096, @release/8.2-GA:1206-1210")
def _per_tensor_axis(node: gs.Node, graph: gs.Graph) -> str | None:
    if "axis" not in node.attrs:
        return None
    scale = _input(node, 1)
    typed = G.type_of(graph, scale) if scale is not None else None
    dims = typed.shape if typed is not None and typed.shape is not None else None
    if dims is None or not all(isinstance(d, int) for d in dims):
        return None
    size = 1
    for d in dims:
        size *= int(d)  # type: ignore[arg-type]  # ints, checked just above
    return f"axis {node.attrs['axis']}, one scale" if size == 1 else None


def _zero_point_type(node: gs.Node, graph: gs.Graph, wanted: int) -> str | None:
    zp = _input(node, 2)
    return f"{_type_name(wanted)} zero point {zp.name!r}" if (
        zp is not None and elem_type(graph, zp) == wanted) else None


@_both("uint8-zero-point-as-int8", "a UINT8 zero point", "8.0", "8.6",
       "the output is INT8 whatever the zero point's type (ONNX: UINT8, [0, 255]); 8.6 refuses "
       "it: notInvalidType(inputs.at(2), {\"UINT8\"})",
       f"{_OTT} builtin_op_importers.cpp@release/8.0:1012-1126 (IQuantizeLayer, INT8), "
       "@release/8.6-GA:1165", silent=True, ops=("QuantizeLinear",))
def _uint8_zero_point_silent(node: gs.Node, graph: gs.Graph) -> str | None:
    return _zero_point_type(node, graph, TensorProto.UINT8)


@_both("uint8-zero-point", "a UINT8 zero point", "8.6", None,
       "notInvalidType(inputs.at(2), {\"UINT8\"}) (9.0 warns \"TensorRT isn't supporting Q/DQ "
       "with UINT8 zero_point\" where only a DequantizeLinear has one)",
       f"{_OTT} builtin_op_importers.cpp@release/8.6-GA:1165, @9.0-GA:1163, :1239",
       ops=("QuantizeLinear",))
def _uint8_zero_point(node: gs.Node, graph: gs.Graph) -> str | None:
    return _zero_point_type(node, graph, TensorProto.UINT8)


@_both("no-zero-point-as-int8", "no zero point (ONNX: UINT8)", "9.0", None,
       "\"ONNX default is UINT8, TRT will default to INT8\": a QuantizeLinear without a zero "
       "point quantizes to [-128, 127] where ONNX says [0, 255]",
       f"{_OTT} builtin_op_importers.cpp@9.0-GA:1225", silent=True,
       ops=("QuantizeLinear",))
def _no_zero_point(node: gs.Node, graph: gs.Graph) -> str | None:
    return None if _input(node, 2) is not None else "no zero point"


@_both("uint8-data", "UINT8 data", "8.5", None,
       "CHECK(notInvalidType(inputs.at(0), {\"UINT8\"}))",
       f"{_OTT} builtin_op_importers.cpp@release/8.5-GA:1180, @release/8.6-GA:1160",
       ops=("DequantizeLinear",))
def _uint8_data(node: gs.Node, graph: gs.Graph) -> str | None:
    data = _input(node, 0)
    return "UINT8 data" if data is not None and elem_type(graph, data) == TensorProto.UINT8 \
        else None


@_both("int32-data", "INT32 data (a quantized bias)", "8.0", None,
       "\"only activation types allowed as input to this layer\" (an NVIDIA maintainer: "
       "\"Dequantize nodes should have floating point input types\"); TensorRT quantizes to "
       "INT8, FP8 and INT4 only",
       "onnx/onnx-tensorrt issue 850; microsoft/onnxruntime issue 14229 (TensorRT's error on "
       "quantize_static's int32 bias)", ops=("DequantizeLinear",))
def _int32_data(node: gs.Node, graph: gs.Graph) -> str | None:
    data = _input(node, 0)
    return "INT32 data" if data is not None and elem_type(graph, data) == TensorProto.INT32 \
        else None


@_both("fp8", "FLOAT8E4M3FN (FP8) quantization", None, "9.0",
       "no FLOAT8E4M3FN case in convertDtype before 9.0 (\"Unsupported ONNX data type\"); "
       "8.6 reads FP8 only from the custom op TRT_FP8QuantizeLinear",
       f"{_OTT} onnx2trt_utils.cpp@9.0-GA:361 (first FLOAT8E4M3FN), "
       "builtin_op_importers.cpp@release/8.6-GA:1310; docs/Changelog.md 9.0 GA")
def _fp8(node: gs.Node, graph: gs.Graph) -> str | None:
    for i in (2, 0):
        tensor = _input(node, i)
        if tensor is not None and elem_type(graph, tensor) == TensorProto.FLOAT8E4M3FN:
            return f"FLOAT8E4M3FN {'zero point' if i == 2 else 'data'} {tensor.name!r}"
    return None
