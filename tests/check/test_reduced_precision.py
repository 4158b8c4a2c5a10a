"""A reduced-precision PASSED means the graph is usable: each output is judged against PyTorch's
own error at that precision *and* against the output's scale; where PyTorch's own error is a
large share of the scale the precision is named unsafe for the model, with the numbers and the
way out, passed or failed (never a bare PASSED). One rule, `judge_reduced`, for any precision.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from export_gelu.check.verdict.half_baseline import _rejudge, unsafe_text, way_out
from export_gelu.check.verdict.parity import OutputError, ParityResult
from export_gelu.check.verdict.reduced_precision import SCALE_SHARE, judge_reduced
from export_gelu.tolerances import JUDGED_ATOL, JUDGED_PYTORCH_PRECISION
from tests.conftest import run_cli
from tests.hf_exports import saved_folder
from tests.report_schema import validate_report

FP16_ATOL = 0.02


# -- the rule: (reference error at the precision, graph error, output scale) ----------------

def test_models_that_compute_in_fp16_are_judged_as_before():
    """BLOOM and Gemma-2 tiny at fp16 (trt8.6, measured): errors ~0.2% and ~0.03% of the
    scale, PyTorch's about the same: safe, within both bounds."""
    for ref, graph, scale in ((0.015, 0.0162, 9.63), (0.00839, 0.00434, 15.2)):
        v = judge_reduced(ref, graph, scale, FP16_ATOL)
        assert v.passed and not v.unsafe and v.bound == pytest.approx(2 * ref + 0.1 * FP16_ATOL)


def test_a_reference_off_by_its_whole_scale_bounds_nothing():
    """Flan-T5-style (examples' T5, gated-gelu, wide init) encoder at fp16: PyTorch's own fp16
    off by the whole scale (26.1 on |ref| ≤ 26.1), the graph by 7.65 (29%). Twice PyTorch's
    error (52.2) passed it; against the output's scale it fails, and fp16 is unsafe."""
    v = judge_reduced(26.1, 7.65, 26.1, FP16_ATOL)
    assert v.unsafe and not v.passed
    assert v.bound == pytest.approx(SCALE_SHARE * 26.1)
    assert v.reference_share == pytest.approx(1.0) and v.graph_share == pytest.approx(0.293, 1e-2)
    # a graph far better than PyTorch's fp16 (its fp32 islands work): usable, still unsafe
    v = judge_reduced(26.1, 0.5, 26.1, FP16_ATOL)
    assert v.passed and v.unsafe


def test_the_rule_is_not_tied_to_a_precision():
    """The same three numbers decide an INT8- or FP8-sized case; infinite or NaN errors never
    pass; the fixed atol floors the scale bound of a tiny output."""
    assert judge_reduced(0.1, 0.15, 10.0, 0.05).passed  # within 2x and within 5% of 10
    assert not judge_reduced(0.1, 0.6, 10.0, 0.05).passed  # over 2x + floor and over 5%
    v = judge_reduced(math.inf, 0.3, 10.0, 0.05)
    assert v.unsafe and v.passed and v.bound == pytest.approx(0.5)
    assert not judge_reduced(0.1, math.nan, 10.0, 0.05).passed
    assert judge_reduced(0.001, 0.002, 0.01, FP16_ATOL).bound == pytest.approx(0.004)


# -- the verdict's words --------------------------------------------------------------------

def _t5_encoder_result() -> ParityResult:
    out = OutputError(max_abs=7.65, max_rel=1.57, mean_abs=0.281, p999_abs=6.2, ref_scale=26.1,
                      passed=False, judged=JUDGED_ATOL, judged_atol=FP16_ATOL)
    return ParityResult("failed", "outputs over tolerance: last_hidden_state (max abs 7.65, "
                        "max rel 1.57)", FP16_ATOL, FP16_ATOL,
                        ["pytorch", "onnxruntime"], {"last_hidden_state": out})


def test_an_unsafe_precision_fails_a_graph_beyond_the_scale_and_says_why():
    result = _t5_encoder_result()
    unsafe = {"last_hidden_state": {"pytorch_max_abs": 26.1, "ref_scale": 26.1, "share": 1.0}}
    advice = way_out("fp16", result, unsafe, ["wo"], "bf16", {"last_hidden_state": 23.0})
    _rejudge(result, {"last_hidden_state": 26.1}, unsafe, "fp16", advice)
    out = result.outputs["last_hidden_state"]
    assert result.status == "failed" and not out.passed and out.judged == JUDGED_ATOL
    assert "last_hidden_state max abs 26.1 (the graph may have 1.3" in result.reason
    assert ("fp16 is unsafe for this model: PyTorch's own fp16 errs on last_hidden_state by "
            "26.1 (100% of |ref| ≤ 26.1; the graph's error: 7.65, 29%)") in result.reason
    assert "keep wo in fp32 (the model's own _keep_in_fp32_modules)" in result.reason
    assert ("export with --precision fp32 (bf16 is no way out: PyTorch's own bf16 errs by "
            "23 on last_hidden_state)") in result.reason


def test_an_unsafe_precision_is_said_on_a_pass_too():
    result = _t5_encoder_result()
    result.outputs["last_hidden_state"].max_abs = 0.5
    unsafe = {"last_hidden_state": {"pytorch_max_abs": 26.1, "ref_scale": 26.1, "share": 1.0}}
    advice = way_out("fp16", result, unsafe, [], "bf16", {"last_hidden_state": 0.1})
    _rejudge(result, {"last_hidden_state": 26.1}, unsafe, "fp16", advice)
    out = result.outputs["last_hidden_state"]
    assert result.status == "passed" and out.judged == JUDGED_PYTORCH_PRECISION
    assert out.judged_atol == pytest.approx(SCALE_SHARE * 26.1)
    assert result.reason.startswith("fp16 is unsafe for this model")
    assert "keep the layers that overflow in fp32, or export with --precision bf16 (" \
        "PyTorch's own bf16 errs by at most 0.1 there, within 5%) or fp32" in result.reason
    assert unsafe_text("fp16", result, unsafe, "x").endswith("; x")


# -- through the command --------------------------------------------------------------------

class Overflowing(nn.Module):
    """Linear with activations in the hundreds, an RMS norm written out (y·y overflows fp16),
    GELU, Linear: PyTorch's own fp16 loses the whole output; the exported graph keeps the
    overflowing nodes in fp32 (its islands) and stays accurate."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up, self.act, self.down = nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)
        with torch.no_grad():
            self.up.weight.mul_(200.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.up(x)
        y = y / torch.sqrt((y * y).mean(-1, keepdim=True) + 1e-6)
        return self.down(self.act(y))


def test_an_accurate_graph_of_a_model_unsafe_in_fp16_passes_with_the_warning(tmp_path):
    model = tmp_path / "overflowing.pt2"
    torch.export.save(torch.export.export(Overflowing().eval(), (torch.randn(4, 16),)),
                      str(model))
    rep = tmp_path / "r.json"
    res = run_cli(model, "--target", "onnx", "--precision", "fp16", "-o", tmp_path / "o.onnx",
                  "--iterations", "0", "--report", rep)
    assert res.code == 0, res.out + res.err
    parity_line = next(t for t in res.out.splitlines() if t.startswith("Parity:"))
    assert parity_line.startswith("Parity: PASSED") and " — fp16 is unsafe for this model: " \
        "PyTorch's own fp16 errs on output_0 by " in parity_line  # not a bare PASSED
    assert "within 5%) or fp32" in parity_line and "--precision bf16 (" in parity_line
    report = json.loads(rep.read_text())
    validate_report(report)
    block = report["parity"]["pytorch_precision"]
    assert block["scale_share"] == SCALE_SHARE and block["unsafe"]["output_0"]["share"] > 0.5
    assert block["bf16"]["output_0"] < SCALE_SHARE * block["unsafe"]["output_0"]["ref_scale"]
    assert "and 5% of the output's scale, or the atol)" in res.out


@pytest.mark.slow  # the rule: test_an_unsafe_precision_fails_a_graph_beyond_the_scale_and_says_why
def test_flan_t5_at_fp16_is_reported_unsafe(session_cache, tmp_path):
    """T5ForConditionalGeneration with feed_forward_proj="gated-gelu" (examples' tiny T5, wide
    init) at `--target trt8.6 --precision fp16`: PyTorch's own fp16 is off by the output's
    whole scale; the graph (fp32 islands) is better but not usable: exit 1, fp16 named unsafe
    with the numbers, T5's `wo` named to keep in fp32."""
    folder = shutil.copytree(saved_folder(session_cache, "t5"), tmp_path / "t5")
    rep = tmp_path / "r.json"
    res = run_cli(folder, "--target", "trt8.6", "--precision", "fp16", "-o", tmp_path / "out",
                  "--iterations", "0", "--report", rep)
    assert res.code == 1, res.out + res.err
    parity_line = next(t for t in res.out.splitlines() if t.startswith("Parity:"))
    assert parity_line.startswith("Parity: FAILED") and "encoder_model.onnx: " in parity_line
    assert "fp16 is unsafe for this model: PyTorch's own fp16 errs on last_hidden_state by" \
        in parity_line and "keep wo in fp32" in parity_line
    graphs = json.loads(rep.read_text())["graphs"]
    enc = graphs["encoder_model.onnx"]["parity"]
    out = enc["outputs"]["last_hidden_state"]
    assert not out["passed"] and out["max_abs"] > SCALE_SHARE * out["ref_scale"]
    assert out["pytorch_max_abs"] > 0.5 * out["ref_scale"]
    assert enc["pytorch_precision"]["unsafe"]["last_hidden_state"]["share"] > 0.5


@pytest.mark.slow  # test_models_that_compute_in_fp16_are_judged_as_before pins the numbers
@pytest.mark.parametrize("name", ["bloom", "gemma2"])
def test_bloom_and_gemma2_still_pass_at_fp16(name, session_cache, tmp_path):
    def build(folder: Path) -> None:
        import transformers as t

        from examples.hf_folders import TEXT

        torch.manual_seed(0)
        t.Gemma2ForCausalLM(t.Gemma2Config(**TEXT, num_key_value_heads=2, head_dim=8,
                                           initializer_range=0.5, sliding_window=16)
                            ).eval().save_pretrained(folder)

    saved = saved_folder(session_cache, "bloom") if name == "bloom" else \
        session_cache.folder("gemma2-fp16", build)  # BLOOM's: test_hf_folders.py's too
    folder = shutil.copytree(saved, tmp_path / name)
    rep = tmp_path / "r.json"
    res = run_cli(folder, "--target", "trt8.6", "--precision", "fp16", "-o",
                  tmp_path / "o.onnx", "--iterations", "0", "--report", rep)
    assert res.code == 0, res.out + res.err
    parity = json.loads(rep.read_text())["parity"]
    assert parity["status"] == "passed" and "unsafe" not in parity["reason"]
    assert not parity["pytorch_precision"]["unsafe"]
    logits = parity["outputs"]["logits"]
    assert logits["max_abs"] < 0.01 * logits["ref_scale"]
    assert np.isfinite(logits["pytorch_max_abs"])
