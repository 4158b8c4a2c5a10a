"""A float64 model's device bundle records what its check here used (fp64 precision and
tolerances), and `verify --device-outputs` judges the device's outputs with exactly those:
outputs of the bundle's own graph pass, outputs off by a float32 rounding's size do not."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import pytest
import torch

from export_gelu.device.bundle import read_raw
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
    TensorRT) on the raw input files, saved as polygraphy --save-outputs does (full float64)."""
    import onnxruntime as ort
    from polygraphy.comparator import RunResults
    from polygraphy.comparator.struct import IterationResult

    manifest = json.loads((bundle / "manifest.json").read_text())
    feed = {r["name"]: read_raw(bundle / r["file"], r["binding_dtype"], r["shape"])
            .astype(r["onnx_dtype"]) for r in manifest["inputs"]}
    sess = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    outputs = OrderedDict((n, a + offset) for n, a in zip(names, sess.run(None, feed)))
    results = RunResults()
    results.append(("trt-runner", [IterationResult(outputs, runner_name="trt-runner")]))
    results.save(str(out))


def test_the_bundle_records_the_float64_check_it_was_made_with(float64_bundle) -> None:
    _model, bundle, report = float64_bundle
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert report["parity"]["status"] == "passed"
    assert manifest["precision"] == "fp64"
    assert manifest["tolerances"] == {"atol": report["parity"]["atol"],
                                      "rtol": report["parity"]["rtol"]}
    assert (manifest["tolerances"]["atol"], manifest["tolerances"]["rtol"]) == \
        DEFAULT_TOLERANCES["fp64"]
    assert {r["onnx_dtype"] for r in manifest["inputs"] + manifest["outputs"]} == {"float64"}


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


def test_an_error_fp32_tolerances_would_pass_fails_the_float64_bundle(float64_bundle,
                                                                      tmp_path) -> None:
    """1e-6 off everywhere: within fp32's 1e-4, far outside fp64's 1e-10."""
    model, bundle, _report = float64_bundle
    out = tmp_path / "outputs.json"
    _device_run(bundle, out, offset=1e-6)
    res = run_cli("verify", model, "--bundle", bundle, "--device-outputs", out)
    assert res.code == 1, res.err + res.out
    assert "Parity: FAILED" in res.out and "atol 1e-10" in res.out
