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

`replicas` rotates several sessions per file so that where one session's buffers landed does
not bias a ratio. `compare_calls` is the same timing loop over any zero-argument callables
(a TensorRT engine, a PyTorch CUDA kernel); `compare_onnx(..., providers=["CUDAExecutionProvider"])`
keeps inputs and outputs on the GPU (I/O binding) so that the time is the graph's, not the
PCIe copies'.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from export_gelu.check.runners.ort_runner import make_session


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


def max_abs_difference(reference: Sequence[Any], other: Sequence[Any]) -> float:
    """Largest absolute difference over all outputs (inf when shapes or counts differ)."""
    if len(reference) != len(other):
        return float("inf")
    worst = 0.0
    for a, b in zip(reference, other):
        a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a64.shape != b64.shape:
            return float("inf")
        if a64.size:
            worst = max(worst, float(np.max(np.abs(a64 - b64))))
    return worst


def check_same_outputs(labels: Sequence[str], outputs: Sequence[Sequence[Any]],
                       atol: float) -> list[float]:
    """Each run's max abs difference to the first; raises when one exceeds `atol`."""
    errors = [max_abs_difference(outputs[0], out) for out in outputs]
    for label, err in zip(labels, errors):
        if not err <= atol:
            raise AssertionError(f"{label} differs from {labels[0]} by {err:.3g} (> {atol:g}); "
                                 "timing graphs that compute different things proves nothing")
    return errors


def time_interleaved(calls: Sequence[Callable[[], Any]], rounds: int,
                     warmup: int) -> np.ndarray:
    """Seconds per call, shape (rounds, len(calls)); the order rotates and reverses each round."""
    for call in calls:
        for _ in range(warmup):
            call()
    n = len(calls)
    samples = np.zeros((rounds, n))
    for r in range(rounds):
        order = [(r + k) % n for k in range(n)]
        if r % 2:
            order.reverse()
        for i in order:
            start = time.perf_counter()
            calls[i]()
            samples[r, i] = time.perf_counter() - start
    return samples


class Comparison(list):
    """The `Timing` of each run (a list, first = baseline) plus the raw per-round samples,
    so any two runs can be compared pairwise, not only against the first."""

    def __init__(self, timings: Sequence[Timing], samples: np.ndarray, seed: int = 0,
                 runs: Sequence[Comparison] = ()) -> None:
        super().__init__(timings)
        self.samples = samples
        self.seed = seed
        self.runs = list(runs)  # the fresh runs this one pools (empty: it is one run)

    def position(self, label: str) -> int:
        """The column of the run labelled `label`."""
        return next(i for i, t in enumerate(self) if t.label == label)

    def paired(self, label: str, baseline: str) -> tuple[float, float, float]:
        """Median of per-round time(label) / time(baseline), with its bootstrap 95% interval."""
        ratios = self.samples[:, self.position(label)] / self.samples[:, self.position(baseline)]
        lo, hi = bootstrap_median_interval(ratios, np.random.default_rng(self.seed))
        return float(np.median(ratios)), lo, hi


def pool(runs: Sequence[Comparison]) -> Comparison:
    """Several fresh runs of the same comparison (new sessions each) as one: their rounds
    stacked. Each run stays in `.runs`, so a run-to-run spread can be shown beside the pool."""
    if len(runs) == 1:
        return runs[0]
    labels = [t.label for t in runs[0]]
    errors = [max(r[i].max_abs_vs_baseline for r in runs) for i in range(len(labels))]
    pooled = summarize(np.concatenate([r.samples for r in runs]), labels, errors, runs[0].seed)
    pooled.runs = list(runs)
    return pooled


def summarize(samples: np.ndarray, labels: Sequence[str], errors: Sequence[float],
              seed: int = 0) -> Comparison:
    """Medians, p90 and paired ratios (with bootstrap intervals) to the first column."""
    rng = np.random.default_rng(seed)
    timings = []
    for i, label in enumerate(labels):
        ms = samples[:, i] * 1e3
        ratios = samples[:, i] / samples[:, 0]
        lo, hi = bootstrap_median_interval(ratios, rng) if i else (1.0, 1.0)
        timings.append(Timing(label, float(np.median(ms)), float(np.percentile(ms, 90)),
                              float(np.median(ratios)), lo, hi, errors[i]))
    return Comparison(timings, samples, seed)


def compare_calls(calls: Sequence[Callable[[], Any]], labels: Sequence[str], rounds: int = 60,
                  warmup: int = 5, atol: float = 1e-4, seed: int = 0) -> Comparison:
    """Time callables interleaved after checking their return values agree with the first's.

    Each callable returns its outputs (a sequence of arrays, or of tensors convertible by
    `np.asarray`); the first is the baseline every ratio refers to.
    """
    outputs = [list(_as_arrays(call())) for call in calls]
    errors = check_same_outputs(labels, outputs, atol)
    return summarize(time_interleaved(calls, rounds, warmup), labels, errors, seed)


def _as_arrays(result: Any) -> list[np.ndarray]:
    items = result if isinstance(result, (list, tuple)) else [result]
    out = []
    for item in items:
        if hasattr(item, "detach"):  # a torch tensor, possibly on the GPU
            item = item.detach().float().cpu().numpy()
        elif hasattr(item, "numpy") and not isinstance(item, np.ndarray):  # an OrtValue
            item = item.numpy()
        out.append(np.asarray(item))
    return out


def _ort_call(session: Any, feed: dict[str, np.ndarray], device: str | None) -> Callable:
    """A zero-argument run of `session`; on a GPU, inputs and outputs stay on the device."""
    names = {i.name for i in session.get_inputs()}
    own = {k: v for k, v in feed.items() if k in names}
    if device is None:
        return lambda: session.run(None, own)
    import onnxruntime as ort

    binding = session.io_binding()
    for name, value in own.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, device, 0))
    for out in session.get_outputs():
        binding.bind_output(out.name, device)

    def run() -> list[Any]:
        session.run_with_iobinding(binding)
        return binding.get_outputs()
    return run


def _rotating(calls: Sequence[Callable[[], Any]]) -> Callable[[], Any]:
    """One call that runs `calls` in turn, one per invocation."""
    turn = itertools.cycle(calls)
    return lambda: next(turn)()


def compare_onnx(paths: Sequence[Path], feed: dict[str, np.ndarray], labels: Sequence[str],
                 rounds: int = 60, warmup: int = 5, threads: int = 1,
                 atol: float = 1e-4, seed: int = 0,
                 providers: Sequence[str] | None = None, replicas: int = 1) -> Comparison:
    """Time ONNX files interleaved; the first is the baseline every ratio refers to.

    `providers` (default CPU) is passed to every session; with `CUDAExecutionProvider` first,
    inputs are bound on the GPU once and outputs are left there while timing.

    `replicas` > 1 loads each file into that many sessions, each fed its own copy of the
    inputs, and rotates through them round by round. Two sessions of one file can differ
    by a few percent for as long as they live (where their buffers landed: seen here up to
    ~2% on memory-bound graphs); rotating replicas averages that out of the ratios instead of
    letting one unlucky session bias them.
    """
    providers = list(providers or ["CPUExecutionProvider"])
    device = "cuda" if providers[0] == "CUDAExecutionProvider" else None
    calls = []
    for path in paths:
        runs = [_ort_call(make_session(path, threads=threads, providers=providers),
                          {k: np.array(v, copy=True) for k, v in feed.items()}, device)
                for _ in range(max(1, replicas))]
        calls.append(runs[0] if len(runs) == 1 else _rotating(runs))
    return compare_calls(calls, labels, rounds, warmup * max(1, replicas), atol, seed)


def format_table(title: str, timings: Sequence[Timing]) -> str:
    """A Markdown table of one comparison (a NaN difference prints as "—": not compared).

    A pooled comparison (`pool`) gets a column with each fresh run's own median ratio.
    """
    runs = getattr(timings, "runs", [])
    extra = " | ratio in each fresh run" if runs else ""
    lines = [f"#### {title}", "",
             "| graph | median ms | p90 ms | ratio to first | 95% interval | max abs vs first"
             f"{extra} |", "|---|---:|---:|---:|---|---:|" + ("---|" if runs else "")]
    for i, t in enumerate(timings):
        err = "—" if np.isnan(t.max_abs_vs_baseline) else f"{t.max_abs_vs_baseline:.2g}"
        each = (" | " + " / ".join(f"{r[i].ratio:.3f}" for r in runs)) if runs else ""
        lines.append(f"| {t.label} | {t.median_ms:.3f} | {t.p90_ms:.3f} | {t.ratio:.3f} | "
                     f"[{t.ratio_lo:.3f}, {t.ratio_hi:.3f}] | {err}{each} |")
    return "\n".join(lines) + "\n"
