"""int8/fp8 across GELU forms and targets, through the API and the CLI: every form's graph
quantized with no Q/DQ inside a GELU and its verdict passed (trt7.0 … trt10, ort);
`--compare-forms` and `--gelu auto --bundle` at int8 (each form judged by its INT8 verdict, here
and on the stand-in device); the TensorRT 7.x calibration cache beside the output without
`--bundle`, and its bundle's device outputs judged by the INT8 verdict of the cache's
simulation; a Hugging Face folder at int8; `--keep-precision auto` keeping an outlier layer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from export_gelu.quantize import plan_quantization, read_calibration_cache
from export_gelu.quantize.read_qdq import QDQ_OPS
from tests.conftest import run_cli
from tests.device.conftest import device_run
from tests.device.test_bundle import bundle_feed, write_trtexec_outputs
from tests.hf_exports import saved_folder
from tests.quantize.outlier_mlp import MLP, outlier_mlp
from tests.session_cache import SessionCache

#: (target, forms it takes at int8): the plugin where the parser creates it. The sigmoid
#: form passes with its own error in the bound (tests/quantize/test_form_error.py).
TARGETS = {"trt7.0": ("erf", "tanh", "sigmoid"), "trt8.2": ("erf", "tanh", "sigmoid"),
           "trt8.6": ("erf", "tanh", "sigmoid", "plugin"),
           "trt10": ("erf", "tanh", "sigmoid", "plugin"), "ort": ("erf", "tanh", "sigmoid")}
CASES = [(t, f, "int8") for t, forms in TARGETS.items() for f in forms] + \
        [("trt10", f, "fp8") for f in TARGETS["trt10"]]


def _mlp():
    """Two Linear → GELU blocks and a head: small, so every case exports in a second."""
    import torch

    torch.manual_seed(0)
    return MLP(hidden=(64, 32)).eval(), (torch.randn(4, 16),)


def _qdq_in_gelu(model: onnx.ModelProto) -> int:
    plan = plan_quantization(model, "int8")  # the GELU sites of the written graph
    return sum(1 for n in model.graph.node
               if n.op_type in QDQ_OPS and n.input and n.input[0] in plan.gelu_tensors)


@pytest.mark.parametrize(("target", "form", "precision"), CASES)
def test_every_form_quantized_whole_and_judged(target: str, form: str, precision: str,
                                               tmp_path: Path) -> None:
    import export_gelu

    module, args = _mlp()
    out = tmp_path / "m.onnx"
    rep = export_gelu.export(module, args=args, target=target, gelu=form, precision=precision,
                             output=out, iterations=0, quiet=True)
    q = rep.quantization
    assert q is not None and q.passed is True, q
    assert q.qdq_inside_gelu == 0 and q.products_quantized == q.weight_products == 3
    model = onnx.load(str(out))
    assert _qdq_in_gelu(model) == 0
    gelu_ops = {"erf": "Erf", "tanh": "Tanh", "sigmoid": "Sigmoid",
                "plugin": "CustomGeluPluginDynamic"}[form]
    ops = [n.op_type for n in model.graph.node]
    if target in ("trt10", "ort") and form in ("erf", "tanh"):
        fused = ("Gelu", "FastGelu", "BiasGelu")  # native Gelu (trt10), com.microsoft (ort)
        assert sum(op in fused for op in ops) == 2, ops
    elif target == "ort" and form == "sigmoid":
        assert ops.count("QuickGelu") == 2, ops  # com.microsoft
    else:
        assert ops.count(gelu_ops) == 2
    if target == "trt7.0":  # no Q/DQ: the fp32 graph and its cache beside it
        assert not any(op in QDQ_OPS for op in ops)
        _, scales = read_calibration_cache((tmp_path / "m.calibration.cache").read_text())
        assert len(scales) == 3 and str(tmp_path / "m.calibration.cache") in rep.written
    else:
        assert sum(op == "DequantizeLinear" for op in ops) == 6  # activation + weight × 3


def test_trt70_int8_cache_beside_the_output_named_as_the_graph(saved_model,
                                                               tmp_path: Path) -> None:
    model = saved_model("bert", "exported")
    out, rep_path = tmp_path / "b.onnx", tmp_path / "r.json"
    res = run_cli(model, "--target", "trt7.0", "--precision", "int8", "-o", out,
                  "--report", rep_path)
    assert res.code == 0, res.err + res.out
    cache = tmp_path / "b.calibration.cache"
    header, scales = read_calibration_cache(cache.read_text())
    assert header == "TRT-7000-EntropyCalibration2"
    names = {t for n in onnx.load(str(out)).graph.node for t in n.output}
    names |= {i.name for i in onnx.load(str(out)).graph.input}
    assert scales and set(scales) <= names
    rep = json.loads(rep_path.read_text())
    assert str(cache) in rep["written"] and rep["quantization"]["calibration_cache"] == str(cache)
    assert "calibration cache: " in res.out


def test_trt70_cache_taken_by_another_file_is_refused_before_work(saved_model,
                                                                  tmp_path: Path) -> None:
    """The cache is planned with the outputs: a folder in its place fails before any work."""
    model = saved_model("bert", "exported")
    (tmp_path / "b.calibration.cache").mkdir()
    res = run_cli(model, "--target", "trt7.0", "--precision", "int8", "-o", tmp_path / "b.onnx")
    assert res.code == 2 and "b.calibration.cache is a directory" in res.err, res.err
    assert not (tmp_path / "b.onnx").exists()


@pytest.fixture(scope="module")
def trt70_bundle(saved_model, session_cache) -> tuple[Path, Path]:
    model = saved_model("bert", "exported")

    def build(d: Path) -> None:
        res = run_cli(model, "--target", "trt7.0", "--precision", "int8", "-o", d / "b.onnx",
                      "--bundle", d / "B", "-q")
        assert res.code == 0, res.err + res.out

    return model, session_cache.folder("bert-int8-trt70-bundle", build) / "B"


def test_trt70_bundle_device_outputs_get_the_int8_verdict(trt70_bundle, tmp_path: Path) -> None:
    """What TensorRT computes with the cache (its simulation, run in ONNX Runtime) passes
    the INT8 verdict; one output shifted by 0.05 fails it (exit 1); an edited cache is
    refused (exit 2)."""
    from export_gelu.quantize import run_graph
    from export_gelu.steps.quantize import cache_simulation

    model, bundle = trt70_bundle
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["calibration_cache"]["file"] == "calibration.cache"
    sim = cache_simulation(onnx.load(str(bundle / "model.onnx")),
                           (bundle / "calibration.cache").read_text())
    outs = run_graph(sim, [bundle_feed(bundle)])[0]
    good, bad, rep_path = tmp_path / "good.json", tmp_path / "bad.json", tmp_path / "r.json"
    write_trtexec_outputs(outs, good)
    (name,) = outs
    write_trtexec_outputs({name: outs[name] + np.float32(0.05)}, bad)
    res = run_cli("verify", model, "--bundle", bundle, "--device-outputs", good,
                  "--report", rep_path)
    assert res.code == 0, res.err + res.out
    assert "INT8 verdict: PASSED" in res.out and "Parity: skipped" in res.out
    q = json.loads(rep_path.read_text())["quantization"]
    assert q["route"] == "calibration_cache" and q["products_quantized"] == 12
    res = run_cli("verify", model, "--bundle", bundle, "--device-outputs", bad)
    assert res.code == 1 and "INT8 verdict: FAILED" in res.out, res.err + res.out
    edited = tmp_path / "E"
    import shutil

    shutil.copytree(bundle, edited)
    cache = edited / "calibration.cache"
    cache.write_text(cache.read_text().replace("TRT-7000", "TRT-7001"))
    res = run_cli("verify", model, "--bundle", edited, "--device-outputs", good)
    assert res.code == 2 and "calibration_cache.file" in res.err, res.err


def test_compare_forms_at_int8_judges_every_form(saved_model, tmp_path: Path) -> None:
    model = saved_model("bert", "exported")
    rep_path = tmp_path / "r.json"
    res = run_cli(model, "--compare-forms", "--target", "trt8.6", "--precision", "int8",
                  "--iterations", "2", "--warmup", "0", "--report", rep_path)
    assert res.code == 0, res.err + res.out
    rows = json.loads(rep_path.read_text())["forms"]["rows"]
    assert {r["form"] for r in rows} == {"keep", "tanh", "sigmoid"}
    for row in rows:
        q = row["quantized"]
        assert q["passed"] is True and q["qdq_inside_gelu"] == 0 and q["sqnr_db"] >= 30
        assert q["quantized"] == q["weight_products"] == 12
    assert "int8 forms, each judged against PyTorch at its graph's scales" in res.out


def test_gelu_auto_int8_bundle_device_chooses_by_the_int8_verdict(saved_model, session_cache,
                                                                  tmp_path: Path) -> None:
    """Every form's Q/DQ graph in the bundle with --int8; the stand-in device's outputs are
    0.0025 from fp32 PyTorch (over the bundle's fp32 atol) yet every form passes its INT8
    verdict, and one is chosen and written."""
    model = saved_model("bert", "exported")

    def build(d: Path) -> None:
        res = run_cli(model, "--target", "trt8.6", "--gelu", "auto", "--precision", "int8",
                      "--bundle", d / "B", "-o", d / "auto.onnx", "--iterations", "2",
                      "--warmup", "0")
        assert res.code == 0, res.err + res.out

    bundle = session_cache.folder("bert-int8-forms-bundle", build) / "B"
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["precision"] == "int8"
    assert {f["form"] for f in manifest["forms"]} == {"keep", "tanh", "sigmoid", "plugin"}
    for f in manifest["forms"]:
        graph = onnx.load(str(bundle / f["graph"]["file"]))
        assert _qdq_in_gelu(graph) == 0 and f["local"]["passed"] is True
        assert "--int8" in f["trtexec"]["build"]
    ran, done = device_run(bundle, tmp_path, ROUNDS="1")  # one timing round: enough to choose
    assert done.returncode == 0, done.stderr
    best = tmp_path / "best.onnx"
    res = run_cli("verify", model, "--bundle", ran, "--device-outputs", ran / "outputs",
                  "-o", best)
    assert res.code == 0, res.err + res.out
    assert "INT8 verdict" in res.out and best.is_file()
    assert res.out.count(" passed ") >= 4


def test_hf_folder_int8(session_cache: SessionCache, tmp_path: Path) -> None:
    folder = saved_folder(session_cache, "bert")  # read-only: the export writes to tmp_path
    rep_path = tmp_path / "r.json"
    res = run_cli(folder, "--target", "trt8.6", "--precision", "int8", "-o",
                  tmp_path / "b.onnx", "--report", rep_path)
    assert res.code == 0, res.err + res.out
    q = json.loads(rep_path.read_text())["quantization"]
    assert q["passed"] is True and q["qdq_inside_gelu"] == 0 and q["products_quantized"] >= 10
    assert _qdq_in_gelu(onnx.load(str(tmp_path / "b.onnx"))) == 0


def test_keep_precision_auto_keeps_the_outlier_layer_through_the_api(tmp_path: Path) -> None:
    """fc2 reads a GELU output with two channels ~300× the rest (tests/quantize/outlier_mlp.py;
    test_sensitivity.py judges the same model as a graph): auto keeps fc2 and says so."""
    import torch

    import export_gelu

    module = outlier_mlp()
    rep = export_gelu.export(module, args=(torch.randn(64, 16),), target="trt8.6",
                             precision="int8", keep_precision="auto", output=tmp_path / "m.onnx",
                             iterations=0, quiet=True)
    q = rep.quantization
    assert q is not None and [k.module for k in q.kept] == ["fc2"]
    assert q.auto is not None and q.auto.met and q.passed is True
    assert any("fc2" in str(n) for n in rep.notes)
