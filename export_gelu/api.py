"""The Python API: export(), inspect_model(); the CLI is a thin layer over these. Each command
is a list of pipeline stages (export_gelu/pipeline/commands.py) run on one state."""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from export_gelu.check.compare_forms import FormsComparison
from export_gelu.errors import BadInputError
from export_gelu.exporter.loading.in_memory import from_memory, is_in_memory, without_cache
from export_gelu.options import (
    COMPARE_TARGETS,
    COMPARED_FORMS,
    GELU_FORMS,
    PRECISIONS,
    ExportOptions,
    FormsOptions,
    InspectOptions,
    VerifyOptions,
    recorded_forms,
)
from export_gelu.output_plan import default_output
from export_gelu.pipeline import forms, forms_bundle
from export_gelu.pipeline.commands import (
    COMPARE_FORMS,
    DEVICE_FORMS_VERIFY,
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
from export_gelu.sequences import as_items

#: Keywords an earlier release took, by the options' field names: old → the flag's keyword.
_RENAMED = {"export": {"inputs_npz": "inputs"},
            "verify": {"inputs_file": "inputs", "calibrate": "calibration",
                       "bundle_target": "target"}}
#: Names users reach for that are no keyword: → what to write instead.
_INSTEAD = {"no_verify": "verify=False", "no_calibration": "calibration=False",
            "import_": "imports=[...]", "import_module": "imports=[...]",
            "module_imports": "imports=[...]", "inputs_file": "inputs='FILE.npz'",
            "inputs_npz": "inputs='FILE.npz'", "input_file": "inputs='FILE.npz'",
            "npz": "inputs='FILE.npz'", "specs": "input=['NAME:SHAPE[:DTYPE]', ...]",
            "out": "output", "o": "output", "example_inputs": "args=(...)"}


class KeywordError(BadInputError, TypeError):
    """A keyword the API does not take (exit 2 from the CLI's point of view; a TypeError to
    Python), naming the keyword meant."""


def _keyword_error(func: str, name: str, known: Sequence[str]) -> KeywordError:
    import difflib

    hint = _INSTEAD.get(name)
    if hint is None:
        close = difflib.get_close_matches(name, known, n=1)
        hint = close[0] if close else None
    tail = f": use {hint}" if hint else f"; it takes {', '.join(sorted(known))}"
    return KeywordError(f"{func}() has no keyword {name!r}{tail} (the keywords are the flags' "
                        "names: dashes as underscores, --no-X as X=False, --import as imports)")


def _old_keywords(func: str, given: dict[str, Any], known: Sequence[str]) -> dict[str, Any]:
    """Keywords an earlier release took, under their new names (with a DeprecationWarning);
    any other unknown keyword raises KeywordError naming the right one."""
    import warnings

    renamed: dict[str, Any] = {}
    for name, value in given.items():
        new = _RENAMED[func].get(name)
        if new is None:
            raise _keyword_error(func, name, known)
        warnings.warn(f"{func}(): {name}= is {new}= now (the flag's name); {name}= will go",
                      DeprecationWarning, stacklevel=3)
        renamed[new] = value
    return renamed


def _str(path: str | Path | None) -> str | None:
    """A path keyword as the options records hold it: a Path as a string; anything else as
    given, so that a value of the wrong type (`output=3`) meets options.check_types."""
    return str(path) if isinstance(path, os.PathLike) else path


def _input_specs(func: str, input: Sequence[str] | str, inputs: Any) -> tuple[Any, Any]:
    """(--input specs, --inputs file). `inputs` a list of specs is the old spelling of `input`
    (DeprecationWarning); a string or path is the file `--inputs` names."""
    import warnings

    input = as_items("input", input)
    if inputs is not None and not isinstance(inputs, (str, Path)):
        if input:
            raise KeywordError(f"{func}(): input= and a list inputs= both give input specs; "
                               "input= takes the specs, inputs= the .npz file")
        warnings.warn(f"{func}(): inputs=[specs] is input=[specs] now (the flag --input); "
                      "inputs= names the file of real inputs (--inputs FILE.npz)",
                      DeprecationWarning, stacklevel=3)
        return as_items("inputs", inputs), None
    return input, inputs


def export(model: str | Path | Any, *, args: Sequence[Any] | None = None,
           kwargs: Mapping[str, Any] | None = None, target: str = "trt",
           output: str | Path | None = None, task: str | None = None,
           gelu: str = "keep", opset: int | None = None, input: Sequence[str] | str = (),
           inputs: str | Path | None = None, precision: str = "fp32",
           engine: str | Path | None = None, report: str | Path | None = None,
           report_md: str | Path | None = None, atol: float | None = None,
           rtol: float | None = None, verify: bool = True, allow_pickle: bool = False,
           trust_model: bool = False, model_factory: str | None = None, threads: int = 1,
           iterations: int = 50, warmup: int = 5, require_trt: bool = False,
           dynamic: Sequence[str] = (), static: bool = False, device: str | None = None,
           progress: Progress | None = None, bundle: str | Path | None = None,
           output_names: str | Sequence[str] | None = None, imports: Sequence[str] = (),
           cast_down: bool = False, localize: bool = False,
           options: ExportOptions | None = None, **renamed: Any) -> Report:
    """Export `model` for `target`, rewrite its GELUs, verify and time it; return the report
    (`report.written`: every file the run wrote).

    `model` is a path (a model file, an ONNX file, a Hugging Face save_pretrained folder), or
    an `nn.Module` / `ExportedProgram` in memory called on `args` and `kwargs` (example
    tensors; an ExportedProgram's own by default; `output` is required: there is no file to
    name it after). The other keywords are the CLI's flags by one rule (`export-gelu
    --help`): dashes as underscores (`--report-md` → report_md), `--no-verify` →
    `verify=False`, `--import` → `imports` (import is a Python keyword); so `input` takes
    the `--input` specs and `inputs` the `--inputs` file; `gelu='auto'` measures every form
    first, as `--gelu auto` does. `options` (an ExportOptions, as the CLI builds it)
    replaces them. A keyword that is not one raises KeywordError (a
    TypeError) naming the right one.

    Raises ExportGeluError subclasses for bad input (exit 2) or unmet targets (exit 3); a
    parity failure is returned in the report (`report.exit_code == 1`).
    """
    if renamed:
        known = [k for k in inspect.signature(export).parameters if k not in ("model", "renamed")]
        inputs = _old_keywords("export", renamed, known).get("inputs", inputs)
    specs, inputs_npz = _input_specs("export", input, inputs)
    opts = options or ExportOptions(
        target=target, output=_str(output), gelu=gelu, opset=opset, inputs=specs,
        inputs_npz=inputs_npz, precision=precision, engine=_str(engine), report=_str(report),
        report_md=_str(report_md), atol=atol, rtol=rtol, verify=verify,
        allow_pickle=allow_pickle or trust_model, model_factory=model_factory,
        threads=threads, iterations=iterations, warmup=warmup, require_trt=require_trt,
        dynamic=as_items("dynamic", dynamic), static=static, device=device,
        bundle=_str(bundle),
        output_names=(output_names if output_names is None or isinstance(output_names, str)
                      else tuple(output_names)),
        imports=as_items("imports", imports), cast_down=cast_down, task=task,
        localize=localize)
    if not is_in_memory(model):
        if args is not None or kwargs is not None:
            raise BadInputError("args= and kwargs= are the example inputs of an in-memory "
                                "model; for a file give input=['NAME:SHAPE[:DTYPE]', ...]")
        if opts.gelu == "auto":  # as `export-gelu MODEL --gelu auto`
            return export_with_best_form(model, opts, progress)
        return run_stages(EXPORT, new_state(opts, model, progress)).report
    return _in_memory(model, args, kwargs,
                      lambda loaded: run_stages(EXPORT, new_state(opts, loaded.path, progress,
                                                                  loaded=loaded)))


def _in_memory(model: Any, args: Sequence[Any] | None, kwargs: Mapping[str, Any] | None,
               run: Any) -> Report:
    """Run `run(loaded)` on a model in memory, in eval mode (its mode restored after)."""
    if isinstance(args, (str, bytes)):
        raise TypeError(f"args={args!r}: a sequence of example tensors, not a string")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise TypeError(f"kwargs: a mapping of example tensors, not {type(kwargs).__name__}")
    loaded = from_memory(model, args, kwargs)
    training = getattr(model, "training", False)
    try:
        if training:
            model.eval()
        with without_cache(model):
            return run(loaded).report
    finally:
        if training:
            model.train()


def verify(model: str | Path | Any, deployed: str | Path | None = None, *,
           args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None,
           input: Sequence[str] | str = (), inputs: str | Path | None = None,
           precision: str | None = None, atol: float | None = None, rtol: float | None = None,
           allow_pickle: bool = False, trust_model: bool = False,
           model_factory: str | None = None, imports: Sequence[str] = (),
           task: str | None = None, threads: int = 1, iterations: int = 50, warmup: int = 5,
           device: str | None = None, report: str | Path | None = None,
           report_md: str | Path | None = None, save_inputs: str | Path | None = None,
           save_outputs: str | Path | None = None, calibration: bool = True,
           bundle: str | Path | None = None, target: str = "trt",
           device_outputs: str | Path | None = None, device_times: str | Path | None = None,
           localize: bool = False, output: str | Path | None = None,
           options: VerifyOptions | None = None, progress: Progress | None = None,
           **renamed: Any) -> Report:
    """Check DEPLOYED (an ONNX file or a TensorRT engine) against MODEL; return the report.

    MODEL is a path (any format export takes) or an `nn.Module` / `ExportedProgram` in
    memory, called on `args` / `kwargs` as export() does. With `device_outputs` (outputs a
    device wrote from a bundle, `bundle`), those outputs are judged instead of running
    DEPLOYED. Tolerances default by precision, read from DEPLOYED unless given. The keywords
    are `export-gelu verify`'s flags by export()'s rule (`--no-calibration` →
    `calibration=False`, `--target` → target: the bundle's TensorRT version); `options`
    replaces them. A parity failure is in the report (`report.exit_code == 1`); bad input
    raises BadInputError (exit 2), an engine without TensorRT TargetUnmetError.
    """
    if renamed:
        known = [k for k in inspect.signature(verify).parameters
                 if k not in ("model", "deployed", "renamed")]
        moved = _old_keywords("verify", renamed, known)
        inputs = moved.get("inputs", inputs)
        calibration = moved.get("calibration", calibration)
        target = moved.get("target", target)
    specs, inputs_file = _input_specs("verify", input, inputs)
    opts = options or VerifyOptions(
        inputs=specs, inputs_file=inputs_file, precision=precision, atol=atol, rtol=rtol,
        allow_pickle=allow_pickle or trust_model, model_factory=model_factory,
        imports=as_items("imports", imports), task=task, threads=threads, iterations=iterations,
        warmup=warmup, device=device, report=_str(report), report_md=_str(report_md),
        save_inputs=_str(save_inputs), save_outputs=_str(save_outputs), calibrate=calibration,
        bundle=_str(bundle), bundle_target=target, device_outputs=_str(device_outputs),
        device_times=_str(device_times), localize=localize, output=_str(output))
    stages = (DEVICE_FORMS_VERIFY if recorded_forms(opts)
              else DEVICE_VERIFY if opts.device_outputs else VERIFY)
    if not is_in_memory(model):
        if args is not None or kwargs is not None:
            raise BadInputError("args= and kwargs= are the example inputs of an in-memory "
                                "model; for a file give input=['NAME:SHAPE[:DTYPE]', ...]")
        return run_stages(stages, new_state(opts, model, progress, deployed=deployed)).report
    return _in_memory(model, args, kwargs,
                      lambda loaded: run_stages(stages, new_state(opts, loaded.path, progress,
                                                                  deployed=deployed,
                                                                  loaded=loaded)))


def compare_forms(model: str | Path, *, options: FormsOptions | None = None,
                  progress: Progress | None = None, **keywords: Any) -> FormsComparison:
    """Export `model` with each GELU form for each target and measure every graph: error
    against the model and latency in one interleaved run (graphs that come out identical are
    one row). The keywords are FormsOptions' fields (targets, forms, inputs, precision, ...,
    workdir to keep the graphs); `options` replaces them."""
    opts = options or FormsOptions(**keywords)
    compared = run_stages(COMPARE_FORMS, new_state(opts, model, progress)).forms
    assert compared is not None  # the forms stage made it
    return compared


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
    new_state(options, model)  # checked before measuring
    compared = run_stages(COMPARE_FORMS, new_state(forms.auto_options(options), model, progress))
    rep = forms.best_form_export(compared, dataclasses.replace(options, bundle=None)).report
    if options.bundle:  # every form, for the device to time: verify --device-outputs chooses
        written = forms_bundle.write_device_forms(compared, options, options.bundle)
        forms_bundle.note_forms_bundle(rep, written, Path(model))
        rep.options = {**(rep.options or {}), "bundle": options.bundle}
    write_reports(rep, options.report, options.report_md)
    return rep


def inspect_model(model: str | Path, targets: Sequence[str] | None = None,
                  dry_run: bool = True, *, nodes: Sequence[str] = (),
                  progress: Progress | None = None) -> dict[str, Any]:
    """GELU sites (each with the PyTorch module and source line it came from, where the
    graph records them) and per-target compatibility of an ONNX file, without a GPU.

    For each target (all by default): the reasons it would not parse the file as is, and
    (`dry_run`) whether `export-gelu FILE --target T` would fit it. `nodes`: names of nodes
    whose module, class and source line to give (`info["nodes"]`).
    """
    options = InspectOptions(targets=as_items("targets", targets), dry_run=dry_run,
                             nodes=as_items("nodes", nodes))
    inspection = run_stages(INSPECT, new_state(options, model, progress)).inspection
    assert inspection is not None  # inspect's census made it
    return inspection


__all__ = ["export", "verify", "compare_forms", "forms_report", "export_with_best_form",
           "inspect_model", "default_output", "KeywordError", "GELU_FORMS", "PRECISIONS",
           "COMPARE_TARGETS", "COMPARED_FORMS"]
