"""The steps of `export-gelu verify MODEL --bundle DIR --device-outputs DIR/outputs [-o
BEST.onnx]` for a bundle of GELU forms: every form's device outputs judged against the model
by the one checker (the reference runs once), every form's timing rounds read, one form chosen
(device/choice.py) and its graph written to -o."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from export_gelu.atomic import written_file
from export_gelu.check.checker import CheckJob, run_check
from export_gelu.check.deployed import feed_for, open_deployed
from export_gelu.check.input_resolver import InputRequest, resolve_inputs
from export_gelu.check.latency import summarize
from export_gelu.check.recorded import RecordedRunner
from export_gelu.check.reference import model_runner
from export_gelu.check.torch_runner import dtype_metadata
from export_gelu.device.bundle import read_manifest
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
from export_gelu.exporter.saving.save import save_onnx_streaming
from export_gelu.notes import tagged
from export_gelu.onnx_weights import load_graph
from export_gelu.options import VerifyOptions
from export_gelu.results.device import DeviceJudging, FormsChoice, FormsRun
from export_gelu.results.request import OneGraphSource, Request
from export_gelu.run import Run
from export_gelu.steps.device import TRTEXEC_ROUNDING

_TIMES = re.compile(r"times\.(\d+)\.json")


def _times(folder: Path, warmup: float) -> tuple[list[float], int, int]:
    """(samples in round order, warm-ups dropped, rounds read) from times.<round>.json."""
    files = sorted((int(m.group(1)), p) for p in folder.iterdir()
                   if (m := _TIMES.fullmatch(p.name)))
    samples: list[float] = []
    dropped = 0
    for _round, path in files:
        got, gone = read_device_times(path, warmup)
        samples += got
        dropped += gone
    return samples, dropped, len(files)


def _last_line(path: Path) -> str:
    lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if "[E]" in ln or "rror" in ln]
    return (errors[:1] or lines[-1:] or ["(empty)"])[0][:300]


def _form_run(bundle: Path, returned: Path, entry: dict[str, Any], warmup: float,
              names: list[str] | None, feeds: int) -> FormRun:
    graph_info = entry.get("graph") or {}
    graph = check_graph(bundle, str(graph_info.get("file")), graph_info.get("sha256"))
    form = str(entry.get("form"))
    run = FormRun(DeviceFormRow(form, list(entry.get("same_as") or [])), graph,
                  list(graph_info.get("external_data") or []))
    folder = returned / form
    failed = folder / "build_failed.txt"
    if failed.is_file():
        run.row.build_error = _last_line(failed)
        return run
    outputs = folder / "outputs.json"
    if not outputs.is_file():
        run.row.build_error = (f"{folder} holds no outputs.json (not run, or not copied back)"
                               if folder.is_dir() else f"no {folder} (not run, or not copied "
                               "back)")
        return run
    got, _fmt = read_device_outputs(outputs)
    if names is not None:
        check_pairing(got, names, outputs, feeds)
    run.outputs = cast_to_graph(got, output_dtypes(graph))
    run.outputs_file = outputs
    run.row.built = True
    samples, run.row.dropped, run.row.rounds = _times(folder, warmup)
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
    forms = manifest["forms"]
    if not forms:
        raise BadInputError(f"--bundle {bundle}: its manifest lists no form")
    first = check_graph(bundle, str(forms[0].get("graph", {}).get("file")),
                        forms[0].get("graph", {}).get("sha256"))
    deployed = open_deployed(first)
    names = list(deployed.outputs)
    runs = [_form_run(bundle, returned, e, warmup, names, len(given.feeds)) for e in forms]
    if not any(r.row.built for r in runs):
        raise TargetUnmetError(f"no GELU form built on the device ({returned}): " + "; ".join(
            f"{r.row.form}: {r.row.build_error}" for r in runs))
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
    for form_run, runner in zip(built, runners):
        parity = outcome.by_runner[runner.name]
        assert form_run.outputs_file is not None
        check_shapes(parity, form_run.outputs_file)
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


def describe_forms_run(forms_run: FormsRun, table: DeviceForms, run: Run) -> str | None:
    """The notes of a forms bundle's device run; returned: the TensorRT its trtexec.log says
    ran it (None: not said)."""
    manifest, version = forms_run.manifest, forms_run.version
    run.note(TRTEXEC_ROUNDING, "trtexec-rounding")
    dropped = sum(r.dropped for r in table.rows)
    if dropped:
        run.note(f"{dropped} warm-up inference(s) dropped from the forms' times (trtexec "
                 "before 8.6 exports them too)", "warmups-dropped")
    run.note(f"bundle of {len(table.rows)} GELU form(s) for {manifest.get('target')} (TensorRT "
             f"{version}), each judged with the bundle's tolerances unless --atol/--rtol",
             "forms-bundle-read")
    logs = [r.outputs_file.parent / "trtexec.log" for r in forms_run.forms.values()
            if r.outputs_file is not None]
    if not logs:
        return None
    outputs = logs[0].parent / "outputs.json"
    ran = device_tensorrt(outputs)
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
    if form.external_data:  # weights beside it: streamed into OUT.data, as an export writes them
        save_onnx_streaming(load_graph(form.graph), out, external_data=True)
    else:
        with written_file(out) as staged:
            shutil.copyfile(form.graph, staged)
    run.note(f"the chosen form's graph ({chosen.label}) written to {out}", "chosen-written")
    return out
