"""pipeline/device_forms.py's stages (`verify MODEL --bundle DIR --device-outputs DIR/outputs
-o BEST.onnx` for a bundle of GELU forms) on hand-built states: read_forms_run, forms_check,
write_chosen. The bundle is written by device/forms_bundle (through write_device_forms); what
'the device' returns is ONNX Runtime's outputs in trtexec's format and stand-in timings
(tests/trtexec_standin.py)."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import numpy as np
import onnx
import pytest

from export_gelu.check.devices import resolve_device
from export_gelu.check.latency import summarize
from export_gelu.device.choice import DeviceFormRow, DeviceForms, choose_device_form
from export_gelu.device.outputs import read_device_outputs
from export_gelu.exporter.inputs.specs import load_npz
from export_gelu.exporter.loading.load import load_model
from export_gelu.options import FormsOptions
from export_gelu.pipeline.device_forms import FormRun, forms_check, read_forms_run, write_chosen
from export_gelu.pipeline.forms_bundle import forms_base_options, write_device_forms
from export_gelu.pipeline.state import RunState
from export_gelu.tolerances import resolve_tolerances
from tests.onnx_graphs import run_ort
from tests.steps.step_inputs import main_feed, state_for, tiny_program, verify_state
from tests.trtexec_standin import write_outputs, write_times

#: Median GPU ms per form the stand-in device reports: sigmoid fastest, erf slowest.
MEDIAN_MS = {"keep": 1.0, "erf": 1.2, "sigmoid": 0.5}


@pytest.fixture(scope="module")
def forms_bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the model, a forms bundle for trt8.6 with the device's outputs in DIR/outputs)."""
    folder = tmp_path_factory.mktemp("forms")
    program = tiny_program(folder)
    opts = FormsOptions(targets=("trt8.6",), bundle=str(folder / "fb"))
    state = state_for(opts, program, command="compare-forms")
    state.loaded, state.feeds = load_model(program), [main_feed()]
    write_device_forms(state, forms_base_options(opts), str(folder / "fb"))
    bundle = folder / "fb"
    feed = dict(load_npz(bundle / "inputs.npz"))
    for entry in json.loads((bundle / "manifest.json").read_text())["forms"]:
        out = bundle / "outputs" / entry["form"]
        out.mkdir(parents=True, exist_ok=True)
        if entry["form"] not in MEDIAN_MS:  # the plugin: no TensorRT plugin library here
            (out / "build_failed.txt").write_text("[E] [TRT] plugin CustomGeluPluginDynamic "
                                                  "not found\n")
            continue
        graph = onnx.load(str(bundle / entry["graph"]["file"]))
        names = [o.name for o in graph.graph.output]
        write_outputs(dict(zip(names, run_ort(graph, feed, optimize=False))), out / "outputs.json")
        write_times(out / "times.0.json", MEDIAN_MS[entry["form"]], 100, 200.0, entry["form"])
    return program, bundle


def _state(program: Path, bundle: Path, **options: object) -> RunState:
    return verify_state(program, bundle / "forms" / "keep" / "model.onnx", bundle=str(bundle),
                        device_outputs=str(bundle / "outputs"), **options)


def test_read_forms_run_reads_every_forms_outputs_and_times(
        forms_bundle: tuple[Path, Path]) -> None:
    program, bundle = forms_bundle
    state = _state(program, bundle)
    read_forms_run(state)
    runs = state.device_forms
    assert set(runs) == {"keep", "erf", "sigmoid", "plugin"}
    assert runs["keep"].row.same_as == ["tanh"]  # tanh's graph is keep's
    assert not runs["plugin"].row.built
    assert runs["plugin"].row.build_error.startswith("[E] [TRT] plugin")
    for form, ms in MEDIAN_MS.items():
        row = runs[form].row
        assert row.built and row.rounds == 1 and row.latency is not None
        assert row.latency.median_ms == pytest.approx(ms, rel=0.02)
        assert list(runs[form].outputs[0]) == ["output_0"]  # the program's own output name
    assert state.inputs_label == "the bundle's inputs (fb/inputs.npz)"
    assert list(state.feed) == ["x"] and state.manifest["target"] == "trt8.6"
    assert state.deployed.path == bundle / "forms" / "keep" / "model.onnx"
    assert state.device_format == "trtexec"


def _run(bundle: Path, form: str) -> FormRun:
    """One form's device run, as read_forms_run leaves it, made by hand."""
    folder = bundle / "outputs" / form
    outputs, _ = read_device_outputs(folder / "outputs.json")
    row = DeviceFormRow(form, built=True, rounds=1,
                        latency=summarize([MEDIAN_MS[form] / 1e3] * 20, 0, "stand-in"))
    return FormRun(row, bundle / "forms" / form / "model.onnx",
                   outputs=[OrderedDict((n, a.astype(np.float32)) for n, a in outputs[0].items())],
                   outputs_file=folder / "outputs.json")


def _judged(program: Path, bundle: Path, atol: float, **options: object) -> RunState:
    from export_gelu.check.deployed import open_deployed

    state = _state(program, bundle, **options)
    state.loaded = load_model(program)
    state.feeds = [OrderedDict(load_npz(bundle / "inputs.npz"))]
    state.deployed = open_deployed(bundle / "forms" / "keep" / "model.onnx")
    state.manifest = json.loads((bundle / "manifest.json").read_text())
    state.device_forms = {f: _run(bundle, f) for f in MEDIAN_MS}
    state.tolerances = resolve_tolerances("fp32", atol=atol)
    state.device = resolve_device("cpu")
    return state


def test_forms_check_chooses_the_fastest_form_that_passes(
        forms_bundle: tuple[Path, Path]) -> None:
    """At atol 1e-4 only keep (the model's own tanh) passes: it is chosen."""
    program, bundle = forms_bundle
    state = _judged(program, bundle, 1e-4)
    forms_check(state)
    table = state.report.forms
    passed = {r.form: r.passed for r in table.rows}
    assert passed == {"keep": True, "erf": False, "sigmoid": False}
    assert table.chosen is not None and table.chosen.form == "keep"
    assert state.report.gelu_form == "device choice → keep"
    assert state.report.parity.status == "passed"
    assert state.report.output == str(bundle / "forms" / "keep" / "model.onnx")


def test_forms_check_with_a_wide_tolerance_takes_the_fastest(
        forms_bundle: tuple[Path, Path]) -> None:
    program, bundle = forms_bundle
    state = _judged(program, bundle, 0.05)
    forms_check(state)
    assert all(r.passed for r in state.report.forms.rows)
    assert state.report.forms.chosen.form == "sigmoid"


def test_write_chosen_writes_the_chosen_graph(forms_bundle: tuple[Path, Path],
                                              tmp_path: Path) -> None:
    program, bundle = forms_bundle
    state = _state(program, bundle, output=str(tmp_path / "best.onnx"))
    state.device_forms = {f: _run(bundle, f) for f in MEDIAN_MS}
    table = DeviceForms("tensorrt (device)", 1e-4, 1e-3,
                        [r.row for r in state.device_forms.values()])
    for row in table.rows:
        row.passed = row.form == "erf"
    state.chosen = choose_device_form(table)
    assert state.chosen is not None and state.chosen.form == "erf"
    write_chosen(state)
    assert (tmp_path / "best.onnx").read_bytes() == \
        (bundle / "forms" / "erf" / "model.onnx").read_bytes()
    assert state.report.output == str(tmp_path / "best.onnx")
    assert "chosen-written" in [n.code for n in state.report.notes]


def test_write_chosen_without_a_choice_writes_nothing(forms_bundle: tuple[Path, Path],
                                                      tmp_path: Path) -> None:
    program, bundle = forms_bundle
    state = _state(program, bundle, output=str(tmp_path / "best.onnx"))
    state.chosen = choose_device_form(DeviceForms("tensorrt (device)", 1e-4, 1e-3, []))
    assert state.chosen is None
    write_chosen(state)
    assert not (tmp_path / "best.onnx").exists()
    assert [n.code for n in state.report.notes] == ["no-choice"]
