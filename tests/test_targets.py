"""Target profiles as data (KNOWLEDGE.md §5), how `--target trt` resolves, and the per-target
checks the export makes before and after producing a graph."""

from __future__ import annotations

import json

import onnx
import pytest

from export_gelu.compat import PLUGIN_OP
from export_gelu.runtime.trt_runner import trt_unavailable_reason
from export_gelu.targets import (
    EMITTED_OPS,
    PROFILES,
    TRT_PROFILES,
    installed_tensorrt_version,
    profile_for_trt_version,
    resolve_target,
)
from tests.conftest import run_cli

NAMES = [p.name for p in TRT_PROFILES]


def test_the_eleven_trt_profiles_and_their_facts():
    assert NAMES == ["trt7.0", "trt7.1", "trt7.2", "trt8.0", "trt8.2", "trt8.4", "trt8.5",
                     "trt8.6", "trt9", "trt10", "trt11"]
    ceilings = [p.opset_ceiling for p in TRT_PROFILES]
    assert ceilings == [11, 11, 11, 13, 13, 17, 17, 17, 19, 20, 24]
    assert [n for n in NAMES if PROFILES[n].has_gelu_op] == ["trt10", "trt11"]
    assert [n for n in NAMES if PROFILES[n].supports("LayerNormalization")] == [
        "trt8.6", "trt9", "trt10", "trt11"]
    assert [n for n in NAMES if PROFILES[n].supports("Einsum")][0] == "trt8.2"
    assert [n for n in NAMES if PROFILES[n].plugin_usable] == NAMES[1:-1]  # 7.1 … 10
    assert PROFILES["trt7.0"].gelu_plugin == "unmappable"
    assert PROFILES["trt11"].gelu_plugin == "removed"
    assert [n for n in NAMES if PROFILES[n].precision_api == "strongly_typed"] == ["trt11"]
    assert [n for n in NAMES if "bf16" in PROFILES[n].precisions] == ["trt9", "trt10", "trt11"]
    for p in TRT_PROFILES:
        assert p.gelu_lowering == ("onnx_gelu" if p.has_gelu_op else "primitives")
        assert p.opset <= min(p.opset_ceiling, 20)


def test_every_op_the_passes_emit_parses_on_every_trt_version():
    for p in TRT_PROFILES:
        assert EMITTED_OPS <= p.ops
        assert all(p.supports(op) for op in EMITTED_OPS)
    assert PROFILES["trt8.0"].supports("IsNaN") is False
    assert PROFILES["trt8.2"].supports("IsNaN") is True


@pytest.mark.parametrize("version,name", [("7.0.0.11", "trt7.0"), ("7.2.3.4", "trt7.2"),
                                          ("8.2.5", "trt8.2"), ("8.3.1", "trt8.2"),
                                          ("8.6.1.6", "trt8.6"), ("9.3.0", "trt9"),
                                          ("10.15.1", "trt10"), ("11.0.0", "trt11")])
def test_installed_tensorrt_version_maps_to_the_newest_profile_not_newer(version, name):
    assert profile_for_trt_version(version).name == name


def test_target_trt_says_which_profile_it_chose(saved_model, tmp_path):
    prof, note = resolve_target("trt")
    installed = installed_tensorrt_version()
    if installed:
        assert prof == profile_for_trt_version(installed) and installed in note
    else:
        assert prof.name == "trt11" and "tensorrt not installed; newest profile" in note
    res = run_cli(saved_model("lstm", "exported"), "--target", "trt", "-o", tmp_path / "o.onnx",
                  "--no-verify")
    assert res.code == 0, res.err
    assert f"→  {note}" in res.out.splitlines()[0]


def test_plugin_only_where_it_ships(saved_model, tmp_path):
    model = saved_model("bert", "exported")
    for target in ("trt7.0", "trt11", "onnx"):
        res = run_cli(model, "--target", target, "--gelu", "plugin", "-o", tmp_path / "p.onnx")
        assert res.code == 3, res.err
        assert "CustomGeluPluginDynamic is not available" in res.err
        assert "trt7.1, trt7.2, trt8.0, trt8.2, trt8.4, trt8.5, trt8.6, trt9, trt10" in res.err
        assert not (tmp_path / "p.onnx").exists()
    out, rep = tmp_path / "p86.onnx", tmp_path / "r.json"
    res = run_cli(model, "--target", "trt8.6", "--gelu", "plugin", "-o", out, "--report", rep,
                  "--iterations", "0")
    assert res.code == 0, res.err
    nodes = [n for n in onnx.load(str(out)).graph.node if n.op_type == PLUGIN_OP]
    assert len(nodes) == 2
    report = json.loads(rep.read_text())
    assert report["parity"]["status"] == "skipped" and PLUGIN_OP in report["parity"]["reason"]
    assert report["compatibility"] == {"trt8.6": []}


def test_precision_and_opset_the_target_cannot_take_exit_3(saved_model, tmp_path):
    model = saved_model("lstm", "exported")
    res = run_cli(model, "--target", "trt8.6", "--precision", "bf16", "-o", tmp_path / "a.onnx")
    assert res.code == 3 and "trt8.6 does not take bf16" in res.err
    res = run_cli(model, "--target", "trt8.2", "--opset", "14", "-o", tmp_path / "b.onnx")
    assert res.code == 3 and "ceiling 13" in res.err
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(trt_unavailable_reason() is None, reason="TensorRT is usable here")
def test_without_tensorrt_the_engine_is_skipped_with_the_reason(saved_model, tmp_path):
    model = saved_model("gpt2", "exported")
    out, rep = tmp_path / "g.onnx", tmp_path / "r.json"
    res = run_cli(model, "--target", "trt8.2", "-o", out, "--report", rep, "--iterations", "0",
                  "--engine", tmp_path / "g.plan")
    assert res.code == 0, res.err
    from export_gelu.trt_parser.capability import local_engine_blocker

    reason = local_engine_blocker("8.2")  # polygraphy cannot drive 8.2; points to --bundle
    assert "--bundle DIR" in reason
    assert f"TensorRT: engine build and TensorRT parity skipped: {reason}" in res.out
    report = json.loads(rep.read_text())
    assert report["trt"] == {"status": "skipped", "reason": reason}
    assert report["parity"]["status"] == "passed"  # checked in ONNX Runtime instead
    assert not (tmp_path / "g.plan").exists()

    res = run_cli(model, "--target", "trt8.2", "-o", tmp_path / "h.onnx", "--require-trt")
    assert res.code == 3
    assert res.err.strip() == f"export-gelu: error: --require-trt: TensorRT engine build " \
                              f"impossible here: {trt_unavailable_reason()}"
    assert not (tmp_path / "h.onnx").exists()


def test_onnx_target_report_says_trt_not_applicable(saved_model, tmp_path):
    rep = tmp_path / "r.json"
    res = run_cli(saved_model("lstm", "exported"), "--target", "onnx", "-o", tmp_path / "o.onnx",
                  "--no-verify", "--report", rep)
    assert res.code == 0, res.err
    assert json.loads(rep.read_text())["trt"] == {"status": "skipped",
                                                  "reason": "target onnx is not TensorRT"}
