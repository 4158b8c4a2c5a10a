"""One options record per command, checked in one place (export_gelu/options.py): the CLI and
the Python API refuse the same bad option with the same message, before any work, and the
report records the options so they can be read back."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from export_gelu import compare_forms, export, verify
from export_gelu.errors import BadInputError, TargetUnmetError
from export_gelu.options import ExportOptions, FormsOptions, VerifyOptions, validate
from tests.conftest import ROOT, run_cli
from tests.onnx_graphs import hand_graph

#: (CLI flags, the same as API keywords, exit code, message) for export; the model file does
#: not exist: options are refused before the model is looked at.
EXPORT_CASES = [
    (["--threads", "0"], {"threads": 0}, 2, "--threads must be at least 1"),
    (["--warmup", "-1"], {"warmup": -1}, 2, "--iterations and --warmup cannot be negative"),
    (["--atol", "nan"], {"atol": float("nan")}, 2,
     "--atol nan: a tolerance must be a finite number >= 0"),
    (["--rtol", "-1"], {"rtol": -1.0}, 2, "--rtol -1.0: a tolerance must be a finite number >= 0"),
    (["--opset", "5", "--target", "onnx"], {"opset": 5, "target": "onnx"}, 2,
     "--opset 5: ONNX opsets that exporters emit start at 7"),
    (["--opset", "30", "--target", "trt8.6"], {"opset": 30, "target": "trt8.6"}, 3,
     "--opset 30 is above trt8.6's ceiling 17"),
    (["--precision", "bf16", "--target", "trt8.6"], {"precision": "bf16", "target": "trt8.6"}, 3,
     "trt8.6 does not take bf16"),
    (["--dynamic", "batch"], {"dynamic": ["batch"]}, 2, "--dynamic 'batch': expected"),
    (["--output-names", "a,a"], {"output_names": "a,a"}, 2,
     "--output-names 'a,a': a name is given twice"),
]


def _raised(fn, *args, **kwargs) -> tuple[int, str]:
    with pytest.raises((BadInputError, TargetUnmetError)) as info:
        fn(*args, **kwargs)
    return info.value.exit_code, str(info.value)


@pytest.mark.parametrize("flags, keywords, code, message", EXPORT_CASES,
                         ids=[" ".join(c[0]) for c in EXPORT_CASES])
def test_cli_api_and_validate_refuse_an_export_option_alike(tmp_path, flags, keywords, code,
                                                           message):
    missing = tmp_path / "no-such-model.pt"  # never opened: the options are refused first
    res = run_cli(missing, *flags)
    assert res.code == code and res.out == ""
    assert res.err.startswith(f"export-gelu: error: {message}"), res.err
    by_api = _raised(export, missing, **keywords)
    by_options = _raised(export, missing, options=ExportOptions(**keywords))
    by_validate = _raised(validate, ExportOptions(**keywords))
    assert by_api == by_options == by_validate
    assert by_api[0] == code and by_api[1].startswith(message)
    assert res.err.strip() == f"export-gelu: error: {by_api[1]}"


@pytest.mark.parametrize("flags, keywords, message", [
    (["--threads", "0"], {"threads": 0}, "--threads must be at least 1"),
    (["--iterations", "-2"], {"iterations": -2}, "--iterations and --warmup must not be negative"),
    (["--atol", "inf"], {"atol": float("inf")}, "--atol must be a finite number ≥ 0"),
])
def test_cli_api_and_validate_refuse_a_verify_option_alike(tmp_path, flags, keywords, message):
    model, deployed = tmp_path / "m.pt", tmp_path / "d.onnx"  # neither exists
    res = run_cli("verify", model, deployed, *flags)
    assert (res.code, res.err) == (2, f"export-gelu: error: {message}\n")
    assert _raised(verify, model, deployed, **keywords) == (2, message)
    assert _raised(validate, VerifyOptions(**keywords)) == (2, message)


def test_device_outputs_verify_gets_the_same_checks(tmp_path):
    """`verify --device-outputs` judges recorded outputs; its tolerances are checked alike."""
    res = run_cli("verify", tmp_path / "m.pt", "--bundle", tmp_path, "--device-outputs",
                  tmp_path / "outputs.json", "--atol", "nan")
    assert (res.code, res.err) == (2, "export-gelu: error: --atol must be a finite number ≥ 0\n")


def test_cli_api_and_validate_refuse_a_compare_forms_option_alike(tmp_path):
    message = "--iterations must be at least 1 to compare forms"
    res = run_cli(tmp_path / "m.pt", "--compare-forms", "--iterations", "0")
    assert (res.code, res.err) == (2, f"export-gelu: error: {message}\n")
    assert _raised(compare_forms, tmp_path / "m.pt", iterations=0) == (2, message)
    assert _raised(validate, FormsOptions(iterations=0)) == (2, message)
    assert _raised(validate, FormsOptions(forms=("keep", "plugin")))[1] == \
        "forms plugin: compare takes keep, erf, tanh, sigmoid"


def test_each_refusal_is_written_once():
    """The checks live in options.py only: no command keeps its own copy."""
    package = ROOT / "export_gelu"
    phrases = ["--threads must be", "--iterations must be", "cannot be negative",
               "must not be negative", "a tolerance must be", "must be a finite number",
               "does not take {", "emit start at", "to compare forms", "compare takes"]
    for phrase in phrases:
        homes = [p.relative_to(package).as_posix() for p in package.rglob("*.py")
                 if phrase in p.read_text(encoding="utf-8")]
        assert homes == ["options.py"], (phrase, homes)


def test_options_record_round_trips_through_json():
    opts = ExportOptions(target="onnx", inputs=["x:2x8"], dynamic=["b=1:2:4"],
                         output_names=["y"], atol=1e-3, output=Path("out.onnx"))
    assert opts.inputs == ("x:2x8",) and opts.output == "out.onnx"
    assert ExportOptions.from_json(json.loads(json.dumps(opts.to_json()))) == opts
    verify_opts = VerifyOptions(precision=None, save_inputs="in.json", calibrate=False)
    assert VerifyOptions.from_json(json.loads(json.dumps(verify_opts.to_json()))) == verify_opts


def test_reports_record_the_options_the_cli_built(tmp_path):
    model = tmp_path / "quick.onnx"
    onnx.save(hand_graph("tanh x*x*x"), str(model))
    out, rep_path = tmp_path / "out.onnx", tmp_path / "r.json"
    res = run_cli(model, "--target", "onnx", "-o", out, "--report", rep_path, "--iterations",
                  "2", "--warmup", "0", "--atol", "1e-3", "--threads", "1")
    assert res.code == 0, res.err
    report = json.loads(rep_path.read_text())
    read = ExportOptions.from_json(report["options"])
    assert read == ExportOptions(target="onnx", output=str(out), report=str(rep_path),
                                 iterations=2, warmup=0, atol=1e-3)
    assert report["parity"]["atol"] == 1e-3 and report["target"] == "onnx"
    api_rep = export(model, options=read, progress=None)  # the record reruns the same export
    assert api_rep.options == report["options"]

    vrep_path = tmp_path / "v.json"
    res = run_cli("verify", model, out, "--iterations", "0", "--report", vrep_path)
    assert res.code == 0, res.err
    vread = VerifyOptions.from_json(json.loads(vrep_path.read_text())["options"])
    assert vread == VerifyOptions(iterations=0, report=str(vrep_path))


def test_an_unknown_gelu_form_is_bad_input_everywhere(tmp_path):
    """One check of a `--gelu` name (exit 2, bad input): options.validate and the ONNX passes
    called directly (which said exit 3 before) refuse it with the same message."""
    from export_gelu.passes.onnx import run_onnx_passes
    from export_gelu.targets import resolve_profile

    message = "--gelu 'nope': choose one of keep, erf, tanh, sigmoid, plugin"
    assert _raised(validate, ExportOptions(target="onnx", gelu="nope")) == (2, message)
    assert _raised(export, tmp_path / "m.pt", target="onnx", gelu="nope") == (2, message)
    graph = hand_graph("TF erf Mul(0.7071)")
    assert _raised(run_onnx_passes, graph, resolve_profile("onnx"), form="nope") == (2, message)


def test_an_unknown_device_is_refused_before_any_work_by_every_command(tmp_path):
    """The CLI's parser offers cpu and cuda only; the API's keyword meets the same check,
    in options.py, for export and verify alike (before the model is opened)."""
    message = "--device 'gpu': choose one of cpu, cuda"
    missing = tmp_path / "no-such-model.pt"
    assert _raised(export, missing, device="gpu") == (2, message)
    assert _raised(verify, missing, tmp_path / "d.onnx", device="gpu") == (2, message)
    assert _raised(validate, FormsOptions(device="gpu")) == (2, message)
    res = run_cli(missing, "--device", "gpu")
    assert res.code == 2 and "--device: invalid choice: 'gpu'" in res.err
    package = ROOT / "export_gelu"
    homes = [p.relative_to(package).as_posix() for p in package.rglob("*.py")
             if "--device {" in p.read_text(encoding="utf-8")]
    assert homes == ["options.py"]
