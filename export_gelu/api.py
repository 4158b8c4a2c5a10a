"""The Python API: export(), verify(), compare_forms(), inspect_model(); the CLI is a thin
layer over these. Each command is a function over typed results (export_gelu/flows/)."""

from __future__ import annotations

import json as json_text
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from export_gelu import flag_table
from export_gelu.check.compare_forms import FormsComparison
from export_gelu.errors import BadInputError
from export_gelu.exporter.loading.in_memory import from_memory, is_in_memory, without_cache
from export_gelu.exporter.loading.loaded import LoadedModel
from export_gelu.flags.keywords import KeywordError
from export_gelu.flows import device as device_flow
from export_gelu.flows import export as export_flow
from export_gelu.flows import forms as forms_flow
from export_gelu.flows import inspect as inspect_flow
from export_gelu.flows import verify as verify_flow
from export_gelu.flows.running import command_run
from export_gelu.options import (
    COMPARE_TARGETS,
    COMPARED_FORMS,
    GELU_FORMS,
    PRECISIONS,
    ExportOptions,
    FormsOptions,
    VerifyOptions,
    check_compare_forms_flags,
)
from export_gelu.output_plan import default_output
from export_gelu.progress import Progress
from export_gelu.report.report import Report
from export_gelu.results.request import Request
from export_gelu.steps.request import prepare

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from export_gelu.option_records import (
        ExportKeywords,
        FormsKeywords,
        InspectKeywords,
        VerifyKeywords,
    )


def _progress(progress: Progress | None, values: Mapping[str, Any]) -> Progress | None:
    """`quiet=True` (`--quiet`): no progress lines, even on a `progress` given."""
    return Progress(enabled=False) if values.get("quiet") else progress


def export(model: str | Path | Any, *, args: Sequence[Any] | None = None,
           kwargs: Mapping[str, Any] | None = None, options: ExportOptions | None = None,
           progress: Progress | None = None, **keywords: Unpack[ExportKeywords]) -> Report:
    """Export `model` for `target`, rewrite its GELUs, verify and time it; return the report
    (`report.written`: every file the run wrote).

    `model` is a path (a model file, an ONNX file, a Hugging Face save_pretrained folder), or
    an `nn.Module` / `ExportedProgram` in memory called on `args` and `kwargs` (example
    tensors; an ExportedProgram's own by default; `output` is required: there is no file to
    name it after). The other keywords are every flag of `export-gelu MODEL` by one rule
    (`export-gelu --help`; declared in export_gelu/flag_table/table.py): dashes as
    underscores (`--report-md` → report_md), `--no-verify` → `verify=False`, `--import` →
    `imports` (import is a Python keyword); so `input` takes the `--input` specs and `inputs`
    the `--inputs` file; `gelu='auto'` measures every form first, as `--gelu auto` does, and
    `compare_forms=True` returns the comparison's report, as `--compare-forms` prints it;
    `quiet=True` silences `progress`; `debug` is the command line's (Python shows the
    traceback of what this raises either way). `options` (an ExportOptions, as the CLI builds
    it) replaces them. A keyword that is not one raises KeywordError (a TypeError) naming the
    right one.

    Raises ExportGeluError subclasses for bad input (exit 2) or unmet targets (exit 3); a
    parity failure is returned in the report (`report.exit_code == 1`).
    """
    values = flag_table.api_values("export", keywords, known=("args", "kwargs", "options",
                                                              "progress"))
    progress = _progress(progress, values)
    if values.get("compare_forms"):  # as `export-gelu MODEL --compare-forms`
        check_compare_forms_flags(output=values.get("output"), gelu=values.get("gelu", "keep"),
                                  cast_down=bool(values.get("cast_down")))
        if is_in_memory(model):
            raise BadInputError("compare_forms=True exports the model once per form: give it "
                                "as a file (torch.export.save)")
        return forms_report(model, flag_table.forms_options(values), progress=progress)
    opts = options or flag_table.export_options(values)
    if not is_in_memory(model):
        if args is not None or kwargs is not None:
            raise BadInputError("args= and kwargs= are the example inputs of an in-memory "
                                "model; for a file give input=['NAME:SHAPE[:DTYPE]', ...]")
        if opts.gelu == "auto":  # as `export-gelu MODEL --gelu auto`
            return export_with_best_form(model, opts, progress)
        return export_flow.export_report(prepare(opts, model), progress)
    return _in_memory(model, args, kwargs,
                      lambda loaded: export_flow.export_report(
                          prepare(opts, loaded.path, loaded=loaded), progress))


def _in_memory(model: Any, args: Sequence[Any] | None, kwargs: Mapping[str, Any] | None,
               run: Callable[[LoadedModel], Report]) -> Report:
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
            return run(loaded)
    finally:
        if training:
            model.train()


def verify(model: str | Path | Any, deployed: str | Path | None = None, *,
           args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None,
           options: VerifyOptions | None = None, progress: Progress | None = None,
           **keywords: Unpack[VerifyKeywords]) -> Report:
    """Check DEPLOYED (an ONNX file or a TensorRT engine) against MODEL; return the report.

    MODEL is a path (any format export takes) or an `nn.Module` / `ExportedProgram` in
    memory, called on `args` / `kwargs` as export() does. With `device_outputs` (outputs a
    device wrote from a bundle, `bundle`), those outputs are judged instead of running
    DEPLOYED. Tolerances default by precision, read from DEPLOYED unless given. The keywords
    are every flag of `export-gelu verify` by export()'s rule (`--no-calibration` →
    `calibration=False`, `--target` → target: the bundle's TensorRT version); `options`
    replaces them. A parity failure is in the report (`report.exit_code == 1`); bad input
    raises BadInputError (exit 2), an engine without TensorRT TargetUnmetError.
    """
    values = flag_table.api_values("verify", keywords, known=("args", "kwargs", "options",
                                                              "progress"))
    progress = _progress(progress, values)
    opts = options or flag_table.verify_options(values)

    def run(request: Request[VerifyOptions]) -> Report:
        if opts.device_outputs:
            return device_flow.device_report(request, progress)
        return verify_flow.verify_report(request, progress)

    if not is_in_memory(model):
        if args is not None or kwargs is not None:
            raise BadInputError("args= and kwargs= are the example inputs of an in-memory "
                                "model; for a file give input=['NAME:SHAPE[:DTYPE]', ...]")
        return run(prepare(opts, model, deployed=deployed))
    return _in_memory(model, args, kwargs,
                      lambda loaded: run(prepare(opts, loaded.path, deployed=deployed,
                                                 loaded=loaded)))


def compare_forms(model: str | Path, *, options: FormsOptions | None = None,
                  progress: Progress | None = None,
                  **keywords: Unpack[FormsKeywords]) -> FormsComparison:
    """Export `model` with each GELU form for each target and measure every graph: error
    against the model and latency in one interleaved run (graphs that come out identical are
    one row). The keywords are the flags `--compare-forms` takes, by export()'s rule
    (`target` names one target), and `targets`, `forms` and `workdir` (a folder that keeps the
    graphs); `options` replaces them."""
    values = flag_table.api_values("compare_forms", keywords, known=("options", "progress"))
    progress = _progress(progress, values)
    opts = options or flag_table.forms_options(values)
    request = prepare(opts, model)
    with command_run(request, progress) as run:
        return forms_flow.compare_forms(request, run, calibration=False).comparison


def forms_report(model: str | Path, options: FormsOptions, *,
                 progress: Progress | None = None) -> Report:
    """`export-gelu MODEL --compare-forms`: the comparison as a Report (table, GELU input
    ranges, notes), written to `options.report` / `options.report_md`."""
    return forms_flow.forms_report(prepare(options, model), progress)


def export_with_best_form(model: str | Path, options: ExportOptions,
                          progress: Progress | None = None) -> Report:
    """`--gelu auto`: measure every form on `options.target`, then export with the fastest
    one whose end-to-end error stays within `options.atol` (default: the precision's); the
    model is loaded once for both."""
    return forms_flow.auto_report(prepare(options, model), progress)


@overload
def inspect_model(model: str | Path, targets: Sequence[str] | str | None = None,
                  dry_run: bool = True, *, json: Literal[False] = False,
                  progress: Progress | None = None,
                  **keywords: Unpack[InspectKeywords]) -> dict[str, Any]: ...


@overload
def inspect_model(model: str | Path, targets: Sequence[str] | str | None = None,
                  dry_run: bool = True, *, json: Literal[True],
                  progress: Progress | None = None,
                  **keywords: Unpack[InspectKeywords]) -> str: ...


def inspect_model(model: str | Path, targets: Sequence[str] | str | None = None,
                  dry_run: bool = True, *, json: bool = False, progress: Progress | None = None,
                  **keywords: Unpack[InspectKeywords]) -> dict[str, Any] | str:
    """GELU sites (each with the PyTorch module and source line it came from, where the
    graph records them) and per-target compatibility of an ONNX file, without a GPU.

    For each target (all by default; `target=` names one, as `--target` does): the reasons it
    would not parse the file as is, and (`dry_run`) whether `export-gelu FILE --target T`
    would fit it. `nodes` (or `node`): names of nodes whose module, class and source line to
    give (`info["nodes"]`). `json=True` returns the JSON text `--json` prints.
    """
    given = {"targets": targets, **keywords} if targets is not None else dict(keywords)
    values = flag_table.api_values("inspect_model", {**given, "dry_run": dry_run},
                                   known=("progress",))
    options = flag_table.inspect_options(values)
    request = prepare(options, model)
    with command_run(request, _progress(progress, values)) as run:
        info = inspect_flow.inspect(request, run).to_json()
    return json_text.dumps(info, indent=2) if json else info


def _spell_out_keywords(*functions: Any) -> None:
    """Each function's signature lists every keyword of the flag table, with its default
    (help(), editors; the keywords arrive as **keywords)."""
    for function in functions:
        function.__signature__ = flag_table.api_signature(function)


_spell_out_keywords(export, verify, compare_forms, inspect_model)

__all__ = ["export", "verify", "compare_forms", "forms_report", "export_with_best_form",
           "inspect_model", "default_output", "KeywordError", "GELU_FORMS", "PRECISIONS",
           "COMPARE_TARGETS", "COMPARED_FORMS"]
