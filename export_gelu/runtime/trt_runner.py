"""TensorRT through polygraphy's lazy loaders: probe, build an engine, and run it.

Polygraphy constructs its loaders without tensorrt and fails only on the first real call
(KNOWLEDGE.md §7), so availability is probed once, explicitly, before anything is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from export_gelu.errors import BadInputError
from export_gelu.targets import TargetProfile


@dataclass(frozen=True)
class DynamicAxis:
    """One `--dynamic NAME:AXIS=MIN:OPT:MAX` flag."""

    name: str
    axis: int
    min: int
    opt: int
    max: int


def parse_dynamic(text: str) -> DynamicAxis:
    try:
        name, rest = text.split(":", 1)
        axis_s, dims = rest.split("=")
        lo, opt, hi = (int(v) for v in dims.split(":"))
        axis = int(axis_s)
    except ValueError:
        raise BadInputError(f"--dynamic {text!r}: expected NAME:AXIS=MIN:OPT:MAX, "
                            "e.g. input_ids:1=16:128:512") from None
    if not 0 < lo <= opt <= hi:
        raise BadInputError(f"--dynamic {text!r}: need 0 < MIN <= OPT <= MAX")
    return DynamicAxis(name, axis, lo, opt, hi)


@lru_cache(maxsize=1)
def trt_unavailable_reason() -> str | None:
    """None when tensorrt imports and a CUDA device is visible; else why not, in words."""
    try:
        import tensorrt  # type: ignore[import-not-found]  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return f"tensorrt is not installed ({type(exc).__name__}); install export-gelu[trt]"
    try:
        import torch

        if not torch.cuda.is_available():
            return "no CUDA GPU is visible (TensorRT needs one to build or run engines)"
    except Exception:  # noqa: BLE001
        return "cannot check for a CUDA GPU (torch.cuda unavailable)"
    return None


def build_engine_loader(onnx_path: Path, profile: TargetProfile, precision: str,
                        shapes: dict[str, tuple[int, ...]], dynamic: list[DynamicAxis],
                        engine_path: Path | None = None):
    """A polygraphy engine loader for `onnx_path`, honouring the profile's precision API."""
    from polygraphy.backend.trt import (
        CreateConfig,
        EngineFromNetwork,
        NetworkFromOnnxPath,
        Profile,
        SaveEngine,
    )

    strongly_typed = profile.precision_api == "strongly_typed"
    network = NetworkFromOnnxPath(str(onnx_path), strongly_typed=strongly_typed or None)
    profiles = None
    if dynamic:
        prof = Profile()
        for name, shape in shapes.items():
            axes = {d.axis: d for d in dynamic if d.name == name}
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


def trt_runner(engine_loader, name: str = "tensorrt"):
    from polygraphy.backend.trt import TrtRunner

    return TrtRunner(engine_loader, name=name)


def engine_runner_from_path(path: Path, name: str = "tensorrt"):
    """A runner for a serialized engine (`.plan` / `.engine`)."""
    from polygraphy.backend.trt import EngineFromPath, TrtRunner

    return TrtRunner(EngineFromPath(str(path)), name=name)
