"""An ONNX input is parsed once per run (export_gelu/onnx_file.py), with or without the
parity check: counted on real CLI runs by wrapping onnx's parser (the wrapper calls through,
so the runs are the real ones). The parses are the run's, handed along in its request, not
the process's: a second run parses again, and nothing is kept after a run."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from export_gelu import onnx_file
from export_gelu.cli import main


def _bert_like(path: Path) -> Path:
    """MatMul → Gelu → MatMul with LayerNormalization at opset 20: enough for trt8.2 to
    down-convert, expand and rewrite (every stage that used to reparse the file)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 8), dtype=np.float32), n)
             for n in ("w0", "w1")]
    inits += [numpy_helper.from_array(np.ones(8, np.float32), "g"),
              numpy_helper.from_array(np.zeros(8, np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h"], name="mm0"),
             helper.make_node("Gelu", ["h"], ["a"], name="gelu"),
             helper.make_node("LayerNormalization", ["a", "g", "b"], ["n"], name="ln", axis=-1),
             helper.make_node("MatMul", ["n", "w1"], ["y"], name="mm1")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [2, 8])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), path)
    return path


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Which file each whole-model parse read (shape inference's in-memory round trips are
    not file parses and are not counted)."""
    counted: Counter[str] = Counter()
    real = onnx.load_model

    def load_model(f, *args, **kwargs):  # type: ignore[no-untyped-def]
        name = f if isinstance(f, (str, os.PathLike)) else getattr(f, "name", "<bytes>")
        counted[Path(os.fsdecode(name)).name] += 1
        return real(f, *args, **kwargs)

    monkeypatch.setattr(onnx, "load_model", load_model)
    monkeypatch.setattr(onnx, "load", load_model)
    return counted


@pytest.mark.parametrize("target", ["trt8.2", "onnx"])
def test_no_verify_export_parses_the_input_once(parses, tmp_path, target):
    model = _bert_like(tmp_path / "in.onnx")
    out = tmp_path / "out.onnx"
    assert main([str(model), "--target", target, "-o", str(out), "--no-verify"]) == 0
    assert parses == Counter({"in.onnx": 1}), parses
    assert out.is_file()


def test_verified_export_parses_the_input_once_too(parses, tmp_path):
    """The parity check runs both graphs in ONNX Runtime (which reads the files itself);
    what it needs from the input (its output names) comes from the same one parse."""
    model = _bert_like(tmp_path / "in.onnx")
    out = tmp_path / "out.onnx"
    assert main([str(model), "--target", "trt8.2", "-o", str(out)]) == 0
    assert parses == Counter({"in.onnx": 1}), parses


def test_each_run_parses_for_itself(parses, tmp_path):
    """Two runs over one file parse it once each: the parse went with the first run."""
    model = _bert_like(tmp_path / "in.onnx")
    for out in ("a.onnx", "b.onnx"):
        assert main([str(model), "--target", "onnx", "-o", str(tmp_path / out),
                     "--no-verify"]) == 0
    assert parses == Counter({"in.onnx": 2}), parses


def test_a_changed_file_is_parsed_again_and_copies_are_private(tmp_path):
    path = _bert_like(tmp_path / "m.onnx")
    with onnx_file.parsing_once(onnx_file.ParsedFiles()) as files:
        first = onnx_file.read_structure(path)
        assert onnx_file.read_structure(path) is first and len(files) == 1
        mine = onnx_file.copy_structure(path)
        mine.graph.node.pop()
        assert len(onnx_file.read_structure(path).graph.node) == 4
        model = onnx.load(path)
        model.graph.node.pop()
        onnx.save(model, tmp_path / "new.onnx")
        os.replace(tmp_path / "new.onnx", path)  # as every atomic writer does: a new inode
        again = onnx_file.read_structure(path)
        assert again is not first and len(again.graph.node) == 3
    outside = onnx_file.read_structure(path)  # no run: parsed, and not kept
    assert outside is not again and onnx_file.read_structure(path) is not outside
