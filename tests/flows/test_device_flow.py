"""flows/device.py: `verify --device-outputs` honours the flags every verify takes (--device,
--import); the device's run is judged as a local run would be."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli


@pytest.fixture(scope="module")
def vit_bundle(tmp_path_factory):
    """A trt8.2 bundle of a small model, and the device outputs ONNX Runtime gives for it."""
    from tests.device.test_bundle import ort_outputs, write_trtexec_outputs

    folder = tmp_path_factory.mktemp("device")
    from examples.save_model import save

    model = save("vit", "exported", folder / "vit.pt")
    bundle = folder / "bundle"
    res = run_cli(model, "--target", "trt8.2", "-o", folder / "vit.onnx", "--bundle", bundle)
    assert res.code == 0, res.err
    outputs = folder / "outputs.json"
    write_trtexec_outputs(ort_outputs(bundle), outputs)
    return model, bundle, outputs


def test_device_verify_runs_the_reference_where_device_says(vit_bundle, tmp_path):
    model, bundle, outputs = vit_bundle
    report = tmp_path / "r.json"
    res = run_cli("verify", model, "--bundle", bundle, "--device-outputs", outputs,
                  "--device", "cpu", "--report", report)
    assert res.code == 0, res.err
    rep = json.loads(report.read_text())
    assert rep["device"]["device"] == "cpu" and rep["device"]["requested"] == "cpu"
    assert rep["options"]["device"] == "cpu"


def test_device_verify_refuses_cuda_where_there_is_none(vit_bundle):
    from export_gelu.check.runners.devices import cuda_blocker

    blocker = cuda_blocker()
    if blocker is None:
        pytest.skip("this machine can run the reference on CUDA")
    model, bundle, outputs = vit_bundle
    res = run_cli("verify", model, "--bundle", bundle, "--device-outputs", outputs,
                  "--device", "cuda")
    assert res.code == 2 and "--device cuda" in res.err


def test_device_verify_imports_what_import_names(vit_bundle):
    model, bundle, outputs = vit_bundle
    res = run_cli("verify", model, "--bundle", bundle, "--device-outputs", outputs,
                  "--import", "no_such_module_here")
    assert res.code == 2 and "no_such_module_here" in res.err


