"""`verify --device-outputs`'s records: what a device handed back (for one graph, or for a
bundle of GELU forms), how it is judged, and the results."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from export_gelu.check.localize.divergence import Localization
from export_gelu.check.runners.deployed import Deployed
from export_gelu.check.runners.devices import DeviceChoice
from export_gelu.check.verdict.parity import ParityResult
from export_gelu.device.choice import DeviceFormRow, DeviceForms, FormRun
from export_gelu.options import VerifyOptions
from export_gelu.results.export import Feed
from export_gelu.results.quantize import QdqJudged
from export_gelu.results.request import OneGraphSource, Request
from export_gelu.tolerances import Tolerances


@dataclass(frozen=True)
class DeviceRun:
    """What the device ran and wrote: the bundle's manifest ({} : DEPLOYED and --inputs were
    given instead), the graph, the feeds, its outputs per feed (in the graph's dtypes), the
    module-boundary tensors of a `localize` run (the first feed's), and its times."""

    manifest: dict[str, Any]
    deployed: Deployed
    feeds: tuple[Feed, ...]
    label: str  # where the feeds came from, in words
    outputs_format: str  # trtexec | polygraphy
    outputs: list[Feed]
    module_outputs: dict[str, np.ndarray] = field(default_factory=dict)
    #: (GPU compute ms per inference, warm-ups dropped) or None
    times: tuple[list[float], int] | None = None

    @property
    def version(self) -> str:
        """The TensorRT version the bundle was made for ("": not said)."""
        return str(self.manifest.get("tensorrt", "") or "")


@dataclass(frozen=True)
class DeviceJudging:
    """How the device's outputs are judged: the precision (and how it was decided), its
    tolerances, and where the reference runs."""

    run_precision: str
    precision_note: str
    tolerances: Tolerances
    device: DeviceChoice


@dataclass(frozen=True)
class DeviceVerifyResult:
    """`verify --device-outputs` of one graph."""

    request: Request[VerifyOptions]
    device_run: DeviceRun
    source: OneGraphSource
    judging: DeviceJudging
    parity: ParityResult
    ran: str | None  # the TensorRT trtexec.log says ran it (None: not said)
    divergence: Localization | None
    notes: tuple[str, ...]
    seconds: dict[str, float]
    quantization: QdqJudged | None = None  # the graph is Q/DQ: the device's INT8/FP8 verdict


@dataclass(frozen=True)
class FormsRun:
    """A forms bundle's device run: the manifest, the first form's graph (what every form
    takes and gives), the feeds, and each form's graph, outputs and times."""

    manifest: dict[str, Any]
    deployed: Deployed
    feeds: tuple[Feed, ...]
    label: str
    forms: dict[str, FormRun]

    @property
    def version(self) -> str:
        return str(self.manifest.get("tensorrt", "") or "")


@dataclass(frozen=True)
class FormsChoice:
    """Every form judged, the table, the form chosen (None: none passed) and the verdict
    (the chosen form's, else the first failure's)."""

    table: DeviceForms
    chosen: DeviceFormRow | None
    parity: ParityResult


@dataclass(frozen=True)
class DeviceFormsResult:
    """`verify --device-outputs DIR/outputs` of a bundle of GELU forms."""

    request: Request[VerifyOptions]
    forms_run: FormsRun
    source: OneGraphSource
    judging: DeviceJudging
    choice: FormsChoice
    ran: str | None  # the TensorRT trtexec.log says ran the forms (None: not said)
    written: Path | None  # -o: the chosen form's graph (None: not asked, or none chosen)
    notes: tuple[str, ...]
    seconds: dict[str, float]
