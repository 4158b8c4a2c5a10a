"""What each TensorRT version does with a quantized ONNX graph, read from its own sources.

One record per change, in version order; a version takes the newest record not newer than
it (`quantization_support`). The per-node conditions (a missing zero point, a non-zero one,
…) are restriction records beside the others (`qdq_rows.py`); this table says which route a
version takes and what the lowering must write for it.

Sources (onnx/onnx-tensorrt unless said; `file@ref:line`):

- 7.0–7.2: `QuantizeLinear`/`DequantizeLinear` import as an `IScaleLayer` whose output type
  is set to INT8 / FLOAT (builtin_op_importers.cpp@84b5be1:2117-2162 and :783-827,
  @release/7.1:2275-2318, @release/7.2.1:2304-2348): a quantizing scale only in a network
  created with `kEXPLICIT_PRECISION` (NVIDIA/TensorRT include/NvInfer.h@release/7.2:6885-6898),
  which trtexec 7.x never sets (samples/common/sampleEngines.cpp@release/7.0:470-472,
  @release/7.2:605-607: `createNetworkV2(batchFlag)` only). NVIDIA on 7.2.1 (NVIDIA/TensorRT
  issue 994, 2021-01): the Q/DQ importer "is not ready in 7.x … before that we have to use
  setDynamicRange". So 7.x INT8 is implicit: an unquantized graph and per-tensor ranges in a
  calibration cache (`trtexec --int8 --calib=FILE`, sampleOptions.cpp@v7.0.0).
- 8.0: Q/DQ map to `IQuantizeLayer`/`IDequantizeLayer` (builtin_op_importers.cpp@release/8.0:
  1012-1126; NVIDIA/TensorRT CHANGELOG 8.0.1 "leverage IQuantizeLayer and IDequantizeLayer
  … per-axis quantization"); three inputs required (:1022), zero point all zeros (:1058),
  scales positive (:1039), a per-tensor scale with an `axis` attribute refused (:1096).
- 8.2: the `axis` of a per-tensor scale is ignored (builtin_op_importers.cpp@release/8.2-GA:
  1206-1210).
- 9.0: FP8: a FLOAT8E4M3FN zero point picks FP8 (builtin_op_importers.cpp@9.0-GA:1233;
  onnx2trt_utils.cpp@9.0-GA:361 maps FLOAT8E4M3FN to kFP8; Changelog 9.0 GA "Added support
  for FP8 and BF16 datatypes"; 8.6 had FP8 only as the custom op `TRT_FP8QuantizeLinear`,
  builtin_op_importers.cpp@release/8.6-GA:1310); the zero point may be left out (:1179,
  "at least 2 inputs"); scales may be FLOAT16/BFLOAT16 (:1200).
- 10.0: INT4 weight-only DQ ("Added support for `INT4` quantization", Changelog 10.0 EA;
  docs/operators.md@release/10.0-GA:58 DequantizeLinear "INT8, FP8, INT4"); NVIDIA's
  developer guide (Explicit Quantization, "Quantized Weights") takes pre-quantized weights
  behind a DequantizeLinear. Before 10.0 the weight form export-gelu writes is the one
  NVIDIA's own quantization toolkit exports and TensorRT folds: float weights → Q → DQ
  (docs/operators.md@release/8.0:114 QuantizeLinear input "FP32, FP16"; huggingface/optimum
  PR 812: TensorRT "consumes a graph where the weights are stored in float32 with a QDQ
  pair"). The pre-quantized form from 10.0 is read from NVIDIA's current guide, not from a
  10.0-specific page.
- 11.0: implicit INT8 is gone: no `IInt8Calibrator`/`setInt8Calibrator` in
  NVIDIA/TensorRT include/NvInfer.h@release/11.0 (deprecated in 10.1, @release/10.16:11196),
  no `--calib` in trtexec 11 (sampleOptions.cpp@v11.0).
"""

from __future__ import annotations

from dataclasses import dataclass

from export_gelu.trt_parser.versions import version_key

_OTT = "onnx/onnx-tensorrt"
_NV = "NVIDIA/TensorRT"


@dataclass(frozen=True)
class QuantizationSupport:
    """What TensorRT `since` (up to the next record) does with quantized graphs."""

    since: str
    explicit_int8: bool  # Q/DQ become IQuantizeLayer/IDequantizeLayer
    fp8: bool  # FLOAT8E4M3FN Q/DQ (ONNX opset 19)
    calibration_cache: bool  # implicit INT8 from per-tensor ranges (trtexec --calib)
    zero_point_required: bool  # Q/DQ need their third input
    per_tensor_axis_refused: bool  # a per-tensor scale with an `axis` attribute is refused
    weights: str  # none | float_q_dq (float weights → Q → DQ) | quantized_dq (int8 → DQ)
    source: str


#: The records, oldest first.
SUPPORT: tuple[QuantizationSupport, ...] = (
    QuantizationSupport(
        "7.0", explicit_int8=False, fp8=False, calibration_cache=True,
        zero_point_required=True, per_tensor_axis_refused=False, weights="none",
        source=f"{_OTT} builtin_op_importers.cpp@84b5be1:2117-2162 (IScaleLayer, INT8 output "
               f"type); {_NV} samples/common/sampleEngines.cpp@release/7.0:470-472 (no "
               f"kEXPLICIT_PRECISION); {_NV} issue 994"),
    QuantizationSupport(
        "8.0", explicit_int8=True, fp8=False, calibration_cache=True,
        zero_point_required=True, per_tensor_axis_refused=True, weights="float_q_dq",
        source=f"{_OTT} builtin_op_importers.cpp@release/8.0:1012-1126; {_NV} CHANGELOG 8.0.1"),
    QuantizationSupport(
        "8.2", explicit_int8=True, fp8=False, calibration_cache=True,
        zero_point_required=True, per_tensor_axis_refused=False, weights="float_q_dq",
        source=f"{_OTT} builtin_op_importers.cpp@release/8.2-GA:1123-1237"),
    QuantizationSupport(
        "9.0", explicit_int8=True, fp8=True, calibration_cache=True,
        zero_point_required=False, per_tensor_axis_refused=False, weights="float_q_dq",
        source=f"{_OTT} builtin_op_importers.cpp@9.0-GA:1155-1377, onnx2trt_utils.cpp@9.0-GA:"
               "361, docs/Changelog.md 9.0 GA"),
    QuantizationSupport(
        "10.0", explicit_int8=True, fp8=True, calibration_cache=True,
        zero_point_required=False, per_tensor_axis_refused=False, weights="quantized_dq",
        source=f"{_OTT} docs/operators.md@release/10.0-GA:58, docs/Changelog.md 10.0 EA; "
               "NVIDIA TensorRT developer guide, Explicit Quantization, Quantized Weights"),
    QuantizationSupport(
        "11.0", explicit_int8=True, fp8=True, calibration_cache=False,
        zero_point_required=False, per_tensor_axis_refused=False, weights="quantized_dq",
        source=f"{_NV} include/NvInfer.h@release/11.0 (no IInt8Calibrator), "
               "samples/common/sampleOptions.cpp@v11.0 (no --calib)"),
)

#: The first TensorRT that calibrates INT8 for a network with runtime dimensions: 7.1 added
#: IBuilderConfig::setCalibrationProfile ("must be set if int8 calibration is used to set
#: scales for a network with runtime dimensions", NVIDIA/TensorRT include/NvInfer.h@release/7.1
#: :6627-6635; absent from @release/7.0), and trtexec 7.1 gives `--calib` the build's shapes as
#: that profile (samples/common/sampleOptions.cpp@release/7.1:526-530). TensorRT 7.0 has
#: neither: its calibration cache route takes static shapes only.
CALIBRATION_PROFILE_SINCE = "7.1"

#: ONNX opsets the lowering needs: the `axis` of a per-channel scale (QuantizeLinear-13) and
#: the FLOAT8E4M3FN types (QuantizeLinear-19), from the ONNX operator changelog.
PER_CHANNEL_OPSET = 13
FP8_OPSET = 19


def quantization_support(trt_version: str) -> QuantizationSupport:
    """The record TensorRT `trt_version` ('8.2', '10.13.0.35') falls under."""
    key = version_key(trt_version)
    older = [s for s in SUPPORT if version_key(s.since) <= key]
    return older[-1] if older else SUPPORT[0]


def first_version(predicate: str) -> str:
    """The first TensorRT whose record has `predicate` (a boolean field) true."""
    return next(s.since for s in SUPPORT if getattr(s, predicate))
