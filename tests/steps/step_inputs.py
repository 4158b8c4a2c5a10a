"""What the step tests (tests/steps/test_*.py) hand the steps: tiny model files, a feed, and
the records a step takes, made by the package's own functions (`prepare`, `load_model`, the
inputs step) or, for a graph already written, described by hand."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from torch import nn

from export_gelu.exporter.loading.load import load_model
from export_gelu.options import ExportOptions, VerifyOptions
from export_gelu.results.export import ExportInputs, SavedGraph
from export_gelu.results.request import OneGraphSource, Request, one_graph_source
from export_gelu.run import Run
from export_gelu.steps.inputs import export_inputs
from export_gelu.steps.request import prepare
from tests.onnx_graphs import SHAPE, hand_graph

#: Every tiny model here takes x of this shape (tests/onnx_graphs.py's graphs do too).
TINY_SHAPE = tuple(SHAPE)


class Tiny(nn.Module):
    """Linear(16, 16) then GELU (tanh form): one GELU site, module names `fc` and `act`."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(TINY_SHAPE[-1], TINY_SHAPE[-1])
        self.act = nn.GELU(approximate="tanh")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x))


def tiny_module() -> Tiny:
    torch.manual_seed(0)
    return Tiny().eval()


def tiny_program(folder: Path) -> Path:
    """Tiny as an ExportedProgram file (torch.export.save), with its example input."""
    path = folder / "tiny.pt2"
    example = (torch.randn(*TINY_SHAPE),)
    torch.export.save(torch.export.export(tiny_module(), example), path)
    return path


def tiny_onnx_of_module(folder: Path, name: str = "tiny_ts.onnx") -> Path:
    """Tiny exported by torch's TorchScript exporter (fast, no dynamo): the graph a run
    would deploy for it."""
    path = folder / name
    torch.onnx.export(tiny_module(), (torch.randn(*TINY_SHAPE),), str(path), dynamo=False,
                      input_names=["x"], output_names=["y"], opset_version=17)
    return path


def onnx_model(folder: Path, formula: str = "tanh x*x*x", name: str = "hand.onnx") -> Path:
    """A hand-built graph y = formula(MatMul(x, W) + b) (tests/onnx_graphs.py), saved."""
    path = folder / name
    onnx.save(hand_graph(formula), path)
    return path


def scaled_weights(src: Path, dst: Path, factor: float) -> Path:
    """`src` with its matrix weights multiplied by `factor` (a wrong graph, same interface)."""
    model = onnx.load(str(src))
    for init in model.graph.initializer:
        arr = onnx.numpy_helper.to_array(init)
        if arr.ndim == 2:
            init.CopyFrom(onnx.numpy_helper.from_array(arr * np.float32(factor), init.name))
    onnx.save(model, dst)
    return dst


def main_feed(seed: int = 0) -> OrderedDict[str, np.ndarray]:
    """x of TINY_SHAPE, float32."""
    rng = np.random.default_rng(seed)
    return OrderedDict(x=(rng.standard_normal(TINY_SHAPE) * 2).astype(np.float32))


def export_request(model: Path, folder: Path, **options: Any) -> Request[ExportOptions]:
    """An export's request for `model`, writing folder/out.onnx (target ort unless given)."""
    return prepare(ExportOptions(**{"target": "ort", "output": str(folder / "out.onnx"),
                                    **options}), model)


def verify_request(model: Path, deployed: Path, **options: Any) -> Request[VerifyOptions]:
    """A verify's request: `model` against `deployed`."""
    return prepare(VerifyOptions(**options), model, deployed=deployed)


def source(model: Path) -> OneGraphSource:
    """`model` loaded as every command loads it (one graph)."""
    return one_graph_source(load_model(model))


def export_inputs_of(request: Request[ExportOptions],
                     feed: OrderedDict[str, np.ndarray] | None = None) -> ExportInputs:
    """The inputs step's record for `request`'s model (its feed replaced by `feed`)."""
    inputs = export_inputs(source(request.model), request, Run())
    return dataclasses.replace(inputs, feeds=(feed,)) if feed is not None else inputs


def saved_graph(request: Request[ExportOptions], path: Path) -> SavedGraph:
    """A graph already written to `path`, as make_graph would describe it (no GELU sites)."""
    graph = onnx.load(str(path))
    return SavedGraph(path, None, None, graph, request.profile, "none (ONNX input)",
                      graph.opset_import[0].version, {}, [], {}, None)
