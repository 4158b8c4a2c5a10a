"""`--device cpu|cuda`, ONNX Runtime's execution providers as runners, and packaging that
installs exactly one ONNX Runtime.

The CPU tests run everywhere: the device choice and its refusal, the provider lists and
options each runner is built with (read back from the session), a provider that does not
load, and the report's `device`/`providers`. The GPU tests (marker `gpu`) need a CUDA GPU and
onnxruntime-gpu (`make test-gpu` installs it) and are skipped with the reason elsewhere.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from export_gelu.check.runners.devices import (
    CPU_EP,
    CUDA_EP,
    TRT_EP,
    ProviderRun,
    available_providers,
    build_runners,
    cuda_blocker,
    plan_providers,
    ready_runners,
    resolve_device,
)
from tests.conftest import ROOT, run_cli
from tests.onnx_graphs import G, tanh_pow

NO_CUDA = cuda_blocker()


@pytest.fixture(scope="module")
def gelu_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    g = G(opset=17)
    x = g.input()
    path = tmp_path_factory.mktemp("devices") / "gelu.onnx"
    onnx.save(g.model(tanh_pow(g, x)), path)
    return path


# -- the device choice -----------------------------------------------------------------------

@pytest.mark.skipif(NO_CUDA is None, reason="a CUDA GPU and ORT's CUDA provider are present")
def test_device_cuda_without_it_exits_2_with_the_reason(saved_model, tmp_path: Path) -> None:
    res = run_cli(saved_model("gpt2", "exported"), "--target", "onnx", "--device", "cuda",
                  "-o", tmp_path / "o.onnx")
    assert res.code == 2, res.err
    assert "--device cuda:" in res.err and NO_CUDA.split(";")[0] in res.err
    assert not (tmp_path / "o.onnx").exists()


@pytest.mark.skipif(NO_CUDA is None, reason="a CUDA GPU and ORT's CUDA provider are present")
def test_default_device_is_cpu_here_and_says_why() -> None:
    choice = resolve_device(None)
    assert choice.device == "cpu" and choice.requested is None
    assert choice.reason == f"cpu: {NO_CUDA}"


# -- what each runner is built with ------------------------------------------------------------

def test_cpu_plan_is_one_cpu_session() -> None:
    runs = plan_providers("cpu", "fp32")
    assert [(r.name, r.providers) for r in runs] == [("onnxruntime", [CPU_EP])]


def test_cuda_plan_puts_cuda_then_ort_tensorrt_with_cache_fp16_and_profile(tmp_path: Path) -> None:
    ranges = {"x": ((1, 8), (4, 64), (8, 128))}
    runs = plan_providers("cuda", "fp16", cache_dir=tmp_path, ranges=ranges,
                          available=[TRT_EP, CUDA_EP, CPU_EP])
    assert [r.name for r in runs] == ["onnxruntime-cuda", "onnxruntime-trt"]
    assert [p if isinstance(p, str) else p[0] for p in runs[0].providers] == [CUDA_EP, CPU_EP]
    trt_name, trt_opts = runs[1].providers[0]
    assert trt_name == TRT_EP
    assert [p if isinstance(p, str) else p[0] for p in runs[1].providers[1:]] == [CUDA_EP, CPU_EP]
    assert trt_opts["trt_fp16_enable"] == "True"
    assert trt_opts["trt_engine_cache_enable"] == "True"
    assert trt_opts["trt_engine_cache_path"] == str(tmp_path)
    assert trt_opts["trt_profile_min_shapes"] == "x:1x8"
    assert trt_opts["trt_profile_opt_shapes"] == "x:4x64"
    assert trt_opts["trt_profile_max_shapes"] == "x:8x128"
    assert plan_providers("cuda", "fp32", cache_dir=tmp_path, available=[TRT_EP, CUDA_EP]
                          )[1].providers[0][1]["trt_fp16_enable"] == "False"


def test_cuda_plan_without_ort_tensorrt_says_so() -> None:
    runs = plan_providers("cuda", "fp32", available=[CUDA_EP, CPU_EP])
    assert runs[1].status == "failed"
    assert runs[1].reason == f"the installed onnxruntime has no {TRT_EP}"


def test_cpu_runner_reads_its_providers_back(gelu_onnx: Path) -> None:
    (run,) = build_runners(gelu_onnx, plan_providers("cpu", "fp32"))
    assert run.status == "ready" and run.active == [CPU_EP]
    with run.runner as r:
        out = r.infer({"x": np.ones((2, 4, 16), np.float32)})
    assert np.allclose(next(iter(out.values())), 0.8412, atol=1e-4)  # GELU(1)


@pytest.mark.skipif(CUDA_EP in available_providers(), reason="ORT here has the CUDA provider")
def test_provider_that_does_not_load_is_reported_not_silently_cpu(gelu_onnx: Path) -> None:
    (run,) = build_runners(gelu_onnx, [ProviderRun("onnxruntime-cuda", [CUDA_EP, CPU_EP])])
    assert run.status == "failed" and run.runner is None
    assert run.active == [CPU_EP]
    assert run.reason.startswith(f"{CUDA_EP} failed to load; ONNX Runtime fell back to {CPU_EP}")


@pytest.mark.skipif(CUDA_EP in available_providers(), reason="ORT here has the CUDA provider")
def test_cuda_runs_that_fail_degrade_to_a_cpu_session(gelu_onnx: Path) -> None:
    runs = ready_runners(gelu_onnx, "cuda", "fp32")
    assert [(r.name, r.status) for r in runs] == [
        ("onnxruntime-cuda", "failed"), ("onnxruntime-trt", "failed"), ("onnxruntime", "ready")]


def test_report_fills_device_and_providers(saved_model, tmp_path: Path) -> None:
    rep_path = tmp_path / "r.json"
    res = run_cli(saved_model("gpt2", "exported"), "--target", "onnx", "--device", "cpu",
                  "-o", tmp_path / "o.onnx", "--report", rep_path, "--iterations", "2",
                  "--warmup", "0")
    assert res.code == 0, res.err
    report = json.loads(rep_path.read_text())
    assert report["device"] == {"device": "cpu", "requested": "cpu",
                                "reason": "asked for with --device cpu"}
    assert report["providers"]["onnxruntime"]["active"] == [CPU_EP]
    assert report["providers"]["onnxruntime"]["status"] == "ready"
    assert report["parity"]["status"] == "passed"


# -- packaging: one ONNX Runtime ---------------------------------------------------------------

def _resolve(extra: str, out: Path) -> set[str]:
    """Names pip would install for `.[extra]` on an empty environment (a dry run)."""
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q",
           "--report", str(out), "-c", str(ROOT / "constraints.txt"), f".[{extra}]"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=540)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        if "No matching distribution" in proc.stderr or "connection" in proc.stderr.lower():
            pytest.skip(f"the package index is not reachable from here: {tail}")
        raise AssertionError(f"pip could not resolve .[{extra}]: {tail}")
    return {i["metadata"]["name"].lower() for i in json.loads(out.read_text())["install"]}


@pytest.mark.slow
@pytest.mark.parametrize("extra, wanted, unwanted", [
    ("gpu", "onnxruntime-gpu", "onnxruntime"), ("cpu", "onnxruntime", "onnxruntime-gpu")])
def test_each_extra_resolves_to_exactly_one_onnxruntime(extra: str, wanted: str, unwanted: str,
                                                        tmp_path: Path) -> None:
    names = _resolve(extra, tmp_path / "r.json")
    assert wanted in names and unwanted not in names


# -- on a GPU (marker gpu) -----------------------------------------------------------------------

def _placement(path: Path, providers: list, feed: dict, tmp: Path) -> dict[str, int]:
    """Nodes per execution provider, from ORT's own profile of one run."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.enable_profiling = True
    opts.profile_file_prefix = str(tmp / "prof")
    sess = ort.InferenceSession(str(path), opts, providers=providers)
    sess.run(None, feed)
    events = json.loads(Path(sess.end_profiling()).read_text())
    counts: dict[str, int] = {}
    for e in events:
        provider = e.get("args", {}).get("provider")
        if e.get("cat") == "Node" and provider:
            counts[provider] = counts.get(provider, 0) + 1
    return counts


@pytest.mark.gpu
@pytest.mark.skipif(NO_CUDA is not None, reason=f"needs CUDA: {NO_CUDA}")
def test_gpu_export_checks_on_cuda_and_the_cuda_provider_ran(saved_model, tmp_path: Path) -> None:
    rep_path = tmp_path / "r.json"
    out = tmp_path / "bert.onnx"
    res = run_cli(saved_model("bert", "exported"), "--target", "onnx", "--device", "cuda",
                  "-o", out, "--report", rep_path, "--iterations", "5")
    assert res.code == 0, res.err
    report = json.loads(rep_path.read_text())
    assert report["device"]["device"] == "cuda"
    assert report["providers"]["onnxruntime-cuda"]["active"][0] == CUDA_EP
    assert report["parity"]["status"] == "passed"
    worst = max(o["max_abs"] / max(o["ref_scale"], 1e-6)
                for o in report["parity"]["outputs"].values())
    assert worst < 1e-4
    assert {"pytorch", "onnxruntime-cuda"} <= set(report["latency"])
    model = onnx.load(str(out), load_external_data=False)
    feed = {i.name: np.random.default_rng(0).integers(0, 100, [d.dim_value for d in
                                                                i.type.tensor_type.shape.dim])
            for i in model.graph.input}
    placed = _placement(out, [CUDA_EP, CPU_EP], feed, tmp_path)
    assert placed.get(CUDA_EP, 0) > placed.get(CPU_EP, 0), placed


@pytest.mark.gpu
@pytest.mark.skipif(TRT_EP not in available_providers() or NO_CUDA is not None,
                    reason="needs a CUDA GPU and ORT's TensorRT provider")
def test_gpu_ort_tensorrt_provider_is_a_second_trt_parity(saved_model, tmp_path: Path) -> None:
    rep_path = tmp_path / "r.json"
    res = run_cli(saved_model("gpt2", "exported"), "--target", "trt10", "--device", "cuda",
                  "-o", tmp_path / "g.onnx", "--report", rep_path, "--iterations", "5")
    assert res.code == 0, res.err
    trt = json.loads(rep_path.read_text())["providers"]["onnxruntime-trt"]
    assert trt["active"][0] == TRT_EP and trt["parity"]["status"] == "passed"


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="torch sees no CUDA GPU")
def test_gpu_pytorch_reference_runs_on_cuda_in_true_fp32() -> None:
    import torch

    from export_gelu.check.runners.torch_runner import TorchRunner

    lin = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU()).eval()
    x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    expected = lin(torch.from_numpy(x)).detach().numpy()  # on the CPU, before moving it
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    runner = TorchRunner(lin, {"x": x}, ["y"], device="cuda")
    with runner:
        out = runner.infer({"x": x})["y"]
    assert torch.backends.cuda.matmul.allow_tf32 is True  # the caller's setting, restored
    torch.backends.cuda.matmul.allow_tf32 = before
    assert np.abs(out - expected).max() < 1e-5  # TF32 would be ~1e-3
