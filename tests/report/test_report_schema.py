"""The typed report: docs/report.schema.json is generated from the report's types (and the
committed file is that), every command's JSON report validates against it, carries its
schema_version, and every note has a code (tests and tools match codes, not words)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from export_gelu.notes import UNCLASSIFIED, Note, tagged
from export_gelu.report.report import SCHEMA_VERSION
from tests.conftest import ROOT, note_codes, run_cli
from tests.report_schema import SCHEMA, validate_report


def _valid(report: Path) -> dict:
    data = json.loads(report.read_text())
    validate_report(data)
    assert data["schema_version"] == SCHEMA_VERSION
    assert UNCLASSIFIED not in note_codes(data), data["notes"]
    return data


@pytest.fixture(scope="module")
def runs(tmp_path_factory, saved_model):
    """Reports of export (torch and ONNX inputs), verify and compare-forms on one model:
    GPT-2 saved as TorchScript (its conversion's notes), and for compare-forms as an
    ExportedProgram (each form of a TorchScript file is converted again: 17 CPU s against
    7.5 in one process)."""
    from examples.models import EXAMPLES

    spec = ("--input", EXAMPLES["gpt2"].input_spec)
    folder = tmp_path_factory.mktemp("schema")
    model = saved_model("gpt2", "torchscript")
    out = {}
    onnx_out = folder / "gpt2.onnx"
    res = run_cli(model, *spec, "--target", "trt8.2", "-o", onnx_out, "--report",
                  folder / "export.json", "--iterations", "3", "--warmup", "0")
    assert res.code == 0, res.err
    out["export"] = folder / "export.json"
    res = run_cli(onnx_out, "--target", "ort", "-o", folder / "ort.onnx", "--no-verify",
                  "--report", folder / "onnx.json")
    assert res.code == 0, res.err
    out["onnx"] = folder / "onnx.json"
    res = run_cli("verify", model, onnx_out, *spec, "--iterations", "3", "--warmup", "0",
                  "--report", folder / "verify.json")
    assert res.code == 0, res.err
    out["verify"] = folder / "verify.json"
    res = run_cli(saved_model("gpt2", "exported"), "--compare-forms", "--target", "onnx",
                  "--iterations", "2", "--warmup", "0", "--report", folder / "forms.json")
    assert res.code == 0, res.err
    out["forms"] = folder / "forms.json"
    return out


@pytest.mark.parametrize("command", ["export", "onnx", "verify", "forms"])
def test_every_report_validates_and_every_note_has_a_code(runs, command):
    data = _valid(runs[command])
    assert data["command"] == {"onnx": "export", "forms": "compare-forms"}.get(command, command)


def test_notes_say_what_happened_by_code(runs):
    export = json.loads(runs["export"].read_text())
    codes = note_codes(export)
    assert "torchscript-converted" in codes  # a TorchScript model went through the fx passes
    assert "trt-takers" in codes  # which TensorRT versions parse the output
    onnx = json.loads(runs["onnx"].read_text())
    assert "trt-takers" not in note_codes(onnx)  # not a TensorRT target


def test_a_note_is_its_message_with_a_code():
    note = Note("weights streamed", "weights")
    assert note == "weights streamed" and note.code == "weights"
    assert note.to_json() == {"code": "weights", "message": "weights streamed"}
    assert tagged("fit", ["a", None, "", note]) == ["a", note]
    assert [n.code for n in tagged("fit", ["a", note])] == ["fit", "weights"]


def test_the_schema_refuses_a_report_without_codes(runs):
    data = json.loads(runs["export"].read_text())
    data["notes"] = ["a note without a code"]
    with pytest.raises(jsonschema.ValidationError):
        validate_report(data)


def test_the_committed_schema_is_generated_from_the_reports_types():
    from export_gelu.report.schema import schema_text

    assert (ROOT / "docs" / "report.schema.json").read_text() == schema_text(), (
        "docs/report.schema.json is not the report's types: run python -m "
        "export_gelu.report.schema --write")


def test_the_schema_names_every_key_users_rely_on():
    """docs/report.md's keys that stay, each required at the top level, and typed."""
    required = set(SCHEMA["required"])
    assert {"target", "output", "opset", "gelu_sites", "parity", "trt", "latency", "options",
            "notes", "stage_seconds", "written", "schema_version"} <= required
    assert SCHEMA["properties"]["command"] == {"enum": ["export", "verify", "compare-forms"]}
    trt = {ref["$ref"].rsplit("/", 1)[-1] for ref in SCHEMA["properties"]["trt"]["anyOf"]}
    assert trt == {"trt_skipped", "trt_not_here", "trt_built", "trt_loaded", "trt_device"}
    parity = SCHEMA["$defs"]["parity_result_with_localization"]["properties"]
    assert {"status", "reason", "outputs", "first_divergence", "module_errors"} <= set(parity)


def test_a_section_reads_as_its_json():
    """The report's typed sections answer `section["key"]` as the dicts they replace did."""
    from export_gelu.report.sections import TrtNotHere

    trt = TrtNotHere("no GPU", "build and check it on the device with --bundle DIR")
    assert trt["status"] == "skipped" and trt.get("engine_here") is False
    assert "bundle" not in trt and trt.get("bundle") is None  # written only once there is one
