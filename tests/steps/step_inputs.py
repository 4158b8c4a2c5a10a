"""Hand-built inputs for the stage tests (tests/pipeline/test_stages_*.py): tiny model files
and a fresh run state with the fields a stage reads set by hand.

A state is made only by `commands.new_state` and attribute assignment, the way the commands
make theirs; the fields a stage reads come from the package's own building blocks (a model
loaded by `load_model`, a feed made here), never from running the stages before it.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from torch import nn

from export_gelu.exporter.feeds.dynamic import plan_dynamic
from export_gelu.exporter.inputs.call_plan import plan_for
from export_gelu.exporter.loading.load import load_model
from export_gelu.options import ExportOptions, RunOptions, VerifyOptions
from export_gelu.pipeline.commands import new_state
from export_gelu.pipeline.state import RunState
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


def state_for(options: RunOptions, model: Path, *, deployed: Path | None = None,
              command: str = "export") -> RunState:
    """new_state(options, model) with its report as new_state made it, told the target (from
    the checked options) and the command, as a plan stage would."""
    state = new_state(options, model, deployed=deployed)
    profile = state.checked.profile
    state.report.target = profile.name if profile else ""
    state.report.command = command
    return state


def export_state(model: Path, folder: Path, **options: Any) -> RunState:
    """An export's state for `model`, writing folder/out.onnx (target ort unless given)."""
    opts = ExportOptions(**{"target": "ort", "output": str(folder / "out.onnx"), **options})
    return state_for(opts, model)


def verify_state(model: Path, deployed: Path, **options: Any) -> RunState:
    """A verify's state: `model` against `deployed`."""
    return state_for(VerifyOptions(**options), model, deployed=deployed, command="verify")


def with_loaded(state: RunState, feed: OrderedDict[str, np.ndarray] | None = None) -> RunState:
    """The fields the stages after `inputs` read, set by hand: the model loaded, no dynamic
    dims, the main feed, its call plan, the reference module, fp32."""
    state.loaded = load_model(state.model_path)
    state.dynamic = plan_dynamic(state.loaded, [], [], None)[0]
    state.feeds = [feed if feed is not None else main_feed()]
    state.call_plan = plan_for(state.loaded, list(state.feeds[0]))
    state.reference_module = None if state.loaded.is_onnx else state.loaded.reference_module()
    state.run_precision = "fp32"
    state.profile = state.checked.profile
    return state
