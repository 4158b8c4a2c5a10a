"""steps/device_forms.py (`verify MODEL --bundle DIR --device-outputs DIR/outputs -o BEST.onnx`
for a bundle of GELU forms): read_forms_run, forms_check, describe_forms_run, write_chosen.
The bundle is written by flows/forms_bundle.py; what 'the device' returns is ONNX Runtime's
outputs in trtexec's format and stand-in timings (tests/trtexec_standin.py)."""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict
from pathlib import Path

import numpy as np
import onnx
import pytest

from export_gelu.check.latency import summarize
from export_gelu.device.choice import DeviceFormRow, DeviceForms, FormRun, choose_device_form
from export_gelu.device.outputs import read_device_outputs
from export_gelu.exporter.capture.shared_capture import SharedCaptures
from export_gelu.exporter.inputs.specs import load_npz
from export_gelu.exporter.loading.load import load_model
from export_gelu.flows.forms_bundle import forms_base_options, write_device_forms
from export_gelu.options import FormsOptions
from export_gelu.results.device import FormsRun
from export_gelu.run import Run
from export_gelu.steps.device import device_judging
from export_gelu.steps.device_forms import (
    describe_forms_run,
    forms_check,
    read_forms_run,
    write_chosen,
)
from tests.onnx_graphs import run_ort
from tests.steps.step_inputs import source, tiny_program, verify_request
from tests.trtexec_standin import write_outputs, write_times

#: Median GPU ms per form the stand-in device reports: sigmoid fastest, erf slowest.
MEDIAN_MS = {"keep": 1.0, "erf": 1.2, "sigmoid": 0.5}


@pytest.fixture(scope="module")
def forms_bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the model, a forms bundle for trt8.6 with the device's outputs in DIR/outputs)."""
    folder = tmp_path_factory.mktemp("forms")
    program = tiny_program(folder)
    opts = FormsOptions(targets=("trt8.6",), bundle=str(folder / "fb"))
    write_device_forms(program, load_model(program), forms_base_options(opts),
                       str(folder / "fb"), Run(), captures=SharedCaptures())
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


def _request(program: Path, bundle: Path, **options: object):  # noqa: ANN202
    return verify_request(program, bundle / "forms" / "keep" / "model.onnx", bundle=str(bundle),
                          device_outputs=str(bundle / "outputs"), device="cpu", **options)


def test_read_forms_run_reads_every_forms_outputs_and_times(
        forms_bundle: tuple[Path, Path]) -> None:
    program, bundle = forms_bundle
    forms_run = read_forms_run(_request(program, bundle))
    runs = forms_run.forms
    assert set(runs) == {"keep", "erf", "sigmoid", "plugin"}
    assert runs["keep"].row.same_as == ["tanh"]  # tanh's graph is keep's
    assert not runs["plugin"].row.built
    assert runs["plugin"].row.build_error.startswith("[E] [TRT] plugin")
    for form, ms in MEDIAN_MS.items():
        row = runs[form].row
        assert row.built and row.rounds == 1 and row.latency is not None
        assert row.latency.median_ms == pytest.approx(ms, rel=0.02)
        assert list(runs[form].outputs[0]) == ["output_0"]  # the program's own output name
    assert forms_run.label == "the bundle's inputs (fb/inputs.npz)"
    assert list(forms_run.feeds[0]) == ["x"] and forms_run.manifest["target"] == "trt8.6"
    assert forms_run.deployed.path == bundle / "forms" / "keep" / "model.onnx"


def _run(bundle: Path, form: str) -> FormRun:
    """One form's device run, as read_forms_run leaves it, made by hand."""
    folder = bundle / "outputs" / form
    outputs, _ = read_device_outputs(folder / "outputs.json")
    row = DeviceFormRow(form, built=True, rounds=1,
                        latency=summarize([MEDIAN_MS[form] / 1e3] * 20, 0, "stand-in"))
    return FormRun(row, bundle / "forms" / form / "model.onnx",
                   outputs=[OrderedDict((n, a.astype(np.float32)) for n, a in outputs[0].items())],
                   outputs_file=folder / "outputs.json")


def _judge(program: Path, bundle: Path, atol: float):  # noqa: ANN202
    request = _request(program, bundle, atol=atol)
    forms_run = dataclasses.replace(read_forms_run(request),
                                    forms={f: _run(bundle, f) for f in MEDIAN_MS})
    judging = device_judging(request.options, forms_run.manifest, forms_run.deployed)
    return forms_run, forms_check(source(program), forms_run, judging, request.options, Run())


def test_forms_check_chooses_the_fastest_form_that_passes(
        forms_bundle: tuple[Path, Path]) -> None:
    """At atol 1e-4 only keep (the model's own tanh) passes: it is chosen."""
    program, bundle = forms_bundle
    forms_run, choice = _judge(program, bundle, 1e-4)
    passed = {r.form: r.passed for r in choice.table.rows}
    assert passed == {"keep": True, "erf": False, "sigmoid": False}
    assert choice.chosen is not None and choice.chosen.form == "keep"
    assert choice.parity.status == "passed"
    run = Run()
    describe_forms_run(forms_run, choice.table, run)
    assert [n.code for n in run.notes] == ["trtexec-rounding", "forms-bundle-read"]


def test_forms_check_with_a_wide_tolerance_takes_the_fastest(
        forms_bundle: tuple[Path, Path]) -> None:
    program, bundle = forms_bundle
    _forms_run, choice = _judge(program, bundle, 0.05)
    assert all(r.passed for r in choice.table.rows)
    assert choice.chosen is not None and choice.chosen.form == "sigmoid"


def _forms_run(bundle: Path) -> FormsRun:
    first = bundle / "forms" / "keep" / "model.onnx"
    from export_gelu.check.runners.deployed import open_deployed

    return FormsRun({}, open_deployed(first), (), "", {f: _run(bundle, f) for f in MEDIAN_MS})


def test_write_chosen_writes_the_chosen_graph(forms_bundle: tuple[Path, Path],
                                              tmp_path: Path) -> None:
    _program, bundle = forms_bundle
    forms_run = _forms_run(bundle)
    table = DeviceForms("tensorrt (device)", 1e-4, 1e-3, [r.row for r in forms_run.forms.values()])
    for row in table.rows:
        row.passed = row.form == "erf"
    chosen = choose_device_form(table)
    assert chosen is not None and chosen.form == "erf"
    run = Run()
    written = write_chosen(forms_run, chosen, str(tmp_path / "best.onnx"), run)
    assert written == tmp_path / "best.onnx"
    assert written.read_bytes() == (bundle / "forms" / "erf" / "model.onnx").read_bytes()
    assert [n.code for n in run.notes] == ["chosen-written"]


def test_write_chosen_without_a_choice_writes_nothing(forms_bundle: tuple[Path, Path],
                                                      tmp_path: Path) -> None:
    _program, bundle = forms_bundle
    run = Run()
    assert write_chosen(_forms_run(bundle), None, str(tmp_path / "best.onnx"), run) is None
    assert not (tmp_path / "best.onnx").exists()
    assert [n.code for n in run.notes] == ["no-choice"]
