"""A bias Add whose bias is a graph input: folded where the target's fused op takes the bias
as an input (ONNX Runtime's BiasGelu/FastGelu, as its own online fusion does), kept as an Add
where the op needs a constant (TensorRT's plugin holds its bias as an attribute).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from export_gelu.passes.onnx.recognise import PLUGIN_OP
from tests.onnx_graphs import (
    HAND_FORMULAS,
    SHAPE,
    E,
    G,
    max_diff,
    op_counts,
    ort_session_ops,
    rewrite,
    run_ort,
)


def _bias_input_graph(formula: str | None, bias_shape: list, matmul: bool = False,
                      x_shape: list = SHAPE) -> onnx.ModelProto:
    """y = formula(t + b), t = x (or MatMul(x, W)), with b a graph input of `bias_shape`.

    `formula=None` writes the GELU as ONNX Runtime's contrib `Gelu` op.
    """
    g = G(opset=17)
    g.inputs.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape))
    g.inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, bias_shape))
    t = "x"
    if matmul:
        t = g.op("MatMul", "x", g.c(np.random.default_rng(2).standard_normal((E, E)) * 0.5))
    a = g.add(t, "b")
    y = g.op("Gelu", a, domain="com.microsoft") if formula is None \
        else HAND_FORMULAS[formula][1](g, a)
    graph = helper.make_graph(g.nodes, "g", g.inputs,
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, x_shape)],
                              initializer=g.inits)
    opsets = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, 1) for d in g.domains]
    model = helper.make_model(graph, opset_imports=opsets)
    onnx.checker.check_model(model, full_check=True)
    return model


def _feed(bias_shape: list) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"x": (rng.standard_normal(SHAPE) * 3).astype(np.float32),
            "b": rng.standard_normal(bias_shape).astype(np.float32)}


def test_ort_itself_folds_a_graph_input_bias():
    """The premise: ORT's online BiasGelu fusion takes a rank-1 bias that is a graph input."""
    ran = ort_session_ops(_bias_input_graph(None, [E]))
    assert ran["com.microsoft.BiasGelu"] == 1 and ran["Add"] == 0


@pytest.mark.parametrize("matmul,x_shape", [(False, SHAPE), (True, ["batch", 4, E])])
@pytest.mark.parametrize("formula,op", [("erf commuted", "BiasGelu"),
                                        ("tanh Pow commuted", "FastGelu"),
                                        (None, "BiasGelu")])
def test_graph_input_bias_is_folded_for_ort(formula, op, matmul, x_shape):
    model = _bias_input_graph(formula, [E], matmul, x_shape)
    out, (site,) = rewrite(model, "ort")
    onnx.checker.check_model(out, full_check=True)
    ops = op_counts(out)
    assert ops[f"com.microsoft.{op}"] == 1 and ops["Add"] == 0
    (fused,) = [n for n in out.graph.node if n.op_type == op]
    assert list(fused.input)[1] == "b"
    assert "folded in" in site.action and "graph input" in site.action
    assert ort_session_ops(out)[f"com.microsoft.{op}"] == 1
    inputs = _feed([E])
    assert max_diff(run_ort(out, inputs), run_ort(model, inputs)) <= 1e-5


@pytest.mark.parametrize("bias_shape", [[1, E], [1], ["e"]])
def test_graph_input_bias_ort_cannot_take_stays_an_add(bias_shape):
    """Not rank 1, not the last axis' length, or a length unknown: the Add stays."""
    model = _bias_input_graph("erf commuted", bias_shape)
    out, (site,) = rewrite(model, "ort")
    ops = op_counts(out)
    assert ops["Add"] == 1 and ops["com.microsoft.Gelu"] == 1 and ops["com.microsoft.BiasGelu"] == 0
    assert "folded in" not in site.action
    inputs = _feed([1, E] if bias_shape == [1, E] else [1] if bias_shape == [1] else [E])
    assert max_diff(run_ort(out, inputs), run_ort(model, inputs)) <= 1e-5


def test_plugin_keeps_a_graph_input_bias_add():
    """TensorRT's CustomGeluPluginDynamic takes its bias as an attribute (a constant): a bias
    read at run time cannot be written there, so the Add stays before the plugin node."""
    model = _bias_input_graph("tanh Pow commuted", [E])
    out, (site,) = rewrite(model, "trt8.6", "plugin")
    ops = op_counts(out)
    assert ops["Add"] == 1 and ops[f"trt.plugins.{PLUGIN_OP}"] == 1
    (add,) = [n for n in out.graph.node if n.op_type == "Add"]
    (plugin,) = [n for n in out.graph.node if n.op_type == PLUGIN_OP]
    assert "b" in add.input and plugin.input[0] == add.output[0]
    bias = {a.name: helper.get_attribute_value(a) for a in plugin.attribute}["bias"]
    assert not onnx.numpy_helper.to_array(bias).any()  # the zero bias every site gets
    assert "folded in" not in site.action
    # ORT cannot run the plugin: run its math, FastGelu(x, its bias), in its place
    zeros = onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(bias).reshape(-1), "zb")
    out.graph.initializer.append(zeros)
    plugin.CopyFrom(helper.make_node("FastGelu", [plugin.input[0], "zb"], list(plugin.output),
                                     name=plugin.name, domain="com.microsoft"))
    out.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    inputs = _feed([E])
    assert max_diff(run_ort(out, inputs), run_ort(model, inputs)) <= 1e-5


@pytest.mark.parametrize("target", ["onnx", "trt8.6"])
def test_targets_without_a_bias_input_keep_the_add(target):
    model = _bias_input_graph("erf commuted", [E])
    out, (site,) = rewrite(model, target)
    assert op_counts(out)["Add"] >= 1 and "folded in" not in site.action
    inputs = _feed([E])
    assert max_diff(run_ort(out, inputs), run_ort(model, inputs)) <= 1e-5


def test_graph_input_bias_of_a_static_linear_is_left_to_orts_gemm_fusion():
    """As with a constant bias: ORT's MatMul+Add→Gemm fusion takes a rank-1 graph input too."""
    model = _bias_input_graph("erf commuted", [E], matmul=True)
    out, (site,) = rewrite(model, "ort")
    assert op_counts(out)["Add"] == 1 and "Gemm fusion" in site.action
    ran = ort_session_ops(out)
    assert ran["Gemm"] == 1 and ran["com.microsoft.BiasGelu"] == 0
    inputs = _feed([E])
    assert max_diff(run_ort(out, inputs), run_ort(model, inputs)) <= 1e-5


# -- the fold rule's general form: ONNX Runtime's `bias_gelu_fusion_add_inputs_swapped` ------

def _swapped_graph(bias_kind: str, *, identity: bool, swapped: bool) -> onnx.ModelProto:
    """The shape of ONNX Runtime's `bias_gelu_fusion_add_inputs_swapped` test graph, built
    here: Identity nodes before the Add (`identity`), the bias the Add's first operand
    (`swapped`), an erf GELU written out after it (Div/Erf/Add/Mul/Mul, scalar initializers),
    x of shape [n, s, E] with symbolic leading dims, the bias `[E]` a graph input, an
    initializer or a `Constant` node (`bias_kind`)."""
    rng = np.random.default_rng(3)
    bias = (rng.standard_normal(E) * 0.5).astype(np.float32)
    inputs = [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["n", "s", E])]
    inits = [onnx.numpy_helper.from_array(np.array(v, np.float32), name)
             for name, v in (("div_c", 2 ** 0.5), ("half", 0.5), ("one", 1.0))]
    nodes = []
    if bias_kind == "input":
        inputs.append(helper.make_tensor_value_info("B", TensorProto.FLOAT, [E]))
    elif bias_kind == "initializer":
        inits.append(onnx.numpy_helper.from_array(bias, "B"))
    else:
        nodes.append(helper.make_node("Constant", [], ["B"], name="bias_const",
                                      value=onnx.numpy_helper.from_array(bias)))
    a, b = "A", "B"
    if identity:
        nodes += [helper.make_node("Identity", ["A"], ["A_out"], name="identity_A"),
                  helper.make_node("Identity", ["B"], ["B_out"], name="identity_B")]
        a, b = "A_out", "B_out"
    nodes += [
        helper.make_node("Add", [b, a] if swapped else [a, b], ["s0"], name="bias_add"),
        helper.make_node("Div", ["s0", "div_c"], ["d"], name="div"),
        helper.make_node("Mul", ["s0", "half"], ["m"], name="mul0"),
        helper.make_node("Erf", ["d"], ["e"], name="erf"),
        helper.make_node("Add", ["e", "one"], ["e1"], name="add1"),
        helper.make_node("Mul", ["m", "e1"], ["C"], name="mul1"),
    ]
    graph = helper.make_graph(nodes, "swapped", inputs, [helper.make_tensor_value_info(
        "C", TensorProto.FLOAT, ["u", "v", E])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


def _swapped_feed(bias_kind: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feed = {"A": (rng.standard_normal((2, 5, E)) * 3).astype(np.float32)}
    if bias_kind == "input":
        feed["B"] = rng.standard_normal(E).astype(np.float32)
    return feed


_FORMS = [pytest.param(kind, identity, swapped, id=f"{kind}-{'identity' if identity else 'bare'}"
                       f"-{'swapped' if swapped else 'x first'}")
          for kind in ("input", "initializer", "constant node")
          for identity in (True, False) for swapped in (True, False)]


@pytest.mark.parametrize("bias_kind,identity,swapped", _FORMS)
def test_every_form_of_the_bias_add_folds_for_ort_as_ort_folds_it(bias_kind, identity, swapped):
    """ORT's BiasGelu fusion takes the bias from either operand, constant or read at run time,
    through Identity nodes; so does ours: one BiasGelu(x, bias), no Add, x first."""
    model = _swapped_graph(bias_kind, identity=identity, swapped=swapped)
    assert ort_session_ops(model)["com.microsoft.BiasGelu"] == 1  # the premise, each form
    out, (site,) = rewrite(model, "ort")
    onnx.checker.check_model(out, full_check=True)
    ops = op_counts(out)
    assert ops["com.microsoft.BiasGelu"] == 1 and ops["Add"] == 0, ops
    (fused,) = [n for n in out.graph.node if n.op_type == "BiasGelu"]
    assert list(fused.input) == (["A_out", "B_out"] if identity and bias_kind == "input"
                                 else ["A_out" if identity else "A", "B"])
    assert "bias Add bias_add folded in" in site.action
    runtime = "its bias B is a graph input, read at run time"
    assert (runtime in site.action) == (bias_kind == "input")
    # no Identity is left reading nothing: the one before a folded constant goes with the Add
    used = {i for n in out.graph.node for i in n.input} | {o.name for o in out.graph.output}
    assert all(o in used for n in out.graph.node for o in n.output)
    feed = _swapped_feed(bias_kind)
    assert max_diff(run_ort(out, feed), run_ort(model, feed, optimize=False)) <= 1e-5


@pytest.mark.parametrize("bias_kind", ["input", "initializer", "constant node"])
def test_swapped_bias_in_the_plugin_folds_when_constant(bias_kind):
    """The plugin's bias is an attribute: a constant one (through Identity, either order)
    folds into it; one read at run time stays an Add before the plugin."""
    model = _swapped_graph(bias_kind, identity=True, swapped=True)
    out, (site,) = rewrite(model, "trt8.6", "plugin")
    ops = op_counts(out)
    assert ops[f"trt.plugins.{PLUGIN_OP}"] == 1
    (plugin,) = [n for n in out.graph.node if n.op_type == PLUGIN_OP]
    bias = onnx.numpy_helper.to_array(
        {a.name: helper.get_attribute_value(a) for a in plugin.attribute}["bias"]).reshape(-1)
    if bias_kind == "input":
        assert ops["Add"] == 1 and not bias.any() and "folded in" not in site.action
    else:
        assert ops["Add"] == 0 and "folded in" in site.action
        expected = (np.random.default_rng(3).standard_normal(E) * 0.5).astype(np.float32)
        np.testing.assert_array_equal(bias.astype(np.float32), expected)
