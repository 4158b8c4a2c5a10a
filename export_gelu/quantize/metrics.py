"""How far a quantized graph's outputs are from fp32's: SQNR, cosine similarity, top-1.

- SQNR (dB) = 10·log10(Σ ref² / Σ (test − ref)²) over every element of every feed: 30 dB is an
  RMS error of about 3% of the output's RMS, 40 dB 1%. Infinite when the outputs agree.
- cosine similarity of the flattened outputs (1.0 is the same direction).
- top-1 agreement, for logits: the share of positions (every index of every axis but the
  last) whose arg-max over the last axis is the same.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

Outputs = Mapping[str, np.ndarray]


def _stack(runs: Sequence[Outputs], name: str) -> np.ndarray:
    return np.concatenate([np.asarray(r[name], dtype=np.float64).ravel() for r in runs])


def sqnr_db(ref: np.ndarray, test: np.ndarray) -> float:
    """10·log10(signal power / noise power); inf when test equals ref, -inf for a zero ref."""
    ref64, test64 = np.asarray(ref, np.float64).ravel(), np.asarray(test, np.float64).ravel()
    noise = float(np.sum((test64 - ref64) ** 2))
    signal = float(np.sum(ref64 ** 2))
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def cosine(ref: np.ndarray, test: np.ndarray) -> float:
    """The cosine of the angle between the flattened outputs (1.0 for two zero outputs)."""
    a, b = np.asarray(ref, np.float64).ravel(), np.asarray(test, np.float64).ravel()
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return 1.0 if na == nb else 0.0
    return float(np.dot(a, b) / (na * nb))


def top1_agreement(ref: np.ndarray, test: np.ndarray) -> float:
    """The share of positions whose arg-max over the last axis agrees."""
    a, b = np.asarray(ref), np.asarray(test)
    if a.ndim == 0 or a.shape[-1] < 2:
        return 1.0
    return float(np.mean(a.argmax(axis=-1) == b.argmax(axis=-1)))


def rms(values: np.ndarray) -> float:
    v = np.asarray(values, np.float64)
    return float(np.sqrt(np.mean(v * v))) if v.size else 0.0


@dataclass(frozen=True)
class OutputQuality:
    """One output of a quantized graph against fp32, over every feed."""

    name: str
    sqnr_db: float
    cosine: float
    top1: float | None  # None unless the output was named as logits
    rms_error: float  # RMS of (test − ref)
    max_abs_error: float

    def to_json(self) -> dict[str, object]:
        return {"sqnr_db": _finite(self.sqnr_db), "cosine": self.cosine, "top1": self.top1,
                "rms_error": self.rms_error, "max_abs_error": self.max_abs_error}


def _finite(value: float) -> float | str:
    return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")


def quality(ref_runs: Sequence[Outputs], test_runs: Sequence[Outputs],
            logits: Sequence[str] = ()) -> dict[str, OutputQuality]:
    """Each float output of `ref_runs` against `test_runs` (one dict per feed, same names)."""
    found: dict[str, OutputQuality] = {}
    for name, first in ref_runs[0].items():
        if not np.issubdtype(np.asarray(first).dtype, np.floating):
            continue
        ref, test = _stack(ref_runs, name), _stack(test_runs, name)
        top1 = None
        if name in logits:
            top1 = float(np.mean([top1_agreement(r[name], t[name])
                                  for r, t in zip(ref_runs, test_runs)]))
        diff = test - ref
        found[name] = OutputQuality(name, sqnr_db(ref, test), cosine(ref, test), top1,
                                    rms(diff), float(np.abs(diff).max()) if diff.size else 0.0)
    return found


def overall_sqnr(ref_runs: Sequence[Outputs], test_runs: Sequence[Outputs]) -> float:
    """The worst per-output SQNR: one number for a graph of several outputs."""
    per = quality(ref_runs, test_runs)
    return min((q.sqnr_db for q in per.values()), default=math.inf)
