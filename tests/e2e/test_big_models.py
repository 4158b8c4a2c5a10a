"""Big models: weights left in their file while the graph is rewritten and streamed into the
output, the torch exporter writing them once, verify with one model in memory at a time.

Real sizes are measured by `python -m benchmarks.big_model`; here the same code paths run on
small models by lowering the external-data threshold (EXPORT_GELU_EXTERNAL_DATA_THRESHOLD).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import helper, numpy_helper

from export_gelu import onnx_weights
from export_gelu.check.reference.recorded import RecordedRunner, record_reference
from export_gelu.errors import BadInputError
from export_gelu.exporter.saving.weight_size import check_disk_space, module_weight_bytes
from export_gelu.progress import Progress
from tests.conftest import note_codes, note_messages, run_cli

WIDTH = 640  # a 640×640 fp32 weight is 1.6 MB: over onnx_weights.INLINE_LIMIT


def _stack(layers: int = 2) -> torch.nn.Module:
    torch.manual_seed(0)
    mods: list[torch.nn.Module] = []
    for _ in range(layers):
        mods += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU()]
    return torch.nn.Sequential(*mods).eval()


def _onnx_with_external_data(path: Path, nan: bool = False, opset: int = 17) -> Path:
    """x → MatMul(W0) + b0 → erf-GELU → MatMul(W1): weights in `path.data`."""
    rng = np.random.default_rng(0)
    w0 = (rng.standard_normal((WIDTH, WIDTH)) * 0.05).astype(np.float32)
    w1 = (rng.standard_normal((WIDTH, WIDTH)) * 0.05).astype(np.float32)
    if nan:
        w1[3, 5] = np.nan
    b0 = rng.standard_normal(WIDTH).astype(np.float32)
    consts = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
              (("sqrt2", np.sqrt(2.0)), ("one", 1.0), ("half", 0.5))]
    nodes = [helper.make_node("MatMul", ["x", "W0"], ["m"]),
             helper.make_node("Add", ["m", "b0"], ["h"]),
             helper.make_node("Div", ["h", "sqrt2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]),
             helper.make_node("Mul", ["h", "e1"], ["p"]),
             helper.make_node("Mul", ["p", "half"], ["g"]),
             helper.make_node("MatMul", ["g", "W1"], ["y"])]
    graph = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", 1, [2, WIDTH])],
                              [helper.make_tensor_value_info("y", 1, [2, WIDTH])],
                              [numpy_helper.from_array(w0, "W0"), numpy_helper.from_array(w1, "W1"),
                               numpy_helper.from_array(b0, "b0"), *consts])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=path.name + ".data", size_threshold=1024)
    return path


def _tensor_shas(path: Path) -> dict[str, str]:
    model = onnx.load(str(path), load_external_data=True)
    return {t.name: hashlib.sha256(numpy_helper.to_array(t).tobytes()).hexdigest()
            for t in model.graph.initializer}


@pytest.fixture
def small_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXPORT_GELU_EXTERNAL_DATA_THRESHOLD", "1000000")


def test_load_graph_leaves_big_tensors_in_their_file(tmp_path: Path) -> None:
    src = _onnx_with_external_data(tmp_path / "m.onnx")
    model = onnx_weights.load_graph(src)
    lazy = {t.name for t in onnx_weights.lazy_tensors(model)}
    assert lazy == {"W0", "W1"}
    assert all(not t.raw_data for t in onnx_weights.lazy_tensors(model))
    b0 = next(t for t in model.graph.initializer if t.name == "b0")
    assert not onnx_weights.is_external(b0) and len(b0.raw_data) == WIDTH * 4  # read in
    full = onnx.load(str(src), load_external_data=True)
    w1 = next(t for t in full.graph.initializer if t.name == "W1")
    lazy_w1 = next(t for t in model.graph.initializer if t.name == "W1")
    np.testing.assert_array_equal(onnx_weights.tensor_array(lazy_w1), numpy_helper.to_array(w1))
    assert onnx_weights.lazy_bytes(model) == 2 * WIDTH * WIDTH * 4
    onnx.checker.check_model(onnx_weights.checkable(model))  # in memory, no file lookups
    from export_gelu.check.runners.ort_runner import make_session

    source, folder = onnx_weights.ort_source(model)
    assert len(source) < 100_000 and folder == str(tmp_path.resolve())
    x = np.ones((2, WIDTH), np.float32)
    got = make_session(source, weights_folder=folder).run(None, {"x": x})[0]
    want = make_session(str(src)).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)


def test_onnx_rewrite_streams_every_weight_unchanged(tmp_path: Path, small_threshold) -> None:
    src = _onnx_with_external_data(tmp_path / "m.onnx")
    out, report = tmp_path / "m.ort.onnx", tmp_path / "r.json"
    res = run_cli(src, "--target", "ort", "-o", out, "--report", report, "--iterations", "2")
    assert res.code == 0, res.err
    rep = json.loads(report.read_text())
    assert rep["parity"]["status"] == "passed"
    assert rep["op_counts"]["com.microsoft.Gelu"] == 1 and "Erf" not in rep["op_counts"]
    data = Path(str(out) + ".data")
    assert rep["external_data"] == str(data)
    weights = rep["weights"]
    assert weights["streamed"] == 2 and weights["bytes"] == data.stat().st_size
    assert weights["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    before, after = _tensor_shas(src), _tensor_shas(out)
    assert before["W0"] == after["W0"] and before["W1"] == after["W1"]
    # big tensors start on a 64 KiB boundary, so ONNX Runtime can map them
    graph = onnx.load(str(out), load_external_data=False)
    for t in graph.graph.initializer:
        info = {e.key: e.value for e in t.external_data}
        if t.name in ("W0", "W1"):
            assert int(info["offset"]) % onnx_weights.ALIGNMENT == 0
            assert "basepath" not in info  # never written to the file


def test_converting_up_runs_on_a_graph_without_its_weights(tmp_path: Path,
                                                           small_threshold) -> None:
    """trt10 converts an opset-17 input up to 20 for native Gelu, checked in ONNX Runtime
    before vs after: with the weights left in the input's file."""
    src = _onnx_with_external_data(tmp_path / "m.onnx")
    out, report = tmp_path / "m.trt10.onnx", tmp_path / "r.json"
    res = run_cli(src, "--target", "trt10", "-o", out, "--report", report, "--iterations", "0")
    assert res.code == 0, res.err
    rep = json.loads(report.read_text())
    assert rep["opset"] == 20 and rep["op_counts"]["Gelu"] == 1
    assert rep["parity"]["status"] == "passed" and rep["weights"]["streamed"] == 2


def test_a_nan_weight_in_the_file_is_refused_and_nothing_is_written(tmp_path: Path,
                                                                   small_threshold) -> None:
    src = _onnx_with_external_data(tmp_path / "m.onnx", nan=True)
    out = tmp_path / "m.ort.onnx"
    res = run_cli(src, "--target", "ort", "-o", out, "--no-verify")
    assert res.code == 2
    assert "initializer 'W1' holds NaN" in res.err and "Traceback" not in res.err
    assert len(res.err.strip().splitlines()) == 1
    assert not out.exists() and not Path(str(out) + ".data").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_big_torch_model_writes_its_weights_once_and_verifies_one_model_at_a_time(
        tmp_path: Path, small_threshold) -> None:
    model = _stack()
    pt = tmp_path / "big.pt"
    torch.export.save(torch.export.export(model, (torch.randn(2, WIDTH),)), str(pt))
    out, report = tmp_path / "big.trt86.onnx", tmp_path / "r.json"
    res = run_cli(pt, "--target", "trt8.6", "-o", out, "--report", report,
                  "--iterations", "3", "--warmup", "1")
    assert res.code == 0, res.err
    rep = json.loads(report.read_text())
    assert rep["opset"] == 17 and rep["exporter"].startswith("dynamo")
    assert any(n.startswith("big model: exported with the dynamo exporter at opset 18")
               for n in note_messages(rep))
    assert any(n.startswith("big model: pytorch ran first and was freed")
               for n in note_messages(rep))
    assert "one-model-at-a-time" in note_codes(rep)
    assert rep["parity"]["status"] == "passed"
    assert set(rep["latency"]) == {"pytorch", "onnxruntime"}
    assert rep["weights"]["streamed"] >= 2
    shas = set(_tensor_shas(out).values())
    for name, p in model.state_dict().items():
        t = p.detach().contiguous()
        assert (hashlib.sha256(t.numpy().tobytes()).hexdigest() in shas
                or hashlib.sha256(t.t().contiguous().numpy().tobytes()).hexdigest() in shas), name
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert leftovers == []  # the exporter's copy of the weights is gone


def test_big_models_hold_their_weights_once_even_when_both_would_fit(
        tmp_path: Path, small_threshold) -> None:
    src = _onnx_with_external_data(tmp_path / "m.onnx")
    report = tmp_path / "r.json"
    res = run_cli(src, "--target", "ort", "-o", tmp_path / "o.onnx", "--report", report,
                  "--iterations", "2")
    assert res.code == 0, res.err
    rep = json.loads(report.read_text())
    assert "one-model-at-a-time" in note_codes(rep)
    assert rep["parity"]["status"] == "passed"
    assert set(rep["latency"]) == {"input-onnx", "onnxruntime"}


def test_recorded_reference_replays_only_the_feeds_it_ran() -> None:
    from export_gelu.check.runners.torch_runner import TorchRunner

    model = _stack(1)
    feed = {"x": np.random.default_rng(1).standard_normal((2, WIDTH)).astype(np.float32)}
    runner = TorchRunner(model, feed, ["y"], name="pytorch")
    recorded = record_reference(runner, [feed], iterations=2, warmup=1)
    assert isinstance(recorded, RecordedRunner) and recorded.latency is not None
    with recorded:
        got = recorded.infer(feed)["y"]
        with torch.inference_mode():
            want = model(torch.from_numpy(feed["x"])).numpy()
        np.testing.assert_array_equal(got, want)
        with pytest.raises(Exception, match="recorded for 1 feed"):
            recorded.infer({"x": feed["x"] + 1})


def test_disk_space_is_checked_before_any_work(tmp_path: Path) -> None:
    check_disk_space(tmp_path, 1 << 20, "a small export")
    with pytest.raises(BadInputError, match=r"not enough disk space in .*: the export needs "
                                            r"about 1000000\.0 GB, .* GB free"):
        check_disk_space(tmp_path, 10 ** 15, "the export")


def test_module_weight_bytes_counts_shared_storage_once() -> None:
    model = _stack(1)
    assert module_weight_bytes(model) == (WIDTH * WIDTH + WIDTH) * 4
    tied = torch.nn.Module()
    tied.a = torch.nn.Linear(4, 4, bias=False)
    tied.b = torch.nn.Linear(4, 4, bias=False)
    tied.b.weight = tied.a.weight
    assert module_weight_bytes(tied) == 16 * 4


def test_progress_counts_bytes_with_rate_and_time_left(capsys: pytest.CaptureFixture) -> None:
    count = Progress(enabled=True).byte_counter(2_000_000_000, "writing m.onnx.data")
    count(1_000_000_000)
    count(1_000_000_000)
    err = capsys.readouterr().err
    assert "writing m.onnx.data 2.0/2.0 GB" in err and "MB/s" in err and "s left" in err


def test_verify_command_runs_the_reference_first_for_a_big_deployed_graph(
        tmp_path: Path, small_threshold) -> None:
    model = _stack()
    pt = tmp_path / "big.pt"
    torch.export.save(torch.export.export(model, (torch.randn(2, WIDTH),)), str(pt))
    out = tmp_path / "big.ort.onnx"
    assert run_cli(pt, "--target", "ort", "-o", out, "--no-verify").code == 0
    report = tmp_path / "v.json"
    res = run_cli("verify", pt, out, "--report", report, "--iterations", "2", "--warmup", "1")
    assert res.code == 0, res.err
    rep = json.loads(report.read_text())
    assert rep["parity"]["status"] == "passed"
    assert any(n.startswith("big model: pytorch ran first and was freed before DEPLOYED")
               for n in note_messages(rep))
    assert set(rep["latency"]) == {"pytorch", "onnxruntime"}
    assert rep["calibration"] is not None  # taken while the model was loaded


def test_a_double_weight_left_in_its_file_is_cast_for_tensorrt_7(tmp_path: Path,
                                                                 small_threshold) -> None:
    """TensorRT 7.x has no DOUBLE: the rewrite reads the lazy weight and writes it in float32."""
    w = (np.random.default_rng(2).standard_normal((WIDTH, WIDTH)) * 0.05).astype(np.float64)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "d",
                              [helper.make_tensor_value_info("x", 11, [2, WIDTH])],
                              [helper.make_tensor_value_info("y", 11, [2, WIDTH])],
                              [numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 6
    src = tmp_path / "d.onnx"
    onnx.save_model(model, str(src), save_as_external_data=True, location="d.onnx.data",
                    size_threshold=1024)
    out, report = tmp_path / "d.trt7.onnx", tmp_path / "r.json"
    res = run_cli(src, "--target", "trt7.0", "-o", out, "--report", report,
                  "--iterations", "0")
    assert res.code == 0, res.err
    rep = json.loads(report.read_text())
    assert any(n.startswith("DOUBLE tensors converted to FLOAT (1 constant(s)")
               for n in note_messages(rep))
    written = onnx.load(str(out), load_external_data=True)
    got = numpy_helper.to_array(written.graph.initializer[0])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, w.astype(np.float32))
    assert rep["parity"]["status"] == "passed"


def test_a_big_int64_weight_left_in_its_file_is_still_scanned_for_int32_range(
        tmp_path: Path) -> None:
    from export_gelu.trt_parser.restrictions import find_hits

    idx = np.arange(200_000, dtype=np.int64)
    idx[7] = 1 << 40  # TensorRT before 9.0 would clamp it silently
    graph = helper.make_graph([helper.make_node("Add", ["x", "I"], ["y"])], "i",
                              [helper.make_tensor_value_info("x", 7, [200_000])],
                              [helper.make_tensor_value_info("y", 7, [200_000])],
                              [numpy_helper.from_array(idx, "I")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    src = tmp_path / "i.onnx"
    onnx.save_model(model, str(src), save_as_external_data=True, location="i.onnx.data",
                    size_threshold=1024)
    lazy = onnx_weights.load_graph(src)
    assert [t.name for t in onnx_weights.lazy_tensors(lazy)] == ["I"]  # 1.6 MB: left there
    assert [h.restriction.key for h in find_hits(lazy, "8.6")] == ["int64-out-of-int32"]
    assert find_hits(lazy, "9.0") == []
