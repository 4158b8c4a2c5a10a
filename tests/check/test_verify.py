"""`export-gelu verify`: pass on the right ONNX, fail (exit 1, output named) on a perturbed one,
inputs from specs / .npz / polygraphy JSON, files polygraphy itself can replay."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from examples.models import EXAMPLES
from tests.conftest import ROOT, run_cli

QUICK_ALPHA = 1.702


def quick_gelu_instead_of_one_gelu(src: Path, dst: Path) -> str:
    """Replace the first `Gelu` node by QuickGELU x·Sigmoid(1.702x) (onnx-graphsurgeon)."""
    import onnx_graphsurgeon as gs

    graph = gs.import_onnx(onnx.load(str(src)))
    node = next(n for n in graph.nodes if n.op == "Gelu")
    x, y = node.inputs[0], node.outputs[0]
    alpha = gs.Constant("quick_alpha", np.array(QUICK_ALPHA, dtype=np.float32))
    scaled = gs.Variable("quick_scaled", dtype=np.float32)
    gate = gs.Variable("quick_gate", dtype=np.float32)
    graph.nodes += [gs.Node("Mul", "quick_mul_alpha", inputs=[x, alpha], outputs=[scaled]),
                    gs.Node("Sigmoid", "quick_sigmoid", inputs=[scaled], outputs=[gate]),
                    gs.Node("Mul", "quick_mul_x", inputs=[x, gate], outputs=[y])]
    node.outputs.clear()
    graph.cleanup().toposort()
    model = gs.export_onnx(graph)
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return node.name


@pytest.fixture(scope="module")
def bert_files(saved_model, golden_run, tmp_path_factory) -> tuple[Path, Path, Path]:
    """(bert.pt, its correct ONNX for ORT (a golden run), the same ONNX with one GELU made
    QuickGELU)."""
    d = tmp_path_factory.mktemp("verify")
    model = saved_model("bert", "exported")
    run = golden_run("bert", "exported", "--target", "onnx", "--no-verify")
    assert run.code == 0, run.err
    good = run.copy_to(d, "bert.onnx")
    bad = d / "bert.quick.onnx"
    quick_gelu_instead_of_one_gelu(good, bad)
    return model, good, bad


def _output_name(path: Path) -> str:
    return onnx.load(str(path), load_external_data=False).graph.output[0].name


def test_verify_passes_on_the_correct_onnx(bert_files, tmp_path):
    model, good, _bad = bert_files
    rep_path = tmp_path / "r.json"
    res = run_cli("verify", model, good, "--iterations", "5", "--report", rep_path)
    assert res.code == 0, res.err + res.out
    assert res.err == ""  # not a terminal: no progress lines, no warnings
    assert "Parity: PASSED (pytorch vs onnxruntime" in res.out
    rep = json.loads(rep_path.read_text())
    assert rep["command"] == "verify" and rep["target"] == "onnxruntime"
    assert rep["precision"] == "fp32" and "detected" in rep["precision_note"]
    stats = rep["parity"]["outputs"][_output_name(good)]
    assert stats["passed"] and 0 <= stats["mean_abs"] <= stats["p999_abs"] <= stats["max_abs"]
    assert stats["max_abs"] < 1e-4 and stats["elements"] == 2 * 16 * 64
    for runner in ("pytorch", "onnxruntime"):
        lat = rep["latency"][runner]
        assert lat["iterations"] == 5
        assert 0 < lat["min_ms"] <= lat["median_ms"] <= lat["p90_ms"] <= lat["p99_ms"]
        lo, hi = lat["median_ci_ms"]
        assert lo <= lat["median_ms"] <= hi
    assert [s["kind"] for s in rep["gelu_sites"]] == ["exact", "exact"]


def test_verify_fails_on_a_quick_gelu_and_names_the_output(bert_files, tmp_path):
    model, _good, bad = bert_files
    rep_path = tmp_path / "r.json"
    res = run_cli("verify", model, bad, "--iterations", "0", "--report", rep_path)
    assert res.code == 1, res.err + res.out
    assert res.err == ""  # the verdict is ours, once, on stdout: no polygraphy log lines
    name = _output_name(bad)
    rep = json.loads(rep_path.read_text())
    stats = rep["parity"]["outputs"][name]
    assert rep["parity"]["status"] == "failed" and not stats["passed"]
    assert stats["max_abs"] > 1e-3  # QuickGELU differs from GELU by up to 2e-2 per element
    assert "Parity: FAILED" in res.out
    assert f"{name} (max abs {stats['max_abs']:.3g}" in res.out
    assert f"FAIL {name}: max abs {stats['max_abs']:.3g}" in res.out
    # the deployed graph computes one QuickGELU where the model has two exact GELUs
    assert [s["kind"] for s in rep["calibration"]["sites"]] == ["exact", "exact"]
    assert "differ from the model's (2 exact)" in res.out


def test_saved_files_load_in_polygraphy_and_replay_the_failure(bert_files, tmp_path):
    from polygraphy.comparator import RunResults
    from polygraphy.json import load_json

    model, _good, bad = bert_files
    ins, outs = tmp_path / "in.json", tmp_path / "out.json"
    res = run_cli("verify", model, bad, "--iterations", "0", "--save-inputs", ins,
                  "--save-outputs", outs, "--inputs", _npz_for_bert(tmp_path))
    assert res.code == 1, res.err
    feeds = load_json(str(ins))
    assert isinstance(feeds, list) and len(feeds) == 1 and list(feeds[0]) == ["x"]
    np.testing.assert_array_equal(feeds[0]["x"], np.load(tmp_path / "ids.npz")["x"])
    results = RunResults.load(str(outs))
    assert [name for name, _ in results] == ["pytorch", "onnxruntime"]
    # polygraphy's own CLI replays the case: the perturbed graph against the saved outputs
    # of PyTorch fails, exactly as verify said.
    cmd = [str(Path(sys.executable).with_name("polygraphy")), "run", str(bad), "--onnxrt",
           "--load-inputs", str(ins), "--load-outputs", str(outs), "--atol", "1e-4",
           "--rtol", "1e-3"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "FAILED" in proc.stdout + proc.stderr


def _npz_for_bert(d: Path) -> Path:
    rng = np.random.default_rng(7)
    path = d / "ids.npz"
    np.savez(path, x=rng.integers(0, 1000, size=(2, 16)).astype(np.int64))
    return path


def test_real_inputs_from_npz_and_polygraphy_json(bert_files, tmp_path):
    from polygraphy.json import save_json

    model, good, _bad = bert_files
    rng = np.random.default_rng(3)
    feeds = [{"x": rng.integers(0, 1000, size=(2, 16)).astype(np.int64)} for _ in range(3)]
    save_json(feeds, str(tmp_path / "feeds.json"))
    rep_path = tmp_path / "r.json"
    res = run_cli("verify", model, good, "--inputs", tmp_path / "feeds.json", "--iterations", "2",
                  "--report", rep_path)
    assert res.code == 0, res.err + res.out
    rep = json.loads(rep_path.read_text())
    assert rep["parity"]["iterations"] == 3
    assert rep["parity"]["outputs"][_output_name(good)]["elements"] == 3 * 2 * 16 * 64
    assert rep["inputs"].startswith("real data from feeds.json (3 feed(s))")
    sites = rep["calibration"]["sites"]
    assert len(sites) == EXAMPLES["bert"].gelu_sites
    assert all(s["count"] == 3 * 2 * 16 * 256 and s["min"] < 0 < s["max"] for s in sites)

    res = run_cli("verify", model, good, "--inputs", _npz_for_bert(tmp_path), "--iterations", "0",
                  "--report", rep_path)
    assert res.code == 0, res.err
    assert json.loads(rep_path.read_text())["inputs"].startswith("real data from ids.npz")


def test_fp16_graph_is_detected_and_gets_fp16_tolerances(saved_model, tmp_path):
    model = saved_model("vit", "exported")
    half = tmp_path / "vit16.onnx"
    assert run_cli(model, "--target", "onnx", "--precision", "fp16", "-o", half,
                   "--no-verify").code == 0
    rep_path = tmp_path / "r.json"
    res = run_cli("verify", model, half, "--iterations", "0", "--report", rep_path)
    assert res.code == 0, res.err + res.out
    rep = json.loads(rep_path.read_text())
    assert rep["precision"] == "fp16" and "float16" in rep["precision_note"]
    assert rep["parity"]["atol"] == pytest.approx(2e-2)
    stats = next(iter(rep["parity"]["outputs"].values()))
    assert 1e-5 < stats["max_abs"] < 2e-2  # fp16 rounding is visible, and within tolerance
    # the same graph held to fp32 tolerances fails: the verdict follows the precision
    res = run_cli("verify", model, half, "--iterations", "0", "--precision", "fp32")
    assert res.code == 1, res.out


@pytest.mark.parametrize("flags, message", [
    (["--save-inputs", "inputs"], "ending in .json"),
    (["--input", "x:2x17:int64:0,1000"], "shape"),
    (["--input", "y:2x16:int64:0,1000", "--input", "z:2x16:int64:0,1000"], "input"),
    (["--precision", "fp8"], "invalid choice"),
])
def test_bad_verify_input_exits_2_and_writes_nothing(bert_files, tmp_path, flags, message):
    model, good, _bad = bert_files
    flags = [str(tmp_path / f) if f == "inputs" else f for f in flags]
    res = run_cli("verify", model, good, "--report", tmp_path / "r.json", *flags) \
        if "--precision" not in flags else _argparse_exit(model, good, flags)
    assert res.code == 2, res.out
    assert message in res.err
    assert "Traceback" not in res.err
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "inputs").exists()


def _argparse_exit(*argv):
    """argparse reports usage errors by SystemExit(2); run it in a subprocess like a user."""
    from tests.conftest import CliResult

    proc = subprocess.run([sys.executable, "-m", "export_gelu.cli", "verify", *map(str, argv[:2]),
                           *argv[2]], capture_output=True, text=True, cwd=ROOT, timeout=120)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def test_deployed_file_that_is_neither_onnx_nor_engine_exits_2(bert_files, tmp_path):
    model, _good, _bad = bert_files
    junk = tmp_path / "model.bin"
    junk.write_bytes(b"\x00\x01not a model" * 10)
    res = run_cli("verify", model, junk)
    assert res.code == 2 and "must be an ONNX file or a TensorRT engine" in res.err


def test_engine_without_tensorrt_says_why_and_exits_3(bert_files, tmp_path):
    from export_gelu.check.runners.trt_runner import trt_unavailable_reason

    if trt_unavailable_reason() is None:
        pytest.skip("TensorRT is available here: the engine would be loaded (see the trt test)")
    model, _good, _bad = bert_files
    plan = tmp_path / "bert.plan"
    plan.write_bytes(b"an engine built elsewhere")
    res = run_cli("verify", model, plan)
    assert res.code == 3, res.err
    assert "TensorRT engine and cannot be run here" in res.err and "tensorrt" in res.err


@pytest.mark.trt
def test_verify_a_tensorrt_engine(saved_model, tmp_path):
    from export_gelu.check.runners.trt_runner import trt_unavailable_reason

    why = trt_unavailable_reason()
    if why:
        pytest.skip(f"needs TensorRT and a CUDA GPU: {why}")
    model = saved_model("bert", "exported")
    plan = tmp_path / "bert.plan"
    res = run_cli(model, "--target", "trt", "-o", tmp_path / "b.onnx", "--engine", plan,
                  "--no-verify")
    assert res.code == 0 and plan.is_file(), res.err
    rep_path = tmp_path / "r.json"
    res = run_cli("verify", model, plan, "--iterations", "20", "--report", rep_path)
    assert res.code == 0, res.err + res.out
    rep = json.loads(rep_path.read_text())
    assert rep["target"] == "tensorrt" and rep["parity"]["runners"] == ["pytorch", "tensorrt"]
    lat = rep["latency"]["tensorrt"]
    assert lat["median_ms"] > 0 and "device buffers" in lat["clock"]


def test_progress_shows_on_a_terminal_only(bert_files, tmp_path):
    """stderr a TTY: progress lines appear; piped (the other tests): stderr stays empty."""
    import pty

    model, good, _bad = bert_files
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "EXPORT_GELU_QUIET"}  # conftest's
    env["PYTHONWARNINGS"] = "ignore"
    proc = subprocess.Popen([sys.executable, "-m", "export_gelu.cli", "verify", str(model),
                             str(good), "--iterations", "3"], stdout=subprocess.DEVNULL,
                            stderr=follower, cwd=ROOT, env=env)
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    proc.wait(timeout=120)
    os.close(leader)
    assert proc.returncode == 0
    text = seen.decode(errors="replace")
    assert "loading" in text and "timing 3/3" in text


def test_an_onnx_model_is_the_reference_in_onnx_runtime(saved_model, tmp_path):
    first, second = tmp_path / "a.onnx", tmp_path / "b.onnx"
    model = saved_model("lstm", "exported")
    assert run_cli(model, "--target", "onnx", "-o", first, "--no-verify").code == 0
    assert run_cli(model, "--target", "trt8.6", "-o", second, "--no-verify").code == 0
    rep_path = tmp_path / "r.json"
    res = run_cli("verify", first, second, "--iterations", "2", "--report", rep_path)
    assert res.code == 0, res.err + res.out
    rep = json.loads(rep_path.read_text())
    assert rep["parity"]["runners"] == ["reference-onnx", "onnxruntime"]
    assert rep["calibration"] is None  # no PyTorch graph to record GELU inputs from
