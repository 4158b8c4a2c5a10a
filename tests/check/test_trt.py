"""TensorRT engines built from export-gelu's graphs, run against PyTorch.

Marked `trt`: `make test-gpu` (pytest -m trt) runs them where tensorrt and a CUDA GPU exist;
elsewhere each is collected and skipped with the reason (`pytest -rs` prints it). The
`--dynamic` checks at the end need no GPU and run everywhere.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from examples.models import EXAMPLES
from export_gelu import export
from export_gelu.check.runners.trt_runner import trt_unavailable_reason
from export_gelu.targets import (
    TRT_PROFILES,
    installed_tensorrt_version,
    profile_for_trt_version,
    resolve_target,
)
from export_gelu.trt_parser.versions import version_key
from tests.conftest import run_cli

WHY_NOT = trt_unavailable_reason()
needs_trt = pytest.mark.skipif(WHY_NOT is not None,
                               reason=f"needs tensorrt and a CUDA GPU: {WHY_NOT}")


def installed():
    """The profile of exactly the installed TensorRT (what `--target trt` resolves to)."""
    version = installed_tensorrt_version()
    return resolve_target("trt")[0] if version else profile_for_trt_version("0")


@pytest.mark.trt
@needs_trt
@pytest.mark.parametrize("example", ["bert", "gpt2", "vit"])
def test_engine_for_the_installed_tensorrt_matches_pytorch(example, saved_model, tmp_path):
    plan = tmp_path / f"{example}.plan"
    rep = export(saved_model(example, "exported"), target="trt", output=tmp_path / "m.onnx",
                 engine=plan, iterations=5, warmup=1)
    assert rep.trt["status"] == "built", rep.trt
    assert rep.trt["tensorrt"] == installed().trt_version
    assert plan.is_file() and plan.stat().st_size > 0
    assert rep.trt["parity"]["status"] == "passed", rep.trt["parity"]
    for stats in rep.trt["parity"]["outputs"].values():
        assert stats["max_abs"] < 1e-3
    assert rep.latency["tensorrt"].median_ms > 0
    assert rep.exit_code == 0


@pytest.mark.trt
@needs_trt
@pytest.mark.parametrize("profile", TRT_PROFILES, ids=lambda p: p.name)
def test_graph_for_each_older_profile_builds_on_the_installed_tensorrt(profile, saved_model,
                                                                      tmp_path):
    """A graph fitted to an older TensorRT still parses, builds and matches on a newer one."""
    newest = installed()
    if version_key(profile.trt_version) > version_key(newest.trt_version):
        pytest.skip(f"{profile.name} is newer than the installed TensorRT ({newest.name})")
    rep = export(saved_model("gpt2", "exported"), target=profile.name,
                 output=tmp_path / "g.onnx", iterations=0)
    assert rep.trt["status"] == "built"
    assert rep.trt["parity"]["status"] == "passed", rep.trt["parity"]


@pytest.mark.trt
@needs_trt
def test_fp16_engine_for_gpt2_stays_within_fp16_tolerance(saved_model, tmp_path):
    rep = export(saved_model("gpt2", "exported"), target="trt", precision="fp16",
                 output=tmp_path / "g16.onnx", iterations=0)
    assert rep.trt["status"] == "built"
    parity = rep.trt["parity"]
    assert parity["status"] == "passed", parity
    assert all(o["nonfinite"] == 0 for o in parity["outputs"].values())


@pytest.mark.trt
@needs_trt
def test_plugin_engine_where_the_installed_tensorrt_ships_it(saved_model, tmp_path):
    if not installed().plugin_usable:
        pytest.skip(f"the installed TensorRT ({installed().name}) has no GELU plugin")
    out = tmp_path / "p.onnx"
    rep = export(saved_model("bert", "exported"), target=installed().name, gelu="plugin",
                 output=out, iterations=0)
    assert sum(n.op_type == "CustomGeluPluginDynamic" for n in onnx.load(str(out)).graph.node) \
        == EXAMPLES["bert"].gelu_sites
    assert rep.trt["status"] == "built"
    assert rep.trt["parity"]["status"] == "passed", rep.trt["parity"]  # tanh-widened tolerance


def dynamic_batch_model(path) -> None:
    """x[batch, 16] → MatMul → exact GELU (erf primitives) → y, with a symbolic batch axis."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w")
    consts = [numpy_helper.from_array(np.array(v, np.float32), n)
              for n, v in (("sqrt2", 2 ** 0.5), ("one", 1.0), ("half", 0.5))]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Div", ["h", "sqrt2"], ["d"], name="div"),
             helper.make_node("Erf", ["d"], ["e"], name="erf"),
             helper.make_node("Add", ["e", "one"], ["a"], name="add"),
             helper.make_node("Mul", ["h", "a"], ["m"], name="mul"),
             helper.make_node("Mul", ["m", "half"], ["y"], name="mul_half")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 32])
    model = helper.make_model(helper.make_graph(nodes, "dyn", [x], [y], [w, *consts]),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))


@pytest.mark.trt
@needs_trt
def test_dynamic_batch_engine_runs_every_batch_in_its_range(tmp_path):
    from export_gelu.check.runners.trt_runner import engine_runner_from_path

    src, plan = tmp_path / "dyn.onnx", tmp_path / "dyn.plan"
    dynamic_batch_model(src)
    rep = tmp_path / "r.json"
    res = run_cli(src, "--target", "trt", "--input", "x:4x16", "--dynamic", "x:0=1:4:8",
                  "--engine", plan, "-o", tmp_path / "out.onnx", "--report", rep,
                  "--iterations", "0")
    assert res.code == 0, res.err + res.out
    assert json.loads(rep.read_text())["trt"]["status"] == "built"
    import onnxruntime as ort

    sess = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    with engine_runner_from_path(plan) as runner:
        for batch in (1, 3, 8):
            x = np.random.default_rng(batch).standard_normal((batch, 16)).astype(np.float32)
            got = runner.infer({"x": x})["y"]
            np.testing.assert_allclose(got, sess.run(None, {"x": x})[0], rtol=1e-3, atol=1e-4)


# -- without a GPU: --dynamic is checked against the graph before anything is built ----------

def test_dynamic_on_a_dynamic_axis_is_accepted(tmp_path):
    src = tmp_path / "dyn.onnx"
    dynamic_batch_model(src)
    res = run_cli(src, "--target", "trt8.6", "--input", "x:4x16", "--dynamic", "x:0=1:4:8",
                  "-o", tmp_path / "o.onnx", "--iterations", "0")
    assert res.code == 0, res.err
    assert onnx.load(str(tmp_path / "o.onnx")).graph.input[0].type.tensor_type.shape.dim[0] \
        .dim_param == "batch"


@pytest.mark.parametrize("spec,message", [
    ("x:1=8:16:32", "axis 1 of 'x' is static (16)"),
    ("y:0=1:4:8", "the graph has no input 'y'"),
    ("x:0=8:9:12", "the parity input has 4 there, outside [8, 12]"),
    ("x:0=4:2:8", "need 0 < MIN <= OPT <= MAX"),
])
def test_dynamic_ranges_the_graph_cannot_honour_exit_2(spec, message, tmp_path):
    src = tmp_path / "dyn.onnx"
    dynamic_batch_model(src)
    res = run_cli(src, "--target", "trt8.6", "--input", "x:4x16", "--dynamic", spec,
                  "-o", tmp_path / "o.onnx")
    assert res.code == 2, res.err
    assert message in res.err
    assert not (tmp_path / "o.onnx").exists()
