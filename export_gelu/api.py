"""The Python API: export(), inspect_model(); the CLI is a thin layer over these. Each command
is a list of pipeline stages (export_gelu/pipeline/commands.py) run on one state."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from export_gelu.check.compare_forms import FormsComparison
from export_gelu.errors import BadInputError
from export_gelu.exporter.in_memory import from_memory, is_in_memory, without_cache
from export_gelu.options import (
    COMPARE_TARGETS,
    COMPARED_FORMS,
    GELU_FORMS,
    PRECISIONS,
    ExportOptions,
    FormsOptions,
    InspectOptions,
    VerifyOptions,
)
from export_gelu.output_plan import default_output
from export_gelu.pipeline import forms
from export_gelu.pipeline.commands import (
    COMPARE_FORMS,
    DEVICE_VERIFY,
    EXPORT,
    FORMS_REPORT,
    INSPECT,
    VERIFY,
    new_state,
)
from export_gelu.pipeline.stage import run_stages
from export_gelu.progress import Progress
from export_gelu.report.report import Report
from export_gelu.report.write import write_reports


def export(model: str | Path | Any, *, args: Sequence[Any] | None = None,
           kwargs: Mapping[str, Any] | None = None, target: str = "trt",
           output: str | Path | None = None, task: str | None = None,
           gelu: str = "keep", opset: int | None = None, inputs: Sequence[str] = (),
           inputs_npz: str | Path | None = None, precision: str = "fp32",
           engine: str | Path | None = None, report: str | Path | None = None,
           report_md: str | Path | None = None, atol: float | None = None,
           rtol: float | None = None, verify: bool = True, allow_pickle: bool = False,
           model_factory: str | None = None, threads: int = 1, iterations: int = 50,
           warmup: int = 5, require_trt: bool = False, dynamic: Sequence[str] = (),
           device: str | None = None, progress: Progress | None = None,
           bundle: str | Path | None = None, output_names: str | Sequence[str] | None = None,
           imports: Sequence[str] = (), cast_down: bool = False,
           options: ExportOptions | None = None) -> Report:
    """Export `model` for `target`, rewrite its GELUs, verify and time it; return the report
    (`report.written`: every file the run wrote).

    `model` is a path (a model file, an ONNX file, a Hugging Face save_pretrained folder), or
    an `nn.Module` / `ExportedProgram` in memory called on `args` and `kwargs` (example
    tensors; an ExportedProgram's own by default; `output` is required: there is no file to
    name it after). The keywords are the CLI's flags (`export-gelu --help`); `options` (an
    ExportOptions, as the CLI builds it) replaces them. `task`: a Hugging Face folder's task
    (optimum's names; default: from its config.json). `device` ('cpu' | 'cuda', None:
    cuda where it can run) is where the PyTorch reference and the ONNX Runtime checks run;
    `bundle` also writes a device bundle (device/bundle.py); `output_names` names the graph's
    outputs (default: the model's own); `imports` are modules to import before loading;
    `cast_down` exports a float64 model in float32.

    Raises ExportGeluError subclasses for bad input (exit 2) or unmet targets (exit 3); a
    parity failure is returned in the report (`report.exit_code == 1`).
    """
    opts = options or ExportOptions(
        target=target, output=output, gelu=gelu, opset=opset, inputs=inputs,
        inputs_npz=inputs_npz, precision=precision, engine=engine, report=report,
        report_md=report_md, atol=atol, rtol=rtol, verify=verify, allow_pickle=allow_pickle,
        model_factory=model_factory, threads=threads, iterations=iterations, warmup=warmup,
        require_trt=require_trt, dynamic=dynamic, device=device, bundle=bundle,
        output_names=output_names, imports=imports, cast_down=cast_down, task=task)
    if not is_in_memory(model):
        if args is not None or kwargs is not None:
            raise BadInputError("args= and kwargs= are the example inputs of an in-memory "
                                "model; for a file give inputs=['NAME:SHAPE[:DTYPE]', ...]")
        return run_stages(EXPORT, new_state(opts, model, progress)).report
    loaded = from_memory(model, args, kwargs)
    training = getattr(model, "training", False)
    try:
        if training:
            model.eval()
        with without_cache(model):
            return run_stages(EXPORT, new_state(opts, loaded.path, progress,
                                                loaded=loaded)).report
    finally:
        if training:
            model.train()


def verify(model: str | Path, deployed: str | Path | None = None, *,
           options: VerifyOptions | None = None, progress: Progress | None = None,
           **keywords: Any) -> Report:
    """Check DEPLOYED (an ONNX file or a TensorRT engine) against MODEL; return the report.

    With `device_outputs` (outputs a device wrote from a bundle, `bundle`), those outputs are
    judged instead of running DEPLOYED. Tolerances default by precision, read from DEPLOYED
    unless given. The keywords are VerifyOptions' fields (`export-gelu verify --help`);
    `options` replaces them. A parity failure is in the report (`report.exit_code == 1`);
    bad input raises BadInputError (exit 2), an engine without TensorRT TargetUnmetError.
    """
    opts = options or VerifyOptions(**keywords)
    if opts.device_outputs is None and deployed is None:
        raise BadInputError("DEPLOYED is required (or --bundle DIR --device-outputs FILE)")
    stages = DEVICE_VERIFY if opts.device_outputs else VERIFY
    return run_stages(stages, new_state(opts, model, progress, deployed=deployed)).report


def compare_forms(model: str | Path, *, options: FormsOptions | None = None,
                  progress: Progress | None = None, **keywords: Any) -> FormsComparison:
    """Export `model` with each GELU form for each target and measure every graph: error
    against the model and latency in one interleaved run (graphs that come out identical are
    one row). The keywords are FormsOptions' fields (targets, forms, inputs, precision, ...,
    workdir to keep the graphs); `options` replaces them."""
    opts = options or FormsOptions(**keywords)
    return run_stages(COMPARE_FORMS, new_state(opts, model, progress)).report.forms


def forms_report(model: str | Path, options: FormsOptions, *,
                 progress: Progress | None = None) -> Report:
    """`export-gelu MODEL --compare-forms`: the comparison as a Report (table, GELU input
    ranges, notes), written to `options.report` / `options.report_md`."""
    return run_stages(FORMS_REPORT, new_state(options, model, progress)).report


def export_with_best_form(model: str | Path, options: ExportOptions,
                          progress: Progress | None = None) -> Report:
    """`--gelu auto`: measure every form on `options.target`, then export with the fastest
    one whose end-to-end error stays within `options.atol` (default: the precision's); the
    model is loaded once for both."""
    new_state(dataclasses.replace(options, gelu="keep"), model)  # checked before measuring
    compared = run_stages(COMPARE_FORMS, new_state(forms.auto_options(options), model, progress))
    rep = forms.best_form_export(compared, options).report
    write_reports(rep, options.report, options.report_md)
    return rep


def inspect_model(model: str | Path, targets: Sequence[str] | None = None,
                  dry_run: bool = True, *, progress: Progress | None = None) -> dict[str, Any]:
    """GELU sites and per-target compatibility of an ONNX file, without a GPU.

    For each target (all by default): the reasons it would not parse the file as is, and
    (`dry_run`) whether `export-gelu FILE --target T` would fit it.
    """
    options = InspectOptions(targets=tuple(targets or ()), dry_run=dry_run)
    return run_stages(INSPECT, new_state(options, model, progress)).inspection


__all__ = ["export", "verify", "compare_forms", "forms_report", "export_with_best_form",
           "inspect_model", "default_output", "GELU_FORMS", "PRECISIONS", "COMPARE_TARGETS",
           "COMPARED_FORMS"]
