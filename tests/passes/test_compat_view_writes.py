"""Writes into views of an ExportedProgram (`x[..., 0] = y`), which the TorchScript exporter
drops when it traces `program.module()`: made functional, the graph at opset 13 matches
PyTorch on fresh inputs. A tiny SAM saved as `.pt2` (its point coordinates are scaled in
place) exports to trt8.2 with parity."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from export_gelu.exporter.onnx_export.to_onnx import export_to_onnx, prepare_program_for_opset
from tests.conftest import run_cli


class SelectWrites(nn.Module):  # SamPositionalEmbedding's pattern
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        c[:, :, 0] = c[:, :, 0] / 64
        c[:, :, 1] = c[:, :, 1] / 32
        return 2 * c - 1


class SliceWrite(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        c[:, 1:3] = c[:, 1:3] * 10
        return c + 1


class NestedWrite(nn.Module):  # a select of a slice, and a scalar broadcast into it
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        c[1:, :, -1] = 0.5
        return c * 3


class KeptView(nn.Module):  # views read after the write: the write must show through them
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        view = c[:, :, 0]
        flat = c[1:].reshape(-1)  # a view of a view that is not read after the write
        first = flat[:3]
        c[:, :, 0] = 7.0
        return view + c.sum(-1) + first.sum()


CASES = {"select": (SelectWrites, 2), "slice": (SliceWrite, 1), "nested": (NestedWrite, 1),
         "kept view": (KeptView, 1)}


@pytest.mark.parametrize("case", list(CASES))
def test_view_writes_are_kept_at_opset_13(case):
    make, rewritten = CASES[case]
    torch.manual_seed(0)
    module = make().eval()
    x = torch.rand(3, 4, 2) * 64
    program = torch.export.export(module, (x,), strict=False)
    notes = prepare_program_for_opset(program, 13)
    assert any(f"{rewritten} write(s) into a tensor view" in n for n in notes) == bool(rewritten)
    model, exporter = export_to_onnx(None, (x,), ["x"], 13, program=program)
    assert exporter == "torchscript"
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    fresh = torch.rand(3, 4, 2) * 64  # constant folding must not have baked x in
    for t in (x, fresh):
        got = sess.run(None, {"x": t.numpy()})[0]
        with torch.no_grad():
            np.testing.assert_allclose(got, module(t).numpy(), rtol=1e-6, atol=1e-6)


def tiny_sam() -> nn.Module:
    from transformers import (
        SamConfig,
        SamMaskDecoderConfig,
        SamModel,
        SamPromptEncoderConfig,
        SamVisionConfig,
    )

    vision = SamVisionConfig(hidden_size=32, output_channels=16, num_hidden_layers=2,
                             num_attention_heads=2, mlp_dim=64, image_size=64, patch_size=8,
                             window_size=4, global_attn_indexes=[1], num_pos_feats=8)
    prompt = SamPromptEncoderConfig(hidden_size=16, image_size=64, patch_size=8,
                                    mask_input_channels=4)
    decoder = SamMaskDecoderConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                   mlp_dim=32, iou_head_hidden_dim=16)
    torch.manual_seed(0)
    return SamModel(SamConfig(vision_config=vision, prompt_encoder_config=prompt,
                              mask_decoder_config=decoder)).eval()


@pytest.mark.slow
def test_sam_pt2_to_trt82_passes_parity_and_is_right_on_fresh_inputs(tmp_path: Path):
    model = tiny_sam()
    pixels, points = torch.randn(1, 3, 64, 64), torch.rand(1, 1, 2, 2) * 64
    program = torch.export.export(model, (), dict(pixel_values=pixels, input_points=points),
                                  strict=False)
    torch.export.save(program, tmp_path / "sam.pt2")
    out = tmp_path / "sam.onnx"
    res = run_cli(tmp_path / "sam.pt2", "--target", "trt8.2", "-o", out, "--iterations", "3")
    assert res.code == 0, res.out + res.err
    assert "Parity: PASSED" in res.out
    assert "9 scaled_dot_product_attention call(s) lowered" in res.out
    assert "2 write(s) into a tensor view made functional" in res.out
    graph = onnx.load(str(out))
    assert graph.opset_import[0].version == 13
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    torch.manual_seed(1)
    for _ in range(2):
        pixels, points = torch.randn(1, 3, 64, 64), torch.rand(1, 1, 2, 2) * 64
        with torch.no_grad():
            want = model(pixel_values=pixels, input_points=points)
        got = dict(zip([o.name for o in sess.get_outputs()],
                       sess.run(None, {"pixel_values": pixels.numpy(),
                                       "input_points": points.numpy()})))
        for name in ("iou_scores", "pred_masks"):
            np.testing.assert_allclose(got[name], want[name].numpy(), rtol=1e-3, atol=1e-5)
