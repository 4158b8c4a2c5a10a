"""`--compare-forms` and `--gelu auto`'s records: the feed the forms are measured on, the
forms bundle written for a device, and the results."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from export_gelu.check.calibration import Calibration
from export_gelu.check.compare_forms import FormsComparison
from export_gelu.device.forms_bundle import FormPart
from export_gelu.options import ExportOptions, FormsOptions
from export_gelu.results.export import Feed, GraphExport
from export_gelu.results.request import OneGraphSource, Request


@dataclass(frozen=True)
class FormsInputs:
    """The feed every form is checked and timed on, and where it came from."""

    feeds: tuple[Feed, ...]
    label: str
    real: bool
    generated: dict[str, str]

    @property
    def feed(self) -> Feed:
        return self.feeds[0]


@dataclass(frozen=True)
class FormsBundle:
    """A bundle of GELU forms written for a device: the folder, the forms in it, and the forms
    left out (and why)."""

    path: Path
    parts: list[FormPart]
    left_out: list[tuple[str, str]]


@dataclass(frozen=True)
class FormsResult:
    """`--compare-forms`: every form on every target, measured on one loaded model."""

    request: Request[FormsOptions]
    source: OneGraphSource
    inputs: FormsInputs
    comparison: FormsComparison
    bundle: FormsBundle | None
    calibration: Calibration | None
    notes: tuple[str, ...]
    seconds: dict[str, float]


@dataclass(frozen=True)
class AutoResult:
    """`--gelu auto`: the forms measured, and the export of the form chosen (on the model the
    comparison loaded); with `--bundle`, every form bundled for the device to choose."""

    asked: ExportOptions  # what was asked (gelu "auto")
    compared: FormsResult
    export: GraphExport
    bundle: FormsBundle | None
    notes: tuple[str, ...]  # what writing the forms bundle said
