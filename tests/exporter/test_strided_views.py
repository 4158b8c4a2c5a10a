"""`as_strided` on a view that is not contiguous (Longformer's sliding-window chunks): torch's
TorchScript lowering gathers in logical order, as if the tensor were contiguous, and reads
other elements than eager; export-gelu's lowering follows the strides the trace recorded."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from torch import nn

from export_gelu.errors import TargetUnmetError
from export_gelu.exporter.onnx_export.strided_views import StridedLoweringError, logical_indices
from export_gelu.exporter.onnx_export.to_onnx import export_to_onnx


class OverlappingChunks(nn.Module):
    """LongformerSelfAttention._chunk on `q.transpose(1, 2).reshape(b·h, s, d)`: the reshape
    merges batch and heads into a view (no copy), so as_strided reads a transposed layout."""

    copy = False  # True: as_strided on a contiguous copy of that view

    def forward(self, q: torch.Tensor) -> torch.Tensor:  # q: (seq, batch, heads, dim)
        seq, batch, heads, dim = q.shape
        x = q.transpose(0, 1).transpose(1, 2).reshape(batch * heads, seq, dim)
        x = x.contiguous() if self.copy else x
        x = x.view(batch * heads, seq // 8, 8, dim)
        size, stride = list(x.size()), list(x.stride())
        size[1], stride[1] = size[1] * 2 - 1, stride[1] // 2
        return x.as_strided(size, stride) * 2


class ContiguousChunks(OverlappingChunks):
    copy = True


def _error(module: nn.Module, x: torch.Tensor,
           dynamic_axes: dict[str, dict[int, str]] | None = None) -> float:
    model, exporter = export_to_onnx(module, (x,), ["q"], 17, exporter="torchscript",
                                     dynamic_axes=dynamic_axes)
    assert exporter == "torchscript"
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    fresh = torch.randn(x.shape, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        want = module(fresh).numpy()
    return float(np.abs(session.run(None, {"q": fresh.numpy()})[0] - want).max())


def test_as_strided_on_a_transposed_view_reads_what_eager_reads() -> None:
    x = torch.randn(16, 2, 4, 8)
    assert _error(OverlappingChunks(), x) == 0.0  # torch's own lowering: max error 5.2


def test_torchs_lowering_reads_other_elements_there() -> None:
    """The bug the lowering replaces (if torch fixes it, this test says the rule can go)."""
    import io

    module, x = OverlappingChunks(), torch.randn(16, 2, 4, 8)
    buffer = io.BytesIO()
    torch.onnx.export(module, (x,), buffer, dynamo=False, opset_version=17, input_names=["q"])
    session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        want = module(x).numpy()
    assert np.abs(session.run(None, {"q": x.numpy()})[0] - want).max() > 0.1


def test_a_contiguous_input_keeps_torchs_lowering_dynamic_sizes_included() -> None:
    x = torch.randn(16, 2, 4, 8)
    assert _error(ContiguousChunks(), x) == 0.0
    model, _ = export_to_onnx(ContiguousChunks(), (x,), ["q"], 17, exporter="torchscript",
                              dynamic_axes={"q": {1: "batch"}})
    assert model.graph.input[0].type.tensor_type.shape.dim[1].dim_param == "batch"


def test_a_transposed_view_under_a_dynamic_axis_is_refused_with_the_reason() -> None:
    with pytest.raises(TargetUnmetError, match="as_strided on a tensor that is not contiguous "
                                               "at sizes that vary with a dynamic axis"):
        export_to_onnx(OverlappingChunks(), (torch.randn(16, 2, 4, 8),), ["q"], 17,
                       exporter="torchscript", dynamic_axes={"q": {1: "batch"}})


def test_logical_indices_follow_the_strides() -> None:
    # a (2, 3) tensor stored transposed (strides 1, 2): memory holds x[0,0], x[1,0], x[0,1], …
    index = logical_indices([2, 3], [1, 2], [6], [1])
    assert index.tolist() == [0, 3, 1, 4, 2, 5]
    assert logical_indices([2, 3], [3, 1], [2, 2], [1, 3], offset=1).tolist() == [[1, 4], [2, 5]]
    with pytest.raises(StridedLoweringError, match="reads memory outside its input"):
        logical_indices([2, 3], [3, 1], [4], [2])
