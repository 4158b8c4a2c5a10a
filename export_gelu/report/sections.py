"""The report's own sections (what the TensorRT engine became, the dynamic dims, the ONNX
Runtime runs, the options), as typed records. Each reads as its JSON too (`section["status"]`,
`section.get("device")`), as code that read the report's dicts does."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from export_gelu.check.localize.ties import TieSite
from export_gelu.check.verdict.parity import ParityResult
from export_gelu.exporter.feeds.dynamic_axes import DynamicAxis
from export_gelu.options import ExportOptions, FormsOptions, VerifyOptions
from export_gelu.report.json_shape import JSON, as_json


class Section:
    """A record read as its JSON, key by key, and equal to its JSON (so `report.options ==
    json.load(...)["options"]` holds, as it did when the section was that dict)."""

    def __eq__(self, other: object) -> bool:
        mine = as_json(self)
        return bool(mine == (as_json(other) if isinstance(other, Section) else other))

    __hash__ = None  # type: ignore[assignment]  # (mutable, like the dict it stands for)

    def __getitem__(self, key: str) -> JSON:
        return as_json(self)[key]

    def get(self, key: str, default: JSON = None) -> JSON:
        return as_json(self).get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in as_json(self)


# -- trt: what became of the TensorRT engine ----------------------------------------------------

def not_tensorrt(target: str | None) -> str:
    """`trt.reason` when no engine was wanted (the target is not TensorRT): the summary then
    prints no TensorRT line."""
    return f"target {target} is not TensorRT"


@dataclass(eq=False)
class TrtSkipped(Section):
    """No engine: the target is not TensorRT, DEPLOYED is an ONNX file, or nothing ran."""

    reason: str
    status: Literal["skipped"] = "skipped"
    bundle: str | None = None  # a device bundle written for the graph


@dataclass(eq=False)
class TrtNotHere(Section):
    """No engine of the target's TensorRT can be built here: why, and how it is built and
    checked on the device instead (a bundle, once written)."""

    reason: str
    device: str
    status: Literal["skipped"] = "skipped"
    engine_here: Literal[False] = False
    bundle: str | None = None


@dataclass(eq=False)
class TrtBuilt(Section):
    """An engine built here with the installed TensorRT, and its parity."""

    engine: str | None  # where it was saved (--engine), None: in memory
    tensorrt: str  # the installed version
    precision_api: str  # how precision was asked of the builder
    engine_here: bool  # of the target's own TensorRT version
    status: Literal["built"] = "built"
    reason: str = ""
    parity: ParityResult | None = None  # the engine's own verdict
    bundle: str | None = None


@dataclass(eq=False)
class TrtLoaded(Section):
    """verify: DEPLOYED is a TensorRT engine, loaded and run here."""

    engine: str
    status: Literal["loaded"] = "loaded"
    reason: str = ""
    bundle: str | None = None


@dataclass(eq=False)
class TrtDevice(Section):
    """verify --device-outputs: the device's TensorRT ran the graph; what it handed back."""

    tensorrt: str | None  # the version the bundle was made for (None: not said)
    target: str | None  # the bundle's target
    outputs_file: str
    outputs_format: str  # trtexec | polygraphy
    times_file: str | None
    status: Literal["device"] = "device"
    reason: str = ""
    device_tensorrt: str | None = None  # the version trtexec.log says ran it


#: The report's `trt`.
Trt = TrtSkipped | TrtNotHere | TrtBuilt | TrtLoaded | TrtDevice


# -- a first divergence's ties ------------------------------------------------------------------

@dataclass
class TieOrder:
    """The ops fed exact ties that decide their result (check/localize/ties.py), whether the
    first of them is the cause (it comes before the first divergence, or none was placed), and
    what to do about it."""

    cause: bool
    ops: list[TieSite]
    way_out: str


# -- dynamic: the dims, the TensorRT profile, parity at each size -------------------------------

@dataclass
class Dim:
    """One dynamic dim: its range and the input axes it covers (`input:axis`)."""

    name: str
    min: int
    opt: int
    max: int
    axes: list[str]


@dataclass
class ShapeVerdict:
    """One runner's verdict at one size: its parity, the worst error and the reference's
    scale."""

    parity: ParityResult
    max_abs: float
    ref_scale: float


@dataclass
class ShapeEntry:
    """Parity at one size of the `--dynamic` ranges."""

    label: str  # opt | min | odd | max
    sizes: dict[str, int]
    inputs: dict[str, list[int]]  # each input's shape
    generated: dict[str, str]  # the inputs made there, and how
    onnxruntime: ShapeVerdict | None = None
    tensorrt: ShapeVerdict | None = None


@dataclass(eq=False)
class DynamicSection(Section):
    """`--dynamic` (or a dynamic model): the dims, parity at each size, and the TensorRT
    optimization profile (one entry per input axis)."""

    dims: list[Dim]
    shapes: list[ShapeEntry] = field(default_factory=list)
    profile: list[DynamicAxis] = field(default_factory=list)


# -- providers: each ONNX Runtime run asked for -------------------------------------------------

@dataclass
class ProviderOption:
    """An execution provider asked for with options."""

    name: str
    options: dict[str, str]


@dataclass(eq=False)
class ProviderEntry(Section):
    """One ONNX Runtime run: the providers asked for, those active, what became of it, and
    its parity (the first run's status, the others' verdicts in full)."""

    requested: list[str | ProviderOption]
    active: list[str]
    status: str  # planned | ready | failed
    reason: str
    parity: str | ParityResult | None = None


# -- quantization: an INT8/FP8 graph, how it was made and judged ------------------------------

@dataclass
class QuantOutput:
    """One output of the quantized graph: against fp32 (SQNR in dB, null when the outputs
    are the same; cosine; top-1 for logits), PyTorch's own SQNR at the same scales, the
    graph's RMS error against that reference and the bound it had to meet, and the bound's
    parts: quantization's error (RMS of the reference against fp32) and the GELU form's own
    (RMS of the graph without Q/DQ against fp32)."""

    sqnr_db: float | None
    cosine: float
    top1: float | None
    reference_sqnr_db: float | None
    rms_vs_reference: float | None
    bound: float | None
    passed: bool | None  # null: not judged
    quantization_error: float | None = None
    form_error: float | None = None


@dataclass
class KeptModule:
    """A module kept in float, and its sensitivity (the output SQNR with it alone quantized;
    null where not measured)."""

    module: str
    sqnr_db: float | None


@dataclass
class AutoKeepSection:
    """`--keep-precision auto`: the target SQNR, the SQNR reached, and whether it was met."""

    target_db: float
    sqnr_db: float | None
    met: bool


@dataclass(eq=False)
class QuantSection(Section):
    """`--precision int8|fp8`: the route for the target, the calibration, the products
    quantized, the modules kept, and the verdict against PyTorch at the graph's scales."""

    precision: str
    route: str  # qdq | calibration_cache
    weights: str  # float_q_dq | quantized_dq | none
    calibrator: str
    calibration: str
    real_data: bool
    calibration_feeds: int
    judged_feeds: int
    products_quantized: int
    weight_products: int
    qdq_inside_gelu: int
    kept: list[KeptModule]
    sensitivity: list[KeptModule]
    auto: AutoKeepSection | None
    judged_by: str
    rule: str
    passed: bool | None  # null: not judged (`not_judged` says why)
    not_judged: str
    outputs: dict[str, QuantOutput]
    notes: list[str]
    calibration_cache: str | None = None  # the TensorRT 7.x cache file written (no bundle)

    def lines(self) -> list[str]:
        """The summary's lines."""
        share = (f"{self.products_quantized} of {self.weight_products} weight products "
                 f"quantized")
        made = (f"{self.calibrator} calibration on {self.calibration_feeds} feed(s): "
                f"{self.calibration}" if self.calibrator else self.calibration)
        lines = [f"Quantized: {self.precision} ({self.route}, {made}); {share}; "
                 f"Q/DQ inside a GELU: {self.qdq_inside_gelu}"]
        if self.calibration_cache:
            lines.append(f"  calibration cache: {self.calibration_cache} (trtexec --int8 "
                         "--calib=FILE)")
        if self.kept:
            lines.append("  kept in float: " + ", ".join(
                k.module + (f" ({k.sqnr_db:.1f} dB alone)" if k.sqnr_db is not None else "")
                for k in self.kept))
        if self.auto is not None:
            state = "met" if self.auto.met else "NOT met"
            got = "inf" if self.auto.sqnr_db is None else f"{self.auto.sqnr_db:.1f}"
            lines.append(f"  auto keep: target {self.auto.target_db:g} dB {state} at {got} dB "
                         f"keeping {len(self.kept)} module(s)")
        verdict = ("PASSED" if self.passed else "FAILED") if self.passed is not None else \
            f"not judged ({self.not_judged})"
        held = "held-out " if self.calibrator else ""  # verify's feeds calibrated nothing
        lines.append(f"{self.precision.upper()} verdict: {verdict} on {self.judged_feeds} "
                     f"{held}feed(s), against {self.judged_by}")
        for name, out in self.outputs.items():
            mark = "    " if out.passed is None else ("ok  " if out.passed else "FAIL")
            sqnr = "inf" if out.sqnr_db is None else f"{out.sqnr_db:.1f}"
            text = f"  {mark} {name}: SQNR {sqnr} dB, cosine {out.cosine:.5f}"
            if out.top1 is not None:
                text += f", top-1 {out.top1:.3f}"
            if out.bound is not None and out.rms_vs_reference is not None:
                ref = ("inf" if out.reference_sqnr_db is None
                       else f"{out.reference_sqnr_db:.1f}")
                text += (f"; PyTorch at the same scales {ref} dB; RMS vs it "
                         f"{out.rms_vs_reference:.3g} ≤ {out.bound:.3g}"
                         + ("" if out.passed else " missed"))
                if out.form_error is not None and out.quantization_error is not None:
                    text += (f" (quantization {out.quantization_error:.3g} + the form's own "
                             f"{out.form_error:.3g})")
            lines.append(text)
        return lines


# -- options: what the run was given ------------------------------------------------------------

@dataclass(eq=False)
class RecordedOptions(Section):
    """Every option the run was given, flags and defaults alike, named as the Python API's
    keywords (`export_gelu.options.ExportOptions.from_json` reads it back)."""

    record: ExportOptions | VerifyOptions | FormsOptions
