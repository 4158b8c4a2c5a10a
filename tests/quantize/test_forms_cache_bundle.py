"""A bundle of every GELU form at int8 for TensorRT 7.x (`--gelu auto --precision int8
--bundle DIR --target trt7.0`): each form's fp32 graph with its own calibration cache (the
scales of that graph's tensors), a trtexec line per form reading its cache (`--int8
--calib=`), each cache's sha256 in the manifest; on the device's return every form judged by
the INT8 verdict of its cache's simulation, as the single-form 7.x bundle is
(tests/quantize/test_forms_and_cache.py)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import onnx
import pytest

from export_gelu.device.outputs import read_trtexec_outputs
from export_gelu.quantize import read_calibration_cache
from export_gelu.quantize.read_qdq import QDQ_OPS
from tests.conftest import run_cli
from tests.device.conftest import verify
from tests.device.test_bundle import bundle_feed
from tests.trtexec_standin import write_outputs, write_times

#: The forms trt7.0 parses (no plugin: its parser creates none); keep is the erf form.
FORMS = {"keep", "tanh", "sigmoid"}


@pytest.fixture(scope="module")
def cache_forms(saved_model, session_cache) -> tuple[Path, Path]:
    """(model, bundle): the tiny BERT's forms bundle for trt7.0 at int8, built once."""
    model = saved_model("bert", "exported")

    def build(d: Path) -> None:
        res = run_cli(model, "--target", "trt7.0", "--gelu", "auto", "--precision", "int8",
                      "--bundle", d / "B", "-o", d / "auto.onnx", "--iterations", "2",
                      "--warmup", "0", "-q")
        assert res.code == 0, res.err + res.out

    return model, session_cache.folder("bert-int8-trt70-forms-bundle", build) / "B"


@pytest.fixture(scope="module")
def cache_forms_run(cache_forms, tmp_path_factory) -> Path:
    """A copy of the bundle with what a TensorRT 7.0 device returns for each form: the
    outputs of its graph built with its cache (the cache's simulation, run in ONNX Runtime
    on the bundle's inputs) and one timing round (the script's layout, outputs/<form>/)."""
    from export_gelu.quantize import run_graph
    from export_gelu.steps.quantize import cache_simulation

    ran = tmp_path_factory.mktemp("trt70-forms") / "B"
    shutil.copytree(cache_forms[1], ran)
    feed = bundle_feed(ran)
    for row in json.loads((ran / "manifest.json").read_text())["forms"]:
        sim = cache_simulation(onnx.load(str(ran / row["graph"]["file"])),
                               (ran / row["calibration_cache"]["file"]).read_text())
        folder = ran / row["outputs"]
        folder.mkdir(parents=True)
        write_outputs(run_graph(sim, [feed])[0], folder / "outputs.json")
        write_times(folder / "times.1.json", 1.0, 100, 200.0, row["form"])
    return ran


def test_every_form_has_its_own_cache_and_trtexec_line(cache_forms) -> None:
    _model, bundle = cache_forms
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["precision"] == "int8" and manifest["tensorrt"].startswith("7.0")
    rows = {f["form"]: f for f in manifest["forms"]}
    assert set(rows) == FORMS and "calibration_cache" not in manifest
    script = (bundle / "run_on_device.sh").read_text()
    caches = {}
    for form, row in rows.items():
        entry = row["calibration_cache"]
        cache = bundle / entry["file"]
        assert entry["file"] == f"forms/{form}/calibration.cache"
        assert hashlib.sha256(cache.read_bytes()).hexdigest() == entry["sha256"]
        graph = onnx.load(str(bundle / row["graph"]["file"]))
        assert not any(n.op_type in QDQ_OPS for n in graph.graph.node)  # fp32: the cache's
        header, scales = read_calibration_cache(cache.read_text())
        names = {t for n in graph.graph.node for t in n.output} | {
            i.name for i in graph.graph.input}
        assert header == "TRT-7000-EntropyCalibration2" and scales and set(scales) <= names
        caches[form] = scales
        build = row["trtexec"]["build"]
        assert "--int8" in build and f"--calib={entry['file']}" in build
        assert f"--onnx={row['graph']['file']}" in build
        assert f"--calib={entry['file']}" in script
    assert "--calib=calibration.cache" not in script
    assert caches["tanh"] != caches["keep"]  # each its own graph's tensors, not one cache


def test_honest_outputs_pass_every_form_by_its_int8_verdict(cache_forms, cache_forms_run,
                                                            tmp_path: Path) -> None:
    model, _bundle = cache_forms
    best, rep_path = tmp_path / "best.onnx", tmp_path / "r.json"
    res = verify(model, cache_forms_run, "-o", best, "--report", rep_path)
    assert res.code == 0, res.err + res.out
    assert "each judged by its INT8 verdict" in res.out and best.is_file()
    rows = json.loads(rep_path.read_text())["forms"]["rows"]
    assert {r["form"]: r["passed"] for r in rows} == dict.fromkeys(FORMS, True), rows


def test_one_form_shifted_fails_that_form_only(cache_forms, cache_forms_run,
                                               tmp_path: Path) -> None:
    model, _bundle = cache_forms
    shifted = tmp_path / "B"
    shutil.copytree(cache_forms_run, shifted)
    path = shifted / "outputs" / "tanh" / "outputs.json"
    outs = read_trtexec_outputs(path, path.read_text())
    write_outputs({k: v + 0.05 for k, v in outs.items()}, path)
    rep_path = tmp_path / "r.json"
    res = verify(model, shifted, "--report", rep_path)
    rows = {r["form"]: r for r in json.loads(rep_path.read_text())["forms"]["rows"]}
    assert rows["tanh"]["passed"] is False and "INT8 verdict failed" in rows["tanh"]["reason"]
    assert rows["keep"]["passed"] is True and rows["sigmoid"]["passed"] is True, rows
    assert res.code == 0, res.err + res.out  # a form that passed is still chosen


def test_an_edited_cache_is_refused(cache_forms, cache_forms_run, tmp_path: Path) -> None:
    model, _bundle = cache_forms
    edited = tmp_path / "B"
    shutil.copytree(cache_forms_run, edited)
    cache = edited / "forms" / "sigmoid" / "calibration.cache"
    cache.write_text(cache.read_text().replace("TRT-7000", "TRT-7001"))
    res = verify(model, edited)
    assert res.code == 2 and "calibration_cache.file" in res.err and "sigmoid" in res.err, \
        res.err
