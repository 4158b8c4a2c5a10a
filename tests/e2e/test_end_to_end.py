"""Every example in every format: exit 0, a valid ONNX, ORT parity with PyTorch, a full report."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from examples.models import EXAMPLES, build
from examples.save_model import FORMATS, example_inputs
from tests.conftest import run_cli

REPORT_KEYS = {"target", "output", "opset", "gelu_sites", "parity", "trt", "latency"}


def _format_flags(example: str, fmt: str) -> list[str]:
    ex = EXAMPLES[example]
    flags: list[str] = []
    if fmt != "exported":
        flags += ["--input", ex.input_spec]
    if fmt == "pickle":
        flags.append("--allow-pickle")
    if fmt == "state_dict":
        flags += ["--model-factory", ex.factory]
    return flags


def _ort_vs_eager(example: str, onnx_path: Path) -> float:
    """Max abs error of ORT on the produced file vs PyTorch eager, relative to output scale."""
    import onnxruntime as ort

    model = build(example)
    args = example_inputs(example)
    with torch.no_grad():
        ref = model(*args).numpy()
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    feed = {i.name: a.numpy() for i, a in zip(sess.get_inputs(), args)}
    out = sess.run(None, feed)[0]
    return float(np.abs(out - ref).max() / max(1.0, np.abs(ref).max()))


#: `make test` runs one diagonal of the product, each example once and each format once;
#: the other pairs are `full` (make test-full): each takes the same path for its format as
#: the diagonal's pair of that format, on an example whose export a diagonal pair pins.
FAST_PAIRS = {("lstm", "torchscript"), ("bert", "exported"), ("gpt2", "state_dict"),
              ("vit", "pickle")}


def test_the_fast_pairs_hold_every_example_and_every_format():
    assert {e for e, _f in FAST_PAIRS} == set(EXAMPLES)
    assert {f for _e, f in FAST_PAIRS} == set(FORMATS)


@pytest.mark.parametrize("example, fmt", [
    pytest.param(e, f, marks=[] if (e, f) in FAST_PAIRS else [pytest.mark.full], id=f"{e}-{f}")
    for e in sorted(EXAMPLES) for f in FORMATS])
def test_every_example_every_format(example, fmt, saved_model, tmp_path):
    model = saved_model(example, fmt)
    out, rep = tmp_path / "out.onnx", tmp_path / "r.json"
    res = run_cli(model, "--target", "trt", "-o", out, "--report", rep, "--iterations", "3",
                  *_format_flags(example, fmt))
    assert res.code == 0, res.err + res.out
    onnx.checker.check_model(str(out), full_check=True)
    assert _ort_vs_eager(example, out) < 1e-4

    report = json.loads(rep.read_text())
    assert REPORT_KEYS <= set(report)
    assert report["output"] == str(out)
    assert report["opset"] == onnx.load(str(out)).opset_import[0].version
    assert report["parity"]["status"] == "passed"
    for stats in report["parity"]["outputs"].values():
        assert 0 <= stats["max_abs"] < 1e-3 and stats["max_rel"] >= 0
    assert report["trt"]["status"] in ("built", "skipped") and report["trt"]["reason"] is not None
    for runner in ("pytorch", "onnxruntime"):
        lat = report["latency"][runner]
        assert 0 < lat["median_ms"] <= lat["p90_ms"] <= lat["p99_ms"]
    sites = report["gelu_sites"]
    assert len(sites) == EXAMPLES[example].gelu_sites
    assert {s["kind"] for s in sites} == {EXAMPLES[example].gelu_kind}
    assert all({"name", "kind", "source", "action"} <= set(s) for s in sites)


@pytest.mark.parametrize("example", ["bert", "gpt2"])
def test_target_onnx_one_gelu_node_per_site(example, golden_run):
    run = golden_run(example, "exported", "--target", "onnx", "--no-verify")
    assert run.code == 0, run.err
    model = onnx.load(str(run.onnx))
    gelus = [n for n in model.graph.node if n.op_type == "Gelu"]
    assert len(gelus) == EXAMPLES[example].gelu_sites
    want = "tanh" if EXAMPLES[example].gelu_kind == "tanh" else "none"
    for node in gelus:
        approx = {a.name: a.s.decode() for a in node.attribute}.get("approximate", "none")
        assert approx == want
    ops = Counter(n.op_type for n in model.graph.node)
    if example == "gpt2":  # gelu_new's hand-written formula left no Pow/Tanh behind
        assert ops["Pow"] == 0 and ops["Tanh"] == 0


def test_summary_is_one_screen_and_says_trt_was_skipped(saved_model, tmp_path):
    res = run_cli(saved_model("gpt2", "exported"), "-o", tmp_path / "o.onnx", "--iterations", "3")
    assert res.code == 0, res.err
    lines = res.out.strip().splitlines()
    assert len(lines) <= 24
    text = res.out
    assert "GELU sites: 2 (2 tanh)" in text
    assert "Parity: PASSED" in text
    assert "engine build and TensorRT parity skipped" in text or "engine built" in text
    assert "opset 20" in text


def test_default_output_name_is_beside_the_model(saved_model, tmp_path):
    src = saved_model("lstm", "exported")
    model = tmp_path / "model.pt"
    model.write_bytes(src.read_bytes())
    res = run_cli(model, "--target", "trt", "--no-verify")
    assert res.code == 0, res.err
    assert (tmp_path / "model.trt.onnx").is_file()


def test_python_api_returns_the_report(saved_model, tmp_path):
    import export_gelu

    rep = export_gelu.export(saved_model("vit", "exported"), target="onnx",
                             output=tmp_path / "v.onnx", iterations=2)
    assert rep.exit_code == 0
    assert rep.parity.status == "passed"
    assert rep.to_json()["opset"] == 20


def test_onnx_file_as_model_is_verified_against_itself_in_ort(golden_run, tmp_path):
    run = golden_run("bert", "exported", "--target", "onnx", "--no-verify")
    assert run.code == 0, run.err
    first = run.copy_to(tmp_path, "first.onnx")
    res = run_cli(first, "--target", "trt", "-o", tmp_path / "second.onnx", "--iterations", "2",
                  "--report", tmp_path / "r.json")
    assert res.code == 0, res.err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["parity"]["runners"] == ["input-onnx", "onnxruntime"]
    assert report["parity"]["status"] == "passed"


def test_parity_failure_exits_1_and_names_the_output(saved_model, tmp_path):
    # An exact-GELU model lowered to the sigmoid form with a strict tolerance must fail.
    res = run_cli(saved_model("bert", "exported"), "--target", "onnx", "--gelu", "sigmoid",
                  "--atol", "1e-6", "--rtol", "1e-6", "-o", tmp_path / "s.onnx",
                  "--iterations", "0")
    assert res.code == 1, res.err + res.out
    assert "Parity: FAILED" in res.out
    assert "max abs" in res.out
