"""`--compare-forms` and `--gelu auto` at the API's level: export the model once per GELU form
through `export()` itself (same passes, same exporters: `--target onnx` gives the fused `Gelu`
op, a primitives target such as trt8.6 the expanded formula), then measure the graphs
(check/compare_forms.py) and report, or export with the form the measurements pick.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from collections.abc import Sequence
from pathlib import Path

from export_gelu.api import export
from export_gelu.check.compare_forms import (
    FormRow,
    FormsComparison,
    choose_form,
    fingerprint,
    graph_ops,
    measure_forms,
)
from export_gelu.errors import BadInputError, ExportGeluError
from export_gelu.options import (
    COMPARE_TARGETS,
    COMPARED_FORMS,
    ExportOptions,
    FormsOptions,
    validate,
)
from export_gelu.progress import Progress
from export_gelu.report.report import Report

FORMS = COMPARED_FORMS
DEFAULT_TARGETS = COMPARE_TARGETS


def compare_forms(model: str | Path, *, targets: Sequence[str] = DEFAULT_TARGETS,
                  forms: Sequence[str] = FORMS, inputs: Sequence[str] = (),
                  inputs_npz: str | Path | None = None, precision: str = "fp32",
                  allow_pickle: bool = False, model_factory: str | None = None,
                  threads: int = 1, iterations: int = 50, warmup: int = 5,
                  workdir: str | Path | None = None, device: str | None = None,
                  progress: Progress | None = None, imports: Sequence[str] = (),
                  options: FormsOptions | None = None) -> FormsComparison:
    """Export `model` with each GELU form for each target and measure every graph.

    Graphs that come out identical (e.g. `keep` and `tanh` on a tanh model) are measured once
    and shown as one row (`keep = tanh`). Errors are end-to-end against the original PyTorch
    model on the same inputs; latencies come from one interleaved run of every graph and the
    PyTorch model, in ONNX Runtime with `threads` intra-op threads. `workdir` keeps the graphs
    (default: a temporary directory, removed afterwards). `options` (a FormsOptions, as the
    CLI builds it) replaces the keyword options.
    """
    import onnx
    import torch

    from export_gelu.check.devices import resolve_device
    from export_gelu.exporter.feeds import resolve_feed
    from export_gelu.exporter.load import load_model

    progress = progress or Progress(enabled=False)
    o = options or FormsOptions(
        targets=targets, forms=forms, inputs=inputs, inputs_npz=inputs_npz, precision=precision,
        allow_pickle=allow_pickle, model_factory=model_factory, threads=threads,
        iterations=iterations, warmup=warmup, workdir=workdir, device=device, imports=imports)
    validate(o)  # every option checked here, before any work
    model_path = Path(model)
    progress.step(f"loading {model_path}")
    loaded = load_model(model_path, allow_pickle=o.allow_pickle, model_factory=o.model_factory,
                        imports=o.imports)
    if loaded.is_onnx:
        raise BadInputError(f"{model_path}: comparing GELU forms needs the PyTorch model "
                            "(forms are applied while exporting it)")
    feed = resolve_feed(loaded, list(o.inputs), o.inputs_npz)
    torch.set_num_threads(o.threads)
    run_on = resolve_device(o.device).device
    where = "onnxruntime (CPU EP)" if run_on == "cpu" else "onnxruntime (CUDA EP)"
    result = FormsComparison(str(model_path), where, o.threads, o.iterations)

    with contextlib.ExitStack() as stack:
        if o.workdir is None:
            out_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gelu-forms-")))
        else:
            out_dir = Path(o.workdir)
            if not out_dir.is_dir():
                raise BadInputError(f"{out_dir}: not a directory")
        seen: dict[str, FormRow] = {}
        jobs = [(t, f) for t in o.targets for f in o.forms]
        for i, (target, form) in enumerate(jobs):
            progress.step(f"exporting form {i + 1}/{len(jobs)}: {form} for {target}")
            out = out_dir / f"{model_path.stem}.{form}.{target}.onnx"
            try:
                rep = export(model_path, target=target, output=out, gelu=form, inputs=o.inputs,
                             inputs_npz=o.inputs_npz, precision=o.precision, verify=False,
                             allow_pickle=o.allow_pickle, model_factory=o.model_factory,
                             threads=o.threads, imports=o.imports)
            except ExportGeluError as exc:
                result.rows.append(FormRow(form, target, error=str(exc)))
                continue
            graph = onnx.load(str(out), load_external_data=False)
            key = f"{target}:{fingerprint(graph)}"
            if key in seen:
                seen[key].same_as.append(form)
                continue
            ops, layout = graph_ops(graph)
            row = FormRow(form, target, graph=ops, layout=layout, opset=rep.opset,
                          exporter=rep.exporter, path=str(out))
            seen[key] = row
            result.rows.append(row)
        measure_forms(result, loaded, feed, run_on, o.precision, o.threads, o.iterations,
                      o.warmup, progress, keep_paths=o.workdir is not None)
    return result


def forms_report(model: str | Path, options: FormsOptions, *, report: str | Path | None = None,
                 report_md: str | Path | None = None, progress: Progress | None = None
                 ) -> Report:
    """`export-gelu MODEL --compare-forms`: the comparison as a Report (table, ranges, notes)."""
    from export_gelu.check.calibration import gelu_input_ranges
    from export_gelu.exporter.feeds import generated_inputs, resolve_feed
    from export_gelu.exporter.load import load_model
    from export_gelu.exporter.save import check_output_path
    from export_gelu.report.report import write_reports

    for path in filter(None, (report, report_md)):
        check_output_path(Path(path), [Path(model)])
    comparison = compare_forms(model, options=options, progress=progress)
    rep = Report(model=str(model), target=", ".join(options.targets), command="compare-forms",
                 threads=comparison.threads, forms=comparison, precision=options.precision,
                 options=options.to_json())
    loaded = load_model(model, allow_pickle=options.allow_pickle,
                        model_factory=options.model_factory, imports=options.imports)
    rep.model_format = loaded.format.value
    feed = resolve_feed(loaded, list(options.inputs), options.inputs_npz)
    rep.generated_inputs = generated_inputs(feed)
    label = ("real data from " + Path(options.inputs_npz).name if options.inputs_npz
             else "not real data (example or --input), ranges are indicative")
    rep.inputs = label
    rep.calibration = gelu_input_ranges(loaded, [feed], label)
    write_reports(rep, report, report_md)
    return rep


def export_with_best_form(model: str | Path, options: ExportOptions,
                          progress: Progress | None = None) -> Report:
    """`--gelu auto`: measure every form on `options.target`, export with the fastest one whose
    end-to-end error stays within `options.atol` (default: the precision's), and say why in
    the report. `options.gelu` is ignored (the comparison picks it)."""
    from export_gelu.check.parity import default_tolerances
    from export_gelu.exporter.save import check_output_path, write_text_atomic

    if options.report:
        check_output_path(Path(options.report), [Path(model)])
    forms = FormsOptions(
        targets=(options.target,), inputs=options.inputs, inputs_npz=options.inputs_npz,
        precision=options.precision, allow_pickle=options.allow_pickle,
        model_factory=options.model_factory, imports=options.imports, threads=options.threads,
        iterations=options.iterations, warmup=options.warmup, device=options.device)
    validate(forms)
    validate(dataclasses.replace(options, gelu="keep"))  # the export's options, before measuring
    limit = default_tolerances(options.precision)[0] if options.atol is None else options.atol
    comparison = compare_forms(model, options=forms, progress=progress)
    chosen, why = choose_form(comparison, limit)
    comparison.choice = why
    rep = export(model, options=dataclasses.replace(options, gelu=chosen.form, atol=limit,
                                                    report=None), progress=progress)
    rep.gelu_form = f"auto → {chosen.form}"
    rep.forms = comparison
    rep.options = {**options.to_json(), "gelu": "auto"}  # what was asked, not what was chosen
    if options.report:
        write_text_atomic(rep.dumps(), Path(options.report))
    return rep

