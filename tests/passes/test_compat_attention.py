"""scaled_dot_product_attention lowered for the TorchScript exporter: exported at opset 11
and run in ONNX Runtime, it matches PyTorch's SDPA for every mask kind, including fully
masked rows (0, as PyTorch gives), causal attention and grouped-query attention; and at
opset 13 on every attention shape the zoo has (separate q/k/v projections, relative position
bias, windows batched or 5-D, cross-attention with a padding mask, a custom scale)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from export_gelu.exporter.onnx_export.to_onnx import export_to_onnx, prepare_program_for_opset


class Attention(nn.Module):
    def __init__(self, **kwargs) -> None:
        super().__init__()
        self.kwargs = kwargs

    def forward(self, q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **self.kwargs)


def bool_mask() -> torch.Tensor:
    m = torch.rand(2, 1, 5, 6) > 0.3
    m[0, 0, 2] = False  # a fully masked row
    m[..., 0] |= True
    m[0, 0, 2] = False
    return m


def float_mask() -> torch.Tensor:
    m = torch.zeros(2, 1, 5, 6)
    m[1, 0, 1, 2:] = float("-inf")
    m[0, 0, 3] = float("-inf")  # a fully masked row
    m[1, 0, 4, :3] = torch.finfo(torch.float32).min  # HF-style finite masking
    return m


CASES = {
    "no mask": (dict(), None, 4),
    "bool mask": (dict(), bool_mask, 4),
    "float mask": (dict(), float_mask, 4),
    "causal": (dict(is_causal=True), None, 4),
    "scale": (dict(scale=0.3), bool_mask, 4),
    "gqa": (dict(enable_gqa=True), None, 2),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("opset", [11, 17])
def test_lowered_attention_matches_pytorch(case, opset):
    kwargs, make_mask, kv_heads = CASES[case]
    torch.manual_seed(0)
    q = torch.randn(2, 4, 5, 8)
    k, v = torch.randn(2, kv_heads, 6, 8), torch.randn(2, kv_heads, 6, 8)
    if case == "causal":
        k, v = k[:, :, :5], v[:, :, :5]
    args = (q, k, v) if make_mask is None else (q, k, v, make_mask())
    module = Attention(**kwargs).eval()
    with torch.no_grad():
        want = module(*args).numpy()
    program = torch.export.export(module, args, strict=False)
    notes = prepare_program_for_opset(program, opset)
    assert notes and "1 scaled_dot_product_attention" in notes[0]
    names = ["q", "k", "v", "mask"][:len(args)]
    model, exporter = export_to_onnx(None, args, names, opset, program=program)
    assert exporter == "torchscript"
    ops = {n.op_type for n in model.graph.node}
    assert not ops & {"Where", "IsNaN", "Trilu"}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {i.name: a.numpy() for i, a in zip(sess.get_inputs(), args)}
    got = sess.run(None, feed)[0]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if make_mask is not None and case != "scale":
        assert np.abs(want[0, :, 2 if case == "bool mask" else 3]).max() == 0


def test_attention_is_left_alone_for_the_dynamo_exporter():
    args = (torch.randn(1, 2, 3, 4),) * 3
    program = torch.export.export(Attention().eval(), args, strict=False)
    assert prepare_program_for_opset(program, 18) == []
    targets = [n.target for n in program.graph.nodes if n.op == "call_function"]
    assert torch.ops.aten.scaled_dot_product_attention.default in targets


def test_fp16_attention_stays_fp16_in_the_onnx_graph():
    torch.manual_seed(0)
    args = tuple(t.half() for t in (torch.randn(1, 2, 4, 8),) * 3) + (torch.ones(1, 1, 4, 4,
                                                                          dtype=torch.bool),)
    program = torch.export.export(Attention().eval(), args, strict=False)
    prepare_program_for_opset(program, 13)
    model, _ = export_to_onnx(None, args, ["q", "k", "v", "mask"], 13, program=program)
    casts = [a.i for n in model.graph.node if n.op_type == "Cast" for a in n.attribute]
    assert casts and set(casts) == {onnx.TensorProto.FLOAT16}
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16


class Projected(nn.Module):
    """Attention as the zoo writes it: separate q/k/v projections of `x` (and of `context`
    for cross-attention), heads split, an optional additive or boolean mask."""

    def __init__(self, dim: int = 16, heads: int = 2, **kwargs) -> None:
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(dim, dim) for _ in range(3))
        self.heads, self.kwargs = heads, kwargs

    def split(self, t: torch.Tensor) -> torch.Tensor:
        *lead, n, d = t.shape
        return t.reshape(*lead, n, self.heads, d // self.heads).transpose(-3, -2)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q, k, v = self.split(self.q(x)), self.split(self.k(context)), self.split(self.v(context))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **self.kwargs)
        return out.transpose(-3, -2).flatten(-2)


def _rel_bias() -> torch.Tensor:  # relative position bias: a learned float per (head, i, j)
    return torch.randn(1, 2, 7, 7) * 2


def _padding_mask() -> torch.Tensor:  # bool key padding, broadcast over heads and queries
    m = torch.ones(2, 1, 1, 9, dtype=torch.bool)
    m[1, ..., 6:] = False
    return m


SHAPES = {
    # name: (module kwargs, x shape, context shape or None, mask maker or None)
    "separate q/k/v": (dict(), (2, 7, 16), None, None),
    "relative position bias": (dict(), (2, 7, 16), None, _rel_bias),
    "windowed (batched windows)": (dict(), (8, 4, 16), None, None),  # (B * windows, N, C)
    "windowed (5-D)": (dict(), (2, 4, 4, 16), None, None),  # (B, windows, N, C): 5-D q/k/v
    "cross-attention": (dict(), (2, 5, 16), (2, 9, 16), None),
    "cross-attention, bool mask": (dict(), (2, 5, 16), (2, 9, 16), _padding_mask),
    "custom scale": (dict(scale=0.7), (2, 7, 16), None, _rel_bias),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_lowered_attention_on_each_attention_shape_at_opset_13(shape):
    kwargs, x_shape, ctx_shape, make_mask = SHAPES[shape]
    torch.manual_seed(0)
    module = Projected(**kwargs).eval()
    x = torch.randn(*x_shape)
    ctx = torch.randn(*ctx_shape) if ctx_shape else None
    mask = make_mask() if make_mask else None
    args = tuple(a for a in (x, ctx, mask) if a is not None)
    names = [n for n, a in zip(("x", "context", "mask"), (x, ctx, mask)) if a is not None]
    call = {n: a for n, a in zip(names, args)}
    program = torch.export.export(module, (), call, strict=False)
    notes = prepare_program_for_opset(program, 13)
    assert notes and "1 scaled_dot_product_attention" in notes[0]
    from export_gelu.exporter.inputs.call_plan import CallPlan

    plan = CallPlan(keyword=tuple((n, n) for n in names))
    model, exporter = export_to_onnx(None, args, names, 13, program=program, plan=plan)
    assert exporter == "torchscript"
    ops = {n.op_type for n in model.graph.node}
    assert "Softmax" in ops and not ops & {"Where", "IsNaN", "Trilu"}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for seed in (1, 2):  # fresh inputs: nothing of the traced ones is baked in
        torch.manual_seed(seed)
        fresh = {n: (torch.randn_like(a) if a.dtype != torch.bool else a) for n, a in call.items()}
        with torch.no_grad():
            want = module(**fresh).numpy()
        got = sess.run(None, {n: a.numpy() for n, a in fresh.items()})[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
