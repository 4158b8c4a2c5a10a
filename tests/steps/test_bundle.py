"""steps/bundle.py: the device bundle of an export's written graph (export_bundle_job, then
write_device_bundle): graph, inputs, the reference's outputs, run_on_device.sh, a note."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from export_gelu.run import Run
from export_gelu.steps.bundle import export_bundle_job, write_device_bundle
from tests.steps.step_inputs import export_inputs_of, export_request, saved_graph


def test_an_exports_bundle_holds_the_graph_and_its_reference(tiny: tuple[Path, Path],
                                                             tmp_path: Path) -> None:
    program, graph = tiny
    request = export_request(program, tmp_path, target="trt8.6", bundle=str(tmp_path / "b"))
    shutil.copyfile(graph, tmp_path / "out.onnx")
    run = Run()
    job = export_bundle_job(program, saved_graph(request, tmp_path / "out.onnx"),
                            export_inputs_of(request), None, request.options, run)
    assert job.parity is not None and job.parity.reason == "--no-verify"  # runs the reference
    assert (job.tolerances.atol, job.precision) == (1e-4, "fp32")
    out = write_device_bundle(job, str(tmp_path / "b"), run)
    assert out == tmp_path / "b"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["target"] == "trt8.6"
    assert (out / "run_on_device.sh").is_file()
    assert [n.code for n in run.notes] == ["bundle-written"]
