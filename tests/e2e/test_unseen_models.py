"""Models with the structure of ones users save that the project had not seen (issue 27):
each exports with exit 0 and parity passed, fp16 as accurate as PyTorch's own fp16, and a
static model stays static."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from examples import unseen_models as U
from tests.conftest import note_codes, run_cli


def _quiet_save(fn: Callable[[], None]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fn()


def _save(model: torch.nn.Module, fmt: str, path: Path, args: tuple = (),
          kwargs: dict | None = None) -> Path:
    """`model` saved as users save it: exported, torchscript (traced), pickle, state_dict."""
    def go() -> None:
        if fmt == "exported":
            torch.export.save(torch.export.export(model, args, kwargs, strict=False), str(path))
        elif fmt == "torchscript":
            torch.jit.save(torch.jit.trace(model, args, check_trace=False, strict=False),
                           str(path))
        elif fmt == "pickle":
            torch.save(model, str(path))
        elif fmt == "state_dict":
            torch.save(model.state_dict(), str(path))
    _quiet_save(go)
    return path


def _export(tmp_path: Path, model: Path, *extra: str) -> tuple[int, dict, str]:
    out, rep = tmp_path / "out.onnx", tmp_path / "report.json"
    res = run_cli(model, "-o", out, "--report", rep, "--allow-pickle", *extra)
    report = res.report(rep) if rep.exists() else {}
    return res.code, report, res.err + res.out


def _dim_params(path: Path) -> list[str]:
    model = onnx.load(str(path), load_external_data=False)
    return [d.dim_param for vi in [*model.graph.input, *model.graph.output]
            for d in vi.type.tensor_type.shape.dim if d.dim_param]


# --- an output named like an input ---------------------------------------------------------

@pytest.mark.parametrize("fmt", ["exported", "pickle"])
def test_unet_output_named_like_its_input_gets_a_unique_name(tmp_path: Path, fmt: str) -> None:
    path = _save(U.unet_block(), fmt, tmp_path / f"unet.{fmt}.pt",
                 (torch.randn(1, 8, 8, 8), torch.tensor([3.0])))
    extra = [] if fmt == "exported" else ["--input", "sample:1x8x8x8", "--input", "timestep:1"]
    code, report, text = _export(tmp_path, path, *extra)
    assert code == 0, text
    assert report["parity"]["status"] == "passed"
    model = onnx.load(str(tmp_path / "out.onnx"))
    assert [i.name for i in model.graph.input] == ["sample", "timestep"]
    assert [o.name for o in model.graph.output] == ["out_sample"]
    assert "output-renamed" in note_codes(report)


# --- an ExportedProgram saved with None keyword arguments ----------------------------------

def test_program_with_none_keyword_inputs_runs_on_its_saved_examples(tmp_path: Path) -> None:
    kwargs = {"hidden_states": torch.randn(1, 4, 16),
              "encoder_hidden_states": torch.randn(1, 6, 16),
              "timestep": torch.tensor([1.0]), "attention_mask": None, "added_cond_kwargs": None}
    path = _save(U.keyword_block(), "exported", tmp_path / "kw.pt2", (), kwargs)
    code, report, text = _export(tmp_path, path, "--target", "trt8.6")
    assert code == 0, text
    assert report["parity"]["status"] == "passed"
    model = onnx.load(str(tmp_path / "out.onnx"))
    assert [i.name for i in model.graph.input] == ["hidden_states", "encoder_hidden_states",
                                                    "timestep"]
    assert "attention_mask=None, added_cond_kwargs=None" in text


# --- a traced attention whose TorchScript graph saves tensors for backward -----------------

def test_reference_runs_a_traced_model_that_ran_with_grad(tmp_path: Path) -> None:
    """The profiling executor, having run the traced model with grad enabled (as the
    conversion's retry does), keeps differentiable subgraphs; inference mode refused them."""
    from export_gelu.check.runners.torch_runner import TorchRunner

    x = torch.randn(2, 8, 16)
    path = _save(U.dit_attention(), "torchscript", tmp_path / "dit.ts.pt", (x,))
    script = torch.jit.load(str(path))
    for _ in range(3):
        script(x)
    runner = TorchRunner(script, {"x": x.numpy()}, ["y"])
    with runner:
        got = runner.infer({"x": x.numpy()})["y"]
    np.testing.assert_allclose(got, U.dit_attention()(x).detach().numpy(), atol=1e-5)


def test_traced_dit_attention_exports(tmp_path: Path) -> None:
    path = _save(U.dit_attention(), "torchscript", tmp_path / "dit.ts.pt", (torch.randn(2, 8, 16),))
    code, report, text = _export(tmp_path, path, "--input", "x:2x8x16")
    assert code == 0, text
    assert report["parity"]["status"] == "passed"


# --- fp16 as accurate as PyTorch's own -----------------------------------------------------

def _fp16_errors(onnx_path: Path, model: torch.nn.Module,
                 feed: dict[str, np.ndarray]) -> tuple[float, float]:
    """(graph's, PyTorch fp16's) max abs error against fp32 eager PyTorch on the same
    (fp16-representable) inputs."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    fed = {i.name: (feed[i.name].astype(np.float16) if i.type == "tensor(float16)"
                    else feed[i.name]) for i in sess.get_inputs()}
    graph = sess.run(None, fed)[0].astype(np.float32)
    args32 = [torch.from_numpy(v.astype(np.float32) if v.dtype.kind == "f" else v)
              for v in fed.values()]
    with torch.no_grad():
        ref = model(*args32).numpy()
        half = model.half()(*[a.half() if a.is_floating_point() else a for a in args32])
    model.float()
    return float(np.abs(graph - ref).max()), float(np.abs(half.float().numpy() - ref).max())


def _convnext_feed() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float16).astype(np.float32)}


def _deberta_feed() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    mask = np.ones((2, 8), np.int64)
    mask[1, 5:] = 0
    return {"x": rng.standard_normal((2, 8, 32)).astype(np.float16).astype(np.float32),
            "attention_mask": mask}


FP16_CASES = {"convnext_v2": (U.convnext_v2, _convnext_feed),
              "deberta_attention": (U.deberta_attention, _deberta_feed)}
FP16_TARGETS = ("trt", "trt8.6")
FP16_FORMATS = ("exported", "torchscript", "pickle")

#: `make test` runs the rows that hold every pair of two axes once (case × format, case ×
#: target, target × format: 6 of the 12); the other rows are `full` (make test-full): each
#: repeats a case's route for a format (the row of that case and format here) lowered for a
#: target whose fp16 form another row here pins on that format.
FP16_FAST = {("convnext_v2", "trt", "exported"), ("convnext_v2", "trt", "torchscript"),
             ("convnext_v2", "trt8.6", "pickle"), ("deberta_attention", "trt8.6", "exported"),
             ("deberta_attention", "trt8.6", "torchscript"),
             ("deberta_attention", "trt", "pickle")}


def test_the_fp16_rows_hold_every_pair() -> None:
    for axes, want in (((0, 2), {(c, f) for c in FP16_CASES for f in FP16_FORMATS}),
                       ((0, 1), {(c, t) for c in FP16_CASES for t in FP16_TARGETS}),
                       ((1, 2), {(t, f) for t in FP16_TARGETS for f in FP16_FORMATS})):
        assert {(row[axes[0]], row[axes[1]]) for row in FP16_FAST} == want


@pytest.mark.parametrize(("case", "target", "fmt"), [
    pytest.param(c, t, f, id=f"{c}-{t}-{f}",
                 marks=[] if (c, t, f) in FP16_FAST else [pytest.mark.full])
    for c in sorted(FP16_CASES) for t in FP16_TARGETS for f in FP16_FORMATS])
def test_fp16_is_as_accurate_as_pytorch_fp16(tmp_path: Path, case: str, target: str,
                                             fmt: str) -> None:
    build, make_feed = FP16_CASES[case]
    feed = make_feed()
    args = tuple(torch.from_numpy(v) for v in feed.values())
    path = _save(build(), fmt, tmp_path / f"{case}.{fmt}.pt", args)
    npz = tmp_path / "feed.npz"
    np.savez(npz, **feed)
    code, report, text = _export(tmp_path, path, "--precision", "fp16", "--target", target,
                                 "--inputs", npz)
    assert code == 0, text
    assert report["parity"]["status"] == "passed"
    graph_err, torch_err = _fp16_errors(tmp_path / "out.onnx", build(), feed)
    assert graph_err <= 2 * torch_err, (graph_err, torch_err)


# --- an exporter's failure by its root cause -----------------------------------------------

def test_torchscript_failure_is_reported_by_its_cause(tmp_path: Path) -> None:
    """A traced model with an fp32 constant baked in, cast to half, fails in the TorchScript
    interpreter; the one-line message states the cause, not the interpreter's first line."""
    from export_gelu.errors import failure_outcome
    from export_gelu.exporter.onnx_export.to_onnx import exporter_cause

    class TimeEmbedding(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(16, 16)

        def forward(self, t: torch.Tensor) -> torch.Tensor:
            freqs = torch.exp(-torch.arange(8, dtype=torch.float32) / 8)
            a = t[:, None].float() * freqs[None]
            return self.lin(torch.cat([a.cos(), a.sin()], -1))

    path = _save(TimeEmbedding().eval(), "torchscript", tmp_path / "te.ts.pt",
                 (torch.tensor([1.0, 2.0]),))
    half = torch.jit.load(str(path)).half()
    with pytest.raises(RuntimeError) as caught:
        half(torch.tensor([1.0, 2.0]).half())
    assert str(caught.value).startswith("The following operation failed")
    line = failure_outcome(caught.value).line
    assert "mat1 and mat2 must have the same dtype" in line, line
    assert "TorchScript interpreter" not in line
    assert exporter_cause(caught.value).startswith("RuntimeError: mat1 and mat2")


# --- inspect: a bias-free GELU plugin node on 8.6-10.12 ------------------------------------

def _plugin_graph(path: Path, bias: bool) -> Path:
    from onnx import TensorProto, helper

    attrs: dict = {"type_id": 0, "plugin_version": "1", "plugin_namespace": ""}
    if bias:
        attrs["bias"] = helper.make_tensor("bias", TensorProto.FLOAT, [4], [0.0] * 4)
    node = helper.make_node("CustomGeluPluginDynamic", ["x"], ["y"], name="gelu_plugin",
                            domain="trt.plugins", **attrs)
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("trt.plugins", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), str(path))
    return path


@pytest.mark.parametrize(("target", "flagged"), [("trt8.6", True), ("trt10", True),
                                                 ("trt8.4", False), ("trt10.13", False)])
def test_inspect_flags_a_bias_free_plugin_node(tmp_path: Path, target: str,
                                               flagged: bool) -> None:
    bare = run_cli("inspect", _plugin_graph(tmp_path / "bare.onnx", False), "--target", target)
    biased = run_cli("inspect", _plugin_graph(tmp_path / "biased.onnx", True),
                     "--target", target)
    assert biased.code == 0, biased.err
    assert bare.code == (3 if flagged else 0), bare.err  # inspect: 3 when the target refuses
    assert ("without a bias" in bare.out) is flagged, bare.out
    assert "divides by zero" not in biased.out
    if flagged:
        assert "'gelu_plugin'" in bare.out and "fixed in 10.13" in bare.out


# --- static stays static ------------------------------------------------------------------

STATIC_CASES = {"convnext_v2": ("x:1x3x32x32", (torch.zeros(1, 3, 32, 32),)),
                "dit_attention": ("x:2x8x16", (torch.zeros(2, 8, 16),))}
STATIC_FORMATS = ("exported", "torchscript", "pickle", "state_dict")

#: `make test` runs TorchScript (the converter that names dims) for both models and each
#: other format once; the other rows are `full` (make test-full): the same format's route,
#: pinned by its row here, on a model whose static export the TorchScript row pins.
STATIC_FAST = {("convnext_v2", "torchscript"), ("dit_attention", "torchscript"),
               ("dit_attention", "exported"), ("dit_attention", "pickle"),
               ("convnext_v2", "state_dict")}


def test_the_static_rows_hold_every_model_and_format() -> None:
    assert {c for c, _f in STATIC_FAST} == set(STATIC_CASES)
    assert {f for _c, f in STATIC_FAST} == set(STATIC_FORMATS)
    assert {c for c, f in STATIC_FAST if f == "torchscript"} == set(STATIC_CASES)


@pytest.mark.parametrize(("case", "fmt"), [
    pytest.param(c, f, id=f"{c}-{f}", marks=[] if (c, f) in STATIC_FAST else [pytest.mark.full])
    for c in sorted(STATIC_CASES) for f in STATIC_FORMATS])
def test_static_model_keeps_every_dim_static(tmp_path: Path, case: str, fmt: str) -> None:
    """TS2EPConverter makes every input dim symbolic (a channel dim named "3"): a model
    exported without --dynamic must come out with none."""
    spec, args = STATIC_CASES[case]
    path = _save(getattr(U, case)(), fmt, tmp_path / f"{case}.{fmt}.pt", args)
    extra = ["--model-factory", f"examples.unseen_models:{case}"] if fmt == "state_dict" else []
    code, report, text = _export(tmp_path, path, "--input", spec, *extra)
    assert code == 0, text
    assert report["parity"]["status"] == "passed"
    assert _dim_params(tmp_path / "out.onnx") == []


def test_dynamic_dims_stay_where_asked(tmp_path: Path) -> None:
    path = _save(U.convnext_v2(), "pickle", tmp_path / "cnx.pt")
    code, _report, text = _export(tmp_path, path, "--input", "x:batchx3x32x32",
                                  "--dynamic", "batch=1:2:4")
    assert code == 0, text
    assert _dim_params(tmp_path / "out.onnx") == ["batch", "batch"]


# --- where the TorchScript exporter cannot: the ExportedProgram route ----------------------

def test_traced_attention_at_opset_13_on_the_dynamic_path(tmp_path: Path) -> None:
    """The TorchScript exporter has no scaled_dot_product_attention below opset 14; the
    ScriptModule goes through TS2EPConverter, dynamo at 18, and down to the target's 13."""
    path = _save(U.dit_attention(), "torchscript", tmp_path / "dit.ts.pt", (torch.randn(2, 8, 16),))
    code, report, text = _export(tmp_path, path, "--input", "x:batchx8x16",
                                 "--dynamic", "batch=1:2:4", "--target", "trt8.0")
    assert code == 0, text
    assert report["parity"]["status"] == "passed"
    assert report["opset"] == 13
    assert any("TS2EPConverter" in n["message"] and "scaled_dot_product_attention" in n["message"]
               for n in report["notes"])
    assert _dim_params(tmp_path / "out.onnx") == ["batch", "batch"]


def test_traced_dict_output_at_opset_13_on_the_dynamic_path(tmp_path: Path) -> None:
    """A traced UNet returning {"sample": …}: prim::DictConstruct has no TorchScript-exporter
    form; the dict is flattened by the ExportedProgram route, its field named out_sample."""
    path = _save(U.unet_block(), "torchscript", tmp_path / "unet.ts.pt",
                 (torch.randn(2, 8, 8, 8), torch.tensor([3.0, 1.0])))
    code, report, text = _export(tmp_path, path, "--input", "sample:batchx8x8x8",
                                 "--input", "timestep:batch", "--dynamic", "batch=1:2:4",
                                 "--target", "trt8.0")
    assert code == 0, text
    assert report["parity"]["status"] == "passed"
    assert report["opset"] == 13
    model = onnx.load(str(tmp_path / "out.onnx"))
    assert [o.name for o in model.graph.output] == ["out_sample"]
    assert any("prim::DictConstruct" in n["message"] for n in report["notes"])


def test_refusal_names_the_op_the_opset_and_the_targets(tmp_path: Path) -> None:
    """The TorchScript exporter's own refusal, as the final message words it."""
    from export_gelu.exporter.capture.fallback import refusal_hint
    from export_gelu.exporter.onnx_export.to_onnx import TargetUnmetError, export_to_onnx

    x = torch.randn(2, 8, 16)
    with pytest.raises(TargetUnmetError) as caught:
        export_to_onnx(U.dit_attention(), (x,), ["x"], 13, exporter="torchscript")
    hint = refusal_hint([str(caught.value)])
    assert hint.startswith("aten::scaled_dot_product_attention needs opset 14: targets that "
                           "reach it: onnx, ort, trt8.4"), hint
    assert "trt8.0" not in hint


# --- an fp32 ONNX file with --precision fp16 ----------------------------------------------

def test_fp32_onnx_with_fp16_plugin_target(tmp_path: Path) -> None:
    """ONNX Runtime refused the fp16 feed of an fp32 graph (exit 4); the graph is fed as its
    inputs declare and the report says it stays fp32."""
    path = _save(U.convnext_v2(), "pickle", tmp_path / "cnx.pt")
    fp32 = tmp_path / "fp32.onnx"
    assert run_cli(path, "--allow-pickle", "--input", "x:1x3x32x32", "-o", fp32,
                   "--no-verify").code == 0
    code, report, text = _export(tmp_path, fp32, "--gelu", "plugin", "--precision", "fp16",
                                 "--target", "trt8.6")
    assert code == 0, text
    assert report["parity"]["status"] == "passed"
    assert "onnx-precision-kept" in note_codes(report)
    model = onnx.load(str(tmp_path / "out.onnx"))
    assert [n for n in model.graph.node if n.op_type == "CustomGeluPluginDynamic"]


def _mixed_layernorm(path: Path) -> Path:
    """fp16 X, float32 scale and bias: the LayerNormalization ONNX Runtime refuses to load."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    scale = numpy_helper.from_array(rng.normal(1, 0.1, 8).astype(np.float32), "gamma")
    bias = numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "beta")
    graph = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["y"], axis=-1,
                          epsilon=1e-5)],
        "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 4, 8])], [scale, bias])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("target", ["trt8.6", "ort"])
def test_layernorm_scale_and_bias_follow_the_input_type(tmp_path: Path, target: str) -> None:
    import onnxruntime as ort

    from export_gelu import graph as G
    from export_gelu.passes.compat import fit_to_profile
    from export_gelu.targets import resolve_profile

    src = _mixed_layernorm(tmp_path / "mixed.onnx")
    with pytest.raises(Exception, match="LayerNormalization"):
        ort.InferenceSession(str(src))  # the graph as such does not load
    model = onnx.load(src)
    with G.opened(model, write=True) as graph:
        notes = fit_to_profile(graph, resolve_profile(target))[1]
    assert any("LayerNormalization" in n and "element type" in n for n in notes), notes
    x = np.random.default_rng(1).normal(size=(2, 4, 8)).astype(np.float16)
    (y,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    gamma, beta = (onnx.numpy_helper.to_array(t) for t in model.graph.initializer)
    x32 = x.astype(np.float32)
    want = (x32 - x32.mean(-1, keepdims=True)) / np.sqrt(x32.var(-1, keepdims=True) + 1e-5)
    assert y.dtype == np.float16
    assert np.abs(y.astype(np.float32) - (want * gamma + beta)).max() < 1e-2
