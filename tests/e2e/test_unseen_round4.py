"""Unseen models, round four (issue 34): ExportedPrograms saved with non-tensor example
inputs, invalid graphs from torch, archive names torch writes, and the fp16/attention paths.
Each export asserts its exit code and parity on fresh inputs, run here in ONNX Runtime."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch

from examples import unseen_models as U
from tests.conftest import run_cli

transformers = pytest.importorskip("transformers")


def _export(tmp_path: Path, model: Path, *extra: str) -> tuple[int, dict, str]:
    out, rep = tmp_path / "out.onnx", tmp_path / "report.json"
    res = run_cli(model, "-o", out, "--report", rep, *extra)
    report = res.report(rep) if rep.exists() else {}
    return res.code, report, res.err + res.out


def _save_program(model: torch.nn.Module, path: Path, args: tuple = (),
                  kwargs: dict | None = None) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.export.save(torch.export.export(model, args, kwargs, strict=False), str(path))
    return path


def _fresh_error(onnx_path: Path, reference: Callable[..., Any],
                 feed: dict[str, torch.Tensor]) -> float:
    """Max abs difference between the graph in ONNX Runtime and `reference(**feed)` (the
    first output) on `feed`, inputs the export never saw."""
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    wanted = {i.name for i in session.get_inputs()}
    got = session.run(None, {k: v.numpy() for k, v in feed.items() if k in wanted})[0]
    with torch.no_grad():
        ref = reference(**feed)
    ref = ref[0] if isinstance(ref, (tuple, list)) else getattr(ref, "logits", ref)
    return float(np.abs(got.astype(np.float64) - ref.double().numpy()).max())


# --- .pt2 example inputs with non-tensor leaves ----------------------------------------------

def _tiny_bloom() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.BloomConfig(hidden_size=32, n_layer=2, n_head=2, vocab_size=100)
    return transformers.BloomForCausalLM(config).eval()


@pytest.mark.slow
@pytest.mark.parametrize("target", ["ort", "trt8.2"])
def test_bloom_saved_without_cache_runs_on_its_saved_inputs(tmp_path: Path, target: str) -> None:
    model = _tiny_bloom()
    kwargs = {"input_ids": torch.randint(0, 100, (1, 8)),
              "attention_mask": torch.ones(1, 8, dtype=torch.long), "use_cache": False}
    path = _save_program(model, tmp_path / "bloom.pt2", (), kwargs)
    code, report, text = _export(tmp_path, path, "--target", target)
    assert code == 0, text
    assert report["parity"]["status"] == "passed"
    fresh = {"input_ids": torch.randint(0, 100, (1, 8)),
             "attention_mask": torch.ones(1, 8, dtype=torch.long)}
    err = _fresh_error(tmp_path / "out.onnx", lambda **f: model(**f, use_cache=False), fresh)
    assert err < 1e-4


class _Flags(torch.nn.Module):
    """A positional bool and int, and PixArt's `added_cond_kwargs` dict of Nones."""

    def __init__(self) -> None:
        super().__init__()
        self.block = U.keyword_block()

    def forward(self, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor,
                timestep: torch.Tensor, residual: bool = True, scale: int = 1,
                added_cond_kwargs: dict | None = None) -> torch.Tensor:
        out = self.block(hidden_states, encoder_hidden_states, timestep)
        if added_cond_kwargs and added_cond_kwargs.get("resolution") is not None:
            out = out + added_cond_kwargs["resolution"]
        return (out + hidden_states if residual else out) * scale


@pytest.mark.parametrize("target", ["trt8.6", "trt8.2"])
def test_pixart_call_with_a_dict_of_nones_and_constants(tmp_path: Path, target: str) -> None:
    model = _Flags().eval()
    tensors = (torch.randn(1, 4, 16), torch.randn(1, 6, 16), torch.tensor([1.0]))
    path = _save_program(model, tmp_path / "pixart.pt2", (*tensors, False, 3),
                         {"added_cond_kwargs": {"resolution": None, "aspect_ratio": None}})
    code, report, text = _export(tmp_path, path, "--target", target)
    assert code == 0, text
    assert report["parity"]["status"] == "passed"
    fresh = {"hidden_states": torch.randn(1, 4, 16), "encoder_hidden_states": torch.randn(1, 6, 16),
             "timestep": torch.tensor([7.0])}
    err = _fresh_error(tmp_path / "out.onnx",
                       lambda **f: model(*f.values(), False, 3,
                                         added_cond_kwargs={"resolution": None}), fresh)
    assert err < 1e-4


# --- an invalid graph from torch ------------------------------------------------------------

def test_an_invalid_exported_graph_is_refused_with_onnx_message() -> None:
    from onnx import TensorProto, helper

    from export_gelu.errors import TargetUnmetError
    from export_gelu.exporter.onnx_export.to_onnx import refuse_invalid

    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    graph = helper.make_graph([helper.make_node("Unsqueeze", ["x", "axes"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    with pytest.raises(TargetUnmetError, match=r"the dynamo exporter wrote an invalid graph at "
                                               r"opset 20: .*Unexpected axis value"):
        refuse_invalid(model, "the dynamo exporter", 20)
    model.graph.initializer[0].int64_data[:] = [0]
    refuse_invalid(model, "the dynamo exporter", 20)  # axis 0 is valid: no error


@pytest.mark.slow
def test_beit_through_the_api_never_keeps_torch_invalid_graph(tmp_path: Path) -> None:
    import export_gelu

    torch.manual_seed(0)
    config = transformers.BeitConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, image_size=32, patch_size=8,
                                     use_relative_position_bias=True)
    model = transformers.BeitModel(config).eval()
    out = tmp_path / "beit.onnx"
    report = export_gelu.export(model, args=(torch.randn(1, 3, 32, 32),), output=str(out))
    assert report.parity.status == "passed"
    # torch 2.13's dynamo graphs of BEiT are invalid (an Unsqueeze axis out of range): refused
    assert report.exporter == "torchscript"
    assert any("the dynamo exporter failed" in str(n) for n in report.notes), report.notes
    fresh = {"pixel_values": torch.randn(1, 3, 32, 32)}
    assert _fresh_error(out, lambda **f: model(**f).last_hidden_state, fresh) < 1e-4


# --- the archive check accepts the names torch writes --------------------------------------

def _layoutlmv3_fresh_error(graph: Path, model: Any, feed: dict[str, Any]) -> float:
    """The graph against the LayoutLMv3 model on new token ids and pixels (boxes as fed)."""
    fresh = {**feed, "input_ids": torch.randint(0, 100, (1, 8)),
             "pixel_values": torch.randn(1, 3, 32, 32)}
    return _fresh_error(graph, lambda **f: model(**f).last_hidden_state, fresh)


def _tiny_layoutlmv3() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    config = transformers.LayoutLMv3Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        input_size=32, patch_size=8, max_2d_position_embeddings=128, vocab_size=100,
        coordinate_size=4, shape_size=8)
    bbox = torch.randint(0, 50, (1, 8, 4))
    bbox[..., 2:] += 50
    feed = {"input_ids": torch.randint(0, 100, (1, 8)), "bbox": bbox,
            "pixel_values": torch.randn(1, 3, 32, 32)}
    return transformers.LayoutLMv3Model(config).eval(), feed


def _example_feed(spec: str) -> torch.Tensor:
    shape, dtype = spec.split(":")[1:3]
    dims = [int(d) for d in shape.split("x")]
    return torch.randint(0, 1000, dims) if dtype == "int64" else torch.randn(dims)


@pytest.mark.slow
def test_archive_check_accepts_what_torch_saves(tmp_path: Path) -> None:
    from examples import models
    from export_gelu.exporter.model_files.archive_checks import program_archive_findings

    for name, example in {**models.EXAMPLES, **models.MORE_EXAMPLES}.items():
        module = getattr(models, name)().eval()
        path = _save_program(module, tmp_path / f"{name}.pt2", (_example_feed(example.input_spec),))
        assert program_archive_findings(path) == [], name
    model, feed = _tiny_layoutlmv3()
    path = _save_program(model, tmp_path / "layoutlmv3.pt2", (), feed)
    assert program_archive_findings(path) == []
    code, report, text = _export(tmp_path, path)
    assert code == 0, text
    assert report["parity"]["status"] == "passed"
    assert _layoutlmv3_fresh_error(tmp_path / "out.onnx", model, feed) < 1e-4


def test_archive_check_still_refuses_code_in_an_argument_name(tmp_path: Path) -> None:
    import json
    import zipfile

    from export_gelu.exporter.model_files.archive_checks import program_archive_findings

    class Add(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.add(x, x, alpha=2)

    path = _save_program(Add(), tmp_path / "add.pt2", (torch.randn(2),))
    assert program_archive_findings(path) == []
    bad = tmp_path / "bad.pt2"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.endswith("models/model.json"):
                doc = json.loads(data)
                node = doc["graph_module"]["graph"]["nodes"][0]
                node["inputs"][0]["name"] = "x=__import__('os').getcwd()"
                data = json.dumps(doc).encode()
            dst.writestr(item, data)
    findings = program_archive_findings(bad)
    assert any("__import__" in str(f) for f in findings), findings
    code, _report, text = _export(tmp_path, bad)
    assert code == 2 and "is not a Python identifier" in text


# --- the API on an in-memory causal LM and T5 -----------------------------------------------

@pytest.mark.slow
def test_api_exports_a_causal_lm_without_its_cache(tmp_path: Path) -> None:
    import export_gelu

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100,
                                     n_positions=64)
    model = transformers.GPT2LMHeadModel(config).eval()
    out = tmp_path / "lm.onnx"
    report = export_gelu.export(model, args=(torch.randint(0, 100, (1, 8)),), output=str(out),
                                target="ort")
    assert report.exit_code == 0 and report.parity.status == "passed"
    assert any("without its key/value cache" in str(n) for n in report.notes)
    assert model.config.use_cache is True  # restored
    fresh = {"input_ids": torch.randint(0, 100, (1, 8))}
    err = _fresh_error(out, lambda **f: model(**f, use_cache=False).logits, fresh)
    assert err < 1e-4


@pytest.mark.slow
def test_api_exports_t5_without_its_cache(tmp_path: Path) -> None:
    import export_gelu

    torch.manual_seed(0)
    config = transformers.T5Config(d_model=32, d_ff=64, num_layers=2, num_heads=2, d_kv=16,
                                   vocab_size=100)
    model = transformers.T5ForConditionalGeneration(config).eval()
    out = tmp_path / "t5.onnx"
    feed = {"input_ids": torch.randint(0, 100, (1, 8)),
            "decoder_input_ids": torch.randint(0, 100, (1, 4))}
    report = export_gelu.export(model, kwargs=feed, output=str(out), target="ort")
    assert report.exit_code == 0 and report.parity.status == "passed"
    assert model.config.use_cache is True and model.decoder.config.use_cache is True
    fresh = {"input_ids": torch.randint(0, 100, (1, 8)),
             "decoder_input_ids": torch.randint(0, 100, (1, 4))}
    err = _fresh_error(out, lambda **f: model(**f, use_cache=False).logits, fresh)
    assert err < 1e-4


# --- a folder takes the user's inputs --------------------------------------------------------

def _vit_mae_folder(folder: Path) -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.ViTMAEConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        image_size=32, patch_size=8, decoder_hidden_size=32, decoder_num_hidden_layers=1,
        decoder_num_attention_heads=2, decoder_intermediate_size=64)
    model = transformers.ViTMAEModel(config).eval()
    model.save_pretrained(str(folder))
    return model


@pytest.mark.slow
def test_folder_runs_on_the_users_inputs_vit_mae_noise(tmp_path: Path) -> None:
    model = _vit_mae_folder(tmp_path / "vitmae")
    code, report, text = _export(tmp_path, tmp_path / "vitmae", "--input",
                                 "pixel_values:1x3x32x32", "--input", "noise:1x16")
    assert code == 0, text
    assert report["parity"]["status"] == "passed"
    fresh = {"pixel_values": torch.randn(1, 3, 32, 32), "noise": torch.rand(1, 16)}
    err = _fresh_error(tmp_path / "out.onnx", lambda **f: model(**f).last_hidden_state, fresh)
    assert err < 1e-4


def test_folder_refuses_an_input_forward_does_not_take(tmp_path: Path) -> None:
    _vit_mae_folder(tmp_path / "vitmae")
    code, _report, text = _export(tmp_path, tmp_path / "vitmae", "--input", "nose:1x16")
    assert code == 2
    assert "ViTMAEModel.forward() takes no nose" in text
    assert not (tmp_path / "out.onnx").exists()


@pytest.mark.slow
def test_folder_runs_on_the_users_npz_layoutlmv3(tmp_path: Path) -> None:
    model, feed = _tiny_layoutlmv3()
    model.save_pretrained(str(tmp_path / "l3"))
    npz = tmp_path / "real.npz"
    np.savez(npz, **{k: v.numpy() for k, v in feed.items()})
    code, report, text = _export(tmp_path, tmp_path / "l3", "--inputs", npz)
    assert code == 0, text
    assert report["parity"]["status"] == "passed"
    assert _layoutlmv3_fresh_error(tmp_path / "out.onnx", model, feed) < 1e-4
    # without inputs: made from the config's input_size (32 px here, not 224)
    code, report, text = _export(tmp_path, tmp_path / "l3")
    assert code == 0, text
    assert report["parity"]["status"] == "passed"
