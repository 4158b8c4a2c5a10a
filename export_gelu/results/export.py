"""An export's records, step by step: the plan, the inputs, the graph written, the engine, the
verdict, and the result of one graph's export or of a folder's several graphs."""

from __future__ import annotations

import gc
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx

from export_gelu.check.calibration import Calibration
from export_gelu.check.greedy_decode import DecodeResult
from export_gelu.check.latency import Latency
from export_gelu.check.localize.divergence import Localization
from export_gelu.check.runners.devices import DeviceChoice, ProviderRun
from export_gelu.check.verdict.parity import ParityResult
from export_gelu.exporter.capture.cast_down import CastDown
from export_gelu.exporter.feeds.dynamic_axes import DynamicAxis
from export_gelu.exporter.feeds.dynamic_plan import DynamicPlan
from export_gelu.exporter.inputs.call_plan import CallPlan
from export_gelu.exporter.loading.loaded import LoadedModel
from export_gelu.onnx_weights import WrittenWeights
from export_gelu.options import ExportOptions
from export_gelu.passes.sites import GeluSite
from export_gelu.results.quantize import Quantization
from export_gelu.results.request import GraphsSource, OneGraphSource, Request
from export_gelu.targets import TargetProfile

if TYPE_CHECKING:
    import tensorrt
    import torch
    from polygraphy.backend.base import BaseRunner

Feed = OrderedDict[str, np.ndarray]


@dataclass(frozen=True)
class ExportPlan:
    """Where an export writes, where it checks, and what becomes of the engine."""

    profile: TargetProfile
    output: Path  # the graph file (a folder for several graphs)
    device: DeviceChoice | None  # None: nothing is checked here
    wants_engine: bool  # a TensorRT target, --engine or --require-trt
    trt_missing: str | None  # why no TensorRT engine can be built here (None: one can)

    @property
    def builds_engine(self) -> bool:
        """An engine is wanted and the installed TensorRT can build one here."""
        return self.wants_engine and self.trt_missing is None


class HeldModels:
    """The PyTorch objects an export holds for its checks: the model as loaded, the module
    parity runs as the reference, a `--cast-down`'s float64 original. The one mutable record
    of a run, on purpose: a big model's check frees them all once the reference has run and
    been recorded (`free`), so verification holds the weights once."""

    def __init__(self, loaded: tuple[LoadedModel, ...], reference: torch.nn.Module | None,
                 cast: CastDown | None) -> None:
        self.loaded = loaded  # what is exported, and what was loaded (a cast's original)
        self.reference: torch.nn.Module | None = reference
        self.cast = cast

    def free(self) -> None:
        """Drop every model (the loaded ones' modules and programs, the reference, the
        float64 original) and collect."""
        self.reference = None
        for loaded in self.loaded:
            loaded.module = loaded.exported = None
        if self.cast is not None:
            self.cast.reference = None
        gc.collect()


@dataclass(frozen=True)
class ExportInputs:
    """What an export runs its model on, and how."""

    loaded: LoadedModel  # what is exported (a float64 model's float32 copy under a cast)
    feeds: tuple[Feed, ...]  # forward() order; [0] is the main feed
    label: str  # where the feeds came from, in words (the report's `inputs`)
    real: bool  # the user's own data (--inputs), not generated
    generated: dict[str, str]  # the inputs made up: name → how
    dynamic: DynamicPlan
    call_plan: CallPlan
    cast: CastDown | None  # a float64 model cast down
    run_precision: str  # what parity runs in (fp64 for a float64 model)
    held: HeldModels

    @property
    def feed(self) -> Feed:
        """The main feed (the first)."""
        return self.feeds[0]

    @property
    def is_onnx(self) -> bool:
        return self.loaded.is_onnx


@dataclass(frozen=True)
class SavedGraph:
    """The graph an export wrote, and what making it found."""

    path: Path
    data: Path | None  # its external data file
    weights: WrittenWeights | None  # the weights streamed into it (a big graph's)
    graph: onnx.ModelProto  # the graph (without large weights' bytes) as written
    profile: TargetProfile  # the target it was fitted to (capped at an ONNX input's --opset)
    exporter: str  # "dynamo", "torchscript", ... or "none (ONNX input)"
    opset: int
    op_counts: dict[str, int]
    gelu_sites: list[GeluSite]  # as the passes left them (fx sites merged with ONNX's)
    compatibility: dict[str, list[str]]  # the target's static verdict ([] : parses as is)
    dynamic_profile: list[DynamicAxis] | None  # the TensorRT profile's axes (dynamic dims)


@dataclass(frozen=True)
class Engine:
    """An engine built here: the engine, where it was saved (`--engine`), the TensorRT that
    built it and how precision was asked of it, and whether it is of the target's own
    version."""

    engine: tensorrt.ICudaEngine
    saved: Path | None
    tensorrt: str
    precision_api: str
    engine_here: bool


@dataclass(frozen=True)
class GraphCheck:
    """One check of the written graph: the verdict, the runners' latency, each ONNX Runtime
    run asked for (and what became of it) and each runner's own verdict."""

    parity: ParityResult
    latency: dict[str, Latency] = field(default_factory=dict)
    providers: tuple[ProviderRun, ...] = ()
    by_runner: dict[str, ParityResult] = field(default_factory=dict)


@dataclass(frozen=True)
class ShapeCheck:
    """Parity at one size of the `--dynamic` ranges: the sizes, the inputs' shapes, which
    inputs were made and how, and each runner's verdict."""

    label: str  # opt | min | odd | max
    sizes: dict[str, int]
    inputs: dict[str, list[int]]
    generated: dict[str, str]
    by_runner: dict[str, ParityResult]


@dataclass(frozen=True)
class Verdict:
    """What checking an export found: the last graph check (after fp32 islands, the one on
    the rewritten graph), the graph checked, the reference runner (recorded for a big model:
    a bundle reuses it), and parity at each `--dynamic` size."""

    checked: GraphCheck
    graph: onnx.ModelProto
    reference: BaseRunner | None = None
    shapes: tuple[ShapeCheck, ...] = ()

    @property
    def parity(self) -> ParityResult:
        return self.checked.parity


@dataclass(frozen=True)
class GraphExport:
    """One graph exported: what was asked and planned, what was loaded and fed, the graph
    written, and what checking it found (None where it was not asked for)."""

    request: Request[ExportOptions]
    plan: ExportPlan
    source: OneGraphSource
    inputs: ExportInputs
    saved: SavedGraph
    engine: Engine | None
    verdict: Verdict | None  # None: --no-verify
    divergence: Localization | None
    bundle: Path | None
    calibration: Calibration | None
    generation: DecodeResult | None
    notes: tuple[str, ...]  # what the run said, in order
    seconds: dict[str, float]  # wall seconds per step
    quantization: Quantization | None = None  # --precision int8|fp8


@dataclass(frozen=True)
class GraphsExport:
    """A folder of graphs exported: each graph's own export (file name → it), the verdict
    summed over them, and the generation check of them together."""

    request: Request[ExportOptions]
    plan: ExportPlan
    source: GraphsSource
    parts: dict[str, GraphExport]
    parity: ParityResult | None  # None: --no-verify
    generation: DecodeResult | None
    notes: tuple[str, ...]
    seconds: dict[str, float]  # the folder's: each graph's steps summed, then its own


#: What an export returns.
ExportResult = GraphExport | GraphsExport
