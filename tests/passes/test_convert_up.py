"""ONNX inputs converted up where the target gains from it (native Gelu at opset 20, TensorRT
10's opset floor), verified by ONNX Runtime before vs after; `--opset N` keeps the last word."""

from __future__ import annotations

import json
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from export_gelu.errors import TargetUnmetError
from export_gelu.passes.compat.opset.upconvert import convert_up, opset_floor
from export_gelu.targets import PROFILES
from tests.conftest import note_messages, run_cli

#: (example, exporter, opset, GELU approximate)
FILES = {"bert-ts13": ("bert", False, 13, b"none"), "gpt2-dynamo18": ("gpt2", True, 18, b"tanh")}


@pytest.fixture(scope="module")
def onnx_inputs(session_cache) -> dict[str, Path]:
    """The BERT example exported by TorchScript at opset 13 (eager attention: that exporter
    has no SDPA below 14) and GPT-2 exported by dynamo at opset 18, as users bring them.
    Exported once (session_cache); the tests only read them."""

    def build(out: Path) -> None:
        import torch

        from examples.models import build as build_example
        from examples.save_model import example_inputs
        from export_gelu.exporter.onnx_export.to_onnx import quiet_exporter

        for key, (name, dynamo, opset, _approx) in FILES.items():
            model = build_example(name)
            for module in model.modules():
                cfg = getattr(module, "config", None)
                if cfg is not None:
                    cfg._attn_implementation = "eager"
            with warnings.catch_warnings(), quiet_exporter():
                warnings.simplefilter("ignore")
                torch.onnx.export(model, example_inputs(name), str(out / f"{key}.onnx"),
                                  dynamo=dynamo, opset_version=opset, input_names=["x"])

    out = session_cache.folder("onnx-up", build)
    return {key: out / f"{key}.onnx" for key in FILES}


def _opset(model: onnx.ModelProto) -> int:
    return next(i.version for i in model.opset_import if i.domain in ("", "ai.onnx"))


def _run(path: Path, x: np.ndarray) -> list[np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})


def _export(src: Path, tmp: Path, *flags: str) -> tuple[int, dict, onnx.ModelProto, str]:
    out, rep = tmp / "out.onnx", tmp / "r.json"
    res = run_cli(src, "-o", out, "--report", rep, "--iterations", "0", *flags)
    assert res.code == 0, res.err
    return res.code, json.loads(rep.read_text()), onnx.load(str(out)), str(out)


@pytest.mark.parametrize("target", ["onnx", "trt10"])
@pytest.mark.parametrize("key", sorted(FILES))
def test_converted_up_to_native_gelu(onnx_inputs, tmp_path, key, target):
    _name, _dynamo, opset, approx = FILES[key]
    assert _opset(onnx.load(str(onnx_inputs[key]), load_external_data=False)) == opset
    _code, report, model, out = _export(onnx_inputs[key], tmp_path, "--target", target)
    assert _opset(model) == 20 and report["opset"] == 20
    gelus = [n for n in model.graph.node if n.op_type == "Gelu"]
    assert len(gelus) == 2 and len(report["gelu_sites"]) == 2
    assert [{a.name: helper.get_attribute_value(a) for a in n.attribute}.get("approximate")
            for n in gelus] == [approx, approx]
    ops = Counter(n.op_type for n in model.graph.node)
    assert ops["Erf"] == 0 and ops["Tanh"] == 0
    (note,) = [n for n in note_messages(report) if "converted up" in n]
    assert note.startswith(f"the opset-{opset} input converted up to opset 20 (for {target}: ")
    assert "native Gelu for its 2 GELU site(s)" in note and "onnx's version converter" in note
    if key == "bert-ts13":  # the TorchScript exporter expands LayerNorm below opset 17
        assert "5 expanded LayerNorm(s) fused into LayerNormalization" in note
    assert ops["LayerNormalization"] == 5 and ops["ReduceMean"] == 0
    assert report["parity"]["status"] == "passed"
    x = np.random.default_rng(5).integers(0, 1000, (2, 16)).astype(np.int64)
    for ref, got in zip(_run(onnx_inputs[key], x), _run(Path(out), x)):
        assert np.abs(ref - got).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.parametrize("target", ["onnx", "trt10"])
@pytest.mark.parametrize("key", sorted(FILES))
def test_opset_of_the_file_keeps_it_there(onnx_inputs, tmp_path, key, target):
    opset = FILES[key][2]
    _code, report, model, _out = _export(onnx_inputs[key], tmp_path, "--target", target,
                                         "--opset", str(opset))
    assert _opset(model) == opset and report["opset"] == opset
    assert not any(n.op_type == "Gelu" for n in model.graph.node)
    assert not any("converted up" in n for n in note_messages(report))
    assert report["parity"]["status"] == "passed"


def _relu_graph(opset: int, gru: bool = False) -> onnx.ModelProto:
    """x → Relu (→ GRU) : a graph with no GELU, for the opset floor and converter failures."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 2, 4])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu")]
    inits = []
    out = "r"
    if gru:
        rng = np.random.default_rng(0)
        inits = [numpy_helper.from_array(rng.standard_normal((1, 9, 4)).astype(np.float32), "W"),
                 numpy_helper.from_array(rng.standard_normal((1, 9, 3)).astype(np.float32), "R")]
        nodes.append(helper.make_node("GRU", ["r", "W", "R"], ["y"], name="gru", hidden_size=3))
        out = "y"
    y = helper.make_tensor_value_info(out, TensorProto.FLOAT, [5, 1, 2, 3] if gru else [5, 2, 4])
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], initializer=inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 4
    onnx.checker.check_model(model)
    return model


def test_opset_floor_of_tensorrt_10(tmp_path):
    assert [opset_floor(PROFILES[t]) for t in ("trt8.6", "trt9", "trt10", "trt11", "onnx")] \
        == [7, 7, 9, 9, 1]
    src = tmp_path / "old.onnx"
    onnx.save(_relu_graph(8), str(src))
    _code, report, model, _out = _export(src, tmp_path, "--target", "trt10")
    assert _opset(model) == 9
    assert any("the opset-8 input converted up to opset 9 (for trt10: trt10 takes opset 9 and up)"
               in n for n in note_messages(report))
    assert report["parity"]["status"] == "passed"
    _code, report, model, _out = _export(src, tmp_path, "--target", "trt9")
    assert _opset(model) == 8 and not any("converted up" in n for n in note_messages(report))


def test_converter_failure_keeps_the_opset_with_a_note():
    """onnx's version converter has no adapter for a GRU from opset 6 (it stops at 6 → 7)."""
    model = _relu_graph(6, gru=True)
    feed = {"x": np.ones((5, 2, 4), np.float32)}
    same, notes = convert_up(model, 9, feed, "for trt10: trt10 takes opset 9 and up")
    assert same is model and _opset(same) == 6
    (note,) = notes
    assert note.startswith("the opset-6 input was not converted up to opset 9 (for trt10: ")
    assert "onnx's version converter failed" in note and "GRU" in note
    assert note.endswith("it stays at opset 6")
    with pytest.raises(TargetUnmetError, match="not converted up to opset 9 .--opset 9."):
        convert_up(model, 9, feed, "--opset 9", strict=True)


def test_opset_above_the_file_that_cannot_be_reached_exits_3(tmp_path):
    src = tmp_path / "gru6.onnx"
    onnx.save(_relu_graph(6, gru=True), str(src))
    out = tmp_path / "o.onnx"
    res = run_cli(src, "--target", "trt9", "--opset", "9", "-o", out, "--no-verify")
    assert res.code == 3, res.err
    assert "--opset 9" in res.err and "version converter failed" in res.err
    assert not out.exists()


def test_expanded_layernorm_fused_for_trt86(onnx_inputs, tmp_path):
    """trt8.6 parses LayerNormalization (opset 17): the opset-13 BERT's five expanded
    LayerNorms come back as five ops; its GELUs stay primitives (no Gelu before 10)."""
    _code, report, model, out = _export(onnx_inputs["bert-ts13"], tmp_path, "--target",
                                        "trt8.6")
    ops = Counter(n.op_type for n in model.graph.node)
    assert _opset(model) == 17 and ops["LayerNormalization"] == 5 and ops["ReduceMean"] == 0
    assert ops["Gelu"] == 0 and ops["Erf"] == 2
    assert any("(for trt8.6: LayerNormalization for its 5 expanded LayerNorm(s))" in n
               for n in note_messages(report))
    x = np.random.default_rng(6).integers(0, 1000, (2, 16)).astype(np.int64)
    for ref, got in zip(_run(onnx_inputs["bert-ts13"], x), _run(Path(out), x)):
        assert np.abs(ref - got).max() <= 1e-5 * np.abs(ref).max()
    _code, report, model, _out = _export(onnx_inputs["bert-ts13"], tmp_path, "--target",
                                         "trt8.5")  # no LayerNormalization there: stays
    assert _opset(model) == 13 and not any("converted up" in n for n in note_messages(report))


@pytest.mark.parametrize("square,affine", [("Pow", True), ("Mul", False)])
def test_layernorm_fusion_on_a_hand_built_pattern(square, affine):
    from export_gelu.passes.compat.layernorm.fuse import fuse_layernorms
    from tests.onnx_graphs import run_ort

    rng = np.random.default_rng(2)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8])
    inits = [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "gamma"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "beta")]
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]),
             helper.make_node("Sub", ["x", "m"], ["d"]),
             helper.make_node(square, ["d", "two" if square == "Pow" else "d"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["v"], axes=[2]),
             helper.make_node("Add", ["v", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["s"]),
             helper.make_node("Div", ["d", "s"], ["n"])]
    out = "n"
    if affine:
        nodes += [helper.make_node("Mul", ["n", "gamma"], ["g"]),
                  helper.make_node("Add", ["g", "beta"], ["y"])]
        out = "y"
    y = helper.make_tensor_value_info(out, TensorProto.FLOAT, [2, 3, 8])
    model = helper.make_model(helper.make_graph(nodes, "ln", [x], [y], initializer=inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    fused = onnx.ModelProto()
    fused.CopyFrom(model)
    assert fuse_layernorms(fused) == 1
    assert [n.op_type for n in fused.graph.node] == ["LayerNormalization"]
    onnx.checker.check_model(fused)
    feed = {"x": rng.standard_normal((2, 3, 8)).astype(np.float32) * 3}
    assert np.abs(run_ort(fused, feed)[0] - run_ort(model, feed)[0]).max() <= 1e-5
    model.graph.output.append(helper.make_tensor_value_info("d", TensorProto.FLOAT, None))
    assert fuse_layernorms(model) == 0  # an intermediate read elsewhere: not a LayerNorm
