"""The steps of `export-gelu verify MODEL --bundle DIR --device-outputs DIR/outputs [-o
BEST.onnx]` for a bundle of GELU forms: every form's device outputs judged against the model
by the one checker (the reference runs once), every form's timing rounds read, one form chosen
(device/choice.py) and its graph written to -o."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path
from typing import Any

import onnx

from export_gelu.atomic import written_file
from export_gelu.check.checker import CheckJob, run_check
from export_gelu.check.inputs.input_resolver import InputRequest, resolve_inputs
from export_gelu.check.latency import summarize
from export_gelu.check.reference.recorded import RecordedRunner
from export_gelu.check.reference.runner import model_runner
from export_gelu.check.runners.deployed import feed_for, open_deployed
from export_gelu.check.runners.torch_runner import dtype_metadata
from export_gelu.check.verdict.parity import ParityResult
from export_gelu.device.bundle_layout import read_manifest
from export_gelu.device.choice import DeviceFormRow, DeviceForms, FormRun, choose_device_form
from export_gelu.device.forms_bundle import is_forms_bundle
from export_gelu.device.outputs import read_device_outputs, read_device_times
from export_gelu.device.returned import (
    DEVICE_RUNNER,
    cast_to_graph,
    check_graph,
    check_model,
    check_pairing,
    check_shapes,
    device_tensorrt,
    output_dtypes,
    version_notes,
)
from export_gelu.device.script import WARMUP_MS
from export_gelu.errors import BadInputError, TargetUnmetError
from export_gelu.exporter.loading.onnx_checks import check_external_data
from export_gelu.exporter.saving.save import save_onnx_streaming
from export_gelu.notes import tagged
from export_gelu.onnx_weights import load_graph
from export_gelu.options import QUANTIZED, VerifyOptions
from export_gelu.quantize import is_qdq_graph
from export_gelu.results.device import DeviceJudging, FormsChoice, FormsRun
from export_gelu.results.request import OneGraphSource, Request
from export_gelu.run import Run
from export_gelu.shown import shown
from export_gelu.steps.device import TRTEXEC_ROUNDING, bundle_cache_text
from export_gelu.steps.quant_verdict import JUDGED_BY, judge_deployed
from export_gelu.steps.quantize import cache_simulation
from export_gelu.untrusted_files import TAIL_BYTES, UntrustedFolder

_TIMES = re.compile(r"times\.(\d{1,6})\.json")
#: build_failed.txt: trtexec's last lines; only its last TAIL_BYTES are read, whatever its size.
BUILD_FAILED = "build_failed.txt"


def _times(returned: UntrustedFolder, form: str, warmup: float) -> tuple[list[float], int, int]:
    """(samples in round order, warm-ups dropped, rounds read) from <form>/times.<round>.json."""
    files = sorted((int(m.group(1)), name) for name in returned.names(form)
                   if (m := _TIMES.fullmatch(name)))
    samples: list[float] = []
    dropped = 0
    for _round, name in files:
        got, gone = read_device_times(f"{form}/{name}", warmup, folder=returned)
        samples += got
        dropped += gone
    return samples, dropped, len(files)


def _last_line(returned: UntrustedFolder, rel: str) -> str:
    """The first error line of the file's tail (TAIL_BYTES), else its last line; at most 300
    characters."""
    lines = [ln.strip() for ln in returned.tail_text(rel, TAIL_BYTES).splitlines() if ln.strip()]
    errors = [ln for ln in lines if "[E]" in ln or "rror" in ln]
    return (errors[:1] or lines[-1:] or ["(empty)"])[0][:300]


def _form_run(bundle: Path, returned: UntrustedFolder, index: int, entry: dict[str, Any],
              warmup: float, *, names: list[str] | None, feeds: int) -> FormRun:
    """The manifest's form `index` (checked by device/manifest_checks.py: a known GELU form,
    listed once) and what the device left in <returned>/<form>/."""
    graph = check_graph(bundle, entry["graph"]["file"], entry["graph"]["sha256"],
                        f"forms[{index}].graph.file")
    form = entry["form"]
    run = FormRun(DeviceFormRow(form, list(entry.get("same_as") or [])), graph)
    cache = entry.get("calibration_cache")  # TensorRT 7.x INT8: the form's own
    if cache is not None:
        run.calibration_cache = bundle_cache_text(bundle, cache,
                                                  f"forms[{index}].calibration_cache.file")
    failed = f"{form}/{BUILD_FAILED}"
    if returned.is_file(failed):
        run.row.build_error = _last_line(returned, failed)
        return run
    outputs = f"{form}/outputs.json"
    if not returned.is_file(outputs):
        folder = returned.path / form
        run.row.build_error = (f"{folder} holds no outputs.json (not run, or not copied back)"
                               if returned.is_dir(form) else f"no {folder} (not run, or not "
                               "copied back)")
        return run
    got, _fmt = read_device_outputs(outputs, folder=returned)
    if names is not None:
        check_pairing(got, names, returned.path / outputs, feeds)
    run.outputs = cast_to_graph(got, output_dtypes(graph))
    run.outputs_file = returned.path / outputs
    run.row.built = True
    samples, run.row.dropped, run.row.rounds = _times(returned, form, warmup)
    if samples:
        run.row.latency = summarize([t / 1e3 for t in samples], run.row.dropped,
                                    "trtexec computeMs (GPU compute per inference)")
    return run


def read_forms_run(request: Request[VerifyOptions]) -> FormsRun:
    """The forms bundle, each form's graph (unchanged) and what the device wrote for it."""
    o = request.options
    bundle, returned = Path(o.bundle or ""), Path(o.device_outputs or "")
    manifest = read_manifest(bundle)  # --bundle given with the folder: options.validate
    if not is_forms_bundle(manifest):
        raise BadInputError(f"--device-outputs {returned} is a folder, but {bundle} holds one "
                            f"graph: give the file the device wrote ({bundle}/outputs.json)")
    check_model(manifest, bundle, request.model)
    given = resolve_inputs(None, InputRequest(bundle=bundle))  # as its graphs take them
    warmup = float(manifest.get("trtexec", {}).get("warmup_ms", WARMUP_MS))
    forms = manifest["forms"]  # a list of known forms, each once (manifest_checks)
    first = check_graph(bundle, forms[0]["graph"]["file"], forms[0]["graph"]["sha256"],
                        "forms[0].graph.file")
    deployed = open_deployed(first)
    names = list(deployed.outputs)
    folder = UntrustedFolder(returned, "--device-outputs", "device folder")
    runs = [_form_run(bundle, folder, i, e, warmup, names=names, feeds=len(given.feeds))
            for i, e in enumerate(forms)]
    if not any(r.row.built for r in runs):
        raise TargetUnmetError(f"no GELU form built on the device ({returned}): " + "; ".join(
            f"{r.row.form}: {shown(r.row.build_error)}" for r in runs))
    return FormsRun(manifest, deployed, tuple(given.feeds), given.source,
                    {r.row.form: r for r in runs})


def forms_check(source: OneGraphSource, forms_run: FormsRun, judging: DeviceJudging,
                options: VerifyOptions, run: Run) -> FormsChoice:
    """Every built form against the reference (run once), the choice, the table."""
    deployed, tol = forms_run.deployed, judging.tolerances
    feeds = [feed_for(deployed, f) for f in forms_run.feeds]
    reference = model_runner(source.loaded, feeds[0], deployed.outputs, options.threads,
                             judging.device.device, onnx_name="reference-onnx")
    runs = list(forms_run.forms.values())
    built = [r for r in runs if r.outputs is not None]
    runners = [RecordedRunner(f"{DEVICE_RUNNER}[{r.row.form}]", feeds, r.outputs or [],
                              dtype_metadata(dict(feeds[0]))) for r in built]
    run.say(f"running {reference.name}; judging {len(built)} form(s)")
    try:
        outcome = run_check(CheckJob(reference, runners, feeds, tol))
    except (RuntimeError, ValueError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise BadInputError(f"running MODEL on these inputs failed: {first}") from exc
    verdicts = {}
    quantized = forms_run.manifest.get("precision") in QUANTIZED
    for form_run, runner in zip(built, runners):
        parity = outcome.by_runner[runner.name]
        assert form_run.outputs_file is not None
        check_shapes(parity, form_run.outputs_file)
        if quantized:  # an INT8/FP8 graph: judged at its own scales, not by fp32 tolerances
            parity = _quant_judged(source, form_run, feeds, parity, options, run)
        verdicts[form_run.row.form] = parity
        form_run.row.passed = parity.status == "passed"
        errors = [e.max_abs for e in parity.outputs.values()]
        form_run.row.max_abs = max(errors) if errors else None
        form_run.row.reason = parity.reason or ""
    table = DeviceForms(f"tensorrt {forms_run.version} (device)", tol.atol, tol.rtol,
                        [r.row for r in runs])
    chosen = choose_device_form(table)
    first_failed = next((verdicts[r.row.form] for r in built if not r.row.passed), None)
    parity = verdicts[chosen.form] if chosen else first_failed or outcome.verdict
    if chosen is None and parity.status == "passed":  # passed, but never timed
        raise BadInputError(f"--device-outputs {options.device_outputs}: no times.<round>.json "
                            "for the forms that passed; run_on_device.sh writes them")
    return FormsChoice(table, chosen, parity)


def _quant_judged(source: OneGraphSource, form_run: FormRun, feeds: list[Any],
                  parity: ParityResult, options: VerifyOptions, run: Run) -> ParityResult:
    """A quantized form's device outputs judged by the INT8/FP8 verdict (PyTorch at the
    graph's own scales, steps/quant_verdict.py): the parity's errors, its verdict's status.
    A TensorRT 7.x INT8 form (an fp32 graph and its calibration cache) is judged against its
    cache's simulation, as a single-form bundle is (steps/device.py)."""
    graph = onnx.load(str(form_run.graph))
    if not is_qdq_graph(graph):
        if form_run.calibration_cache is None:
            return parity
        run.say(f"rebuilding what TensorRT computes from form {form_run.row.form}'s graph "
                "and calibration cache (Q/DQ at the cache's scales)")
        graph = cache_simulation(graph, form_run.calibration_cache)
    run.say(f"judging form {form_run.row.form} at its graph's scales")
    judged = judge_deployed(source.loaded, graph, feeds, options.threads,
                            got=list(form_run.outputs or []))
    verdict = judged.verdict
    if verdict is None:
        return dataclasses.replace(parity, reason=f"not judged: {judged.not_judged}")
    precision = judged.graph.precision.upper()
    failed = [n for n, o in verdict.outputs.items() if not o.passed]
    reason = (f"{precision} verdict passed against {JUDGED_BY}" if verdict.passed else
              f"{precision} verdict failed on {', '.join(failed)}: RMS against PyTorch at the "
              "graph's scales over the bound")
    return dataclasses.replace(parity, status="passed" if verdict.passed else "failed",
                               reason=reason)


def describe_forms_run(forms_run: FormsRun, table: DeviceForms, run: Run) -> str | None:
    """The notes of a forms bundle's device run; returned: the TensorRT its trtexec.log says
    ran it (None: not said)."""
    manifest, version = forms_run.manifest, forms_run.version
    run.note(TRTEXEC_ROUNDING, "trtexec-rounding")
    dropped = sum(r.dropped for r in table.rows)
    if dropped:
        run.note(f"{dropped} warm-up inference(s) dropped from the forms' times (trtexec "
                 "before 8.6 exports them too)", "warmups-dropped")
    precision = manifest.get("precision")
    judged = (f"each judged by its {str(precision).upper()} verdict (PyTorch at the graph's "
              "scales), not by the tolerances in the table" if precision in QUANTIZED else
              "each judged with the bundle's tolerances unless --atol/--rtol")
    run.note(f"bundle of {len(table.rows)} GELU form(s) for {manifest.get('target')} (TensorRT "
             f"{version}), {judged}", "forms-bundle-read")
    built = [form for form, r in forms_run.forms.items() if r.outputs_file is not None]
    if not built:
        return None
    outputs = forms_run.forms[built[0]].outputs_file  # <device folder>/<form>/outputs.json
    assert outputs is not None
    folder = UntrustedFolder(outputs.parent.parent, "--device-outputs", "device folder")
    ran = device_tensorrt(Path(built[0]) / "outputs.json", folder)
    if ran is not None:
        run.add_notes(tagged("device-tensorrt", version_notes(outputs, ran, version)))
    return ran


def write_chosen(forms_run: FormsRun, chosen: DeviceFormRow | None, output: str, run: Run
                 ) -> Path | None:
    """-o BEST.onnx: the chosen form's graph (its weights, when they lie beside it in the
    bundle, in BEST.onnx.data: never under the bundle's file name, which might be taken);
    None when no form was chosen (said in a note)."""
    if chosen is None:
        run.note(f"-o {output} not written: no form was chosen", "no-choice")
        return None
    out = Path(output)
    form = forms_run.forms[chosen.form]
    # the graph's external data was held inside the bundle (returned.check_graph); each file
    # is checked inside its folder again (exit 2 otherwise) before its bytes are copied
    if check_external_data(form.graph):  # weights beside it: into OUT.data, as export does
        save_onnx_streaming(load_graph(form.graph), out, external_data=True)
    else:
        with written_file(out) as staged, form.graph.open("rb") as src, staged.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    run.note(f"the chosen form's graph ({chosen.label}) written to {out}", "chosen-written")
    return out

