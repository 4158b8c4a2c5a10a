"""`export-gelu MODEL --precision int8|fp8`: the export flow's quantization step, end to end on
the bundled BERT (an ExportedProgram, as users save it): the issue's "Done when" numbers per
target, the refusals, the bundle's cache and flags, calibration data, auto keep, the API."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from export_gelu.quantize import plan_quantization, read_calibration_cache
from export_gelu.quantize.read_qdq import QDQ_OPS
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def bert(saved_model) -> Path:
    return saved_model("bert", "exported")


def _export(bert: Path, tmp_path: Path, *flags: str) -> tuple[int, str, dict, onnx.ModelProto]:
    out, rep = tmp_path / "out.onnx", tmp_path / "r.json"
    res = run_cli(bert, *flags, "-o", out, "--report", rep, "-q")
    if res.code not in (0, 1):
        return res.code, res.err, {}, onnx.ModelProto()
    return res.code, res.out, json.loads(rep.read_text()), onnx.load(str(out))


def _qdq_in_gelu(model: onnx.ModelProto) -> int:
    plan = plan_quantization(model, "int8")  # finds the GELU sites of the written graph
    return sum(1 for n in model.graph.node
               if n.op_type in QDQ_OPS and n.input[0] in plan.gelu_tensors)


def test_trt86_int8_with_calibration_data(bert: Path, tmp_path: Path) -> None:
    """trt8.6 int8 from a calibration JSON: exit 0, every weight product quantized, no Q/DQ
    in a GELU, parses for 8.6 (`inspect`), SQNR >= 30 dB, the verdict passed."""
    from export_gelu.check.inputs.saved_data import save_polygraphy_inputs

    rng = np.random.default_rng(0)
    calib = tmp_path / "calib.json"
    save_polygraphy_inputs([{"x": rng.integers(0, 1000, (2, 16)).astype(np.int64)}
                            for _ in range(8)], calib)
    code, out, rep, model = _export(bert, tmp_path, "--target", "trt8.6", "--precision",
                                    "int8", "--calibration-data", calib)
    assert code == 0, out
    q = rep["quantization"]
    assert q["real_data"] and q["calibration_feeds"] == 6 and q["judged_feeds"] == 2
    assert q["products_quantized"] / q["weight_products"] >= 0.9 and q["weight_products"] == 12
    assert q["qdq_inside_gelu"] == 0 and _qdq_in_gelu(model) == 0
    assert q["passed"] is True and q["outputs"]["output_0"]["sqnr_db"] >= 30.0
    assert rep["precision"] == "int8" and rep["compatibility"] == {"trt8.6": []}
    assert "INT8 verdict: PASSED" in out
    res = run_cli("inspect", tmp_path / "out.onnx", "--target", "trt8.6", "--no-dry-run")
    assert res.code == 0 and "trt8.6" in res.out


def test_calibration_data_naming_other_inputs_is_refused(bert: Path, tmp_path: Path) -> None:
    """Calibration feeds that name other inputs than the model's are the user's mistake:
    exit 2 naming what is missing and what is not taken, and nothing written."""
    from export_gelu.check.inputs.saved_data import save_polygraphy_inputs

    calib = tmp_path / "calib.json"
    save_polygraphy_inputs([{"input_ids": np.zeros((2, 16), np.int64)}] * 4, calib)
    code, err, _, _ = _export(bert, tmp_path, "--target", "trt8.6", "--precision", "int8",
                              "--calibration-data", calib)
    assert code == 2, err
    assert "--calibration-data" in err and "missing x" in err and "not taken: input_ids" in err
    assert not (tmp_path / "out.onnx").exists()


def test_trt82_int8_is_opset_13(bert: Path, tmp_path: Path) -> None:
    code, out, rep, model = _export(bert, tmp_path, "--target", "trt8.2", "--precision", "int8")
    assert code == 0, out
    assert model.opset_import[0].version <= 13
    assert sum(n.op_type == "DequantizeLinear" for n in model.graph.node) == 24
    assert "indicative" in " ".join(n["message"] for n in rep["notes"])


def test_trt70_int8_bundle_holds_the_cache(bert: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "B"
    code, out, rep, model = _export(bert, tmp_path, "--target", "trt7.0", "--precision",
                                    "int8", "--bundle", bundle)
    assert code == 0, out
    assert not any(n.op_type in QDQ_OPS for n in model.graph.node)  # the fp32 graph
    header, scales = read_calibration_cache((bundle / "calibration.cache").read_text())
    assert header == "TRT-7000-EntropyCalibration2"
    names = {t for n in model.graph.node for t in n.output} | {i.name for i in model.graph.input}
    assert scales and set(scales) <= names
    script = (bundle / "run_on_device.sh").read_text()
    assert "--int8" in script and "--calib=calibration.cache" in script
    assert rep["quantization"]["route"] == "calibration_cache"
    assert rep["quantization"]["passed"] is True


def test_trt10_fp8_bundle(bert: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "B"
    code, out, rep, model = _export(bert, tmp_path, "--target", "trt10", "--precision", "fp8",
                                    "--bundle", bundle)
    assert code == 0, out
    assert model.opset_import[0].version >= 19
    types = {i.name: i.data_type for i in model.graph.initializer}
    zero_points = {types[n.input[2]] for n in model.graph.node if n.op_type in QDQ_OPS}
    assert zero_points == {TensorProto.FLOAT8E4M3FN}
    assert "--fp8" in (bundle / "run_on_device.sh").read_text()
    assert json.loads((bundle / "manifest.json").read_text())["precision"] == "fp8"


@pytest.mark.parametrize(("target", "flags", "code", "words"), [
    ("trt8.2", ("--precision", "fp8"), 3, ("fp8", "8.2")),
    ("trt7.0", ("--precision", "fp8"), 3, ("fp8", "7.0")),
    ("trt8.6", ("--calibrator", "entropy"), 2, ("--precision int8",)),
    ("trt8.6", ("--precision", "int8", "--target-sqnr", "40"), 2, ("--keep-precision auto",)),
    ("trt8.6", ("--precision", "int8", "--engine", "x.plan"), 2, ("--engine",)),
])
def test_refusals(bert: Path, tmp_path: Path, target: str, flags: tuple[str, ...], code: int,
                  words: tuple[str, ...]) -> None:
    res = run_cli(bert, "--target", target, *flags, "-o", tmp_path / "o.onnx", "-q")
    assert res.code == code, res.err
    assert all(w in res.err for w in words) and "Traceback" not in res.err
    assert not (tmp_path / "o.onnx").exists()


def test_ort_int8_and_keep(bert: Path, tmp_path: Path) -> None:
    """--target ort writes 7-bit pre-quantized weights; --keep-precision keeps a module's
    products in float and the report lists it with its sensitivity."""
    kept = "model.encoder.layer.0.output.dense"
    code, out, rep, model = _export(bert, tmp_path, "--target", "ort", "--precision", "int8",
                                    "--keep-precision", kept)
    assert code == 0, out
    q = rep["quantization"]
    assert q["products_quantized"] == 11 and [k["module"] for k in q["kept"]] == [kept]
    assert q["kept"][0]["sqnr_db"] > 30 and len(q["sensitivity"]) == 12
    weights = [onnx.numpy_helper.to_array(i) for i in model.graph.initializer
               if i.data_type == TensorProto.INT8 and len(i.dims) == 2]
    assert len(weights) == 11 and max(int(np.abs(w).max()) for w in weights) <= 63


def test_api_fp8_trt9(tmp_path: Path) -> None:
    import torch

    import export_gelu
    from examples import models

    module = models.build("bert")
    x = torch.randint(0, 1000, (2, 16))
    report = export_gelu.export(module, args=(x,), target="trt9", precision="fp8",
                                output=tmp_path / "b.onnx", calibrator="percentile")
    assert report.exit_code == 0 and report.quantization is not None
    assert report.quantization.calibrator == "percentile" and report.quantization.passed
    assert report.opset == 19


def test_auto_keep_reaches_the_target(bert: Path, tmp_path: Path) -> None:
    """A target the full INT8 graph misses: auto keeps modules until it is met, and says so
    (the outlier-layer model's exact choice: tests/quantize/test_sensitivity.py)."""
    code, out, rep, _ = _export(bert, tmp_path, "--target", "trt8.6", "--precision", "int8",
                                "--keep-precision", "auto", "--target-sqnr", "70")
    assert code == 0, out
    q = rep["quantization"]
    assert q["auto"]["met"] and q["auto"]["sqnr_db"] >= 70 and q["kept"]
    assert q["products_quantized"] < 12 and "auto keep: target 70 dB met" in out
