"""Ops whose result depends on tie order (TopK, ArgMax, ArgMin), fed exact ties, are named as
the cause of a parity failure, before the divergence they cause downstream, with the way out
(real inputs, or weights without ties). A divergence upstream of the tie stays the first."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from export_gelu.check.localize.ties import WAY_OUT, arg_ties, find_ties, topk_ties
from tests.conftest import run_cli
from tests.report_schema import validate_report

K = 4


class TopKTies(nn.Module):
    """Scores each of 32 tokens and keeps the K best, as a detector keeps its best anchors;
    `tied`: the score Linear's weight is zero, so every token scores its bias exactly."""

    def __init__(self, tied: bool = True) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.pre, self.act = nn.Linear(8, 8), nn.GELU()
        self.score, self.proj = nn.Linear(8, 1), nn.Linear(8, 8)
        if tied:
            with torch.no_grad():
                self.score.weight.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.pre(x))
        s = self.score(h).squeeze(-1)
        _, idx = torch.topk(s, K, dim=1)
        picked = torch.gather(h, 1, idx.unsqueeze(-1).expand(-1, -1, h.shape[-1]))
        return self.proj(picked)


def _topk_line() -> str:
    lines, start = inspect.getsourcelines(TopKTies.forward)
    return f"test_ties.py:{start + next(i for i, t in enumerate(lines) if 'torch.topk' in t)}"


# -- the tie rule, per op -------------------------------------------------------------------

def test_topk_ties_that_decide_and_those_that_do_not():
    # the k-th place is tied with the next: which ones are kept is a coin toss
    assert topk_ties(np.array([[5.0, 3.0, 3.0, 3.0, 1.0]]), 2) == (3, 1, 1)
    # equal values all kept: only their order is open, and only when TopK sorts
    assert topk_ties(np.array([[4.0, 4.0, 1.0, 0.0]]), 2) == (2, 1, 1)
    assert topk_ties(np.array([[4.0, 4.0, 1.0, 0.0]]), 2, sorted_=False) == (0, 0, 1)
    # ties below the kept ones decide nothing
    assert topk_ties(np.array([[9.0, 8.0, 1.0, 1.0]]), 2) == (0, 0, 1)
    # smallest, along axis 0, several rows; RT-DETR's case: every score equal
    x = np.array([[0.0, 2.0], [0.0, 1.0], [3.0, 1.0]])
    assert topk_ties(x, 1, axis=0, largest=False) == (2, 2, 2)
    assert topk_ties(np.zeros((2, 84), np.float32), 10) == (84, 2, 2)


def test_arg_ties_at_the_extreme_only():
    x = np.array([[1.0, 7.0, 7.0], [7.0, 1.0, 1.0]])
    assert arg_ties(x, axis=1, smallest=False) == (2, 1, 2)
    assert arg_ties(x, axis=1, smallest=True) == (2, 1, 2)
    assert arg_ties(np.array([[1.0, 2.0, 3.0]]), axis=1, smallest=False) == (0, 0, 1)


def _graph(tmp_path: Path, read_indices: bool) -> Path:
    """x → Relu → TopK(k=2) (its values, and its indices when `read_indices`), and ArgMax."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("TopK", ["r", "k"], ["v", "i"], name="topk", axis=1),
             helper.make_node("ArgMax", ["x"], ["am"], name="argmax", axis=1, keepdims=0)]
    outs = [helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 2]),
            helper.make_tensor_value_info("am", TensorProto.INT64, [2])]
    if read_indices:
        outs.append(helper.make_tensor_value_info("i", TensorProto.INT64, [2, 2]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, 5])], outs, [numpy_helper.from_array(
            np.array([2], np.int64), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / f"ties{int(read_indices)}.onnx"
    onnx.save(model, str(path))
    return path


def test_ties_are_read_from_the_graphs_own_values(tmp_path):
    """The inputs of TopK (an intermediate: Relu's output, read from a marked copy run in ONNX
    Runtime) and ArgMax (a graph input); TopK only when its indices are read."""
    feed = {"x": np.array([[-1.0, -2.0, 3.0, 0.5, 3.0], [-1.0, -3.0, -2.0, -4.0, 1.0]],
                          np.float32)}
    found = find_ties(_graph(tmp_path, read_indices=True), feed)
    assert [(t.op_type, t.node, t.tied, t.places, t.rows, t.of_rows) for t in found] == [
        # row 0: two 3s kept, in an order a tie decides; row 1: Relu's four zeros straddle
        # the 2nd place
        ("TopK", "topk", 4, 2, 2, 2),
        ("ArgMax", "argmax", 2, 1, 1, 2)]
    assert [t.order for t in found] == [1, 2]
    values_only = find_ties(_graph(tmp_path, read_indices=False), feed)
    assert [t.op_type for t in values_only] == ["ArgMax"]


# -- through the command: the cause named, before the downstream divergence ------------------

@pytest.fixture(scope="module")
def tied_files(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("ties")
    model = d / "tied.pt2"
    torch.export.save(torch.export.export(TopKTies().eval(), (torch.randn(2, 32, 8),)),
                      str(model))
    graph = d / "tied.onnx"
    res = run_cli(model, "--target", "ort", "-o", graph, "--no-verify")
    assert res.code == 0, res.out + res.err
    return model, graph


def test_a_tie_fed_topk_is_named_as_the_cause(tied_files, tmp_path):
    model, graph = tied_files
    rep = tmp_path / "r.json"
    res = run_cli("verify", model, graph, "--iterations", "0", "--no-calibration",
                  "--report", rep, "--report-md", tmp_path / "r.md")
    assert res.code == 1, res.out  # torch.topk and ORT's TopK keep different tied tokens
    line = next(t for t in res.out.splitlines() if t.startswith("first divergence"))
    assert line.startswith("first divergence: tie order at TopK node_topk")
    assert f"({_topk_line()}) — 32 equal values for its {K} places in 2 of 2 rows" in line
    assert "the first module out of tolerance after it: proj" in line
    assert line.endswith(WAY_OUT) and "--inputs FILE.npz" in line
    report = json.loads(rep.read_text())
    validate_report(report)
    parity = report["parity"]
    ties = parity["tie_order"]
    assert ties["cause"] and ties["way_out"] == WAY_OUT
    (op,) = ties["ops"]
    assert (op["op_type"], op["tied"], op["places"], op["rows"]) == ("TopK", 32, K, 2)
    assert op["source"].endswith(_topk_line())  # the path as the exporter recorded it
    assert parity["first_divergence"]["torch_module"] == "proj"  # downstream, still recorded
    assert "tie order at TopK" in (tmp_path / "r.md").read_text()


def test_a_divergence_before_the_tie_stays_the_first(tied_files, tmp_path):
    """A wrong weight upstream of the TopK (the first Linear's bias, 30% off): that module is
    the first divergence; the tie is listed, not named the cause."""
    model, graph = tied_files
    onnx_model = onnx.load(str(graph))
    bias = next(i for i in onnx_model.graph.initializer if i.name == "pre.bias")
    arr = numpy_helper.to_array(bias)
    bias.CopyFrom(numpy_helper.from_array((arr * 1.3).astype(arr.dtype), bias.name))
    bad = tmp_path / "bad.onnx"
    onnx.save(onnx_model, str(bad))
    rep = tmp_path / "r.json"
    res = run_cli("verify", model, bad, "--iterations", "0", "--no-calibration", "--report", rep)
    assert res.code == 1, res.out
    assert "first divergence: pre — " in res.out and "tie order" not in res.out
    ties = json.loads(rep.read_text())["parity"]["tie_order"]
    assert ties is not None and not ties["cause"] and ties["ops"][0]["op_type"] == "TopK"


def test_scores_without_ties_pass_with_no_tie_named(tmp_path):
    model = tmp_path / "free.pt2"
    torch.export.save(torch.export.export(TopKTies(tied=False).eval(),
                                          (torch.randn(2, 32, 8),)), str(model))
    res = run_cli(model, "--target", "ort", "-o", tmp_path / "free.onnx", "--iterations", "0")
    assert res.code == 0, res.out
    assert "tie order" not in res.out


# -- RT-DETR: 84 anchors scored alike by its default init ------------------------------------

def _rt_detr(folder: Path) -> None:
    """A tiny RT-DETR (transformers config, its own ResNet backbone, default init)."""
    from transformers import RTDetrConfig, RTDetrForObjectDetection, RTDetrResNetConfig

    torch.manual_seed(0)
    backbone = RTDetrResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 16, 16],
                                  depths=[1, 1, 1, 1], layer_type="basic",
                                  out_features=["stage2", "stage3", "stage4"])
    cfg = RTDetrConfig(backbone_config=backbone, d_model=32, encoder_hidden_dim=32,
                       encoder_in_channels=[16, 16, 16], encoder_ffn_dim=64,
                       encoder_attention_heads=2, decoder_layers=1, decoder_ffn_dim=64,
                       decoder_attention_heads=2, decoder_in_channels=[32, 32, 32],
                       num_queries=10, num_labels=3, decoder_n_points=2, image_size=64,
                       anchor_image_size=[64, 64])
    RTDetrForObjectDetection(cfg).eval().save_pretrained(folder)


def _topk_call_line() -> str:
    from transformers.models.rt_detr import modeling_rt_detr

    lines, start = inspect.getsourcelines(modeling_rt_detr.RTDetrModel.forward)
    offset = next(i for i, text in enumerate(lines) if "torch.topk(" in text)
    return f"modeling_rt_detr.py:{start + offset}"


@pytest.mark.slow  # test_a_tie_fed_topk_is_named_as_the_cause pins the same behaviour
def test_rt_detr_default_init_names_its_topk(session_cache, tmp_path):
    folder = session_cache.folder("rt-detr-tiny", _rt_detr)
    rep = tmp_path / "r.json"
    res = run_cli(folder, "--target", "ort", "--static", "-o", tmp_path / "rtdetr.onnx",
                  "--iterations", "0", "--report", rep)
    assert res.code == 1, res.out + res.err
    line = next(t for t in res.out.splitlines() if t.startswith("first divergence"))
    assert line.startswith("first divergence: tie order at TopK ")
    assert f"in model.model ({_topk_call_line()}) — 84 equal values for its 10 places" in line
    assert "after it: model.model.decoder.query_pos_head" in line
    parity = json.loads(rep.read_text())["parity"]
    assert parity["tie_order"]["cause"]
    assert parity["first_divergence"]["torch_module"].startswith(
        "model.model.decoder.query_pos_head")
