"""The two quantized formats export-gelu writes: what a scale means in each, and numpy's
fake-quantization at a scale (what QuantizeLinear → DequantizeLinear computes).

Both are symmetric (zero point 0, TensorRT's only scheme): INT8 maps ±amax to ±127 (TensorRT's
weight range; its activations may reach −128, which a symmetric scale never asks for),
FP8 E4M3FN maps ±amax to ±448, the format's largest finite value (ONNX FLOAT8E4M3FN,
QuantizeLinear-19 saturating by default).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto


@dataclass(frozen=True)
class QuantFormat:
    """A quantized element type: its name, ONNX type and the largest magnitude it holds."""

    precision: str  # int8 | fp8
    elem_type: int  # ONNX element type of the quantized values
    qmax: float  # ±amax maps to ±qmax

    def scale(self, amax: float | np.ndarray) -> np.ndarray:
        """The scale that maps `amax` (a range's largest magnitude) to `qmax`."""
        return (np.asarray(amax, dtype=np.float64) / self.qmax).astype(np.float32)


INT8 = QuantFormat("int8", TensorProto.INT8, 127.0)
FP8 = QuantFormat("fp8", TensorProto.FLOAT8E4M3FN, 448.0)
FORMATS: dict[str, QuantFormat] = {"int8": INT8, "fp8": FP8}
PRECISIONS = tuple(FORMATS)


def format_of(precision: str) -> QuantFormat:
    """The format of `--precision int8|fp8` (ValueError for any other name)."""
    try:
        return FORMATS[precision]
    except KeyError:
        raise ValueError(f"not a quantized precision: {precision!r} (int8 or fp8)") from None


def _round_fp8(values: np.ndarray) -> np.ndarray:
    """`values` (already within ±448) rounded to the nearest FLOAT8E4M3FN value, ties to even:
    3 mantissa bits above 2**-6, a fixed step of 2**-9 below (subnormals)."""
    v = values.astype(np.float64)
    mag = np.abs(v)
    exp = np.floor(np.log2(np.maximum(mag, 2.0 ** -6)))
    step = 2.0 ** (exp - 3)
    return np.sign(v) * np.round(mag / step) * step


def fake_quantize(x: np.ndarray, scale: np.ndarray | float, fmt: QuantFormat,
                  axis: int | None = None) -> np.ndarray:
    """x quantized at `scale` and back, as QuantizeLinear → DequantizeLinear computes it
    (round half to even, saturating); `axis`: the channel axis of a per-channel scale."""
    s = np.asarray(scale, dtype=np.float32)
    if axis is not None and s.ndim == 1:
        shape = [1] * x.ndim
        shape[axis] = s.size
        s = s.reshape(shape)
    q = np.clip(x.astype(np.float32) / s, -fmt.qmax - (1 if fmt is INT8 else 0), fmt.qmax)
    q = np.round(q) if fmt is INT8 else _round_fp8(q)
    return (q * s).astype(np.float32)
