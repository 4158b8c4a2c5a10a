"""steps/device.py (`verify MODEL DEPLOYED --inputs F --device-outputs OUT`): require_model_file,
read_device_run, device_judging, device_check, describe_device_run, bundle_cache_text. The
device's outputs are ONNX Runtime's, written in trtexec's format (tests/trtexec_standin.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from export_gelu.errors import BadInputError
from export_gelu.results.device import DeviceRun
from export_gelu.run import Run
from export_gelu.steps.device import (
    bundle_cache_text,
    describe_device_run,
    device_check,
    device_judging,
    device_latency,
    read_device_run,
    require_model_file,
)
from tests.onnx_graphs import run_ort
from tests.steps.step_inputs import main_feed, source, verify_request
from tests.trtexec_standin import write_outputs


def _request(program: Path, graph: Path, folder: Path, scale: float = 1.0):  # noqa: ANN202
    """The request, with the inputs file and the outputs 'the device' wrote for them (ONNX
    Runtime's, ×scale)."""
    feed = main_feed()
    np.savez(folder / "in.npz", **feed)
    (y,) = run_ort(onnx.load(str(graph)), dict(feed), optimize=False)
    write_outputs({"y": y * np.float32(scale)}, folder / "outputs.json")
    return verify_request(program, graph, inputs_file=str(folder / "in.npz"),
                          device_outputs=str(folder / "outputs.json"), device="cpu")


def test_require_model_file(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="no such file"):
        require_model_file(tmp_path / "gone.pt")


def test_read_device_run_reads_the_inputs_and_the_devices_outputs(
        tiny: tuple[Path, Path], tmp_path: Path) -> None:
    program, graph = tiny
    device_run = read_device_run(_request(program, graph, tmp_path))
    assert device_run.deployed.kind == "onnx" and device_run.deployed.path == graph
    assert device_run.label == "real data from in.npz"
    np.testing.assert_array_equal(device_run.feeds[0]["x"], main_feed()["x"])
    assert device_run.outputs_format == "trtexec" and device_run.times is None
    (out,) = device_run.outputs
    assert list(out) == ["y"] and out["y"].dtype == np.float32 and out["y"].shape == (2, 4, 16)
    assert device_run.module_outputs == {} and device_run.manifest == {}


def test_device_judging_takes_the_graphs_precision_and_tolerances(
        tiny: tuple[Path, Path], tmp_path: Path) -> None:
    program, graph = tiny
    request = _request(program, graph, tmp_path)
    device_run = read_device_run(request)
    judging = device_judging(request.options, device_run.manifest, device_run.deployed)
    assert judging.run_precision == "fp32" and judging.device.device == "cpu"
    assert (judging.tolerances.atol, judging.tolerances.rtol) == (1e-4, 1e-3)
    assert judging.precision_note == device_run.deployed.precision_why


def _judged(program: Path, graph: Path, folder: Path, scale: float):  # noqa: ANN202
    request = _request(program, graph, folder, scale)
    device_run = read_device_run(request)
    judging = device_judging(request.options, device_run.manifest, device_run.deployed)
    return request, device_run, judging


def test_device_check_passes_outputs_that_match_the_model(tiny: tuple[Path, Path],
                                                          tmp_path: Path) -> None:
    program, graph = tiny
    request, device_run, judging = _judged(program, graph, tmp_path, 1.0)
    parity = device_check(source(program), device_run, judging, request.options, Run())
    assert parity.status == "passed", parity.reason
    assert parity.outputs["y"].max_abs < 1e-4
    run = Run()
    assert describe_device_run(device_run, request.options, run) is None  # no trtexec.log
    assert [n.code for n in run.notes] == ["trtexec-rounding"]


def test_device_check_fails_outputs_that_do_not(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    program, graph = tiny
    request, device_run, judging = _judged(program, graph, tmp_path, 1.1)
    parity = device_check(source(program), device_run, judging, request.options, Run())
    assert parity.status == "failed" and parity.outputs["y"].max_abs > 1e-3


def test_device_latency_is_in_ms_per_inference(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    program, graph = tiny
    device_run: DeviceRun = read_device_run(_request(program, graph, tmp_path))
    assert device_run.times is None
    latency = device_latency(([1.0] * 10 + [2.0] * 10, 3))
    assert latency.iterations == 20 and 1.0 <= latency.median_ms <= 2.0


def test_device_quantized_judges_an_int8_graphs_outputs(tiny: tuple[Path, Path],
                                                       tiny_int8: tuple[Path, Path],
                                                       tmp_path: Path) -> None:
    from export_gelu.steps.device import device_quantized

    program, graph = tiny
    (tmp_path / "f").mkdir()
    request = _request(program, graph, tmp_path / "f")
    assert device_quantized(source(program), read_device_run(request), request.options,
                            Run()) is None  # a float graph: the bundle's tolerances judge it
    _, int8 = tiny_int8
    feed = main_feed()
    np.savez(tmp_path / "in.npz", **feed)
    model = onnx.load(str(int8))
    (y,) = run_ort(model, dict(feed), optimize=False)
    write_outputs({model.graph.output[0].name: y}, tmp_path / "outputs.json")
    request = verify_request(program, int8, inputs_file=str(tmp_path / "in.npz"),
                             device_outputs=str(tmp_path / "outputs.json"), device="cpu")
    judged = device_quantized(source(program), read_device_run(request), request.options, Run())
    assert judged is not None and judged.passed is True


def test_bundle_cache_text_reads_only_the_unchanged_cache_inside_the_bundle(
        tmp_path: Path) -> None:
    import hashlib

    text = "TRT-7000-EntropyCalibration2\nx: 3c010a14\n"
    (tmp_path / "forms" / "tanh").mkdir(parents=True)
    cache = tmp_path / "forms" / "tanh" / "calibration.cache"
    cache.write_text(text)
    sha = hashlib.sha256(text.encode()).hexdigest()
    entry = {"file": "forms/tanh/calibration.cache", "sha256": sha}
    assert bundle_cache_text(tmp_path, entry, "forms[1].calibration_cache.file") == text
    cache.write_text(text.replace("3c", "3d"))
    with pytest.raises(BadInputError, match=r"forms\[1\]\.calibration_cache\.file"):
        bundle_cache_text(tmp_path, entry, "forms[1].calibration_cache.file")
    (tmp_path.parent / "outside.cache").write_text(text)
    with pytest.raises(BadInputError):
        bundle_cache_text(tmp_path, {"file": "../outside.cache", "sha256": sha}, "f")
