"""fp16 overflow fixed by fp32 islands: a model whose activations exceed fp16's range at one
site (x·x of a hand-written RMS norm fed by a loud Linear) is exported in fp16; the site is
found from the graph's own values, kept in fp32 with Casts at its edges, the graph verified
again, and the island listed in the report."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from export_gelu.passes.compat.precision.fp16_islands import FP16_MAX, overflow_sites
from tests.conftest import note_codes, run_cli


class RmsNorm(nn.Module):
    """An RMS norm written out: its x·x overflows fp16 when |x| > 256."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5)


class Loud(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.norm, self.act, self.fc2 = nn.Linear(8, 32), RmsNorm(), nn.GELU(), \
            nn.Linear(32, 4)
        with torch.no_grad():
            self.fc1.weight.mul_(400.0)  # activations in the hundreds: x·x up to ~2e5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.norm(self.fc1(x))))


def _fp16_types(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    return {v.name: v.type.tensor_type.elem_type for v in [*g.value_info, *g.output]}


def test_an_fp16_overflow_is_kept_in_fp32_and_verified_again(tmp_path):
    pt2, out, rep_path = tmp_path / "loud.pt2", tmp_path / "loud16.onnx", tmp_path / "r.json"
    torch.export.save(torch.export.export(Loud().eval(), (torch.randn(2, 8),)), str(pt2))
    res = run_cli(pt2, "--target", "trt8.6", "--precision", "fp16", "-o", out,
                  "--iterations", "0", "--report", rep_path, "--bundle", tmp_path / "bundle")
    assert res.code == 0, res.out + res.err
    rep = json.loads(rep_path.read_text())
    islands = rep["parity"]["islands"]
    assert len(islands) == 1 and islands[0]["op_type"] == "Mul"
    assert islands[0]["max_abs"] > FP16_MAX and "/ReduceMean" in islands[0]["nodes"]
    assert rep["parity"]["status"] == "passed" and "fp16-islands" in note_codes(rep)
    assert "verified again" in res.out
    # the written graph: the site and its reader compute in fp32, nothing fp16 overflows
    fixed = onnx.load(str(out))
    feed = {"x": np.random.default_rng(0).standard_normal((2, 8)).astype(np.float16)}
    types = _fp16_types(fixed)
    still = [name for name, _top in overflow_sites(fixed, feed)
             if types.get(name) == onnx.TensorProto.FLOAT16]
    assert still == []
    assert types[islands[0]["tensor"] + "_fp32"] == onnx.TensorProto.FLOAT
    # TensorRT 8.6 builds weakly typed: the bundle pins the island's layers to fp32
    script = (tmp_path / "bundle" / "run_on_device.sh").read_text()
    assert "--precisionConstraints=obey" in script
    assert "--layerPrecisions=/Mul:fp32,/ReduceMean:fp32" in script
    casts = [n for n in fixed.graph.node if n.op_type == "Cast"]
    assert {a.i for n in casts for a in n.attribute if a.name == "to"} == {
        onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16}


def test_an_fp16_export_without_overflow_has_no_islands(tmp_path):
    class Quiet(Loud):
        def __init__(self) -> None:
            super().__init__()
            with torch.no_grad():
                self.fc1.weight.div_(400.0)

    pt2, rep_path = tmp_path / "quiet.pt2", tmp_path / "r.json"
    torch.export.save(torch.export.export(Quiet().eval(), (torch.randn(2, 8),)), str(pt2))
    res = run_cli(pt2, "--target", "trt8.6", "--precision", "fp16", "-o", tmp_path / "q.onnx",
                  "--iterations", "0", "--report", rep_path)
    assert res.code == 0, res.out + res.err
    assert json.loads(rep_path.read_text())["parity"]["islands"] is None


@pytest.mark.parametrize("version, expected", [
    ("8.2", []),  # its trtexec has no --layerPrecisions: the graph's Casts stand alone
    ("8.6", ["--precisionConstraints=obey", "--layerPrecisions=/Mul:fp32,/ReduceMean:fp32"]),
    ("10.0", ["--precisionConstraints=obey", "--layerPrecisions=/Mul:fp32,/ReduceMean:fp32"]),
    ("11.0", []),  # strongly typed: the Casts decide
])
def test_island_flags_only_where_trtexec_parses_them(version, expected):
    from export_gelu.device.script import check_flags, island_flags

    flags = island_flags(version, "fp16", ["/Mul", "/ReduceMean"])
    assert flags == expected
    check_flags(flags, version)  # every flag is in that version's table
    assert island_flags(version, "fp32", ["/Mul"]) == []


def test_a_mask_bias_into_softmax_is_not_a_site():
    """scores + (−65504) overflows fp16 by a little on its way to Softmax, where −inf gives
    the same 0: not an island. x·x of the same scores beyond 65504 is one."""
    from onnx import TensorProto as T
    from onnx import helper as h

    graph = h.make_graph(
        [h.make_node("Add", ["s", "m"], ["biased"]), h.make_node("Softmax", ["biased"], ["y"]),
         h.make_node("Mul", ["s", "s"], ["sq"])], "g",
        [h.make_tensor_value_info(n, T.FLOAT16, [2, 4]) for n in ("s", "m")],
        [h.make_tensor_value_info(n, T.FLOAT16, [2, 4]) for n in ("y", "sq")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    feed = {"s": np.array([[-30, 1, 2, 300]] * 2, np.float16),
            "m": np.array([[-65504, 0, 0, 0]] * 2, np.float16)}
    assert overflow_sites(model, feed) == [("sq", 90000.0)]
