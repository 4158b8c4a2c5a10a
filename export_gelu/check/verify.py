"""`export-gelu verify MODEL DEPLOYED`: the deployed artifact's outputs against the original
PyTorch model's on the same inputs, its latency beside PyTorch's, and the GELU input ranges."""

from __future__ import annotations

import gc
from collections import Counter, OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from export_gelu.errors import BadInputError
from export_gelu.options import VerifyOptions, validate
from export_gelu.progress import Progress
from export_gelu.report.report import Report


def _feeds(loaded: Any, deployed: Any, specs: Sequence[str], inputs_file: str | Path | None
           ) -> tuple[list[OrderedDict[str, np.ndarray]], str, bool]:
    """(feeds in forward() order, where they came from, whether they are real data)."""
    from export_gelu.check.saved_data import load_inputs_file
    from export_gelu.exporter.feeds import resolve_feed
    from export_gelu.exporter.load import load_model

    if specs and inputs_file:
        raise BadInputError("give either --input specs or --inputs FILE, not both")
    if inputs_file:
        path = Path(inputs_file)
        if path.suffix.lower() == ".npz" or path.read_bytes()[:2] == b"PK":
            feeds = [resolve_feed(loaded, [], path)]
        else:
            feeds = load_inputs_file(path)
        return feeds, f"real data from {path.name} ({len(feeds)} feed(s))", True
    if specs:
        return [resolve_feed(loaded, list(specs), None)], "random, from --input specs", False
    if loaded.example_inputs is not None or loaded.is_onnx:
        return [resolve_feed(loaded, [], None)], "the model's own example inputs", False
    if deployed.kind == "onnx":
        try:
            feed = resolve_feed(load_model(deployed.path), [], None)
        except BadInputError as exc:
            raise BadInputError(f"{loaded.path}: carries no example inputs and {exc}") from exc
        return [feed], f"random, shaped like {deployed.path.name}'s inputs", False
    raise BadInputError(f"{loaded.path}: carries no example inputs; pass --input "
                        "NAME:SHAPE[:DTYPE[:LOW,HIGH]] per forward() argument, or --inputs FILE")


def _reference(loaded: Any, feed: OrderedDict[str, np.ndarray], outputs: list[str],
               threads: int, device: str) -> Any:
    from export_gelu.check.ort_runner import ort_runner
    from export_gelu.check.torch_runner import TorchRunner

    if loaded.is_onnx:
        from export_gelu.check.deployed import renamed_outputs
        from export_gelu.check.ort_runner import output_names

        runner = ort_runner(loaded.path, threads=threads, name="reference-onnx")
        if output_names(loaded.path) != outputs:  # pair outputs by position
            runner = renamed_outputs(runner, outputs)
        return runner
    import torch

    from export_gelu.exporter.call_plan import plan_for
    from export_gelu.exporter.model_dtype import model_float_dtype

    torch.set_num_threads(threads)
    module = loaded.reference_module()
    return TorchRunner(module, feed, outputs, device=device, name="pytorch",
                       float_dtype=model_float_dtype(module), plan=plan_for(loaded, list(feed)))


def _deployed_sites(deployed: Any) -> list[Any]:
    """GELU sites of the deployed ONNX graph (what it actually computes)."""
    if deployed.kind != "onnx":
        return []
    import onnx

    from export_gelu.passes.onnx import find_sites

    return find_sites(onnx.load(str(deployed.path), load_external_data=False))


def _plugin_notes(graph: Any, which: str) -> list[str]:
    """The report's note where `graph` holds GELU plugin nodes (run as their math)."""
    from export_gelu.passes.onnx.plugin_math import STANDIN_NOTE, plugin_nodes

    return [STANDIN_NOTE.format(which=which)] if plugin_nodes(graph) else []


def _form_notes(model_kinds: Counter[str], deployed_kinds: Counter[str]) -> list[str]:
    if not model_kinds or not deployed_kinds or model_kinds == deployed_kinds:
        return []
    show = ", ".join
    return [f"the deployed graph's GELUs ({show(f'{n} {k}' for k, n in deployed_kinds.items())})"
            f" differ from the model's ({show(f'{n} {k}' for k, n in model_kinds.items())}): "
            "a changed form adds error (tanh up to 4.73e-4, sigmoid up to 2.03e-2 per site)"]


def _calibration_notes(calibration: Any, precision: str) -> list[str]:
    notes = []
    for s in calibration.sites:
        if s.share_abs_gt_40 > 0 and precision == "fp16":
            notes.append(f"GELU {s.module or s.name} sees |x| > 40 ({s.share_abs_gt_40:.2%} of "
                         "values): a Pow-based tanh form overflows fp16 there (x³ > 65504)")
    return notes


def _calibrate(rep: Report, loaded: Any, feeds: Any, inputs_label: str, real: bool,
               precision: str, progress: Progress) -> None:
    """GELU input ranges of the model on `feeds`, and what they say about the forms."""
    from export_gelu.check.calibration import gelu_input_ranges

    progress.step("recording GELU input ranges")
    label = inputs_label if real else f"{inputs_label}; not real data, ranges are indicative"
    rep.calibration = gelu_input_ranges(loaded, feeds, label)
    rep.notes += _calibration_notes(rep.calibration, precision)
    rep.notes += _form_notes(Counter(s.kind for s in rep.calibration.sites),
                             Counter(s.kind for s in rep.gelu_sites))


def verify(model: str | Path, deployed: str | Path, *, inputs: Sequence[str] = (),
           inputs_file: str | Path | None = None, precision: str | None = None,
           atol: float | None = None, rtol: float | None = None, allow_pickle: bool = False,
           model_factory: str | None = None, threads: int = 1, iterations: int = 50,
           warmup: int = 5, device: str | None = None, save_inputs: str | Path | None = None,
           save_outputs: str | Path | None = None, report: str | Path | None = None,
           report_md: str | Path | None = None, calibrate: bool = True,
           progress: Progress | None = None, bundle: str | Path | None = None,
           bundle_target: str = "trt", imports: Sequence[str] = (),
           options: VerifyOptions | None = None) -> Report:
    """Check DEPLOYED (an ONNX file or a TensorRT engine) against MODEL; return the report.

    `bundle`: also write a device bundle of DEPLOYED (an ONNX file) for `bundle_target`
    (device/bundle.py).

    Tolerances default by precision, which is read from the deployed graph's input dtypes
    unless given. A parity failure is returned in the report (`report.exit_code == 1`); bad
    input raises BadInputError (exit 2); an engine without TensorRT raises TargetUnmetError.
    `options` (a VerifyOptions, as the CLI builds it) replaces the keyword options above.
    """
    from export_gelu.check.deployed import deployed_runner, feed_for, open_deployed
    from export_gelu.check.devices import compare_on_providers, ready_runners
    from export_gelu.check.latency import measure_latency
    from export_gelu.check.parity import compare_runners, default_tolerances
    from export_gelu.check.recorded import (
        IN_TURN_NOTE,
        RecordedRunner,
        fits_beside_reference,
        record_reference,
    )
    from export_gelu.exporter.load import load_model

    progress = progress or Progress(enabled=False)
    opts = options or VerifyOptions(
        inputs=inputs, inputs_file=inputs_file, precision=precision, atol=atol, rtol=rtol,
        allow_pickle=allow_pickle, model_factory=model_factory, threads=threads,
        iterations=iterations, warmup=warmup, device=device, save_inputs=save_inputs,
        save_outputs=save_outputs, report=report, report_md=report_md, calibrate=calibrate,
        bundle=bundle, bundle_target=bundle_target, imports=imports)
    checked = validate(opts, model, deployed=deployed)  # options and output paths, before work
    inputs, inputs_file, precision, atol, rtol = (opts.inputs, opts.inputs_file, opts.precision,
                                                  opts.atol, opts.rtol)
    allow_pickle, model_factory, imports = opts.allow_pickle, opts.model_factory, opts.imports
    threads, iterations, warmup, device = opts.threads, opts.iterations, opts.warmup, opts.device
    save_inputs, save_outputs, report, report_md = (opts.save_inputs, opts.save_outputs,
                                                    opts.report, opts.report_md)
    calibrate, bundle = opts.calibrate, opts.bundle
    model_path, deployed_path = Path(model), Path(deployed)
    profile = checked.profile  # --bundle's target
    progress.step(f"opening {deployed_path}")
    dep = open_deployed(deployed_path)
    if bundle and dep.kind != "onnx":
        raise BadInputError("--bundle: DEPLOYED must be the ONNX graph (a bundle carries the "
                            "graph; the device builds its own engine)")
    progress.step(f"loading {model_path}")
    loaded = load_model(model_path, allow_pickle=allow_pickle, model_factory=model_factory,
                        imports=imports)
    feeds, inputs_label, real = _feeds(loaded, dep, inputs, inputs_file)
    dep_feeds = [feed_for(dep, f) for f in feeds]
    chosen = precision or dep.precision
    why = "given with --precision" if precision else dep.precision_why
    d_atol, d_rtol = default_tolerances(chosen)
    atol = d_atol if atol is None else atol
    rtol = d_rtol if rtol is None else rtol
    from export_gelu.check.devices import DEVICES, resolve_device

    if dep.kind == "engine":  # TensorRT runs on the GPU; the reference goes there if it can
        import torch

        if device is not None and device not in DEVICES:
            raise BadInputError(f"--device {device!r}: choose one of {', '.join(DEVICES)}")
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        device_json = {"device": device, "requested": device, "reason": "TensorRT engine"}
    else:
        choice = resolve_device(device)
        device, device_json = choice.device, choice.to_json()

    rep = Report(model=str(model_path), target=dep.runtime, model_format=loaded.format.value,
                 output=str(dep.path), precision=chosen, gelu_form="", threads=threads,
                 notes=list(loaded.notes), command="verify", inputs=inputs_label,
                 precision_note=why, device=device_json, options=opts.to_json())
    if dep.kind == "onnx":
        import onnx

        from export_gelu.compat import model_opset, op_counts

        graph = onnx.load(str(dep.path), load_external_data=False)
        rep.opset = model_opset(graph)
        rep.op_counts = dict(op_counts(graph))
        rep.gelu_sites = _deployed_sites(dep)
        rep.trt = {"status": "skipped", "reason": "DEPLOYED is an ONNX file (run in ONNX Runtime)"}
        rep.notes += _plugin_notes(graph, "DEPLOYED")
    else:
        rep.trt = {"status": "loaded", "reason": "", "engine": str(dep.path)}
    if loaded.is_onnx:
        import onnx

        rep.notes += _plugin_notes(onnx.load(str(loaded.path), load_external_data=False),
                                   "MODEL (the reference)")

    reference = _reference(loaded, dep_feeds[0], dep.outputs, threads, device)
    calibrated = False
    if dep.kind == "onnx" and not fits_beside_reference(dep.path):
        if calibrate and not loaded.is_onnx:  # it needs the model: before it goes
            _calibrate(rep, loaded, feeds, inputs_label, real, chosen, progress)
            calibrated = True
        progress.step(f"running {reference.name} before loading DEPLOYED (a big model)")
        reference = record_reference(reference, dep_feeds, iterations, warmup)
        loaded.module = loaded.exported = None  # one model in memory at a time
        gc.collect()
        rep.notes.append(IN_TURN_NOTE.format(reference=reference.name, output="DEPLOYED"))
    runs = ([] if dep.kind == "engine"
            else ready_runners(dep.path, device, chosen, threads))
    runner = (deployed_runner(dep, threads=threads) if dep.kind == "engine"
              else next(r.runner for r in runs if r.status == "ready"))
    progress.step(f"running {len(dep_feeds)} feed(s) through {reference.name} and {runner.name}")
    try:
        if runs:
            rep.parity, rep.providers = compare_on_providers(reference, runs, dep_feeds, atol,
                                                             rtol)
        else:
            rep.parity = compare_runners(reference, runner, dep_feeds, atol, rtol)
    except (RuntimeError, ValueError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise BadInputError(f"running MODEL and DEPLOYED on these inputs failed: {first}") from exc
    if save_inputs:
        from export_gelu.check.saved_data import save_polygraphy_inputs

        save_polygraphy_inputs(dep_feeds, save_inputs)
        rep.notes.append(f"inputs saved to {save_inputs} (polygraphy run --load-inputs)")
    if save_outputs:
        from export_gelu.check.saved_data import save_polygraphy_outputs

        save_polygraphy_outputs(rep.parity.run_results, save_outputs)
        rep.notes.append(f"outputs of {' and '.join(rep.parity.runners)} saved to "
                         f"{save_outputs} (polygraphy run --load-outputs)")

    if bundle:
        from export_gelu.device.bundle import bundle_after_verify

        progress.step(f"writing the device bundle {bundle}")
        bundle_after_verify(rep, Path(bundle), model_path, dep.path, profile, chosen,
                            dep_feeds[0], lambda: reference, atol, rtol)
    if iterations > 0:
        progress.step("timing")
        if isinstance(reference, RecordedRunner):  # timed while it was loaded
            with runner:
                rep.latency = {reference.name: reference.latency,
                               **measure_latency([runner], dep_feeds[0], iterations, warmup,
                                                 progress)}
        else:
            with reference, runner:
                rep.latency = measure_latency([reference, runner], dep_feeds[0], iterations,
                                              warmup, progress)
    if calibrate and not loaded.is_onnx and not calibrated:
        _calibrate(rep, loaded, feeds, inputs_label, real, chosen, progress)
    progress.done()
    from export_gelu.report.report import write_reports

    write_reports(rep, report, report_md)
    return rep
