"""Target profiles built from the TensorRT parser's tables, how `--target trt` and exact
versions resolve, and the per-target checks the export makes before and after producing a
graph."""

from __future__ import annotations

import json

import onnx
import pytest

from export_gelu.check.runners.trt_runner import local_engine_blocker, trt_unavailable_reason
from export_gelu.parse_check import PLUGIN_OP
from export_gelu.targets import (
    EMITTED_OPS,
    PROFILES,
    TRT_PROFILES,
    installed_tensorrt_version,
    profile_for_trt_version,
    profile_for_version,
    resolve_profile,
    resolve_target,
)
from tests.conftest import note_messages, run_cli

NAMES = [p.name for p in TRT_PROFILES]


def test_the_eleven_trt_profiles_and_their_facts():
    assert NAMES == ["trt7.0", "trt7.1", "trt7.2", "trt8.0", "trt8.2", "trt8.4", "trt8.5",
                     "trt8.6", "trt9", "trt10", "trt11"]
    assert [p.trt_version for p in TRT_PROFILES] == ["7.0", "7.1", "7.2", "8.0", "8.2", "8.4",
                                                     "8.5", "8.6", "9.0", "10.0", "11.0"]
    ceilings = [p.opset_ceiling for p in TRT_PROFILES]
    assert ceilings == [11, 11, 11, 13, 13, 17, 17, 17, 19, 20, 24]
    assert [p.opset_floor for p in TRT_PROFILES] == [7] * 9 + [9, 9]
    assert [n for n in NAMES if PROFILES[n].has_gelu_op] == ["trt10", "trt11"]
    assert [n for n in NAMES if PROFILES[n].supports("LayerNormalization")] == [
        "trt8.6", "trt9", "trt10", "trt11"]
    assert [n for n in NAMES if PROFILES[n].supports("Einsum")][0] == "trt8.2"
    assert [n for n in NAMES if PROFILES[n].plugin_usable] == NAMES[5:-1]  # 8.4 … 10
    assert PROFILES["trt7.0"].gelu_plugin == "unmappable"
    assert {PROFILES[n].gelu_plugin for n in NAMES[1:5]} == {"no_fields"}  # 7.1 … 8.2.0
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


@pytest.mark.parametrize("target,name,version", [("trt8.2.3", "trt8.2.3", "8.2.3"),
                                                 ("trt9.2", "trt9.2", "9.2"),
                                                 ("trt10.13", "trt10.13", "10.13"),
                                                 ("trt11.5", "trt11.5", "11.5"),
                                                 ("trt9.0", "trt9", "9.0"),
                                                 ("trt10.0.0", "trt10", "10.0")])
def test_an_exact_version_is_a_target_of_its_own(target, name, version):
    prof = resolve_profile(target)
    assert (prof.name, prof.trt_version, prof.runtime) == (name, version, "trt")
    assert resolve_target(target) == (prof, target if name == target else f"{target} → {name}")


def test_exact_versions_differ_from_their_line_where_the_parser_does():
    line, exact = PROFILES["trt8.2"], resolve_profile("trt8.2.3")
    assert (line.plugin_usable, exact.plugin_usable) == (False, True)  # creator fields, 8.2.3
    assert line.opset_ceiling == exact.opset_ceiling == 13
    nine, nine_one = PROFILES["trt9"], resolve_profile("trt9.1")
    nine_two = resolve_profile("trt9.2")
    assert [p.supports("CastLike") for p in (nine, nine_one, nine_two)] == [False, True, True]
    assert [p.supports("Hardmax") for p in (nine, nine_one, nine_two)] == [False, False, True]
    ten, ten13, ten15 = PROFILES["trt10"], resolve_profile("trt10.13"), resolve_profile("trt10.15")
    assert [p.opset_ceiling for p in (ten, ten13, ten15)] == [20, 20, 24]
    assert [p.supports("STFT") for p in (ten, ten13, ten15)] == [False, True, True]
    eleven, eleven5 = PROFILES["trt11"], resolve_profile("trt11.5")
    assert (eleven.opset_ceiling, eleven5.opset_ceiling) == (24, 25)
    assert eleven5.precision_api == "strongly_typed" and eleven5.gelu_plugin == "removed"
    assert not eleven.supports("DFT") and resolve_profile("trt11.2").supports("DFT")


@pytest.mark.parametrize("target", ["trt6.0", "trt12", "trt12.0.1", "trt99"])
def test_a_version_outside_the_data_is_bad_input(target, tmp_path):
    res = run_cli(tmp_path / "m.onnx", "--target", target, "-o", tmp_path / "o.onnx")
    assert res.code == 2
    assert f"TensorRT {target[3:]} is outside the versions export-gelu knows (7.0 to 11.x)" \
        in res.err
    res = run_cli("inspect", tmp_path / "m.onnx", "--target", target)
    assert res.code == 2 and "outside the versions export-gelu knows" in res.err


def test_an_op_first_parsed_inside_a_line_exits_3_on_its_first_release(tmp_path):
    """Hardmax: the parser imports it from 9.2, so trt9 (9.0) cannot take it; trt9.2 can."""
    from onnx import TensorProto, helper

    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in "xy"]
    node = helper.make_node("Hardmax", ["x"], ["y"], axis=-1)
    src = tmp_path / "hardmax.onnx"
    onnx.save(helper.make_model(helper.make_graph([node], "g", vi[:1], vi[1:]),
                                opset_imports=[helper.make_opsetid("", 13)]), str(src))
    res = run_cli(src, "--target", "trt9", "-o", tmp_path / "a.onnx", "--iterations", "0")
    assert res.code == 3
    assert "op Hardmax is not parsed by trt9 and export-gelu has no rewrite for it (taken by " \
           "TensorRT 9.2 and newer: trt9.2, trt10, trt11)" in res.err
    assert not (tmp_path / "a.onnx").exists()
    res = run_cli(src, "--target", "trt9.2", "-o", tmp_path / "b.onnx", "--iterations", "0")
    assert res.code == 0, res.err
    assert "Check: trt9.2: parses as is" in res.out
    assert [n.op_type for n in onnx.load(str(tmp_path / "b.onnx")).graph.node] == ["Hardmax"]


def test_target_trt_says_which_profile_it_chose(saved_model, tmp_path):
    prof, note = resolve_target("trt")
    installed = installed_tensorrt_version()
    if installed:
        assert prof == profile_for_version(installed) and installed in note
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
        assert "targets that take it: trt8.2.3 and trt8.4–trt10" in res.err
        assert not (tmp_path / "p.onnx").exists()
    out, rep = tmp_path / "p86.onnx", tmp_path / "r.json"
    res = run_cli(model, "--target", "trt8.6", "--gelu", "plugin", "-o", out, "--report", rep,
                  "--iterations", "0")
    assert res.code == 0, res.err
    nodes = [n for n in onnx.load(str(out)).graph.node if n.op_type == PLUGIN_OP]
    assert len(nodes) == 2
    report = json.loads(rep.read_text())
    assert report["parity"]["status"] == "passed"  # the plugin run as its math in ORT
    assert any(n.startswith(f"{PLUGIN_OP} node(s) of the output ran in ONNX Runtime as the "
                            "plugin's math") for n in note_messages(report))
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
    reason = local_engine_blocker("8.2")  # the target's own version, not a generic "skipped"
    assert reason is not None and "polygraphy supports TensorRT 8.5 and newer only" in reason
    assert (f"TensorRT: engine build and TensorRT parity skipped: {reason}; build and check it "
            "on the device with --bundle DIR") in res.out
    report = json.loads(rep.read_text())
    assert report["trt"] == {"status": "skipped", "reason": reason, "engine_here": False,
                             "device": "build and check it on the device with --bundle DIR"}
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
