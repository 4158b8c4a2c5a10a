"""Real architectures as users save them (examples/real_models.py: transformers configs,
random weights): ExportedPrograms returning the library's output objects, keyword inputs,
a dynamo exporter failure worked around, fp16 masks with finfo(float32).min, float64, and
the model's own output names; the failure paths exit with their code and one clean line."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import onnx
import pytest
import torch

from tests.child_cases import Case, run_cases
from tests.conftest import note_messages, run_cli

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

NO_TIMING = ("--iterations", "0")


def _export(model: Path, target: str, tmp_path: Path, *extra: str) -> tuple[dict, Path]:
    out = tmp_path / f"{model.stem}.{target}.onnx"
    rep = tmp_path / f"{model.stem}.{target}.json"
    res = run_cli(model, "--target", target, "-o", out, "--report", rep, *NO_TIMING, *extra)
    assert res.code == 0, res.err
    return json.loads(rep.read_text()), out


def _graph_outputs(path: Path) -> list[str]:
    return [o.name for o in onnx.load(str(path), load_external_data=False).graph.output]


def _assert_parity(report: dict, names: list[str], scale_tol: float) -> None:
    parity = report["parity"]
    assert parity["status"] == "passed", parity
    assert list(parity["outputs"]) == names
    for out in parity["outputs"].values():
        assert out["max_abs"] <= scale_tol * max(out["ref_scale"], 1.0)


@pytest.mark.slow
def test_t5_exported_with_keywords_on_dynamo_and_torchscript(saved_real, tmp_path: Path) -> None:
    """T5 v1.1 as torch.export gives it: keyword inputs, a Seq2SeqModelOutput. At opset 20
    the dynamo exporter hits torch's view bug; decompositions first get past it."""
    model = saved_real("t5", "exported")
    names = ["last_hidden_state", "encoder_last_hidden_state"]
    for target in ("onnx", "trt8.2"):
        report, out = _export(model, target, tmp_path)
        assert _graph_outputs(out) == names
        _assert_parity(report, names, 1e-4)
        assert len(report["gelu_sites"]) == 2 and \
            all(s["kind"] == "tanh" for s in report["gelu_sites"])
    assert report["exporter"] == "torchscript" and report["opset"] == 13
    onnx_report = json.loads((tmp_path / f"{model.stem}.onnx.json").read_text())
    assert onnx_report["exporter"] == "dynamo"
    assert any("decompositions first" in n and "Cannot view a tensor" in n and "\x1b" not in n
               for n in note_messages(onnx_report))
    res = run_cli("verify", model, tmp_path / f"{model.stem}.onnx.onnx", *NO_TIMING,
                  "--no-calibration")
    assert res.code == 0, res.err
    assert "last_hidden_state" in res.out


@pytest.mark.slow
def test_t5_factory_takes_inputs_named_after_forward_parameters(tmp_path: Path) -> None:
    """`--input input_ids:… --input decoder_input_ids:…` on an nn.Module: passed by keyword
    (forward's second parameter is attention_mask, so by position it would be wrong)."""
    from examples.real_models import KEYWORD_INPUTS

    weights = tmp_path / "t5.sd.pt"
    from examples.real_models import t5

    torch.save(t5().state_dict(), weights)
    specs = [a for s in KEYWORD_INPUTS["t5"] for a in ("--input", s)]
    report, out = _export(weights, "trt8.2", tmp_path, "--model-factory",
                          "examples.real_models:t5", *specs)
    assert "the model is called as model(input_ids=, decoder_input_ids=)" in note_messages(report)
    _assert_parity(report, ["last_hidden_state", "encoder_last_hidden_state"], 1e-4)


@pytest.mark.slow
def test_convnext_output_object_names_on_both_exporters(saved_real, tmp_path: Path) -> None:
    model = saved_real("convnext", "exported")
    names = ["last_hidden_state", "pooler_output"]
    for target in ("trt10", "trt8.6"):
        report, out = _export(model, target, tmp_path)
        assert _graph_outputs(out) == names
        _assert_parity(report, names, 1e-4)
        assert [s["kind"] for s in report["gelu_sites"]] == ["exact", "exact"]
    assert report["exporter"] == "torchscript"


@pytest.mark.slow
class _Records(logging.Handler):
    """Records torch's own loggers emit (they do not propagate to pytest's caplog)."""

    def __init__(self, *names: str) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []
        self.loggers = [logging.getLogger(n) for n in names]

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __enter__(self) -> _Records:
        for lg in self.loggers:
            lg.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        for lg in self.loggers:
            lg.removeHandler(self)


def test_deberta_fp16_torchscript_clamps_the_float32_mask(saved_real, tmp_path: Path) -> None:
    """DeBERTa masks with torch.finfo(torch.float32).min: in fp16 that literal is clamped
    (was: 'value cannot be converted to type c10::Half without overflow', exit 3) and the
    run stays quiet (no internal logs on stderr)."""
    from examples.real_models import KEYWORD_INPUTS

    model = saved_real("deberta", "torchscript")
    specs = [a for s in KEYWORD_INPUTS["deberta"] for a in ("--input", s)]
    out = tmp_path / "deberta.onnx"
    rep = tmp_path / "deberta.json"
    with _Records("torch", "torch._subclasses.fake_tensor") as logged:
        res = run_cli(model, "--target", "trt8.6", "--precision", "fp16", "-o", out,
                      "--report", rep, *NO_TIMING, *specs)
    assert res.code == 0, res.err
    assert "error" not in res.err.lower()
    assert [r.getMessage()[:80] for r in logged.records] == []
    report = json.loads(rep.read_text())
    assert report["exporter"] == "torchscript"
    assert any("torch.finfo(torch.float32).min) clamped" in n for n in note_messages(report))
    _assert_parity(report, ["last_hidden_state"], 2e-2)
    graph = onnx.load(str(out))
    assert graph.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT64
    assert graph.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    report, _ = _export(saved_real("deberta", "exported"), "trt9", tmp_path)
    assert report["exporter"] == "dynamo"
    _assert_parity(report, ["last_hidden_state"], 1e-4)


def test_float64_model_exports_and_verifies_in_float64(saved_real, tmp_path: Path) -> None:
    model = saved_real("float64_mlp", "exported")
    names = ["features", "logits"]
    for target in ("ort", "trt8.2"):
        report, out = _export(model, target, tmp_path)
        assert _graph_outputs(out) == names
        _assert_parity(report, names, 1e-10)
        assert report["parity"]["atol"] == 1e-10
        graph = onnx.load(str(out))
        assert graph.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.DOUBLE
        assert len(report["gelu_sites"]) == 2
        assert not any(n.op_type in ("FastGelu", "Gelu") for n in graph.graph.node)
    weights = tmp_path / "f64.sd.pt"
    from examples.real_models import float64_mlp

    torch.save(float64_mlp().state_dict(), weights)  # untyped --input: float64 for this model
    report, _ = _export(weights, "onnx", tmp_path, "--model-factory",
                        "examples.real_models:float64_mlp", "--input", "x:2x16",
                        "--output-names", "h,y")
    _assert_parity(report, ["h", "y"], 1e-10)


def test_output_names_flag_refuses_a_wrong_count(saved_real, tmp_path: Path) -> None:
    out = tmp_path / "x.onnx"
    res = run_cli(saved_real("float64_mlp", "exported"), "--target", "onnx", "-o", out,
                  "--output-names", "only_one", *NO_TIMING)
    assert res.code == 2
    assert res.err.strip() == ("export-gelu: error: --output-names gives 1 name(s) but the "
                               "model has 2 output(s) (features, logits)")
    assert not out.exists() and list(tmp_path.iterdir()) == []
    res = run_cli(saved_real("float64_mlp", "exported"), "--output-names", "a,a", "-o", out)
    assert res.code == 2 and "a name is given twice" in res.err


def test_missing_transformers_is_named_not_corrupt(saved_real, tmp_path: Path) -> None:
    """Where transformers is not installed, an archive returning its output object says to
    install it (exit 2), instead of 'corrupt ExportedProgram archive'."""
    model = saved_real("float64_mlp", "exported")  # plain dict outputs: loads without transformers
    hf = saved_real("convnext", "exported")
    out = tmp_path / "out.onnx"
    # one fresh program, two cases in turn (tests/child_cases.py): first transformers made
    # unimportable (a None entry in sys.modules), then that entry gone again, so transformers
    # is installed but not yet imported, as in a fresh process
    runs = run_cases([
        Case("without transformers", code=(
            "import sys\nsys.modules['transformers'] = None\n"
            "from export_gelu.cli import main\n"
            f"sys.exit(main([{str(hf)!r}, '--target', 'onnx', '-o', {str(out)!r}]))\n")),
        Case("transformers not imported", code=(
            "import sys\ndel sys.modules['transformers']\n"
            "assert not any(m.startswith('transformers.') for m in sys.modules)\n"
            "from export_gelu.exporter.loading.load import load_model\n"
            f"m = load_model({str(hf)!r})\nprint(m.notes, m.output_names)\n"))])
    run = runs["without transformers"]
    assert run.returncode == 2, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(f"export-gelu: error: {hf}: the ExportedProgram returns a "
                           "transformers.modeling_outputs.BaseModelOutputWithPoolingAndNoAttent")
    assert last.endswith("pip install transformers")
    assert not out.exists()
    # transformers installed but not imported: the archive's types are found
    run = runs["transformers not imported"]
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == ('["imported transformers to rebuild the model\'s output '
                                  'object"] [\'last_hidden_state\', \'pooler_output\']')
    res = run_cli(model, "--import", "no_such_module_here", "-o", out)
    assert res.code == 2
    assert "--import no_such_module_here: cannot import it (ModuleNotFoundError" in res.err


class Unexportable(torch.nn.Module):
    """An eigen-decomposition: neither exporter maps linalg_eigh to ONNX."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(torch.linalg.eigh(x @ x.transpose(-1, -2)).eigenvalues)


def unexportable() -> torch.nn.Module:
    return Unexportable().eval()


@pytest.mark.slow
def test_no_exporter_works_one_clean_line_exit_3(tmp_path: Path) -> None:
    weights = tmp_path / "eigh.sd.pt"
    torch.save({}, weights)
    out = tmp_path / "eigh.onnx"
    res = run_cli(weights, "--model-factory", "tests.e2e.test_real_models:unexportable",
                  "--input", "x:2x4x4", "--target", "onnx", "-o", out, *NO_TIMING)
    assert res.code == 3, res.err
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and "\x1b" not in lines[0]
    assert lines[0].startswith("export-gelu: error: no exporter could export this model: "
                               "dynamo at opset 20: ")
    assert "torchscript at opset 20: " in lines[0] and "linalg_eigh" in lines[0]
    assert not out.exists()


def test_onnx_input_ort_refuses_is_written_and_parity_skipped(tmp_path: Path) -> None:
    """An input whose duplicate node names ONNX Runtime refuses: export-gelu writes a graph
    with unique names and exits 0, parity skipped with the reason (was: exit 2 after the
    output was written)."""
    import numpy as np
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    half = helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    rsqrt2 = helper.make_tensor("rsqrt2", TensorProto.FLOAT, [], [float(1 / np.sqrt(2))])
    nodes = [helper.make_node("Mul", ["x", "rsqrt2"], ["s"], name="dup"),
             helper.make_node("Erf", ["s"], ["e"], name="dup"),
             helper.make_node("Add", ["e", "one"], ["a"], name="dup"),
             helper.make_node("Mul", ["x", "a"], ["m"], name="dup"),
             helper.make_node("Mul", ["m", "half"], ["y"], name="dup")]
    graph = helper.make_graph(nodes, "dup", [x], [y], [half, one, rsqrt2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    src = tmp_path / "dup.onnx"
    onnx.save(model, str(src))
    out = tmp_path / "dup.ort.onnx"
    rep = tmp_path / "dup.json"
    res = run_cli(src, "--target", "ort", "-o", out, "--report", rep, *NO_TIMING)
    assert res.code == 0, res.err
    report = json.loads(rep.read_text())
    assert report["parity"]["status"] == "skipped"
    assert report["parity"]["reason"].startswith("the input file cannot run as the reference")
    written = onnx.load(str(out))
    names = [n.name for n in written.graph.node]
    assert len(set(names)) == len(names)
    assert [n.op_type for n in written.graph.node] == ["Gelu"]


def test_rename_outputs_copies_shared_and_passthrough_tensors() -> None:
    """Two outputs of one tensor and an output that is the graph input: each gets its own
    name through an Identity; ONNX Runtime runs the result."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from export_gelu.errors import BadInputError
    from export_gelu.exporter.onnx_export.output_names import rename_outputs

    def vi(name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, [2])

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"])], "g", [vi("x")],
                              [vi("r"), vi("r"), vi("x")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    assert rename_outputs(model, ["a", "b", "c"]) == [("r", "a"), ("r", "b"), ("x", "c")]
    onnx.checker.check_model(model)
    assert [n.op_type for n in model.graph.node] == ["Relu", "Identity", "Identity", "Identity"]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    a, b, c = sess.run(["a", "b", "c"], {"x": np.array([-1.0, 2.0], np.float32)})
    assert a.tolist() == b.tolist() == [0.0, 2.0] and c.tolist() == [-1.0, 2.0]
    with pytest.raises(BadInputError, match="another output's name"):
        rename_outputs(model, ["b", "a", "c"])


def test_malformed_contrib_gelu_is_refused_before_writing(tmp_path: Path) -> None:
    """A com.microsoft QuickGelu with a second input (from ONNX Runtime's own test files) is
    refused with one line, exit 2, and nothing written (was: silently rewritten)."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    bias = helper.make_tensor("bias", TensorProto.FLOAT, [8], [0.0] * 8)
    node = helper.make_node("QuickGelu", ["x", "bias"], ["y"], name="quick", alpha=1.702,
                            domain="com.microsoft")
    graph = helper.make_graph([node], "q", [x], [y], [bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    src = tmp_path / "quick.onnx"
    onnx.save(model, str(src))
    out = tmp_path / "quick.trt.onnx"
    res = run_cli(src, "--target", "trt8.6", "-o", out, *NO_TIMING)
    assert res.code == 2
    assert res.err.strip() == (
        "export-gelu: error: node 'quick': com.microsoft QuickGelu takes one input, this one "
        "has 2 (x, bias); a malformed GELU op is not rewritten (ONNX Runtime would refuse it "
        "as well)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quick.onnx"]
