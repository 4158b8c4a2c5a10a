"""TensorRT through polygraphy's lazy loaders: probe, build an engine, and run it.

Polygraphy constructs its loaders without tensorrt and fails only on the first real call
(docs/polygraphy.md), so availability is probed once, explicitly, before anything is built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from export_gelu.exporter.feeds.dynamic_axes import DynamicAxis, check_dynamic, parse_dynamic
from export_gelu.targets import TargetProfile, installed_tensorrt_version
from export_gelu.trt_parser.capability import POLYGRAPHY_MIN_TRT
from export_gelu.trt_parser.versions import in_range

if TYPE_CHECKING:
    import numpy as np
    from polygraphy.backend.trt import EngineFromNetwork, SaveEngine, TrtRunner

T = TypeVar("T")


@lru_cache(maxsize=1)
def trt_unavailable_reason() -> str | None:
    """None when tensorrt imports and a CUDA device is visible; else why not, in words."""
    try:
        import tensorrt  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return f"tensorrt is not installed ({type(exc).__name__}); install export-gelu[trt]"
    try:
        import torch

        if not torch.cuda.is_available():
            return "no CUDA GPU is visible (TensorRT needs one to build or run engines)"
    except Exception:  # noqa: BLE001
        return "cannot check for a CUDA GPU (torch.cuda unavailable)"
    return None


def local_engine_blocker(trt_version: str) -> str | None:
    """None when this machine can build and run engines for `trt_version`; else why not.

    Checks the version (polygraphy's floor, trt_parser/capability.py), then an importable
    tensorrt and a visible CUDA GPU. An engine for an older line is built with the installed
    TensorRT, which the report names.
    """
    if in_range(trt_version, fixed_in=POLYGRAPHY_MIN_TRT):
        return (f"TensorRT {trt_version} cannot be driven from here: polygraphy supports "
                f"TensorRT {POLYGRAPHY_MIN_TRT} and newer only")
    return trt_unavailable_reason()


#: What the report says instead of a local engine: the device route (report.trt["device"]).
DEVICE_ROUTE = "build and check it on the device with --bundle DIR"


def installed_profile() -> TargetProfile | None:
    """The profile of the tensorrt that is installed (its precision API is the one to use)."""
    from export_gelu.targets import resolve_target

    return resolve_target("trt")[0] if installed_tensorrt_version() else None


def build_engine_loader(onnx_path: Path, precision: str, shapes: dict[str, tuple[int, ...]],
                        dynamic: list[DynamicAxis], engine_path: Path | None = None,
                        builder: TargetProfile | None = None
                        ) -> EngineFromNetwork | SaveEngine:
    """A polygraphy engine loader for `onnx_path`.

    Precision is requested the way the installed TensorRT (`builder`) takes it: builder flags
    up to 10, a strongly typed network on 11 (no FP16 flag; the graph's own types decide).
    One optimization profile holds every input: the `--dynamic` ranges, and the parity shape
    for the other axes.
    """
    from polygraphy.backend.trt import (
        CreateConfig,
        EngineFromNetwork,
        NetworkFromOnnxPath,
        Profile,
        SaveEngine,
    )

    builder = builder or installed_profile()
    strongly_typed = builder is not None and builder.precision_api == "strongly_typed"
    network = NetworkFromOnnxPath(str(onnx_path), strongly_typed=strongly_typed or None)
    profiles = None
    if dynamic:
        prof = Profile()
        for name, shape in shapes.items():
            axes = {d.axis % len(shape): d for d in dynamic if d.name == name}
            lo = tuple(axes[i].min if i in axes else s for i, s in enumerate(shape))
            opt = tuple(axes[i].opt if i in axes else s for i, s in enumerate(shape))
            hi = tuple(axes[i].max if i in axes else s for i, s in enumerate(shape))
            prof.add(name, min=lo, opt=opt, max=hi)
        profiles = [prof]
    if strongly_typed:
        config = CreateConfig(profiles=profiles)
    else:
        config = CreateConfig(fp16=precision == "fp16", bf16=precision == "bf16",
                              profiles=profiles)
    engine = EngineFromNetwork(network, config=config)
    if engine_path is not None:
        engine = SaveEngine(engine, str(engine_path))
    return engine


def build_engine(loader: Callable[[], T], onnx_path: Path) -> T:
    """Run `loader` (parse + build, and save when asked); a TensorRT failure is exit 3."""
    from export_gelu.check.runners.quiet import quiet_polygraphy
    from export_gelu.errors import TargetUnmetError

    try:
        with quiet_polygraphy():
            return loader()
    except Exception as exc:  # noqa: BLE001 - parser and builder errors come in many types
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise TargetUnmetError(f"TensorRT {installed_tensorrt_version()} could not build an "
                               f"engine from {onnx_path.name}: {first}") from exc


def trt_runner(engine: object, name: str = "tensorrt") -> TrtRunner:
    """A polygraphy TrtRunner that casts each input to the dtype its engine binding takes.

    TensorRT before 9 binds ONNX int64 inputs as int32; the feed is cast to match.
    """
    from polygraphy.backend.trt import TrtRunner
    from polygraphy.datatype import DataType

    class FeedCastingTrtRunner(TrtRunner):
        def infer(self, feed_dict: Mapping[str, np.ndarray], check_inputs: bool = True,
                  *args: object, **kwargs: object) -> dict[str, np.ndarray]:
            meta = self.get_input_metadata(use_numpy_dtypes=False)
            cast = {}
            for key, value in feed_dict.items():
                want = DataType.to_dtype(meta[key].dtype, "numpy") if key in meta else None
                cast[key] = value.astype(want) if want is not None and value.dtype != want \
                    else value
            return super().infer(cast, check_inputs, *args, **kwargs)

    return FeedCastingTrtRunner(engine, name=name)


def engine_runner_from_path(path: Path, name: str = "tensorrt") -> TrtRunner:
    """A runner for a serialized engine (`.plan` / `.engine`)."""
    from polygraphy.backend.trt import EngineFromPath

    return trt_runner(EngineFromPath(str(path)), name=name)


__all__ = ["DynamicAxis", "check_dynamic", "parse_dynamic", "trt_unavailable_reason",
           "local_engine_blocker", "installed_profile", "build_engine_loader", "build_engine",
           "trt_runner", "engine_runner_from_path"]
