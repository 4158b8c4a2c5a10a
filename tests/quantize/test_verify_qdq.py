"""`verify MODEL DEPLOYED` and `verify --bundle --device-outputs` of an INT8 Q/DQ graph: judged
by the INT8 verdict (PyTorch at the graph's own scales), a wrong scale fails and its first
divergence names the module, an honest graph localizes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest

from export_gelu.quantize import read_qdq
from tests.conftest import run_cli
from tests.device.test_bundle import ort_outputs, write_trtexec_outputs

#: The module given a wrong scale: encoder block K = 1's first FFN product.
WRONG = "model.encoder.layer.1.intermediate.dense"


@pytest.fixture(scope="module")
def int8(saved_model, session_cache) -> tuple[Path, Path, Path]:
    """BERT (an ExportedProgram), its trt8.6 INT8 graph and that graph's device bundle."""
    import export_gelu

    model = saved_model("bert", "exported")

    def build(d: Path) -> None:
        export_gelu.export(model, target="trt8.6", precision="int8", output=d / "bert.onnx",
                           bundle=d / "B", iterations=0)

    d = session_cache.folder("bert-int8-trt86", build)
    return model, d / "bert.onnx", d / "B"


def _wrong_scale(graph: Path, out: Path) -> None:
    """`graph` with WRONG's weight DequantizeLinear scale ×4 (its QuantizeLinear keeps the
    right one), edited with onnx-graphsurgeon; the nodes keep their provenance."""
    model = onnx.load(str(graph))
    product = next(p for p in read_qdq(model) if p.module == WRONG)
    g = gs.import_onnx(model)
    dq = next(n for n in g.nodes if n.name == product.node).inputs[1].inputs[0]
    assert dq.op == "DequantizeLinear"
    dq.inputs[1] = gs.Constant("wrong_scale", np.asarray(dq.inputs[1].values * 4, np.float32))
    edited = gs.export_onnx(g)
    meta = {n.name: n.metadata_props for n in model.graph.node}
    for node in edited.graph.node:  # graphsurgeon drops node metadata: the modules' paths
        node.metadata_props.extend(meta.get(node.name, []))
    onnx.save(edited, str(out))


def test_verify_judges_a_qdq_graph_and_localizes_nothing(int8, tmp_path: Path) -> None:
    model, graph, _ = int8
    rep_path = tmp_path / "r.json"
    res = run_cli("verify", model, graph, "--localize", "--report", rep_path)
    assert res.code == 0, res.err + res.out
    assert "INT8 verdict: PASSED" in res.out and "first divergence: none (" in res.out
    rep = json.loads(rep_path.read_text())
    q = rep["quantization"]
    assert rep["precision"] == "int8" and rep["parity"]["status"] == "skipped"
    assert q["passed"] is True and q["products_quantized"] == q["weight_products"] == 12
    assert q["qdq_inside_gelu"] == 0 and q["outputs"]["output_0"]["sqnr_db"] >= 30


def test_a_wrong_scale_fails_naming_its_module(int8, tmp_path: Path) -> None:
    model, graph, _ = int8
    bad, rep_path = tmp_path / "bad.onnx", tmp_path / "r.json"
    _wrong_scale(graph, bad)
    res = run_cli("verify", model, bad, "--report", rep_path)
    assert res.code == 1, res.err + res.out
    assert "INT8 verdict: FAILED" in res.out and "FAIL output_0" in res.out
    assert f"first divergence: {WRONG} —" in res.out
    rep = json.loads(rep_path.read_text())
    assert rep["quantization"]["passed"] is False
    assert rep["parity"]["first_divergence"]["torch_module"] == WRONG


def test_device_outputs_of_an_int8_bundle_get_the_int8_verdict(int8, tmp_path: Path) -> None:
    """The stand-in device's outputs: the graph's own (ONNX Runtime's) pass; one sequence's
    outputs shifted by 0.05 fail (exit 1)."""
    model, _, bundle = int8
    assert json.loads((bundle / "manifest.json").read_text())["precision"] == "int8"
    outs = ort_outputs(bundle)
    good, corrupted = tmp_path / "good.json", tmp_path / "bad.json"
    write_trtexec_outputs(outs, good)
    (name,) = outs
    shifted = outs[name].copy()
    shifted[0] += 0.05
    write_trtexec_outputs({name: shifted}, corrupted)
    res = run_cli("verify", model, "--bundle", bundle, "--device-outputs", good)
    assert res.code == 0, res.err + res.out
    assert "INT8 verdict: PASSED" in res.out and "Parity: skipped" in res.out
    res = run_cli("verify", model, "--bundle", bundle, "--device-outputs", corrupted)
    assert res.code == 1, res.err + res.out
    assert "INT8 verdict: FAILED" in res.out and f"FAIL {name}" in res.out
