"""The one state every stage reads and writes: what the run was asked (its options), and the
typed records its stages make (a loaded model, its feeds, a captured program, a graph, a check
result), with the report the results are written into.

Options typed per command: `RunState` is generic in its options record, and each stage takes
the state of the command(s) it serves (`ExportState`, `VerifyState`, `FormsState`,
`InspectState`; `RunState[ExportOptions | VerifyOptions]` for a stage export and verify share,
`AnyState` for one every command runs), so it reads its own command's options without
`getattr`. The options are set once, at construction, so a state of a narrower record is one
of a wider (the type parameter is covariant): a stage every command runs fits any command's
list, while a verify stage in the export list is a type error.

Fields are None (or empty) until the stage that makes them has run; `need(state.X, "X")` says
so, in one line, where a stage finds one missing (a stage list out of order is a bug). The
report is made with the state and is never None; stages write their findings into it, but what
decides the run (which stage applies, which tolerances hold) is read from the typed results
here (`parity`, `gelu_sites`, `weights`, `forms`, `chosen`), never from the report.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from export_gelu.options import (
    Checked,
    ExportOptions,
    FormsOptions,
    InspectOptions,
    RunOptions,
    VerifyOptions,
)
from export_gelu.pipeline.stage import Clock
from export_gelu.progress import Progress
from export_gelu.report.report import Report

if TYPE_CHECKING:  # the records' own modules load torch, ONNX Runtime or polygraphy
    import onnx
    import onnx_graphsurgeon as gs
    import tensorrt
    import torch
    from polygraphy.backend.base import BaseRunner

    from export_gelu.check.compare_forms import FormsComparison
    from export_gelu.check.deployed import Deployed
    from export_gelu.check.devices import DeviceChoice
    from export_gelu.check.parity import ParityResult
    from export_gelu.device.choice import DeviceFormRow, FormRun
    from export_gelu.exporter.capture.cast_down import CastDown
    from export_gelu.exporter.feeds.dynamic import DynamicPlan
    from export_gelu.exporter.inputs.call_plan import CallPlan
    from export_gelu.exporter.loading.load import LoadedModel
    from export_gelu.onnx_weights import WrittenWeights
    from export_gelu.passes.sites import GeluSite
    from export_gelu.targets import TargetProfile
    from export_gelu.tolerances import Tolerances

Feed = OrderedDict[str, np.ndarray]

#: A state's options record (covariant: the options are set once, when the state is made).
OptionsT_co = TypeVar("OptionsT_co", bound=RunOptions, covariant=True)
#: The options record of a state being made.
OptionsT = TypeVar("OptionsT", bound=RunOptions)
T = TypeVar("T")


@dataclass
class RunState(Generic[OptionsT_co]):
    """A run's state, filled stage by stage; each stage's `stage_io` says which fields it
    reads and writes."""

    options: OptionsT_co
    checked: Checked
    model_path: Path
    progress: Progress
    clock: Clock = field(default_factory=Clock)
    #: what the run found, written from the results (made here; the plan stage fills in what
    #: the command is, and every stage adds to it)
    report: Report = field(init=False)

    # -- load / inputs ---------------------------------------------------------------------
    loaded: LoadedModel | None = None
    dynamic: DynamicPlan | None = None
    feeds: list[Feed] = field(default_factory=list)  # forward() order; [0] is the main feed
    inputs_label: str = ""  # where the feeds came from, in words
    real_inputs: bool = False  # the feeds are the user's data (--inputs), not generated
    call_plan: CallPlan | None = None
    cast: CastDown | None = None  # when a float64 model is cast down
    reference_module: torch.nn.Module | None = None  # the untouched model parity runs
    run_precision: str = "fp32"  # what parity runs in (fp64 for a float64 model)

    # -- export ------------------------------------------------------------------------------
    profile: TargetProfile | None = None  # capped at --opset for an ONNX input
    opset: int | None = None
    program: torch.export.ExportedProgram | None = None  # when capture worked
    module: torch.nn.Module | None = None  # the module exported (cast for fp16/bf16)
    big: bool = False  # weights above the external-data threshold
    fx_sites: list[GeluSite] = field(default_factory=list)
    graph: onnx.ModelProto | None = None  # exported, rewritten, then a skeleton once saved
    gs_graph: gs.Graph | None = None  # the one graph (export_gelu.graph) passes and checks share
    #: the graph's GELU sites as the passes left them (verify: DEPLOYED's)
    gelu_sites: list[GeluSite] = field(default_factory=list)
    output: Path | None = None  # where the graph is written
    weights: WrittenWeights | None = None  # the weights streamed into the output (a big graph)
    inspection: dict[str, Any] | None = None  # inspect's JSON: sites, census, verdicts

    # -- check -------------------------------------------------------------------------------
    deployed: Deployed | None = None  # the artifact verify checks
    engine: tensorrt.ICudaEngine | None = None  # a TensorRT engine built here
    reference: BaseRunner | None = None  # the reference runner (a recorded one for a big model)
    device: DeviceChoice | None = None
    tolerances: Tolerances | None = None
    parity: ParityResult | None = None  # the verdict (None: no check ran or was skipped yet)
    calibrated: bool = False
    forms: FormsComparison | None = None  # --compare-forms: every form measured

    # -- a device's run (verify --device-outputs) -------------------------------------------
    manifest: dict[str, Any] = field(default_factory=dict)  # the bundle's JSON, when given
    device_outputs: list[Feed] = field(default_factory=list)  # per feed, in the graph's dtypes
    device_format: str = ""  # trtexec | polygraphy
    #: (GPU compute ms per inference, warm-ups dropped) or None
    device_times: tuple[list[float], int] | None = None
    #: the module-boundary tensors the device handed back too (first feed), by tensor name
    device_module_outputs: dict[str, np.ndarray] = field(default_factory=dict)
    #: a forms bundle's device run: form → its graph, outputs per feed (None: not built), times
    device_forms: dict[str, FormRun] = field(default_factory=dict)
    chosen: DeviceFormRow | None = None  # the form the device run chose (None: none passed)

    def __post_init__(self) -> None:
        self.report = Report(model=str(self.model_path), target="",
                             threads=self.options.threads, options=self.options.to_json())
        self.report.stage_seconds = self.clock.stages

    @property
    def feed(self) -> Feed:
        """The main feed (the first)."""
        return self.feeds[0]

    @property
    def is_onnx(self) -> bool:
        return bool(self.loaded is not None and self.loaded.is_onnx)

    @property
    def is_torch(self) -> bool:
        return self.loaded is not None and not self.loaded.is_onnx


#: The state of each command (a stage's type says which commands it serves).
ExportState = RunState[ExportOptions]
VerifyState = RunState[VerifyOptions]
FormsState = RunState[FormsOptions]
InspectState = RunState[InspectOptions]
#: A stage every command runs (it reads only what every options record has).
AnyState = RunState[RunOptions]


def sub_state(parent: RunState[RunOptions], options: OptionsT, checked: Checked, *,
              loaded: LoadedModel | None, output: Path | None = None,
              clock: Clock | None = None) -> RunState[OptionsT]:
    """A state of its own for one part of `parent`'s run (a form's graph, one graph of
    several), over a model `parent` loaded, on its progress channel (and `clock`: its
    stages charged to the parent's)."""
    return RunState(options, checked, parent.model_path, parent.progress,
                    clock=clock or Clock(), loaded=loaded, output=output)


def need(value: T | None, name: str) -> T:
    """`value`, which a stage needs here: a field an earlier stage made (`need(state.graph,
    "graph")`) or an option the command's checks require; its absence is a bug (a stage list
    out of order), said in one line (exit 4)."""
    if value is None:
        raise RuntimeError(f"{name} is missing where a stage needs it (a stage list out of "
                           "order: a bug in export-gelu; please report it)")
    return value
