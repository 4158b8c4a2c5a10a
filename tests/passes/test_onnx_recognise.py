"""Recognition: every GELU spelling is found in graphs made by both torch exporters at several
opsets and in hand-built graphs; decoys are not."""

from __future__ import annotations

import math

import onnx
import pytest
from onnx import TensorProto

from export_gelu.passes.onnx import find_sites
from export_gelu.passes.onnx.exporter_shapes import SHAPES
from tests.onnx_graphs import (
    EXISTING_KINDS,
    EXPORTS,
    HAND_FORMULAS,
    SPELLING_NAMES,
    G,
    cast_island_graph,
    existing_ops_graph,
    exported_zoo,
    hand_graph,
    spelling_kinds,
)


def site_per_output(model: onnx.ModelProto, sites) -> dict[str, object]:
    """graph output → the site whose output feeds it (directly or through one Clip)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    by_root_out = {}
    for s in sites:
        node = next(n for n in model.graph.node if n.name == s.name)
        by_root_out[node.output[0]] = s
    found = {}
    for out in model.graph.output:
        tensor = out.name
        for _ in range(3):
            if tensor in by_root_out:
                found[out.name] = by_root_out[tensor]
                break
            node = producer.get(tensor)
            if node is None or not node.input:
                break
            tensor = node.input[0]
    return found


@pytest.mark.parametrize("exporter,opset", EXPORTS, ids=[f"{e}{o}" for e, o in EXPORTS])
def test_every_spelling_is_found_in_every_export(exporter, opset):
    model = exported_zoo(exporter, opset)
    sites = find_sites(model)
    kinds = spelling_kinds()
    per_output = site_per_output(model, sites)
    assert len(sites) == len(SPELLING_NAMES)
    for i, name in enumerate(SPELLING_NAMES):
        site = per_output.get(f"y{i}")
        assert site is not None, f"{name}: no site found ({exporter} {opset})"
        assert site.kind == kinds[name], f"{name}: {site.kind} ({site.source})"
        assert site.onnx_nodes and site.level == "onnx"


@pytest.mark.parametrize("exporter,opset", EXPORTS, ids=[f"{e}{o}" for e, o in EXPORTS])
def test_exporter_shapes_name_the_exporter(exporter, opset):
    sites = find_sites(exported_zoo(exporter, opset))
    per_output = site_per_output(exported_zoo(exporter, opset), sites)
    gelu = per_output["y0"]  # nn.GELU
    if opset >= 20:
        assert gelu.source == "ONNX Gelu(approximate=none)"
    else:
        assert gelu.source.startswith("F.gelu(x), as exported by ")
        assert exporter in gelu.source and str(opset) in gelu.source
    commuted = per_output["y10"]  # "erf, commuted": no exporter shape; a formula match
    assert commuted.source.startswith("erf formula")


def test_exporter_shapes_are_what_the_installed_torch_exports():
    """Regenerating the derived table with this torch gives the stored table."""
    from export_gelu.exporter.derive_shapes import derive, render

    assert render(derive()) == render(list(SHAPES)), (
        "torch exports GELU differently now: run "
        "`python -m export_gelu.exporter.derive_shapes --write`")


@pytest.mark.parametrize("const_nodes", [False, True], ids=["initializers", "Constant-nodes"])
@pytest.mark.parametrize("bias", [True, False], ids=["after-MatMul-Add", "graph-input"])
@pytest.mark.parametrize("formula", sorted(HAND_FORMULAS))
def test_hand_built_formulas(formula, bias, const_nodes):
    model = hand_graph(formula, bias=bias, const_nodes=const_nodes)
    sites = find_sites(model)
    assert [s.kind for s in sites] == [HAND_FORMULAS[formula][0]]
    if const_nodes:
        assert "Constant nodes" in sites[0].source or "as exported" in sites[0].source


@pytest.mark.parametrize("formula", ["TF erf Mul(0.7071)", "tanh Pow commuted", "QuickGELU"])
def test_fp16_graph_with_fp16_literals(formula):
    sites = find_sites(hand_graph(formula, dtype=TensorProto.FLOAT16))
    assert [s.kind for s in sites] == [HAND_FORMULAS[formula][0]]


@pytest.mark.parametrize("formula", ["TF erf Mul(0.7071)", "tanh x*x*x", "QuickGELU"])
def test_fp16_graph_with_fp32_cast_island(formula):
    model = cast_island_graph(formula)
    sites = find_sites(model)
    assert [s.kind for s in sites] == [HAND_FORMULAS[formula][0]]


def test_existing_gelu_ops():
    sites = find_sites(existing_ops_graph())
    assert [s.kind for s in sites] == EXISTING_KINDS
    assert [s.source for s in sites] == [
        "ONNX Gelu(approximate=none)", "ONNX Gelu(approximate=tanh)", "com.microsoft Gelu",
        "com.microsoft FastGelu", "com.microsoft BiasGelu", "com.microsoft QuickGelu"]


# -- decoys -----------------------------------------------------------------------------------

def _wrong_beta(g: G, x: str) -> str:
    cube = g.mul(x, g.mul(x, x))
    inner = g.mul(g.c(0.7978845608), g.add(x, g.mul(g.c(0.05), cube)))
    return g.mul(g.mul(g.c(0.5), x), g.add(g.c(1.0), g.op("Tanh", inner)))


def _wrong_scale(g: G, x: str) -> str:
    t = g.op("Erf", g.mul(x, g.c(0.8)))
    return g.mul(g.mul(g.c(0.5), x), g.add(g.c(1.0), t))


def _sigmoid_15(g: G, x: str) -> str:
    return g.mul(x, g.op("Sigmoid", g.mul(g.c(1.5), x)))


def _quickgelu_alpha_1(g: G, x: str) -> str:
    return g.op("QuickGelu", x, domain="com.microsoft", alpha=1.0)


@pytest.mark.parametrize("decoy", [_wrong_beta, _wrong_scale, _sigmoid_15, _quickgelu_alpha_1])
def test_decoys_are_not_sites(decoy):
    g = G()
    model = g.model(decoy(g, g.input()))
    assert find_sites(model) == []


def test_shared_intermediate_is_not_rewritten():
    """erf's output also feeds a second graph output: the formula must stay."""
    g = G()
    x = g.input()
    erf = g.op("Erf", g.mul(x, g.c(1 / math.sqrt(2))))
    y = g.mul(g.mul(g.c(0.5), x), g.add(g.c(1.0), erf))
    model = g.model(y, erf)
    assert find_sites(model) == []


def test_intermediate_that_is_a_graph_output_is_not_rewritten():
    g = G()
    x = g.input()
    half_x = g.mul(x, g.c(0.5))
    y = g.mul(half_x, g.add(g.c(1.0), g.op("Erf", g.mul(x, g.c(1 / math.sqrt(2))))))
    assert find_sites(g.model(y, half_x)) == []


@pytest.mark.parametrize("literal,ok", [(0.7978845608, True), (0.79788456, True),
                                        (math.sqrt(2 / math.pi), True), (0.7979, True),
                                        (0.798, False), (0.8, False)])
def test_literal_tolerance(literal, ok):
    g = G()
    x = g.input()
    inner = g.mul(g.c(literal), g.add(x, g.mul(g.c(0.044715), g.mul(x, g.mul(x, x)))))
    y = g.mul(g.mul(g.c(0.5), x), g.add(g.c(1.0), g.op("Tanh", inner)))
    assert len(find_sites(g.model(y))) == (1 if ok else 0)


def test_find_sites_does_not_change_the_graph():
    model = hand_graph("tanh x*x*x")
    before = model.SerializeToString()
    find_sites(model)
    assert model.SerializeToString() == before
