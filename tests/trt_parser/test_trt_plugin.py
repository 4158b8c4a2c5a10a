"""The TensorRT GELU plugin as it really is: fp16 bias data for type_id 1, a zero bias where a
site has none, refused where the parser cannot create it, and ONNX files holding it accepted
back (the plugin run in ONNX Runtime as its math for parity)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from export_gelu.errors import TargetUnmetError
from export_gelu.passes.onnx.plugin_math import plugins_as_math
from export_gelu.trt_parser.plugin import PLUGIN_OP, bias_as_read, plugin_support
from tests.conftest import note_messages, run_cli
from tests.onnx_graphs import E, G, feed, rewrite, run_ort, tanh_factored

INTERMEDIATE_BIAS = {"bert": "model.encoder.layer.{i}.intermediate.dense.bias",
                     "gpt2": "model.h.{i}.mlp.c_fc.bias"}


def _plugins(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == PLUGIN_OP]


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


@pytest.fixture(scope="module")
def biased(tmp_path_factory: pytest.TempPathFactory):
    """biased(example) → (ExportedProgram file, its fp32 biases): the example with random
    biases (Hugging Face initialises them to zero, which would make a bias check vacuous)."""
    import torch

    from examples.models import build
    from examples.save_model import example_inputs

    cache: dict[str, tuple[Path, dict[str, np.ndarray]]] = {}

    def get(name: str) -> tuple[Path, dict[str, np.ndarray]]:
        if name not in cache:
            model = build(name)
            gen = torch.Generator().manual_seed(1)
            with torch.no_grad():
                for pname, p in model.named_parameters():
                    if pname.endswith("bias"):
                        p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            path = tmp_path_factory.mktemp("biased") / f"{name}.pt"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                program = torch.export.export(model, example_inputs(name), strict=False)
                with path.open("wb") as fh:
                    torch.export.save(program, fh)
            cache[name] = (path, {n: p.detach().numpy().copy()
                                  for n, p in model.named_parameters() if n.endswith("bias")})
        return cache[name]

    return get


@pytest.fixture(scope="module")
def bert_plugin_fp16(biased, tmp_path_factory) -> Path:
    """`--gelu plugin --precision fp16` output of the biased BERT."""
    model, _biases = biased("bert")
    out = tmp_path_factory.mktemp("plugin") / "bert.plugin.onnx"
    res = run_cli(model, "--target", "trt10", "--gelu", "plugin", "--precision", "fp16",
                  "-o", out, "--iterations", "0")
    assert res.code == 0, res.err
    return out


def test_fp16_bias_is_the_fp32_bias_rounded_byte_for_byte(biased, bert_plugin_fp16):
    """BERT's GELU follows its intermediate Linear's bias Add, folded into the plugin."""
    _model, biases = biased("bert")
    nodes = _plugins(onnx.load(str(bert_plugin_fp16)))
    assert len(nodes) == 2
    for i, node in enumerate(nodes):
        attrs = _attrs(node)
        assert attrs["type_id"] == 1
        assert attrs["plugin_version"] == b"1" and attrs["plugin_namespace"] == b""
        tensor = attrs["bias"]
        assert tensor.data_type == TensorProto.FLOAT16 and list(tensor.dims) == [1, 1, 256]
        want = biases[INTERMEDIATE_BIAS["bert"].format(i=i)].astype(np.float16)
        assert np.abs(want).max() > 0.1
        assert numpy_helper.to_array(tensor).tobytes() == want.tobytes()


def test_gpt2_fp16_plugin_bias_is_fp16_zeros_its_gemm_keeps_the_bias(biased, tmp_path):
    """GPT-2's Conv1D exports as Gemm (bias inside) then Reshape: the site has no bias Add,
    so the plugin gets fp16 zeros over the last axis, and the output still matches PyTorch."""
    model, _biases = biased("gpt2")
    out, rep = tmp_path / "gpt2.onnx", tmp_path / "r.json"
    res = run_cli(model, "--target", "trt10", "--gelu", "plugin", "--precision", "fp16",
                  "-o", out, "--report", rep, "--iterations", "0")
    assert res.code == 0, res.err
    nodes = _plugins(onnx.load(str(out)))
    assert len(nodes) == 2
    for node in nodes:
        tensor = _attrs(node)["bias"]
        assert _attrs(node)["type_id"] == 1
        assert tensor.data_type == TensorProto.FLOAT16 and list(tensor.dims) == [1, 1, 256]
        assert not numpy_helper.to_array(tensor).any()
    report = json.loads(rep.read_text())
    assert report["parity"]["status"] == "passed"  # the bias is applied once, by the Gemm


def test_bias_read_as_the_plugin_reads_it():
    """The plugin copies count·sizeof(its type) bytes: fp32 data under type_id 1 is read as
    halves of its bytes; fp16 data under type_id 0 would be read past its end."""
    b32 = np.array([1.5, -2.25, 0.125], dtype=np.float32)
    assert bias_as_read(b32, 0).tobytes() == b32.tobytes()
    assert bias_as_read(b32.astype(np.float16), 1).tobytes() == b32.astype(np.float16).tobytes()
    misread = bias_as_read(b32, 1)
    assert misread.dtype == np.float16 and misread.tobytes() == b32.tobytes()[:6]
    assert not np.allclose(misread.astype(np.float32), b32)
    with pytest.raises(ValueError, match="read 12 bytes of a 6-byte tensor"):
        bias_as_read(b32.astype(np.float16), 0)


def test_a_float32_bias_under_type_id_1_fails_parity(biased, bert_plugin_fp16, tmp_path):
    """What export-gelu wrote before (float32 bias bytes, type_id 1) is caught: the stand-in
    reads the bias as the plugin does, and `verify` against the model then fails."""
    model, _biases = biased("bert")
    graph = onnx.load(str(bert_plugin_fp16))
    for node in _plugins(graph):
        for a in node.attribute:
            if a.name == "bias":
                a.t.CopyFrom(numpy_helper.from_array(
                    numpy_helper.to_array(a.t).astype(np.float32), a.t.name))
    wrong = tmp_path / "wrong.onnx"
    onnx.save(graph, str(wrong))
    res = run_cli("verify", model, wrong, "--iterations", "0", "--no-calibration")
    assert res.code == 1, res.err
    res = run_cli("verify", model, bert_plugin_fp16, "--iterations", "0", "--no-calibration")
    assert res.code == 0, res.err
    assert f"{PLUGIN_OP} node(s) of DEPLOYED ran in ONNX Runtime as the plugin's math" in res.out


def _t5_style(dtype: int = TensorProto.FLOAT, last: int | str = E) -> onnx.ModelProto:
    """y = gelu_tanh(x) @ W: a GELU with no bias Add before it (T5's gated FFN style)."""
    g = G(dtype, opset=17)
    g.inputs.append(helper.make_tensor_value_info("x", dtype, [2, 4, last]))
    w = g.c(np.random.default_rng(3).standard_normal((E, E)) * 0.5)
    y = g.op("MatMul", tanh_factored(g, "x"), w)
    graph = helper.make_graph(g.nodes, "t5", g.inputs,
                              [helper.make_tensor_value_info(y, dtype, [2, 4, E])],
                              initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("dtype,np_dtype,type_id", [(TensorProto.FLOAT, np.float32, 0),
                                                    (TensorProto.FLOAT16, np.float16, 1)])
def test_bias_free_gelu_gets_a_zero_bias_of_its_type(dtype, np_dtype, type_id):
    model = _t5_style(dtype)
    out, sites = rewrite(model, "trt8.6", "plugin", "fp16" if type_id else "fp32")
    (node,) = _plugins(out)
    attrs = _attrs(node)
    assert attrs["type_id"] == type_id
    bias = numpy_helper.to_array(attrs["bias"])
    assert bias.dtype == np_dtype and bias.shape == (1, 1, E) and not bias.any()
    inputs = feed(model)
    plugins_as_math(out)
    tol = 1e-5 if type_id == 0 else 1e-2
    assert np.abs(run_ort(out, inputs)[0].astype(np.float64)
                  - run_ort(model, inputs)[0].astype(np.float64)).max() <= tol


def test_unknown_last_axis_refused_where_a_biasless_plugin_divides_by_zero():
    model = _t5_style(last="E")
    with pytest.raises(TargetUnmetError, match="last-axis size is unknown.*divides by zero in "
                                               "TensorRT 8.6 to before 10.13"):
        rewrite(model, "trt8.6", "plugin")
    out, _sites = rewrite(model, "trt8.4", "plugin")  # 8.4 runs its bias-free kernel
    (node,) = _plugins(out)
    assert "bias" not in _attrs(node)


@pytest.mark.parametrize("target", ["trt7.0", "trt7.1", "trt7.2", "trt8.0", "trt8.2", "trt11",
                                    "onnx"])
def test_plugin_refused_where_the_parser_cannot_create_it(saved_model, tmp_path, target):
    out = tmp_path / "p.onnx"
    res = run_cli(saved_model("bert", "exported"), "--target", target, "--gelu", "plugin",
                  "-o", out)
    assert res.code == 3, res.err
    assert f"{PLUGIN_OP} is not available on {target}" in res.err
    assert "targets that take it: trt8.2.3 and trt8.4–trt10" in res.err
    assert "Traceback" not in res.err and not out.exists()


def test_plugin_support_by_version():
    creatable = {v: plugin_support(v).creatable for v in
                 ("7.0", "7.1", "8.0", "8.2", "8.2.2", "8.2.3", "8.4", "8.6", "9.2", "10.12",
                  "10.13", "11.0")}
    assert [v for v, ok in creatable.items() if ok] == ["8.2.3", "8.4", "8.6", "9.2", "10.12",
                                                        "10.13"]
    assert "declares no fields" in plugin_support("8.0").reason


@pytest.mark.parametrize("target,gelu,op", [("trt10", "keep", "Gelu"), ("onnx", "keep", "Gelu"),
                                            ("trt10", "plugin", PLUGIN_OP),
                                            ("trt8.6", "keep", "Tanh")])
def test_plugin_output_fed_back_in(bert_plugin_fp16, tmp_path, target, gelu, op):
    """Our own --gelu plugin output as the input: recognised as tanh sites, the reference
    runs in ORT with the plugin as its math, and the export passes parity."""
    out, rep = tmp_path / "back.onnx", tmp_path / "r.json"
    res = run_cli(bert_plugin_fp16, "--target", target, "--gelu", gelu, "--precision", "fp16",
                  "-o", out, "--report", rep, "--iterations", "0")
    assert res.code == 0, res.err
    report = json.loads(rep.read_text())
    assert [s["kind"] for s in report["gelu_sites"]] == ["tanh", "tanh"]
    assert report["parity"]["status"] == "passed"
    assert any("of the input (the parity reference) ran in ONNX Runtime" in n
               for n in note_messages(report))
    graph = onnx.load(str(out)).graph
    assert sum(n.op_type == op for n in graph.node) == 2
    if op == "Gelu":
        assert all(_attrs(n)["approximate"] == b"tanh" for n in graph.node if n.op_type == op)
    res = run_cli("verify", bert_plugin_fp16, out, "--iterations", "0")
    assert res.code == 0, res.err
