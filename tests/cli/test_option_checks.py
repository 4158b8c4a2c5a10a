"""Every check that reads only the options (a flag's syntax, flags that do not go together) is
made by `options.validate` before any work: the CLI and the Python API refuse alike, with the
same message and exit code, and the model (a file no loader takes) is never opened."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from export_gelu import api
from export_gelu.errors import BadInputError, TargetUnmetError
from export_gelu.exporter.hf.tasks import task_names
from export_gelu.options import ExportOptions, FormsOptions, VerifyOptions, validate
from tests.conftest import run_cli

TASKS_HINT = f"not a task export-gelu knows; choose one of {', '.join(task_names())}"


@dataclass(frozen=True)
class Case:
    """One refusal: the CLI's words after MODEL, the API call on (model, folder), the message."""

    flags: Callable[[Path], list[str]]
    call: Callable[[Path, Path], Any]
    message: Callable[[Path], str]
    code: int = 2


def _msg(text: str) -> Callable[[Path], str]:
    return lambda _d: text


EXPORT_CASES = {
    "--input negative dim": Case(
        lambda d: ["--input", "x:1x-3"],
        lambda m, d: api.export(m, input=["x:1x-3"]),
        _msg("--input 'x:1x-3': every dimension must be a positive integer")),
    "--input dtype": Case(
        lambda d: ["--input", "x:2x4:float8"],
        lambda m, d: api.export(m, input=["x:2x4:float8"]),
        _msg("--input 'x:2x4:float8': dtype 'float8' is not one of float32, float16, float64, "
             "int64, int32, bool")),
    "--input range": Case(
        lambda d: ["--input", "x:4:bool:0,1"],
        lambda m, d: api.export(m, input=["x:4:bool:0,1"]),
        _msg("--input 'x:4:bool:0,1': a bool input takes no range")),
    "--input named dim, bad dtype": Case(
        lambda d: ["--input", "x:batchx4:float8", "--dynamic", "batch=1:2:4"],
        lambda m, d: api.export(m, input=["x:batchx4:float8"], dynamic=["batch=1:2:4"]),
        _msg("--input 'x:1x4:float8': dtype 'float8' is not one of float32, float16, float64, "
             "int64, int32, bool")),
    "--input twice": Case(
        lambda d: ["--input", "x:2", "--input", "x:3"],
        lambda m, d: api.export(m, input=["x:2", "x:3"]),
        _msg("--input: the same name is given twice (x, x)")),
    "--input and --inputs": Case(
        lambda d: ["--input", "x:2", "--inputs", str(d / "in.npz")],
        lambda m, d: api.export(m, input=["x:2"], inputs=d / "in.npz"),
        _msg("give either --input specs or --inputs FILE.npz, not both")),
    "--model-factory form": Case(
        lambda d: ["--model-factory", "nocolon"],
        lambda m, d: api.export(m, model_factory="nocolon"),
        _msg("--model-factory 'nocolon': expected the form pkg.module:function (a module "
             "importable from the working directory)")),
    "--task name": Case(
        lambda d: ["--task", "no-such-task"],
        lambda m, d: api.export(m, task="no-such-task"),
        _msg(f"--task 'no-such-task': {TASKS_HINT}")),
    "--gelu auto --cast-down": Case(
        lambda d: ["--gelu", "auto", "--cast-down"],
        lambda m, d: api.export(m, gelu="auto", cast_down=True),
        _msg("--cast-down applies to one export: drop --compare-forms / --gelu auto")),
    "--gelu auto --cast-down (export_with_best_form)": Case(
        lambda d: ["--gelu", "auto", "--cast-down"],
        lambda m, d: api.export_with_best_form(m, ExportOptions(gelu="auto", cast_down=True)),
        _msg("--cast-down applies to one export: drop --compare-forms / --gelu auto")),
}

VERIFY_CASES = {
    "--device-times without --device-outputs": Case(
        lambda d: [str(d / "d.onnx"), "--device-times", str(d / "t.json")],
        lambda m, d: api.verify(m, d / "d.onnx", device_times=d / "t.json"),
        _msg("--device-times needs --device-outputs from the same run")),
    "--device-outputs with --save-inputs": Case(
        lambda d: ["--bundle", str(d / "B"), "--device-outputs", str(d / "o.json"),
                   "--save-inputs", str(d / "in.json")],
        lambda m, d: api.verify(m, bundle=d / "B", device_outputs=d / "o.json",
                                save_inputs=d / "in.json"),
        _msg("--device-outputs judges recorded outputs: drop --input, --save-inputs and "
             "--save-outputs")),
    "no DEPLOYED": Case(
        lambda d: [],
        lambda m, d: api.verify(m),
        _msg("DEPLOYED is required (or --bundle DIR --device-outputs FILE)")),
    "-o without a forms bundle": Case(
        lambda d: [str(d / "d.onnx"), "-o", str(d / "best.onnx")],
        lambda m, d: api.verify(m, d / "d.onnx", output=d / "best.onnx"),
        _msg("-o writes the GELU form the device chose: it needs a bundle of forms and the "
             "folder its device wrote (--bundle DIR --device-outputs DIR/outputs)")),
    "--device-outputs with --bundle and --inputs": Case(
        lambda d: ["--bundle", str(d / "B"), "--device-outputs", str(d / "o.json"),
                   "--inputs", str(d / "in.npz")],
        lambda m, d: api.verify(m, bundle=d / "B", device_outputs=d / "o.json",
                                inputs=d / "in.npz"),
        _msg("--inputs: the bundle holds the inputs the device ran; give one or the other")),
    "--device-outputs without --bundle or --inputs": Case(
        lambda d: [str(d / "d.onnx"), "--device-outputs", str(d / "o.json")],
        lambda m, d: api.verify(m, d / "d.onnx", device_outputs=d / "o.json"),
        _msg("--device-outputs without --bundle needs DEPLOYED (the ONNX graph the device ran) "
             "and --inputs (the inputs it ran on)")),
    "--device-outputs DIR without --bundle": Case(
        lambda d: [str(d / "d.onnx"), "--device-outputs", str(d / "outputs"), "--inputs",
                   str(d / "in.npz")],
        lambda m, d: api.verify(m, d / "d.onnx", device_outputs=d / "outputs",
                                inputs=d / "in.npz"),
        lambda d: (f"--device-outputs {d / 'outputs'} is a folder: the outputs of a bundle of "
                   "GELU forms; give the bundle too (--bundle DIR)")),
    "--device-outputs DIR with --device-times": Case(
        lambda d: ["--bundle", str(d / "B"), "--device-outputs", str(d / "outputs"),
                   "--device-times", str(d / "t.json")],
        lambda m, d: api.verify(m, bundle=d / "B", device_outputs=d / "outputs",
                                device_times=d / "t.json"),
        _msg("--device-times: each form's times are read from its folder under "
             "--device-outputs; drop --device-times")),
    "--device-outputs DIR with --localize": Case(
        lambda d: ["--bundle", str(d / "B"), "--device-outputs", str(d / "outputs"),
                   "--localize"],
        lambda m, d: api.verify(m, bundle=d / "B", device_outputs=d / "outputs", localize=True),
        _msg("--localize: a bundle of GELU forms has no marked graph; make a one-graph bundle "
             "of the form to localize (--gelu FORM --bundle)")),
    "--input and --inputs": Case(
        lambda d: [str(d / "d.onnx"), "--input", "x:2", "--inputs", str(d / "in.npz")],
        lambda m, d: api.verify(m, d / "d.onnx", input=["x:2"], inputs=d / "in.npz"),
        _msg("give either --input specs or --inputs FILE, not both")),
    "--input named dim (verify takes no --dynamic)": Case(
        lambda d: [str(d / "d.onnx"), "--input", "x:batchx4"],
        lambda m, d: api.verify(m, d / "d.onnx", input=["x:batchx4"]),
        _msg("--input 'x:batchx4': shape 'batchx4' is not like 1x128")),
    "--task name": Case(
        lambda d: [str(d / "d.onnx"), "--task", "no-such-task"],
        lambda m, d: api.verify(m, d / "d.onnx", task="no-such-task"),
        _msg(f"--task 'no-such-task': {TASKS_HINT}")),
}

FORMS_CASES = {
    "--input and --inputs": Case(
        lambda d: ["--input", "x:2", "--inputs", str(d / "in.npz")],
        lambda m, d: api.compare_forms(m, inputs=("x:2",), inputs_npz=str(d / "in.npz")),
        _msg("give either --input specs or --inputs FILE.npz, not both")),
    "--input syntax": Case(
        lambda d: ["--input", "x"],
        lambda m, d: api.compare_forms(m, inputs=("x",)),
        _msg("--input 'x': expected NAME:SHAPE[:DTYPE[:LOW,HIGH]], e.g. "
             "input_ids:1x128:int64:0,30522")),
    "--model-factory form": Case(
        lambda d: ["--model-factory", ":"],
        lambda m, d: api.compare_forms(m, model_factory=":"),
        _msg("--model-factory ':': expected the form pkg.module:function (a module importable "
             "from the working directory)")),
}


@pytest.fixture
def unloadable(tmp_path: Path) -> tuple[Path, Path]:
    """(a model file no loader takes, a folder holding `outputs/`, a device's outputs folder):
    a refusal naming the options proves the model was never opened."""
    model = tmp_path / "broken.pt"
    model.write_bytes(b"not a model at all")
    (tmp_path / "outputs").mkdir()
    return model, tmp_path


def _raised(call: Callable[[], Any]) -> tuple[int, str]:
    with pytest.raises((BadInputError, TargetUnmetError)) as info:
        call()
    return info.value.exit_code, str(info.value)


def _check(case: Case, argv: list[str], model: Path, folder: Path) -> None:
    message = case.message(folder)
    res = run_cli(*argv)
    assert (res.code, res.out) == (case.code, ""), res.err
    assert res.err == f"export-gelu: error: {message}\n"
    assert _raised(lambda: case.call(model, folder)) == (case.code, message)


@pytest.mark.parametrize("name", EXPORT_CASES)
def test_export_option_refused_alike_before_the_model_loads(name, unloadable) -> None:
    model, folder = unloadable
    case = EXPORT_CASES[name]
    _check(case, [model, *case.flags(folder)], model, folder)


@pytest.mark.parametrize("name", VERIFY_CASES)
def test_verify_option_refused_alike_before_the_model_loads(name, unloadable) -> None:
    model, folder = unloadable
    case = VERIFY_CASES[name]
    _check(case, ["verify", model, *case.flags(folder)], model, folder)


@pytest.mark.parametrize("name", FORMS_CASES)
def test_compare_forms_option_refused_alike_before_the_model_loads(name, unloadable) -> None:
    model, folder = unloadable
    case = FORMS_CASES[name]
    _check(case, [model, "--compare-forms", *case.flags(folder)], model, folder)


def test_validate_alone_refuses_what_the_commands_refuse(tmp_path: Path) -> None:
    """The records, checked with no model at all: the same words as above."""
    assert _raised(lambda: validate(ExportOptions(inputs=("x:2", "x:3")))) == (
        2, "--input: the same name is given twice (x, x)")
    assert _raised(lambda: validate(VerifyOptions(device_times="t.json"), deployed="d.onnx")) \
        == (2, "--device-times needs --device-outputs from the same run")
    assert _raised(lambda: validate(VerifyOptions())) == (
        2, "DEPLOYED is required (or --bundle DIR --device-outputs FILE)")
    assert _raised(lambda: validate(FormsOptions(inputs=("x:2",), inputs_npz="a.npz"))) == (
        2, "give either --input specs or --inputs FILE.npz, not both")
    validate(VerifyOptions(), deployed="d.onnx")  # nothing else is asked of a plain verify
    validate(ExportOptions(inputs=("x:batchxseq:int64:0,9",), dynamic=("batch=1:2:4",)))


def test_compare_forms_workdir_must_be_a_folder(unloadable) -> None:
    """`workdir` (the API's; no flag) is checked with the options, before the model."""
    model, folder = unloadable
    message = f"{folder / 'nowhere'}: not a directory"
    assert _raised(lambda: api.compare_forms(model, workdir=str(folder / "nowhere"))) == (
        2, message)


@pytest.mark.parametrize("flags", [["-o", "x.onnx"], ["--gelu", "erf"], ["--cast-down"]],
                         ids=["-o", "--gelu", "--cast-down"])
def test_compare_forms_refuses_export_flags_its_record_has_no_field_for(flags, unloadable):
    """CLI only: compare_forms() has no such keyword (a TypeError)."""
    model, _folder = unloadable
    res = run_cli(model, "--compare-forms", *flags)
    assert res.code == 2 and res.out == ""
    words = ("--cast-down applies to one export" if flags == ["--cast-down"] else
             "--compare-forms exports every form itself and writes no model: drop -o and --gelu")
    assert res.err.startswith(f"export-gelu: error: {words}"), res.err
    keyword = flags[0].lstrip("-").replace("-", "_")
    with pytest.raises(TypeError):
        api.compare_forms(model, **{"output" if keyword == "o" else keyword: flags[-1]})


def test_a_model_in_memory_is_refused_gelu_auto(tmp_path: Path) -> None:
    """`gelu='auto'` compares forms first, which needs the model as a file."""
    import torch

    with pytest.raises(BadInputError, match="--gelu auto"):
        api.export(torch.nn.GELU(), args=(torch.zeros(2),), output=tmp_path / "g.onnx",
                   gelu="auto")


#: Words of the moved refusals: each is written once, in options.py.
MOVED = ["--input specs or --inputs FILE", "--device-times needs --device-outputs",
         "judges recorded outputs", "DEPLOYED is required", "-o writes the GELU form",
         "the bundle holds the inputs the device ran", "without --bundle needs DEPLOYED",
         "give the bundle too", "drop --device-times", "has no marked graph",
         "applies to one export", "writes no model", "workdir}: not a directory"]


def test_each_moved_refusal_is_written_once() -> None:
    package = Path(__file__).resolve().parents[2] / "export_gelu"
    for phrase in MOVED:
        homes = [p.relative_to(package).as_posix() for p in package.rglob("*.py")
                 if phrase in p.read_text(encoding="utf-8")]
        assert homes == ["options.py"], (phrase, homes)
