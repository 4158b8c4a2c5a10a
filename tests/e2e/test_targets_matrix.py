"""Every TensorRT profile × the BERT, GPT-2 and ViT examples: the produced graph fits the
profile (checker, opset ceiling, no op it lacks), keeps every GELU site, and matches PyTorch
in ONNX Runtime; plus the fp16 GPT-2 export for TensorRT 8.6.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from examples.models import EXAMPLES, build
from examples.save_model import example_inputs
from export_gelu import export
from export_gelu.graph import load, walk
from export_gelu.parse_check import incompatibilities, model_opset
from export_gelu.targets import PROFILES, TRT_PROFILES
from tests.passes.test_downconvert import unread_constants

MATRIX_EXAMPLES = ("bert", "gpt2", "vit")
_EAGER: dict[str, np.ndarray] = {}


def eager_output(example: str) -> np.ndarray:
    """PyTorch's output for the example's inputs (computed once per example)."""
    if example not in _EAGER:
        with torch.no_grad():
            _EAGER[example] = build(example)(*example_inputs(example)).numpy()
    return _EAGER[example]


def ort_output(path: Path, example: str, dtype: type | None = None) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {}
    for meta, arg in zip(sess.get_inputs(), example_inputs(example)):
        arr = arg.numpy()
        feed[meta.name] = arr.astype(dtype) if dtype is not None and arr.dtype.kind == "f" else arr
    return sess.run(None, feed)[0]


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """Max abs error relative to the output's scale (max |ref|)."""
    return float(np.abs(out.astype(np.float64) - ref).max() / np.abs(ref).max())


def producers(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {o: n for n in model.graph.node for o in n.output}


def ops_feeding(model: onnx.ModelProto, node: onnx.NodeProto, depth: int = 8) -> set[str]:
    """Op types among the elementwise ancestors of `node` (the rest of its GELU group)."""
    prod = producers(model)
    seen: set[str] = set()
    frontier = [node]
    for _ in range(depth):
        nxt = []
        for n in frontier:
            for i in n.input:
                p = prod.get(i)
                if p is not None and p.op_type in ("Mul", "Add", "Pow", "Div", "Cast", "Constant",
                                                   "Sub", "Tanh", "Erf", "Sigmoid", "Clip"):
                    seen.add(p.op_type)
                    nxt.append(p)
        frontier = nxt
    return seen


@pytest.fixture(scope="module")
def saved(saved_model):
    """One saved ExportedProgram per example, shared by every profile."""
    return {ex: saved_model(ex, "exported") for ex in MATRIX_EXAMPLES}


@pytest.mark.parametrize("profile", TRT_PROFILES, ids=lambda p: p.name)
@pytest.mark.parametrize("example", MATRIX_EXAMPLES)
def test_each_example_fits_each_trt_profile(example, profile, saved, tmp_path):
    out = tmp_path / f"{example}.{profile.name}.onnx"
    rep = export(saved[example], target=profile.name, output=out, verify=False)
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    assert model_opset(model) <= profile.opset_ceiling
    assert rep.opset == model_opset(model)
    ops = Counter(n.op for n in walk(load(model)))
    assert not [op for op in ops if not profile.supports(op)]
    assert incompatibilities(model, profile) == []
    assert not unread_constants(model)

    sites = EXAMPLES[example].gelu_sites
    kind = EXAMPLES[example].gelu_kind
    if profile.has_gelu_op:
        assert ops["Gelu"] == sites
        assert ops["Erf"] == ops["Tanh"] == 0
    else:
        assert ops["Gelu"] == 0
        assert ops["Erf" if kind == "exact" else "Tanh"] == sites
        assert ops["Tanh" if kind == "exact" else "Erf"] == 0
    if not profile.supports("LayerNormalization"):
        assert ops["LayerNormalization"] == 0 and ops["Pow"] == 0
        assert ops["ReduceMean"] >= 2 * 5  # mean and variance for each of the 5 norms
    assert relative_error(ort_output(out, example), eager_output(example)) < 1e-4


def test_fp16_gpt2_for_trt86_has_no_pow_in_gelu_and_stays_within_fp16_tolerance(saved, tmp_path):
    out = tmp_path / "gpt2.fp16.trt8.6.onnx"
    rep = export(saved["gpt2"], target="trt8.6", precision="fp16", output=out, iterations=0)
    assert rep.parity.status == "passed", rep.parity.reason
    model = onnx.load(str(out))
    tanhs = [n for n in model.graph.node if n.op_type == "Tanh"]
    assert len(tanhs) == EXAMPLES["gpt2"].gelu_sites
    for tanh in tanhs:
        assert "Pow" not in ops_feeding(model, tanh)
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT64
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    out16 = ort_output(out, "gpt2")
    assert out16.dtype == np.float16 and np.isfinite(out16).all()
    assert relative_error(out16, eager_output("gpt2")) < 2e-2


@pytest.mark.parametrize("fmt,target", [("torchscript", "trt7.0"), ("exported", "trt8.2")])
def test_fp16_gpt2_from_other_formats_for_old_trt(fmt, target, saved_model, tmp_path):
    """TorchScript (converted with TS2EPConverter, dtypes baked by its trace) and the
    ExportedProgram, in fp16, through the TorchScript exporter with attention lowered."""
    out = tmp_path / "g.onnx"
    rep = export(saved_model("gpt2", fmt), target=target, precision="fp16", output=out,
                 input=[EXAMPLES["gpt2"].input_spec], iterations=0)
    assert rep.parity.status == "passed", rep.parity.reason
    model = onnx.load(str(out))
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    assert incompatibilities(model, PROFILES[target]) == []
    assert relative_error(ort_output(out, "gpt2"), eager_output("gpt2")) < 2e-2
