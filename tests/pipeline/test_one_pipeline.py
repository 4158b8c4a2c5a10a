"""One pipeline: every command is a list of named stages over one state, checked by one
checker with tolerances decided in one place; compare-forms and `--gelu auto` load the model
once; device verify honours the flags every verify takes."""

from __future__ import annotations

import ast
import json

import pytest

from export_gelu import api
from export_gelu.options import FormsOptions
from export_gelu.pipeline.commands import COMPARE_FORMS, DEVICE_VERIFY, EXPORT, VERIFY
from export_gelu.progress import Progress
from tests.conftest import ROOT, run_cli

PACKAGE = ROOT / "export_gelu"


class StepLog(Progress):
    """The progress channel, recorded: every step a run announces, in order."""

    def __init__(self) -> None:
        super().__init__(enabled=False)
        self.steps: list[str] = []

    def step(self, message: str) -> None:
        self.steps.append(message)

    def loads(self) -> int:
        return sum(s.startswith("loading ") for s in self.steps)


def test_compare_forms_loads_the_model_once(saved_model, tmp_path):
    model = saved_model("vit", "exported")
    log = StepLog()
    options = FormsOptions(targets=("onnx", "trt8.6"), iterations=2, warmup=0,
                           report=str(tmp_path / "r.json"))
    rep = api.forms_report(model, options, progress=log)
    assert log.loads() == 1, log.steps
    exported = [s for s in log.steps if s.startswith("exporting form ")]
    assert len(exported) == 8  # four forms on two targets, each made from the one load
    rows = rep.forms.rows
    assert rows and all(r.latency is not None and r.max_abs is not None for r in rows)
    keep = rep.forms.row("keep", "onnx")
    assert keep.max_abs < 1e-4  # the model's own math: PyTorch's numbers
    assert json.loads((tmp_path / "r.json").read_text())["calibration"] is not None


def test_gelu_auto_loads_the_model_once_and_exports_the_chosen_form(saved_model, tmp_path):
    model = saved_model("vit", "exported")
    log = StepLog()
    rep = api.export_with_best_form(
        model, api.ExportOptions(target="onnx", output=str(tmp_path / "o.onnx"), gelu="auto",
                                 iterations=2, warmup=0), log)
    assert log.loads() == 1, log.steps
    assert rep.gelu_form.startswith("auto → ") and rep.parity.status == "passed"
    assert (tmp_path / "o.onnx").is_file()


def test_stages_are_named_and_export_is_their_list():
    names = [s.name for s in EXPORT]
    assert names[:4] == ["plan", "load", "disk", "inputs"]
    assert names.index("capture") < names.index("fx_passes") < names.index("export") \
        < names.index("onnx_passes") < names.index("checks") < names.index("save") \
        < names.index("verify") < names.index("report")
    for command in (EXPORT, VERIFY, DEVICE_VERIFY, COMPARE_FORMS):
        assert len({s.name for s in command}) == len(command)  # each stage once


def test_one_clock_times_each_stage_of_an_onnx_input(saved_model, tmp_path):
    src = tmp_path / "m.onnx"
    first = api.export(saved_model("vit", "exported"), target="onnx", output=src, verify=False)
    assert first.parity.status == "skipped"
    rep = api.export(src, target="trt8.6", output=tmp_path / "o.onnx", verify=False)
    assert set(rep.stage_seconds) == {"load", "onnx_passes", "checks", "save"}


# -- device verify: the same flags as every verify ------------------------------------------

@pytest.fixture(scope="module")
def vit_bundle(tmp_path_factory):
    """A trt8.2 bundle of a small model, and the device outputs ONNX Runtime gives for it."""
    from tests.device.test_bundle import ort_outputs, write_trtexec_outputs

    folder = tmp_path_factory.mktemp("device")
    from examples.save_model import save

    model = save("vit", "exported", folder / "vit.pt")
    bundle = folder / "bundle"
    res = run_cli(model, "--target", "trt8.2", "-o", folder / "vit.onnx", "--bundle", bundle)
    assert res.code == 0, res.err
    outputs = folder / "outputs.json"
    write_trtexec_outputs(ort_outputs(bundle), outputs)
    return model, bundle, outputs


def test_device_verify_runs_the_reference_where_device_says(vit_bundle, tmp_path):
    model, bundle, outputs = vit_bundle
    report = tmp_path / "r.json"
    res = run_cli("verify", model, "--bundle", bundle, "--device-outputs", outputs,
                  "--device", "cpu", "--report", report)
    assert res.code == 0, res.err
    rep = json.loads(report.read_text())
    assert rep["device"]["device"] == "cpu" and rep["device"]["requested"] == "cpu"
    assert rep["options"]["device"] == "cpu"


def test_device_verify_refuses_cuda_where_there_is_none(vit_bundle):
    from export_gelu.check.devices import cuda_blocker

    blocker = cuda_blocker()
    if blocker is None:
        pytest.skip("this machine can run the reference on CUDA")
    model, bundle, outputs = vit_bundle
    res = run_cli("verify", model, "--bundle", bundle, "--device-outputs", outputs,
                  "--device", "cuda")
    assert res.code == 2 and "--device cuda" in res.err


def test_device_verify_imports_what_import_names(vit_bundle):
    model, bundle, outputs = vit_bundle
    res = run_cli("verify", model, "--bundle", bundle, "--device-outputs", outputs,
                  "--import", "no_such_module_here")
    assert res.code == 2 and "no_such_module_here" in res.err


# -- the code's shape --------------------------------------------------------------------------

def _functions():
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path.relative_to(PACKAGE).as_posix(), node


def test_no_function_takes_more_than_six_positional_parameters():
    over = []
    for where, fn in _functions():
        positional = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)
                      if a.arg not in ("self", "cls")]
        if len(positional) > 6:
            over.append(f"{where}:{fn.name} ({len(positional)})")
    assert not over


def test_api_export_is_a_list_of_stages():
    tree = ast.parse((PACKAGE / "api.py").read_text(encoding="utf-8"))
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "export"]
    assert fn.end_lineno - fn.lineno + 1 <= 60


def test_tolerances_are_decided_in_one_place():
    users = {where for where, fn in _functions()
             for node in ast.walk(fn) if isinstance(node, ast.Name)
             and node.id in ("DEFAULT_TOLERANCES", "FORM_ERROR_HEADROOM", "REWRITE_SHARE")}
    assert users == {"tolerances.py"}
