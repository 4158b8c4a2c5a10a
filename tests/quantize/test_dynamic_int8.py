"""`--dynamic` with `--precision int8|fp8`: Q/DQ placement does not depend on shapes, the
calibration runs on feeds of the run's own (OPT) sizes, and the verdict also runs at the
sizes parity takes (min, an odd size, max). The written graph keeps its inputs' dims
symbolic. TensorRT 7.0 has no calibration profile, so its cache route with dynamic shapes is
refused (exit 3); 7.1 takes it (trtexec gives `--calib` the build's shapes)."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from export_gelu.quantize import plan_quantization, read_calibration_cache
from export_gelu.quantize.read_qdq import QDQ_OPS
from tests.conftest import run_cli

VOCAB = 1000
#: docs/cli.md's syntax: a dim named in --input and ranged by --dynamic DIM=MIN:OPT:MAX.
DYNAMIC = ("--input", f"input_ids:batchxseq:int64:0,{VOCAB}", "--dynamic", "batch=1:2:4",
           "--dynamic", "seq=8:16:24")


@pytest.fixture(scope="module")
def bert_pickle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled tiny BERT (hidden 64, two layers: examples/models.py) as a pickled module."""
    import torch

    from examples.models import bert

    path = tmp_path_factory.mktemp("dyn-int8") / "bert.pt"
    torch.save(bert(), str(path))
    return path


def _dims(vi: onnx.ValueInfoProto) -> list:
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


@pytest.mark.parametrize(("target", "precision", "dq"), [("trt8.6", "int8", 24),
                                                         ("ort", "int8", 24),
                                                         ("trt10", "fp8", 24)])
def test_dynamic_quantized_graph_is_symbolic_and_judged_at_every_size(
        bert_pickle: Path, target: str, precision: str, dq: int, tmp_path: Path) -> None:
    out, rep_path = tmp_path / "b.onnx", tmp_path / "r.json"
    res = run_cli(bert_pickle, "--allow-pickle", *DYNAMIC, "--target", target, "--precision",
                  precision, "-o", out, "--report", rep_path, "--iterations", "0")
    assert res.code == 0, res.err + res.out
    model = onnx.load(str(out))
    assert [_dims(i) for i in model.graph.input] == [["batch", "seq"]]
    assert _dims(model.graph.output[0])[:2] == ["batch", "seq"]
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("DequantizeLinear") == dq  # 12 products: activation + weight each
    plan = plan_quantization(model, precision)
    assert not any(n.op_type in QDQ_OPS and n.input and n.input[0] in plan.gelu_tensors
                   for n in model.graph.node)
    rep = json.loads(rep_path.read_text())
    q = rep["quantization"]
    assert q["passed"] is True and q["products_quantized"] == q["weight_products"] == 12
    assert q["judged_feeds"] == 5 + 3  # the run's feed, 4 variants; min, odd and max
    assert f"{precision.upper()} verdict: PASSED on 8 held-out feed(s)" in res.out
    assert "dynamic sizes min (batch=1, seq=8)" in res.out and "max (batch=4, seq=24)" in res.out
    assert rep["dynamic"]["profile"][0]["min"] == 1


@pytest.fixture(scope="module")
def mlp_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The forms tests' MLP (Linear → GELU ×2, a head) as TorchScript: it parses on 7.x."""
    import torch

    from tests.quantize.test_forms_and_cache import _mlp

    path = tmp_path_factory.mktemp("dyn-mlp") / "mlp.pt"
    torch.jit.save(torch.jit.trace(*_mlp()), str(path))
    return path


def test_trt70_cache_with_dynamic_shapes_is_refused_and_trt71_takes_it(
        mlp_script: Path, tmp_path: Path) -> None:
    flags = ("--input", "x:batchx16", "--dynamic", "batch=1:4:8",
             "--precision", "int8", "--iterations", "0")
    res = run_cli(mlp_script, *flags, "--target", "trt7.0", "-o", tmp_path / "b.onnx")
    assert res.code == 3, res.err + res.out
    assert "no calibration profile before TensorRT 7.1" in res.err and "trt7.0" in res.err
    assert not (tmp_path / "b.onnx").exists()
    out = tmp_path / "c.onnx"
    res = run_cli(mlp_script, *flags, "--target", "trt7.1", "-o", out)
    assert res.code == 0, res.err + res.out
    assert [_dims(i) for i in onnx.load(str(out)).graph.input] == [["batch", 16]]
    _, scales = read_calibration_cache((tmp_path / "c.calibration.cache").read_text())
    assert len(scales) == 3  # TorchScript takes no hooks: not judged, and said (was exit 4)
    assert "INT8 verdict: not judged (a TorchScript module takes no forward hooks" in res.out
