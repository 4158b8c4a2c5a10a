"""What the device tests share: the tiny BERT's bundle of GELU forms (built once), a
stand-in device run of it (tests/trtexec_standin.py), and copies of that run varied per test."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from export_gelu.device.outputs import read_trtexec_outputs
from tests.conftest import ROOT, run_cli
from tests.trtexec_standin import install, write_outputs, write_times

#: trt8.6: the plugin form is in the bundle too (its parser creates CustomGeluPluginDynamic).
TARGET = "trt8.6"
#: Loose enough for the sigmoid form (≈1.4e-3 on the tiny BERT), tight enough for an offset.
ATOL = "1e-2"
FORMS = ("keep", "tanh", "sigmoid", "plugin")


@pytest.fixture(scope="module")
def forms_bundle(saved_model, session_cache) -> tuple[Path, Path]:
    """(model, bundle): the tiny BERT exported with --gelu auto --bundle for trt8.6, once."""
    model = saved_model("bert", "exported")

    def build(d: Path) -> None:
        res = run_cli(model, "--target", TARGET, "--gelu", "auto", "--bundle", d / "B",
                      "-o", d / "auto.onnx", "--iterations", "2", "--warmup", "0")
        assert res.code == 0, res.err + res.out

    return model, session_cache.folder("bert-forms-bundle", build) / "B"


def device_run(bundle: Path, tmp: Path, **env: str) -> tuple[Path, subprocess.CompletedProcess]:
    """A copy of the bundle, run by its run_on_device.sh with the stand-in trtexec."""
    copy = tmp / "B"
    shutil.copytree(bundle, copy)
    trtexec = install(tmp / "trtexec")
    run_env = {**os.environ, "TRTEXEC": str(trtexec), "ROUNDS": "2",
               "PYTHONPATH": str(ROOT), **env}
    done = subprocess.run(["sh", str(copy / "run_on_device.sh")], env=run_env, text=True,
                          capture_output=True, timeout=300)
    return copy, done


def verify(model: Path, bundle: Path, *extra: str):
    return run_cli("verify", model, "--bundle", bundle, "--device-outputs", bundle / "outputs",
                   *extra)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _ran_once(bundle: Path, session_cache, name: str) -> Path:
    """The stand-in device run of `bundle`, made once for every test, worker and session
    (session_cache: a `sh` and a Python trtexec per form each time, about 5 CPU seconds for
    the forms bundle): read-only, as a device's folder a test copies before changing it."""

    def build(d: Path) -> None:
        _ran, done = device_run(bundle, d)
        assert done.returncode == 0, done.stderr

    return session_cache.folder(name, build) / "B"


@pytest.fixture(scope="module")
def device_outputs(forms_bundle, session_cache) -> Path:
    """One stand-in device run of the bundle (all forms built), to vary per test (copy it
    first: it is shared)."""
    _model, bundle = forms_bundle
    return _ran_once(bundle, session_cache, "bert-forms-device-run")


def varied(device_outputs: Path, tmp: Path, times: dict[str, float],
           offset: dict[str, float] | None = None) -> Path:
    """A copy of the device run whose times say `times` (ms) and whose outputs of the forms
    in `offset` are off by that much."""
    copy = tmp / "B"
    shutil.copytree(device_outputs, copy)
    for form in FORMS:
        folder = copy / "outputs" / form
        for n in (1, 2):
            write_times(folder / f"times.{n}.json", times[form], 100, 200.0, f"{form}{n}")
        if offset and form in offset:
            path = folder / "outputs.json"
            outs = read_trtexec_outputs(path, path.read_text())
            write_outputs({k: v + offset[form] for k, v in outs.items()}, path)
    return copy


@pytest.fixture(scope="module")
def single_bundle(saved_model, session_cache) -> tuple[Path, Path]:
    """(model, bundle): the tiny BERT exported for trt8.2 with --bundle (one graph), once."""
    model = saved_model("bert", "exported")

    def build(d: Path) -> None:
        res = run_cli(model, "--target", "trt8.2", "--bundle", d / "B", "-o", d / "b.onnx",
                      "--no-verify", "--iterations", "0")
        assert res.code == 0, res.err + res.out

    return model, session_cache.folder("bert-single-bundle", build) / "B"


@pytest.fixture(scope="module")
def single_run(single_bundle, session_cache) -> Path:
    """One stand-in device run of the single-graph bundle: outputs.json, times.json,
    trtexec.log beside its files (shared: copy it first)."""
    _model, bundle = single_bundle
    return _ran_once(bundle, session_cache, "bert-single-device-run")
