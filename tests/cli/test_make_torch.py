"""`make torch` (run by `make demo` / `make test` where no torch is installed): the CUDA build
where nvidia-smi lists a GPU, else the CPU build from PyTorch's CPU index, else (index out of
reach) the default index, saying which in one line and without a long network wait.

The venv's python is a stand-in that runs the real interpreter for `-c` (the index probe)
and prints the pip command it was given instead of installing."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT

TORCH = next(line.split("==")[1] for line in (ROOT / "constraints.txt").read_text().splitlines()
             if line.startswith("torch=="))


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    if shutil.which("make") is None:
        pytest.skip("needs make")
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nif [ "$1" = "-c" ]; then exec {sys.executable} "$@"; fi\n'
                      'echo "PIP-CALLED $*"\n')
    python.chmod(0o755)
    return tmp_path / "venv"


def _fake_nvidia_smi(folder: Path) -> Path:
    folder.mkdir()
    tool = folder / "nvidia-smi"
    tool.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n")
    tool.chmod(0o755)
    return folder


def _make(venv: Path, *variables: str, path_first: Path | None = None, goal: str = "torch"
          ) -> tuple[subprocess.CompletedProcess, float]:
    env = dict(os.environ, no_proxy="127.0.0.1,localhost", NO_PROXY="127.0.0.1,localhost")
    dirs = [p for p in env.get("PATH", "").split(os.pathsep)
            if p and not (Path(p) / "nvidia-smi").exists()]  # no real GPU tool either
    env["PATH"] = os.pathsep.join([*([str(path_first)] if path_first else []), *dirs])
    start = time.perf_counter()
    proc = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), goal,
                           f"VENV={venv}", *variables], capture_output=True, text=True,
                          env=env, timeout=120)
    return proc, time.perf_counter() - start


@pytest.fixture
def cpu_index(tmp_path: Path) -> Iterator[str]:
    """A reachable stand-in for PyTorch's CPU index (it only has to answer the probe)."""
    (tmp_path / "index" / "torch").mkdir(parents=True)
    (tmp_path / "index" / "torch" / "index.html").write_text("<html></html>")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler,
                                directory=str(tmp_path / "index"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _pip_line(out: str) -> str:
    lines = [line for line in out.splitlines() if line.startswith("PIP-CALLED ")]
    assert len(lines) == 1, out
    return lines[0]


def test_no_gpu_and_cpu_index_reachable_installs_the_cpu_build(venv: Path,
                                                               cpu_index: str) -> None:
    proc, _ = _make(venv, f"TORCH_CPU_INDEX={cpu_index}")
    assert proc.returncode == 0, proc.stderr
    assert f"installing torch=={TORCH}: CPU build (no CUDA GPU) from {cpu_index}" in proc.stdout
    pip = _pip_line(proc.stdout)
    assert f"--index-url {cpu_index} --extra-index-url https://pypi.org/simple" in pip
    assert pip.endswith(f"torch=={TORCH}")


def test_no_gpu_and_cpu_index_unreachable_falls_back_fast(venv: Path) -> None:
    proc, seconds = _make(venv, "TORCH_CPU_INDEX=http://127.0.0.1:9/whl/cpu")  # refused port
    assert proc.returncode == 0, proc.stderr
    assert "cannot be reached: from the default index" in proc.stdout
    # said before the download: what the default index means here, and the ways around it
    assert "the default index's torch is the CUDA build (several GB" in proc.stdout
    assert "(make torch TORCH_CPU_INDEX=URL)" in proc.stdout and "+cpu" in proc.stdout
    assert proc.stdout.index("CUDA build") < proc.stdout.index("PIP-CALLED")
    assert _pip_line(proc.stdout) == f"PIP-CALLED -m pip install -q torch=={TORCH}"
    assert seconds < 30, f"the fallback took {seconds:.0f} s"


def test_a_gpu_gets_the_default_cuda_build(venv: Path, tmp_path: Path, cpu_index: str) -> None:
    proc, _ = _make(venv, f"TORCH_CPU_INDEX={cpu_index}",
                    path_first=_fake_nvidia_smi(tmp_path / "tools"))
    assert proc.returncode == 0, proc.stderr
    assert "CUDA build (nvidia-smi found a GPU)" in proc.stdout
    assert _pip_line(proc.stdout) == f"PIP-CALLED -m pip install -q torch=={TORCH}"


def test_make_test_min_from_nothing_installs_the_floor_and_runs_the_window(venv: Path) -> None:
    """`make test-min` in a venv without torch: torch from constraints-min.txt as `make torch`
    gets it (the advice naming `make test-min`, not `make demo`), the floor set, then
    WINDOW_TESTS; pip and pytest are the stand-in's, so nothing is installed or run."""
    python = venv / "bin" / "python"
    python.write_text('#!/bin/sh\nif [ "$1" = "-c" ]; then\n'
                      '  case "$2" in *"import torch"*) exit 1;; esac  # no torch here\n'
                      f'  exec {sys.executable} "$@"\nfi\necho "PIP-CALLED $*"\n')
    floor = next(line.split("==")[1] for line in
                 (ROOT / "constraints-min.txt").read_text().splitlines()
                 if line.startswith("torch=="))
    proc, _ = _make(venv, f"MIN_VENV={venv}", "TORCH_CPU_INDEX=http://127.0.0.1:9/whl/cpu",
                    goal="test-min")
    assert proc.returncode == 0, proc.stderr
    assert f"installing torch=={floor}: no CUDA GPU" in proc.stdout
    assert "(make test-min TORCH_CPU_INDEX=URL)" in proc.stdout
    calls = [line.removeprefix("PIP-CALLED ") for line in proc.stdout.splitlines()
             if line.startswith("PIP-CALLED ")]
    assert calls[0] == f"-m pip install -q torch=={floor}"
    assert calls[1].startswith("-m pip install -q -c constraints-min.txt -e .[cpu,examples]")
    assert calls[2].startswith("-m pytest") and len(calls) == 3, calls
    window = [a for a in calls[2].split() if a.startswith("tests/")]
    assert window and all((ROOT / a).is_file() for a in window), window
