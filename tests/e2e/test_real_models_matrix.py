"""Every target on real architectures (examples/real_models.py: transformers configs, random
weights, hidden 32): each model saved as an ExportedProgram returning the library's output
object (called with keyword inputs) and as TorchScript (`--input` named after forward()'s
parameters); each target exits 0, finds every
GELU, keeps the model's output names and input names, and matches eager PyTorch (fp32
within 1e-4 of the output's scale, fp16 within 1e-2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import onnx
import pytest

from tests.conftest import run_cli

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")


class Case(NamedTuple):
    """What one architecture must show on every target."""

    outputs: list[str]
    gelu_kinds: list[str]  # one per GELU site, in graph order


#: Whisper's encoder: exact GELU after each of its two convolutions and in its one MLP.
#: GPT-NeoX: exact GELU in its MLP. DeBERTa-v2: exact GELU in its MLP, a finfo.min mask.
#: T5 v1.1: gated gelu_new (tanh) in the encoder's and the decoder's MLP. Swin: exact GELU in
#: the MLP of each of its two stages' blocks, shifted-window attention.
MODELS: dict[str, Case] = {
    "whisper_encoder": Case(["last_hidden_state"], ["exact"] * 3),
    "gpt_neox": Case(["last_hidden_state"], ["exact"]),
    "deberta": Case(["last_hidden_state"], ["exact"]),
    "t5": Case(["last_hidden_state", "encoder_last_hidden_state"], ["tanh"] * 2),
    "swin": Case(["last_hidden_state", "pooler_output"], ["exact"] * 2),
}

#: target argv → relative tolerance (of the output's scale) for parity with eager PyTorch.
TARGETS: dict[tuple[str, ...], float] = {
    ("onnx",): 1e-4,
    ("ort",): 1e-4,
    ("trt",): 1e-4,
    ("trt8.2",): 1e-4,
    ("trt8.6", "--precision", "fp16"): 1e-2,
}

#: Cases run elsewhere or sharing a path with one run here, left out to keep this file near
#: three minutes on two cores. A TorchScript file bound for `onnx`, `ort` or `trt` takes one
#: path (converted to an ExportedProgram, exported by dynamo at opset 20; only the lowering
#: differs, and that is covered by the ExportedProgram cases): it is run once, on `trt`.
#: T5's exported `onnx` and `trt8.2` runs are in tests/e2e/test_real_models.py.
#: Swin as TorchScript (its trace returns a dict) converts to an ExportedProgram only with
#: grad enabled (exporter/capture/capture.py `script_to_program`), and dynamo cannot export that
#: program at opset 20, so `onnx`/`ort`/`trt` take the TorchScript exporter at opset 20
#: (the note says so); its `trt` run covers that path.
LEFT_OUT = {(n, "torchscript", t) for n in MODELS for t in ("onnx", "ort")} | \
    {("t5", "exported", "onnx"), ("t5", "exported", "trt8.2")}

#: the slowest runs kept here (~10-40 s each under load): TorchScript converted for the
#: dynamo exporter, and T5 through dynamo (retried after decompositions).
SLOW = {(n, "torchscript", "trt") for n in MODELS} | {("t5", "exported", t) for t in ("ort", "trt")}


#: The rows `make test` runs: each target once, each model once but T5 (its dynamo route, and
#: its `onnx` and `trt8.2` runs, are tests/e2e/test_real_models.py's
#: test_t5_exported_with_keywords_on_dynamo_and_torchscript), TorchScript converted for dynamo
#: once. The other rows are `full` (make test-full): the same paths on further models, each
#: pinned by the row of its target and the row of its model here.
REPRESENTATIVE = {("whisper_encoder", "exported", "trt8.6"), ("gpt_neox", "exported", "onnx"),
                  ("deberta", "exported", "ort"), ("swin", "exported", "trt8.2"),
                  ("gpt_neox", "torchscript", "trt")}


def _cases() -> list:
    params = []
    for name in MODELS:
        for fmt in ("exported", "torchscript"):
            for target in TARGETS:
                if (name, fmt, target[0]) in LEFT_OUT:
                    continue
                marks = [pytest.mark.slow] if (name, fmt, target[0]) in SLOW else []
                if (name, fmt, target[0]) not in REPRESENTATIVE:
                    marks.append(pytest.mark.full)
                params.append(pytest.param(name, fmt, target, marks=marks,
                                           id=f"{name}-{fmt}-{'-'.join(target)}"))
    return params


@pytest.mark.parametrize(("name", "fmt", "target"), _cases())
def test_every_target_finds_every_gelu_and_matches_pytorch(
        saved_real, tmp_path: Path, name: str, fmt: str, target: tuple[str, ...]) -> None:
    from examples.real_models import KEYWORD_INPUTS

    case = MODELS[name]
    model = saved_real(name, fmt)
    # a TorchScript file carries no example inputs: name them after forward()'s parameters
    specs = [a for s in KEYWORD_INPUTS[name] for a in ("--input", s)] \
        if fmt == "torchscript" else []
    out = tmp_path / f"{name}.onnx"
    rep = tmp_path / f"{name}.json"
    res = run_cli(model, "--target", *target, "-o", out, "--report", rep,
                  "--iterations", "0", *specs)
    assert res.code == 0, res.err
    report = json.loads(rep.read_text())
    assert [s["kind"] for s in report["gelu_sites"]] == case.gelu_kinds
    graph = onnx.load(str(out), load_external_data=False).graph
    assert [o.name for o in graph.output] == case.outputs
    input_names = [s.split(":")[0] for s in KEYWORD_INPUTS[name]]
    assert [i.name for i in graph.input if i.name in input_names] == input_names
    parity = report["parity"]
    assert parity["status"] == "passed", parity
    assert list(parity["outputs"]) == case.outputs
    tol = TARGETS[target]
    for out_name, stats in parity["outputs"].items():
        assert stats["max_abs"] <= tol * max(stats["ref_scale"], 1.0), (out_name, stats)
    fp16 = "fp16" in target
    want = onnx.TensorProto.FLOAT16 if fp16 else onnx.TensorProto.FLOAT
    assert graph.output[0].type.tensor_type.elem_type == want

