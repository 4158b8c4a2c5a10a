"""`verify MODEL DEPLOYED`'s records: its inputs, what DEPLOYED computes, the check, and the
result."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from export_gelu.check.calibration import Calibration
from export_gelu.check.latency import Latency
from export_gelu.check.localize.divergence import Localization
from export_gelu.check.runners.deployed import Deployed
from export_gelu.check.runners.devices import DeviceChoice, ProviderRun
from export_gelu.check.verdict.parity import ParityResult
from export_gelu.options import VerifyOptions
from export_gelu.passes.sites import GeluSite
from export_gelu.results.export import Feed
from export_gelu.results.quantize import QdqJudged
from export_gelu.results.request import OneGraphSource, Request
from export_gelu.tolerances import Tolerances

if TYPE_CHECKING:
    from polygraphy.backend.base import BaseRunner


@dataclass(frozen=True)
class VerifyInputs:
    """The feeds (forward() order) and where they came from, the precision they are checked
    in (and how it was decided), its tolerances, and the device the reference runs on."""

    feeds: tuple[Feed, ...]
    label: str
    real: bool
    generated: dict[str, str]
    run_precision: str
    precision_note: str
    tolerances: Tolerances
    device: DeviceChoice

    @property
    def feed(self) -> Feed:
        return self.feeds[0]


@dataclass(frozen=True)
class Described:
    """What DEPLOYED computes: an ONNX graph's opset, op counts and GELU sites (an engine: none
    of these)."""

    opset: int | None = None
    op_counts: dict[str, int] = field(default_factory=dict)
    gelu_sites: list[GeluSite] = field(default_factory=list)


@dataclass(frozen=True)
class DeployedCheck:
    """DEPLOYED against the reference: the verdict, the latency of both, every ONNX Runtime
    run asked for and each runner's verdict."""

    parity: ParityResult
    latency: dict[str, Latency]
    providers: tuple[ProviderRun, ...]
    by_runner: dict[str, ParityResult]


@dataclass(frozen=True)
class Reference:
    """The reference runner (a big DEPLOYED's: recorded, its model freed) and the GELU input
    ranges recorded before it was freed (None: not yet)."""

    runner: BaseRunner
    calibration: Calibration | None = None


@dataclass(frozen=True)
class VerifyResult:
    """`verify`'s findings."""

    request: Request[VerifyOptions]
    deployed: Deployed
    source: OneGraphSource
    inputs: VerifyInputs
    described: Described
    check: DeployedCheck
    divergence: Localization | None
    bundle: Path | None
    calibration: Calibration | None
    notes: tuple[str, ...]
    seconds: dict[str, float]
    quantization: QdqJudged | None = None  # DEPLOYED is a Q/DQ graph: its INT8/FP8 verdict
