"""`--gelu auto` / `--compare-forms` with `--bundle DIR`: one graph per GELU form the target
parses, each exported and checked here by the export stages exactly as `--gelu FORM --bundle`
would, then gathered into one bundle whose `run_on_device.sh` times them all on the device
(device/forms_bundle.py); `verify --device-outputs DIR/outputs` chooses."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import onnx

from export_gelu.check.compare_forms import fingerprint
from export_gelu.check.parity import ParityResult
from export_gelu.device.bundle import device_precision
from export_gelu.device.forms_bundle import FormPart, write_forms_bundle
from export_gelu.errors import ExportGeluError
from export_gelu.notes import Note
from export_gelu.options import ExportOptions, FormsOptions
from export_gelu.pipeline.export_command import EXPORT
from export_gelu.pipeline.forms import bundle_forms, form_options, form_state
from export_gelu.pipeline.stage import run_stages, stage_io
from export_gelu.pipeline.state import AnyState, ExportState, FormsState, need
from export_gelu.report.report import Report
from export_gelu.targets import resolve_target
from export_gelu.tolerances import resolve_tolerances


@dataclasses.dataclass
class FormsBundle:
    """What was written: the folder, the forms in it, and the forms left out (and why)."""

    path: Path
    parts: list[FormPart]
    left_out: list[tuple[str, str]]


def _local_parity(parity: ParityResult) -> dict[str, Any]:
    errors = [e.max_abs for e in parity.outputs.values()]
    return {"status": parity.status, "max_abs": max(errors) if errors else None,
            "atol": parity.atol, "rtol": parity.rtol}


def _one_form(state: AnyState, base: ExportOptions, form: str, tmp: Path) -> ExportState:
    """`--gelu FORM --bundle tmp/parts/FORM` on the already loaded model."""
    options = dataclasses.replace(base, gelu=form, output=str(tmp / f"{form}.onnx"),
                                  bundle=str(tmp / "parts" / form), verify=True, iterations=0,
                                  warmup=0, report=None, report_md=None, engine=None,
                                  localize=False)
    sub = form_state(state, options)
    run_stages(EXPORT, sub)
    return sub


def write_device_forms(state: AnyState, base: ExportOptions, bundle_dir: str) -> FormsBundle:
    """Export every form `bundle_forms` lists for `base.target`, check each here, and write
    the forms bundle; identical graphs (keep = erf, often) are one form of the bundle."""
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
            state.progress.step(f"device bundle form {i + 1}/{len(forms)}: {form}")
            try:
                sub = _one_form(state, base, form, tmp)
            except ExportGeluError as exc:
                left_out.append((form, (str(exc).splitlines() or [""])[0]))
                continue
            output = need(sub.output, "output")
            precision = sub.run_precision or precision
            key = fingerprint(onnx.load(str(output), load_external_data=False))
            if key in seen:
                seen[key].same_as.append(form)
                continue
            seen[key] = FormPart(form, tmp / "parts" / form,
                                 local=_local_parity(need(sub.parity, "parity")))
            parts.append(seen[key])
        if not parts:
            raise ExportGeluError("no GELU form could be exported for the device bundle: "
                                  + "; ".join(f"{f}: {why}" for f, why in left_out))
        tol = resolve_tolerances(device_precision(precision), atol=base.atol, rtol=base.rtol)
        out = write_forms_bundle(parts, bundle_dir, atol=tol.atol, rtol=tol.rtol,
                                 left_out=left_out)
    return FormsBundle(out, parts, left_out)


def note_forms_bundle(report: Report, written: FormsBundle, model_path: Path) -> None:
    """Say where the bundle is, what it holds, and the round trip."""
    report.trt["bundle"] = str(written.path)
    labels = [" = ".join([p.form, *p.same_as]) for p in written.parts]
    local = "; ".join(f"{p.form}: parity here {p.local.get('status')}" for p in written.parts)
    report.notes.append(Note(
        f"device bundle of {len(labels)} GELU form(s) ({', '.join(labels)}) written to "
        f"{written.path}/ ({local}): on the TensorRT box run `sh run_on_device.sh` in it, copy "
        f"its outputs folder back, then `export-gelu verify {model_path} --bundle "
        f"{written.path} --device-outputs {written.path}/outputs -o BEST.onnx`",
        "forms-bundle-written"))
    for form, why in written.left_out:
        report.notes.append(Note(f"GELU form {form} is not in the device bundle: {why}",
                                 "forms-bundle-left-out"))


def forms_base_options(o: FormsOptions) -> ExportOptions:
    """`--compare-forms --bundle`: the export options each form's graph is made with."""
    base = form_options(o, o.targets[0], "keep", Path("unused.onnx"))
    return dataclasses.replace(base, atol=o.atol, rtol=o.rtol, device=o.device)


@stage_io(reads=("forms", "loaded", "model_path", "options"), writes=("forms",))
def compare_forms_bundle(state: FormsState) -> None:
    """The `--compare-forms --bundle DIR` stage, after the comparison."""
    o, rep = state.options, state.report
    written = write_device_forms(state, forms_base_options(o), need(o.bundle, "--bundle"))
    before = len(rep.notes)
    note_forms_bundle(rep, written, state.model_path)
    need(state.forms, "forms").notes += [str(n) for n in rep.notes[before:]]
