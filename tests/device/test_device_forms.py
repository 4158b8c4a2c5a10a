"""The GELU form chosen on the device: `--gelu auto --bundle DIR` writes one graph per form,
run_on_device.sh builds and times them interleaved (here with tests/trtexec_standin.py, which
runs ONNX Runtime and reports the latencies of a table), and `verify --device-outputs
DIR/outputs` judges every form against PyTorch and picks one, with exit codes 0 / 1 / 2 / 3."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import onnx
import pytest

from export_gelu.check.latency import summarize
from export_gelu.device.choice import DeviceFormRow, DeviceForms, choose_device_form
from export_gelu.device.trtexec_flags import accepted_flags
from export_gelu.report.plots import matplotlib_missing
from tests.conftest import run_cli
from tests.device.conftest import ATOL, TARGET, device_run, sha, varied, verify
from tests.report_schema import validate_report

# -- the bundle ------------------------------------------------------------------------------

def test_bundle_holds_one_graph_per_form_the_target_parses(forms_bundle):
    _model, bundle = forms_bundle
    manifest = json.loads((bundle / "manifest.json").read_text())
    forms = {f["form"]: f for f in manifest["forms"]}
    assert list(forms) == ["keep", "tanh", "sigmoid", "plugin"]
    assert forms["keep"]["same_as"] == ["erf"]  # BERT's own GELU is erf: one graph
    ops = {form: {n.op_type for n in onnx.load(str(bundle / f["graph"]["file"])).graph.node}
           for form, f in forms.items()}
    assert "Erf" in ops["keep"] and "Tanh" in ops["tanh"] and "Sigmoid" in ops["sigmoid"]
    assert "CustomGeluPluginDynamic" in ops["plugin"] and "Erf" not in ops["plugin"]
    assert all(f["local"]["status"] == "passed" for f in forms.values())
    assert manifest["tolerances"]["atol"] == pytest.approx(1e-4)  # the choice's: fp32's
    assert manifest["left_out"] == [] and manifest["rounds"] == 5
    assert not (bundle / "model.onnx").exists()


def test_forms_script_is_posix_sh_with_flags_its_version_parses(forms_bundle):
    _model, bundle = forms_bundle
    script = bundle / "run_on_device.sh"
    assert subprocess.run(["sh", "-n", str(script)]).returncode == 0
    text = script.read_text()
    known = accepted_flags("8.6")
    body = text.split("build_keep() {", 1)[1]
    flags = {w.strip('"').split("=")[0] for w in body.split()
             if w.strip('"').startswith("--") and w.strip('"') != "--"}
    assert flags and flags <= known, flags - known
    assert "--loadEngine" in flags and "--exportTimes" in flags


def test_compare_forms_bundle_needs_one_tensorrt_target(forms_bundle, tmp_path):
    from export_gelu.api import forms_report
    from export_gelu.errors import BadInputError
    from export_gelu.options import FormsOptions

    model, _bundle = forms_bundle
    res = run_cli(model, "--compare-forms", "--target", "onnx", "--bundle", tmp_path / "C")
    assert res.code == 2 and "--bundle is for TensorRT targets" in res.err
    with pytest.raises(BadInputError, match="give one TensorRT --target"):
        forms_report(model, FormsOptions(targets=("onnx", "trt8.6"), bundle=str(tmp_path / "D")))
    assert not (tmp_path / "C").exists() and not (tmp_path / "D").exists()


@pytest.mark.slow  # the bundle itself: test_bundle_holds_one_graph_per_form_the_target_parses
def test_compare_forms_with_bundle_writes_the_forms_bundle_too(forms_bundle, tmp_path):
    model, _bundle = forms_bundle
    res = run_cli(model, "--compare-forms", "--target", "trt8.2", "--bundle", tmp_path / "B",
                  "--iterations", "2")
    assert res.code == 0, res.err + res.out
    assert "device bundle of 3 GELU form(s) (keep = erf, tanh, sigmoid)" in res.out
    manifest = json.loads((tmp_path / "B" / "manifest.json").read_text())
    assert [f["form"] for f in manifest["forms"]] == ["keep", "tanh", "sigmoid"]  # no plugin
    assert manifest["tensorrt"].startswith("8.2")


# -- the device round trip -------------------------------------------------------------------

def test_two_devices_that_disagree_each_get_their_own_form(forms_bundle, tmp_path):
    model, bundle = forms_bundle
    tables = {"a": "keep=1.0,tanh=0.6,sigmoid=0.9,plugin=0.8",
              "b": "keep=1.0,tanh=0.9,sigmoid=0.5,plugin=0.8"}
    chosen = {}
    for device, table in tables.items():
        (tmp_path / device).mkdir()
        ran, done = device_run(bundle, tmp_path / device, STANDIN_TIMES_MS=table)
        assert done.returncode == 0, done.stderr
        out = tmp_path / device / "best.onnx"
        res = verify(model, ran, "--atol", ATOL, "-o", out, "--report",
                     tmp_path / device / "r.json")
        assert res.code == 0, res.err + res.out
        report = json.loads((tmp_path / device / "r.json").read_text())
        validate_report(report)
        rows = {r["form"]: r for r in report["forms"]["rows"]}
        chosen[device] = report["forms"]["chosen"]
        assert rows[chosen[device]]["chosen"] and all(r["passed"] for r in rows.values())
        assert sha(out) == sha(ran / "forms" / chosen[device] / "model.onnx")
        assert rows["keep"]["median_ms"] == pytest.approx(1.0, rel=0.02)
        assert rows["tanh"]["rounds"] == 2 and rows["tanh"]["warmups_dropped"] > 0
    assert chosen == {"a": "tanh", "b": "sigmoid"}


def test_device_without_the_plugin_chooses_among_the_others(forms_bundle, tmp_path):
    model, bundle = forms_bundle
    ran, done = device_run(bundle, tmp_path, STANDIN_NO_PLUGIN="1",
                           STANDIN_TIMES_MS="keep=1.0,tanh=0.7,sigmoid=0.9,plugin=0.3")
    assert done.returncode == 0, done.stderr  # a form that does not build is not fatal
    assert "form plugin did not build" in done.stderr
    order = [ln.rsplit(" ", 1)[1] for ln in done.stdout.splitlines() if ": round " in ln]
    assert order == ["keep", "tanh", "sigmoid", "tanh", "sigmoid", "keep"]  # each round turns
    failed = (ran / "outputs" / "plugin" / "build_failed.txt").read_text()
    assert "getPluginCreator could not find plugin: CustomGeluPluginDynamic" in failed
    res = verify(model, ran, "--atol", ATOL, "--report", tmp_path / "r.json", "--report-md",
                 tmp_path / "r.md")
    assert res.code == 0, res.err + res.out
    forms = json.loads((tmp_path / "r.json").read_text())["forms"]
    markdown = (tmp_path / "r.md").read_text()
    assert "## GELU forms on the device" in markdown and "| tanh | yes |" in markdown
    assert "| plugin | no: " in markdown
    if matplotlib_missing() is None:
        assert (tmp_path / "r.device-forms.png").stat().st_size > 0
        assert "r.device-forms.png" in markdown
    plugin = next(r for r in forms["rows"] if r["form"] == "plugin")
    assert plugin["built"] is False and plugin["chosen"] is False
    assert "getPluginCreator" in plugin["build_error"]
    assert forms["chosen"] == "tanh"
    assert "not built: " in res.out


# -- the choice, on device outputs made by the stand-in's writers -----------------------------

def test_a_form_failing_parity_on_the_device_is_not_chosen_even_when_fastest(
        forms_bundle, device_outputs, tmp_path):
    model, _bundle = forms_bundle
    ran = varied(device_outputs, tmp_path, {"keep": 1.0, "tanh": 0.4, "sigmoid": 0.9,
                                            "plugin": 0.6}, offset={"tanh": 0.5})
    res = verify(model, ran, "--atol", ATOL, "--report", tmp_path / "r.json")
    assert res.code == 0, res.err + res.out
    forms = json.loads((tmp_path / "r.json").read_text())["forms"]
    tanh = next(r for r in forms["rows"] if r["form"] == "tanh")
    assert tanh["passed"] is False and tanh["max_abs"] == pytest.approx(0.5, abs=1e-3)
    assert forms["chosen"] == "plugin"
    assert "faster but failed parity on the device: tanh" in forms["choice"]


def test_forms_within_noise_of_erf_keep_the_exact_form(forms_bundle, device_outputs, tmp_path):
    model, _bundle = forms_bundle
    ran = varied(device_outputs, tmp_path, {"keep": 1.0, "tanh": 0.99, "sigmoid": 0.995,
                                            "plugin": 0.985})
    res = verify(model, ran, "--atol", ATOL, "--report", tmp_path / "r.json")
    assert res.code == 0, res.err + res.out
    forms = json.loads((tmp_path / "r.json").read_text())["forms"]
    assert forms["chosen"] == "keep"
    assert "not faster beyond noise" in forms["choice"]


def test_no_form_passing_exits_1_with_the_table(forms_bundle, device_outputs, tmp_path):
    model, _bundle = forms_bundle
    off = {f: 1.0 for f in ("keep", "tanh", "sigmoid", "plugin")}
    ran = varied(device_outputs, tmp_path, {f: 1.0 for f in off}, offset=off)
    res = verify(model, ran, "-o", tmp_path / "best.onnx")
    assert res.code == 1, res.err + res.out
    assert "GELU forms on the device" in res.out and "FAILED" in res.out
    assert "device choice: none" in res.out
    assert not (tmp_path / "best.onnx").exists()


def test_misplaced_device_outputs_exit_2(forms_bundle, device_outputs, tmp_path):
    model, _bundle = forms_bundle
    res = run_cli("verify", model, "--bundle", device_outputs, "--device-outputs",
                  device_outputs / "outputs" / "keep" / "outputs.json")
    assert res.code == 2 and "holds one graph per GELU form" in res.err
    res = run_cli("verify", model, "--bundle", device_outputs, "--device-outputs",
                  device_outputs / "outputs" / "keep" / "outputs.json", "-o", tmp_path / "x.onnx")
    assert res.code == 2 and "-o writes the GELU form the device chose" in res.err
    times = device_outputs / "outputs" / "keep" / "times.1.json"
    for flags, message in ((["--localize"], "has no marked graph"),
                           (["--device-times", str(times)], "drop --device-times")):
        res = verify(model, device_outputs, *flags)
        assert res.code == 2 and message in res.err, res.err


# -- the rule, on its own --------------------------------------------------------------------

def _row(form: str, median: float, jitter: float, *, passed: bool = True,
         same_as: tuple[str, ...] = ()) -> DeviceFormRow:
    rng = np.random.default_rng(len(form))
    samples = median * (1 + rng.uniform(-jitter, jitter, 200))
    return DeviceFormRow(form, list(same_as), built=True, passed=passed, max_abs=0.0,
                         latency=summarize(list(samples / 1e3), 0))


def test_the_rule_erf_unless_beyond_noise():
    tie = DeviceForms("t", 1e-4, 1e-3, [_row("keep", 1.0, 0.01, same_as=("erf",)),
                                        _row("tanh", 0.98, 0.01)])
    assert choose_device_form(tie) is tie.rows[0]  # 2% faster: inside the 2.5% noise floor
    clear = DeviceForms("t", 1e-4, 1e-3, [_row("keep", 1.0, 0.01, same_as=("erf",)),
                                          _row("tanh", 0.9, 0.01)])
    assert choose_device_form(clear) is clear.rows[1]
    none = DeviceForms("t", 1e-4, 1e-3, [_row("tanh", 0.9, 0.01, passed=False)])
    assert choose_device_form(none) is None and "none" in none.choice


def test_a_new_bundle_replaces_the_forms_bundle_and_its_device_results(forms_bundle,
                                                                       device_outputs, tmp_path):
    model, _bundle = forms_bundle
    old = tmp_path / "B"
    shutil.copytree(device_outputs, old)
    (old / "mine.txt").write_text("kept")
    res = run_cli(model, "--target", TARGET, "--bundle", old, "-o", tmp_path / "one.onnx",
                  "--no-verify", "--iterations", "0")
    assert res.code == 0, res.err + res.out
    assert (old / "model.onnx").is_file() and (old / "mine.txt").read_text() == "kept"
    assert not (old / "forms").exists() and not (old / "outputs").exists()


def test_chosen_form_with_external_weights_is_written_beside_o_under_its_own_name(
        forms_bundle, device_outputs, tmp_path):
    """-o BEST.onnx of a form whose weights lie in a .data file in the bundle: BEST.onnx
    references BEST.onnx.data (an existing file named like the bundle's is left alone), and
    the written graph is the chosen one."""
    model, _bundle = forms_bundle
    ran = varied(device_outputs, tmp_path, {"keep": 1.0, "tanh": 0.5, "sigmoid": 0.9,
                                            "plugin": 0.8})
    graph = ran / "forms" / "tanh" / "model.onnx"
    proto = onnx.load(str(graph))
    onnx.save(onnx.load(str(graph)), str(graph), save_as_external_data=True,
              location="model.onnx.data", size_threshold=0)
    manifest_path = ran / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    entry = next(f for f in manifest["forms"] if f["form"] == "tanh")
    entry["graph"]["sha256"] = sha(graph)
    entry["graph"]["external_data"] = ["forms/tanh/model.onnx.data"]
    manifest["files"] = sorted({*manifest["files"], "forms/tanh/model.onnx.data"})
    manifest_path.write_text(json.dumps(manifest, indent=2))
    (tmp_path / "model.onnx.data").write_bytes(b"the user's own file")
    res = verify(model, ran, "--atol", ATOL, "-o", tmp_path / "best.onnx")
    assert res.code == 0, res.err + res.out
    assert "written to" in res.out and "(tanh)" in res.out
    assert (tmp_path / "model.onnx.data").read_bytes() == b"the user's own file"
    written = onnx.load(str(tmp_path / "best.onnx"))  # its weights read from best.onnx.data
    assert (tmp_path / "best.onnx.data").is_file()
    assert [n.op_type for n in written.graph.node] == [n.op_type for n in proto.graph.node]
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in written.graph.initializer}
    for init in proto.graph.initializer:
        np.testing.assert_array_equal(inits[init.name], onnx.numpy_helper.to_array(init))
