"""How a quantization decision is written for one target: the route (explicit Q/DQ, or an
unquantized graph plus a TensorRT calibration cache), the weight form and the opset it needs.

TensorRT facts come from `export_gelu.trt_parser.quantization` (read from the parser's
sources); ONNX and ONNX Runtime targets take explicit Q/DQ with pre-quantized weights (what
ONNX Runtime's own `quantize_static` writes, and what its CPU provider fuses into integer
kernels). A combination no version of the target can take is refused with the target error
(exit 3), naming the precision, the version and the versions that can.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from export_gelu.errors import TargetUnmetError
from export_gelu.quantize.formats import PRECISIONS, QuantFormat, format_of
from export_gelu.targets import TRT_PROFILES, TargetProfile
from export_gelu.trt_parser.quantization import (
    CALIBRATION_PROFILE_SINCE,
    FP8_OPSET,
    PER_CHANNEL_OPSET,
    first_version,
    quantization_support,
)

QDQ = "qdq"  # explicit QuantizeLinear/DequantizeLinear in the graph
CALIBRATION_CACHE = "calibration_cache"  # the fp32 graph and a TensorRT calibration cache


@dataclass(frozen=True)
class QuantRoute:
    """What the lowering writes for one (target, precision)."""

    target: str  # the profile's name
    trt_version: str  # "" for ONNX / ONNX Runtime targets
    precision: str  # int8 | fp8
    kind: str  # QDQ | CALIBRATION_CACHE
    weights: str  # float_q_dq | quantized_dq | none (no weights are quantized in the graph)
    weight_per_channel: bool  # a scale per output channel, else one per weight
    min_opset: int  # the lowest opset the written graph may have
    zero_point_required: bool
    weight_qmax: float = 0.0  # the largest quantized weight magnitude; 0: the format's own

    @property
    def fmt(self) -> QuantFormat:
        return format_of(self.precision)

    @property
    def weight_fmt(self) -> QuantFormat:
        """The format weights are quantized in (INT8 in 7 bits for ONNX Runtime)."""
        fmt = self.fmt
        return replace(fmt, qmax=self.weight_qmax) if self.weight_qmax else fmt


def _versions_with(predicate: str) -> str:
    """'TensorRT 9.0 and newer (trt9, trt10, trt11)' for a boolean support field."""
    since = first_version(predicate)
    names = [p.name for p in TRT_PROFILES if getattr(quantization_support(p.trt_version),
                                                     predicate)]
    return f"TensorRT {since} and newer ({', '.join(names)})"


def route_for(profile: TargetProfile, precision: str) -> QuantRoute:
    """The route for `profile` at `precision` (int8 | fp8); TargetUnmetError (exit 3) where
    the target cannot take that precision."""
    if precision not in PRECISIONS:
        raise ValueError(f"not a quantized precision: {precision!r}")
    fp8 = precision == "fp8"
    # FP8 weights keep one scale per weight: E4M3's error is relative to each value, so a
    # channel's own scale buys little (docs/quantization.md, "Placement").
    per_channel = not fp8
    opset = FP8_OPSET if fp8 else PER_CHANNEL_OPSET
    if profile.runtime != "trt":
        # ONNX Runtime's CPU kernels multiply u8 activations by s8 weights in pairs summed in
        # 16 bits (x86 without VNNI), which saturates with full-range weights: its own
        # quantizer's `reduce_range` answer is 7-bit weights (docs/quantization.md).
        seven_bits = 63.0 if profile.runtime == "ort" and not fp8 else 0.0
        return QuantRoute(profile.name, "", precision, QDQ, "quantized_dq", per_channel, opset,
                          True, seven_bits)
    version = profile.trt_version
    support = quantization_support(version)
    if fp8 and not support.fp8:
        raise TargetUnmetError(
            f"--precision fp8 on {profile.name}: TensorRT {version} does not parse FP8 "
            f"(FLOAT8E4M3FN) Q/DQ; FP8 is taken by {_versions_with('fp8')}, at opset "
            f"{FP8_OPSET} or newer")
    if fp8 and profile.opset < FP8_OPSET:
        raise TargetUnmetError(f"--precision fp8 on {profile.name}: FP8 Q/DQ needs opset "
                               f"{FP8_OPSET}; this target exports opset {profile.opset}")
    if not support.explicit_int8:
        if not support.calibration_cache:  # no such version yet; kept for the data's sake
            raise TargetUnmetError(f"--precision int8 on {profile.name}: TensorRT {version} "
                                   "takes neither Q/DQ nor a calibration cache")
        return QuantRoute(profile.name, version, precision, CALIBRATION_CACHE, "none", False,
                          profile.opset_floor, False)
    return QuantRoute(profile.name, version, precision, QDQ, support.weights, per_channel,
                      opset, support.zero_point_required)


def refuse_dynamic_cache(route: QuantRoute, dims: str) -> None:
    """A calibration-cache route for a graph with runtime dimensions (`dims`, in words: the
    flag or the inputs): TargetUnmetError (exit 3) before TensorRT 7.1, which has no
    calibration profile (trt_parser/quantization.py, CALIBRATION_PROFILE_SINCE)."""
    from export_gelu.trt_parser.versions import version_key

    if route.kind != CALIBRATION_CACHE or not dims:
        return
    if version_key(route.trt_version) < version_key(CALIBRATION_PROFILE_SINCE):
        raise TargetUnmetError(
            f"--precision {route.precision} on {route.target} with dynamic shapes ({dims}): "
            f"TensorRT {route.trt_version} calibrates INT8 for static shapes only (no "
            f"calibration profile before TensorRT {CALIBRATION_PROFILE_SINCE}); use trt7.1 or "
            "newer, or export static sizes")
