"""Atomic outputs: a run killed mid-export leaves no partial .onnx, .data or .json, and never
touches its input.

The model (8 × Linear(1024,1024)+GELU, 32 MiB of weights, as an ExportedProgram and as the
same graph in ONNX) goes through the real CLI in a subprocess with external data forced on
(EXPORT_GELU_EXTERNAL_DATA_THRESHOLD), so every run writes an `.onnx`, a `.data` and a report.
Each case sends a signal at a chosen moment (the save-step cases rewrite the ONNX file, the
quickest way to that step; the export case loads the ExportedProgram):

| signal | when | expected |
|---|---|---|
| SIGTERM | output being staged | exit 143, one-line message, no staging dir, nothing partial |
| SIGINT | output being staged | exit 130, same |
| SIGKILL | output being staged | nothing partial; the next run removes the staging dir |
| SIGTERM | model loaded, exporting | exit 143, nothing written |

"Nothing partial" means: each final path is either absent, or complete (the .onnx passes
onnx.checker with its .data loaded, and the report parses as JSON).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from export_gelu.atomic import STAGING_TAG, clean_stale_staging
from export_gelu.exporter.saving.save import EXTERNAL_DATA_ENV
from tests.conftest import ROOT, default_signals, run_cli


@pytest.fixture(scope="module")
def big_model(session_cache) -> Path:
    """An ExportedProgram: 8 × Linear(1024,1024)+GELU (32 MiB of weights). Built once
    (session_cache); the tests only read it."""

    def build(path: Path) -> None:
        torch.manual_seed(0)
        layers: list[nn.Module] = []
        for _ in range(8):
            layers += [nn.Linear(1024, 1024), nn.GELU()]
        model = nn.Sequential(*layers).eval()
        with path.open("wb") as fh:
            torch.export.save(torch.export.export(model, (torch.randn(2, 1024),)), fh)

    return session_cache.file("atomic-big-model.pt", build)


@pytest.fixture(scope="module")
def big_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same shape as an ONNX file (8 × MatMul+Gelu, 32 MiB): rewriting it is the quick
    way to reach the save step, which is where the staging directory exists."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(8):
        inits.append(numpy_helper.from_array(
            rng.standard_normal((1024, 1024), dtype=np.float32) / 32, f"w{i}"))
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"], name=f"mm{i}"),
                  helper.make_node("Gelu", [f"h{i}"], [f"g{i}"], name=f"gelu{i}")]
        prev = f"g{i}"
    graph = helper.make_graph(
        nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1024])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [2, 1024])], inits)
    path = tmp_path_factory.mktemp("atomic_onnx") / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), str(path))
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _start(model: Path, out_dir: Path, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, **{EXTERNAL_DATA_ENV: str(1 << 20)})
    cmd = [sys.executable, "-m", "export_gelu.cli", str(model), "--target", "onnx",
           "-o", str(out_dir / "m.onnx"), "--report", str(out_dir / "r.json"), *extra]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)


def _staging(out_dir: Path) -> list[Path]:
    return [p for p in out_dir.iterdir() if p.name.startswith(".") and STAGING_TAG in p.name]


def _wait_for_staging(proc: subprocess.Popen, out_dir: Path, timeout: float = 240) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if _staging(out_dir):
            return True
        time.sleep(0.002)
    return False


def _assert_nothing_partial(out_dir: Path) -> None:
    onnx_path, data, report = out_dir / "m.onnx", out_dir / "m.onnx.data", out_dir / "r.json"
    if onnx_path.exists():  # the rename had already happened: it must be whole
        onnx.checker.check_model(str(onnx_path), full_check=True)
        onnx.load(str(onnx_path), load_external_data=True)
    else:
        assert not data.exists(), "a .data without its .onnx"
    if report.exists():
        json.loads(report.read_text())
    finals = {"m.onnx", "m.onnx.data", "r.json"}
    strays = [p.name for p in out_dir.iterdir() if p.name not in finals and p not in
              _staging(out_dir)]
    assert not strays, strays


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_during_save_cleans_up(sig, big_onnx, tmp_path):
    before = _sha(big_onnx)
    proc = _start(big_onnx, tmp_path, "--no-verify")
    assert _wait_for_staging(proc, tmp_path), proc.communicate()[1]
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"interrupted ({signal.Signals(sig).name})" in lines[0], err
    assert _staging(tmp_path) == []
    _assert_nothing_partial(tmp_path)
    assert _sha(big_onnx) == before


def test_sigkill_during_save_leaves_nothing_partial_and_next_run_cleans(big_onnx, tmp_path):
    before = _sha(big_onnx)
    proc = _start(big_onnx, tmp_path, "--no-verify")
    assert _wait_for_staging(proc, tmp_path), proc.communicate()[1]
    proc.kill()
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    _assert_nothing_partial(tmp_path)
    assert _sha(big_onnx) == before
    left = _staging(tmp_path)
    # the next run into this folder removes what the killed process could not (a run of its
    # own, no signal: in this process)
    nxt = run_cli(big_onnx, "--target", "onnx", "-o", tmp_path / "m.onnx", "--report",
                  tmp_path / "r.json", "--no-verify", env={EXTERNAL_DATA_ENV: str(1 << 20)})
    assert nxt.code == 0, nxt.err
    assert not any(p.exists() for p in left)
    assert _staging(tmp_path) == []
    onnx.checker.check_model(str(tmp_path / "m.onnx"))


def _has_open(pid: int, path: Path) -> bool:
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(fd) == str(path) for fd in fd_dir.iterdir())
    except OSError:
        return False


def _wait_until_loaded(proc: subprocess.Popen, model: Path, timeout: float = 240) -> bool:
    """True once the process has opened the model and closed it again (load done)."""
    deadline, seen = time.monotonic() + timeout, False
    while time.monotonic() < deadline and proc.poll() is None:
        is_open = _has_open(proc.pid, model.resolve())
        if seen and not is_open:
            return True
        seen = seen or is_open
        time.sleep(0.002)
    return False


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see open files")
def test_sigterm_during_export_writes_nothing(big_model, tmp_path):
    before = _sha(big_model)
    proc = _start(big_model, tmp_path, "--no-verify")
    assert _wait_until_loaded(proc, big_model), proc.communicate()[1]
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
    assert _sha(big_model) == before


def test_stale_staging_of_a_live_process_is_kept(tmp_path):
    """Only dead owners' staging dirs are removed: a concurrent run's is left alone."""
    from export_gelu.atomic import _HOST

    live = tmp_path / f".m.onnx.{STAGING_TAG}-{os.getpid()}@{_HOST}.abc"
    dead_pid = 2 ** 22 + 7  # above the default pid_max; no such process
    dead = tmp_path / f".m.onnx.{STAGING_TAG}-{dead_pid}@{_HOST}.abc"
    other_host = tmp_path / f".m.onnx.{STAGING_TAG}-{dead_pid}@elsewhere.abc"
    unrelated = tmp_path / ".m.onnx.something-else"
    for d in (live, dead, other_host, unrelated):
        d.mkdir()
    assert clean_stale_staging(tmp_path) == [dead]
    assert live.exists() and other_host.exists() and unrelated.exists() and not dead.exists()


def test_rewrite_without_external_data_removes_a_stale_data_file(big_onnx, tmp_path):
    """A re-export whose result has no .data removes the previous run's .data after the new
    .onnx is in place (a stale side file could be deployed next to the wrong graph)."""
    from export_gelu.exporter.saving.save import save_onnx_atomic

    out = tmp_path / "o.onnx"
    (tmp_path / "o.onnx.data").write_bytes(b"stale")
    assert save_onnx_atomic(onnx.load(str(big_onnx)), out, external_data=False) == [out]
    assert not (tmp_path / "o.onnx.data").exists()
    written = save_onnx_atomic(onnx.load(str(out)), out, external_data=True)
    assert written == [out, tmp_path / "o.onnx.data"]
    # the weights are as readable as the graph (onnx itself creates .data files 0600)
    assert (tmp_path / "o.onnx.data").stat().st_mode & 0o777 == out.stat().st_mode & 0o777
    onnx.checker.check_model(str(out), full_check=True)
    assert _staging(tmp_path) == []
