"""pipeline/finish.py's stages on hand-built states: bundle (the device bundle of an
export), calibrate (GELU input ranges on real data) and write_report (JSON and Markdown)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import onnx

from export_gelu.notes import Note
from export_gelu.options import ExportOptions
from export_gelu.pipeline.finish import bundle, calibrate, write_report
from tests.steps.step_inputs import (
    export_state,
    main_feed,
    onnx_model,
    state_for,
    with_loaded,
)


def test_bundle_writes_the_export_and_its_reference(tiny: tuple[Path, Path],
                                                   tmp_path: Path) -> None:
    program, graph = tiny
    state = with_loaded(export_state(program, tmp_path, target="trt8.6",
                                     bundle=str(tmp_path / "b")))
    state.output = tmp_path / "out.onnx"
    shutil.copyfile(graph, state.output)
    state.graph = onnx.load(str(state.output))
    bundle(state)
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["target"] == "trt8.6"
    assert (tmp_path / "b" / "run_on_device.sh").is_file()
    assert state.report.trt["bundle"] == str(tmp_path / "b")
    assert "bundle-written" in [n.code for n in state.report.notes]


def test_calibrate_records_ranges_on_the_users_data(tiny: tuple[Path, Path],
                                                    tmp_path: Path) -> None:
    program, _ = tiny
    np.savez(tmp_path / "batch.npz", **main_feed(1))
    opts = ExportOptions(target="ort", output=str(tmp_path / "o.onnx"),
                         inputs_npz=str(tmp_path / "batch.npz"))
    state = with_loaded(state_for(opts, program), main_feed(1))
    state.inputs_label, state.real_inputs = "real data from batch.npz", True  # as `inputs` reads it
    calibrate(state)
    cal = state.report.calibration
    assert cal.inputs == "real data from batch.npz"
    (site,) = cal.sites
    assert site.module == "act" and site.kind == "tanh"


def test_write_report_writes_json_and_markdown_listing_what_was_written(
        tmp_path: Path) -> None:
    state = export_state(onnx_model(tmp_path), tmp_path, report=str(tmp_path / "r.json"),
                         report_md=str(tmp_path / "r.md"))
    state.report.output = str(tmp_path / "out.onnx")
    state.checked = dataclasses.replace(state.checked,
                                        notes=(Note("threads clamped", "threads-clamped"),))
    write_report(state)
    written = json.loads((tmp_path / "r.json").read_text())
    assert written["model"] == str(tmp_path / "hand.onnx") and written["target"] == "ort"
    assert written["written"][:3] == [str(tmp_path / "out.onnx"), str(tmp_path / "r.json"),
                                      str(tmp_path / "r.md")]
    assert {"code": "threads-clamped", "message": "threads clamped"} in written["notes"]
    assert (tmp_path / "r.md").read_text().startswith("#")
