"""The GELU zoo (tests/gelu_zoo.py) as one ONNX graph with a product on each side of every
GELU: branch i is Linear → spelling i → Linear, so each GELU's input is a product's output
and its output a product's input, the two places a quantizer is tempted to cut it."""

from __future__ import annotations

import io

import onnx

from tests.gelu_zoo import SPELLINGS, module

FEATURES = 8


def zoo_products_module():  # -> nn.Module
    import torch
    from torch import nn

    class Branches(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.pre = nn.ModuleList(nn.Linear(FEATURES, FEATURES) for _ in SPELLINGS)
            self.act = nn.ModuleList(module(s) for s in SPELLINGS)
            self.post = nn.ModuleList(nn.Linear(FEATURES, FEATURES) for _ in SPELLINGS)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return tuple(post(act(pre(x))) for pre, act, post in
                         zip(self.pre, self.act, self.post))

    return Branches().eval()


def export_zoo(path, exporter: str, opset: int) -> None:
    """The zoo graph exported by torch's `exporter` (torchscript | dynamo) at `opset`."""
    import torch

    from export_gelu.exporter.onnx_export.to_onnx import quiet_exporter

    model = zoo_products_module()
    x = torch.randn(4, FEATURES)
    names = [f"y{i}" for i in range(len(SPELLINGS))]
    with quiet_exporter():
        if exporter == "dynamo":
            proto = torch.onnx.export(model, (x,), dynamo=True, opset_version=opset,
                                      input_names=["x"], output_names=names,
                                      verbose=False).model_proto
            onnx.save(proto, str(path))
            return
        buf = io.BytesIO()
        torch.onnx.export(model, (x,), buf, dynamo=False, opset_version=opset,
                          input_names=["x"], output_names=names)
        path.write_bytes(buf.getvalue())
