"""The one state every stage reads and writes: what the run was asked (options), what it has
loaded, made and measured so far (the report among them)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from export_gelu.options import Checked, RunOptions
from export_gelu.pipeline.stage import Clock
from export_gelu.progress import Progress
from export_gelu.report.report import Report

Feed = OrderedDict[str, np.ndarray]


@dataclass
class RunState:
    """A run's state, filled stage by stage. Fields are None until the stage that makes them
    has run; each stage's docstring says which fields it reads and writes."""

    options: RunOptions
    checked: Checked
    model_path: Path
    progress: Progress
    clock: Clock = field(default_factory=Clock)
    report: Report | None = None

    # -- load / inputs ---------------------------------------------------------------------
    loaded: Any = None  # exporter.load.LoadedModel
    dynamic: Any = None  # exporter.dynamic.DynamicPlan
    feeds: list[Feed] = field(default_factory=list)  # forward() order; [0] is the main feed
    inputs_label: str = ""  # where the feeds came from, in words
    real_inputs: bool = False  # the feeds are the user's data (--inputs), not generated
    call_plan: Any = None  # exporter.inputs.call_plan.CallPlan
    cast: Any = None  # exporter.cast_down.CastDown, when a float64 model is cast down
    reference_module: Any = None  # the untouched model parity compares against
    run_precision: str = "fp32"  # what parity runs in (fp64 for a float64 model)

    # -- export ------------------------------------------------------------------------------
    profile: Any = None  # targets.TargetProfile (capped at --opset for an ONNX input)
    opset: int | None = None
    program: Any = None  # the captured ExportedProgram, when capture worked
    module: Any = None  # the module exported (cast for fp16/bf16)
    big: bool = False  # weights above the external-data threshold
    fx_sites: list[Any] = field(default_factory=list)
    graph: Any = None  # onnx.ModelProto: exported, rewritten, then a skeleton once saved
    gs_graph: Any = None  # the one graph (export_gelu.graph) the passes and checks share
    output: Path | None = None  # where the graph is written
    inspection: dict[str, Any] | None = None  # inspect: sites, census, per-target verdicts

    # -- check -------------------------------------------------------------------------------
    deployed: Any = None  # check.deployed.Deployed: the artifact verify checks
    engine: Any = None  # a TensorRT engine built here (polygraphy loader), or None
    reference: Any = None  # the reference runner (a recorded one for a big model)
    device: Any = None  # check.devices.DeviceChoice
    tolerances: Any = None  # tolerances.Tolerances
    calibrated: bool = False

    # -- a device's run (verify --device-outputs) -------------------------------------------
    manifest: dict[str, Any] = field(default_factory=dict)  # the bundle's, when one is given
    device_outputs: list[Feed] = field(default_factory=list)  # per feed, in the graph's dtypes
    device_format: str = ""  # trtexec | polygraphy
    device_times: Any = None  # (GPU compute ms per inference, warm-ups dropped) or None
    #: the module-boundary tensors the device handed back too (first feed), by tensor name
    device_module_outputs: dict[str, np.ndarray] = field(default_factory=dict)
    #: a forms bundle's device run: form → (its graph, outputs per feed or None, times or None)
    device_forms: dict[str, Any] = field(default_factory=dict)

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
