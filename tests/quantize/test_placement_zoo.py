"""Placement on every GELU of the zoo, in every form the passes write, at INT8 and FP8: the
products on both sides of each GELU are quantized, and no QuantizeLinear/DequantizeLinear
reads, writes or sits inside any GELU site."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto

from export_gelu import graph as G
from export_gelu.passes.onnx import run_onnx_passes
from export_gelu.passes.onnx.recognise import find_matches
from export_gelu.quantize import TensorRange, lower, plan_quantization, route_for
from export_gelu.targets import resolve_profile
from tests.gelu_zoo import SPELLINGS
from tests.quantize.zoo_graph import FEATURES, zoo_products_module
from tests.session_cache import SessionCache

QDQ = ("QuantizeLinear", "DequantizeLinear")

#: (graph exported for, --gelu form applied to it, the target whose route lowers it, the
#: precisions that target takes at that graph's opset, what the sites must look like).
CASES = [
    ("trt8.6", "keep", "trt8.6", ("int8",), "Erf"),
    ("trt8.6", "erf", "trt8.6", ("int8",), "Erf"),
    ("trt8.6", "tanh", "trt8.6", ("int8",), "Tanh"),
    ("trt8.6", "sigmoid", "trt8.6", ("int8",), "Sigmoid"),
    ("trt8.6", "plugin", "trt8.6", ("int8",), "CustomGeluPluginDynamic"),
    ("trt10", "keep", "trt10", ("int8", "fp8"), "Gelu"),
    ("trt10", "tanh", "trt10", ("int8", "fp8"), "Gelu"),
    ("trt10", "sigmoid", "trt10", ("int8", "fp8"), "Sigmoid"),
    ("trt10", "plugin", "trt10", ("int8", "fp8"), "CustomGeluPluginDynamic"),
    ("trt10", "keep@ort", "ort", ("int8", "fp8"), "com.microsoft"),
]


def _export(target: str, folder: Path) -> None:
    import torch

    from export_gelu import api

    api.export(zoo_products_module(), args=(torch.randn(4, FEATURES),), target=target,
               output=folder / "model.onnx", verify=False)


@pytest.fixture(scope="module")
def zoo_graph(session_cache: SessionCache) -> Callable[[str, str], onnx.ModelProto]:
    def get(target: str, form: str) -> onnx.ModelProto:
        folder = session_cache.folder(f"quant-zoo-{target}", lambda f: _export(target, f))
        model = onnx.load(str(folder / "model.onnx"))
        gelu, _, profile_name = form.partition("@")
        model, _ = run_onnx_passes(model, resolve_profile(profile_name or target), gelu)
        return model

    return get


def _site_view(model: onnx.ModelProto) -> tuple[int, set[str], set[str], set[str], str]:
    """(sites, their inner and input tensors, their node names, tensors Q/DQ touch, ops)."""
    with G.opened(model) as graph:
        matches = find_matches(graph)
        inner = {m.x.name for m in matches}
        inner |= {t.name for m in matches for n in m.nodes for t in n.outputs
                  if t is not m.output}
        nodes = {n.name for m in matches for n in m.nodes}
        touched = {t.name for n in graph.nodes if n.op in QDQ for t in (*n.inputs, *n.outputs)}
        ops = " ".join(sorted({f"{n.domain} {n.op}" for m in matches for n in m.nodes}))
    return len(matches), inner, nodes, touched, ops


def _dq_fed_products(model: onnx.ModelProto) -> tuple[int, int]:
    """(products with a constant weight, those whose two inputs are DequantizeLinear's)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    total = fed = 0
    for n in model.graph.node:
        if n.op_type not in ("MatMul", "Gemm"):
            continue
        srcs = [producer.get(i) for i in n.input[:2]]
        if any(s is not None and s.op_type == "DequantizeLinear" for s in srcs) or any(
                i in {t.name for t in model.graph.initializer} for i in n.input[:2]):
            total += 1
            fed += all(s is not None and s.op_type == "DequantizeLinear" for s in srcs)
    return total, fed


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def test_every_gelu_form_stays_whole(zoo_graph, case) -> None:
    exported, form, target, precisions, site_op = case
    model = zoo_graph(exported, form)
    sites, inner, _, _, ops = _site_view(model)
    assert sites == len(SPELLINGS), ops
    assert site_op in ops
    for precision in precisions:
        plan = plan_quantization(model, precision)
        # every Linear on both sides of every GELU: two products per branch, none skipped
        assert len(plan.points) == plan.weight_products >= 2 * len(SPELLINGS)
        assert not set(plan.activations) & inner
        ranges = {t: TensorRange(-4.0, 4.0) for t in plan.activations}
        quantized = lower(model, plan, ranges, route_for(resolve_profile(target), precision))
        out = quantized.model
        onnx.checker.check_model(out)
        after, inner_after, site_nodes, touched, _ = _site_view(out)
        assert after == sites  # no site was cut: each is still recognised whole
        assert not touched & inner_after, touched & inner_after
        assert not {n.name for n in out.graph.node if n.op_type in QDQ} & site_nodes
        total, fed = _dq_fed_products(out)
        assert fed == total == len(plan.points)
        zp_type = TensorProto.FLOAT8E4M3FN if precision == "fp8" else TensorProto.INT8
        zps = {i.name: i.data_type for i in out.graph.initializer}
        q_types = {zps[n.input[2]] for n in out.graph.node if n.op_type in QDQ}
        assert q_types == {zp_type}


def test_a_product_reading_inside_a_gelu_is_left_in_float() -> None:
    """x → Linear → h → GELU formula, and a second Linear reading h, the site's input: that
    product stays in float (quantizing h would make TensorRT write it out in INT8 and cut
    the product → GELU fusion), named in the plan with why."""
    import numpy as np
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    w1, w2 = (numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), n)
              for n in ("w1", "w2"))
    consts = [numpy_helper.from_array(np.float32(v), n) for n, v in
              (("r2", 2 ** 0.5), ("one", 1.0), ("half", 0.5))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Div", ["h", "r2"], ["u"], name="div"),
             helper.make_node("Erf", ["u"], ["e"], name="erf"),
             helper.make_node("Add", ["e", "one"], ["a"], name="add"),
             helper.make_node("Mul", ["h", "a"], ["m"], name="mul"),
             helper.make_node("Mul", ["m", "half"], ["y"], name="mul2"),
             helper.make_node("MatMul", ["h", "w2"], ["z"], name="peek")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 8]) for n in ("y", "z")],
        [w1, w2, *consts])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    plan = plan_quantization(model, "int8")
    assert [p.node for p in plan.points] == ["fc1"]
    (skip,) = [s for s in plan.skipped if s.node == "peek"]
    assert "inside a GELU site" in skip.reason
