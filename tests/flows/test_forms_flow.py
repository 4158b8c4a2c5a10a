"""flows/forms.py and forms_bundle.py: --compare-forms and --gelu auto load the model once;
--compare-forms --bundle writes a graph per GELU form the target parses."""

from __future__ import annotations

import json
from pathlib import Path

from export_gelu import api
from export_gelu.flows.forms import compare_forms
from export_gelu.options import FormsOptions
from export_gelu.run import Run
from export_gelu.steps.request import prepare
from tests.flows.step_log import StepLog


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


def test_gelu_auto_loads_the_model_once_and_exports_the_chosen_form(program: Path,
                                                                     tmp_path: Path) -> None:
    # Tiny, not a real architecture: the flow is what is tested (BERT's --gelu auto from the
    # CLI, its choice and reasons: test_compare_forms.py's
    # test_gelu_auto_exports_the_chosen_form_and_says_why)
    model = program
    log = StepLog()
    rep = api.export_with_best_form(
        model, api.ExportOptions(target="onnx", output=str(tmp_path / "o.onnx"), gelu="auto",
                                 iterations=2, warmup=0, report=str(tmp_path / "r.json")), log)
    assert log.loads() == 1, log.steps
    assert rep.gelu_form.startswith("auto → ") and rep.parity.status == "passed"
    assert (tmp_path / "o.onnx").is_file()
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["options"]["gelu"] == "auto"  # what was asked, not what was chosen
    assert data["written"] == [str(tmp_path / "o.onnx"), str(tmp_path / "r.json")]


def test_compare_forms_with_a_bundle_writes_a_graph_per_form(program: Path,
                                                             tmp_path: Path) -> None:
    request = prepare(FormsOptions(targets=("trt8.6",), bundle=str(tmp_path / "fb"),
                                   iterations=2, warmup=0), program)
    result = compare_forms(request, Run(), calibration=False)
    manifest = json.loads((tmp_path / "fb" / "manifest.json").read_text())
    forms = {f["form"]: f for f in manifest["forms"]}
    assert set(forms) == {"keep", "erf", "sigmoid", "plugin"}  # trt8.6 parses the plugin
    assert forms["keep"]["same_as"] == ["tanh"]  # the model's GELU is tanh: one graph
    for form, entry in forms.items():
        assert (tmp_path / "fb" / entry["graph"]["file"]).is_file()
        assert entry["local"]["status"] == "passed", form
        assert entry["graph"]["opset"] == 17
    assert forms["plugin"]["graph"]["gelu_plugin"] is True
    assert result.bundle is not None and result.bundle.path == tmp_path / "fb"
    (note,) = [n for n in result.notes if n.code == "forms-bundle-written"]
    assert note.startswith("device bundle of 4 GELU form(s) (keep = tanh, erf, sigmoid, plugin)")
    assert str(note) in result.comparison.notes
