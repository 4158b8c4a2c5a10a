"""The benchmark tooling's non-timing behaviour: the harness refuses graphs that compute
different things and pairs any two runs; the synthetic graphs hold the GELU sites they claim;
the report's per-stage times come from real runs; RESULTS.md sections are replaced, not
appended; GPU parts say why they are skipped. No latency is asserted here (a shared
machine's timings belong in benchmarks/RESULTS.md, not in a test)."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import helper

from benchmarks import results
from benchmarks.common import Verdict, at_most, faster_by
from benchmarks.harness import Comparison, compare_onnx, format_table, pool, summarize


def _elementwise(path: Path, op: str, width: int = 16) -> Path:
    """x → op(x) (+ 0) as an ONNX file."""
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, width])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, width])
    zero = helper.make_tensor("zero", onnx.TensorProto.FLOAT, [1], [0.0])
    nodes = [helper.make_node(op, ["x"], ["t"], name="op"),
             helper.make_node("Add", ["t", "zero"], ["y"], name="add")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [zero]),
                              opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_harness_times_equal_graphs_and_pairs_any_two(tmp_path: Path) -> None:
    a = _elementwise(tmp_path / "a.onnx", "Relu")
    b = _elementwise(tmp_path / "b.onnx", "Relu")
    feed = {"x": np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)}
    comp = compare_onnx([a, b, a], feed, ["A", "B", "A again"], rounds=6, warmup=1,
                        replicas=2)
    assert isinstance(comp, Comparison) and [t.label for t in comp] == ["A", "B", "A again"]
    assert comp.samples.shape == (6, 3) and (comp.samples > 0).all()
    assert comp[0].ratio == 1.0 and comp[1].max_abs_vs_baseline == 0.0
    r, lo, hi = comp.paired("A again", "B")
    assert lo <= r <= hi


def test_harness_refuses_graphs_that_compute_different_things(tmp_path: Path) -> None:
    a = _elementwise(tmp_path / "relu.onnx", "Relu")
    b = _elementwise(tmp_path / "neg.onnx", "Neg")
    feed = {"x": np.ones((2, 16), np.float32)}
    with pytest.raises(AssertionError, match="differs from relu by 2"):
        compare_onnx([a, b], feed, ["relu", "neg"], rounds=2, warmup=0)


def test_pooled_fresh_runs_keep_each_runs_ratio_and_every_run_must_meet_a_target() -> None:
    rng = np.random.default_rng(1)
    runs = []
    for fused in (0.35, 0.45):  # the second fresh run misses a 0.40 target
        base = 1.0 + 0.01 * rng.standard_normal(50)
        runs.append(summarize(np.stack([base, base * fused], axis=1), ["raw", "fused"],
                              [0.0, 0.0]))
    pooled = pool(runs)
    assert pooled.samples.shape == (100, 2) and pooled.runs == runs
    table = format_table("t", pooled)
    assert "ratio in each fresh run" in table and "0.350 / 0.450" in table
    verdict = at_most("c", pooled, "fused", "raw", 0.46)
    assert verdict.ok and "each fresh run: 0.350 / 0.450" in verdict.detail
    assert not at_most("c", pooled, "fused", "raw", 0.40).ok


def test_verdicts_use_the_interval_not_just_the_median() -> None:
    rng = np.random.default_rng(0)
    base = 1.0 + 0.01 * rng.standard_normal(200)
    samples = np.stack([base, base * 0.35, base * 0.99], axis=1)
    comp = summarize(samples, ["raw", "fused", "same"], [0.0, 0.0, 0.0])
    assert at_most("c", comp, "fused", "raw", 0.40).ok
    assert not at_most("c", comp, "fused", "raw", 0.30).ok
    assert faster_by("c", comp, "fused", "raw", 0.03).ok
    assert not faster_by("c", comp, "same", "raw", 0.03).ok  # 1% faster is not 3%
    assert Verdict("x", False, "d").line().startswith("- **NOT met**")


def test_synthetic_graph_holds_the_sites_it_claims_and_the_passes_keep_its_outputs() -> None:
    import onnxruntime as ort

    from benchmarks.synthetic_graphs import SPELLINGS, WIDTH, synthetic_graph
    from export_gelu.passes.onnx import find_sites, run_onnx_passes
    from export_gelu.targets import PROFILES

    model, kinds = synthetic_graph(300)
    assert len(model.graph.node) >= 300
    onnx.checker.check_model(model)
    blocks = sum(kinds.values())
    assert blocks >= len(SPELLINGS)
    found = Counter(s.kind for s in find_sites(model))
    assert dict(found) == kinds  # every block's GELU (and QuickGELU) is found, nothing else

    feed = {"x": np.random.default_rng(0).standard_normal((1, WIDTH)).astype(np.float32)}
    before = ort.InferenceSession(model.SerializeToString()).run(None, feed)[0]
    rewritten, sites = run_onnx_passes(model, PROFILES["ort"])
    ops = Counter(n.op_type for n in rewritten.graph.node)
    assert ops["Erf"] == ops["Tanh"] == ops["Pow"] == 0
    assert ops["FastGelu"] == kinds["tanh"] and ops["BiasGelu"] == kinds["exact"]
    assert ops["QuickGelu"] == kinds["quick"]
    after = ort.InferenceSession(rewritten.SerializeToString()).run(None, feed)[0]
    np.testing.assert_allclose(after, before, atol=1e-4, rtol=1e-4)


def test_report_records_stage_seconds_from_a_real_run(tmp_path: Path) -> None:
    from benchmarks.gelu_bound import GeluResidual
    from benchmarks.graphs import save_program
    from export_gelu import export

    module = GeluResidual("tanh", width=32).eval()
    program = save_program(module, (torch.randn(2, 4, 32),), tmp_path / "m.pt")
    report_path = tmp_path / "r.json"
    rep = export(program, target="ort", output=tmp_path / "m.onnx", iterations=0,
                 report=report_path)
    stages = json.loads(report_path.read_text())["stage_seconds"]
    for stage in ("load", "capture", "fx_passes", "export", "onnx_passes", "save", "verify"):
        assert stages[stage] >= 0.0, stage
    assert stages["export"] > stages["fx_passes"]  # the exporter does far more than one rule

    onnx_rep = export(tmp_path / "m.onnx", target="onnx", output=tmp_path / "o.onnx",
                      verify=False)
    assert set(onnx_rep.stage_seconds) == {"load", "onnx_passes", "checks", "save"}
    assert rep.parity.status == "passed"


def test_write_section_replaces_only_its_own_section(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results, "RESULTS", tmp_path / "RESULTS.md")
    results.write_section("alpha", "first body")
    results.write_section("beta", "beta body")
    results.write_section("alpha", "second body")
    text = (tmp_path / "RESULTS.md").read_text()
    assert text.count("## alpha") == 1 and "second body" in text and "first body" not in text
    assert "beta body" in text and text.index("## alpha") < text.index("## beta")
    assert "onnxruntime" in text and "UTC" in text  # versions and date are recorded


def test_ort_optimizer_failure_is_a_result_not_a_crash(tmp_path: Path) -> None:
    from benchmarks.graphs import ort_optimize, ort_optimizer_missing

    if ort_optimizer_missing():
        pytest.skip(ort_optimizer_missing())
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a model")
    path, why = ort_optimize(garbage, tmp_path / "out.onnx", "bert")
    assert path is None and "failed" in why


def test_gpu_parts_say_why_they_are_skipped_and_the_eager_part_runs_on_cpu() -> None:
    from benchmarks import gpu

    args = argparse.Namespace(quick=True, rounds=None, warmup=1, no_write=True, threads=1)
    if gpu.ort_cuda_missing():
        assert gpu.ort_cuda_part(args).startswith("skipped: no GPU")
    if gpu.trt_missing():
        assert gpu.tensorrt_part(args).startswith("skipped: no GPU")
    if gpu.torch_cuda_missing():
        assert gpu.torch_eager_part(args).startswith("skipped: no GPU")
    text = gpu.torch_eager_part(args, device="cpu", shape=(2, 8, 16))
    assert text.count("####") == 4 and "expanded" in text


def test_compare_command_times_your_files_and_refuses_bad_ones(tmp_path: Path, capsys) -> None:
    from benchmarks.compare import main

    a = _elementwise(tmp_path / "a.onnx", "Relu")
    b = _elementwise(tmp_path / "b.onnx", "Relu")
    md = tmp_path / "cmp.md"
    quick = ["--rounds", "4", "--runs", "2", "--replicas", "1", "--warmup", "1"]
    assert main([str(a), str(b), *quick, "--markdown", str(md)]) == 0
    out = capsys.readouterr().out
    assert "| a.onnx |" in out and "| b.onnx |" in out and "ratio in each fresh run" in out
    assert "| b.onnx |" in md.read_text() and "2 fresh run(s) of 4 rounds" in md.read_text()

    neg = _elementwise(tmp_path / "neg.onnx", "Neg")
    assert main([str(a), str(neg), *quick]) == 1
    assert "neg.onnx differs from a.onnx" in capsys.readouterr().err

    wide = _elementwise(tmp_path / "wide.onnx", "Relu", width=32)
    for args, message in (([str(a)], "at least two ONNX files"),
                          ([str(a), str(tmp_path / "gone.onnx")], "gone.onnx: no such file"),
                          ([str(a), str(wide)], "wide.onnx: input 'x' has shape 2x32"),
                          ([str(a), str(b), "--input", "y:2x16"], "no input given for x")):
        assert main([*args, *quick]) == 2, args
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


def test_big_model_verdict_needs_every_ratio_slope_and_weight_within_limits() -> None:
    from benchmarks.big_model import Row, slopes, table, verdict

    def rows(ratio_iv: float, checks: str = "22/22 torch weights identical") -> list[Row]:
        out = []
        for gb in (6e9, 12e9):
            out.append(Row(f"{gb / 1e9:.0f} GB", "i", int(gb), int(0.05 * gb), 10.0,
                           "skipped", "44/44 weights identical", 0.25))
            out.append(Row(f"{gb / 1e9:.0f} GB", "iv", int(gb), int(ratio_iv * gb), 10.0,
                           "passed (max abs 1e-07)", checks, 1.6))
        return out

    good = rows(1.1)
    assert verdict(good) and abs(slopes(good)["iv"] - 1.1) < 1e-6
    assert "| 6 GB | (i) ONNX rewrite, no verify | 0.30 GB | 0.05× | ≤ 0.25 |" in table(good)
    assert not verdict(rows(1.7))  # over the limit at every size
    assert not verdict(rows(1.1, "21/22 torch weights identical"))  # a weight changed
