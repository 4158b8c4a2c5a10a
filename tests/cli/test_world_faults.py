"""The world's faults are exit 2 with the errno's words and the path, never exit 4 ("a bug").

Every fault is a real one the kernel produces, no mocks:

- a file-size limit (`RLIMIT_FSIZE`, what `ulimit -f` sets) makes a write fail with EFBIG (or
  store only part of it, which numpy reports without an errno): set on the test's own process
  for the run's length (`file_size_limit`, tests/hostile.py; Python ignores SIGXFSZ, as in a
  program of its own), so the CLI runs in this process;
- a private mount namespace (`unshare --mount`, root only; skipped elsewhere) holds small
  tmpfs mounts: full by bytes (a write fails with ENOSPC mid-file), full by inodes (creating
  a file fails with ENOSPC), read-only (EROFS), a mount point (EBUSY when renamed), and two
  file systems (EXDEV);
- a name longer than the file system takes (ENAMETOOLONG), a path longer than PATH_MAX.

Each run asserts: the exit code, one stderr line holding the errno's words and the path the
user gave, nothing left in the output folder (no staging folder, no partial file), and the
input byte-identical. `failure_outcome` (errors.py), the one mapping, is also checked on
real OSErrors: EACCES (as an unprivileged user), EFBIG, ENOSPC, EROFS, EBUSY, EXDEV,
ENAMETOOLONG.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from export_gelu.atomic import STAGING_TAG
from export_gelu.errors import (
    BadInputError,
    Interrupted,
    TargetUnmetError,
    WorldError,
    failure_outcome,
)
from export_gelu.exporter.saving.save import EXTERNAL_DATA_ENV
from tests.conftest import ROOT, CliResult, run_cli
from tests.hostile import file_size_limit
from tests.onnx_graphs import hand_graph

UNSHARE = shutil.which("unshare")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _assert_world(proc: subprocess.CompletedProcess | CliResult, words: list[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("export-gelu: error:"), proc.stderr
    assert "internal error" not in lines[0] and "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture(scope="module")
def onnx_with_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 256 KiB ONNX model whose weights are in external data (rewritten by streaming)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((256, 256), dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Gelu", ["h"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 256])], [w])
    folder = tmp_path_factory.mktemp("ext")
    path = folder / "in.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]),
                    str(path), save_as_external_data=True, location="in.onnx.data",
                    size_threshold=0)
    return path


# ---------------------------------------------------------------- file-size limit (ulimit -f)


def test_file_size_limit_while_writing_the_onnx(saved_model, tmp_path):
    model = saved_model("lstm", "exported")
    before = _sha(model)
    out = tmp_path / "o.onnx"
    with file_size_limit(8 << 10):
        proc = run_cli(model, "--target", "onnx", "-o", out, "--no-verify")
    _assert_world(proc, ["File too large (EFBIG)", str(out)])
    assert _leftovers(tmp_path) == []
    assert _sha(model) == before


def test_file_size_limit_while_the_exporter_writes_the_weights(saved_model, tmp_path):
    """A model over the external-data threshold is exported straight into a work folder:
    the limit hits the exporter's own writes (numpy: no errno), still exit 2."""
    model = saved_model("lstm", "exported")
    before = _sha(model)
    with file_size_limit(16 << 10):
        proc = run_cli(model, "--target", "onnx", "-o", tmp_path / "o.onnx", "--no-verify",
                       env={EXTERNAL_DATA_ENV: "1000"})
    _assert_world(proc, ["file-size limit", STAGING_TAG])
    assert _leftovers(tmp_path) == []
    assert _sha(model) == before


def test_file_size_limit_while_streaming_external_data(onnx_with_data, tmp_path):
    data = onnx_with_data.with_name("in.onnx.data")
    before, before_data = _sha(onnx_with_data), _sha(data)
    out = tmp_path / "o.onnx"
    with file_size_limit(128 << 10):
        proc = run_cli(onnx_with_data, "--target", "onnx", "-o", out, "--no-verify",
                       env={EXTERNAL_DATA_ENV: "1000"})
    _assert_world(proc, ["File too large (EFBIG)", f"{out}.data"])
    assert _leftovers(tmp_path) == []
    assert (_sha(onnx_with_data), _sha(data)) == (before, before_data)


# ---------------------------------------------------------------- names (in this process)


def test_a_name_longer_than_the_file_system_takes_fails_up_front(saved_model, tmp_path):
    out = tmp_path / ("n" * 251 + ".onnx")
    proc = run_cli(saved_model("lstm", "exported"), "--target", "onnx", "-o", out)
    _assert_world(proc, ["256 bytes", "at most 255"])
    assert _leftovers(tmp_path) == []


def test_a_path_longer_than_path_max(saved_model, tmp_path):
    out = tmp_path.joinpath(*["d" * 200] * 21, "o.onnx")  # > 4096 bytes
    proc = run_cli(saved_model("lstm", "exported"), "--target", "onnx", "-o", out)
    _assert_world(proc, [])
    assert _leftovers(tmp_path) == []


# ---------------------------------------------------------------- mounts (root only)


@pytest.fixture(scope="module")
def mount_namespace(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Skip unless this process may mount a tmpfs in a private mount namespace."""
    probe = tmp_path_factory.mktemp("probe")
    if UNSHARE is None:
        pytest.skip("needs unshare(1) (util-linux)")
    ok = subprocess.run([UNSHARE, "--mount", "--propagation", "private", "sh", "-c",
                         f"mount -t tmpfs -o size=4k tmpfs {probe}"], capture_output=True)
    if ok.returncode != 0:
        pytest.skip("needs root to mount a tmpfs in a private mount namespace "
                    f"({ok.stderr.decode().strip()[:100]})")


def _in_mounts(mounts: list[tuple[str, Path]], argv: list[object], listing: Path,
               env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the CLI in a private mount namespace with tmpfs `mounts` ((options, dir), made
    before it runs), then list what is left in them (into `listing`: they vanish after)."""
    script = ["set -e"]
    for options, folder in mounts:
        folder.mkdir(parents=True, exist_ok=True)
        script.append(f"mount -t tmpfs -o {options} tmpfs '{folder}'")
    script += ['set +e', '"$@"', "rc=$?"]
    dirs = " ".join(f"'{f}'" for _o, f in mounts)
    script += [f"find {dirs} -mindepth 1 | sort > '{listing}'", "exit $rc"]
    cmd = [UNSHARE, "--mount", "--propagation", "private", "sh", "-c", "\n".join(script),
           "sh", sys.executable, "-m", "export_gelu.cli", *map(str, argv)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, **(env or {})))


@pytest.fixture(scope="module")
def small_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small ONNX graph (MatMul, tanh GELU) for the runs in a mount namespace: each is a
    program of its own, and what fails there is a write or a folder, whatever MODEL is."""
    path = tmp_path_factory.mktemp("small") / "m.onnx"
    onnx.save(hand_graph("tanh x*x*x"), str(path))
    return path


def test_disk_full_mid_write(mount_namespace, small_onnx, tmp_path):
    """The model fits (its output is elsewhere); the report's disk (4 KiB; the report with
    parity and latency is about 5 KiB) is full mid-file: exit 2 naming the report, nothing
    partial left on that disk."""
    model = small_onnx
    before = _sha(model)
    full = tmp_path / "full"
    report = full / "r.json"
    listing = tmp_path / "listing"
    proc = _in_mounts([("size=4k", full)], [model, "--target", "onnx", "-o", tmp_path / "o.onnx",
                                           "--report", report, "--iterations", "1",
                                           "--warmup", "0"], listing)
    _assert_world(proc, ["No space left on device (ENOSPC)", str(report)])
    assert listing.read_text() == "", "something was left on the full disk"
    assert _sha(model) == before


def test_disk_out_of_inodes(mount_namespace, onnx_with_data, tmp_path):
    """Creating the staged file fails with ENOSPC (no inode left), after the free-space check
    passed: exit 2 naming the output."""
    out_dir = tmp_path / "inodes"
    listing = tmp_path / "listing"
    out = out_dir / "o.onnx"
    proc = _in_mounts([("size=1g,nr_inodes=2", out_dir)],
                      [onnx_with_data, "--target", "onnx", "-o", out, "--no-verify"], listing)
    _assert_world(proc, ["No space left on device (ENOSPC)", str(out)])
    assert listing.read_text() == ""


def test_read_only_output_folder_fails_up_front(mount_namespace, small_onnx, tmp_path):
    out_dir = tmp_path / "ro"
    listing = tmp_path / "listing"
    proc = _in_mounts([("ro", out_dir)], [small_onnx, "--target", "onnx",
                                          "-o", out_dir / "o.onnx"], listing)
    _assert_world(proc, ["not writable", str(out_dir)])


def test_bundle_on_a_mount_point_fails_up_front(mount_namespace, small_onnx, tmp_path):
    """Renaming a mount point is EBUSY: refused before the export, not after it."""
    bundle = tmp_path / "bundle"
    listing = tmp_path / "listing"
    proc = _in_mounts([("size=1m", bundle)], [small_onnx, "--target",
                                              "trt8.6", "-o", tmp_path / "o.onnx",
                                              "--bundle", bundle], listing)
    _assert_world(proc, ["mount point", str(bundle)])
    assert not (tmp_path / "o.onnx").exists()


# ---------------------------------------------------------------- the one mapping


def _outcome_in_child(code: str, *, prefix: list[str] = (), mounts: str = "") -> str:
    """failure_outcome's line for the OSError `code` raises, in a child process (limits,
    a user namespace, mounts)."""
    body = "\n".join("    " + line for line in textwrap.dedent(code).strip().splitlines())
    program = ("import os, resource, sys\n"
               "from export_gelu.errors import failure_outcome\n"
               f"try:\n{body}\n"
               "except BaseException as exc:\n"
               "    o = failure_outcome(exc)\n"
               "    print(o.code, o.line)\n"
               "else:\n"
               "    print('no error')\n")
    cmd = [*prefix, sys.executable, "-c", program]
    if mounts:
        cmd = [UNSHARE, "--mount", "--propagation", "private", "sh", "-c",
               f"{mounts} && exec \"$@\"", "sh", *cmd]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_mapping_enospc_from_dev_full():
    with pytest.raises(OSError) as info, open("/dev/full", "wb", buffering=0) as fh:
        fh.write(b"x")
    outcome = failure_outcome(info.value)
    assert outcome.code == 2 and "No space left on device (ENOSPC)" in outcome.line


def test_mapping_enametoolong(tmp_path):
    with pytest.raises(OSError) as info:
        (tmp_path / ("x" * 300)).write_bytes(b"")
    outcome = failure_outcome(info.value)
    assert outcome.code == 2 and "(ENAMETOOLONG)" in outcome.line and "x" * 300 in outcome.line


def test_mapping_exdev_between_file_systems(tmp_path):
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another file system than the temporary folder")
    src = shm / f"export-gelu-exdev-{os.getpid()}"
    src.mkdir()
    try:
        with pytest.raises(OSError) as info:
            os.rename(src, tmp_path / "moved")
    finally:
        src.rmdir()
    outcome = failure_outcome(info.value)
    assert outcome.code == 2 and "(EXDEV)" in outcome.line and str(src) in outcome.line


def test_mapping_efbig_from_a_file_size_limit(tmp_path):
    line = _outcome_in_child(f"""
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))
        with open({str(tmp_path / 'big')!r}, 'wb', buffering=0) as fh:
            fh.write(b'x' * 4096); fh.write(b'x' * 4096)
    """)
    assert line.startswith("2 ") and "(EFBIG)" in line


@pytest.mark.skipif(os.geteuid() != 0 or UNSHARE is None,
                    reason="needs root and unshare(1): a folder of another owner, opened from a "
                           "user namespace where root's override does not reach it")
def test_mapping_eacces_from_a_folder_of_another_owner(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    os.chown(private, 65534, 65534)
    line = _outcome_in_child(f"open({str(private / 'x')!r}, 'w')",
                             prefix=[UNSHARE, "--user", "--map-root-user"])
    assert line.startswith("2 ") and "Permission denied (EACCES)" in line
    assert str(private / "x") in line


def test_mapping_erofs_and_ebusy(mount_namespace, tmp_path):
    ro, busy = tmp_path / "ro", tmp_path / "busy"
    ro.mkdir()
    busy.mkdir()
    mounts = f"mount -t tmpfs -o ro tmpfs '{ro}' && mount -t tmpfs tmpfs '{busy}'"
    line = _outcome_in_child(f"open({str(ro / 'x')!r}, 'w')", mounts=mounts)
    assert line.startswith("2 ") and "Read-only file system (EROFS)" in line
    line = _outcome_in_child(f"os.rename({str(busy)!r}, {str(tmp_path / 'b2')!r})",
                             mounts=mounts)
    assert line.startswith("2 ") and "Device or resource busy (EBUSY)" in line


def test_mapping_of_everything_else():
    assert failure_outcome(BadInputError("x")).code == 2
    assert failure_outcome(TargetUnmetError("x")).code == 3
    assert failure_outcome(WorldError("short write")).code == 2
    assert failure_outcome(KeyboardInterrupt()).code == 130
    assert failure_outcome(Interrupted(signal.SIGTERM)).code == 143
    missing = ImportError("No module named 'onnxruntime'", name="onnxruntime")
    assert failure_outcome(missing).code == 3
    bug = failure_outcome(RuntimeError("boom"))
    assert bug.code == 4 and "internal error" in bug.line
    # a bug that happened while handling a world fault is still a world fault's outcome
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "out.onnx")
        except OSError as exc:
            raise RuntimeError("cleanup failed") from exc
    except RuntimeError as chained:
        assert failure_outcome(chained).code == 2
