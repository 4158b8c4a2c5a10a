"""`--gelu auto` / `--compare-forms` with `--bundle DIR`: one graph per GELU form the target
parses, each exported and checked here by the export flow exactly as `--gelu FORM --bundle`
would, then gathered into one bundle whose `run_on_device.sh` times them all on the device
(device/forms_bundle.py); `verify --device-outputs DIR/outputs` chooses."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import onnx

from export_gelu.check.compare_forms import fingerprint
from export_gelu.check.verdict.parity import ParityResult, skipped
from export_gelu.device.binding import device_precision
from export_gelu.device.forms_bundle import FormPart, write_forms_bundle
from export_gelu.errors import ExportGeluError
from export_gelu.exporter.capture.shared_capture import SharedCaptures
from export_gelu.exporter.loading.loaded import LoadedModel
from export_gelu.flows.export import export
from export_gelu.json_value import JsonObject
from export_gelu.notes import Note
from export_gelu.options import ExportOptions, FormsOptions
from export_gelu.results.export import GraphExport
from export_gelu.results.forms import FormsBundle
from export_gelu.run import Run
from export_gelu.steps.forms import bundle_forms, form_options, form_request
from export_gelu.steps.quantize import quant_summary
from export_gelu.targets import resolve_target
from export_gelu.tolerances import resolve_tolerances


def _local_parity(parity: ParityResult) -> JsonObject:
    errors = [e.max_abs for e in parity.outputs.values()]
    return {"status": parity.status, "max_abs": max(errors) if errors else None,
            "atol": parity.atol, "rtol": parity.rtol}


def _one_form(model: Path, loaded: LoadedModel, base: ExportOptions, form: str, tmp: Path,
              run: Run, *, captures: SharedCaptures) -> GraphExport:
    """`--gelu FORM --bundle tmp/parts/FORM` on the already loaded model (all or nothing)."""
    options = dataclasses.replace(base, gelu=form, output=str(tmp / f"{form}.onnx"),
                                  bundle=str(tmp / "parts" / form), verify=True, iterations=0,
                                  warmup=0, report=None, report_md=None, engine=None,
                                  localize=False)
    request = form_request(model, loaded, options, captures)
    with run.transaction():
        result = export(request, run)
    assert isinstance(result, GraphExport)  # (one loaded graph)
    return result


def write_device_forms(model: Path, loaded: LoadedModel, base: ExportOptions, bundle_dir: str,
                       run: Run, *, captures: SharedCaptures) -> FormsBundle:
    """Export every form `bundle_forms` lists for `base.target`, check each here, and write
    the forms bundle; identical graphs (keep = erf, often) are one form of the bundle. The
    comparison's `captures` are reused (a TorchScript model is not captured again)."""
    profile = resolve_target(base.target)[0]
    forms = bundle_forms(profile)
    parts: list[FormPart] = []
    seen: dict[str, FormPart] = {}
    left_out: list[tuple[str, str]] = []
    precision = base.precision or "fp32"  # what the checks here ran at (fp64: a float64 model)
    with tempfile.TemporaryDirectory(prefix="gelu-forms-bundle-") as name:
        tmp = Path(name)
        (tmp / "parts").mkdir()
        for i, form in enumerate(forms):
            run.say(f"device bundle form {i + 1}/{len(forms)}: {form}")
            try:
                made = _one_form(model, loaded, base, form, tmp, run.part(),
                                 captures=captures)
            except ExportGeluError as exc:
                left_out.append((form, (str(exc).splitlines() or [""])[0]))
                continue
            precision = made.inputs.run_precision or precision
            key = fingerprint(onnx.load(str(made.saved.path), load_external_data=False))
            if key in seen:
                seen[key].same_as.append(form)
                continue
            if made.quantization is not None:  # int8/fp8: its verdict here
                local = quant_summary(made.quantization)
                passed = local["passed"]
                local["status"] = ("passed" if passed is True else "failed" if passed is False
                                   else "not judged")
            else:
                local = _local_parity(made.verdict.parity if made.verdict
                                      else skipped("not checked"))
            seen[key] = FormPart(form, tmp / "parts" / form, local=local)
            parts.append(seen[key])
        if not parts:
            raise ExportGeluError("no GELU form could be exported for the device bundle: "
                                  + "; ".join(f"{f}: {why}" for f, why in left_out))
        tol = resolve_tolerances(device_precision(precision), atol=base.atol, rtol=base.rtol)
        out = write_forms_bundle(parts, bundle_dir, atol=tol.atol, rtol=tol.rtol,
                                 left_out=left_out)
    return FormsBundle(out, parts, left_out)


def _checked_as(local: JsonObject) -> str:
    """'parity', or 'int8 verdict' for a quantized form."""
    return f"{local['precision']} verdict" if "precision" in local else "parity"


def forms_bundle_notes(written: FormsBundle, model: Path) -> list[Note]:
    """Where the bundle is, what it holds, the round trip, and the forms left out."""
    labels = [" = ".join([p.form, *p.same_as]) for p in written.parts]
    local = "; ".join(f"{p.form}: {_checked_as(p.local)} here {p.local.get('status')}"
                      for p in written.parts)
    notes = [Note(
        f"device bundle of {len(labels)} GELU form(s) ({', '.join(labels)}) written to "
        f"{written.path}/ ({local}): on the TensorRT box run `sh run_on_device.sh` in it, copy "
        f"its outputs folder back, then `export-gelu verify {model} --bundle "
        f"{written.path} --device-outputs {written.path}/outputs -o BEST.onnx`",
        "forms-bundle-written")]
    for form, why in written.left_out:
        notes.append(Note(f"GELU form {form} is not in the device bundle: {why}",
                          "forms-bundle-left-out"))
    return notes


def forms_base_options(o: FormsOptions) -> ExportOptions:
    """`--compare-forms --bundle`: the export options each form's graph is made with."""
    base = form_options(o, o.targets[0], "keep", Path("unused.onnx"))
    return dataclasses.replace(base, atol=o.atol, rtol=o.rtol, device=o.device)
