"""The stages of `export-gelu verify MODEL --bundle DIR --device-outputs DIR/outputs [-o
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
    device_version_notes,
    output_dtypes,
)
from export_gelu.device.script import WARMUP_MS
from export_gelu.errors import BadInputError, TargetUnmetError
from export_gelu.exporter.saving.save import save_onnx_streaming
from export_gelu.notes import Note
from export_gelu.onnx_weights import load_graph
from export_gelu.pipeline.stage import stage_io
from export_gelu.pipeline.state import VerifyState, need
from export_gelu.shown import shown
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
              warmup: float, names: list[str] | None, feeds: int) -> FormRun:
    """The manifest's form `index` (checked by device/manifest_checks.py: a known GELU form,
    listed once) and what the device left in <returned>/<form>/."""
    graph = check_graph(bundle, entry["graph"]["file"], entry["graph"]["sha256"],
                        f"forms[{index}].graph.file")
    form = entry["form"]
    run = FormRun(DeviceFormRow(form, list(entry.get("same_as") or [])), graph)
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


@stage_io(reads=("deployed", "feeds", "model_path", "options"),
          writes=("deployed", "device_format", "device_forms", "feeds", "inputs_label", "manifest"))
def read_forms_run(state: VerifyState) -> None:
    """The forms bundle, each form's graph (unchanged) and what the device wrote for it."""
    o = state.options
    bundle, returned = Path(o.bundle or ""), Path(o.device_outputs or "")
    manifest = read_manifest(bundle)  # --bundle given with the folder: options.validate
    if not is_forms_bundle(manifest):
        raise BadInputError(f"--device-outputs {returned} is a folder, but {bundle} holds one "
                            f"graph: give the file the device wrote ({bundle}/outputs.json)")
    check_model(manifest, bundle, state.model_path)
    given = resolve_inputs(None, InputRequest(bundle=bundle))  # as its graphs take them
    state.manifest = manifest
    state.feeds, state.inputs_label = given.feeds, given.source
    warmup = float(manifest.get("trtexec", {}).get("warmup_ms", WARMUP_MS))
    forms = manifest["forms"]  # a list of known forms, each once (manifest_checks)
    first = check_graph(bundle, forms[0]["graph"]["file"], forms[0]["graph"]["sha256"],
                        "forms[0].graph.file")
    state.deployed = open_deployed(first)
    names = list(state.deployed.outputs)
    folder = UntrustedFolder(returned, "--device-outputs", "device folder")
    runs = [_form_run(bundle, folder, i, e, warmup, names, len(state.feeds))
            for i, e in enumerate(forms)]
    if not any(r.row.built for r in runs):
        raise TargetUnmetError(f"no GELU form built on the device ({returned}): " + "; ".join(
            f"{r.row.form}: {shown(r.row.build_error)}" for r in runs))
    state.device_forms = {r.row.form: r for r in runs}
    state.device_format = "trtexec"


@stage_io(reads=("deployed", "device", "device_forms", "feeds", "loaded", "manifest", "options",
                "tolerances"),
          writes=("chosen", "parity"))
def forms_check(state: VerifyState) -> None:
    """Every built form against the reference (run once), the choice, the table."""
    o, rep, dep = state.options, state.report, need(state.deployed, "deployed")
    tol = need(state.tolerances, "tolerances")
    feeds = [feed_for(dep, f) for f in state.feeds]
    reference = model_runner(state.loaded, feeds[0], dep.outputs, o.threads,
                             need(state.device, "device").device, onnx_name="reference-onnx")
    runs: list[FormRun] = list(state.device_forms.values())
    built = [r for r in runs if r.outputs is not None]
    runners = [RecordedRunner(f"{DEVICE_RUNNER}[{r.row.form}]", feeds, r.outputs or [],
                              dtype_metadata(dict(feeds[0]))) for r in built]
    state.progress.step(f"running {reference.name}; judging {len(built)} form(s)")
    try:
        outcome = run_check(CheckJob(reference, runners, feeds, tol))
    except (RuntimeError, ValueError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise BadInputError(f"running MODEL on these inputs failed: {first}") from exc
    verdicts = {}
    for run, runner in zip(built, runners):
        parity = outcome.by_runner[runner.name]
        assert run.outputs_file is not None
        check_shapes(parity, run.outputs_file)
        verdicts[run.row.form] = parity
        run.row.passed = parity.status == "passed"
        errors = [e.max_abs for e in parity.outputs.values()]
        run.row.max_abs = max(errors) if errors else None
        run.row.reason = parity.reason or ""
    version = state.manifest.get("tensorrt", "")
    table = DeviceForms(f"tensorrt {version} (device)", tol.atol, tol.rtol, [r.row for r in runs])
    chosen = state.chosen = choose_device_form(table)
    first_failed = next((verdicts[r.row.form] for r in built if not r.row.passed), None)
    parity = state.parity = rep.parity = (verdicts[chosen.form] if chosen
                                          else first_failed or outcome.verdict)
    if chosen is None and parity.status == "passed":  # passed, but never timed
        raise BadInputError(f"--device-outputs {o.device_outputs}: no times.<round>.json for "
                            "the forms that passed; run_on_device.sh writes them")
    rep.forms = table
    if chosen is not None:
        rep.output = str(state.device_forms[chosen.form].graph)
    _describe(state, table, chosen)


def _describe(state: VerifyState, table: DeviceForms, chosen: DeviceFormRow | None) -> None:
    o, rep, manifest = state.options, state.report, state.manifest
    version = manifest.get("tensorrt", "")
    rep.target = f"tensorrt {version} (device)" if version else "tensorrt (device)"
    rep.gelu_form = f"device choice → {chosen.form}" if chosen else "device choice: none"
    rep.trt = {"status": "device", "reason": "", "tensorrt": version or None,
               "target": manifest.get("target"), "outputs_file": str(o.device_outputs),
               "outputs_format": "trtexec", "times_file": None}
    if chosen is not None and chosen.latency is not None:
        rep.latency[DEVICE_RUNNER] = chosen.latency
    rep.notes.append(Note("trtexec prints values with 6 significant digits: up to 5e-6 "
                          "relative rounding, far below any default rtol", "trtexec-rounding"))
    dropped = sum(r.dropped for r in table.rows)
    if dropped:
        rep.notes.append(Note(f"{dropped} warm-up inference(s) dropped from the forms' times "
                              "(trtexec before 8.6 exports them too)", "warmups-dropped"))
    rep.notes.append(Note(f"bundle of {len(table.rows)} GELU form(s) for "
                          f"{manifest.get('target')} (TensorRT {version}), each judged with "
                          "the bundle's tolerances unless --atol/--rtol", "forms-bundle-read"))
    built = [form for form, run in state.device_forms.items() if run.outputs_file is not None]
    if built:
        from export_gelu.notes import tagged

        returned = UntrustedFolder(Path(o.device_outputs or ""), "--device-outputs",
                                   "device folder")
        rep.notes += tagged("device-tensorrt", device_version_notes(
            rep, Path(built[0]) / "outputs.json", version, returned))


@stage_io(reads=("chosen", "device_forms", "options"), writes=())
def write_chosen(state: VerifyState) -> None:
    """-o BEST.onnx: the chosen form's graph (its weights, when they lie beside it in the
    bundle, in BEST.onnx.data: never under the bundle's file name, which might be taken)."""
    o, rep, chosen = state.options, state.report, state.chosen
    out = Path(need(o.output, "-o"))  # writes_chosen: -o was given
    if chosen is None:
        rep.notes.append(Note(f"-o {o.output} not written: no form was chosen", "no-choice"))
        return
    run = state.device_forms[chosen.form]
    # the graph's external data was held inside the bundle (returned.check_graph); its bytes
    # are read from there again, by the same rule, as they are copied
    if lazy_graph_files(run.graph):  # weights beside it: streamed into OUT.data, as export does
        save_onnx_streaming(load_graph(run.graph), out, external_data=True)
    else:
        with written_file(out) as staged, run.graph.open("rb") as src, staged.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    rep.output = str(out)
    rep.notes.append(Note(f"the chosen form's graph ({chosen.label}) written to {out}",
                          "chosen-written"))


def lazy_graph_files(graph: Path) -> list[Path]:
    """The external-data files `graph` references, each inside its folder (exit 2 otherwise:
    exporter.loading.load.check_external_data)."""
    from export_gelu.exporter.loading.load import check_external_data

    return check_external_data(graph)


def writes_chosen(state: VerifyState) -> bool:
    return bool(state.options.output)
