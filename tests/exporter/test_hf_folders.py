"""Hugging Face save_pretrained folders as users have them (tests/hf_folders.py: tiny random
models built from configs): each exported for ort, trt8.6 and trt8.2 with exit 0, every GELU
the model computes found with its kind (CLIP's QuickGELU kept as `quick`), parity passed,
inputs and outputs named as optimum and ONNX Runtime GenAI name them, and the with-past
graphs decoding the same 8 tokens as transformers' generate.

A representative subset runs by default; the full product is marked slow. Each folder is
saved, and each (model, target) exported, once per session.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

import onnx
import pytest

from export_gelu.notes import UNCLASSIFIED
from tests.conftest import note_codes, run_cli
from tests.hf_exports import OUTPUT, folder_export, saved_folder
from tests.hf_folders import MODELS, MORE_MODELS, build, counting_gelus
from tests.report_schema import validate_report

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

TARGETS = ("ort", "trt8.6", "trt8.2")
OPSETS = {"ort": 20, "trt8.6": 17, "trt8.2": 13}
FAST = [("bert", "trt8.6"), ("gpt2", "ort"), ("bart", "ort"), ("clip", "ort")]
MULTI = {"t5", "bart", "whisper", "marian"}
DECODERS = {"gpt2", "phi", "falcon", "llama", "bloom", "gemma"}


@pytest.fixture(scope="session")
def hf_folder(session_cache):
    """hf_folder(name) → the model saved with save_pretrained, once per test run for every
    test file (tests/hf_exports.py `saved_folder`; read-only)."""
    return lambda name: saved_folder(session_cache, name)


#: Rows whose export another test file reads too: made once per test run for both
#: (tests/hf_exports.py; tests/flows/test_export_flow.py's several-graphs test).
SHARED = {("bart", "ort")}


class FolderRun(NamedTuple):
    """One row's export: exit code, report, the output's path, stderr, and the output as the
    run named it (the report's `written` holds that name)."""

    code: int
    report: dict
    out: Path
    err: str
    given: str


@pytest.fixture(scope="session")
def shared_export(session_cache):
    """shared_export(name, target) → a SHARED row's export, made once per test run for every
    test file that reads it (tests/hf_exports.py)."""
    return lambda name, target: folder_export(session_cache, name, target)


@pytest.fixture(scope="session")
def hf_export(hf_folder, shared_export, tmp_path_factory: pytest.TempPathFactory):
    """hf_export(name, target) → FolderRun, once per session (a SHARED row once per test
    run, through the export command's steps as the CLI runs them after parsing its flags)."""
    root = tmp_path_factory.mktemp("hf_out")
    cache: dict[tuple[str, str], FolderRun] = {}

    def get(name: str, target: str) -> FolderRun:
        if (name, target) in cache:
            return cache[name, target]
        if (name, target) in SHARED:
            run = shared_export(name, target)
            cache[name, target] = FolderRun(run.code, run.report_json(), run.out, "",
                                            OUTPUT)
            return cache[name, target]
        out = root / (f"{name}.{target}" if name in MULTI else f"{name}.{target}.onnx")
        rep = root / f"{name}.{target}.json"
        res = run_cli(hf_folder(name), "--target", target, "-o", out, "--report", rep,
                      "--iterations", "0")
        report = json.loads(rep.read_text()) if rep.exists() else {}
        cache[name, target] = FolderRun(res.code, report, out, res.err, str(out))
        return cache[name, target]

    return get


def _kinds(sites: list[dict]) -> Counter:
    return Counter(s["kind"] for s in sites)


def _io(path: Path) -> tuple[dict[str, list], dict[str, list]]:
    model = onnx.load(str(path), load_external_data=False)

    def dims(vi: onnx.ValueInfoProto) -> list:
        return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]

    return ({i.name: dims(i) for i in model.graph.input},
            {o.name: dims(o) for o in model.graph.output})


def _example(model) -> dict:  # noqa: ANN001 - a transformers model
    """Inputs for one forward, by the model's main input (both towers for CLIP-like ones)."""
    import inspect

    import torch

    params = inspect.signature(model.forward).parameters
    config, main = model.config, model.main_input_name
    out = {}
    if main == "input_ids" or {"input_ids", "pixel_values"} <= set(params):
        out["input_ids"] = torch.randint(0, 100, (1, 6))
    if main == "pixel_values" or "input_ids" in out and "pixel_values" in params:
        vision = getattr(config, "vision_config", None) or config
        out["pixel_values"] = torch.randn(1, 3, vision.image_size, vision.image_size)
    if main == "input_values":
        out["input_values"] = torch.randn(1, 4000)
    if main == "input_features":
        out["input_features"] = torch.randn(1, config.num_mel_bins,
                                            2 * config.max_source_positions)
    return out


def _expected_gelus(name: str) -> dict[str, Counter]:
    """The GELUs the model computes, by graph: one forward of the whole model, the encoder's
    forward for an encoder–decoder's encoder (its decoders compute the rest)."""
    import torch

    model = build(name)
    inputs = _example(model)
    with torch.no_grad():
        if getattr(model.config, "is_encoder_decoder", False):
            encoder = model.get_encoder()
            with counting_gelus(encoder) as enc:
                encoder(**inputs)
            with counting_gelus(model) as every:
                model(**inputs, decoder_input_ids=torch.zeros((1, 2), dtype=torch.long))
            dec = every - enc
            return {"encoder_model.onnx": enc, "decoder_model.onnx": dec,
                    "decoder_with_past_model.onnx": dec}
        with counting_gelus(model) as found:
            model(**inputs)
    return {"model": found}


def _check_names(name: str, out: Path, report: dict) -> None:
    if name in DECODERS:
        ins, outs = _io(out)
        assert list(ins)[:2] == ["input_ids", "attention_mask"]
        assert ins["input_ids"] == ["batch", "sequence_length"]
        assert ins["attention_mask"] == ["batch", "total_sequence_length"]
        assert ins["past_key_values.0.key"][0::2] == ["batch", "past_sequence_length"]
        assert list(outs)[0] == "logits"
        assert "present.1.value" in outs and "past_key_values.1.value" in ins
        assert outs["present.0.key"][2] in ("total_sequence_length",
                                            "past_sequence_length + sequence_length")
    elif name in MULTI:
        files = sorted(p.name for p in out.glob("*.onnx"))
        assert files == ["decoder_model.onnx", "decoder_with_past_model.onnx",
                         "encoder_model.onnx"]
        enc_in, enc_out = _io(out / "encoder_model.onnx")
        assert list(enc_out) == ["last_hidden_state"]
        dec_in, dec_out = _io(out / "decoder_model.onnx")
        assert "input_ids" in dec_in and "encoder_hidden_states" in dec_in
        assert {"present.0.decoder.key", "present.0.encoder.value"} <= set(dec_out)
        past_in, past_out = _io(out / "decoder_with_past_model.onnx")
        assert {"past_key_values.0.decoder.key", "past_key_values.1.encoder.value"} <= set(past_in)
        assert list(past_out)[0] == "logits" and "present.1.decoder.value" in past_out
        assert past_in["past_key_values.0.decoder.key"][0::2] == ["batch",
                                                                  "past_decoder_sequence_length"]
        assert report["task"].endswith("-with-past")
    elif name in MODELS:
        _ins, outs = _io(out)
        expected = {"bert": ["last_hidden_state", "pooler_output"], "bert-cls": ["logits"],
                    "roberta": ["logits"], "distilbert": ["start_logits", "end_logits"],
                    "vit": ["logits"], "wav2vec2": ["logits"],
                    "clip": ["logits_per_image", "logits_per_text", "text_embeds",
                             "image_embeds"]}[name]
        assert list(outs) == expected


def _check(hf_export, name: str, target: str) -> None:
    code, report, out, err, given = hf_export(name, target)
    assert code == 0, err
    validate_report(report)
    assert UNCLASSIFIED not in note_codes(report), report["notes"]
    assert report["model_format"] == "Hugging Face folder"
    assert name not in MODELS or report["task"] == MODELS[name][1]
    assert report["parity"]["status"] == "passed", report["parity"]
    assert report["opset"] == OPSETS[target]
    expected = _expected_gelus(name)
    if name in MULTI:
        for file, want in expected.items():
            assert _kinds(report["graphs"][file]["gelu_sites"]) == want, file
            assert report["graphs"][file]["parity"]["status"] == "passed"
    else:
        assert _kinds(report["gelu_sites"]) == expected["model"]
    if name == "clip":
        assert set(_kinds(report["gelu_sites"])) == {"quick"}
    _check_names(name, out, report)
    if name in MULTI or name in DECODERS:
        gen = report["generation"]
        assert gen["status"] == "passed", gen
        assert gen["generate"] == gen["onnxruntime"] and len(gen["generate"]) == 8
    assert given in report["written"] or all(given in w for w in report["written"][:1])


@pytest.mark.parametrize("name,target", FAST)
def test_folder_exports_representative(hf_export, hf_folder, name: str, target: str) -> None:
    """Each FAST row; GPT-2's and BERT's also carry the checks that read the same export (one
    export per row, whichever worker runs it): the decode loop's tokens vary, and a folder is
    dynamic by default (once `test_decoder_loop_feeds_back_presents_and_tokens_vary` and
    `test_folder_is_dynamic_by_default_with_optimums_dim_names`)."""
    _check(hf_export, name, target)
    if (name, target) == ("gpt2", "ort"):
        _decoder_loop_feeds_back_presents_and_tokens_vary(hf_export)
    if (name, target) == ("bert", "trt8.6"):
        _folder_is_dynamic_by_default_with_optimums_dim_names(hf_export, hf_folder)


def _once_each(names: list[str], targets: tuple[str, ...] | list[str]) -> list[Any]:
    """names × targets: each model's FAST row (else one target, rotating so each occurs) runs
    in `make test`; the model's other targets are `full` (make test-full): the same model's
    route, pinned by its row here, lowered for a target that other models' rows pin."""
    fast = dict(FAST)
    params = []
    for i, name in enumerate(names):
        once = fast.get(name, targets[i % len(targets)])
        params += [pytest.param(name, t, id=f"{name}-{t}",
                                marks=[] if t == once else [pytest.mark.full])
                   for t in targets]
    return params


@pytest.mark.slow
@pytest.mark.parametrize("name,target", _once_each(sorted(MODELS), TARGETS))
def test_folder_exports_every_model_and_target(hf_export, name: str, target: str) -> None:
    if (name, target) in FAST:
        pytest.skip("runs unmarked (test_folder_exports_representative)")
    _check(hf_export, name, target)


@pytest.mark.slow
@pytest.mark.parametrize("name,target", _once_each(list(MORE_MODELS), ["ort", "trt8.2"]))
def test_folder_exports_more_architectures(hf_export, name: str, target: str) -> None:
    """Beyond the issue's list: rotary (Llama, Gemma), ALiBi (Bloom), relative attention
    (DeBERTa), windowed vision (Swin), a sigmoid two-tower (SigLIP), Marian."""
    _check(hf_export, name, target)


def _decoder_loop_feeds_back_presents_and_tokens_vary(hf_export) -> None:
    """The decode check is not vacuous: the wide init makes GPT-2 pick varied tokens."""
    report = hf_export("gpt2", "ort").report
    assert len(set(report["generation"]["generate"])) > 2


# -- dynamic by default (issue 34) -------------------------------------------------------------

def _bert_fresh_errors(folder: Path, graph: Path, shapes: list[tuple[int, int]]) -> list[float]:
    """Max abs error of `graph` in ONNX Runtime against the folder's BertModel in PyTorch on
    inputs the export never saw, one per (batch, sequence) shape."""
    import numpy as np
    import onnxruntime as ort
    import torch
    import transformers

    model = transformers.BertModel.from_pretrained(str(folder), attn_implementation="eager")
    session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    gen = torch.Generator().manual_seed(7)
    errors = []
    for batch, seq in shapes:
        feed = {"input_ids": torch.randint(0, model.config.vocab_size, (batch, seq),
                                           generator=gen),
                "attention_mask": torch.ones(batch, seq, dtype=torch.long),
                "token_type_ids": torch.zeros(batch, seq, dtype=torch.long)}
        feed["attention_mask"][0, seq // 2 + 1:] = 0  # one padded row
        feed["token_type_ids"][:, seq // 2:] = 1
        got = session.run(["last_hidden_state"], {k: v.numpy() for k, v in feed.items()})[0]
        with torch.no_grad():
            ref = model(**feed).last_hidden_state.numpy()
        errors.append(float(np.abs(got - ref).max()))
    return errors


def _folder_is_dynamic_by_default_with_optimums_dim_names(hf_export, hf_folder) -> None:
    """No flags: batch and sequence are symbolic, named as optimum names them, parity ran at
    four sizes of the ranges, and the graph matches PyTorch at three fresh shapes."""
    code, report, out, err, _given = hf_export("bert", "trt8.6")
    assert code == 0, err
    ins, outs = _io(out)
    assert ins == {n: ["batch_size", "sequence_length"]
                   for n in ("input_ids", "attention_mask", "token_type_ids")}
    assert outs["last_hidden_state"][:2] == ["batch_size", "sequence_length"]
    assert outs["pooler_output"][0] == "batch_size"
    dims = {d["name"]: d for d in report["dynamic"]["dims"]}
    assert set(dims) == {"batch_size", "sequence_length"}
    shapes = report["dynamic"]["shapes"]
    assert [s["label"] for s in shapes] == ["opt", "min", "odd", "max"]
    assert all(s["onnxruntime"]["status"] == "passed" for s in shapes), shapes
    assert len({tuple(s["inputs"]["input_ids"]) for s in shapes}) == 4
    errors = _bert_fresh_errors(hf_folder("bert"), out, [(1, 5), (3, 11), (8, 32)])
    assert max(errors) < 1e-4, errors


@pytest.mark.slow  # the default (dynamic) route: test_folder_exports_representative[bert-trt8.6]
def test_folder_static_keeps_the_example_sizes(hf_folder, tmp_path: Path) -> None:
    out, rep = tmp_path / "bert.onnx", tmp_path / "bert.json"
    res = run_cli(hf_folder("bert"), "--target", "ort", "--static", "-o", out, "--report", rep,
                  "--iterations", "0")
    assert res.code == 0, res.err
    ins, outs = _io(out)
    assert ins == {n: [2, 16] for n in ("input_ids", "attention_mask", "token_type_ids")}
    assert outs["last_hidden_state"][:2] == [2, 16]
    report = json.loads(rep.read_text())
    assert not report.get("dynamic"), report.get("dynamic")
    assert report["parity"]["status"] == "passed"
