"""Unseen models, round four, the rest (issue 34): SEW-D in fp16 no less accurate than a
plain export of `model.half()`, weights computed from weights folded in float32 first."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from export_gelu.exporter.precision_cast import fold_weights
from tests.conftest import run_cli

transformers = pytest.importorskip("transformers")


def _tiny_sew_d(seed: int) -> torch.nn.Module:
    """The issue's SEW-D config (a weight-normalized positional conv, DeBERTa attention)."""
    torch.manual_seed(seed)
    config = transformers.SEWDConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        conv_dim=(16, 16, 16), conv_stride=(5, 2, 1), conv_kernel=(10, 3, 1),
        squeeze_factor=2, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
        vocab_size=32, max_position_embeddings=64, position_buckets=32, mask_time_prob=0.0)
    return transformers.SEWDModel(config).eval()


def _fp16_error(graph: Path, model: torch.nn.Module, feeds: list[torch.Tensor]) -> float:
    """Largest |graph(x) - model(x)| over `feeds` (the graph run in fp16 in ONNX Runtime,
    the model in float32): the error the fp16 graph costs on inputs it never saw."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    worst = 0.0
    for x in feeds:
        got = session.run(None, {name: x.half().numpy()})[0].astype(np.float64)
        with torch.no_grad():
            ref = model(x)[0].double().numpy()
        worst = max(worst, float(np.abs(got - ref).max()))
    return worst


def _plain_half_export(model: torch.nn.Module, x: torch.Tensor, path: Path) -> Path:
    """`torch.onnx.export` of `model.half()`, as a user would write it (TorchScript)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(copy.deepcopy(model).half(), (x.half(),), str(path), dynamo=False,
                          opset_version=17)
    return path


@pytest.mark.slow
# seed 3 is `full` (make test-full): the saved program's route is pinned by seed 2's row, and
# seed 3's model and input (the worse one before the fold, 1.9x) by
# test_sew_d_fp16_from_memory_leaves_the_model_as_it_was, which asserts the same bound
@pytest.mark.parametrize("seed", [2, pytest.param(3, marks=pytest.mark.full)])
def test_sew_d_fp16_no_less_accurate_than_plain_half_export(tmp_path: Path, seed: int) -> None:
    model = _tiny_sew_d(seed)
    x = torch.randn(1, 1600)
    pt2 = tmp_path / "sew_d.pt2"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.export.save(torch.export.export(model, (x,), strict=False), str(pt2))
    out, rep = tmp_path / "out.onnx", tmp_path / "report.json"
    res = run_cli(pt2, "-o", out, "--report", rep, "--target", "trt", "--precision", "fp16")
    assert res.code == 0, res.err + res.out
    assert res.report(rep)["parity"]["status"] == "passed"
    generator = torch.Generator().manual_seed(100)
    fresh = [torch.randn(1, 1600, generator=generator) for _ in range(4)]
    ours = _fp16_error(out, model, fresh)
    plain = _fp16_error(_plain_half_export(model, x, tmp_path / "plain.onnx"), model, fresh)
    # before the weights were folded in float32: 1.27x (seed 2) and 1.9x (seed 3)
    assert ours <= plain * 1.15, (ours, plain)


@pytest.mark.slow
def test_sew_d_fp16_from_memory_leaves_the_model_as_it_was(tmp_path: Path) -> None:
    """The API on the nn.Module: its weight norm baked in float32 into the fp16 copy only."""
    import export_gelu

    model = _tiny_sew_d(3)
    x = torch.randn(1, 1600)
    out = tmp_path / "api.onnx"
    report = export_gelu.export(model, args=(x,), target="trt", precision="fp16",
                                output=str(out), iterations=0)
    assert report.exit_code == 0 and report.parity.status == "passed"
    conv = model.get_submodule("encoder.pos_conv_embed.conv")
    assert torch.nn.utils.parametrize.is_parametrized(conv)  # the caller's model untouched
    generator = torch.Generator().manual_seed(100)
    fresh = [torch.randn(1, 1600, generator=generator) for _ in range(4)]
    plain = _fp16_error(_plain_half_export(model, x, tmp_path / "plain.onnx"), model, fresh)
    assert _fp16_error(out, model, fresh) <= plain * 1.15


def _weight_norm_conv() -> torch.nn.Module:
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(8, 8, 5, padding=2)
    return torch.nn.utils.parametrizations.weight_norm(conv, dim=2)


def test_a_weight_norm_of_an_exported_program_is_folded_in_float32() -> None:
    conv = _weight_norm_conv()
    x = torch.randn(1, 8, 40)
    gm = torch.export.export(conv, (x,), strict=False).module()
    assert any("_weight_norm" in str(n.target) for n in gm.graph.nodes)
    assert fold_weights(gm) == 1
    assert not any("_weight_norm" in str(n.target) for n in gm.graph.nodes)
    with torch.no_grad():
        torch.testing.assert_close(gm(x), conv(x), rtol=0, atol=1e-6)
        exact = torch.as_tensor(conv.weight).detach().double()
        folded = torch.as_tensor(gm.to(torch.float16).get_buffer("_export_gelu_weight_0"))
        folded = folded.double()
    # the float32 weight rounded once to fp16: within half an fp16 ulp of each value
    assert torch.all((folded - exact).abs() <= exact.abs() * 2.0 ** -11 + 1e-7)


def test_a_parametrized_module_is_baked_and_a_plain_computation_stays() -> None:
    conv = _weight_norm_conv()
    x = torch.randn(1, 8, 40)
    with torch.no_grad():
        before = conv(x)
    baked = copy.deepcopy(conv)  # as the fp16 path bakes: a copy, the original is the reference
    assert fold_weights(baked) == 1
    assert not torch.nn.utils.parametrize.is_parametrized(baked)
    assert torch.nn.utils.parametrize.is_parametrized(conv)  # the original keeps its weight
    with torch.no_grad():
        torch.testing.assert_close(baked(x), before, rtol=0, atol=0)
        torch.testing.assert_close(conv(x), before, rtol=0, atol=0)

    class Scaled(torch.nn.Module):  # a weight times the input: not weights-only, kept
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4))

        def forward(self, t: torch.Tensor) -> torch.Tensor:
            return (self.w * 2.0).repeat(16) + t  # repeat: more values than it reads

    gm = torch.export.export(Scaled(), (torch.randn(64),), strict=False).module()
    assert fold_weights(gm) == 0


# --- DiT as TorchScript with --precision fp16 --------------------------------------------

class _DiTCall(torch.nn.Module):
    """DiT called as a user's trace calls it: latents, timestep, class labels."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.model(x, timestep=t, class_labels=y, return_dict=False)[0]


def _tiny_dit() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    dit = diffusers.DiTTransformer2DModel(
        num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=8,
        num_layers=2, sample_size=8, patch_size=2, num_embeds_ada_norm=10)
    return _DiTCall(dit).eval(), (torch.randn(1, 4, 8, 8), torch.tensor([3]), torch.tensor([1]))


_DIT_INPUTS = ("--input", "x:1x4x8x8", "--input", "t:1:int64:0,9", "--input", "y:1:int64:0,9")


@pytest.mark.slow
@pytest.mark.slow  # two CLI exports; the DiT test below pins the export-time message
def test_torchscript_traced_in_half_names_the_traced_dtype_as_the_reference(
        tmp_path: Path) -> None:
    """A ScriptModule traced after model.half(): exporting it in fp16 works, but its trace
    cannot run as the float32 reference parity compares with; exit 3 naming that cause
    (was an internal error, exit 4), nothing written; --no-verify exports it."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(),
                                torch.nn.Linear(16, 4)).eval().half()
    torch.jit.trace(model, (torch.randn(2, 8).half(),)).save(str(tmp_path / "half.pt"))
    out = tmp_path / "out.onnx"
    flags = ["--target", "ort", "--precision", "fp16", "--input", "x:2x8:float16", "-o", out]
    res = run_cli(tmp_path / "half.pt", *flags)
    assert res.code == 3, res.err + res.out
    line = res.err.strip().splitlines()[-1]
    assert "the dtype traced into it is the cause" in line and "Float and Half" in line
    assert "Traceback" not in res.err and not out.exists()
    res = run_cli(tmp_path / "half.pt", *flags, "--no-verify")
    assert res.code == 0, res.err + res.out
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    x = torch.randn(2, 8).half()
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    with torch.no_grad():
        ref = model.float()(x.float()).numpy()
    assert np.abs(got.astype(np.float32) - ref).max() < 2e-2


def test_dit_torchscript_fp16_names_the_traced_dtype(tmp_path: Path) -> None:
    model, args = _tiny_dit()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.trace(model, args, strict=False).save(str(tmp_path / "dit.pt"))
    out = tmp_path / "out.onnx"
    res = run_cli(tmp_path / "dit.pt", "-o", out, "--precision", "fp16", *_DIT_INPUTS)
    assert res.code == 3, res.err + res.out
    line = res.err.strip().splitlines()[-1]
    assert "the dtype traced into the ScriptModule is the cause" in line
    assert "no exporter could export this model" not in line
    assert "Traceback" not in res.err and not out.exists()
    # the route the message offers works: the same model as an ExportedProgram, in fp16
    pt2 = tmp_path / "dit.pt2"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.export.save(torch.export.export(model, args, strict=False), str(pt2))
    rep = tmp_path / "report.json"
    res = run_cli(pt2, "-o", out, "--report", rep, "--precision", "fp16")
    assert res.code == 0, res.err + res.out
    assert res.report(rep)["parity"]["status"] == "passed"
    fresh = (torch.randn(1, 4, 8, 8), torch.tensor([7]), torch.tensor([4]))
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    feed = {i.name: (a.half() if a.is_floating_point() else a).numpy()
            for i, a in zip(session.get_inputs(), fresh)}
    got = session.run(None, feed)[0].astype(np.float64)
    with torch.no_grad():
        ref = model(*fresh).double().numpy()
    assert np.abs(got - ref).max() < 2e-2 * max(1.0, float(np.abs(ref).max()))


# --- folders: image and audio sizes dynamic where the model takes them ---------------------

def _folder_export(tmp_path: Path, folder: Path, *extra: str) -> tuple[int, dict, Path, str]:
    out, rep = tmp_path / f"{folder.name}.onnx", tmp_path / f"{folder.name}.json"
    res = run_cli(folder, "-o", out, "--report", rep, "--iterations", "0",
                  *(extra or ("--target", "trt")))
    report = res.report(rep) if rep.exists() else {}
    return res.code, report, out, res.err


def _input_dims(graph: Path) -> dict[str, list[int | str]]:
    import onnx

    model = onnx.load(str(graph), load_external_data=False)
    return {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in model.graph.input}


def _convnext_folder(folder: Path) -> torch.nn.Module:
    """A tiny ConvNeXt (no position table: any image size) with an image processor that
    crops to 24 px, not the config's 32."""
    import json

    torch.manual_seed(0)
    model = transformers.ConvNextModel(transformers.ConvNextConfig(
        num_channels=3, num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], image_size=32))
    model.eval().save_pretrained(str(folder))
    (folder / "preprocessor_config.json").write_text(json.dumps(
        {"image_processor_type": "ConvNextImageProcessor", "do_center_crop": True,
         "crop_size": {"height": 24, "width": 24}, "size": {"shortest_edge": 28}}))
    return model


@pytest.mark.slow
def test_folder_image_size_is_dynamic_where_the_model_takes_any(tmp_path: Path) -> None:
    model = _convnext_folder(tmp_path / "convnext")
    code, report, out, err = _folder_export(tmp_path, tmp_path / "convnext")
    assert code == 0, err
    assert _input_dims(out) == {"pixel_values": ["batch_size", 3, "height", "width"]}
    dims = {d["name"]: d for d in report["dynamic"]["dims"]}
    assert set(dims) == {"batch_size", "height", "width"}
    # half of 24 would shrink the last stage to one pixel: torch.export's narrower range
    assert (dims["height"]["min"], dims["height"]["opt"], dims["height"]["max"]) == (16, 24, 48)
    shapes = report["dynamic"]["shapes"]
    assert [s["label"] for s in shapes] == ["opt", "min", "odd", "max"]
    assert all(s["onnxruntime"]["status"] == "passed" for s in shapes), shapes
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for shape in [(1, 3, 17, 17), (3, 3, 40, 28), (8, 3, 48, 48)]:  # none of them checked
        x = torch.randn(*shape)
        got = session.run(None, {"pixel_values": x.numpy()})[0]
        with torch.no_grad():
            ref = model(pixel_values=x).last_hidden_state.numpy()
        assert got.shape == ref.shape and np.abs(got - ref).max() < 1e-4, shape
    # below opset 18 (TensorRT 8.6: opset 17) the TorchScript exporter would have to keep
    # them: the sizes stay, and the note says why
    code, report, out, err = _folder_export(tmp_path, tmp_path / "convnext", "--target", "trt8.6")
    assert code == 0, err
    assert _input_dims(out) == {"pixel_values": ["batch_size", 3, 24, 24]}
    static = [n["message"] for n in report["notes"] if n["code"] == "static-size"]
    assert len(static) == 1 and "opset 17 is below 18" in static[0], static


@pytest.mark.slow
def test_folder_image_size_stays_where_the_position_table_fixes_it(tmp_path: Path) -> None:
    from examples.hf_folders import save_folder

    folder = save_folder("vit", tmp_path / "vit")
    code, report, out, err = _folder_export(tmp_path, folder)
    assert code == 0, err
    assert _input_dims(out) == {"pixel_values": ["batch_size", 3, 32, 32]}
    static = [n["message"] for n in report["notes"] if n["code"] == "static-size"]
    assert len(static) == 1 and "pixel_values keeps its example size" in static[0]
    assert "doesn't match model" in static[0]  # ViT's own refusal of 16 px, quoted
    assert report["parity"]["status"] == "passed"


@pytest.mark.slow
def test_folder_audio_length_is_dynamic_and_read_from_the_processor(tmp_path: Path) -> None:
    import json

    from examples.hf_folders import save_folder

    folder = save_folder("wav2vec2", tmp_path / "w2v")
    (folder / "preprocessor_config.json").write_text(json.dumps(
        {"feature_extractor_type": "Wav2Vec2FeatureExtractor", "sampling_rate": 8000,
         "feature_size": 1}))
    code, report, out, err = _folder_export(tmp_path, folder)
    assert code == 0, err
    assert _input_dims(out)["input_values"] == ["batch_size", "sequence_length"]
    dims = {d["name"]: d for d in report["dynamic"]["dims"]}
    assert dims["sequence_length"]["opt"] == 2000  # a quarter second at 8 kHz
    assert all(s["onnxruntime"]["status"] == "passed" for s in report["dynamic"]["shapes"])
    # in fp16 the length stays (its fp16 capture guards on the convolution lengths): a note
    code, report, out, err = _folder_export(tmp_path, folder, "--target", "trt",
                                            "--precision", "fp16")
    assert code == 0, err
    assert _input_dims(out)["input_values"] == ["batch_size", 2000]
    assert any(n["code"] == "static-size" and "fp16" in n["message"] for n in report["notes"])


def test_folder_processor_config_outside_the_folder_is_refused(tmp_path: Path) -> None:
    from examples.hf_folders import save_folder

    folder = save_folder("vit", tmp_path / "vit")
    outside = tmp_path / "elsewhere.json"
    outside.write_text('{"crop_size": {"height": 8, "width": 8}}')
    (folder / "preprocessor_config.json").symlink_to(outside)
    code, _, out, err = _folder_export(tmp_path, folder)
    assert code == 2, err
    assert "preprocessor_config.json" in err and "outside the model's folder" in err
    assert not out.exists()
