"""Graph hygiene: what the passes do not touch stays as it was (weights byte for byte,
external data included, metadata, other nodes), and what they write is valid."""

from __future__ import annotations

import copy
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from export_gelu.passes.onnx import run_onnx_passes
from export_gelu.targets import PROFILES
from tests.onnx_graphs import (
    SHAPE,
    G,
    exported_zoo,
    feed,
    hand_graph,
    max_diff,
    op_counts,
    rewrite,
    run_ort,
)


def _big_model() -> onnx.ModelProto:
    """Linear(256)→GELU(erf, TorchScript shape)→Linear, weights large enough for external data."""
    rng = np.random.default_rng(0)
    g = G(const_nodes=False)
    x = g.input()
    w1 = g.c(rng.standard_normal((16, 256)).astype(np.float32) * 0.1)
    b1 = g.c(rng.standard_normal(256).astype(np.float32) * 0.1)
    h = g.add(g.op("MatMul", x, w1), b1)
    t = g.op("Erf", g.op("Div", h, g.c(math.sqrt(2))))
    y = g.mul(g.mul(h, g.add(t, g.c(1.0))), g.c(0.5))
    out = g.op("MatMul", y, g.c(rng.standard_normal((256, 16)).astype(np.float32) * 0.1))
    graph = helper.make_graph(g.nodes, "g", g.inputs,
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, SHAPE)],
                              initializer=g.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _tensors(model: onnx.ModelProto) -> dict[str, bytes]:
    return {t.name: numpy_helper.to_array(t).tobytes() for t in model.graph.initializer}


@pytest.mark.parametrize("target,form", [("ort", "keep"), ("trt8.6", "tanh"),
                                         ("trt8.6", "plugin")])
def test_external_data_weights_are_preserved_byte_for_byte(tmp_path, target, form):
    path = tmp_path / "in.onnx"
    onnx.save_model(_big_model(), str(path), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="in.onnx.data", size_threshold=1024)
    original = onnx.load(str(path))
    weights = {k: v for k, v in _tensors(original).items() if len(v) > 64}
    assert len(weights) == 3  # W1, b1, W2: large enough to live in in.onnx.data

    # loaded with its data: every weight keeps its bytes (the folded bias is reused as is)
    out, sites = run_onnx_passes(onnx.load(str(path)), PROFILES[target], form)
    assert len(sites) == 1 and sites[0].emitted
    after = _tensors(out)
    for name, data in weights.items():
        if form == "plugin" and name == "c_2":  # the bias became the plugin's attribute
            continue
        assert after[name] == data, name

    # loaded without its data: the external references themselves are untouched
    lazy = onnx.load(str(path), load_external_data=False)
    refs = {t.name: list(t.external_data) for t in lazy.graph.initializer if t.external_data}
    out, _sites = run_onnx_passes(lazy, PROFILES[target], "keep")
    for t in out.graph.initializer:
        if t.name in refs:
            assert list(t.external_data) == refs[t.name]


def test_cli_on_external_data_onnx_keeps_every_weight(tmp_path):
    from tests.conftest import run_cli

    path = tmp_path / "in.onnx"
    onnx.save_model(_big_model(), str(path), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="in.onnx.data", size_threshold=1024)
    data_before = (tmp_path / "in.onnx.data").read_bytes()
    res = run_cli(path, "--target", "ort", "-o", tmp_path / "out.onnx", "--iterations", "0")
    assert res.code == 0, res.err + res.out
    assert (tmp_path / "in.onnx.data").read_bytes() == data_before  # input untouched
    before, after = _tensors(onnx.load(str(path))), _tensors(onnx.load(str(tmp_path / "out.onnx")))
    for name, data in before.items():
        if len(data) > 64:
            assert after[name] == data


def test_untouched_parts_stay_as_they_were():
    model = exported_zoo("dynamo", 18)
    model.metadata_props.append(onnx.StringStringEntryProto(key="owner", value="team-a"))
    model.graph.initializer.append(numpy_helper.from_array(np.arange(4, dtype=np.float32),
                                                           "unused_weight"))
    model.graph.node[0].doc_string = "first node"
    before = copy.deepcopy(model)
    out, sites = run_onnx_passes(model, PROFILES["ort"], "keep")
    replaced = {n for s in sites for n in s.onnx_nodes}
    old_nodes = {n.name: n for n in before.graph.node}
    new_nodes = {n.name: n for n in out.graph.node}
    for name, node in old_nodes.items():
        if name not in replaced and node.op_type != "Constant":
            assert new_nodes[name] == node, name  # attributes, metadata_props, doc_string
    kept_order = [n.name for n in out.graph.node if n.name in old_nodes]
    assert kept_order == [n for n in old_nodes if n in kept_order]
    assert out.metadata_props[-1].value == "team-a"
    assert "unused_weight" in {t.name for t in out.graph.initializer}
    for s in sites:  # emitted nodes keep the module scopes of the node they replace
        for name in s.emitted:
            props = {p.key for p in new_nodes[name].metadata_props}
            assert "pkg.torch.onnx.name_scopes" in props


def test_new_tensors_have_value_info_and_domains_are_imported():
    out, sites = rewrite(exported_zoo("torchscript", 17), "trt8.6", "plugin")
    typed = {v.name: v for v in out.graph.value_info}
    produced = {o for n in out.graph.node for o in n.output}
    graph_outs = {o.name for o in out.graph.output}
    for s in sites:
        for name in s.emitted:
            node = next(n for n in out.graph.node if n.name == name)
            for o in node.output:
                assert o in typed or o in graph_outs, o
    assert produced >= set(typed) & produced
    assert "trt.plugins" in {i.domain for i in out.opset_import}
    out, _s = rewrite(exported_zoo("torchscript", 17), "ort")
    assert ("com.microsoft", 1) in {(i.domain, i.version) for i in out.opset_import}
    inferred = onnx.shape_inference.infer_shapes(out, strict_mode=True)
    assert inferred.graph.value_info


def test_duplicate_node_names_are_made_unique():
    """ONNX Runtime refuses duplicate node names; the rewritten graph has none."""
    model = hand_graph("tanh x*x*x")
    for node in model.graph.node:
        node.name = "same"
    model.graph.node[0].name = ""
    out, sites = rewrite(model, "ort")
    names = [n.name for n in out.graph.node]
    assert len(set(names)) == len(names) and all(names)
    inputs = feed(model)
    assert max_diff(run_ort(out, inputs), run_ort(hand_graph("tanh x*x*x"), inputs)) <= 1e-6


def test_formula_read_inside_a_subgraph_is_not_rewritten():
    """An intermediate that an If branch also reads has another user: the formula stays."""
    g = G()
    x = g.input()
    erf = g.op("Erf", g.mul(x, g.c(1 / math.sqrt(2))))
    y = g.mul(g.mul(g.c(0.5), x), g.add(g.c(1.0), erf))
    branch = helper.make_graph([helper.make_node("Identity", [erf], ["b_out"])], "branch", [],
                               [helper.make_tensor_value_info("b_out", TensorProto.FLOAT, SHAPE)])
    cond = g.c(np.array(True), TensorProto.BOOL)
    g.nodes.append(helper.make_node("If", [cond], ["z"], name="if", then_branch=branch,
                                    else_branch=branch))
    model = g.model(y)
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, SHAPE))
    out, sites = rewrite(model, "ort")
    assert sites == [] and op_counts(out)["Erf"] == 1


def test_gc_paused_restores_the_collector_even_on_error():
    import gc

    from export_gelu.passes.gc_pause import gc_paused

    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    try:
        with gc_paused():
            raise ValueError("boom")
    except ValueError:
        pass
    assert gc.isenabled()
    gc.disable()  # a caller that had it off keeps it off
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
