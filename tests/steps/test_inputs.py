"""steps/inputs.py: export_inputs (the feed in forward() order, the dynamic plan, the call
plan, the reference module, the precision parity runs in) and HeldModels.free."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from export_gelu.run import Run
from export_gelu.steps.inputs import export_inputs
from tests.steps.step_inputs import TINY_SHAPE, export_request, onnx_model, source


def test_export_inputs_makes_the_feed_at_the_input_shape_in_forward_order(
        tmp_path: Path) -> None:
    model = onnx_model(tmp_path)
    request = export_request(model, tmp_path, inputs=("x:2x4x16:float32:-1,1",))
    inputs = export_inputs(source(model), request, Run())
    assert list(inputs.feed) == ["x"] and inputs.feed["x"].shape == (2, 4, 16)
    assert -1 <= inputs.feed["x"].min() and inputs.feed["x"].max() <= 1
    assert inputs.feed["x"].dtype == np.float32
    assert inputs.call_plan.positional == ("x",) and not inputs.call_plan.uses_keywords
    assert not inputs.dynamic.dims and inputs.cast is None and inputs.real is False
    assert inputs.held.reference is None  # an ONNX input is its own reference
    assert inputs.run_precision == "fp32" and list(inputs.generated) == ["x"]


def test_export_inputs_of_a_program_uses_its_example_and_module(program: Path,
                                                                 tmp_path: Path) -> None:
    inputs = export_inputs(source(program), export_request(program, tmp_path), Run())
    assert inputs.feed["x"].shape == TINY_SHAPE
    assert inputs.generated == {}  # the model's own example, not made up
    assert isinstance(inputs.held.reference, torch.nn.Module)
    inputs.held.free()  # a big model's check frees what it holds, once recorded
    assert inputs.held.reference is None and inputs.loaded.exported is None


def test_export_inputs_from_an_npz_is_real_data(tmp_path: Path) -> None:
    data = np.full(TINY_SHAPE, 0.5, np.float32)
    np.savez(tmp_path / "in.npz", x=data)
    model = onnx_model(tmp_path)
    request = export_request(model, tmp_path, inputs_npz=str(tmp_path / "in.npz"))
    inputs = export_inputs(source(model), request, Run())
    assert inputs.real is True and inputs.generated == {}
    assert inputs.label == "real data from in.npz"
    np.testing.assert_array_equal(inputs.feed["x"], data)
