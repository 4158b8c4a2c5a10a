"""The options records and the Python API's keyword types, generated from the flag
declarations (export_gelu/flag_table/table.py) by `python -m export_gelu.cli_docs --write`:
do not edit; tests/cli/test_flag_table.py fails when this file differs from what they give.

One record per command, built alike by the CLI (from its flags) and the Python API (from its
keywords), checked by options.validate and recorded in the report (its `options` key).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from typing import TypedDict

from export_gelu.flags.record import OptionsRecord

__all__ = [
    "RunOptions",
    "ExportOptions",
    "VerifyOptions",
    "FormsOptions",
    "InspectOptions",
    "ExportKeywords",
    "VerifyKeywords",
    "FormsKeywords",
    "InspectKeywords",
]


@dataclass(frozen=True)
class RunOptions(OptionsRecord):
    """What every command takes: the model's inputs and loading, tolerances, how to run."""

    precision: str | None = "fp32"  # --precision fp32|fp16|bf16|int8|fp8
    allow_pickle: bool = False  # --allow-pickle
    model_factory: str | None = None  # --model-factory PKG.MODULE:FUNC
    imports: tuple[str, ...] = ()  # --import MODULE
    task: str | None = None  # --task TASK
    inputs: tuple[str, ...] = ()  # --input NAME:SHAPE[:DTYPE[:LOW,HIGH]]
    atol: float | None = None  # --atol ATOL
    rtol: float | None = None  # --rtol RTOL
    threads: int = 1  # --threads THREADS
    device: str | None = None  # --device cpu|cuda
    iterations: int = 50  # --iterations ITERATIONS
    warmup: int = 5  # --warmup WARMUP


@dataclass(frozen=True)
class ExportOptions(RunOptions):
    """`export-gelu MODEL ...` and `export_gelu.export(model, ...)`."""

    target: str = "trt"  # --target TARGET
    output: str | None = None  # --output OUT.onnx
    gelu: str = "keep"  # --gelu keep|erf|tanh|sigmoid|plugin|auto
    opset: int | None = None  # --opset N
    calibration_data: str | None = None  # --calibration-data FILE.npz|FILE.json
    calibrator: str | None = None  # --calibrator minmax|entropy|percentile
    keep_precision: tuple[str, ...] = ()  # --keep-precision MODULE
    target_sqnr: float | None = None  # --target-sqnr DB
    cast_down: bool = False  # --cast-down
    engine: str | None = None  # --engine OUT.plan
    dynamic: tuple[str, ...] = ()  # --dynamic DIM=MIN:OPT:MAX
    static: bool = False  # --static
    require_trt: bool = False  # --require-trt
    bundle: str | None = None  # --bundle DIR
    verify: bool = True  # --no-verify
    localize: bool = False  # --localize
    output_names: str | tuple[str, ...] | None = None  # --output-names A,B,...
    inputs_npz: str | None = None  # --inputs FILE.npz
    report: str | None = None  # --report REPORT.json
    report_md: str | None = None  # --report-md REPORT.md


@dataclass(frozen=True)
class VerifyOptions(RunOptions):
    """`export-gelu verify MODEL DEPLOYED ...` and `export_gelu.verify(...)`."""

    precision: str | None = None  # --precision fp32|fp16|bf16
    save_inputs: str | None = None  # --save-inputs IN.json
    save_outputs: str | None = None  # --save-outputs OUT.json
    localize: bool = False  # --localize
    calibrate: bool = True  # --no-calibration
    bundle: str | None = None  # --bundle DIR
    bundle_target: str = "trt"  # --target TARGET
    device_outputs: str | None = None  # --device-outputs OUTPUTS.json|DIR
    output: str | None = None  # --output BEST.onnx
    device_times: str | None = None  # --device-times TIMES.json
    inputs_file: str | None = None  # --inputs FILE.npz|FILE.json
    report: str | None = None  # --report REPORT.json
    report_md: str | None = None  # --report-md REPORT.md


@dataclass(frozen=True)
class FormsOptions(RunOptions):
    """`export-gelu MODEL --compare-forms` and `export_gelu.compare_forms(model, ...)`."""

    calibration_data: str | None = None  # --calibration-data FILE.npz|FILE.json
    calibrator: str | None = None  # --calibrator minmax|entropy|percentile
    keep_precision: tuple[str, ...] = ()  # --keep-precision MODULE
    target_sqnr: float | None = None  # --target-sqnr DB
    bundle: str | None = None  # --bundle DIR
    inputs_npz: str | None = None  # --inputs FILE.npz
    report: str | None = None  # --report REPORT.json
    report_md: str | None = None  # --report-md REPORT.md
    targets: tuple[str, ...] = ("onnx", "trt8.6")  # targets= (the API's)
    forms: tuple[str, ...] = ("keep", "erf", "tanh", "sigmoid")  # forms= (the API's)
    workdir: str | None = None  # workdir= (the API's)


@dataclass(frozen=True)
class InspectOptions(RunOptions):
    """`export-gelu inspect MODEL.onnx ...` and `export_gelu.inspect_model(...)`."""

    targets: tuple[str, ...] = ()  # --target TARGET
    dry_run: bool = True  # --no-dry-run
    nodes: tuple[str, ...] = ()  # --node NAME


class ExportKeywords(TypedDict, total=False):
    """export()'s keywords: the flags of export, compare-forms."""

    target: str
    output: str | PathLike[str] | None
    gelu: str
    compare_forms: bool
    opset: int | None
    precision: str | None
    calibration_data: str | PathLike[str] | None
    calibrator: str | None
    keep_precision: Sequence[str] | str
    target_sqnr: float | None
    cast_down: bool
    engine: str | PathLike[str] | None
    dynamic: Sequence[str] | str
    static: bool
    require_trt: bool
    bundle: str | PathLike[str] | None
    verify: bool
    localize: bool
    output_names: str | Sequence[str] | None
    allow_pickle: bool
    trust_model: bool
    model_factory: str | None
    imports: Sequence[str] | str
    task: str | None
    input: Sequence[str] | str
    inputs: str | PathLike[str] | None
    atol: float | None
    rtol: float | None
    threads: int
    device: str | None
    iterations: int
    warmup: int
    report: str | PathLike[str] | None
    report_md: str | PathLike[str] | None
    debug: bool
    quiet: bool


class VerifyKeywords(TypedDict, total=False):
    """verify()'s keywords: the flags of verify."""

    precision: str | None
    save_inputs: str | PathLike[str] | None
    save_outputs: str | PathLike[str] | None
    localize: bool
    calibration: bool
    bundle: str | PathLike[str] | None
    target: str
    device_outputs: str | PathLike[str] | None
    output: str | PathLike[str] | None
    device_times: str | PathLike[str] | None
    allow_pickle: bool
    trust_model: bool
    model_factory: str | None
    imports: Sequence[str] | str
    task: str | None
    input: Sequence[str] | str
    inputs: str | PathLike[str] | None
    atol: float | None
    rtol: float | None
    threads: int
    device: str | None
    iterations: int
    warmup: int
    report: str | PathLike[str] | None
    report_md: str | PathLike[str] | None
    debug: bool
    quiet: bool


class FormsKeywords(TypedDict, total=False):
    """compare_forms()'s keywords: the flags of compare-forms."""

    target: str
    precision: str | None
    bundle: str | PathLike[str] | None
    allow_pickle: bool
    trust_model: bool
    model_factory: str | None
    imports: Sequence[str] | str
    task: str | None
    input: Sequence[str] | str
    inputs: str | PathLike[str] | None
    atol: float | None
    rtol: float | None
    threads: int
    device: str | None
    iterations: int
    warmup: int
    report: str | PathLike[str] | None
    report_md: str | PathLike[str] | None
    debug: bool
    quiet: bool
    targets: Sequence[str] | str
    forms: Sequence[str] | str
    workdir: str | PathLike[str] | None


class InspectKeywords(TypedDict, total=False):
    """inspect_model()'s keywords: the flags of inspect."""

    target: Sequence[str] | str
    nodes: Sequence[str] | str
    node: Sequence[str] | str
    debug: bool
    quiet: bool
