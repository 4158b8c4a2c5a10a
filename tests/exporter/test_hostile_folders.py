"""Security round 2: what a Hugging Face folder, a hostile JSON, the Python API and the
machine's limits can make a run do (docs/safety.md).

Every case runs the real CLI (in-process, or in a subprocess where a resource limit or a signal
is needed) or the real API on real files, and asserts the exit code (or exception), the words
of the one stderr line, that nothing was left where the run writes, and that every input is
byte-identical. The containment cases also assert that a canary outside the folder was never
read: its access time is set far in the past, so any read moves it (relatime updates an atime
older than a day; a file system mounted noatime skips that one assertion).

| finding | case |
|---|---|
| a folder's file links out | `model.safetensors`, `config.json` → a file outside; `w/` → a folder |
| the same through the API | `export_gelu.export(folder)` |
| the Hugging Face cache works | `snapshots/<rev>/*` → `../../blobs/<hash>`; a link out refused |
| `-o` onto a shard in a sub-folder | `-o m/w/model-00001-of-00001.safetensors` |
| API `allow_pickle='no'` | TypeError naming the keyword, the pickle's payload never runs |
| deep JSON | config.json, preprocessor_config.json, the weight index, a safetensors header |
| processor sizes (round 3) | crop -8, 10⁹, `sampling_rate` Infinity, "abc", 1e300: exit 2 |
| `export-gelu .` | run from inside the folder |
| ONNX Runtime out of memory | an `Expand` to 2^20×2^20 under RLIMIT_AS |
| `--threads 100000` | clamped with a note; SIGTERM answered within 5 s |
| exit 2 leaves nothing | RLIMIT_FSIZE (on the test's process) while the report's plot is written |
| opset 99 | exit 2 listing the opsets known |
| `--dynamic batch=1:1:1000000000000` | names the --dynamic flag, never an --input not typed |
| "see the report above" | a config/weights mismatch, a `.pt2` payload path_name `../..` |
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import export_gelu
from export_gelu.errors import BadInputError
from tests.conftest import ROOT, run_cli
from tests.hf_folders import save_folder
from tests.hostile import atime_counts as _atime_counts
from tests.hostile import canary as _canary
from tests.hostile import file_size_limit
from tests.hostile import never_read as _never_read
from tests.hostile import one_error_line as _one_error_line
from tests.hostile import sha as _sha
from tests.hostile import shas as _shas

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

QUICK = ("--iterations", "0", "--target", "ort")


# ---------------------------------------------------------------- helpers


def _cli(*argv: object, cwd: Path = ROOT, preexec=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "export_gelu.cli", *map(str, argv)], cwd=cwd,
                          capture_output=True, text=True, timeout=600, env=env,
                          preexec_fn=preexec)


def _saved_once(session_cache, name: str, entry: str) -> Path:
    """examples/hf_folders.py's `name` saved once for every test, worker and session
    (session_cache): read-only, as every test here copies it or links to it from outside."""
    return session_cache.folder(entry, lambda d: save_folder(name, d / name)) / name


@pytest.fixture(scope="module")
def bert(session_cache) -> Path:
    return _saved_once(session_cache, "bert", "hostile-bert")


@pytest.fixture(scope="module")
def other_bert(session_cache) -> Path:
    """Another model's folder: real weights and config, outside every folder under test."""
    return _saved_once(session_cache, "bert", "hostile-other-bert")


@pytest.fixture()
def folder(bert: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(bert, tmp_path / "m"))


@pytest.fixture()
def out_dir(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    return out


@pytest.fixture(scope="module")
def atime_counts(tmp_path_factory: pytest.TempPathFactory) -> bool:
    return _atime_counts(tmp_path_factory.mktemp("probe"))


# ---------------------------------------------------------------- containment of a folder


@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_a_folder_file_linked_out_of_the_folder_is_refused(name, folder, other_bert, out_dir,
                                                           tmp_path, atime_counts):
    canary = Path(shutil.copy(other_bert / name, tmp_path / f"canary-{name}"))
    sha = _sha(canary)
    (folder / name).unlink()
    (folder / name).symlink_to(canary)
    before = _shas(folder)
    _canary(canary)  # last: hashing the folder read it
    res = run_cli(folder, *QUICK, "-o", out_dir / "o.onnx", "--report", out_dir / "r.json")
    assert res.code == 2
    _one_error_line(res.err, str(folder), f"its file {name!r}",
                    "lies outside the model's folder", str(canary))
    _never_read(canary, atime_counts)
    assert _sha(canary) == sha and _shas(folder) == before
    assert list(out_dir.iterdir()) == []


def test_a_sub_folder_linked_out_of_the_folder_is_refused(tmp_path, out_dir, atime_counts):
    folder = save_folder("bert", tmp_path / "m", max_shard_size="20KB")
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    outside = tmp_path / "outside"
    outside.mkdir()
    for shard in set(index["weight_map"].values()):
        shutil.move(folder / shard, outside / shard)
    (folder / "w").symlink_to(outside, target_is_directory=True)
    index["weight_map"] = {k: f"w/{v}" for k, v in index["weight_map"].items()}
    index_path.write_text(json.dumps(index))
    shards = sorted(outside.iterdir())
    before = _shas(outside)
    for shard in shards:
        _canary(shard)
    res = run_cli(folder, *QUICK, "-o", out_dir / "o.onnx")
    assert res.code == 2
    _one_error_line(res.err, "its file 'w'", "lies outside the model's folder")
    for shard in shards:
        _never_read(shard, atime_counts)
    assert _shas(outside) == before and list(out_dir.iterdir()) == []


def test_the_api_refuses_a_linked_out_file_too(folder, other_bert, out_dir, tmp_path,
                                               atime_counts):
    canary = Path(shutil.copy(other_bert / "model.safetensors", tmp_path / "canary"))
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to(canary)
    _canary(canary)
    with pytest.raises(BadInputError, match="lies outside the model's folder"):
        export_gelu.export(folder, target="ort", output=out_dir / "o.onnx", iterations=0)
    _never_read(canary, atime_counts)
    assert list(out_dir.iterdir()) == []


def _as_hf_cache(folder: Path, cache: Path, repo: str = "models--org--tiny") -> Path:
    """`folder` laid out as the Hugging Face cache holds a download: each file a blob named by
    its hash, the snapshot a folder of links `../../blobs/<hash>`."""
    root = cache / repo
    blobs, snapshot = root / "blobs", root / "snapshots" / "0123abcd"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text("0123abcd")
    for f in sorted(folder.iterdir()):
        digest = _sha(f)
        shutil.copy(f, blobs / digest)
        (snapshot / f.name).symlink_to(Path("..") / ".." / "blobs" / digest)
    return snapshot


def test_the_hugging_face_cache_layout_keeps_working(bert, tmp_path, out_dir):
    snapshot = _as_hf_cache(bert, tmp_path / "hub")
    blobs = _shas(snapshot.parents[1] / "blobs")
    rep = out_dir / "r.json"
    res = run_cli(snapshot, *QUICK, "-o", out_dir / "o.onnx", "--report", rep)
    assert res.code == 0, res.err
    assert json.loads(rep.read_text())["parity"]["status"] == "passed"
    assert _shas(snapshot.parents[1] / "blobs") == blobs


def test_a_cache_link_out_of_its_repo_is_refused(bert, other_bert, tmp_path, out_dir,
                                                 atime_counts):
    snapshot = _as_hf_cache(bert, tmp_path / "hub")
    other = _as_hf_cache(other_bert, tmp_path / "hub", "models--org--other")
    target = (other / "model.safetensors").resolve()
    (snapshot / "model.safetensors").unlink()
    (snapshot / "model.safetensors").symlink_to(Path("../../../models--org--other/blobs") /
                                                target.name)
    _canary(target)
    res = run_cli(snapshot, *QUICK, "-o", out_dir / "o.onnx")
    assert res.code == 2
    _one_error_line(res.err, "'model.safetensors'", "lies outside the model's folder")
    _never_read(target, atime_counts)
    assert list(out_dir.iterdir()) == []


def test_output_onto_a_shard_in_a_sub_folder_is_refused(tmp_path):
    folder = save_folder("bert", tmp_path / "m")
    (folder / "w").mkdir()
    shard = folder / "w" / "model-00001-of-00001.safetensors"
    shutil.move(folder / "model.safetensors", shard)
    from safetensors import safe_open

    with safe_open(str(shard), "pt") as fh:
        names = list(fh.keys())
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {n: "w/model-00001-of-00001.safetensors"
                                        for n in names}}))
    before = _shas(folder)
    res = run_cli(folder, *QUICK, "-o", shard)
    assert res.code == 2
    _one_error_line(res.err, f"-o {shard} would overwrite the input MODEL's file")
    assert _shas(folder) == before


def test_the_pt2_payload_path_out_of_its_folder_is_refused_in_our_words(tmp_path, out_dir):
    ep = torch.export.export(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU()),
                             (torch.randn(2, 4),))
    good = tmp_path / "good.pt2"
    torch.export.save(ep, str(good))
    bad = tmp_path / "bad.pt2"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("model_weights_config.json"):
                config = json.loads(data)
                first = next(iter(config["config"].values()))
                first["path_name"] = "../../../../canary"
                data = json.dumps(config).encode()
            dst.writestr(info, data)
    before = _sha(bad)
    res = run_cli(bad, *QUICK, "-o", out_dir / "o.onnx")
    assert res.code == 2
    line = _one_error_line(res.err, "path_name '../../../../canary'",
                           "is not a plain member name")
    assert "above" not in line
    assert _sha(bad) == before and list(out_dir.iterdir()) == []


def test_a_config_weights_mismatch_is_said_in_our_words(folder, out_dir):
    config = json.loads((folder / "config.json").read_text())
    config["intermediate_size"] += 4
    (folder / "config.json").write_text(json.dumps(config))
    before = _shas(folder)
    res = run_cli(folder, *QUICK, "-o", out_dir / "o.onnx")
    assert res.code == 2
    line = _one_error_line(res.err, ".dense.", "has another shape than the config gives it")
    assert "above" not in line
    assert _shas(folder) == before and list(out_dir.iterdir()) == []


# ---------------------------------------------------------------- the API's keywords


class _WritesMarker:
    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('unpickled')",))


@pytest.mark.parametrize("keyword,value", [("allow_pickle", "no"), ("allow_pickle", 1),
                                           ("verify", "yes"), ("threads", 2.0),
                                           ("output", 3)])
def test_api_keywords_of_the_wrong_type_are_a_type_error(keyword, value, tmp_path):
    marker = tmp_path / "marker"
    model = tmp_path / "evil.pt"
    torch.save({"weight": torch.ones(2), "extra": _WritesMarker(marker)}, str(model))
    before = _sha(model)
    keywords = {"target": "ort", "output": tmp_path / "o.onnx", keyword: value}
    with pytest.raises(TypeError, match=rf"^{keyword}={value!r}: expected "):
        export_gelu.export(model, **keywords)
    assert not marker.exists(), "the pickle was loaded: its payload ran"
    assert _sha(model) == before and sorted(p.name for p in tmp_path.iterdir()) == ["evil.pt"]


# ---------------------------------------------------------------- bounded JSON


def _deep(depth: int = 50_000) -> str:
    return "[" * depth + "]" * depth


def _deep_header(path: Path) -> None:
    header = ('{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": '
              + _deep() + "}}").encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0\0\0\0")


@pytest.mark.parametrize("name", ["config.json", "preprocessor_config.json",
                                  "model.safetensors.index.json"])
def test_deeply_nested_json_in_a_folder_is_exit_2_naming_the_file(name, folder, out_dir):
    if name == "config.json":
        config = json.loads((folder / name).read_text())
        text = json.dumps(config)[:-1] + ', "deep": ' + _deep() + "}"
    else:
        text = '{"weight_map": ' + _deep() + "}" if "index" in name else _deep()
    (folder / name).write_text(text)
    before = _shas(folder)
    res = run_cli(folder, *QUICK, "-o", out_dir / "o.onnx")
    assert res.code == 2
    _one_error_line(res.err, str(folder / name), "nested 50001 levels deep"
                    if name == "config.json" else "nested", "refusing to parse it")
    assert _shas(folder) == before and list(out_dir.iterdir()) == []


def test_deeply_nested_safetensors_header_is_exit_2_naming_the_file(tmp_path, out_dir):
    model = tmp_path / "deep.safetensors"
    _deep_header(model)
    before = _sha(model)
    res = run_cli(model, *QUICK, "-o", out_dir / "o.onnx")
    assert res.code == 2
    _one_error_line(res.err, f"{model} (its safetensors header)", "nested",
                    "refusing to parse it")
    assert _sha(model) == before and list(out_dir.iterdir()) == []


# ---------------------------------------------------------------- preprocessor_config.json sizes


@pytest.fixture(scope="module")
def vit(session_cache) -> Path:
    return _saved_once(session_cache, "vit", "hostile-vit")


@pytest.fixture(scope="module")
def wav2vec2(session_cache) -> Path:
    return _saved_once(session_cache, "wav2vec2", "hostile-wav2vec2")


#: (model, preprocessor_config.json, the key the one line names, its words): issue 40,
#: defect 10 (each an internal error, exit 4, before; some only after minutes).
PROCESSOR_CASES = {
    "crop height -8": ("vit", {"crop_size": {"height": -8, "width": 32}}, "crop_size.height",
                       "a whole number from 1 to 8192"),
    "size 10^9": ("vit", {"do_center_crop": False, "size": 1_000_000_000}, "size",
                  "a whole number from 1 to 8192"),
    "shortest edge a string": ("vit", {"size": {"shortest_edge": "224"}}, "size.shortest_edge",
                               "a whole number"),
    "sampling rate Infinity": ("wav2vec2", '{"sampling_rate": Infinity}', "sampling_rate",
                               "a finite number of Hz"),
    "sampling rate a string": ("wav2vec2", {"sampling_rate": "abc"}, "sampling_rate",
                               "a finite number of Hz"),
    "sampling rate 1e300": ("wav2vec2", {"sampling_rate": 1e300}, "sampling_rate",
                            "at most 768000"),
    "feature size 0": ("wav2vec2", {"feature_size": 0}, "feature_size", "a whole number"),
}


@pytest.mark.parametrize("case", PROCESSOR_CASES)
def test_processor_sizes_out_of_range_are_exit_2_naming_the_key(case, vit, wav2vec2, tmp_path,
                                                                 out_dir):
    name, config, key, words = PROCESSOR_CASES[case]
    folder = Path(shutil.copytree(vit if name == "vit" else wav2vec2, tmp_path / name))
    (folder / "preprocessor_config.json").write_text(
        config if isinstance(config, str) else json.dumps(config))
    before = _shas(folder)
    res = run_cli(folder, *QUICK, "-o", out_dir / "o.onnx")
    assert res.code == 2, res.err
    _one_error_line(res.err, f"{folder / 'preprocessor_config.json'}: {key} is", words)
    with pytest.raises(BadInputError, match=f"preprocessor_config.json: {re.escape(key)} is"):
        export_gelu.export(folder, target="ort", output=out_dir / "a.onnx", iterations=0)
    assert _shas(folder) == before and list(out_dir.iterdir()) == []


# ---------------------------------------------------------------- export-gelu .


def test_export_of_dot_from_inside_the_folder(folder, monkeypatch):
    before = _shas(folder)
    monkeypatch.chdir(folder)
    res = run_cli(".", *QUICK)
    assert res.code == 0, res.err
    out = folder.parent / "m.ort.onnx"
    assert out.is_file() and onnx.load(str(out)).graph.node
    assert _shas(folder) == before


# ---------------------------------------------------------------- resources


def _expand_model(path: Path) -> Path:
    """x (1x1) expanded to 2^20 x 2^20 float32: 4 TiB, more than any machine gives."""
    shape = numpy_helper.from_array(np.array([1 << 20, 1 << 20], np.int64), "shape")
    big = [1 << 20, 1 << 20]
    graph = helper.make_graph(
        [helper.make_node("Expand", ["x", "shape"], ["e"]), helper.make_node("Gelu", ["e"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, big)], [shape])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), str(path))
    return path


def _limit_memory(limit: int):
    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return set_limit


@pytest.mark.slow
def test_onnx_runtime_out_of_memory_is_exit_2_naming_the_stage(tmp_path, out_dir):
    model = _expand_model(tmp_path / "expand.onnx")
    before = _sha(model)
    proc = _cli(model, *QUICK, "-o", out_dir / "o.onnx", "--report", out_dir / "r.json",
                preexec=_limit_memory(8 << 30))
    assert proc.returncode == 2, proc.stderr
    _one_error_line(proc.stderr, "out of memory in the verify stage",
                    "could not allocate 4.0 TiB", "--input shapes", "more memory")
    assert _sha(model) == before
    assert list(out_dir.iterdir()) == [], "a failed run left what it had written"


def _script_model(path: Path) -> Path:
    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()).eval()
    torch.jit.script(module).save(str(path))
    return path


def test_huge_threads_are_clamped_with_a_note(tmp_path, out_dir):
    from export_gelu.options import machine_cpus

    rep = out_dir / "r.json"
    res = run_cli(_script_model(tmp_path / "m.pt"), "--input", "x:2x8", *QUICK,
                  "-o", out_dir / "o.onnx", "--report", rep, "--threads", "100000")
    assert res.code == 0, res.err
    report = json.loads(rep.read_text())
    assert report["threads"] == machine_cpus()
    assert any(n["code"] == "threads-clamped" and f"ran with {machine_cpus()}" in n["message"]
               for n in report["notes"])


@pytest.mark.slow
def test_huge_threads_run_answers_sigterm_within_5_seconds(tmp_path, out_dir):
    """SIGTERM a second into the timing of a run with --threads 100000 (clamped): the moment
    is the run's own progress line `… timing` on stderr (EXPORT_GELU_QUIET unset), not a
    guessed sleep, so the program spends no more than it must before the signal."""
    model = _script_model(tmp_path / "m.pt")
    before = _sha(model)
    env = {k: v for k, v in os.environ.items() if k != "EXPORT_GELU_QUIET"}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen(
        [sys.executable, "-m", "export_gelu.cli", str(model), "--input", "x:64x8",
         "--target", "ort", "-o", str(out_dir / "o.onnx"), "--report", str(out_dir / "r.json"),
         "--threads", "100000", "--iterations", "100000000"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    timing = threading.Event()

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("… timing"):
                timing.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    reached = timing.wait(timeout=300)  # imports, load, export, parity: then it times
    if not reached:
        proc.kill()
    assert reached and proc.poll() is None, "".join(lines)
    time.sleep(1)  # inside the timing loop, its threads busy
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    answered = time.monotonic() - sent
    reader.join(timeout=60)
    err = "".join(line for line in lines if not line.startswith("… "))
    assert proc.returncode == 143, "".join(lines)
    assert answered < 5, f"SIGTERM answered after {answered:.1f} s"
    assert "interrupted (SIGTERM)" in err
    assert _sha(model) == before and list(out_dir.iterdir()) == []


@pytest.mark.slow
def test_exit_2_while_writing_the_report_leaves_nothing(tmp_path, out_dir):
    """RLIMIT_FSIZE on this process while the CLI runs in it (`file_size_limit`)."""
    model = _script_model(tmp_path / "m.pt")
    before = _sha(model)
    with file_size_limit(40 << 10):
        res = run_cli(model, "--input", "x:2x8", *QUICK, "-o", out_dir / "o.onnx",
                      "--report", out_dir / "r.json", "--report-md", out_dir / "r.md")
    assert res.code == 2, res.err
    _one_error_line(res.err, "File too large (EFBIG)", str(out_dir / "r."))
    assert list(out_dir.iterdir()) == [], "a failed run left what it had written"
    assert _sha(model) == before


def test_the_report_lists_only_files_that_exist(tmp_path, out_dir):
    rep = out_dir / "r.json"
    res = run_cli(_script_model(tmp_path / "m.pt"), "--input", "x:2x8", *QUICK,
                  "-o", out_dir / "o.onnx", "--report", rep, "--report-md", out_dir / "r.md")
    assert res.code == 0, res.err
    written = json.loads(rep.read_text())["written"]
    assert str(out_dir / "r.md") in written and str(out_dir / "o.onnx") in written
    assert all(Path(p).exists() for p in written), written
    assert sorted(str(p) for p in out_dir.iterdir()) == sorted(written)


# ---------------------------------------------------------------- messages


def test_an_unknown_future_opset_is_exit_2_listing_the_known_ones(tmp_path, out_dir):
    graph = helper.make_graph([helper.make_node("Gelu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    model = tmp_path / "op99.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 99)]), str(model))
    before = _sha(model)
    res = run_cli(model, *QUICK, "-o", out_dir / "o.onnx")
    assert res.code == 2
    known = onnx.defs.onnx_opset_version()
    _one_error_line(res.err, "declares ONNX opset 99", f"it knows opsets 1 to {known}")
    assert _sha(model) == before and list(out_dir.iterdir()) == []


def test_a_dynamic_range_too_big_names_the_dynamic_flag(tmp_path, out_dir):
    model = _script_model(tmp_path / "m.pt")
    before = _sha(model)
    res = run_cli(model, "--input", "x:batchx8", *QUICK, "-o", out_dir / "o.onnx",
                  "--dynamic", "batch=1:1:1000000000000")
    assert res.code == 2
    line = _one_error_line(res.err, "--dynamic batch=1:1:1000000000000", "input 'x'",
                           "more than the", "lower the range")
    assert "--input" not in line and "500000000001x8:" not in line
    assert _sha(model) == before and list(out_dir.iterdir()) == []
