"""A deployed artifact (an ONNX file for ONNX Runtime, or a TensorRT engine): what it takes
and gives, the precision it runs in, and how a model's inputs map onto it."""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from export_gelu.errors import BadInputError, TargetUnmetError

if TYPE_CHECKING:
    import onnx
    from polygraphy.backend.base import BaseRunner
    from polygraphy.common import TensorMetadata

#: a dimension of a declared shape: its size, or its name (a dynamic one; "?" unnamed)
Dim = int | str

ENGINE_SUFFIXES = (".plan", ".engine", ".trt")
_FLOAT_PRECISION = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp32"}


@dataclass
class Deployed:
    """The artifact under test, described by its own inputs and outputs."""

    path: Path
    kind: str  # onnx | engine
    inputs: OrderedDict[str, tuple[np.dtype | str, tuple[Dim, ...]]] = field(
        default_factory=OrderedDict)  # name → (dtype, shape)
    outputs: list[str] = field(default_factory=list)
    precision: str = "fp32"
    precision_why: str = ""

    @property
    def runtime(self) -> str:
        return "tensorrt" if self.kind == "engine" else "onnxruntime"


def _onnx_dtype_name(elem_type: int) -> str:
    import onnx

    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError, TypeError):
        return onnx.TensorProto.DataType.Name(elem_type).lower()


def _precision_from(dtypes: list[str], where: str) -> tuple[str, str] | None:
    floats = [_FLOAT_PRECISION[d] for d in dtypes if d in _FLOAT_PRECISION]
    if not floats:
        return None
    precision = Counter(floats).most_common(1)[0][0]
    return precision, f"detected from the {where} dtypes ({', '.join(sorted(set(dtypes)))})"


def detect_onnx_precision(model: onnx.ModelProto) -> tuple[str, str]:
    """fp32 / fp16 / bf16 from the graph's float inputs, else its outputs, else its weights."""
    graph = model.graph
    inits = {i.name for i in graph.initializer}
    for values, where in (([v for v in graph.input if v.name not in inits], "input"),
                          (list(graph.output), "output")):
        found = _precision_from([_onnx_dtype_name(v.type.tensor_type.elem_type)
                                 for v in values], where)
        if found:
            return found
    found = _precision_from([_onnx_dtype_name(i.data_type) for i in graph.initializer], "weight")
    return found or ("fp32", "no float tensors found; assumed fp32")


def describe_onnx(model: onnx.ModelProto, path: Path) -> Deployed:
    """An ONNX graph (`model`, an onnx.ModelProto, read or produced) as a Deployed: its
    declared inputs, outputs and precision."""
    inits = {i.name for i in model.graph.initializer}
    inputs: OrderedDict[str, tuple[np.dtype | str, tuple[Dim, ...]]] = OrderedDict()
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                      for d in tt.shape.dim)
        inputs[vi.name] = (_onnx_dtype_name(tt.elem_type), shape)
    precision, why = detect_onnx_precision(model)
    return Deployed(path, "onnx", inputs, [o.name for o in model.graph.output], precision, why)


def _open_onnx(path: Path) -> Deployed:
    from export_gelu.exporter.loading.onnx_checks import check_external_data
    from export_gelu.onnx_file import read_structure

    check_external_data(path)  # ONNX Runtime will read it: its data stays in its folder
    return describe_onnx(read_structure(path), path)


def _open_engine(path: Path) -> Deployed:
    from export_gelu.check.runners.trt_runner import engine_runner_from_path, trt_unavailable_reason

    why_not = trt_unavailable_reason()
    if why_not:
        raise TargetUnmetError(
            f"{path} is a TensorRT engine and cannot be run here: {why_not}. Run verify on a "
            "machine with TensorRT and a GPU, or verify the ONNX file it was built from")
    import tensorrt as trt

    runner = engine_runner_from_path(path)
    try:
        with runner:
            meta = runner.get_input_metadata()
            engine = runner.engine
            names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
            outputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
    except Exception as exc:  # noqa: BLE001 - deserialization errors come in many types
        raise BadInputError(f"{path}: TensorRT cannot deserialize it ({exc}); an engine only "
                            "runs on the TensorRT version and GPU it was built with") from exc
    inputs = OrderedDict((name, (getattr(m.dtype, "name", str(m.dtype)), tuple(m.shape)))
                         for name, m in meta.items())
    found = _precision_from([str(d) for d, _s in inputs.values()], "engine input")
    precision, why = found or ("fp32", "engine inputs are not floats; assumed fp32")
    why += ("; an engine built with reduced precision may keep fp32 inputs: pass --precision "
            "to set the tolerances")
    return Deployed(path, "engine", inputs, outputs, precision, why)


def open_deployed(path: str | Path) -> Deployed:
    """Describe DEPLOYED: an ONNX file (by content) or a TensorRT engine (.plan/.engine/.trt)."""
    from export_gelu.exporter.model_files.detect import ModelFormat, detect_format

    path = Path(path)
    if not path.is_file():
        raise BadInputError(f"{path}: no such file")
    if path.suffix.lower() in ENGINE_SUFFIXES:
        return _open_engine(path)
    try:
        fmt = detect_format(path).format
    except BadInputError:
        fmt = None
    if fmt is not ModelFormat.ONNX:
        raise BadInputError(f"{path}: the deployed artifact must be an ONNX file or a TensorRT "
                            f"engine ({', '.join(ENGINE_SUFFIXES)})")
    return _open_onnx(path)


def _cast(arr: np.ndarray, dtype: np.dtype | str) -> np.ndarray:
    try:
        want = np.dtype(dtype)
    except TypeError:
        return arr
    if arr.dtype == want or arr.dtype.kind not in "fiub" or want.kind not in "fiub":
        return arr
    if arr.dtype.kind == "f" and want.kind != "f":
        return arr  # never silently truncate floats into integers
    return arr.astype(want)


def feed_for(deployed: Deployed, feed: Mapping[str, np.ndarray], *, produced: bool = False
             ) -> OrderedDict[str, np.ndarray]:
    """`feed` (forward() order) keyed by the deployed inputs' names and cast to the dtypes
    they declare: the one mapping of a model's inputs onto a graph, for DEPLOYED files and
    for the graph an export produced (`produced`).

    Names are matched first; for a DEPLOYED file whose names all differ, inputs pair by
    position when the counts agree. A float input whose type the graph does not declare
    takes the graph's precision. A mismatch is the user's (exit 2) for DEPLOYED, ours (exit
    3: the target cannot be met) for a produced graph. The result keeps forward() order, so
    the PyTorch runner can take it positionally.
    """
    wanted = list(deployed.inputs)
    given = list(feed)
    if set(wanted) <= set(given) and (produced or set(wanted) == set(given)):
        pairs = [(n, n) for n in given if n in deployed.inputs]
    elif not produced and not set(wanted) & set(given) and len(wanted) == len(given):
        pairs = list(zip(wanted, given))
    else:
        missing = [n for n in wanted if n not in feed]
        if produced:
            raise TargetUnmetError(f"the produced graph takes an input {missing[0]!r} that "
                                   f"the model was not given (inputs: {', '.join(given)})")
        extra = [n for n in given if n not in deployed.inputs]
        raise BadInputError(
            f"{deployed.path}: the inputs do not match the deployed graph's "
            f"({', '.join(wanted) or 'none'}): "
            + "; ".join(filter(None, [f"missing {', '.join(missing)}" if missing else None,
                                      f"not taken: {', '.join(extra)}" if extra else None])))
    undeclared_float = _PRECISION_FLOAT.get(deployed.precision)
    out: OrderedDict[str, np.ndarray] = OrderedDict()
    for name, source in pairs:
        dtype, shape = deployed.inputs[name]
        arr = np.asarray(feed[source])
        if dtype == "undefined" and arr.dtype.kind == "f" and undeclared_float is not None:
            dtype = undeclared_float
        arr = _cast(arr, dtype)
        fixed = [d for d in shape if isinstance(d, int) and d > 0]
        if len(shape) != arr.ndim or (len(fixed) == len(shape) and tuple(shape) != arr.shape):
            shown = "x".join(str(d) for d in shape)
            message = (f"input {name!r}: shape {'x'.join(map(str, arr.shape))} does not fit "
                       f"the {'produced' if produced else 'deployed'} graph's "
                       f"{shown or 'scalar'}")
            raise TargetUnmetError(message) if produced else BadInputError(message)
        out[name] = arr
    return out


#: The float type an input the graph declares no type for is fed in, by the graph's precision.
_PRECISION_FLOAT = {"fp16": "float16", "fp32": "float32"}


def renamed_outputs(inner: BaseRunner, names: list[str]) -> BaseRunner:
    """`inner` (a polygraphy runner) with its outputs renamed `names`, in order: an ONNX
    reference whose exporter named its outputs differently from DEPLOYED's."""
    from polygraphy.backend.base import BaseRunner

    class Renamed(BaseRunner):
        def __init__(self) -> None:
            super().__init__(name=inner.name, prefix="renamed-runner")

        def activate_impl(self) -> None:
            inner.activate()

        def get_input_metadata_impl(self) -> TensorMetadata:
            return inner.get_input_metadata(use_numpy_dtypes=False)

        def infer_impl(self, feed_dict: dict[str, np.ndarray]) -> OrderedDict[str, np.ndarray]:
            out = inner.infer(feed_dict, check_inputs=False)
            self.inference_time = inner.last_inference_time()
            if len(out) != len(names):
                raise RuntimeError(f"{inner.name} gives {len(out)} outputs, DEPLOYED "
                                   f"{len(names)}")
            return OrderedDict(zip(names, out.values()))

        def deactivate_impl(self) -> None:
            inner.deactivate()

    return Renamed()


def deployed_runner(deployed: Deployed, threads: int = 1, name: str | None = None
                    ) -> BaseRunner:
    """A polygraphy runner for the artifact: ONNX Runtime (CPU, explicit threads) or TensorRT."""
    if deployed.kind == "engine":
        from export_gelu.check.runners.trt_runner import engine_runner_from_path

        return engine_runner_from_path(deployed.path, name=name or "tensorrt")
    from export_gelu.check.runners.ort_runner import ort_runner

    return ort_runner(deployed.path, threads=threads, name=name or "onnxruntime")


def deployed_feed(feed: Mapping[str, np.ndarray], model: onnx.ModelProto
                  ) -> OrderedDict[str, np.ndarray]:
    """The feed as the graph an export produced (`model`, an onnx.ModelProto) takes it: its
    inputs only, each in the type it declares (an fp32 ONNX input exported with
    `--precision fp16` keeps fp32 inputs): `feed_for` on the produced graph."""
    return feed_for(describe_onnx(model, Path("the produced graph")), feed, produced=True)
