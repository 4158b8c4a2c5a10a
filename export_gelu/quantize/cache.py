"""TensorRT's calibration cache, as text: written for the implicit INT8 route, read back.

The format (TensorRT writes it; its readers are public): a header line
`TRT-<NV_TENSORRT_VERSION>-<calibrator>`, then one line per tensor, `<tensor name>: <hex>`,
the hex being the 32 bits of the tensor's float32 scale (amax / 127), big-end first. Source:
microsoft/onnxruntime onnxruntime/core/providers/tensorrt/tensorrt_execution_provider_utils.h
@05ee82b, `ReadDynamicRange` ("Native TensorRT generated calibration table … tensor name :
scale in 32-bit single precision IEEE754 format … TRT-7103-EntropyCalibration2 /
data_0: 4000889d": the name up to the first ':', the rest parsed with strtoul(…, 16), the
range = scale × 127). Tensor names are the ONNX graph's: the parser names each layer's
output tensor after the ONNX output it imports.

NV_TENSORRT_VERSION is major·1000 + minor·100 + patch up to 9.x (NVIDIA/TensorRT
include/NvInferRuntimeBase.h@release/8.6:90-91; 7.1.3 → 7103 as in the example above) and
major·10000 + minor·100 + patch from 10.0 (@release/10.0:89-93). The calibrator named is
trtexec's own, `EntropyCalibration2` (its RndInt8Calibrator derives IInt8EntropyCalibrator2,
samples/common/sampleEngines.cpp@release/7.0:149 … @release/10.16:321), the one that reads
the cache under `trtexec --int8 --calib=FILE`. Whether a TensorRT release refuses a cache
whose header names another version is not stated in any source read here, so the header
names the target's own version.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from export_gelu.errors import BadInputError, TargetUnmetError
from export_gelu.trt_parser.versions import version_key

CALIBRATOR = "EntropyCalibration2"
#: Characters a tensor name cannot hold in the cache: the reader splits at the first ':'.
_FORBIDDEN = (":", "\n", "\r")


def tensorrt_version_number(trt_version: str) -> int:
    """NV_TENSORRT_VERSION of a release ('7.1.3' → 7103, '10.3' → 100300)."""
    major, minor, patch = version_key(trt_version)
    return major * 10000 + minor * 100 + patch if major >= 10 else \
        major * 1000 + minor * 100 + patch


def scale_hex(scale: float) -> str:
    """The float32 bits of `scale` as eight lowercase hex digits (big-end first)."""
    return struct.pack(">f", scale).hex()


def hex_scale(text: str) -> float:
    """The float32 whose bits `text` (hex digits) spells."""
    return struct.unpack(">f", bytes.fromhex(text.strip().rjust(8, "0")))[0]


def calibration_cache_text(scales: Mapping[str, float], trt_version: str) -> str:
    """The cache for TensorRT `trt_version` holding `scales` (tensor name → float32 scale)."""
    bad = [n for n in scales if any(c in n for c in _FORBIDDEN)]
    if bad:
        raise TargetUnmetError(f"tensor name {bad[0]!r} holds ':' or a line break, which a "
                               "TensorRT calibration cache cannot hold; rename it first")
    lines = [f"TRT-{tensorrt_version_number(trt_version)}-{CALIBRATOR}"]
    lines += [f"{name}: {scale_hex(scale)}" for name, scale in scales.items()]
    return "\n".join(lines) + "\n"


def read_calibration_cache(text: str) -> tuple[str, dict[str, float]]:
    """(header, tensor name → scale) of a cache's text; exit 2 for text that is not one."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("TRT-"):
        raise BadInputError("not a TensorRT calibration cache (no 'TRT-' header line)")
    scales: dict[str, float] = {}
    for number, line in enumerate(lines[1:], start=2):
        name, sep, value = line.partition(":")
        try:
            if not sep:
                raise ValueError(line)
            scales[name] = hex_scale(value)
        except ValueError:
            raise BadInputError(f"calibration cache line {number}: not 'name: hex'") from None
    return lines[0], scales
