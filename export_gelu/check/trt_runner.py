"""TensorRT through polygraphy's lazy loaders: probe, build an engine, and run it.

Polygraphy constructs its loaders without tensorrt and fails only on the first real call
(docs/polygraphy.md), so availability is probed once, explicitly, before anything is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import onnx

from export_gelu.errors import BadInputError
from export_gelu.targets import TargetProfile, installed_tensorrt_version


@dataclass(frozen=True)
class DynamicAxis:
    """One input axis's range: input `name`, `axis`, MIN/OPT/MAX, and the dim it carries."""

    name: str
    axis: int
    min: int
    opt: int
    max: int
    dim: str = ""  # the named dim (batch, seq) this axis carries, when it has one


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


def check_dynamic(dynamic: list[DynamicAxis], model: onnx.ModelProto,
                  shapes: dict[str, tuple[int, ...]]) -> None:
    """Refuse `--dynamic` ranges the produced graph or the feed cannot honour (exit 2)."""
    inputs = {i.name: i for i in model.graph.input}
    for d in dynamic:
        flag = f"--dynamic {d.name}:{d.axis}={d.min}:{d.opt}:{d.max}"
        if d.name not in shapes or d.name not in inputs:
            raise BadInputError(f"{flag}: the graph has no input {d.name!r} (inputs: "
                                f"{', '.join(shapes) or 'none'})")
        dims = inputs[d.name].type.tensor_type.shape.dim
        if not -len(dims) <= d.axis < len(dims):
            raise BadInputError(f"{flag}: input {d.name!r} has rank {len(dims)}")
        dim = dims[d.axis]
        if dim.HasField("dim_value"):
            raise BadInputError(f"{flag}: axis {d.axis} of {d.name!r} is static "
                                f"({dim.dim_value}) in the graph; TensorRT can only range a "
                                "dynamic axis (export the model with that axis dynamic)")
        size = shapes[d.name][d.axis]
        if not d.min <= size <= d.max:
            raise BadInputError(f"{flag}: the parity input has {size} there, outside "
                                f"[{d.min}, {d.max}]")


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


def installed_profile() -> TargetProfile | None:
    """The profile of the tensorrt that is installed (its precision API is the one to use)."""
    from export_gelu.targets import resolve_target

    return resolve_target("trt")[0] if installed_tensorrt_version() else None


def build_engine_loader(onnx_path: Path, precision: str, shapes: dict[str, tuple[int, ...]],
                        dynamic: list[DynamicAxis], engine_path: Path | None = None,
                        builder: TargetProfile | None = None):
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


def build_engine(loader, onnx_path: Path):
    """Run `loader` (parse + build, and save when asked); a TensorRT failure is exit 3."""
    from export_gelu.check.quiet import quiet_polygraphy
    from export_gelu.errors import TargetUnmetError

    try:
        with quiet_polygraphy():
            return loader()
    except Exception as exc:  # noqa: BLE001 - parser and builder errors come in many types
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise TargetUnmetError(f"TensorRT {installed_tensorrt_version()} could not build an "
                               f"engine from {onnx_path.name}: {first}") from exc


def trt_runner(engine, name: str = "tensorrt"):
    """A polygraphy TrtRunner that casts each input to the dtype its engine binding takes.

    TensorRT before 9 binds ONNX int64 inputs as int32; the feed is cast to match.
    """
    from polygraphy.backend.trt import TrtRunner
    from polygraphy.datatype import DataType

    class FeedCastingTrtRunner(TrtRunner):
        def infer(self, feed_dict, check_inputs=True, *args, **kwargs):  # noqa: ANN001
            meta = self.get_input_metadata(use_numpy_dtypes=False)
            cast = {}
            for key, value in feed_dict.items():
                want = DataType.to_dtype(meta[key].dtype, "numpy") if key in meta else None
                cast[key] = value.astype(want) if want is not None and value.dtype != want \
                    else value
            return super().infer(cast, check_inputs, *args, **kwargs)

    return FeedCastingTrtRunner(engine, name=name)


def engine_runner_from_path(path: Path, name: str = "tensorrt"):
    """A runner for a serialized engine (`.plan` / `.engine`)."""
    from polygraphy.backend.trt import EngineFromPath

    return trt_runner(EngineFromPath(str(path)), name=name)
