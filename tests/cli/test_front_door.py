"""Front-door papercuts of a new user's first commands (issue 43): a GELU written in the
root model's forward named by that forward and its line, a state_dict missing both its
factory and its inputs said in one message, no TensorRT line on an ONNX Runtime export,
"no such file" before any progress line, the INT64_MAX slice end clamped for TensorRT
before 9, the forms plot's title true to its range, and the examples shipped with the
package."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from tests.conftest import ROOT, run_cli

INT64_MAX = np.iinfo(np.int64).max


class RootGelu(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.fc(x), approximate="tanh")  # the site's line


def test_a_gelu_in_the_root_forward_is_named_by_that_forward_and_line() -> None:
    from export_gelu.passes.fx.canonicalize import canonicalize_gelus

    program = torch.export.export(RootGelu().eval(), (torch.randn(2, 8),))
    sites = canonicalize_gelus(program.graph_module)
    lines, first = inspect.getsourcelines(RootGelu.forward)
    line = first + next(i for i, text in enumerate(lines) if "the site's line" in text)
    assert [s.label for s in sites] == [f"RootGelu.forward, {Path(__file__).name}:{line}"]
    assert sites[0].module == ""  # the report's module path stays the module's


def test_a_state_dict_without_factory_or_inputs_says_both_at_once(tmp_path: Path) -> None:
    path = tmp_path / "sd.pt"
    torch.save(RootGelu().state_dict(), path)
    res = run_cli(path, "--target", "ort")
    assert res.code == 2
    line = res.err.strip().splitlines()[-1]
    assert "--model-factory" in line and "--input NAME:SHAPE" in line, line
    res = run_cli(path, "--target", "ort", "--input", "x:2x8")
    assert "--model-factory" in res.err and "--input NAME" not in res.err


def test_an_onnx_runtime_export_prints_no_tensorrt_line(tmp_path: Path) -> None:
    model = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(RootGelu().eval(), (torch.randn(2, 8),)), model)
    ort = run_cli(model, "--target", "ort", "-o", tmp_path / "o.onnx", "--iterations", "2",
                  "--warmup", "0")
    assert ort.code == 0, ort.err
    assert "TensorRT" not in ort.out
    trt = run_cli(model, "--target", "trt8.6", "-o", tmp_path / "t.onnx", "--no-verify")
    assert "TensorRT: engine build and TensorRT parity skipped" in trt.out


@pytest.mark.parametrize("argv", [("{missing}", "--target", "ort"),
                                  ("verify", "{missing}", "{missing}.onnx")])
def test_no_such_file_comes_before_any_progress_line(tmp_path: Path, argv) -> None:
    missing = tmp_path / "absent.pt"
    env = {k: v for k, v in os.environ.items() if k != "EXPORT_GELU_QUIET"}
    proc = subprocess.run([sys.executable, "-m", "export_gelu.cli",
                           *[a.format(missing=missing) for a in argv]],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"export-gelu: error: {proc.stderr.split('error: ', 1)[1].strip()}"]
    assert "no such file" in proc.stderr and "…" not in proc.stderr


def _slice_graph(reader: str) -> onnx.ModelProto:
    """x[:, 2:] written as torch 2.6's dynamo exporter writes it: an INT64_MAX end,
    Cast and Reshape on its way to Slice; `reader` other than Slice reads it too."""
    nodes = [helper.make_node("Constant", [], ["big"], value=helper.make_tensor(
                 "v", TensorProto.INT64, [], [INT64_MAX])),
             helper.make_node("Cast", ["big"], ["big64"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["big64", "one"], ["ends"]),
             helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, None])]
    if reader == "Add":
        nodes.append(helper.make_node("Add", ["big64", "big64"], ["z"]))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.INT64, []))
    inits = [helper.make_tensor("one", TensorProto.INT64, [1], [1]),
             helper.make_tensor("starts", TensorProto.INT64, [1], [2]),
             helper.make_tensor("axes", TensorProto.INT64, [1], [1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, 10])], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_an_int64_max_slice_end_is_clamped_for_tensorrt_before_9() -> None:
    import onnxruntime as ort

    from export_gelu.passes.compat.trt_fixes.apply import fit_restrictions
    from export_gelu.trt_parser.restrictions import find_hits

    model = _slice_graph("Slice")
    assert [h.restriction.key for h in find_hits(model, "8.6")] == ["int64-out-of-int32"]
    x = np.arange(20, dtype=np.float32).reshape(2, 10)
    before = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    notes = fit_restrictions(model, "8.6", "trt8.6")
    assert any("1 INT64 constant(s) outside the INT32 range" in n for n in notes), notes
    assert find_hits(model, "8.6") == []
    after = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(after, before)


def test_an_int64_max_read_as_a_value_is_refused_naming_the_exporter() -> None:
    from export_gelu.errors import TargetUnmetError
    from export_gelu.passes.compat.trt_fixes.apply import fit_restrictions

    with pytest.raises(TargetUnmetError, match=rf"torch {re.escape(torch.__version__)}'s "
                                               r"exporter wrote it .*--static, or a newer torch"):
        fit_restrictions(_slice_graph("Add"), "8.6", "trt8.6")


def test_the_forms_plot_title_says_which_range_it_shows() -> None:
    from export_gelu.report.plots import forms_title

    assert forms_title(None) == "GELU forms over a default range −4…4 (no GELU inputs recorded)"


def test_the_examples_ship_with_the_package_and_run_outside_a_clone(tmp_path: Path) -> None:
    from setuptools import find_packages

    assert "export_gelu.examples" in find_packages(str(ROOT), include=["export_gelu",
                                                                       "export_gelu.*"])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-m", "export_gelu.examples.save_model", "lstm",
                           "--format", "state_dict", "-o", "lstm.pt"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "--model-factory export_gelu.examples.models:lstm" in proc.stdout
    assert (tmp_path / "lstm.pt").is_file()
