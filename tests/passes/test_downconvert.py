"""Opset down-conversion and the ONNX-level fits (LayerNormalization expansion, IsNaN, folding):
each adapter on a hand-built graph run in ONNX Runtime before and after, then real exports
of BERT, GPT-2 and ViT brought down to TensorRT 7.0 / 8.2 / 8.4."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from export_gelu.errors import TargetUnmetError
from export_gelu.parse_check import incompatibilities, model_opset
from export_gelu.passes.compat import fit_to_profile
from export_gelu.passes.compat.opset.downconvert import downconvert
from export_gelu.targets import PROFILES
from tests.conftest import run_cli

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def one_node_model(node: onnx.NodeProto, inputs: dict[str, np.ndarray], opset: int,
                   outputs: int = 1, inits: dict[str, np.ndarray] | None = None,
                   extra: list[onnx.NodeProto] | None = None) -> onnx.ModelProto:
    """A graph of `node` (plus `extra` nodes before it) with typed inputs and free outputs."""
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in inputs.items()]
    outs = [onnx.ValueInfoProto(name=o) for o in list(node.output)[:outputs]]
    graph = helper.make_graph([*(extra or []), node], "g", ins, outs,
                              [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)


def assert_same_after(model: onnx.ModelProto, feed: dict[str, np.ndarray], target: int,
                      exact: bool = True) -> onnx.ModelProto:
    """Down-convert a copy to `target`; it must pass the checker and give the same outputs."""
    before = run(model, feed)
    conv = onnx.ModelProto()
    conv.CopyFrom(model)
    downconvert(conv, target)
    assert model_opset(conv) == target
    onnx.checker.check_model(conv, full_check=True)
    after = run(conv, feed)
    assert len(after) == len(before)
    for a, b in zip(after, before):
        assert a.shape == b.shape
        if exact:
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    return conv


def ops(model: onnx.ModelProto) -> Counter[str]:
    return Counter(n.op_type for n in model.graph.node)


@pytest.mark.parametrize("target", [17, 13, 11])
@pytest.mark.parametrize("size", [9, 10])
def test_split18_num_outputs(size, target):
    x = RNG.standard_normal((2, size)).astype(np.float32)
    node = helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3)
    conv = assert_same_after(one_node_model(node, {"x": x}, 18, outputs=3), {"x": x}, target)
    assert [o.name for o in conv.graph.output] == ["a", "b", "c"]


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceSum", "ReduceL2"])
@pytest.mark.parametrize("target", [17, 13, 11])
def test_reduce_axes_input_becomes_attribute(op, target):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)
    model = one_node_model(node, {"x": x}, 18, inits={"axes": np.array([-1, 1], np.int64)})
    conv = assert_same_after(model, {"x": x}, target, exact=False)
    if target < (13 if op == "ReduceSum" else 18):
        (red,) = [n for n in conv.graph.node if n.op_type == op]
        assert len(red.input) == 1
        assert list(helper.get_attribute_value(red.attribute[-1])) == [-1, 1]


def test_reduce_noop_with_empty_axes_is_identity():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    node = helper.make_node("ReduceMean", ["x"], ["y"], noop_with_empty_axes=1)
    conv = assert_same_after(one_node_model(node, {"x": x}, 18), {"x": x}, 13)
    assert ops(conv) == {"Identity": 1}


@pytest.mark.parametrize("op", ["Squeeze", "Unsqueeze"])
def test_squeeze_axes_input_becomes_attribute(op):
    x = RNG.standard_normal((2, 1, 3)).astype(np.float32)
    axes = np.array([1] if op == "Squeeze" else [0, 3], np.int64)
    model = one_node_model(helper.make_node(op, ["x", "axes"], ["y"]), {"x": x}, 13,
                           inits={"axes": axes})
    assert_same_after(model, {"x": x}, 11)


def test_pad18_axes_expand_to_full_rank():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    node = helper.make_node("Pad", ["x", "pads", "", "axes"], ["y"], mode="constant")
    model = one_node_model(node, {"x": x}, 18, inits={"pads": np.array([1, 2, 0, 3], np.int64),
                                                      "axes": np.array([0, -1], np.int64)})
    conv = assert_same_after(model, {"x": x}, 13)
    assert len(conv.graph.node[0].input) <= 3


def test_resize13_empty_roi_and_scales_get_tensors_for_opset11():
    x = RNG.standard_normal((1, 1, 4, 4)).astype(np.float32)
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest")
    model = one_node_model(node, {"x": x}, 13, inits={"sizes": np.array([1, 1, 8, 8], np.int64)})
    assert_same_after(model, {"x": x}, 11)


def test_shape15_start_end_becomes_slice():
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    node = helper.make_node("Shape", ["x"], ["y"], start=1, end=-1)
    conv = assert_same_after(one_node_model(node, {"x": x}, 15), {"x": x}, 13)
    assert ops(conv) == {"Shape": 1, "Slice": 1}


@pytest.mark.parametrize("axis", [-1, 2, 1, 0])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax13_axis_semantics_kept_below_13(op, axis):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    node = helper.make_node(op, ["x"], ["y"], axis=axis)
    conv = assert_same_after(one_node_model(node, {"x": x}, 13), {"x": x}, 11, exact=False)
    assert ops(conv)["Transpose"] == (0 if axis in (-1, 2) else 2)


def test_constant_value_floats_and_dropout_and_reshape_allowzero():
    x = RNG.standard_normal((2, 6)).astype(np.float32)
    const = helper.make_node("Constant", [], ["c"], value_floats=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    drop = helper.make_node("Dropout", ["x"], ["d"])
    add = helper.make_node("Add", ["d", "c"], ["s"])
    node = helper.make_node("Reshape", ["s", "shape"], ["y"], allowzero=1)
    model = one_node_model(node, {"x": x}, 14, inits={"shape": np.array([3, 4], np.int64)},
                           extra=[const, drop, add])
    conv = assert_same_after(model, {"x": x}, 11)
    assert ops(conv)["Dropout"] == 0


def test_an_op_that_cannot_come_down_is_named():
    x = RNG.standard_normal((4, 4)).astype(np.float32)
    model = one_node_model(helper.make_node("Trilu", ["x"], ["y"]), {"x": x}, 14)
    with pytest.raises(TargetUnmetError, match="Trilu exists only from opset 14"):
        downconvert(model, 13)


@pytest.mark.parametrize("bounds", [("lo", "hi"), ("lo", ""), ("", "hi")])
def test_integer_clip_comes_down_to_11_as_where(bounds):
    """Clip takes integers from opset 12 (DeBERTa's clamped relative positions, trt7.0 was
    exit 3): below it the exact Where/Less/Greater form, on values past float32's 2**24."""
    x = np.array([[-(2**40) - 1, -7, -3, 0, 2, 3, 9, 2**40 + 1]], np.int64)
    node = helper.make_node("Clip", ["x", *bounds], ["y"])
    inits = {"lo": np.array(-3, np.int64), "hi": np.array(2**33 + 1, np.int64)}
    model = one_node_model(node, {"x": x}, 13, inits={k: v for k, v in inits.items()
                                                      if k in bounds})
    conv = assert_same_after(model, {"x": x}, 11)
    assert ops(conv)["Clip"] == 0 and ops(conv)["Where"] == len([b for b in bounds if b])


@pytest.mark.parametrize("op", ["Max", "Min"])
@pytest.mark.parametrize("count", [1, 2, 3])
def test_integer_max_and_min_come_down_to_11_as_where(op, count):
    """Max/Min take integers from opset 12 (Qwen3's and Pegasus' int64 size arithmetic,
    trt7.0 was exit 3): below it Where(Greater/Less), broadcasting, past 2**24."""
    x = np.array([[-(2**40) - 1, -7, 0, 2**40 + 1]], np.int64)
    inits = {"b": np.array([[3], [-(2**40)]], np.int64), "c": np.array(2**40, np.int64)}
    names = ["x", "b", "c"][:count]
    node = helper.make_node(op, names, ["y"])
    model = one_node_model(node, {"x": x}, 13, inits={k: inits[k] for k in names[1:]})
    conv = assert_same_after(model, {"x": x}, 11)
    assert ops(conv)[op] == 0 and ops(conv)["Where"] == count - 1


def test_a_type_the_target_lacks_names_the_opset_and_targets_that_take_it():
    x = np.zeros((2, 3), np.int32)
    model = one_node_model(helper.make_node("Relu", ["x"], ["y"]), {"x": x}, 14)
    with pytest.raises(TargetUnmetError, match=r"Relu input type tensor\(int32\) is not "
                                               r"allowed at opset 13, only from opset 14 "
                                               r"\(targets whose opset takes it: onnx, ort, "
                                               r"trt8\.4–trt11\)"):
        downconvert(model, 13)
    # an op newer than the target names the first opset it exists at, not the model's
    model = one_node_model(helper.make_node("Mod", ["x", "x"], ["y"]), {"x": x}, 13)
    with pytest.raises(TargetUnmetError, match=r"Mod exists only from opset 10 \(targets "
                                               r"whose opset takes it: onnx, ort, "
                                               r"trt8\.5–trt11\)"):
        downconvert(model, 9)


def test_trilu_on_constants_is_folded_for_old_trt():
    x = RNG.standard_normal((4, 4)).astype(np.float32)
    tri = helper.make_node("Trilu", ["c"], ["t"])
    node = helper.make_node("Add", ["x", "t"], ["y"])
    model = one_node_model(node, {"x": x}, 14, inits={"c": np.ones((4, 4), np.float32)},
                           extra=[tri])
    want = run(model, {"x": x})[0]
    fitted, notes = fit_to_profile(model, PROFILES["trt8.2"])
    assert "Trilu" not in ops(fitted) and model_opset(fitted) == 13
    np.testing.assert_array_equal(run(fitted, {"x": x})[0], want)
    assert any("folded" in n for n in notes)


def test_isnan_becomes_not_equal_for_trt7():
    x = np.array([[1.0, np.nan, -np.inf, 0.0]], np.float32)
    model = one_node_model(helper.make_node("IsNaN", ["x"], ["y"]), {"x": x}, 13)
    fitted, _ = fit_to_profile(model, PROFILES["trt7.2"])
    assert ops(fitted) == {"Equal": 1, "Not": 1} and model_opset(fitted) == 11
    np.testing.assert_array_equal(run(fitted, {"x": x})[0], [[False, True, False, False]])


def layernorm_model(dtype: type, opset: int = 17, axis: int = -1) -> onnx.ModelProto:
    e = 8
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=axis,
                            epsilon=1e-5)
    inits = {"scale": RNG.standard_normal(e).astype(dtype),
             "bias": RNG.standard_normal(e).astype(dtype)}
    return one_node_model(node, {"x": np.zeros((2, 3, e), dtype)}, opset, inits=inits)


@pytest.mark.parametrize("target", ["trt8.5", "trt8.2", "trt7.0"])
def test_layernorm_expansion_is_exact_in_fp32(target):
    model = layernorm_model(np.float32, 18)
    x = (RNG.standard_normal((2, 3, 8)) * 5 + 3).astype(np.float32)
    want = run(model, {"x": x})[0]
    fitted, notes = fit_to_profile(model, PROFILES[target])
    found = ops(fitted)
    assert found["LayerNormalization"] == 0 and found["Pow"] == 0
    assert found["ReduceMean"] == 2 and found["Sqrt"] == 1
    assert incompatibilities(fitted, PROFILES[target]) == []
    np.testing.assert_allclose(run(fitted, {"x": x})[0], want, rtol=1e-6, atol=2e-6)
    assert "expanded" in notes[0]


def test_layernorm_expansion_in_fp16_computes_statistics_in_fp32():
    # |x - mean| ~ 400: its square overflows fp16 (max 65504); the stash type keeps it finite.
    model = layernorm_model(np.float16)
    x = np.zeros((2, 3, 8), np.float16)
    x[..., ::2], x[..., 1::2] = 400, -400
    x += RNG.standard_normal(x.shape).astype(np.float16)
    want = run(model, {"x": x})[0].astype(np.float32)
    fitted, _ = fit_to_profile(model, PROFILES["trt8.4"])
    casts = [n for n in fitted.graph.node if n.op_type == "Cast"]
    assert len(casts) == 2  # into fp32 for the statistics, back to fp16 before scale/bias
    got = run(fitted, {"x": x})[0]
    assert got.dtype == np.float16 and np.isfinite(got).all()
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-3, atol=2e-3)


# -- real exports ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dynamo18(saved_model, session_cache):
    """The dynamo exporter's opset-18 ONNX of each example (Split-18, LayerNormalization,
    IsNaN, GatherElements, Reshape allowzero=1 …). Exported once (session_cache); the tests
    only read them."""
    examples = ("bert", "gpt2", "vit")

    def build(root: Path) -> None:
        for ex in examples:
            res = run_cli(saved_model(ex, "exported"), "--target", "onnx", "--opset", "18",
                          "-o", root / f"{ex}.onnx", "--no-verify")
            assert res.code == 0, res.err

    root = session_cache.folder("dynamo18", build)
    return {ex: root / f"{ex}.onnx" for ex in examples}


@pytest.mark.parametrize("example,target", [("bert", "trt7.0"), ("gpt2", "trt7.0"),
                                            ("vit", "trt7.0"), ("gpt2", "trt8.2"),
                                            ("bert", "trt8.4")])
def test_dynamo_export_brought_down_for_old_trt(dynamo18, example, target, tmp_path):
    src = dynamo18[example]
    assert Counter(n.op_type for n in onnx.load(str(src)).graph.node)["LayerNormalization"]
    out, rep = tmp_path / "o.onnx", tmp_path / "r.json"
    res = run_cli(src, "--target", target, "-o", out, "--iterations", "0", "--report", rep)
    assert res.code == 0, res.err + res.out
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    profile = PROFILES[target]
    assert model_opset(model) == profile.opset_ceiling
    assert incompatibilities(model, profile) == []
    assert "Parity: PASSED (input-onnx vs onnxruntime" in res.out
    assert f"down-converted opset 18 → {profile.opset_ceiling}" in res.out
    assert model.ir_version <= 8
    assert unread_constants(model) == unread_constants(onnx.load(str(src)))


def unread_constants(model: onnx.ModelProto) -> set[str]:
    """Initializers and Constant outputs no node reads (rewrites must not leave orphans)."""
    read = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
    consts = {i.name for i in model.graph.initializer}
    consts |= {n.output[0] for n in model.graph.node if n.op_type == "Constant"}
    return consts - read


def test_torchscript_bert_for_trt70_folds_its_constant_gather_elements(saved_model, tmp_path):
    out = tmp_path / "b.onnx"
    res = run_cli(saved_model("bert", "torchscript"), "--input", "x:2x16:int64:0,1000",
                  "--target", "trt7.0", "-o", out, "--iterations", "0")
    assert res.code == 0, res.err
    assert "GatherElements node(s) computed from constants only folded" in res.out
    assert "Parity: PASSED (pytorch vs onnxruntime" in res.out
    model = onnx.load(str(out))
    assert "GatherElements" not in ops(model)
    assert incompatibilities(model, PROFILES["trt7.0"]) == []
    assert not unread_constants(model)
