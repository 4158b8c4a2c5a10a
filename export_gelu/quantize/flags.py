"""The trtexec flags that build a quantized graph on the device, per TensorRT version.

One record per flag: the first trtexec that parses it and the first that no longer does,
read from NVIDIA/TensorRT `samples/common/sampleOptions.cpp` at the release tags
(`file@tag:line`; export_gelu/device/trtexec_flag_table.py holds every flag of every line
and tests/quantize/test_flags.py holds these records to it). trtexec 11 parses `--int8`
only among its safety-build options (SafeBuilderOptions::parse, @v11.0:1742), so for an
ordinary build it is gone with the other precision flags: TensorRT 11 networks are
strongly typed and the Q/DQ nodes alone say what runs in INT8/FP8.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from export_gelu.quantize.routes import CALIBRATION_CACHE, QuantRoute
from export_gelu.trt_parser.versions import in_range

_SRC = "NVIDIA/TensorRT samples/common/sampleOptions.cpp"


@dataclass(frozen=True)
class FlagSupport:
    """A trtexec flag: the first TensorRT whose trtexec parses it, the first that does not."""

    flag: str
    since: str
    removed_in: str | None
    source: str


FLAGS: dict[str, FlagSupport] = {f.flag: f for f in (
    FlagSupport("--int8", "7.0", "11.0", f"{_SRC}@v7.0.0:429, @v10.16:1279"),
    FlagSupport("--fp16", "7.0", "11.0", f"{_SRC}@v7.0.0:428"),
    FlagSupport("--calib", "7.0", "11.0", f"{_SRC}@v7.0.0:431, @v10.16:1390"),
    FlagSupport("--precisionConstraints", "8.2", "11.0", f"{_SRC}@8.2.1:597"),
    FlagSupport("--layerPrecisions", "8.4", "11.0", f"{_SRC}@8.4.1:773"),
    FlagSupport("--fp8", "8.6", "11.0", f"{_SRC}@v8.6.0:954, @v10.16:1280"),
    FlagSupport("--stronglyTyped", "9.0", None, f"{_SRC}@v9.1.0:1076, @v11.0:1112"),
)}


def flag_taken(flag: str, trt_version: str) -> bool:
    """Whether the trtexec of `trt_version` parses `flag` for an ordinary build."""
    f = FLAGS[flag]
    return in_range(trt_version, f.since, f.removed_in)


@dataclass(frozen=True)
class DeviceBuild:
    """The precision flags of the device's trtexec call, and what could not be asked."""

    flags: tuple[str, ...]
    notes: tuple[str, ...]


def trtexec_precision_flags(route: QuantRoute, kept_layers: Sequence[str] = (),
                            cache_file: str = "calibration.cache",
                            fp16_fallback: bool = True) -> DeviceBuild:
    """The flags for `route`'s graph: the precision (`--int8`, `--fp8`), the cache of the
    implicit route (`--calib`), fp16 for the layers left in float, and `kept_layers` (the
    ONNX node names of products kept in float) pinned to fp32 where trtexec can."""
    version = route.trt_version
    flags: list[str] = []
    notes: list[str] = []

    def add(flag: str, value: str = "") -> bool:
        if not flag_taken(flag, version):
            return False
        flags.append(f"{flag}={value}" if value else flag)
        return True

    if not add("--fp8" if route.precision == "fp8" else "--int8"):
        notes.append(f"TensorRT {version} builds strongly typed networks: the Q/DQ nodes set "
                     "the precision, no flag does")
    if route.kind == CALIBRATION_CACHE:
        add("--calib", cache_file)
    if fp16_fallback:
        add("--fp16")
    if kept_layers:
        if flag_taken("--layerPrecisions", version):
            add("--precisionConstraints", "obey")
            add("--layerPrecisions", ",".join(f"{name}:fp32" for name in kept_layers))
        elif route.kind == CALIBRATION_CACHE:
            notes.append(f"trtexec {version} cannot pin layers (--layerPrecisions from 8.4): "
                         "the kept modules' inputs are left out of the calibration cache, so "
                         "TensorRT has no INT8 range for them")
        else:
            notes.append(f"trtexec {version} cannot pin layers: the kept modules have no Q/DQ, "
                         "so TensorRT runs them in fp32, or fp16 with --fp16")
    return DeviceBuild(tuple(flags), tuple(notes))
