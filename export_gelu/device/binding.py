"""Tensors as a TensorRT engine binds them: the dtype an input binds in (int64 before 9, float64
as float32), raw little-endian bytes and back, `.npz` feeds, and the optimization profile's
shapes."""

from __future__ import annotations

import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from export_gelu.errors import BadInputError
from export_gelu.trt_parser.versions import in_range

if TYPE_CHECKING:
    pass


#: TensorRT binds ONNX int64 inputs as int32 before 9 (DataType::kINT64 first appears in
#: NVIDIA/TensorRT v9.1.0 include/NvInferRuntimeBase.h); from 9 they bind as int64.
INT64_BINDING_SINCE = "9"


#: TensorRT has no float64 type: from 8.0 its ONNX parser reads DOUBLE inputs and weights as
#: FLOAT (onnx-tensorrt convertDtype, DOUBLE → kFLOAT; 7.x refuses DOUBLE, the
#: `double-tensors` restriction), so a float64 graph is bound and computed in float32 there.
DOUBLE_AS = "float32"


FLOAT64_ON_TRT = ("a float64 graph on TensorRT: the parser reads DOUBLE as FLOAT, so the device "
                  "binds its inputs and computes in float32; the bundle records fp32's "
                  "tolerances (the check here ran in float64); --cast-down exports a float32 "
                  "graph instead")


Shape = tuple[int, ...]


Profile = dict[str, tuple[Shape, Shape, Shape]]


def binding_dtype(onnx_dtype: str, trt_version: str) -> str:
    """The dtype name TensorRT `trt_version` binds an ONNX input of `onnx_dtype` as."""
    if onnx_dtype == "int64" and not in_range(trt_version, since=INT64_BINDING_SINCE):
        return "int32"
    if onnx_dtype == "float64":
        return DOUBLE_AS
    return onnx_dtype


def device_precision(precision: str) -> str:
    """The precision TensorRT computes a graph checked here at `precision` in: a float64
    graph's (fp64) in fp32, since the parser reads DOUBLE as FLOAT; others as they are."""
    return "fp32" if precision == "fp64" else precision


def raw_bytes(arr: np.ndarray, dtype: str) -> bytes:
    """`arr` as trtexec --loadInputs reads it: C order, little-endian, `dtype` elements."""
    if dtype == "bfloat16":
        bits = np.ascontiguousarray(arr, dtype="<f4").view("<u4").astype(np.uint64)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
        return rounded.astype("<u2").tobytes()
    want = np.dtype(dtype).newbyteorder("<")
    if arr.dtype.kind in "iu" and want.kind in "iu":
        info = np.iinfo(want)
        if arr.size and (arr.min() < info.min or arr.max() > info.max):
            raise BadInputError(f"input values outside {dtype}'s range cannot be bound as "
                                f"{dtype} (TensorRT before {INT64_BINDING_SINCE} binds int64 "
                                "as int32)")
    return np.ascontiguousarray(arr).astype(want).tobytes()


def save_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """What `np.savez(path, **arrays)` writes, also for arrays named `file` or `allow_pickle`
    (np.savez's own parameters: the first raised TypeError, the second was left out)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, arr in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(arr))


def read_raw(path: Path, dtype: str, shape: Sequence[int]) -> np.ndarray:
    """A raw input file back as an array (bfloat16 widened to float32)."""
    if dtype == "bfloat16":
        bits = np.fromfile(path, dtype="<u2").astype(np.uint32) << 16
        return bits.view("<f4").reshape(shape)
    return np.fromfile(path, dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape)


def profile_shapes(shapes: Mapping[str, Shape], dynamic: Sequence[Any],
                   symbolic: Mapping[str, bool]) -> Profile | None:
    """MIN/OPT/MAX per input: `dynamic` (DynamicAxis records: name, axis, min, opt, max)
    ranges an axis; every other axis stays at the run shape. None when every input is static
    and nothing is ranged (then no shape flags are needed)."""
    if not dynamic and not any(symbolic.values()):
        return None
    out: Profile = {}
    for name, shape in shapes.items():
        axes = {d.axis % len(shape): d for d in dynamic if d.name == name} if shape else {}
        lo = tuple(axes[i].min if i in axes else s for i, s in enumerate(shape))
        opt = tuple(axes[i].opt if i in axes else s for i, s in enumerate(shape))
        hi = tuple(axes[i].max if i in axes else s for i, s in enumerate(shape))
        out[name] = (lo, opt, hi)
    return out
