"""Issue 14's matrix: BERT (input_ids, attention_mask, token_type_ids), GPT-2 and ViT from
examples/models.py, each as a pickled module, a state_dict + factory and a dynamic
ExportedProgram, exported with dynamic batch and sequence (ViT: batch only) for every target.

The full product (3 models x 3 formats x 5 targets) would take 45 exports; this file runs 15:
every (model, target) pair once, with the format rotating so that every (model, format) pair
is covered too, and every target sees a dynamic ExportedProgram exported without any
`--dynamic` flag (its own ranges). Each output must carry the named dims on its inputs and
outputs, run in ONNX Runtime at three shapes within 1e-4 of the output scale of eager
PyTorch, and its report must list each dim with its range and the shapes parity ran at.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from examples.models import VOCAB, bert_model, gpt2, vit
from tests.conftest import run_cli
from tests.test_dynamic_shapes import baked_sizes

pytestmark = pytest.mark.slow

TARGETS = ["onnx", "ort", "trt10", "trt8.6", "trt8.2"]
FORMATS = ["pickle", "state_dict", "exported"]
#: The capture (OPT) size: no model dim equals it (hidden 64, heads 4, patches 16 + 1).
BATCH, SEQ = 3, 13
#: `--dynamic` for pickles and state_dicts; a dynamic ExportedProgram gets no flag.
TOKEN_RANGES = {"batch": (1, BATCH, 8), "seq": (8, SEQ, 64)}
#: The ranges the ExportedPrograms are saved with (torch.export.Dim).
EP_RANGES = {"batch": (1, 8), "seq": (1, 64)}
#: Shapes ONNX Runtime runs every output at, against eager PyTorch.
SHAPES = [(1, 8), (3, 40), (8, 64)]


@dataclass(frozen=True)
class Case:
    """One model of the matrix: how to build it, its inputs and the dims they carry."""

    name: str
    factory: str  # --model-factory
    build: object  # () -> nn.Module
    inputs: tuple[tuple[str, tuple[str | int, ...], str], ...]  # (name, dims, --input tail)
    out_dims: tuple[str | int, ...]  # the output's dims

    @property
    def dims(self) -> list[str]:
        return [d for d in ("batch", "seq") if any(d in i[1] for i in self.inputs)]

    def input_flags(self) -> list[str]:
        flags = []
        for name, dims, tail in self.inputs:
            flags += ["--input", f"{name}:{'x'.join(map(str, dims))}:{tail}"]
        return flags

    def feed(self, batch: int, seq: int, seed: int = 0) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        sizes = {"batch": batch, "seq": seq}
        out = {}
        for name, dims, tail in self.inputs:
            shape = tuple(sizes.get(d, d) for d in dims)
            if tail.startswith("float"):
                out[name] = rng.standard_normal(shape).astype(np.float32)
            else:
                high = VOCAB if name in ("input_ids", "x") else 2
                out[name] = rng.integers(0, high, shape).astype(np.int64)
                if name == "attention_mask":
                    out[name][:, 0] = 1
        return out


IDS = "int64:0," + str(VOCAB)
CASES = {
    "bert": Case("bert", "examples.models:bert_model", bert_model,
                 (("input_ids", ("batch", "seq"), IDS),
                  ("attention_mask", ("batch", "seq"), "int64:0,2"),
                  ("token_type_ids", ("batch", "seq"), "int64:0,2")), ("batch", "seq", 64)),
    "gpt2": Case("gpt2", "examples.models:gpt2", gpt2, (("x", ("batch", "seq"), IDS),),
                 ("batch", "seq", 64)),
    "vit": Case("vit", "examples.models:vit", vit, (("x", ("batch", 3, 32, 32), "float32"),),
                ("batch", 17, 64)),
}

#: (model, format, target): every target once per model, the format rotating per model, so
#: every (model, format) pair and every (format, target) pair for the ExportedProgram occurs.
MATRIX = [(m, FORMATS[(i + k) % 3], t) for k, m in enumerate(CASES) for i, t in enumerate(TARGETS)]


def _eager(case: Case, model: torch.nn.Module, feed: dict[str, np.ndarray]) -> np.ndarray:
    with torch.no_grad():
        tensors = {k: torch.from_numpy(v) for k, v in feed.items()}
        if case.name == "bert":  # transformers' BertModel, called by keyword
            return model(**tensors).last_hidden_state.numpy()
        return model(*tensors.values()).numpy()


@pytest.fixture(scope="session")
def matrix_file(tmp_path_factory: pytest.TempPathFactory):
    """matrix_file(model, format) → the model saved in that format (once per session)."""
    root = tmp_path_factory.mktemp("dynamic-matrix")
    cache: dict[tuple[str, str], Path] = {}

    def get(name: str, fmt: str) -> Path:
        if (name, fmt) in cache:
            return cache[(name, fmt)]
        case, path = CASES[name], root / f"{name}.{fmt}.pt"
        model = case.build()
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            if fmt == "pickle":
                torch.save(model, str(path))
            elif fmt == "state_dict":
                torch.save(model.state_dict(), str(path))
            else:
                dims = {d: torch.export.Dim(d, min=lo, max=hi) for d, (lo, hi) in EP_RANGES.items()}
                feed = {k: torch.from_numpy(v) for k, v in case.feed(BATCH, SEQ).items()}
                shapes = {k: {a: dims[d] for a, d in enumerate(dims_) if isinstance(d, str)}
                          for k, dims_, _ in case.inputs}
                if case.name == "bert":
                    ep = torch.export.export(model, (), feed, dynamic_shapes=shapes, strict=False)
                else:
                    ep = torch.export.export(model, tuple(feed.values()),
                                             dynamic_shapes=tuple(shapes.values()), strict=False)
                torch.export.save(ep, str(path))
        cache[(name, fmt)] = path
        return path

    return get


@pytest.fixture(scope="module")
def eager_models() -> dict[str, torch.nn.Module]:
    return {name: case.build() for name, case in CASES.items()}


def _dims(vi: onnx.ValueInfoProto) -> tuple:
    return tuple(d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim)


@pytest.mark.parametrize("name,fmt,target", MATRIX, ids=["-".join(c) for c in MATRIX])
def test_one_export_serves_every_shape(name, fmt, target, matrix_file, eager_models, tmp_path):
    case = CASES[name]
    flags: list[str] = []
    if fmt == "pickle":
        flags += ["--allow-pickle"]
    elif fmt == "state_dict":
        flags += ["--model-factory", case.factory]
    if fmt != "exported":  # a dynamic ExportedProgram stays dynamic with no flag at all
        flags += case.input_flags()
        for d in case.dims:
            flags += ["--dynamic", f"{d}={':'.join(map(str, TOKEN_RANGES[d]))}"]
    out, rep = tmp_path / "o.onnx", tmp_path / "r.json"
    res = run_cli(matrix_file(name, fmt), "--target", target, "-o", out, "--report", rep,
                  "--iterations", "0", *flags)
    assert res.code == 0, res.err + res.out

    # The graph's inputs and outputs carry the named symbolic dims.
    model = onnx.load(str(out))
    assert {i.name: _dims(i) for i in model.graph.input} == {
        n: dims for n, dims, _ in case.inputs}
    assert [_dims(o) for o in model.graph.output] == [case.out_dims]
    if "seq" in case.dims:  # no Reshape/Expand holds the capture size (ViT's 3 is its channels)
        assert baked_sizes(model, {BATCH, SEQ}) == []

    # The report lists each dim with its range and the shapes parity ran at, all passed.
    report = json.loads(rep.read_text())
    want = {d: (EP_RANGES[d][0], {"batch": BATCH, "seq": SEQ}[d], EP_RANGES[d][1])
            if fmt == "exported" else TOKEN_RANGES[d] for d in case.dims}
    assert {d["name"]: (d["min"], d["opt"], d["max"]) for d in report["dynamic"]["dims"]} == want
    shapes = report["dynamic"]["shapes"]
    assert [s["label"] for s in shapes] == ["opt", "min", "odd", "max"]
    for s in shapes:
        assert s["onnxruntime"]["status"] == "passed", s
        assert set(s["sizes"]) == set(case.dims)

    # One export, three shapes: ONNX Runtime matches eager PyTorch within 1e-4 of the scale.
    import onnxruntime as ort

    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for batch, seq in SHAPES:
        feed = case.feed(batch, seq, seed=batch)
        want_out = _eager(case, eager_models[name], feed)
        got = sess.run(None, feed)[0]
        assert got.shape == want_out.shape
        err = float(np.abs(got - want_out).max() / np.abs(want_out).max())
        assert err <= 1e-4, (batch, seq, err)


def test_a_static_model_stays_static(saved_model, tmp_path):
    """No --dynamic, a static ExportedProgram: every dim of the output graph is a number."""
    out = tmp_path / "o.onnx"
    res = run_cli(saved_model("gpt2", "exported"), "--target", "trt8.2", "-o", out,
                  "--iterations", "0")
    assert res.code == 0, res.err + res.out
    model = onnx.load(str(out))
    for vi in [*model.graph.input, *model.graph.output]:
        assert all(isinstance(d, int) and d > 0 for d in _dims(vi)), (vi.name, _dims(vi))
