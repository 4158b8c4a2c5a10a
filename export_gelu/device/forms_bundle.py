"""A device bundle holding one graph per GELU form (`--gelu auto` / `--compare-forms` with
`--bundle DIR`): the device builds and times every form, interleaved, and
`verify --device-outputs DIR/outputs` judges each and picks one (docs/device-verification.md).

It is assembled from single-form bundles (device/bundle.py), one per form, all made from the
same loaded model and feed: their inputs and reference are one and the same, so DIR holds them
once, and each form's graph under `forms/<form>/`. What the device writes goes under
`outputs/<form>/`: `outputs.json` (the build run's outputs), `times.<round>.json` (one
`--exportTimes` file per timing round), `trtexec.log`, `model.plan`, and `build_failed.txt`
(trtexec's last lines) for a form it could not build.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from export_gelu.atomic import staging_dir
from export_gelu.device import bundle_layout as db
from export_gelu.device import forms_script as fs
from export_gelu.device.bundle_place import replace_dir
from export_gelu.json_value import JsonObject

#: Where each form's graph goes, and where the device writes its results (one folder per form).
FORMS_DIR = "forms"
OUTPUTS_DIR = "outputs"
#: The files the single-form bundles share (identical in each): taken from the first.
SHARED_FILES = ("inputs.npz", "inputs.json", "reference_outputs.json")


@dataclass
class FormPart:
    """One form's single-form bundle, and what its check here said."""

    form: str
    bundle: Path
    same_as: list[str] = field(default_factory=list)  # forms that gave the identical graph
    local: JsonObject = field(default_factory=dict)  # parity here: status, max_abs, atol


def _shared_fingerprint(manifest: dict[str, Any]) -> list[Any]:
    return [manifest.get("inputs"), manifest.get("outputs"), manifest.get("profile"),
            manifest.get("tensorrt"), manifest.get("precision")]


def write_forms_bundle(parts: Sequence[FormPart], out_dir: str | Path, *, atol: float,
                       rtol: float, left_out: Sequence[tuple[str, str]] = ()) -> Path:
    """Write the forms bundle of `parts` into `out_dir` (staged, then swapped into place).
    `atol`/`rtol`: what verify judges every form's device outputs with (the choice's);
    `left_out`: (form, why) of the forms that could not be exported here."""
    from export_gelu.version import __version__

    if not parts:
        raise ValueError("a forms bundle needs at least one form")
    out = db.check_bundle_dir(out_dir)
    real = Path(os.path.realpath(out))
    manifests = [db.read_manifest(p.bundle) for p in parts]
    first = manifests[0]
    for part, m in zip(parts[1:], manifests[1:]):
        if _shared_fingerprint(m) != _shared_fingerprint(first):
            raise ValueError(f"form {part.form}: its bundle's inputs or outputs differ from "
                             f"{parts[0].form}'s")
    with staging_dir(real) as tmp:
        stage = tmp / "bundle"
        shutil.copytree(parts[0].bundle / db.INPUTS_DIR, stage / db.INPUTS_DIR)
        for name in SHARED_FILES:
            shutil.copyfile(parts[0].bundle / name, stage / name)
        rows = []
        for part, m in zip(parts, manifests):
            rows.append(_place_form(part, m, stage))
        (stage / OUTPUTS_DIR).mkdir()
        trt_version, target = first["tensorrt"], first["target"]
        plugin = any(r["graph"]["gelu_plugin"] for r in rows)
        script = fs.forms_script(trt_version, target, first["precision"],
                                 [(r["form"], r["trtexec"]["build"], r["trtexec"]["time"])
                                  for r in rows], tool_version=__version__, has_plugin=plugin)
        (stage / "run_on_device.sh").write_text(script)
        os.chmod(stage / "run_on_device.sh", 0o755)
        (stage / "README.txt").write_text(fs.forms_readme(
            target, trt_version, first["model"]["file"],
            [r["form"] for r in rows]))
        manifest = {key: first[key] for key in ("format", "bundle_version", "model", "target",
                                                "tensorrt", "precision", "inputs", "outputs",
                                                "profile", "reference")}
        manifest["tool"] = f"export-gelu {__version__}"
        manifest["tolerances"] = {"atol": atol, "rtol": rtol}
        manifest["forms"] = rows
        manifest["left_out"] = [{"form": f, "why": why} for f, why in left_out]
        manifest["rounds"] = fs.ROUNDS
        manifest["trtexec"] = {"warmup_ms": first["trtexec"]["warmup_ms"],
                               "iterations": first["trtexec"]["iterations"],
                               "flags_from": first["trtexec"]["flags_from"]}
        manifest["outputs_dir"] = OUTPUTS_DIR
        manifest["files"] = sorted([*db.entries_under(stage), db.MANIFEST])
        manifest["device_files"] = [OUTPUTS_DIR]
        (stage / db.MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        replace_dir(stage, real, tmp)
    return out


def _place_form(part: FormPart, manifest: dict[str, Any], stage: Path) -> dict[str, Any]:
    """Copy one form's graph (and its external data) to forms/<form>/; its manifest row."""
    folder = stage / FORMS_DIR / part.form
    folder.mkdir(parents=True)
    graph = manifest["graph"]
    for name in [db.GRAPH, *graph.get("external_data", [])]:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(part.bundle / name, folder / name)
    rel = f"{FORMS_DIR}/{part.form}/{db.GRAPH}"
    build, time = fs.form_trtexec_args(manifest["trtexec"]["args"], part.form, rel,
                                       manifest["tensorrt"])
    return {"form": part.form, "same_as": list(part.same_as),
            "graph": {"file": rel, "sha256": graph["sha256"],
                      "external_data": [f"{FORMS_DIR}/{part.form}/{e}"
                                        for e in graph.get("external_data", [])],
                      "opset": graph.get("opset"), "gelu_plugin": graph.get("gelu_plugin")},
            "tolerances_here": manifest.get("tolerances"), "local": dict(part.local),
            "outputs": f"{OUTPUTS_DIR}/{part.form}",
            "trtexec": {"build": build, "time": time}}


def is_forms_bundle(manifest: dict[str, Any]) -> bool:
    """Whether a bundle's manifest is a forms bundle's (one graph per GELU form)."""
    return isinstance(manifest.get("forms"), list)
