"""Every file a run writes is checked before any work (export_gelu/output_plan.py,
docs/outputs.md): two outputs, or an output and an input, that are one file (or one inside a
folder the other replaces) exit 2 naming both flags, with nothing written and the input
byte-identical; `--bundle` replaces only an export-gelu bundle, and only its own files."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import onnx
import pytest

from export_gelu import export, verify
from export_gelu.errors import BadInputError
from export_gelu.options import ExportOptions
from tests.conftest import run_cli
from tests.onnx_graphs import hand_graph

TRT = "trt8.2"  # a TensorRT target this machine cannot build: --bundle is what it offers


# -- the files of a run directory -------------------------------------------------------------

def snapshot(folder: Path) -> dict[str, str]:
    """Every entry below `folder` (hidden ones too): a file's SHA-256, a link's target, 'dir'."""
    found = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink():
            found[rel] = "-> " + os.readlink(path)
        elif path.is_dir():
            found[rel] = "dir"
        else:
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def save_onnx(path: Path, data: str | None = None) -> Path:
    """A small ONNX graph (MatMul + tanh GELU) at `path`; its weights in `data` (relative to
    the graph's folder) when given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    model = hand_graph("tanh x*x*x")
    if data is None:
        onnx.save(model, str(path))
    else:
        (path.parent / data).parent.mkdir(parents=True, exist_ok=True)
        onnx.save_model(model, str(path), save_as_external_data=True,
                        all_tensors_to_one_file=True, location=data, size_threshold=0)
    return path


def flag_named(message: str, flag: str) -> bool:
    """`flag` appears in `message` as itself (`--report` is not named by `--report-md`)."""
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", message) is not None


# -- the members of a collision ---------------------------------------------------------------

@dataclass(frozen=True)
class Member:
    """One path a run writes or reads, placed at a path T the test chooses."""

    name: str  # how the test id names it
    flag: str  # the flag its refusal must name
    suffix: str = ""  # T must end with this (a derived name); "" = any name
    group: str = ""  # members of one group never collide (an output and what it derives)
    role: str = "out"  # out | folder | in-bundle | model | model-data | deployed | deployed-data


def _out(flag: str, suffix: str = "", group: str = "") -> Member:
    return Member(flag, flag, suffix, group)


EXPORT_MEMBERS = [
    _out("-o", group="-o"),
    Member("-o's .data", "-o", ".data", "-o"),
    _out("--report"),
    _out("--report-md", group="md"),
    Member("--report-md's plot", "--report-md", ".errors.png", "md"),
    _out("--engine"),
    Member("--bundle", "--bundle", group="bundle", role="folder"),
    Member("a file in --bundle", "--bundle", group="bundle", role="in-bundle"),
    Member("MODEL", "MODEL", group="input", role="model"),
    Member("MODEL's .data", "MODEL", group="input", role="model-data"),
]
VERIFY_MEMBERS = [
    _out("--report"),
    _out("--report-md", group="md"),
    Member("--report-md's plot", "--report-md", ".errors.png", "md"),
    _out("--save-inputs", ".json"),
    _out("--save-outputs", ".json"),
    Member("--bundle", "--bundle", group="bundle", role="folder"),
    Member("a file in --bundle", "--bundle", group="bundle", role="in-bundle"),
    Member("MODEL", "MODEL", group="input", role="model"),
    Member("MODEL's .data", "MODEL", group="input", role="model-data"),
    Member("DEPLOYED", "DEPLOYED", group="input", role="deployed"),
    Member("DEPLOYED's .data", "DEPLOYED", group="input", role="deployed-data"),
]


def pairs(members: list[Member]) -> list[tuple[Member, Member]]:
    return [(a, b) for a, b in itertools.combinations(members, 2)
            if not (a.group and a.group == b.group)]


class Run:
    """The command line of one case, built member by member in `work`."""

    def __init__(self, work: Path, command: str, torch_model: Path | None) -> None:
        self.work, self.command, self.torch_model = work, command, torch_model
        self.model: Path | None = None
        self.model_data = "m.onnx.data"
        self.deployed: Path | None = None
        self.deployed_data = "d.onnx.data"
        self.flags: list[str | Path] = []

    def place(self, m: Member, target: Path) -> None:
        """Make `m`'s path `target`."""
        if m.role == "model":
            self.model = target
            self.model_data = target.name + ".data"
        elif m.role == "model-data":
            self.model_data = os.path.relpath(target, self.work)
        elif m.role == "deployed":
            self.deployed = target
            self.deployed_data = target.name + ".data"
        elif m.role == "deployed-data":
            self.deployed_data = os.path.relpath(target, self.work)
        elif m.role in ("folder", "in-bundle"):
            self.flags += ["--bundle", target if m.role == "folder" else target.parent]
        elif m.name == "-o's .data":
            self.flags += ["-o", target.with_name(target.name[:-len(".data")])]
        elif m.name == "--report-md's plot":
            self.flags += ["--report-md", target.with_name(target.name[:-len(m.suffix)] + ".md")]
        else:
            self.flags += [m.flag, target]

    def argv(self) -> list[str | Path]:
        """Write the inputs and return the command line."""
        if self.torch_model is not None and self.command == "export":
            model = self.model or self.work / "m.pt"
            model.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.torch_model, model)
        else:
            model = save_onnx(self.model or self.work / "m.onnx", self.model_data)
            if self.model is None:  # the data of a graph at its default place: beside it
                self.model = model
        if self.command == "export":
            return [model, "--target", TRT, "--no-verify", "--iterations", "0", *self.flags]
        deployed = save_onnx(self.deployed or self.work / "d.onnx", self.deployed_data)
        return ["verify", model, deployed, "--target", "trt8.2.3", "--iterations", "0",
                *self.flags]


#: A file in --bundle, by the name the other member needs: the bundle's own where one fits.
IN_BUNDLE_NAMES = {"": "model.onnx", ".json": "inputs.json", ".data": "model.onnx.data",
                   ".errors.png": "model.errors.png"}


def build(work: Path, command: str, torch_model: Path | None, a: Member, b: Member,
          earlier: Path) -> list[str | Path]:
    """The command line on which `a` and `b` are one path: by name where their derived names
    allow it, else through a symlink. A file in --bundle is one in a copy of `earlier`, a
    bundle written by an earlier run."""
    run = Run(work, command, torch_model)
    if a.suffix and b.suffix and a.suffix != b.suffix:  # no name ends in both: a link
        real = work / f"t{a.suffix}"
        real.write_bytes(b"an earlier run's file")
        link = work / f"u{b.suffix}"
        link.symlink_to(real.name)
        run.place(a, real)
        run.place(b, link)
        return run.argv()
    model_named = any(m.role == "model" for m in (a, b)) and torch_model is not None
    suffix = a.suffix or b.suffix
    if any(m.role == "in-bundle" for m in (a, b)):
        shutil.copytree(earlier, work / "b", symlinks=True)
        target = work / "b" / IN_BUNDLE_NAMES[suffix]
    else:
        target = work / ("t" + (suffix or (".pt" if model_named else ".onnx")))
    if any(m.role in ("model", "model-data", "deployed", "deployed-data") for m in (a, b)):
        target.parent.mkdir(parents=True, exist_ok=True)
    for m in (a, b):
        run.place(m, target)
    return run.argv()


def assert_refused(work: Path, argv: list, a: Member, b: Member) -> None:
    before = snapshot(work)
    res = run_cli(*argv)
    assert res.code == 2, (res.code, res.err, res.out)
    assert res.err.startswith("export-gelu: error: ") and res.err.count("\n") == 1, res.err
    assert flag_named(res.err, a.flag) and flag_named(res.err, b.flag), res.err
    assert snapshot(work) == before, "the refused run wrote or changed a file"


@pytest.fixture(scope="module")
def torch_model(saved_model) -> Path:
    return saved_model("lstm", "exported")


@pytest.fixture(scope="module")
def earlier(tmp_path_factory) -> Path:
    """A bundle an earlier run wrote (copied into each case that puts a file in --bundle)."""
    d = tmp_path_factory.mktemp("earlier")
    res = run_cli(save_onnx(d / "m.onnx"), "--target", TRT, "-o", d / "o.onnx", "--no-verify",
                  "--bundle", d / "b")
    assert res.code == 0, res.err
    return d / "b"


EXPORT_PAIRS = pairs(EXPORT_MEMBERS)
TORCH_PAIRS = pairs([m for m in EXPORT_MEMBERS if m.role != "model-data"])
VERIFY_PAIRS = pairs(VERIFY_MEMBERS)


def _ids(cases: list[tuple[Member, Member]]) -> list[str]:
    return [f"{a.name} = {b.name}" for a, b in cases]


@pytest.mark.parametrize("a, b", EXPORT_PAIRS, ids=_ids(EXPORT_PAIRS))
def test_export_of_an_onnx_file_refuses_colliding_paths(tmp_path, earlier, a, b):
    assert_refused(tmp_path, build(tmp_path, "export", None, a, b, earlier), a, b)


@pytest.mark.parametrize("a, b", TORCH_PAIRS, ids=_ids(TORCH_PAIRS))
def test_export_of_a_torch_model_refuses_colliding_paths(tmp_path, torch_model, earlier, a, b):
    assert_refused(tmp_path, build(tmp_path, "export", torch_model, a, b, earlier), a, b)


@pytest.mark.parametrize("a, b", VERIFY_PAIRS, ids=_ids(VERIFY_PAIRS))
def test_verify_refuses_colliding_paths(tmp_path, earlier, a, b):
    assert_refused(tmp_path, build(tmp_path, "verify", None, a, b, earlier), a, b)


def test_the_matrix_covers_every_pair():
    """10 export members (9 for a torch model, which has no .data), 11 verify members; pairs
    within one group (an output and what it derives, two inputs) cannot collide."""
    assert len(EXPORT_PAIRS) == 45 - 4 and len(TORCH_PAIRS) == 36 - 3
    assert len(VERIFY_PAIRS) == 55 - 2 - 6


@pytest.mark.parametrize("command", ["export-onnx", "export-torch", "verify"])
def test_the_same_paths_apart_run(tmp_path, torch_model, command):
    """Control: every output at its own path, the same kind of command line runs (exit 0), so
    the refusals above come from the collisions alone (--engine needs TensorRT here)."""
    outs = tmp_path / "outs"
    outs.mkdir()
    run = Run(tmp_path, command.split("-")[0], torch_model if command == "export-torch" else None)
    flags = ["--report", outs / "r.json", "--report-md", outs / "r.md", "--bundle", outs / "b"]
    if command == "verify":
        flags += ["--save-inputs", outs / "i.json", "--save-outputs", outs / "o.json"]
    else:
        flags += ["-o", outs / "o.onnx"]
    run.flags = flags
    res = run_cli(*run.argv())
    assert res.code == 0, res.err + res.out
    assert (outs / "b" / "manifest.json").is_file() and (outs / "r.json").is_file()
    assert (outs / "r.md").is_file()


# -- the paths are compared resolved ----------------------------------------------------------

@pytest.mark.parametrize("spelling", ["dotdot", "symlink", "hardlink"])
def test_an_output_spelled_otherwise_is_still_the_input(tmp_path, spelling):
    model = save_onnx(tmp_path / "m.onnx")
    (tmp_path / "sub").mkdir()
    out = {"dotdot": tmp_path / "sub" / ".." / "m.onnx",
           "symlink": tmp_path / "sub" / "link.onnx",
           "hardlink": tmp_path / "sub" / "hard.onnx"}[spelling]
    if spelling == "symlink":
        out.symlink_to(model)
    elif spelling == "hardlink":
        os.link(model, out)
    before = snapshot(tmp_path)
    res = run_cli(model, "--target", "ort", "-o", out, "--no-verify")
    assert res.code == 2 and "would overwrite the input MODEL" in res.err, res.err
    assert snapshot(tmp_path) == before


def test_the_api_refuses_what_the_cli_refuses(tmp_path):
    model = save_onnx(tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    res = run_cli(model, "--target", "ort", "-o", out, "--report-md", out, "--no-verify")
    with pytest.raises(BadInputError) as info:
        export(model, options=ExportOptions(target="ort", output=str(out), report_md=str(out),
                                            verify=False))
    assert res.code == 2 and res.err == f"export-gelu: error: {info.value}\n"
    assert str(info.value) == f"-o and --report-md name the same file {out}"
    with pytest.raises(BadInputError, match="--report and --save-inputs name the same file"):
        verify(model, model, report=tmp_path / "r.json", save_inputs=tmp_path / "r.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_compare_forms_and_gelu_auto_check_their_reports(tmp_path, torch_model):
    """The forms paths take the same checks, before any form is exported."""
    model = tmp_path / "m.pt"
    shutil.copyfile(torch_model, model)
    plot_over_model = tmp_path / "m.errors.png"
    shutil.copyfile(model, plot_over_model)
    before = snapshot(tmp_path)
    res = run_cli(plot_over_model, "--compare-forms", "--report-md", tmp_path / "m.md")
    assert res.code == 2 and "--report-md's plot" in res.err and "MODEL" in res.err, res.err
    res = run_cli(model, "--gelu", "auto", "--target", "onnx", "-o", tmp_path / "o.onnx",
                  "--report", tmp_path / "o.onnx")
    assert res.code == 2 and "-o and --report name the same file" in res.err, res.err
    assert snapshot(tmp_path) == before


def test_device_verify_reads_the_bundle_it_may_not_write_into(tmp_path, torch_model):
    """verify --device-outputs reads the bundle: a report over one of its files, or over the
    device's outputs, is refused; a report beside them is fine (nothing checks it here)."""
    bundle = tmp_path / "b"
    res = run_cli(torch_model, "--target", TRT, "-o", tmp_path / "m.onnx", "--no-verify",
                  "--bundle", bundle)
    assert res.code == 0, res.err
    outs = bundle / "outputs.json"
    outs.write_text("{}")
    before = snapshot(tmp_path)
    for report, named in ((bundle / "manifest.json", "--bundle's file"),
                          (outs, "--device-outputs")):
        res = run_cli("verify", torch_model, "--bundle", bundle, "--device-outputs", outs,
                      "--report", report)
        assert res.code == 2 and f"--report {report} would overwrite the input {named}" in \
            res.err, res.err
    assert snapshot(tmp_path) == before


# -- --bundle DIR: only an export-gelu bundle is replaced, and only its own files --------------

#: case → (manifest.json's text, what the refusal says)
FOREIGN_MANIFESTS = {
    "no manifest": (None, "is not an export-gelu bundle (no manifest.json)"),
    "another tool's manifest": ('{"name": "my-app", "version": "1.0"}\n',
                                "manifest.json is not an export-gelu bundle manifest"),
    "not JSON": ("format: export-gelu device bundle\n", "manifest.json: not valid JSON"),
    "a newer bundle version": (json.dumps({"format": "export-gelu device bundle",
                                           "bundle_version": 99, "files": []}),
                               "manifest.json has bundle_version 99"),
}


@pytest.mark.parametrize("case", list(FOREIGN_MANIFESTS))
@pytest.mark.parametrize("command", ["export", "verify"])
def test_a_folder_that_is_not_our_bundle_is_left_untouched(tmp_path, case, command):
    model = save_onnx(tmp_path / "m.onnx")
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"the user's own model")
    (folder / "notes.txt").write_text("mine")
    text, says = FOREIGN_MANIFESTS[case]
    if text is not None:
        (folder / "manifest.json").write_text(text)
    before = snapshot(tmp_path)
    argv = ([model, "--target", TRT, "-o", tmp_path / "o.onnx", "--no-verify"]
            if command == "export" else ["verify", model, model, "--target", "trt8.2.3",
                                         "--iterations", "0"])
    res = run_cli(*argv, "--bundle", folder)
    assert res.code == 2 and res.err.startswith(f"export-gelu: error: --bundle {folder}: ")
    assert says in res.err, res.err
    assert snapshot(tmp_path) == before


def _export_bundle(model: Path, bundle: Path, out: Path) -> None:
    res = run_cli(model, "--target", TRT, "-o", out, "--no-verify", "--bundle", bundle)
    assert res.code == 0, res.err + res.out


def test_replacing_a_bundle_keeps_the_users_files_and_drops_its_own(tmp_path):
    model = save_onnx(tmp_path / "m.onnx")
    bundle = tmp_path / "b"
    _export_bundle(model, bundle, tmp_path / "o.onnx")
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["bundle_version"] == 2
    assert set(manifest["files"]) == {"README.txt", "inputs.json", "inputs.npz", "inputs/x.bin",
                                      "manifest.json", "model.onnx", "reference_outputs.json",
                                      "run_on_device.sh"}
    assert set(manifest["files"]) == {p.relative_to(bundle).as_posix()
                                      for p in bundle.rglob("*") if p.is_file()}
    # the device ran it and the user kept notes beside it
    for name in ("outputs.json", "times.json", "trtexec.log", "model.plan"):
        (bundle / name).write_text("from the device")
    (bundle / "notes.txt").write_text("mine")
    (bundle / "runs").mkdir(mode=0o750)
    (bundle / "runs").chmod(0o750)
    (bundle / "runs" / "jetson.log").write_text("mine too")
    (bundle / "latest").symlink_to("runs/jetson.log")
    (bundle / "empty").mkdir()
    inode = (bundle / "notes.txt").stat().st_ino

    _export_bundle(model, bundle, tmp_path / "o2.onnx")
    left = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*")}
    assert left == {*manifest["files"], "inputs", "notes.txt", "runs", "runs/jetson.log",
                    "latest", "empty"}
    assert (bundle / "notes.txt").read_text() == "mine"
    assert (bundle / "notes.txt").stat().st_ino == inode  # the same file, linked over
    assert os.readlink(bundle / "latest") == "runs/jetson.log"
    assert (bundle / "runs" / "jetson.log").read_text() == "mine too"
    assert (bundle / "runs").stat().st_mode & 0o777 == 0o750
    assert not list(tmp_path.glob(".b.*")), "a staging folder was left behind"


def test_replacing_without_an_atomic_swap_keeps_the_users_files(tmp_path, monkeypatch):
    """Where the system cannot exchange two folders in one step, the old one is moved aside
    and the new one in; the user's files are kept all the same."""
    from export_gelu.device import bundle_place

    monkeypatch.setattr(bundle_place, "_exchange", lambda a, b: False)
    model = save_onnx(tmp_path / "m.onnx")
    bundle = tmp_path / "b"
    _export_bundle(model, bundle, tmp_path / "o.onnx")
    (bundle / "notes.txt").write_text("mine")
    _export_bundle(model, bundle, tmp_path / "o.onnx")
    assert (bundle / "notes.txt").read_text() == "mine"
    assert (bundle / "manifest.json").is_file()


def test_a_version_1_bundle_is_replaced_by_what_its_manifest_names(tmp_path, monkeypatch):
    """Bundles written before the manifest listed its files: their files are named by the
    graph, inputs and reference entries (and its script's by DEVICE_FILES)."""
    monkeypatch.setenv("EXPORT_GELU_EXTERNAL_DATA_THRESHOLD", "1")  # weights in o.onnx.data
    model = save_onnx(tmp_path / "m.onnx", "m.onnx.data")
    bundle = tmp_path / "b"
    _export_bundle(model, bundle, tmp_path / "o.onnx")
    path = bundle / "manifest.json"
    manifest = json.loads(path.read_text())
    assert manifest["graph"]["external_data"] == ["o.onnx.data"]
    for key in ("files", "device_files"):
        del manifest[key]
    path.write_text(json.dumps({**manifest, "bundle_version": 1}))
    (bundle / "notes.txt").write_text("mine")
    (bundle / "outputs.json").write_text("from the device")
    _export_bundle(model, bundle, tmp_path / "p.onnx")
    names = {p.name for p in bundle.iterdir()}
    assert "notes.txt" in names and "p.onnx.data" in names
    assert "o.onnx.data" not in names and "outputs.json" not in names


def test_a_users_file_where_the_new_bundle_writes_is_refused_before_work(tmp_path):
    model = save_onnx(tmp_path / "m.onnx")
    bundle = tmp_path / "b"
    _export_bundle(model, bundle, tmp_path / "o.onnx")
    path = bundle / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["files"].remove("README.txt")  # README.txt is now a file of the user's
    path.write_text(json.dumps(manifest))
    (bundle / "inputs" / "mine.bin").write_bytes(b"mine")
    before = snapshot(tmp_path)
    res = run_cli(model, "--target", TRT, "-o", tmp_path / "o2.onnx", "--no-verify",
                  "--bundle", bundle)
    assert res.code == 2 and "README.txt, inputs/mine.bin is not one of the earlier bundle's "\
        "own files" in res.err, res.err
    assert snapshot(tmp_path) == before


def test_a_symlinked_bundle_folder_is_replaced_where_it_points(tmp_path):
    model = save_onnx(tmp_path / "m.onnx")
    real = tmp_path / "real"
    _export_bundle(model, real, tmp_path / "o.onnx")
    (real / "notes.txt").write_text("mine")
    (tmp_path / "link").symlink_to("real")
    _export_bundle(model, tmp_path / "link", tmp_path / "o.onnx")
    assert (tmp_path / "link").is_symlink() and (real / "notes.txt").read_text() == "mine"
    assert (real / "manifest.json").is_file()


# -- --target: one parser for every subcommand that takes it ----------------------------------

@pytest.mark.parametrize("version", ["trt8.2.3", "trt10.13"])
def test_verify_takes_the_exact_versions_export_takes(tmp_path, version):
    model = save_onnx(tmp_path / "m.onnx")
    exported = run_cli(model, "--target", version, "-o", tmp_path / "o.onnx", "--no-verify",
                       "--bundle", tmp_path / "eb")
    assert exported.code == 0, exported.err
    verified = run_cli("verify", model, tmp_path / "o.onnx", "--target", version, "--bundle",
                       tmp_path / "vb", "--iterations", "0")
    assert verified.code == 0, verified.err + verified.out
    inspected = run_cli("inspect", tmp_path / "o.onnx", "--target", version, "--json")
    assert inspected.code == 0, inspected.err
    want = version.removeprefix("trt")
    for bundle in ("eb", "vb"):
        manifest = json.loads((tmp_path / bundle / "manifest.json").read_text())
        assert (manifest["target"], manifest["tensorrt"]) == (version, want)


@pytest.mark.parametrize("argv", [["--target", "trt99"], ["--target", "tensorrt"]])
def test_verify_refuses_a_target_export_refuses(tmp_path, argv):
    model = save_onnx(tmp_path / "m.onnx")
    by_export = run_cli(model, *argv)
    by_verify = run_cli("verify", model, model, *argv)
    assert by_export.code == by_verify.code == 2
    assert by_export.err.split("argument --target: ")[1] == \
        by_verify.err.split("argument --target: ")[1].replace("export-gelu verify", "export-gelu")

