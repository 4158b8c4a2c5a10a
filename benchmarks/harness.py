"""Paired, interleaved latency comparison of ONNX files in ONNX Runtime.

A ratio on a noisy machine means something only when the two graphs are timed in the same
run, interleaved (A B A B …), with the same threads and no spinning, and the ratio comes with
an interval. `compare_onnx` does that:

1. loads every file in its own session (explicit intra-op threads, spinning off);
2. checks that all files compute the same outputs as the first one (within `atol`);
3. warms up, then times `rounds` rounds; in each round every session runs once, in an order
   that rotates between rounds, so drift and cache effects hit all of them alike;
4. reports each file's median and p90, and for each file its paired ratio to the first
   (per-round time_i / time_0): the median ratio and a bootstrap 95% interval.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from export_gelu.runtime.ort_runner import make_session


@dataclass
class Timing:
    label: str
    median_ms: float
    p90_ms: float
    ratio: float  # median paired ratio to the baseline (first file)
    ratio_lo: float
    ratio_hi: float
    max_abs_vs_baseline: float


def bootstrap_median_interval(values: np.ndarray, rng: np.random.Generator,
                              resamples: int = 2000, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval for the median of `values`."""
    idx = rng.integers(0, len(values), size=(resamples, len(values)))
    medians = np.median(values[idx], axis=1)
    tail = (1.0 - level) / 2.0
    return float(np.quantile(medians, tail)), float(np.quantile(medians, 1.0 - tail))


def compare_onnx(paths: Sequence[Path], feed: dict[str, np.ndarray], labels: Sequence[str],
                 rounds: int = 60, warmup: int = 5, threads: int = 1,
                 atol: float = 1e-4, seed: int = 0) -> list[Timing]:
    """Time ONNX files interleaved; the first is the baseline every ratio refers to."""
    sessions = [make_session(p, threads=threads) for p in paths]
    outputs = []
    for sess in sessions:
        names = {i.name for i in sess.get_inputs()}
        outputs.append(sess.run(None, {k: v for k, v in feed.items() if k in names}))
    errors = []
    for out in outputs:
        diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                   for a, b in zip(outputs[0], out))
        errors.append(diff)
    for label, err in zip(labels, errors):
        if err > atol:
            raise AssertionError(f"{label} differs from {labels[0]} by {err:.3g} (> {atol:g}); "
                                 "timing graphs that compute different things proves nothing")
    feeds = []
    for sess in sessions:
        names = {i.name for i in sess.get_inputs()}
        feeds.append({k: v for k, v in feed.items() if k in names})
    for sess, f in zip(sessions, feeds):
        for _ in range(warmup):
            sess.run(None, f)
    n = len(sessions)
    samples = np.zeros((rounds, n))
    for r in range(rounds):
        order = [(r + k) % n for k in range(n)]
        if r % 2:
            order.reverse()
        for i in order:
            start = time.perf_counter()
            sessions[i].run(None, feeds[i])
            samples[r, i] = time.perf_counter() - start
    rng = np.random.default_rng(seed)
    timings = []
    for i, label in enumerate(labels):
        ms = samples[:, i] * 1e3
        ratios = samples[:, i] / samples[:, 0]
        lo, hi = bootstrap_median_interval(ratios, rng) if i else (1.0, 1.0)
        timings.append(Timing(label, float(np.median(ms)), float(np.percentile(ms, 90)),
                              float(np.median(ratios)), lo, hi, errors[i]))
    return timings


def format_table(title: str, timings: Sequence[Timing]) -> str:
    """A Markdown table of one comparison."""
    lines = [f"#### {title}", "",
             "| graph | median ms | p90 ms | ratio to first | 95% interval | max abs vs first |",
             "|---|---:|---:|---:|---|---:|"]
    for t in timings:
        lines.append(f"| {t.label} | {t.median_ms:.3f} | {t.p90_ms:.3f} | {t.ratio:.3f} | "
                     f"[{t.ratio_lo:.3f}, {t.ratio_hi:.3f}] | {t.max_abs_vs_baseline:.2g} |")
    return "\n".join(lines) + "\n"
