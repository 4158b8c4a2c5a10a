"""The static compatibility check and `export-gelu inspect`: which TensorRT versions take a
graph as is, why not, and whether export-gelu would fit it — without a GPU."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from export_gelu.parse_check import PLUGIN_OP, compatibility_table, incompatibilities
from export_gelu.targets import PROFILES
from tests.conftest import run_cli

OLD = ["trt7.0", "trt7.1", "trt7.2", "trt8.0", "trt8.2", "trt8.4", "trt8.5", "trt8.6", "trt9"]
CEILING = {"trt7.0": 11, "trt7.1": 11, "trt7.2": 11, "trt8.0": 13, "trt8.2": 13, "trt8.4": 17,
           "trt8.5": 17, "trt8.6": 17, "trt9": 19}


@pytest.fixture(scope="module")
def opset20(golden_run, tmp_path_factory):
    """BERT exported at opset 20: native Gelu and LayerNormalization nodes (a golden run)."""
    run = golden_run("bert", "exported", "--target", "onnx", "--no-verify")
    assert run.code == 0, run.err
    out = run.copy_to(tmp_path_factory.mktemp("opset20"), "bert20.onnx")
    ops = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert {"Gelu", "LayerNormalization"} <= ops
    return out


def test_inspect_rejects_old_trt_with_reasons_and_accepts_10_and_11(opset20):
    res = run_cli("inspect", opset20, "--json")
    assert res.code == 0, res.err
    info = json.loads(res.out)
    compat = info["compatibility"]
    assert compat["trt10"] == compat["trt11"] == compat["onnx"] == []
    for name in OLD:
        reasons = compat[name]
        assert f"opset 20 above ceiling {CEILING[name]}" in reasons
        assert "op Gelu unsupported (TensorRT parses it from 10.0)" in reasons
        has_ln = PROFILES[name].supports("LayerNormalization")
        assert ("op LayerNormalization unsupported (TensorRT parses it from 8.6)" in reasons) \
            is not has_ln
    assert [s["kind"] for s in info["gelu_sites"]] == ["exact", "exact"]
    assert all(fit["fits"] for fit in info["after_export"].values())
    assert info["after_export"]["trt8.2"]["opset"] == 13

    table = run_cli("inspect", opset20)
    assert table.code == 0
    rows = {line.split()[0]: line for line in table.out.splitlines()[3:]}
    assert rows["trt10"].split()[1:3] == ["yes", "fits"]
    assert rows["trt8.2"].split()[1:3] == ["no", "fits"]
    assert "op Gelu unsupported" in rows["trt8.2"] and "opset 20 above ceiling 13" in rows["trt8.2"]


def test_after_export_for_trt82_the_same_check_accepts_it(opset20, tmp_path):
    fitted = tmp_path / "bert.trt8.2.onnx"
    res = run_cli(opset20, "--target", "trt8.2", "-o", fitted, "--iterations", "0")
    assert res.code == 0, res.err
    assert "Check: trt8.2: parses as is" in res.out
    before = run_cli("inspect", opset20, "--target", "trt8.2", "--no-dry-run")
    assert before.code == 3 and "trt8.2 would not parse" in before.err
    after = run_cli("inspect", fitted, "--target", "trt8.2", "--json")
    assert after.code == 0, after.err
    info = json.loads(after.out)
    assert info["compatibility"] == {"trt8.2": []}
    assert info["opset"] == 13 and len(info["gelu_sites"]) == 2
    assert info["after_export"]["trt8.2"]["fits"]


def _graph(nodes, inputs, outputs, opset=13, domains=()):
    model = helper.make_model(
        helper.make_graph(nodes, "g", inputs, outputs),
        opset_imports=[helper.make_opsetid("", opset),
                       *(helper.make_opsetid(d, 1) for d in domains)])
    return model


def _vi(name, shape=(2, 3)):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def test_plugin_and_foreign_domain_reasons():
    plugin = helper.make_node(PLUGIN_OP, ["x"], ["y"], domain="", type_id=0)
    fast = helper.make_node("FastGelu", ["y"], ["z"], domain="com.microsoft")
    model = _graph([plugin, fast], [_vi("x")], [_vi("z")], domains=["com.microsoft"])
    table = compatibility_table(model)
    assert f"plugin {PLUGIN_OP} unmappable in trt7.0" in table["trt7.0"]
    assert f"plugin {PLUGIN_OP} removed in trt11" in table["trt11"]
    assert not any(PLUGIN_OP in r for r in table["trt8.4"])
    # a bias-free node divides by zero on 8.6-10.12 (issue 27): the only plugin reason there
    assert [r for r in table["trt8.6"] if PLUGIN_OP in r] == [
        r for r in table["trt8.6"] if "without a bias" in r] != []
    assert f"{PLUGIN_OP} is a TensorRT plugin; onnx cannot run it" in table["onnx"]
    assert "ops from a non-standard domain: com.microsoft.FastGelu" in table["trt10"]
    assert not any("non-standard" in r for r in table["ort"])


def test_ops_inside_subgraphs_count():
    eq = helper.make_node("Einsum", ["x", "x"], ["e"], equation="ij,ij->ij")
    then_g = helper.make_graph([eq], "then", [], [_vi("e")])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["i"])], "else", [],
                               [_vi("i")])
    cond = numpy_helper.from_array(np.array(True), "c")
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    model = _graph([node], [_vi("x")], [_vi("y")])
    model.graph.initializer.append(cond)
    assert "op Einsum unsupported (TensorRT parses it from 8.2)" in incompatibilities(
        model, PROFILES["trt8.0"])
    assert incompatibilities(model, PROFILES["trt8.2"]) == []


def test_inspect_says_what_export_gelu_cannot_fit(tmp_path):
    x = _vi("x", (2, 3))
    eq = helper.make_node("Einsum", ["x", "x"], ["y"], equation="ij,ij->ij")
    path = tmp_path / "einsum.onnx"
    onnx.save(_graph([eq], [x], [_vi("y")], opset=12), str(path))
    res = run_cli("inspect", path, "--json")
    info = json.loads(res.out)
    fit = info["after_export"]["trt8.0"]
    assert fit["fits"] is False
    assert "op Einsum is not parsed by trt8.0" in fit["reason"]
    assert "trt8.2, trt8.4" in fit["reason"]
    assert info["after_export"]["trt8.2"]["fits"] is True
    res = run_cli(path, "--target", "trt8.0", "-o", tmp_path / "o.onnx")
    assert res.code == 3 and "op Einsum is not parsed by trt8.0" in res.err
    assert not (tmp_path / "o.onnx").exists()


def test_inspect_text_lists_the_gelu_sites_and_all_targets(opset20):
    res = run_cli("inspect", opset20, "--no-dry-run")
    lines = res.out.splitlines()
    assert lines[0].endswith("opset 20, IR 10, 2 GELU site(s)") or "2 GELU site(s)" in lines[0]
    assert sum(1 for line in lines if "exact" in line) == 2
    names = [line.split()[0] for line in lines[4:4 + len(PROFILES)]]
    assert names == list(PROFILES)
    assert all(line.startswith("  engine here: ") for line in lines[4 + len(PROFILES):])
