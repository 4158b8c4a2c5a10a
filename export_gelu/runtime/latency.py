"""Latency that survives a noisy machine: warm-up, interleaved runners, percentiles."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from export_gelu.progress import Progress


@dataclass
class Latency:
    median_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    iterations: int
    warmup: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def summarize(times_s: list[float], warmup: int) -> Latency:
    ms = np.asarray(times_s, dtype=np.float64) * 1e3
    return Latency(float(np.median(ms)), float(np.percentile(ms, 90)),
                   float(np.percentile(ms, 99)), float(ms.mean()), len(ms), warmup)


def measure_latency(runners: list[Any], feed: dict[str, np.ndarray], iterations: int = 50,
                    warmup: int = 5, progress: Progress | None = None) -> dict[str, Latency]:
    """Time activated polygraphy runners on one feed, interleaved (A B A B …).

    Each sample is wall time around `infer()` measured with `perf_counter`; runners that
    synchronise a device do so inside `infer()` (the torch runner on CUDA, TensorRT always).
    """
    for runner in runners:
        for _ in range(warmup):
            runner.infer(feed, check_inputs=False)
    samples: dict[str, list[float]] = {r.name: [] for r in runners}
    for i in range(iterations):
        order = runners if i % 2 == 0 else list(reversed(runners))
        for runner in order:
            start = time.perf_counter()
            runner.infer(feed, check_inputs=False)
            samples[runner.name].append(time.perf_counter() - start)
        if progress is not None:
            progress.update(i + 1, iterations)
    return {name: summarize(ts, warmup) for name, ts in samples.items()}
