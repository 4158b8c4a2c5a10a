"""pipeline/forms_bundle.py's stage (`--compare-forms --bundle DIR`) on a hand-built state:
compare_forms_bundle writes one graph per GELU form the target parses, each checked here."""

from __future__ import annotations

import json
from pathlib import Path

from export_gelu.check.compare_forms import FormsComparison
from export_gelu.exporter.loading.load import load_model
from export_gelu.options import FormsOptions
from export_gelu.pipeline.forms_bundle import compare_forms_bundle
from tests.steps.step_inputs import main_feed, state_for


def test_compare_forms_bundle_writes_a_graph_per_form(program: Path, tmp_path: Path) -> None:
    state = state_for(FormsOptions(targets=("trt8.6",), bundle=str(tmp_path / "fb")), program,
                      command="compare-forms")
    state.loaded, state.feeds = load_model(program), [main_feed()]
    state.forms = state.report.forms = FormsComparison(str(program), "onnxruntime (CPU EP)",
                                                       1, 2)
    compare_forms_bundle(state)
    manifest = json.loads((tmp_path / "fb" / "manifest.json").read_text())
    forms = {f["form"]: f for f in manifest["forms"]}
    assert set(forms) == {"keep", "erf", "sigmoid", "plugin"}  # trt8.6 parses the plugin
    assert forms["keep"]["same_as"] == ["tanh"]  # the model's GELU is tanh: one graph
    for form, entry in forms.items():
        assert (tmp_path / "fb" / entry["graph"]["file"]).is_file()
        assert entry["local"]["status"] == "passed", form
        assert entry["graph"]["opset"] == 17
    assert forms["plugin"]["graph"]["gelu_plugin"] is True
    assert state.report.trt["bundle"] == str(tmp_path / "fb")
    (note,) = [n for n in state.report.notes if n.code == "forms-bundle-written"]
    assert note.startswith("device bundle of 4 GELU form(s) (keep = tanh, erf, sigmoid, plugin)")
    assert state.report.forms.notes == [str(note)]
