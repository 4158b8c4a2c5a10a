"""pipeline/device_stages.py's stages (`verify MODEL DEPLOYED --inputs F --device-outputs
OUT`) on hand-built states: plan_device_verify, read_device_run, device_inputs, device_check.
The device's outputs are ONNX Runtime's, written in trtexec's format
(tests/trtexec_standin.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from export_gelu.check.deployed import open_deployed
from export_gelu.check.devices import resolve_device
from export_gelu.exporter.loading.load import load_model
from export_gelu.pipeline.device_stages import (
    device_check,
    device_inputs,
    plan_device_verify,
    read_device_run,
)
from export_gelu.pipeline.state import RunState
from export_gelu.tolerances import resolve_tolerances
from tests.onnx_graphs import run_ort
from tests.steps.step_inputs import (
    main_feed,
    verify_state,
)
from tests.trtexec_standin import write_outputs


def _device_run(graph: Path, folder: Path, scale: float = 1.0) -> tuple[Path, Path]:
    """The inputs file and the outputs 'the device' wrote for them (ONNX Runtime's, ×scale)."""
    import onnx

    feed = main_feed()
    np.savez(folder / "in.npz", **feed)
    (y,) = run_ort(onnx.load(str(graph)), dict(feed), optimize=False)
    write_outputs({"y": y * np.float32(scale)}, folder / "outputs.json")
    return folder / "in.npz", folder / "outputs.json"


def _state(program: Path, graph: Path, folder: Path, scale: float = 1.0) -> RunState:
    inputs, outputs = _device_run(graph, folder, scale)
    return verify_state(program, graph, inputs_file=str(inputs), device_outputs=str(outputs))


def test_plan_device_verify_starts_the_report(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    program, graph = tiny
    state = _state(program, graph, tmp_path)
    plan_device_verify(state)
    rep = state.report
    assert (rep.command, rep.target, rep.model) == ("verify", "tensorrt (device)", str(program))


def test_read_device_run_reads_the_inputs_and_the_devices_outputs(
        tiny: tuple[Path, Path], tmp_path: Path) -> None:
    program, graph = tiny
    state = _state(program, graph, tmp_path)
    read_device_run(state)
    assert state.deployed.kind == "onnx" and state.deployed.path == graph
    assert state.inputs_label == "real data from in.npz"
    np.testing.assert_array_equal(state.feeds[0]["x"], main_feed()["x"])
    assert state.device_format == "trtexec" and state.device_times is None
    (out,) = state.device_outputs
    assert list(out) == ["y"] and out["y"].dtype == np.float32 and out["y"].shape == (2, 4, 16)
    assert state.device_module_outputs == {} and state.manifest == {}


def test_device_inputs_takes_the_graphs_precision_and_tolerances(
        tiny: tuple[Path, Path], tmp_path: Path) -> None:
    program, graph = tiny
    state = _state(program, graph, tmp_path)
    state.deployed = open_deployed(graph)
    state.inputs_label = "real data from in.npz"
    device_inputs(state)
    assert state.run_precision == "fp32"
    assert (state.tolerances.atol, state.tolerances.rtol) == (1e-4, 1e-3)
    rep = state.report
    assert (rep.output, rep.inputs, rep.precision) == (str(graph), state.inputs_label, "fp32")
    assert rep.precision_note == state.deployed.precision_why


def _checked(program: Path, graph: Path, folder: Path, scale: float) -> RunState:
    """A state read as read_device_run and device_inputs would leave it, set by hand."""
    from export_gelu.device.outputs import read_device_outputs

    state = _state(program, graph, folder, scale)
    state.deployed = open_deployed(graph)
    state.loaded = load_model(program)
    state.feeds = [main_feed()]
    state.device_outputs, state.device_format = read_device_outputs(folder / "outputs.json")
    state.tolerances = resolve_tolerances("fp32")
    state.device = resolve_device("cpu")
    return state


def test_device_check_passes_outputs_that_match_the_model(tiny: tuple[Path, Path],
                                                          tmp_path: Path) -> None:
    program, graph = tiny
    state = _checked(program, graph, tmp_path, 1.0)
    device_check(state)
    rep = state.report
    assert rep.parity.status == "passed", rep.parity.reason
    assert rep.parity.outputs["y"].max_abs < 1e-4
    assert rep.trt["status"] == "device" and rep.trt["outputs_format"] == "trtexec"
    assert "trtexec-rounding" in [n.code for n in rep.notes]


def test_device_check_fails_outputs_that_do_not(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    program, graph = tiny
    state = _checked(program, graph, tmp_path, 1.1)
    device_check(state)
    assert state.report.parity.status == "failed"
    assert state.report.parity.outputs["y"].max_abs > 1e-3 and state.report.exit_code == 1
