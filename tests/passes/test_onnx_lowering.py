"""The lowering matrix: every recognised shape × every emitted form.

Sources: the zoo of 13 real spellings exported by dynamo (opset 18/19/20) and TorchScript
(13/17), hand-built graphs (TF erf form, commuted operands, Pow and x*x*x, factored tanh,
QuickGELU; after MatMul+Add and on a graph input), and a graph of existing GELU ops.
For each: emitted nodes = sites found, the rewritten graph passes onnx.checker, and ONNX
Runtime gives the input's outputs within 1e-6 wherever the math is kept.
"""

from __future__ import annotations

import copy
import functools
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from export_gelu.passes.onnx.emit import FP16_SAFE_BOUND, PLUGIN_DOMAIN
from export_gelu.passes.onnx.recognise import PLUGIN_OP
from tests.onnx_graphs import (
    EXPORTS,
    HAND_FORMULAS,
    SHAPE,
    E,
    G,
    cast_island_graph,
    existing_ops_graph,
    exported_zoo,
    feed,
    gelu_ref,
    hand_graph,
    max_diff,
    op_counts,
    ort_session_ops,
    rewrite,
    run_ort,
)

SOURCES = [f"{e}{o}" for e, o in EXPORTS] + [f"hand:{f}" for f in sorted(HAND_FORMULAS)] \
    + [f"hand-input:{f}" for f in sorted(HAND_FORMULAS)] + ["existing-ops"]


def source_model(source: str) -> onnx.ModelProto:
    for e, o in EXPORTS:
        if source == f"{e}{o}":
            return exported_zoo(e, o)
    if source == "existing-ops":
        return existing_ops_graph()
    kind, _sep, formula = source.partition(":")
    return hand_graph(formula, bias=kind == "hand")


@functools.cache
def _source_reference(source: str) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    """The feed of `source`'s graph and ONNX Runtime's outputs of the graph as built: run once
    per source for the rows of every target and form (read only)."""
    model = source_model(source)
    inputs = feed(model)
    return inputs, run_ort(model, inputs)


def _opset(model: onnx.ModelProto) -> int:
    return next(i.version for i in model.opset_import if i.domain in ("", "ai.onnx"))


def _kinds(sites) -> Counter[str]:
    return Counter(s.kind for s in sites)


def _check_valid(model: onnx.ModelProto) -> None:
    onnx.checker.check_model(model, full_check=True)
    names = [n.name for n in model.graph.node]
    assert len(names) == len(set(names)), "duplicate node names"
    imported = {i.domain for i in model.opset_import}
    assert {n.domain for n in model.graph.node} - {""} <= imported


# (target, form, precision) → the op each kind must become
FORMS = {
    "ort": {"exact": ("com.microsoft.Gelu", "com.microsoft.BiasGelu"),
            "tanh": ("com.microsoft.FastGelu",), "quick": ("com.microsoft.QuickGelu",)},
    "onnx": {"exact": ("Gelu:none",), "tanh": ("Gelu:tanh",), "quick": ("Sigmoid",)},
    "trt8.6": {"exact": ("Erf",), "tanh": ("Tanh",), "quick": ("Sigmoid",)},
}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt8.6", "trt10"])
@pytest.mark.parametrize("source", SOURCES)
def test_semantics_preserving_lowering(source, target):
    model = source_model(source)
    inputs, before = _source_reference(source)
    out, sites = rewrite(model, target)
    _check_valid(out)
    kinds = _kinds(sites)
    assert sum(kinds.values()) >= 1
    ops = op_counts(out)
    for node in out.graph.node:
        if node.op_type == "Gelu" and not node.domain:
            approx = {a.name: a.s.decode() for a in node.attribute}.get("approximate", "none")
            ops[f"Gelu:{approx}"] += 1
    if target == "trt10":
        target = "onnx"
    if target == "onnx" and _opset(model) < 20:
        target = "trt8.6"  # no Gelu below opset 20: primitives
        assert all("opset" in s.action for s in sites if s.kind != "quick"
                   and "already" not in s.action)
    for kind, n in kinds.items():
        emitted = sum(ops[op] for op in FORMS[target][kind])
        assert emitted == n, f"{kind}: {n} sites but {emitted} × {FORMS[target][kind]}: {ops}"
    if target == "ort":
        assert not {"Erf", "Tanh", "Pow", "Sigmoid"} & set(ops)
    if target == "trt8.6":
        assert ops["Pow"] == 0 and not any("." in k for k in ops)
    assert all(s.added_max_error == 0.0 for s in sites)
    assert max_diff(run_ort(out, inputs), before) <= 1e-6


def test_matmul_bias_is_left_to_orts_gemm_fusion():
    """A static Linear's bias stays an Add: ORT makes MatMul+Add one Gemm (bias epilogue)."""
    model = exported_zoo("dynamo", 18)
    out, sites = rewrite(model, "ort")
    ops = op_counts(out)
    assert ops["com.microsoft.BiasGelu"] == 0 and ops["com.microsoft.Gelu"] == 4
    assert all(len(n.input) == 1 for n in out.graph.node if n.op_type == "FastGelu")
    left = "left for ONNX Runtime's MatMul+Add→Gemm fusion"
    assert sum(left in s.action for s in sites) == 12
    assert not any("folded in" in s.action for s in sites)
    ran = ort_session_ops(out)  # every Linear (13, QuickGELU's too) became a Gemm
    assert ran["Gemm"] == 13 and ran["MatMul"] == 0 and ran["com.microsoft.BiasGelu"] == 0
    inputs = feed(model)
    assert max_diff(run_ort(out, inputs), run_ort(model, inputs)) <= 1e-6


def _linear_gelu(formula: str, a_shape: list, bias_shape: tuple, matmul: bool = True):
    """formula(MatMul(x, W) + b) (or formula(x + b)) with x of `a_shape` (names allowed)."""
    rng = np.random.default_rng(3)
    g = G(opset=17)
    g.inputs.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, a_shape))
    t = g.op("MatMul", "x", g.c(rng.standard_normal((E, E)) * 0.5)) if matmul else "x"
    y = HAND_FORMULAS[formula][1](g, g.add(t, g.c(rng.standard_normal(bias_shape) * 0.5)))
    graph = helper.make_graph(g.nodes, "g", g.inputs,
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, a_shape)],
                              initializer=g.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("case,a_shape,bias_shape,matmul", [
    ("no MatMul before the bias", SHAPE, (E,), False),
    ("dynamic batch (ORT makes no Gemm)", ["batch", 4, E], (E,), True),
    ("[1, E] bias on 3-D input (ORT makes no Gemm)", SHAPE, (1, E), True),
])
@pytest.mark.parametrize("formula,op", [("erf commuted", "BiasGelu"),
                                        ("tanh Pow commuted", "FastGelu")])
def test_bias_is_folded_where_ort_makes_no_gemm(case, a_shape, bias_shape, matmul, formula, op):
    model = _linear_gelu(formula, a_shape, bias_shape, matmul)
    out, (site,) = rewrite(model, "ort")
    ops = op_counts(out)
    assert ops[f"com.microsoft.{op}"] == 1 and ops["Add"] == 0, case
    assert "folded in" in site.action and "Gemm" not in site.action
    assert ort_session_ops(out)["Gemm"] == 0
    inputs = feed(model)
    assert max_diff(run_ort(out, inputs), run_ort(model, inputs)) <= 1e-5
@pytest.mark.parametrize("source", ["dynamo18", "torchscript17", "hand:tanh Pow commuted",
                                    "hand-input:tanh factored"])
def test_fp16_safe_tanh_form_is_the_same_function_in_fp32(source):
    """--precision fp16 on a primitives target: no Pow, bounded tanh argument, equal in fp32."""
    model = source_model(source)
    inputs = {k: v * 10 for k, v in feed(model).items()}  # |x| up to ~100: past the bound
    plain, _s = rewrite(model, "trt8.6")
    safe, sites = rewrite(model, "trt8.6", precision="fp16")
    _check_valid(safe)
    ops = op_counts(safe)
    n_tanh = _kinds(sites)["tanh"]
    clips_before = op_counts(model)["Clip"]  # gelu_10's own Clip
    assert ops["Pow"] == 0 and ops["Clip"] - clips_before == n_tanh == ops["Tanh"]
    assert all("fp16-safe" in s.action for s in sites if s.kind == "tanh")
    as_written = max_diff(run_ort(safe, inputs, optimize=False),
                          run_ort(plain, inputs, optimize=False))
    assert as_written == 0.0  # bit for bit: the bound only acts where tanh is already ±1
    assert max_diff(run_ort(safe, inputs), run_ort(model, inputs)) <= 1e-6 * 100


def test_fp16_safe_form_has_no_overflow_in_fp16():
    """In fp16, x·x·x overflows past |x| = 40.3; the bounded argument never does."""
    model = hand_graph("tanh x*x*x", dtype=TensorProto.FLOAT16, bias=False)
    safe, _sites = rewrite(model, "trt8.6", precision="fp16")
    x = np.array([-60000, -300, -41, -3, 0, 3, 41, 300, 60000], np.float16)
    x = np.resize(x, (2, 4, 16)).astype(np.float16)
    y = run_ort(safe, {"x": x})[0].astype(np.float64)
    assert np.isfinite(y).all()
    ref = gelu_ref(x.astype(np.float64), "tanh")
    assert np.allclose(y, ref, rtol=2e-3, atol=2e-3)
    assert FP16_SAFE_BOUND ** 3 < 65504


@pytest.mark.parametrize("source", SOURCES)
def test_plugin_nodes(source):
    """--gelu plugin: one CustomGeluPluginDynamic per GELU site, with the plugin's attributes;
    QuickGELU stays. ORT cannot run the plugin, so each is swapped for FastGelu(x, bias)
    (the same tanh math) to check the folded bias values."""
    model = source_model(source)
    out, sites = rewrite(model, "trt8.6", "plugin")
    _check_valid(out)
    plugins = [n for n in out.graph.node if n.op_type == PLUGIN_OP]
    kinds = _kinds(sites)
    assert len(plugins) == kinds["exact"] + kinds["tanh"]
    assert op_counts(out)["Sigmoid"] == kinds["quick"]
    for node in plugins:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        assert node.domain == PLUGIN_DOMAIN and len(node.input) == 1 and len(node.output) == 1
        assert attrs["type_id"] == 0 and attrs["plugin_version"] == b"1"
        assert attrs["plugin_namespace"] == b""
        if "bias" in attrs:
            bias = numpy_helper.to_array(attrs["bias"])
            assert bias.dtype == np.float32 and bias.shape == (1, 1, 16)
    for s in sites:
        if s.kind == "exact":
            assert "tanh" in s.action and s.added_max_error == pytest.approx(4.73e-4)
        if s.kind == "tanh":
            assert s.added_max_error == 0.0
    # emulate the plugin with ORT's FastGelu(x, bias): tanh GELU of x + bias
    emulated = copy.deepcopy(out)
    for node in emulated.graph.node:
        if node.op_type != PLUGIN_OP:
            continue
        bias = [a for a in node.attribute if a.name == "bias"]
        inputs = [node.input[0]]
        if bias:
            t = numpy_helper.from_array(numpy_helper.to_array(bias[0].t).reshape(-1),
                                        f"{node.name}/bias")
            emulated.graph.initializer.append(t)
            inputs.append(t.name)
        node.CopyFrom(helper.make_node("FastGelu", inputs, list(node.output), name=node.name,
                                       domain="com.microsoft"))
    emulated.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    inputs, before = _source_reference(source)
    assert max_diff(run_ort(emulated, inputs), before) <= 4.73e-4 + 1e-5
    tanh_only, _s = rewrite(model, "trt8.6", "tanh")
    assert max_diff(run_ort(emulated, inputs), run_ort(tanh_only, inputs)) <= 1e-6


def test_plugin_type_id_follows_the_dtype():
    out, _s = rewrite(hand_graph("tanh x*x*x", dtype=TensorProto.FLOAT16), "trt8.6", "plugin",
                      precision="fp16")
    (node,) = [n for n in out.graph.node if n.op_type == PLUGIN_OP]
    assert {a.name: a.i for a in node.attribute}["type_id"] == 1


@pytest.mark.parametrize("target", ["ort", "trt8.6", "onnx"])
@pytest.mark.parametrize("form,new_kind", [("erf", "exact"), ("tanh", "tanh"),
                                           ("sigmoid", "quick")])
@pytest.mark.parametrize("source", SOURCES)
def test_kind_change_is_opt_in_and_bounded(source, form, new_kind, target):
    """--gelu erf|tanh|sigmoid on an ONNX graph: every exact/tanh site becomes `new_kind`,
    QuickGELU sites stay, the action says so and the error stays within what it states."""
    model = source_model(source)
    out, sites = rewrite(model, target, form)
    _check_valid(out)
    inputs, before = _source_reference(source)
    changed = [s for s in sites if s.kind not in (new_kind, "quick")]
    assert all(f"{s.kind} → {new_kind}" in s.action for s in changed)
    assert len(sites) == len(changed) + sum(s.kind in (new_kind, "quick") for s in sites)
    assert all(s.added_max_error > 0 for s in changed)
    unchanged = [s for s in sites if s not in changed]
    assert all(s.added_max_error == 0 for s in unchanged)
    bound = max(s.added_max_error for s in sites)
    if not changed:  # a QuickGELU graph (never merged) or already of the asked kind
        assert bound == 0.0
    # the stated bounds are the sups rounded to 3 significant digits (exact↔sigmoid is
    # 2.0335e-2, stated 2.03e-2): allow that rounding and fp32 noise, nothing more
    assert max_diff(run_ort(out, inputs), before) <= bound * 1.002 + 2e-6


@pytest.mark.parametrize("formula", ["TF erf Mul(0.7071)", "tanh x*x*x", "QuickGELU"])
@pytest.mark.parametrize("target", ["ort", "trt8.6", "trt8.6-fp16"])
def test_cast_island_keeps_its_fp32_compute(formula, target):
    model = cast_island_graph(formula)
    precision = "fp16" if target.endswith("fp16") else "fp32"
    out, sites = rewrite(model, target.removesuffix("-fp16"), precision=precision)
    _check_valid(out)
    assert len(sites) == 1
    casts = [n for n in out.graph.node if n.op_type == "Cast"]
    assert len(casts) == 2  # the island's own Casts, nothing added
    inputs = feed(model)
    assert max_diff(run_ort(out, inputs), run_ort(model, inputs)) <= 2e-3


@pytest.mark.parametrize("target", ["ort", "trt8.6", "onnx"])
@pytest.mark.parametrize("formula", ["TF erf Mul(0.7071)", "tanh Pow commuted", "QuickGELU"])
def test_fp16_graph_lowering(formula, target):
    model = hand_graph(formula, dtype=TensorProto.FLOAT16, opset=20 if target == "onnx" else 17)
    out, sites = rewrite(model, target, precision="fp16")
    _check_valid(out)
    assert len(sites) == 1 and op_counts(out)["Pow"] == 0
    inputs = feed(model)
    y, y0 = run_ort(out, inputs)[0], run_ort(model, inputs)[0]
    assert y.dtype == np.float16
    assert np.allclose(y.astype(np.float32), y0.astype(np.float32), rtol=4e-3, atol=4e-3)


def test_lowering_twice_changes_nothing_more():
    """A graph already in the target's form is kept as it is (names included)."""
    for target in ("ort", "trt8.6", "onnx"):
        once, sites1 = rewrite(exported_zoo("torchscript", 17), target)
        twice, sites2 = rewrite(once, target)
        assert len(sites2) == len(sites1)
        assert all(s.action.startswith("kept: already") for s in sites2), [
            s.action for s in sites2]
        assert [n.name for n in twice.graph.node] == [n.name for n in once.graph.node]


def test_fp16_safe_form_below_opset_11_uses_clip_attributes():
    model = hand_graph("tanh x*x*x", opset=10)
    safe, _sites = rewrite(model, "trt8.6", precision="fp16")
    _check_valid(safe)
    (clip,) = [n for n in safe.graph.node if n.op_type == "Clip"]
    assert len(clip.input) == 1 and {a.name for a in clip.attribute} == {"min", "max"}
    inputs = feed(model)
    assert max_diff(run_ort(safe, inputs), run_ort(model, inputs)) <= 1e-6


@pytest.mark.parametrize("target", ["ort", "trt8.6", "onnx"])
def test_island_with_one_cast_per_use(target):
    """x16 is cast to fp32 separately for each use inside the formula (as some converters
    write it): the casts of one tensor are one variable; the result stays an fp32 GELU."""
    from tests.onnx_graphs import G

    g = G(TensorProto.FLOAT, opset=20 if target == "onnx" else 17)
    x16 = g.input("x", TensorProto.FLOAT16)

    def up() -> str:
        return g.op("Cast", x16, to=TensorProto.FLOAT)

    t = g.op("Erf", g.mul(up(), g.c(0.7071067811865476)))
    y = g.mul(g.mul(up(), g.c(0.5)), g.add(t, g.c(1.0)))
    model = g.model(g.op("Cast", y, to=TensorProto.FLOAT16), out_dtype=TensorProto.FLOAT16)
    out, sites = rewrite(model, target)
    _check_valid(out)
    assert [s.kind for s in sites] == ["exact"] and "Cast" in sites[0].source
    casts = [n for n in out.graph.node if n.op_type == "Cast"]
    assert len(casts) == 2  # one up-cast of x, the island's own down-cast
    inputs = feed(model)
    assert max_diff(run_ort(out, inputs), run_ort(model, inputs)) <= 2e-3


@pytest.mark.parametrize("formula", ["tanh Pow commuted", "tanh x*x*x", "tanh factored",
                                     "TF erf Mul(0.7071)", "erf commuted"])
@pytest.mark.parametrize("target", ["onnx", "trt8.6"])
def test_primitives_are_the_shapes_ort_fuses_online(formula, target):
    """Below opset 20 a site is re-spelled as primitives: ORT still runs one fused op."""
    rng = np.random.default_rng(4)
    g = G(opset=17)
    h = g.add(g.op("MatMul", g.input(), g.c(rng.standard_normal((E, E)) * 0.5)),
              g.c(rng.standard_normal(E) * 0.5))
    y = HAND_FORMULAS[formula][1](g, h)
    model = g.model(g.op("MatMul", y, g.c(rng.standard_normal((E, E)) * 0.5)))
    out, (site,) = rewrite(model, target)
    tanh = HAND_FORMULAS[formula][0] == "tanh"
    assert ("tanh primitives (factored, no Pow)" if tanh else "erf primitives") in site.action
    assert op_counts(out)["Pow"] == 0 and op_counts(out)["Tanh" if tanh else "Erf"] == 1
    ran = ort_session_ops(out)
    assert ran["com.microsoft.FastGelu" if tanh else "com.microsoft.Gelu"] == 1
    assert ran["Tanh"] == ran["Erf"] == 0
    inputs = feed(model)
    assert max_diff(run_ort(out, inputs), run_ort(model, inputs)) <= 1e-5


def _tanh_site_next_to(half_elsewhere: bool) -> onnx.ModelProto:
    """MatMul → Add → tanh GELU (x·x·x) → MatMul; optionally another output reads h·0.5."""
    rng = np.random.default_rng(5)
    g = G(opset=17)
    h = g.add(g.op("MatMul", g.input(), g.c(rng.standard_normal((E, E)) * 0.5)),
              g.c(rng.standard_normal(E) * 0.5))
    gelu = HAND_FORMULAS["tanh x*x*x"][1](g, h)  # has no h·0.5 node of its own
    y = g.op("MatMul", gelu, g.c(rng.standard_normal((E, E)) * 0.5))
    return g.model(y, g.op("Neg", g.mul(h, g.c(0.5)))) if half_elsewhere else g.model(y)


@pytest.mark.parametrize("half_elsewhere", [True, False])
def test_tanh_primitives_avoid_orts_fusion_bug_when_x_half_is_shared(half_elsewhere):
    """ORT merges equal x·0.5 nodes, then its FastGelu fusion deletes the merged one that
    another consumer still reads (the session refuses the graph): such a site is written
    without an x·0.5 node; every other tanh site keeps the order ORT fuses."""
    model = _tanh_site_next_to(half_elsewhere)
    out, (site,) = rewrite(model, "onnx")
    assert ("not in ONNX Runtime's FastGelu order" in site.action) == half_elsewhere
    inputs = feed(model)
    assert max_diff(run_ort(out, inputs), run_ort(model, inputs)) <= 1e-5  # loads, same math
    assert ort_session_ops(out)["com.microsoft.FastGelu"] == (0 if half_elsewhere else 1)
