"""`export-gelu MODEL.onnx`: existing ONNX files rewritten through the CLI, verified against the
input file in ONNX Runtime; torch inputs keep their fx site list, with what each site became."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import onnx
import pytest

from tests.conftest import note_messages, run_cli

WIDTH = 64


def _mlp(approximate: str):
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(approximate=approximate),
                         nn.Linear(4 * WIDTH, WIDTH)).eval()


@pytest.fixture(scope="module")
def onnx_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Linear→GELU→Linear as ONNX files: dynamo opset 18 (tanh, erf) and 20 (erf),
    TorchScript 13 fp16."""
    import torch

    from export_gelu.exporter.onnx_export.to_onnx import quiet_exporter

    d = tmp_path_factory.mktemp("onnx_in")
    x = torch.randn(2, 8, WIDTH)
    files = {}
    with quiet_exporter():
        for approx in ("tanh", "none"):
            files[f"dynamo18-{approx}"] = d / f"dynamo18-{approx}.onnx"
            torch.onnx.export(_mlp(approx), (x,), str(files[f"dynamo18-{approx}"]),
                              dynamo=True, opset_version=18, input_names=["x"])
        files["dynamo20-none"] = d / "dynamo20-none.onnx"
        torch.onnx.export(_mlp("none"), (x,), str(files["dynamo20-none"]),
                          dynamo=True, opset_version=20, input_names=["x"])
        files["ts13-fp16"] = d / "ts13-fp16.onnx"
        torch.onnx.export(_mlp("tanh").half(), (x.half(),), str(files["ts13-fp16"]),
                          dynamo=False, opset_version=13, input_names=["x"])
    return files


def _export(src: Path, tmp: Path, *flags: str) -> tuple[int, dict, onnx.ModelProto | None, str]:
    out, rep = tmp / "out.onnx", tmp / "r.json"
    res = run_cli(src, "-o", out, "--report", rep, "--iterations", "0", *flags)
    report = json.loads(rep.read_text()) if rep.exists() else {}
    model = onnx.load(str(out)) if out.exists() else None
    return res.code, report, model, res.err + res.out


def _ops(model: onnx.ModelProto) -> Counter[str]:
    return Counter(f"{n.domain}.{n.op_type}" if n.domain else n.op_type for n in model.graph.node)


def test_onnx_input_for_ort_fuses_the_dynamo_tanh_shape(onnx_files, tmp_path):
    code, report, model, text = _export(onnx_files["dynamo18-tanh"], tmp_path,
                                        "--target", "ort")
    assert code == 0, text
    (site,) = report["gelu_sites"]
    assert site["kind"] == "tanh" and site["level"] == "onnx"
    assert "as exported by dynamo 18/19" in site["source"]
    assert site["action"].startswith("rewritten to com.microsoft.FastGelu")
    assert "bias Add node_linear left for ONNX Runtime's MatMul+Add→Gemm fusion" in site["action"]
    assert len(site["onnx_nodes"]) == 8 and len(site["emitted"]) == 1  # the 8 GELU nodes
    assert report["parity"]["status"] == "passed"
    assert report["parity"]["runners"] == ["input-onnx", "onnxruntime"]
    ops = _ops(model)
    assert ops["com.microsoft.FastGelu"] == 1 and not {"Pow", "Tanh"} & set(ops)
    assert site["module"] == "1"  # nn.Sequential's GELU, from the dynamo exporter's scopes
    assert "rewritten to com.microsoft.FastGelu" in text  # the summary says what it became


@pytest.mark.parametrize("form,new_kind,error", [("erf", "exact", 4.73e-4),
                                                 ("sigmoid", "quick", 2.07e-2)])
def test_onnx_input_kind_change_is_stated(onnx_files, tmp_path, form, new_kind, error):
    code, report, model, text = _export(onnx_files["dynamo18-tanh"], tmp_path,
                                        "--target", "trt8.6", "--gelu", form)
    assert code == 0, text
    (site,) = report["gelu_sites"]
    assert f"tanh → {new_kind}" in site["action"]
    assert site["added_max_error"] == pytest.approx(error)
    assert report["parity"]["status"] == "passed"
    assert report["opset"] <= 17 and _ops(model)["Tanh"] == 0


def test_onnx_input_keep_on_trt_keeps_tanh_without_pow(onnx_files, tmp_path):
    code, report, model, text = _export(onnx_files["dynamo18-tanh"], tmp_path,
                                        "--target", "trt8.6")
    assert code == 0, text
    (site,) = report["gelu_sites"]
    assert site["added_max_error"] == 0.0 and "tanh primitives" in site["action"]
    ops = _ops(model)
    assert ops["Tanh"] == 1 and ops["Pow"] == 0
    assert report["parity"]["status"] == "passed"


def test_onnx_input_plugin(onnx_files, tmp_path):
    code, report, model, text = _export(onnx_files["dynamo18-none"], tmp_path,
                                        "--target", "trt8.6", "--gelu", "plugin")
    assert code == 0, text
    (site,) = report["gelu_sites"]
    assert site["kind"] == "exact" and "computes the tanh form" in site["action"]
    assert site["added_max_error"] == pytest.approx(4.73e-4)
    (node,) = [n for n in model.graph.node if n.op_type == "CustomGeluPluginDynamic"]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["type_id"] == 0 and list(attrs["bias"].dims) == [1, 1, 4 * WIDTH]
    assert report["parity"]["status"] == "passed"  # the plugin run as its math in ORT


def test_plugin_on_a_target_without_it_exits_3(onnx_files, tmp_path):
    code, _report, model, text = _export(onnx_files["dynamo18-none"], tmp_path,
                                         "--target", "trt11", "--gelu", "plugin")
    assert code == 3 and model is None
    assert "CustomGeluPluginDynamic" in text


def test_fp16_onnx_input_gets_the_fp16_safe_form(onnx_files, tmp_path):
    code, report, model, text = _export(onnx_files["ts13-fp16"], tmp_path,
                                        "--target", "trt8.2", "--precision", "fp16")
    assert code == 0, text
    (site,) = report["gelu_sites"]
    assert "as exported by torchscript 13/17" in site["source"]
    assert "fp16-safe" in site["action"]
    ops = _ops(model)
    assert ops["Pow"] == 0 and ops["Clip"] == 1 and ops["Tanh"] == 1
    assert report["parity"]["status"] == "passed"


@pytest.mark.parametrize("target,fused", [("ort", "com.microsoft.FastGelu"),
                                          ("trt8.6", "Tanh")])
def test_torch_input_keeps_fx_module_paths(saved_model, tmp_path, target, fused):
    code, report, model, text = _export(saved_model("gpt2", "exported"), tmp_path,
                                        "--target", target)
    assert code == 0, text
    sites = report["gelu_sites"]
    assert [s["module"] for s in sites] == ["model.h.0.mlp.act", "model.h.1.mlp.act"]
    assert all(s["level"] == "fx" and "; exported as " in s["action"] for s in sites)
    assert all(s["onnx_nodes"] for s in sites)
    assert _ops(model)[fused] == 2
    assert report["parity"]["status"] == "passed"


@pytest.mark.parametrize("target", ["onnx", "ort"])
def test_opset_on_an_onnx_input_converts_it_down(onnx_files, tmp_path, target):
    code, report, model, text = _export(onnx_files["dynamo20-none"], tmp_path,
                                        "--target", target, "--opset", "17")
    assert code == 0, text
    assert report["opset"] == 17 and model is not None
    assert next(i.version for i in model.opset_import if i.domain in ("", "ai.onnx")) == 17
    ops = _ops(model)
    assert ops["Gelu"] == 0
    assert ops["Erf" if target == "onnx" else "com.microsoft.Gelu"] == 1
    assert "--opset 17: the opset-20 input converted down to opset 17" in note_messages(report)
    assert report["parity"]["status"] == "passed"


def test_opset_above_an_onnx_input_converts_it_up(onnx_files, tmp_path):
    code, report, model, text = _export(onnx_files["dynamo18-none"], tmp_path,
                                        "--target", "onnx", "--opset", "20")
    assert code == 0, text
    assert report["opset"] == 20 and _ops(model)["Gelu"] == 1
    assert any(n.startswith("the opset-18 input converted up to opset 20 (--opset 20)")
               for n in note_messages(report))
    assert report["parity"]["status"] == "passed"
