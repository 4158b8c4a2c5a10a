"""Latency that survives a noisy machine: warm-up, interleaved runners, percentiles, and the
spread of the median, so two numbers can be told apart from noise."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from export_gelu.json_value import JsonObject
from export_gelu.progress import Progress

if TYPE_CHECKING:
    import torch
    from polygraphy.backend.base import BaseRunner

#: z for a two-sided 95% interval.
_Z95 = 1.959964

#: Separate sessions of the *same* graph differ by a few percent that no single session's
#: samples can show (memory placement, neighbours): benchmarks/latency_repeatability.py
#: measured gaps of up to 3.8% between identical ORT sessions on a shared 2-core machine.
#: The spread the harness reports is never narrower than ± this percentage of the median.
NOISE_FLOOR_PCT = 2.5

#: The timed run is cut into this many consecutive blocks; when a neighbour's load comes and
#: goes during the run, the blocks' medians differ, and the reported spread covers them.
DRIFT_BLOCKS = 5


@dataclass
class Latency:
    """Percentiles of per-inference times (ms) and a 95% interval for the median."""

    median_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    iterations: int
    warmup: int
    min_ms: float = 0.0
    p25_ms: float = 0.0
    p75_ms: float = 0.0
    #: distribution-free 95% confidence interval of the median (order statistics)
    median_ci_ms: tuple[float, float] = (0.0, 0.0)
    clock: str = "wall"  # what a sample measures, see `measure_latency`
    noise_floor_pct: float = NOISE_FLOOR_PCT
    #: lowest and highest median of DRIFT_BLOCKS consecutive blocks of the run (time order)
    block_medians_ms: tuple[float, float] = (0.0, 0.0)
    samples_ms: list[float] = field(default_factory=list, repr=False)

    @property
    def spread_ms(self) -> tuple[float, float]:
        """The median's 95% interval, widened to at least ± the noise floor and to the range of
        the block medians (drift during the run)."""
        lo, hi = self.median_ci_ms
        b_lo, b_hi = self.block_medians_ms
        floor = self.median_ms * self.noise_floor_pct / 100.0
        return (min(lo, self.median_ms - floor, b_lo or lo),
                max(hi, self.median_ms + floor, b_hi or hi))

    @property
    def drifted(self) -> bool:
        """Whether the blocks' medians differ by more than the noise floor (a noisy run)."""
        b_lo, b_hi = self.block_medians_ms
        return self.median_ms > 0 and (b_hi - b_lo) > 2 * self.median_ms * (
            self.noise_floor_pct / 100.0)

    @property
    def spread_pct(self) -> float:
        """Half the width of `spread_ms`, as a percentage of the median."""
        lo, hi = self.spread_ms
        return 50.0 * (hi - lo) / self.median_ms if self.median_ms > 0 else float("inf")

    def overlaps(self, other: Latency) -> bool:
        """Whether the two medians' spreads overlap: the two are not told apart from noise."""
        (a_lo, a_hi), (b_lo, b_hi) = self.spread_ms, other.spread_ms
        return a_lo <= b_hi and b_lo <= a_hi

    def to_json(self) -> JsonObject:
        data = asdict(self)
        data.pop("samples_ms")
        data["median_ci_ms"] = list(self.median_ci_ms)
        data["spread_ms"] = list(self.spread_ms)
        data["spread_pct"] = self.spread_pct
        data["block_medians_ms"] = list(self.block_medians_ms)
        data["drifted"] = self.drifted
        return data


def median_interval(sorted_ms: np.ndarray) -> tuple[float, float]:
    """A 95% confidence interval for the median from order statistics (no normality assumed)."""
    n = sorted_ms.size
    if n == 0:
        return (0.0, 0.0)
    half = _Z95 * math.sqrt(n) / 2
    lo = max(0, int(math.floor(n / 2 - half)) - 1)
    hi = min(n - 1, int(math.ceil(n / 2 + half)) - 1)
    return float(sorted_ms[lo]), float(sorted_ms[hi])


def block_medians(ms_in_order: np.ndarray, blocks: int = DRIFT_BLOCKS) -> tuple[float, float]:
    """(lowest, highest) median of consecutive blocks; (0, 0) when too few samples."""
    if ms_in_order.size < 4 * blocks:
        return (0.0, 0.0)
    meds = [float(np.median(b)) for b in np.array_split(ms_in_order, blocks)]
    return min(meds), max(meds)


def summarize(times_s: list[float], warmup: int, clock: str = "wall") -> Latency:
    """Statistics of samples given in the order they were taken (seconds)."""
    in_order = np.asarray(times_s, dtype=np.float64) * 1e3
    ms = np.sort(in_order)
    if ms.size == 0:
        raise ValueError("no timed iterations")
    p25, med, p75, p90, p99 = (float(v) for v in np.percentile(ms, [25, 50, 75, 90, 99]))
    return Latency(med, p90, p99, float(ms.mean()), int(ms.size), warmup, min_ms=float(ms[0]),
                   p25_ms=p25, p75_ms=p75, median_ci_ms=median_interval(ms), clock=clock,
                   block_medians_ms=block_medians(in_order), samples_ms=[float(v) for v in ms])


def _is_trt(runner: BaseRunner) -> bool:
    return type(runner).__name__ == "TrtRunner"


def _device_feed(feed: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """The feed as CUDA tensors, so TensorRT is timed on device buffers (no host copies)."""
    import torch

    return {n: torch.from_numpy(np.ascontiguousarray(a)).cuda() for n, a in feed.items()}


class _Timed:
    """One runner with the feed it is timed on and how one sample is taken."""

    def __init__(self, runner: BaseRunner, feed: Mapping[str, np.ndarray]) -> None:
        self.runner = runner
        self.trt = _is_trt(runner)
        self.feed: Mapping[str, np.ndarray | torch.Tensor] = (
            _device_feed(feed) if self.trt else feed)
        self.kwargs: dict[str, bool] = {"check_inputs": False}
        if self.trt:
            self.kwargs["copy_outputs_to_host"] = False

    def sample(self) -> float:
        start = time.perf_counter()
        self.runner.infer(self.feed, **self.kwargs)
        wall = time.perf_counter() - start
        if self.torch:  # its own perf_counter clock, around the module call only
            own = getattr(self.runner, "inference_time", None)
            return own if own is not None and own > 0 else wall
        # polygraphy's runners time with time.time(), quantized to ~0.24 µs: use perf_counter
        return wall

    @property
    def torch(self) -> bool:
        return type(self.runner).__name__ == "TorchRunner"

    @property
    def clock(self) -> str:
        if self.trt:
            return "infer() on device buffers, through the stream sync"
        if self.torch:
            return "module call (CUDA synchronised)" if str(
                getattr(self.runner, "device", "cpu")).startswith("cuda") else "module call"
        return "infer() wall time (session run)"


def measure_latency(runners: list[BaseRunner], feed: Mapping[str, np.ndarray], iterations: int = 50,
                    warmup: int = 5, progress: Progress | None = None,
                    feeds_by_runner: Mapping[str, Mapping[str, np.ndarray]] | None = None
                    ) -> dict[str, Latency]:
    """Time activated polygraphy runners on one feed, interleaved (A B C, C B A, …).

    A sample is `perf_counter` wall time around `infer()` (ORT: the session run; TensorRT:
    device-resident inputs, outputs left on the device, through the stream sync), or for the
    torch runner its own clock around the module call (synchronised on CUDA). Interleaving
    spreads a noisy neighbour's bursts over every runner instead of one. `feeds_by_runner`
    gives a runner (by name) its own feed when its input names or dtypes differ.
    """
    if iterations < 1:
        raise ValueError("iterations must be at least 1")
    names = [r.name for r in runners]
    if len(set(names)) != len(names):
        raise ValueError(f"runner names must be unique: {names}")
    own = feeds_by_runner or {}
    timed = [_Timed(r, own.get(r.name, feed)) for r in runners]
    for t in timed:
        for _ in range(warmup):
            t.sample()
    samples: dict[str, list[float]] = {t.runner.name: [] for t in timed}
    for i in range(iterations):
        order = timed if i % 2 == 0 else list(reversed(timed))
        for t in order:
            samples[t.runner.name].append(t.sample())
        if progress is not None:
            progress.update(i + 1, iterations, "timing")
    return {t.runner.name: summarize(samples[t.runner.name], warmup, t.clock) for t in timed}
