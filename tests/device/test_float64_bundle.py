"""A float64 model's device bundle for TensorRT: the parser reads DOUBLE as FLOAT, so the
engine binds the inputs and computes in float32. The bundle writes float32 input files, records
fp32 precision and tolerances (the check here ran in float64, and says so), and
`verify --device-outputs` judges float32 device outputs with those: a float32 run of the graph
passes, an error fp32's tolerances do not allow fails."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import pytest
import torch

from export_gelu.device.binding import read_raw
from export_gelu.tolerances import DEFAULT_TOLERANCES
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def float64_bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """(model, bundle, the export's JSON report): a tiny float64 MLP with a tanh GELU, saved as
    an ExportedProgram and exported for trt10 with --bundle."""
    d = tmp_path_factory.mktemp("float64-bundle")
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(approximate="tanh"),
                                 torch.nn.Linear(16, 4)).double().eval()
    model = d / "mlp64.pt2"
    torch.export.save(torch.export.export(module, (torch.randn(2, 8, dtype=torch.float64),)),
                      model)
    res = run_cli(model, "--target", "trt10", "-o", d / "mlp64.onnx", "--bundle", d / "B",
                  "--report", d / "export.json", "--iterations", "0", "--warmup", "0")
    assert res.code == 0, res.err + res.out
    return model, d / "B", json.loads((d / "export.json").read_text())


def _device_run(bundle: Path, out: Path, offset: float = 0.0) -> None:
    """What the device would write: the bundle's graph run (ONNX Runtime standing in for
    TensorRT) on the raw float32 input files, its outputs in float32 as the engine's are,
    saved as polygraphy --save-outputs does."""
    import onnxruntime as ort
    from polygraphy.comparator import RunResults
    from polygraphy.comparator.struct import IterationResult

    manifest = json.loads((bundle / "manifest.json").read_text())
    feed = {r["name"]: read_raw(bundle / r["file"], r["binding_dtype"], r["shape"])
            .astype(r["onnx_dtype"]) for r in manifest["inputs"]}
    sess = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    outputs = OrderedDict((n, (a + offset).astype("float32"))
                          for n, a in zip(names, sess.run(None, feed)))
    results = RunResults()
    results.append(("trt-runner", [IterationResult(outputs, runner_name="trt-runner")]))
    results.save(str(out))


def test_the_bundle_records_what_tensorrt_computes_a_float64_graph_in(float64_bundle) -> None:
    _model, bundle, report = float64_bundle
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert report["parity"]["status"] == "passed"
    assert report["precision"] == "fp64"
    assert (report["parity"]["atol"], report["parity"]["rtol"]) == DEFAULT_TOLERANCES["fp64"]
    assert manifest["precision"] == "fp32"
    assert (manifest["tolerances"]["atol"], manifest["tolerances"]["rtol"]) == \
        DEFAULT_TOLERANCES["fp32"]
    assert {r["onnx_dtype"] for r in manifest["inputs"] + manifest["outputs"]} == {"float64"}
    assert {r["binding_dtype"] for r in manifest["inputs"]} == {"float32"}
    assert [r["bytes"] for r in manifest["inputs"]] == [2 * 8 * 4]
    assert "float64-on-tensorrt" in {n["code"] for n in report["notes"]}


def test_device_outputs_of_the_bundle_graph_pass_with_its_tolerances(float64_bundle,
                                                                     tmp_path) -> None:
    model, bundle, _report = float64_bundle
    out, rep = tmp_path / "outputs.json", tmp_path / "verify.json"
    _device_run(bundle, out)
    res = run_cli("verify", model, "--bundle", bundle, "--device-outputs", out, "--report", rep)
    assert res.code == 0, res.err + res.out
    parity = json.loads(rep.read_text())["parity"]
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert parity["status"] == "passed"
    assert {"atol": parity["atol"], "rtol": parity["rtol"]} == manifest["tolerances"]


def test_an_error_beyond_fp32_tolerances_fails_the_float64_bundle(float64_bundle,
                                                                  tmp_path) -> None:
    """1e-2 off everywhere: outside fp32's 1e-4 absolute and 1e-3 relative."""
    model, bundle, _report = float64_bundle
    out = tmp_path / "outputs.json"
    _device_run(bundle, out, offset=1e-2)
    res = run_cli("verify", model, "--bundle", bundle, "--device-outputs", out)
    assert res.code == 1, res.err + res.out
    assert "Parity: FAILED" in res.out and "atol 0.0001" in res.out
