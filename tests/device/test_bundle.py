"""`--bundle DIR` and `verify --bundle --device-outputs`: bundles for TensorRT boxes export-gelu
cannot drive, checked file by file; every trtexec flag in run_on_device.sh checked against the
flags that version's trtexec parses; device outputs made here the way trtexec and polygraphy
write them, judged with exit codes 0 / 1 / 2."""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from export_gelu import export
from export_gelu.device.binding import read_raw
from export_gelu.device.script import trtexec_args
from export_gelu.device.trtexec_flags import LINE_TAGS, accepted_flags
from export_gelu.targets import PROFILES
from tests.check.test_trt import dynamic_batch_model
from tests.conftest import run_cli
from tests.trtexec_standin import times_entry

VERSIONS = ("trt7.0", "trt8.2", "trt8.6", "trt10")
EXPECTED_FILES = {"model.onnx", "inputs", "inputs.json", "inputs.npz", "manifest.json",
                  "reference_outputs.json", "run_on_device.sh", "README.txt"}


# -- helpers: what the device would hand back ------------------------------------------------

def bundle_feed(bundle: Path) -> dict[str, np.ndarray]:
    """The inputs as trtexec reads them (raw files), in the graph's own dtypes."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    return {r["name"]: read_raw(bundle / r["file"], r["binding_dtype"], r["shape"])
            .astype(r["onnx_dtype"]) for r in manifest["inputs"]}


def ort_outputs(bundle: Path) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, bundle_feed(bundle))))


def write_trtexec_outputs(outputs: dict[str, np.ndarray], path: Path) -> None:
    """trtexec's --exportOutput layout (sampleReporting.cpp exportJSONOutput): values printed
    by operator<< (6 significant digits, nan/inf bare)."""
    def num(v: float) -> str:
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) \
            else f"{v:.6g}"

    lines, sep = ["["], "  "
    for name, arr in outputs.items():
        lines.append(f'{sep}{{ "name" : "{name}"')
        sep = ", "
        lines.append(f'  {sep}"dimensions" : "{"x".join(map(str, arr.shape))}"')
        lines.append(f'  {sep}"values" : [ ' + sep.join(num(v) for v in arr.ravel().tolist())
                     + " ]")
        lines.append("  }")
    lines.append("]")
    path.write_text("\n".join(lines) + "\n")


def write_trtexec_times(bundle: Path, path: Path, runs: int, warmups: int) -> list[float]:
    """--exportTimes as trtexec 8.2 writes it (warm-up entries first, before 8.6), with ONNX
    Runtime's own per-inference times as computeMs; returns the timed ones (ms)."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    feed = bundle_feed(bundle)
    clock, entries, timed = 0.0, [], []
    for i in range(warmups + runs):
        if i == warmups:
            clock = max(clock, 200.0)  # the timed runs start after --warmUp=200 (ms)
        start = time.perf_counter()
        sess.run(None, feed)
        ms = float(f"{(time.perf_counter() - start) * 1e3:g}")
        entries.append(times_entry(clock, ms))
        clock += ms
        if i >= warmups:
            timed.append(ms)
    path.write_text("[\n  " + "\n, ".join(entries) + "\n]\n")
    return timed


def script_trtexec_flags(script: str) -> list[str]:
    """Every `--flag` the script hands trtexec: its `set -- --onnx=…` block and the plugin."""
    lines = script.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("set -- --onnx="))
    block = []
    for ln in lines[start:]:
        block.append(ln.rstrip("\\").strip())
        if not ln.endswith("\\"):
            break
    words = shlex.split(" ".join(block))[2:]  # drop "set --"
    plugin = [w for ln in lines if '"$@"' in ln and "PLUGIN_LIB" in ln
              for w in shlex.split(ln.strip())[3:]]
    return [w.split("=", 1)[0] for w in words + plugin]


# -- fixtures --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bert_bundles(saved_model, session_cache) -> dict[str, tuple[Path, Path]]:
    """BERT (int64 input) exported for each version with --bundle: target → (model, bundle).
    Exported once (session_cache); the tests only read the bundles."""
    model = saved_model("bert", "exported")

    def build(d: Path) -> None:
        for target in VERSIONS:
            export(model, target=target, output=d / f"bert.{target}.onnx", verify=False,
                   iterations=0, bundle=d / target)

    d = session_cache.folder("bert-bundles", build)
    return {target: (model, d / target) for target in VERSIONS}


@pytest.fixture(scope="module")
def dynamic_bundles(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """An ONNX input with a symbolic batch axis, --dynamic x:0=1:4:8, per version."""
    d = tmp_path_factory.mktemp("dyn")
    src = d / "dyn.onnx"
    dynamic_batch_model(src)
    out = {}
    for target in VERSIONS:
        bundle = d / target
        res = run_cli(src, "--target", target, "--input", "x:4x16", "--dynamic", "x:0=1:4:8",
                      "-o", d / f"dyn.{target}.onnx", "--iterations", "0", "--bundle", bundle)
        assert res.code == 0, res.err + res.out
        out[target] = (src, bundle)
    return out


# -- the flag table --------------------------------------------------------------------------

@pytest.mark.parametrize("version,present,absent", [
    ("7.0", {"--explicitBatch", "--workspace", "--loadInputs", "--exportOutput",
             "--exportTimes", "--fp16", "--plugins"}, {"--noTF32", "--memPoolSize", "--bf16"}),
    ("8.2", {"--workspace", "--noTF32", "--explicitBatch"}, {"--memPoolSize", "--bf16"}),
    ("8.4", {"--memPoolSize", "--workspace"}, {"--skipInference"}),
    ("8.6", {"--skipInference", "--memPoolSize"}, {"--bf16", "--stronglyTyped"}),
    ("9", {"--bf16", "--stronglyTyped"}, set()),
    ("10", {"--bf16", "--stronglyTyped", "--memPoolSize"},
     {"--workspace", "--explicitBatch", "--buildOnly"}),
    ("11", {"--stronglyTyped", "--memPoolSize"}, {"--fp16", "--bf16", "--workspace"}),
])
def test_flag_table_holds_what_each_trtexec_source_parses(version, present, absent):
    flags = accepted_flags(version)
    assert present <= flags, present - flags
    assert not absent & flags, absent & flags
    assert accepted_flags(version + ".3") == flags  # patch releases map to their line


def test_flag_table_regenerates_from_the_tensorrt_source():
    """Set EXPORT_GELU_TENSORRT_SRC to a git clone of NVIDIA/TensorRT to run it."""
    repo = Path(os.environ.get("EXPORT_GELU_TENSORRT_SRC", "TensorRT"))
    if not repo.is_dir():
        pytest.skip("no NVIDIA/TensorRT clone to regenerate the table from (set "
                    "EXPORT_GELU_TENSORRT_SRC to one)")
    from export_gelu.device import trtexec_flag_table
    from export_gelu.device.trtexec_flags import read_table

    flags, commits = read_table(repo)
    assert set(flags) == set(LINE_TAGS)
    assert {k: tuple(v) for k, v in flags.items()} == trtexec_flag_table.FLAGS
    assert commits == trtexec_flag_table.COMMITS


@pytest.mark.parametrize("version,precision,want,refused", [
    ("7.0", "fp16", {"--fp16", "--explicitBatch", "--workspace"}, {"--noTF32"}),
    ("8.2", "fp16", {"--fp16", "--workspace", "--noTF32"}, {"--explicitBatch"}),
    ("8.6", "fp32", {"--noTF32"}, {"--fp16", "--workspace", "--memPoolSize"}),
    ("10", "bf16", {"--bf16", "--noTF32"}, {"--fp16"}),
    ("11", "fp16", {"--noTF32"}, {"--fp16", "--stronglyTyped"}),
])
def test_precision_and_version_pick_the_flags(version, precision, want, refused):
    args = trtexec_args(version, precision, {"x": "inputs/x.bin"}, {"x": (2, 3)}, None)
    flags = {a.split("=", 1)[0] for a in args}
    assert want <= flags and not refused & flags, flags
    assert flags <= accepted_flags(version)


def test_bf16_before_tensorrt_9_is_refused():
    from export_gelu.errors import BadInputError

    with pytest.raises(BadInputError, match="bf16 needs TensorRT 9"):
        trtexec_args("8.6", "bf16", {"x": "inputs/x.bin"}, {"x": (2,)}, None)


# -- the bundle's files ----------------------------------------------------------------------

@pytest.mark.parametrize("target", VERSIONS)
def test_static_bundle_holds_every_file(bert_bundles, target):
    model, bundle = bert_bundles[target]
    manifest = json.loads((bundle / "manifest.json").read_text())
    # the graph marking each module's output, where the graph's nodes name their modules
    marked = {"model_marked.onnx"} if "localize" in manifest else set()
    assert {p.name for p in bundle.iterdir()} == EXPECTED_FILES | marked
    from export_gelu.device.bundle_layout import sha256_file

    assert manifest["model"]["sha256"] == sha256_file(model)
    assert manifest["graph"]["sha256"] == sha256_file(bundle / "model.onnx")
    onnx.checker.check_model(str(bundle / "model.onnx"))
    assert manifest["target"] == target
    assert manifest["tensorrt"] == PROFILES[target].trt_version  # the line's first release
    assert manifest["profile"] is None
    assert manifest["tolerances"] == {"atol": 1e-4, "rtol": 1e-3}
    (row,) = manifest["inputs"]
    assert row["onnx_dtype"] == "int64"
    # int64 binds as int32 before TensorRT 9 (kINT64 from 9.x): the raw file follows
    assert row["binding_dtype"] == ("int64" if target == "trt10" else "int32")
    assert row["bytes"] == np.dtype(row["binding_dtype"]).itemsize * math.prod(row["shape"])
    (out,) = manifest["outputs"]
    assert out["shape"] == [2, 16, 64]
    readme = (bundle / "README.txt").read_text()
    assert "outputs.json" in readme and "times.json" in readme
    assert ("binds them as int32" in readme) == (target != "trt10")


@pytest.mark.parametrize("target", VERSIONS)
def test_raw_inputs_read_back_equal_the_feed(bert_bundles, target):
    from export_gelu.check.inputs.saved_data import load_polygraphy_inputs

    _model, bundle = bert_bundles[target]
    manifest = json.loads((bundle / "manifest.json").read_text())
    feed = dict(np.load(bundle / "inputs.npz"))
    (poly,) = load_polygraphy_inputs(bundle / "inputs.json")
    for row in manifest["inputs"]:
        raw = (bundle / row["file"]).read_bytes()
        back = np.frombuffer(raw, dtype=np.dtype(row["binding_dtype"]).newbyteorder("<"))
        np.testing.assert_array_equal(back.reshape(row["shape"]), feed[row["name"]])
        assert feed[row["name"]].dtype == np.int64
        np.testing.assert_array_equal(poly[row["name"]], feed[row["name"]])
        assert poly[row["name"]].dtype == np.dtype(row["binding_dtype"])


@pytest.mark.parametrize("target", VERSIONS)
def test_every_trtexec_flag_in_the_script_is_one_its_version_parses(bert_bundles,
                                                                   dynamic_bundles, target):
    for bundles in (bert_bundles, dynamic_bundles):
        script = (bundles[target][1] / "run_on_device.sh").read_text()
        flags = script_trtexec_flags(script)
        assert {"--onnx", "--loadInputs", "--exportOutput", "--exportTimes",
                "--saveEngine"} <= set(flags)
        unknown = set(flags) - accepted_flags(target[3:])
        assert not unknown, f"{target} trtexec does not parse {unknown}"
        assert ("--explicitBatch" in flags) == (target == "trt7.0")
        assert ("--workspace" in flags) == (target in ("trt7.0", "trt8.2"))
        assert "--plugins" in flags  # PLUGIN_LIB, valid on every version


@pytest.mark.parametrize("target", VERSIONS)
def test_dynamic_bundle_carries_min_opt_max(dynamic_bundles, target):
    _src, bundle = dynamic_bundles[target]
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["profile"] == {"x": {"min": [1, 16], "opt": [4, 16], "max": [8, 16]}}
    assert manifest["inputs"][0]["graph_dims"] == ["batch", 16]
    script = (bundle / "run_on_device.sh").read_text()
    for flag in ("--minShapes=x:1x16", "--optShapes=x:4x16", "--maxShapes=x:8x16",
                 "--shapes=x:4x16"):
        assert flag in script
    for flag in ("--trt-min-shapes", "'x:[1,16]'", "'x:[8,16]'"):
        assert flag in script


@pytest.mark.parametrize("target", VERSIONS)
def test_run_on_device_is_valid_posix_sh(bert_bundles, target):
    script = bert_bundles[target][1] / "run_on_device.sh"
    assert script.read_text().startswith("#!/bin/sh\n")
    res = subprocess.run(["/bin/sh", "-n", str(script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_script_without_trtexec_says_where_it_looked(bert_bundles, tmp_path):
    import shutil

    bundle = tmp_path / "b"
    shutil.copytree(bert_bundles["trt8.2"][1], bundle)
    if shutil.which("trtexec", path="/usr/bin:/bin") or Path(
            "/usr/src/tensorrt/bin/trtexec").exists():
        pytest.skip("trtexec is installed here")
    res = subprocess.run(["/bin/sh", str(bundle / "run_on_device.sh")], capture_output=True,
                         text=True, env={"PATH": "/usr/bin:/bin"})
    assert res.returncode == 127
    assert "/usr/src/tensorrt/bin/trtexec" in res.stderr


def test_bundle_refuses_a_directory_that_is_not_a_bundle(tmp_path):
    src = tmp_path / "dyn.onnx"
    dynamic_batch_model(src)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("mine")
    res = run_cli(src, "--target", "trt8.2", "--input", "x:4x16", "--bundle", tmp_path / "busy",
                  "-o", tmp_path / "o.onnx")
    assert res.code == 2 and "not an export-gelu bundle" in res.err
    assert not (tmp_path / "o.onnx").exists()
    res = run_cli(src, "--target", "ort", "--input", "x:4x16", "--bundle", tmp_path / "b",
                  "-o", tmp_path / "o.onnx")
    assert res.code == 2 and "--bundle is for TensorRT targets" in res.err


# -- verify --device-outputs -----------------------------------------------------------------

@pytest.fixture(scope="module")
def trt82(bert_bundles) -> tuple[Path, Path]:
    return bert_bundles["trt8.2"]


def test_trtexec_outputs_pass_with_device_latency(trt82, tmp_path):
    model, bundle = trt82
    outs, times, report = tmp_path / "outputs.json", tmp_path / "times.json", tmp_path / "r.json"
    write_trtexec_outputs(ort_outputs(bundle), outs)
    timed = write_trtexec_times(bundle, times, runs=40, warmups=3)
    res = run_cli("verify", model, "--bundle", bundle, "--device-outputs", outs,
                  "--device-times", times, "--report", report)
    assert res.code == 0, res.err + res.out
    assert "Parity: PASSED (pytorch vs tensorrt-device" in res.out
    rep = json.loads(report.read_text())
    assert rep["parity"]["status"] == "passed"
    assert rep["trt"]["status"] == "device" and rep["trt"]["tensorrt"] == "8.2"
    lat = rep["latency"]["tensorrt-device"]
    assert lat["iterations"] == 40 and lat["warmup"] == 3
    assert lat["median_ms"] == pytest.approx(float(np.median(timed)))
    assert lat["p99_ms"] == pytest.approx(float(np.percentile(timed, 99)))
    assert "3 warm-up inference(s) dropped" in res.out


def test_one_output_perturbed_beyond_tolerance_fails_naming_it(trt82, tmp_path):
    model, bundle = trt82
    outs = ort_outputs(bundle)
    (name,) = outs
    outs[name] = outs[name].copy()
    outs[name][0, 0, 0] += 0.05
    path = tmp_path / "outputs.json"
    write_trtexec_outputs(outs, path)
    res = run_cli("verify", model, "--bundle", bundle, "--device-outputs", path)
    assert res.code == 1, res.err
    assert f"FAIL {name}: max abs 0.05" in res.out
    assert f"outputs over tolerance: {name}" in res.out


def test_nan_and_inf_as_trtexec_prints_them_fail_the_output(trt82, tmp_path):
    model, bundle = trt82
    outs = ort_outputs(bundle)
    (name,) = outs
    outs[name] = outs[name].copy()
    outs[name][0, 0, 1:4] = [np.nan, np.inf, -np.inf]
    path = tmp_path / "outputs.json"
    write_trtexec_outputs(outs, path)
    assert ", nan, inf, -inf," in path.read_text()
    res = run_cli("verify", model, "--bundle", bundle, "--device-outputs", path)
    assert res.code == 1, res.err
    assert "3 non-finite" in res.out


@pytest.mark.parametrize("damage,message", [
    (lambda t: t[: len(t) // 2], "truncated"),
    (lambda t: t.replace(' ]\n', ', 0.5 ]\n', 1), "has 2049 values for dimensions 2x16x64"),
    (lambda t: t.replace('"2x16x64"', '"2x16x32x2"'), "is 2x16x32x2, the reference's is 2x16x64"),
    (lambda t: t.replace('"name" : "', '"name" : "other_', 1), "not in the graph: other_"),
    (lambda t: "", "empty file"),
])
def test_damaged_or_foreign_outputs_exit_2(trt82, tmp_path, damage, message):
    model, bundle = trt82
    good = tmp_path / "good.json"
    write_trtexec_outputs(ort_outputs(bundle), good)
    bad = tmp_path / "bad.json"
    bad.write_text(damage(good.read_text()))
    res = run_cli("verify", model, "--bundle", bundle, "--device-outputs", bad)
    assert res.code == 2, res.out
    assert message in res.err
    assert "Traceback" not in res.err


def test_outputs_of_another_models_bundle_exit_2(trt82, dynamic_bundles, tmp_path):
    model, bundle = trt82
    other = tmp_path / "outputs.json"
    write_trtexec_outputs(ort_outputs(dynamic_bundles["trt8.2"][1]), other)
    res = run_cli("verify", model, "--bundle", bundle, "--device-outputs", other)
    assert res.code == 2 and "are not the graph's" in res.err
    # the bundle of another model
    res = run_cli("verify", model, "--bundle", dynamic_bundles["trt8.2"][1], "--device-outputs",
                  other)
    assert res.code == 2 and "made from another model" in res.err


def test_truncated_times_exit_2(trt82, tmp_path):
    model, bundle = trt82
    outs, times = tmp_path / "outputs.json", tmp_path / "times.json"
    write_trtexec_outputs(ort_outputs(bundle), outs)
    write_trtexec_times(bundle, times, runs=5, warmups=0)
    times.write_text(times.read_text()[:-40])
    res = run_cli("verify", model, "--bundle", bundle, "--device-outputs", outs,
                  "--device-times", times)
    assert res.code == 2 and "--device-times" in res.err and "truncated" in res.err


def test_polygraphy_outputs_from_a_real_polygraphy_run_pass(trt82, tmp_path):
    model, bundle = trt82
    polygraphy = Path(sys.executable).with_name("polygraphy")
    if not polygraphy.exists():
        pytest.skip("the polygraphy CLI is not installed beside this Python")
    out = tmp_path / "out.json"
    run = subprocess.run([str(polygraphy), "run", str(bundle / "model.onnx"), "--onnxrt",
                          "--load-inputs", str(bundle / "inputs.json"), "--save-outputs",
                          str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    res = run_cli("verify", model, "--bundle", bundle, "--device-outputs", out)
    assert res.code == 0, res.err + res.out
    assert "Parity: PASSED" in res.out


def test_device_outputs_without_a_bundle_take_inputs_and_the_graph(trt82, tmp_path):
    model, bundle = trt82
    outs = tmp_path / "outputs.json"
    write_trtexec_outputs(ort_outputs(bundle), outs)
    res = run_cli("verify", model, bundle / "model.onnx", "--inputs", bundle / "inputs.npz",
                  "--device-outputs", outs)
    assert res.code == 0, res.err + res.out
    res = run_cli("verify", model, bundle / "model.onnx", "--device-outputs", outs)
    assert res.code == 2 and "needs DEPLOYED" in res.err


def test_verify_of_a_graph_made_elsewhere_writes_a_bundle(trt82, tmp_path):
    model, bundle = trt82
    out = tmp_path / "b"
    res = run_cli("verify", model, bundle / "model.onnx", "--bundle", out, "--target", "trt8.6",
                  "--iterations", "0", "--no-calibration")
    assert res.code == 0, res.err + res.out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["target"] == "trt8.6" and manifest["reference"]["runner"] == "pytorch"
    # the graph names its modules (provenance), so the device is asked for their tensors too
    assert "localize" in manifest
    assert {p.name for p in out.iterdir()} == EXPECTED_FILES | {"model_marked.onnx"}
    outs = tmp_path / "outputs.json"
    write_trtexec_outputs(ort_outputs(out), outs)
    res = run_cli("verify", model, "--bundle", out, "--device-outputs", outs)
    assert res.code == 0, res.err + res.out


def test_export_summary_points_to_bundle_where_no_engine_can_be_built(tmp_path):
    src = tmp_path / "dyn.onnx"
    dynamic_batch_model(src)
    res = run_cli(src, "--target", "trt7.0", "--input", "x:4x16", "-o", tmp_path / "o.onnx",
                  "--iterations", "0")
    assert res.code == 0, res.err
    line = next(ln for ln in res.out.splitlines() if ln.startswith("TensorRT:"))
    assert "--bundle DIR" in line
    res = run_cli(src, "--target", "trt7.0", "--input", "x:4x16", "-o", tmp_path / "b.onnx",
                  "--iterations", "0", "--bundle", tmp_path / "B", "--report", tmp_path / "r.json")
    assert res.code == 0, res.err
    line = next(ln for ln in res.out.splitlines() if ln.startswith("TensorRT:"))
    bundle = f"the bundle in {tmp_path / 'B'}/"
    assert line.endswith(f"; build and check it on the device with {bundle}"), line
    trt = json.loads((tmp_path / "r.json").read_text())["trt"]
    assert trt["device"].endswith(bundle) and "bundle" not in trt["reason"]


def test_plugin_bundle_says_so_and_widens_the_tolerance(tmp_path):
    src = tmp_path / "dyn.onnx"
    dynamic_batch_model(src)
    bundle = tmp_path / "b"
    res = run_cli(src, "--target", "trt8.6", "--gelu", "plugin", "--input", "x:4x16",
                  "--bundle", bundle, "-o", tmp_path / "p.onnx", "--iterations", "0")
    assert res.code == 0, res.err
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["graph"]["gelu_plugin"] is True
    # the plugin computes tanh GELU: 20× its 4.73e-4 worst case, as a local run would allow
    assert manifest["tolerances"]["atol"] == pytest.approx(20 * 4.73e-4, rel=1e-2)
    assert "CustomGeluPluginDynamic" in (bundle / "README.txt").read_text()
    nodes = [n.op_type for n in onnx.load(str(bundle / "model.onnx")).graph.node]
    assert "CustomGeluPluginDynamic" in nodes
    assert "--plugins" in script_trtexec_flags((bundle / "run_on_device.sh").read_text())


def test_external_data_travels_with_the_graph(tmp_path, monkeypatch):
    from export_gelu.exporter.saving.save import EXTERNAL_DATA_ENV

    monkeypatch.setenv(EXTERNAL_DATA_ENV, "16")
    src = tmp_path / "dyn.onnx"
    dynamic_batch_model(src)
    bundle = tmp_path / "b"
    res = run_cli(src, "--target", "trt10", "--input", "x:4x16", "--bundle", bundle,
                  "-o", tmp_path / "e.onnx", "--iterations", "0")
    assert res.code == 0, res.err
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["graph"]["external_data"] == ["e.onnx.data"]
    assert (bundle / "e.onnx.data").read_bytes() == (tmp_path / "e.onnx.data").read_bytes()
    outs = tmp_path / "outputs.json"
    write_trtexec_outputs(ort_outputs(bundle), outs)  # ORT loads model.onnx + its data
    res = run_cli("verify", src, "--bundle", bundle, "--device-outputs", outs)
    assert res.code == 0, res.err + res.out


def test_trtexec_text_reader_takes_every_c_spelling_of_non_finite(tmp_path):
    from export_gelu.device.outputs import read_trtexec_outputs

    text = ('[\n  { "name" : "nan_out"\n  , "dimensions" : "2x3"\n'
            '  , "values" : [ nan, -nan, inf, -inf, 1e-05, -2 ]\n  }\n]\n')
    (arr,) = read_trtexec_outputs(tmp_path / "o.json", text).values()
    assert arr.shape == (2, 3)
    assert np.isnan(arr[0, :2]).all() and arr[0, 2] == np.inf and arr[1, 0] == -np.inf
    assert arr[1, 1:].tolist() == [1e-05, -2.0]
    scalar = '[\n  { "name" : "s"\n  , "dimensions" : ""\n  , "values" : [ 3 ]\n  }\n]\n'
    assert read_trtexec_outputs(tmp_path / "o.json", scalar)["s"].shape == ()


@pytest.mark.parametrize("log,ran,mismatch", [
    ("[12/01/2026-04:00:00] [I] TensorRT version: 8.2.1\n", "8.2.1", False),
    ("&&&& RUNNING TensorRT.trtexec [TensorRT v8502] # trtexec --onnx=model.onnx\n", "8.5.2",
     True),
])
def test_trtexec_log_beside_the_outputs_names_the_tensorrt_that_ran(trt82, tmp_path, log, ran,
                                                                    mismatch):
    model, bundle = trt82
    outs, report = tmp_path / "outputs.json", tmp_path / "r.json"
    write_trtexec_outputs(ort_outputs(bundle), outs)
    (tmp_path / "trtexec.log").write_text(log)
    res = run_cli("verify", model, "--bundle", bundle, "--device-outputs", outs,
                  "--report", report)
    assert res.code == 0, res.err
    assert json.loads(report.read_text())["trt"]["device_tensorrt"] == ran
    assert (f"says TensorRT {ran} ran it, but the bundle was made for 8.2" in res.out) == mismatch


def test_profile_ranges_only_the_given_axis_and_pins_symbolic_ones():
    from export_gelu.check.runners.trt_runner import parse_dynamic
    from export_gelu.device.binding import profile_shapes

    shapes = {"ids": (2, 16), "mask": (2, 16)}
    assert profile_shapes(shapes, [], {"ids": False, "mask": False}) is None
    pinned = profile_shapes(shapes, [], {"ids": True, "mask": False})
    assert pinned == {"ids": ((2, 16),) * 3, "mask": ((2, 16),) * 3}
    ranged = profile_shapes(shapes, [parse_dynamic("ids:1=8:16:64"),
                                     parse_dynamic("mask:-1=8:16:64")],
                            {"ids": True, "mask": True})
    assert ranged == {"ids": ((2, 8), (2, 16), (2, 64)), "mask": ((2, 8), (2, 16), (2, 64))}


@pytest.mark.parametrize("name", ["file", "allow_pickle"])
def test_inputs_named_like_savez_parameters_are_in_inputs_npz(tmp_path, name):
    # np.savez(path, **feed) raised TypeError for an input named `file` and silently left
    # out one named `allow_pickle` (both are np.savez's own parameters)
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    graph = helper.make_graph([helper.make_node("Relu", [name], ["y"], name="relu")],
                              "g", [x], [y])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), src)
    bundle = tmp_path / "b"
    res = run_cli(src, "--target", "trt8.6", "--bundle", bundle, "-o", tmp_path / "o.onnx",
                  "--iterations", "0")
    assert res.code == 0, res.err
    with np.load(bundle / "inputs.npz") as saved:
        assert list(saved) == [name]
        assert saved[name].shape == (2, 4) and saved[name].dtype == np.float32
        np.testing.assert_array_equal(saved[name], bundle_feed(bundle)[name])
