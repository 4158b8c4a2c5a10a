"""The one mapping of a model's inputs onto a graph (check/runners/deployed.py: feed_for): the same
rules for a DEPLOYED file and for the graph an export produced, with the exit code saying
whose graph it was."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from export_gelu.check.runners.deployed import deployed_feed, describe_onnx, feed_for
from export_gelu.errors import BadInputError, TargetUnmetError


def _graph(inputs: list[tuple[str, int, list[int | str]]], out_type: int = TensorProto.FLOAT
           ) -> onnx.ModelProto:
    """Identity of the first input (so the graph is valid), taking every input listed."""
    vis = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    nodes = [helper.make_node("Identity", [inputs[0][0]], ["y"])]
    graph = helper.make_graph(nodes, "g", vis, [helper.make_tensor_value_info(
        "y", out_type, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feed(**arrays: np.ndarray) -> OrderedDict[str, np.ndarray]:
    return OrderedDict(arrays)


def test_produced_graph_takes_its_inputs_in_their_declared_types():
    model = _graph([("x", TensorProto.FLOAT16, ["b", 4]), ("ids", TensorProto.INT32, ["b", 4])])
    feed = _feed(ids=np.arange(8, dtype=np.int64).reshape(2, 4),
                 x=np.ones((2, 4), np.float32), unused=np.zeros(1, np.float32))
    out = deployed_feed(feed, model)
    assert list(out) == ["ids", "x"]  # forward() order, only what the graph takes
    assert out["x"].dtype == np.float16 and out["ids"].dtype == np.int32
    np.testing.assert_array_equal(out["ids"], np.arange(8).reshape(2, 4))


def test_a_float_is_never_cast_into_an_integer_input():
    model = _graph([("ids", TensorProto.INT64, [2])])
    out = deployed_feed(_feed(ids=np.array([0.5, 1.5], np.float32)), model)
    assert out["ids"].dtype == np.float32  # left for ONNX Runtime to refuse by name


def test_an_undeclared_float_input_takes_the_graphs_precision():
    model = _graph([("x", TensorProto.UNDEFINED, [2]), ("h", TensorProto.FLOAT16, [2])],
                   out_type=TensorProto.FLOAT16)
    model.graph.input[0].type.tensor_type.elem_type = 0
    out = deployed_feed(_feed(x=np.ones(2, np.float32), h=np.ones(2, np.float32)), model)
    assert out["x"].dtype == np.float16


def test_a_missing_input_is_ours_for_a_produced_graph_and_the_users_for_deployed():
    model = _graph([("x", TensorProto.FLOAT, [2]), ("mask", TensorProto.INT64, [2])])
    feed = _feed(x=np.ones(2, np.float32))
    with pytest.raises(TargetUnmetError, match="produced graph takes an input 'mask'"):
        deployed_feed(feed, model)
    with pytest.raises(BadInputError, match="missing mask"):
        feed_for(describe_onnx(model, Path("deployed.onnx")), feed)


def test_deployed_inputs_pair_by_position_only_when_every_name_differs():
    model = _graph([("input.1", TensorProto.FLOAT, [2]), ("input.2", TensorProto.FLOAT, [2])])
    deployed = describe_onnx(model, Path("deployed.onnx"))
    feed = _feed(a=np.zeros(2, np.float32), b=np.ones(2, np.float32))
    out = feed_for(deployed, feed)
    assert list(out) == ["input.1", "input.2"] and out["input.2"][0] == 1.0
    with pytest.raises(TargetUnmetError):  # a produced graph never pairs by position
        feed_for(deployed, feed, produced=True)


def test_a_shape_that_cannot_fit_names_the_graph():
    model = _graph([("x", TensorProto.FLOAT, [2, 4])])
    feed = _feed(x=np.ones((2, 5), np.float32))
    with pytest.raises(BadInputError, match="does not fit the deployed graph's 2x4"):
        feed_for(describe_onnx(model, Path("d.onnx")), feed)
    with pytest.raises(TargetUnmetError, match="does not fit the produced graph's 2x4"):
        deployed_feed(feed, model)
