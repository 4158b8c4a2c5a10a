"""Can this installation build and run a TensorRT engine for a given version, or only the
device can?

Engines are built through polygraphy, which drives TensorRT 8.5 and newer only (polygraphy
0.48.0 removed support for older versions; its TrtRunner calls 8.5 APIs unconditionally), and
Python wheels of TensorRT 7.x/8.0 exist only for Pythons older than this package needs.
Older versions are built and checked on the device itself from a bundle (`--bundle DIR`).
"""

from __future__ import annotations

from export_gelu.trt_parser.versions import in_range

#: The oldest TensorRT the polygraphy releases export-gelu supports can drive.
POLYGRAPHY_MIN_TRT = "8.5"


def local_engine_blocker(trt_version: str) -> str | None:
    """None when this machine can build and run engines for `trt_version`; else why not.

    Checks the version (polygraphy's floor), then an importable tensorrt and a visible CUDA
    GPU. An engine for an older line is built with the installed TensorRT, which the report
    names.
    """
    from export_gelu.check.trt_runner import trt_unavailable_reason

    if in_range(trt_version, fixed_in=POLYGRAPHY_MIN_TRT):
        return (f"TensorRT {trt_version} cannot be driven from here: polygraphy supports "
                f"TensorRT {POLYGRAPHY_MIN_TRT} and newer only; build and check it on the "
                "device with --bundle DIR")
    why = trt_unavailable_reason()
    if why:
        return f"{why}; or build and check it on the device with --bundle DIR"
    return None
