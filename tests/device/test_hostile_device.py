"""Security round 3, the device side: what a bundle, a device's outputs folder or a model's
names can make `--bundle` and `verify --device-outputs` do (docs/safety.md, "What comes back
from a device"). The box that runs a bundle is often shared, and what it hands back is copied
with `rsync -a`/`tar`/`scp`, which keep symlinks: every file it names is untrusted.

Every case copies a real device run (tests/device/conftest.py: the stand-in trtexec's run of
the tiny BERT's bundles) into a work folder, makes it hostile, and runs the real CLI and the
API. Each asserts exit 2 (never 4, never a hang) with one stderr line naming the file (and
the field), that a folder outside the work folder holding a secret was neither read (access
times) nor written (hashes, entries), that the secret was never printed, and that no output
was written.

| issue 40 | case |
|---|---|
| 1 | an input named `../../../../outside/victim`: `--bundle` writes `inputs/input_0.bin` |
| 2 | `outputs/<form>/build_failed.txt` a symlink to a secret |
| 3 | `-o BEST.onnx` of a form whose external data lies outside the bundle (`..`, a link) |
| 4 | a form named `../../…`; its graph `..`, absolute or a link out of the bundle |
| 6 | ESC/CR/OSC/HTML/backticks in build_failed.txt, outputs.json names, form names |
| 7 | manifest.json, outputs.json (both tools' forms), times files nested 100 000 deep |
| 8 | `computeMs: "abc"`, `startComputeMs: {}`, `warmup_ms: "abc"`, forms of strings, … |
| 9 | 1 MB of `nan(` in outputs.json; a 1 MB trtexec file rewritten right |
| 12 | the same form listed twice |
| 13 | `computeMs` -0.5 |
| 14 | a 512 MiB (sparse) build_failed.txt read from its tail only |
| every read | a symlink and a `..` path at each file verify reads from a bundle or device folder |
"""

from __future__ import annotations

import json
import os
import shutil
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import export_gelu
from export_gelu.device.outputs import _jsonable, read_trtexec_outputs
from export_gelu.errors import BadInputError
from export_gelu.untrusted_files import TAIL_BYTES, UntrustedFolder
from tests.conftest import run_cli
from tests.device.conftest import ATOL, sha, verify
from tests.hostile import Outside, atime_counts, no_raw_controls, one_error_line

pytest.importorskip("onnxruntime")

DEEP = 100_000
#: What a hostile name or log line holds: an OSC 8 link, a window title, a clear screen, a CR
#: that hides the line, a C1 CSI, a bidi override, HTML and a backtick.
HOSTILE = ("\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07 \x1b]0;pwned\x07\x1b[2J"
           "\x9b31m\u202e <img src=x onerror=alert(1)> `tick` [E] error")


@pytest.fixture(scope="module")
def counts(tmp_path_factory) -> bool:
    return atime_counts(tmp_path_factory.mktemp("probe"))


@pytest.fixture()
def forms_run(device_outputs, forms_bundle, tmp_path, counts) -> tuple[Path, Path, Outside]:
    """(model, a copy of the forms bundle's device run in TMP/run/B, the outside folder)."""
    model, _bundle = forms_bundle
    (tmp_path / "run").mkdir()
    ran = Path(shutil.copytree(device_outputs, tmp_path / "run" / "B"))
    return model, ran, Outside(tmp_path / "outside", counts)


@pytest.fixture()
def one_run(single_run, single_bundle, tmp_path, counts) -> tuple[Path, Path, Outside]:
    """(model, a copy of the single-graph bundle's device run in TMP/run/B, outside)."""
    model, _bundle = single_bundle
    (tmp_path / "run").mkdir()
    ran = Path(shutil.copytree(single_run, tmp_path / "run" / "B"))
    return model, ran, Outside(tmp_path / "outside", counts)


def _manifest(bundle: Path) -> dict:
    return json.loads((bundle / "manifest.json").read_text())


def _edit_manifest(bundle: Path, edit: Callable[[dict], object]) -> None:
    manifest = _manifest(bundle)
    edit(manifest)
    (bundle / "manifest.json").write_text(json.dumps(manifest))


def _form(manifest: dict, name: str) -> dict:
    return next(f for f in manifest["forms"] if f["form"] == name)


def _link_out(path: Path, outside: Outside, name: str | None = None) -> Path:
    """`path` moved out to the outside folder and a symlink left in its place."""
    target = outside.folder / (name or path.name)
    shutil.move(path, target)
    path.symlink_to(target, target_is_directory=target.is_dir())
    return target


def _hostile_run(model: Path, bundle: Path, outside: Outside, argv: list[str],
                 api: dict, words: tuple[str, ...]) -> None:
    """The CLI and the API on the hostile bundle: exit 2 / BadInputError naming `words`,
    nothing outside read or written, no output written (-o BEST.onnx asked of a forms
    bundle)."""
    work = bundle.parent
    out, rep = work / "best.onnx", work / "r.json"
    outside.arm()
    if "-o" not in argv and any(str(a).endswith(f"{os.sep}outputs") for a in argv):
        argv = [*argv, "-o", str(out)]
    res = run_cli("verify", model, *argv, "--report", rep)
    assert res.code == 2, res.err + res.out
    one_error_line(res.err, *words)
    outside.check(res.out, res.err)
    no_raw_controls(res.out, res.err)
    assert not out.exists() and not rep.exists()
    outside.arm()
    with pytest.raises(BadInputError) as caught:
        export_gelu.verify(model, **api)
    for word in words:
        assert word in str(caught.value), (word, str(caught.value))
    outside.check(str(caught.value))


def _forms_argv(bundle: Path) -> tuple[list[str], dict]:
    argv = ["--bundle", str(bundle), "--device-outputs", str(bundle / "outputs")]
    return argv, {"bundle": bundle, "device_outputs": bundle / "outputs"}


# -- every file verify reads from a forms bundle and its outputs folder: a link, a `..` path ---

def _manifest_linked(b: Path, o: Outside) -> None:
    _link_out(b / "manifest.json", o)


def _npz_linked(b: Path, o: Outside) -> None:
    _link_out(b / "inputs.npz", o)


def _graph_dotdot(b: Path, o: Outside) -> None:
    shutil.copyfile(b / "forms" / "tanh" / "model.onnx", o.folder / "tanh.onnx")
    _edit_manifest(b, lambda m: _form(m, "tanh")["graph"].update(file="../../outside/tanh.onnx"))


def _graph_absolute(b: Path, o: Outside) -> None:
    shutil.copyfile(b / "forms" / "tanh" / "model.onnx", o.folder / "tanh.onnx")
    _edit_manifest(b, lambda m: _form(m, "tanh")["graph"].update(file=str(o.folder / "tanh.onnx")))


def _graph_linked(b: Path, o: Outside) -> None:
    _link_out(b / "forms" / "tanh" / "model.onnx", o, "tanh.onnx")


def _outputs_linked(b: Path, o: Outside) -> None:
    _link_out(b / "outputs" / "tanh" / "outputs.json", o)


def _outputs_linked_inside(b: Path, o: Outside) -> None:
    """A link that stays inside: still no file of a device folder is a link."""
    (b / "outputs" / "tanh" / "outputs.json").unlink()
    (b / "outputs" / "tanh" / "outputs.json").symlink_to("../keep/outputs.json")


def _times_linked(b: Path, o: Outside) -> None:
    _link_out(b / "outputs" / "tanh" / "times.1.json", o)


def _build_failed_linked(b: Path, o: Outside) -> None:
    folder = b / "outputs" / "plugin"
    shutil.rmtree(folder)
    folder.mkdir()
    (folder / "build_failed.txt").symlink_to(o.secret)


def _log_linked(b: Path, o: Outside) -> None:
    _link_out(b / "outputs" / "keep" / "trtexec.log", o)


def _form_folder_linked(b: Path, o: Outside) -> None:
    _link_out(b / "outputs" / "tanh", o, "tanh-outputs")


def _form_named_dotdot(b: Path, o: Outside) -> None:
    shutil.copytree(b / "outputs" / "tanh", o.folder / "x")
    _edit_manifest(b, lambda m: _form(m, "tanh").update(form="../../outside/x"))


FORMS_CASES = {
    "manifest.json a link": (_manifest_linked, ("manifest.json", "leads out of the bundle")),
    "inputs.npz a link": (_npz_linked, ("inputs.npz", "leads out of the bundle")),
    "a form's graph `..`": (_graph_dotdot, ("manifest.json: forms[1].graph.file",
                                            "../../outside/tanh.onnx",
                                            "not a path inside the bundle")),
    "a form's graph absolute": (_graph_absolute, ("manifest.json: forms[1].graph.file",
                                                  "not a path inside")),
    "a form's graph a link": (_graph_linked, ("forms/tanh/model.onnx",
                                              "leads out of the bundle")),
    "outputs.json a link": (_outputs_linked, ("tanh/outputs.json", "leads out of the device")),
    "outputs.json a link inside": (_outputs_linked_inside, ("tanh/outputs.json",
                                                           "is a symbolic link")),
    "times.1.json a link": (_times_linked, ("tanh/times.1.json", "leads out of the device")),
    "build_failed.txt a link": (_build_failed_linked, ("plugin/build_failed.txt",
                                                       "leads out of the device")),
    "trtexec.log a link": (_log_linked, ("keep/trtexec.log", "leads out of the device")),
    "a form's outputs folder a link": (_form_folder_linked, ("tanh/outputs.json",
                                                             "leads out of the device folder")),
    "a form named `..`": (_form_named_dotdot, ("manifest.json: forms[1].form",
                                               "not a GELU form export-gelu writes")),
}


@pytest.mark.parametrize("case", FORMS_CASES)
def test_forms_bundle_reads_stay_inside_the_bundle(forms_run, case):
    """Issue 40, defects 2 and 4, and every other read of a forms bundle and its outputs."""
    model, bundle, outside = forms_run
    mutate, words = FORMS_CASES[case]
    mutate(bundle, outside)
    argv, api = _forms_argv(bundle)
    _hostile_run(model, bundle, outside, argv, {**api, "atol": float(ATOL)}, words)


# -- every file verify reads from a one-graph bundle: a link, a `..` path --------------------

def _one_graph_linked(b: Path, o: Outside) -> None:
    _link_out(b / "model.onnx", o)


def _one_outputs_linked(b: Path, o: Outside) -> None:
    _link_out(b / "outputs.json", o)


def _one_times_linked(b: Path, o: Outside) -> None:
    _link_out(b / "times.json", o)


def _one_log_linked(b: Path, o: Outside) -> None:
    _link_out(b / "trtexec.log", o)


def _one_npz_linked(b: Path, o: Outside) -> None:
    _link_out(b / "inputs.npz", o)


def _one_external_data_dotdot(b: Path, o: Outside) -> None:
    """The graph's weights moved out of the bundle, its locations pointing there (`..`), its
    hash in the manifest updated (the manifest is the device's too)."""
    graph = b / "model.onnx"
    model = onnx.load(str(graph))
    onnx.save(model, str(graph), save_as_external_data=True, location="w.bin",
              size_threshold=0)
    shutil.move(b / "w.bin", o.folder / "w.bin")
    model = onnx.load(str(graph), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../../outside/w.bin"
    onnx.save(model, str(graph))
    _edit_manifest(b, lambda m: m["graph"].update(sha256=sha(graph)))


ONE_CASES = {
    "model.onnx a link": (_one_graph_linked, ("model.onnx", "leads out of the bundle")),
    "outputs.json a link": (_one_outputs_linked, ("outputs.json", "leads out of the folder")),
    "times.json a link": (_one_times_linked, ("times.json", "leads out of the folder")),
    "trtexec.log a link": (_one_log_linked, ("trtexec.log", "leads out of the folder")),
    "inputs.npz a link": (_one_npz_linked, ("inputs.npz", "leads out of the bundle")),
    "external data `..`": (_one_external_data_dotdot, ("../../outside/w.bin",
                                                       "outside the model's folder")),
}


@pytest.mark.parametrize("case", ONE_CASES)
def test_one_graph_bundle_reads_stay_inside_the_bundle(one_run, case):
    model, bundle, outside = one_run
    mutate, words = ONE_CASES[case]
    mutate(bundle, outside)
    argv = ["--bundle", str(bundle), "--device-outputs", str(bundle / "outputs.json"),
            "--device-times", str(bundle / "times.json")]
    api = {"bundle": bundle, "device_outputs": bundle / "outputs.json",
           "device_times": bundle / "times.json"}
    _hostile_run(model, bundle, outside, argv, api, words)


# -- defect 3: -o BEST.onnx copies external data only from inside the bundle -----------------

@pytest.mark.parametrize("how", ["..", "link"])
def test_chosen_graph_external_data_outside_the_bundle_is_never_copied(forms_run, how):
    """tanh (the fastest, chosen) keeps its weights in a file outside the bundle: reached by a
    `..` location, or by a .data file beside it that is a symlink out."""
    model, bundle, outside = forms_run
    for n in (1, 2):  # tanh measured fastest beyond noise, so it is the form -o writes
        times = bundle / "outputs" / "tanh" / f"times.{n}.json"
        entries = json.loads(times.read_text())
        times.write_text(json.dumps([{**e, "computeMs": e["computeMs"] / 2} for e in entries]))
    graph = bundle / "forms" / "tanh" / "model.onnx"
    onnx.save(onnx.load(str(graph)), str(graph), save_as_external_data=True,
              location="model.onnx.data", size_threshold=0)
    secret = outside.file("weights.bin", (graph.parent / "model.onnx.data").read_bytes())
    (graph.parent / "model.onnx.data").unlink()
    if how == "link":
        (graph.parent / "model.onnx.data").symlink_to(secret)
    else:
        proto = onnx.load(str(graph), load_external_data=False)
        for tensor in proto.graph.initializer:
            for entry in tensor.external_data:
                if entry.key == "location":
                    entry.value = "../../../../outside/weights.bin"
        onnx.save(proto, str(graph))
    _edit_manifest(bundle, lambda m: _form(m, "tanh")["graph"].update(sha256=sha(graph)))
    argv, api = _forms_argv(bundle)
    _hostile_run(model, bundle, outside, [*argv, "--atol", ATOL, "-o",
                                          str(bundle.parent / "best.onnx")],
                 {**api, "atol": float(ATOL), "output": bundle.parent / "best.onnx"},
                 ("forms/tanh/model.onnx", "outside the model's folder"))
    assert not (bundle.parent / "best.onnx.data").exists()


# -- defects 7, 8, 12, 13: what the device's JSON holds --------------------------------------

def _deep(opener: str = "[") -> str:
    """JSON nested DEEP levels: lists (trtexec's form) or objects (polygraphy's)."""
    if opener == "[":
        return "[" * DEEP + "1" + "]" * DEEP
    return '{"a":' * DEEP + "1" + "}" * DEEP


def _write(path: Path, text: str) -> None:
    path.write_text(text)


def _times_entries(b: Path, edit: Callable[[list], object]) -> None:
    path = b / "outputs" / "tanh" / "times.1.json"
    entries = json.loads(path.read_text())
    edit(entries)
    path.write_text(json.dumps(entries))


def _duplicate_form(m: dict) -> None:
    """A second `tanh` entry whose graph is sigmoid's (one that might fail on the device)."""
    m["forms"].append({**_form(m, "tanh"), "graph": dict(_form(m, "sigmoid")["graph"])})


JSON_CASES = {
    "manifest.json nested": (
        lambda b: _write(b / "manifest.json", _deep()), ("manifest.json", "nested 100000")),
    "outputs.json nested (trtexec's form)": (
        lambda b: _write(b / "outputs" / "tanh" / "outputs.json", _deep()),
        ("tanh/outputs.json", "nested")),
    "outputs.json nested (polygraphy's form)": (
        lambda b: _write(b / "outputs" / "tanh" / "outputs.json", _deep("{")),
        ("tanh/outputs.json", "nested")),
    "times.1.json nested": (
        lambda b: _write(b / "outputs" / "tanh" / "times.1.json", _deep()),
        ("tanh/times.1.json", "nested")),
    "computeMs a string": (
        lambda b: _times_entries(b, lambda e: e[3].update(computeMs="abc")),
        ("times.1.json: [3].computeMs is a string", "not a number")),
    "startComputeMs an object": (
        lambda b: _times_entries(b, lambda e: e[0].update(startComputeMs={})),
        ("times.1.json: [0].startComputeMs is an object", "not a number")),
    "computeMs negative": (
        lambda b: _times_entries(b, lambda e: e[-1].update(computeMs=-0.5)),
        ("times.1.json: [", "].computeMs is -0.5, below 0")),
    "computeMs Infinity": (
        lambda b: _write(b / "outputs" / "tanh" / "times.1.json",
                         '[{"startComputeMs": 300, "computeMs": Infinity}]'),
        ("[0].computeMs is inf", "not a finite number")),
    "warmup_ms a string": (
        lambda b: _edit_manifest(b, lambda m: m["trtexec"].update(warmup_ms="abc")),
        ("manifest.json: trtexec.warmup_ms is a string", "not a number")),
    "forms a list of strings": (
        lambda b: _edit_manifest(b, lambda m: m.update(forms=["keep", "tanh"])),
        ("manifest.json: forms[0] is a string", "not an object")),
    "the same form twice": (
        lambda b: _edit_manifest(b, _duplicate_form),
        ("manifest.json: forms[4].form", "form tanh is listed twice")),
    "tolerances a string": (
        lambda b: _edit_manifest(b, lambda m: m["tolerances"].update(atol="0.1")),
        ("manifest.json: tolerances.atol is a string",)),
    "precision unknown": (
        lambda b: _edit_manifest(b, lambda m: m.update(precision="fp99")),
        ("manifest.json: precision is 'fp99'",)),
    "tensorrt not a version": (
        lambda b: _edit_manifest(b, lambda m: m.update(tensorrt="8.6\x1b[2J")),
        ("manifest.json: tensorrt is", "not a TensorRT version")),
    "an output name not a string": (
        lambda b: _write(b / "outputs" / "tanh" / "outputs.json",
                         '[{"name": 3, "dimensions": "1", "values": [0]}]'),
        ("[0].name is not a string",)),
    "dimensions of 5000 digits": (
        lambda b: _write(b / "outputs" / "tanh" / "outputs.json",
                         '[{"name": "y", "dimensions": "' + "9" * 5000 + '", "values": [0]}]'),
        ("not trtexec's AxBxC form",)),
}


@pytest.mark.parametrize("case", JSON_CASES)
def test_device_json_is_checked_for_depth_type_and_range(forms_run, case):
    """Issue 40, defects 7 (nesting), 8 (types), 12 (a form twice), 13 (negative times):
    exit 2 naming the file and the field, never exit 4."""
    model, bundle, outside = forms_run
    mutate, words = JSON_CASES[case]
    mutate(bundle)
    argv, api = _forms_argv(bundle)
    _hostile_run(model, bundle, outside, [*argv, "--atol", ATOL],
                 {**api, "atol": float(ATOL)}, words)


def test_one_graph_device_json_nested_or_mistyped_is_exit_2(one_run):
    model, bundle, outside = one_run
    argv = ["--bundle", str(bundle), "--device-outputs", str(bundle / "outputs.json"),
            "--device-times", str(bundle / "times.json")]
    api = {"bundle": bundle, "device_outputs": bundle / "outputs.json",
           "device_times": bundle / "times.json"}
    good = (bundle / "times.json").read_text()
    (bundle / "times.json").write_text(_deep())
    _hostile_run(model, bundle, outside, argv, api, ("--device-times", "nested"))
    entries = json.loads(good)
    entries[-1]["computeMs"] = -0.5
    (bundle / "times.json").write_text(json.dumps(entries))
    _hostile_run(model, bundle, outside, argv, api, ("].computeMs is -0.5, below 0",))
    (bundle / "times.json").write_text(good)
    (bundle / "outputs.json").write_text(_deep("{"))
    _hostile_run(model, bundle, outside, argv, api, ("--device-outputs", "nested"))


# -- defect 9: the nan/inf rewrite is linear -------------------------------------------------

def test_a_megabyte_of_nan_parens_is_exit_2_not_minutes(forms_run):
    """1 MB of `nan(` (each scanned to the file's end before: minutes); the rewrite now takes
    one pass. The time is not asserted (benchmarks measure); the result is."""
    model, bundle, outside = forms_run
    (bundle / "outputs" / "tanh" / "outputs.json").write_text("[" + "nan(" * 262_144)
    argv, api = _forms_argv(bundle)
    _hostile_run(model, bundle, outside, argv, api, ("tanh/outputs.json", "not valid JSON",
                                                     "truncated"))


def test_a_megabyte_of_trtexec_values_is_rewritten_right():
    """~1 MB as trtexec prints it, every non-finite spelling among the values, a name holding
    `nan`, quotes and brackets: read back value for value."""
    rng = np.random.default_rng(0)
    values = rng.standard_normal(330 * 330)
    spellings = {7: ("nan", np.nan), 11: ("-nan", np.nan), 13: ("inf", np.inf),
                 17: ("-inf", -np.inf), 19: ("nan(0x7fc00000)", np.nan), 23: ("NaN", np.nan)}
    text_values = []
    for i, v in enumerate(values):
        word, value = spellings.get(i % 29, (f"{v:.6g}", float(f"{v:.6g}")))
        text_values.append(word)
        values[i] = value
    name = 'y nan [inf] \\"nan\\"'
    text = ('[\n  { "name" : "' + name + '"\n  , "dimensions" : "330x330"\n  , "values" : [ '
            + ", ".join(text_values) + " ]\n  }\n]\n")
    assert len(text) > 900_000
    out = read_trtexec_outputs("t.json", text)
    assert list(out) == ['y nan [inf] "nan"']
    np.testing.assert_array_equal(out['y nan [inf] "nan"'].ravel(), values)
    assert _jsonable('"nan(" nan("') == '"nan(" nan("'  # left as it was: not JSON


# -- defect 14: build_failed.txt is read from its tail -----------------------------------------

def test_a_512_mib_build_failed_txt_is_read_from_its_tail(forms_run):
    """A sparse 512 MiB build_failed.txt ending in trtexec's error: the verdict names that
    line; the reader holds at most its tail (TAIL_BYTES) in memory (peak measured by
    tracemalloc around the read: it was the whole file, twice)."""
    model, bundle, _outside = forms_run
    folder = bundle / "outputs" / "plugin"
    shutil.rmtree(folder)
    folder.mkdir()
    failed = folder / "build_failed.txt"
    with failed.open("wb") as fh:
        fh.truncate(512 << 20)
        fh.seek((512 << 20) - 64)
        fh.write(b"\n[E] getPluginCreator could not find plugin\n".rjust(64, b" "))
    returned = UntrustedFolder(bundle / "outputs", "--device-outputs", "device folder")
    tracemalloc.start()
    try:
        text = returned.tail_text("plugin/build_failed.txt")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * TAIL_BYTES, peak
    assert text.rstrip().endswith("[E] getPluginCreator could not find plugin")
    res = verify(model, bundle, "--atol", ATOL, "--report", bundle.parent / "r.json")
    assert res.code == 0, res.err + res.out
    rows = {r["form"]: r for r in json.loads((bundle.parent / "r.json").read_text())["forms"][
        "rows"]}
    assert rows["plugin"]["built"] is False
    assert rows["plugin"]["build_error"] == "[E] getPluginCreator could not find plugin"


def test_the_cli_holds_memory_bounded_on_a_512_mib_build_failed_txt(forms_run):
    """The whole verify, traced: below the file's size (it read it whole, as bytes and as
    text: over 1 GB; the run itself peaks near 280 MB here, mostly torch's imports)."""
    model, bundle, _outside = forms_run
    folder = bundle / "outputs" / "plugin"
    shutil.rmtree(folder)
    folder.mkdir()
    with (folder / "build_failed.txt").open("wb") as fh:
        fh.truncate(512 << 20)
    tracemalloc.start()
    try:
        res = verify(model, bundle, "--atol", ATOL, "--iterations", "0")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert res.code == 0, res.err + res.out
    assert peak < 512 << 20, peak


# -- defect 6: what the device wrote reaches the terminal and the report as text -------------

def test_hostile_text_in_build_failed_txt_is_shown_as_text(forms_run):
    model, bundle, outside = forms_run
    folder = bundle / "outputs" / "plugin"
    shutil.rmtree(folder)
    folder.mkdir()
    (folder / "build_failed.txt").write_text(f"trtexec exited 1\nover\rwritten\n{HOSTILE}\n")
    md, js = bundle.parent / "r.md", bundle.parent / "r.json"
    res = verify(model, bundle, "--atol", ATOL, "--report-md", md, "--report", js)
    assert res.code == 0, res.err + res.out
    no_raw_controls(res.out, res.err, md.read_text())
    assert "not built: \\x1b]8;;http://evil.example/\\x07click" in res.out
    markdown = md.read_text()
    row = next(ln for ln in markdown.splitlines() if ln.startswith("| plugin |"))
    start, end = row.index("no: ``") + 6, row.rindex("`` |")  # a longer fence than `tick`
    assert start < row.index("<img") < row.index("`tick`") < end  # HTML only inside the span
    assert markdown.count("<img") == 1
    rows = {r["form"]: r for r in json.loads(js.read_text())["forms"]["rows"]}
    assert rows["plugin"]["build_error"] == HOSTILE.strip()  # the data, as the device said it


def test_hostile_output_names_from_the_device_are_shown_as_text(forms_run):
    model, bundle, outside = forms_run
    path = bundle / "outputs" / "tanh" / "outputs.json"
    outputs = read_trtexec_outputs(path, path.read_text())
    path.write_text(json.dumps([  # the names JSON-escaped: a device may write them so
        {"name": HOSTILE + name, "dimensions": "x".join(map(str, a.shape)),
         "values": a.ravel().tolist()} for name, a in outputs.items()]))
    argv, api = _forms_argv(bundle)
    _hostile_run(model, bundle, outside, [*argv, "--atol", ATOL], {**api, "atol": float(ATOL)},
                 ("tanh/outputs.json", "are not the graph's", "\\x1b]8;;http"))


def test_a_hostile_form_name_in_the_manifest_is_refused_as_text(forms_run):
    model, bundle, outside = forms_run
    _edit_manifest(bundle, lambda m: _form(m, "sigmoid").update(form=HOSTILE))
    argv, api = _forms_argv(bundle)
    _hostile_run(model, bundle, outside, argv, api,
                 ("forms[2].form is", "\\x1b]8;;http", "not a GELU form"))


# -- defect 1: a model's input names are never path parts of the bundle ----------------------

def _named_input_model(path: Path, name: str) -> Path:
    """An ONNX graph y = Relu(x·2) whose input is named `name`."""
    graph = helper.make_graph(
        [helper.make_node("Mul", [name, "two"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
        "g", [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("via", ["cli", "api"])
def test_an_input_named_like_a_path_writes_inside_the_bundle(tmp_path, counts, via):
    """The input `../../../../outside/victim` (issue 40, defect 1): its raw file is
    inputs/input_0.bin, the manifest records the mapping, and nothing outside changes."""
    name = "../../../../outside/victim"
    work = tmp_path / "work"
    work.mkdir()
    outside = Outside(tmp_path / "outside", counts)
    victim = outside.file("victim.bin", b"the user's own file")
    model = _named_input_model(work / "m.onnx", name)
    outside.arm()
    bundle, out = work / "B", work / "m.trt.onnx"
    if via == "cli":
        res = run_cli(model, "--target", "trt8.2", "--bundle", bundle, "-o", out,
                      "--iterations", "0")
        assert res.code == 0, res.err + res.out
    else:
        rep = export_gelu.export(model, target="trt8.2", bundle=bundle, output=out,
                                 iterations=0)
        assert rep.exit_code == 0
    outside.check()
    assert victim.read_bytes() == b"the user's own file"
    assert sorted(p.name for p in (bundle / "inputs").iterdir()) == ["input_0.bin"]
    (row,) = _manifest(bundle)["inputs"]
    assert row["name"] == name and row["file"] == "inputs/input_0.bin"
    script = (bundle / "run_on_device.sh").read_text()
    assert f"--loadInputs={name}:inputs/input_0.bin" in script
    raw = np.fromfile(bundle / "inputs" / "input_0.bin", dtype="<f4")
    assert raw.size == 16 and row["bytes"] == 64
    assert os.path.realpath(bundle / row["file"]).startswith(os.path.realpath(bundle))
