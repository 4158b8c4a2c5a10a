"""Which device runs the checks, and which ONNX Runtime execution providers run the graph.

`--device cpu|cuda` (default: cuda when torch sees a GPU *and* the installed ONNX Runtime has
the CUDA provider, else cpu) decides where the PyTorch reference runs and which ORT runners
are built: on cpu one CPU session; on cuda a session on the CUDA provider and, where the
installed ONNX Runtime has it, one on the TensorRT provider (ORT's own route to TensorRT).

ONNX Runtime does not raise when a provider fails to load: it logs and falls back to the
CPU. So every session's active providers are read back (`get_providers()`) and a runner
whose first provider is not the one asked for is reported as failed, with why.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from export_gelu.errors import BadInputError
from export_gelu.json_value import JsonObject, JsonValue

if TYPE_CHECKING:
    from polygraphy.backend.base import BaseRunner

#: an ONNX Runtime execution provider as InferenceSession takes it: a name, or (name, options)
Provider = str | tuple[str, dict[str, str]]

CPU_EP = "CPUExecutionProvider"
CUDA_EP = "CUDAExecutionProvider"
TRT_EP = "TensorrtExecutionProvider"

#: Runner names by the provider that leads its list (the report's latency/parity keys).
RUNNER_NAMES = {CPU_EP: "onnxruntime", CUDA_EP: "onnxruntime-cuda", TRT_EP: "onnxruntime-trt"}


def available_providers() -> list[str]:
    """The execution providers the installed ONNX Runtime was built with ([] without ORT)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return []
    return list(ort.get_available_providers())


def _torch_cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken CUDA install means "no GPU" here
        return False


def cuda_blocker() -> str | None:
    """None when the checks can run on CUDA here; else why not, in words."""
    if not _torch_cuda():
        return "torch sees no CUDA GPU"
    providers = available_providers()
    if not providers:
        return "onnxruntime is not installed; pip install 'export-gelu[gpu]'"
    if CUDA_EP not in providers:
        return (f"the installed onnxruntime has no {CUDA_EP} (it has {', '.join(providers)}); "
                "install onnxruntime-gpu instead: pip install 'export-gelu[gpu]'")
    return None


@dataclass(frozen=True)
class DeviceChoice:
    """The device the checks run on, and how it was chosen."""

    device: str  # cpu | cuda
    requested: str | None
    reason: str

    def to_json(self) -> JsonObject:
        return {"device": self.device, "requested": self.requested, "reason": self.reason}


def resolve_device(requested: str | None) -> DeviceChoice:
    """`--device` (None: automatic; a value options.validate accepted) → the device;
    `--device cuda` where it cannot be is exit 2."""
    if requested == "cpu":
        return DeviceChoice("cpu", requested, "asked for with --device cpu")
    blocker = cuda_blocker()
    if requested == "cuda":
        if blocker:
            raise BadInputError(f"--device cuda: {blocker}")
        return DeviceChoice("cuda", requested, "asked for with --device cuda")
    if blocker:
        return DeviceChoice("cpu", None, f"cpu: {blocker}")
    return DeviceChoice("cuda", None, f"cuda: torch sees a GPU and onnxruntime has {CUDA_EP}")


@dataclass
class ProviderRun:
    """One ORT runner asked for: its providers (with options), and what became of it."""

    name: str
    providers: list[Provider]
    status: str = "planned"  # planned | ready | failed
    active: list[str] = field(default_factory=list)
    reason: str = ""
    runner: BaseRunner | None = None

    @property
    def wanted(self) -> str:
        first = self.providers[0]
        return first if isinstance(first, str) else first[0]

    def to_json(self) -> JsonObject:
        def jsonable(p: Provider) -> JsonValue:
            return p if isinstance(p, str) else {"name": p[0], "options": p[1]}

        return {"requested": [jsonable(p) for p in self.providers], "active": self.active,
                "status": self.status, "reason": self.reason}


def trt_ep_options(precision: str, cache_dir: Path,
                   ranges: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]
                   | None = None) -> dict[str, str]:
    """Options for ORT's TensorRT provider: engine cache in `cache_dir`, fp16 per precision,
    and one optimization profile from `ranges` (input → MIN, OPT, MAX shapes)."""
    opts = {"trt_engine_cache_enable": "True", "trt_engine_cache_path": str(cache_dir),
            "trt_timing_cache_enable": "True", "trt_timing_cache_path": str(cache_dir),
            "trt_fp16_enable": "True" if precision == "fp16" else "False"}
    if ranges:
        def shapes(i: int) -> str:
            return ",".join(f"{n}:{'x'.join(str(d) for d in r[i])}" for n, r in ranges.items())

        opts.update(trt_profile_min_shapes=shapes(0), trt_profile_opt_shapes=shapes(1),
                    trt_profile_max_shapes=shapes(2))
    return opts


def plan_providers(device: str, precision: str, cache_dir: Path | None = None,
                   ranges: dict | None = None, available: list[str] | None = None
                   ) -> list[ProviderRun]:
    """The ORT runners to build on `device`: CPU alone, or CUDA and (where installed) TensorRT."""
    if device == "cpu":
        return [ProviderRun(RUNNER_NAMES[CPU_EP], [CPU_EP])]
    have = available_providers() if available is None else available
    runs = [ProviderRun(RUNNER_NAMES[CUDA_EP], [(CUDA_EP, {"device_id": "0"}), CPU_EP])]
    if TRT_EP in have:
        cache = cache_dir or Path(tempfile.mkdtemp(prefix="export-gelu-trt-ep-"))
        runs.append(ProviderRun(RUNNER_NAMES[TRT_EP],
                                [(TRT_EP, trt_ep_options(precision, cache, ranges)),
                                 (CUDA_EP, {"device_id": "0"}), CPU_EP]))
    else:
        runs.append(ProviderRun(RUNNER_NAMES[TRT_EP], [TRT_EP], status="failed",
                                reason=f"the installed onnxruntime has no {TRT_EP}"))
    return runs


def build_runners(path: str | Path, runs: list[ProviderRun], threads: int = 1
                  ) -> list[ProviderRun]:
    """Build a polygraphy OnnxrtRunner for each planned run and check its providers took."""
    from polygraphy.backend.onnxrt import OnnxrtRunner

    from export_gelu.check.runners.ort_runner import make_session

    for run in runs:
        if run.status != "planned":
            continue
        try:
            with captured_stderr() as log:
                session = make_session(path, threads, providers=run.providers,
                                       log_severity=4 if run.wanted == CPU_EP else 2)
        except BadInputError as exc:
            if run.wanted == CPU_EP:
                raise  # the graph itself does not load: the caller's error, as before
            run.status, run.reason = "failed", str(exc)
            continue
        run.active = list(session.get_providers())
        if not run.active or run.active[0] != run.wanted:
            words = " ".join(line.strip() for line in log.text().splitlines()
                             if run.wanted.replace("ExecutionProvider", "") in line)[:400]
            run.status = "failed"
            run.reason = (f"{run.wanted} failed to load; ONNX Runtime fell back to "
                          f"{', '.join(run.active) or 'nothing'}"
                          + (f" (ONNX Runtime: {words})" if words else ""))
            continue
        run.status = "ready"
        run.runner = OnnxrtRunner(session, name=run.name)
    return runs


def ready_runners(path: str | Path, device: str, precision: str, threads: int = 1,
                  ranges: dict | None = None) -> list[ProviderRun]:
    """The runs for `device`, built; when none of them is ready, a CPU run is added (the check
    degrades to the CPU, and the failed runs say why)."""
    runs = build_runners(path, plan_providers(device, precision, ranges=ranges), threads)
    if not any(r.status == "ready" for r in runs):
        runs += build_runners(path, [ProviderRun(RUNNER_NAMES[CPU_EP], [CPU_EP])], threads)
    return runs


class _Captured:
    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile(mode="w+b")
        self.captured = b""

    def close(self) -> None:
        """Keep what was written and close the file (no file left for the collector)."""
        self.file.seek(0)
        self.captured = self.file.read()
        self.file.close()

    def text(self) -> str:
        return self.captured.decode(errors="replace")


@contextlib.contextmanager
def captured_stderr() -> Iterator[_Captured]:
    """Capture what native code (ONNX Runtime's logger) writes to file descriptor 2; `text()`
    is what it wrote, once the block ends."""
    cap = _Captured()
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(cap.file.fileno(), 2)
    try:
        yield cap
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        cap.close()
