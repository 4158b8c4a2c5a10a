"""Which modules lose the accuracy, measured, and the fewest to keep in float for a target.

Sensitivity: for each module with quantized products, a graph with only that module's
products quantized runs in ONNX Runtime on the feeds; its output SQNR against the fp32
graph is the error that module alone brings (lower: more sensitive).

Mixed precision (`auto_keep`): quantize everything; while the SQNR is under the target,
keep the most sensitive module not yet kept in float, lower again and measure again. It
stops at the target (or when every module is kept) and names the kept modules, which a
TensorRT bundle pins to float (`--layerPrecisions`, `flags.py`). The default target,
30 dB, is an RMS error of about 3% of the outputs' RMS (`metrics.py`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import onnx

from export_gelu.quantize.calibrate import TensorRange
from export_gelu.quantize.lower import Quantized, lower
from export_gelu.quantize.metrics import overall_sqnr
from export_gelu.quantize.placement import QuantPlan, QuantPoint
from export_gelu.quantize.routes import QDQ, QuantRoute
from export_gelu.quantize.runs import run_graph

DEFAULT_TARGET_SQNR_DB = 30.0

Feeds = Sequence[Mapping[str, np.ndarray]]


@dataclass(frozen=True)
class ModuleSensitivity:
    """The error quantizing one module alone brings (output SQNR against fp32)."""

    module: str  # the module path (a product's node name where none is recorded)
    products: int
    sqnr_db: float

    def to_json(self) -> dict[str, object]:
        return {"module": self.module, "products": self.products,
                "sqnr_db": self.sqnr_db if math.isfinite(self.sqnr_db) else "inf"}


@dataclass(frozen=True)
class MixedPrecision:
    """The result of the automatic mode: what is kept, and the SQNR after each step."""

    kept: tuple[str, ...]
    sqnr_db: float
    target_db: float
    steps: tuple[tuple[tuple[str, ...], float], ...]  # (kept so far, SQNR measured)
    quantized: Quantized = field(repr=False)

    @property
    def met(self) -> bool:
        return self.sqnr_db >= self.target_db

    def summary(self) -> str:
        kept = ", ".join(self.kept) if self.kept else "none"
        state = "met" if self.met else "NOT met (every module tried)"
        return (f"mixed precision: target {self.target_db:g} dB {state} at "
                f"{self.sqnr_db:.1f} dB, keeping {len(self.kept)} module(s) in float: {kept}")


def module_key(point: QuantPoint) -> str:
    return point.module or point.node


def _only(plan: QuantPlan, key: str) -> QuantPlan:
    """The plan with only the products of `key` (a module, or a product's node name)."""
    return replace(plan, points=tuple(p for p in plan.points if module_key(p) == key))


def _measure(model: onnx.ModelProto, plan: QuantPlan, ranges: Mapping[str, TensorRange],
             route: QuantRoute, feeds: Feeds, fp32: Feeds) -> tuple[Quantized, float]:
    quantized = lower(model, plan, ranges, route)
    if route.kind != QDQ:
        raise ValueError("sensitivity is measured on explicit Q/DQ graphs (ONNX Runtime runs "
                         "them); the calibration-cache route has none")
    return quantized, overall_sqnr(fp32, run_graph(quantized.model, feeds))


def sensitivity(model: onnx.ModelProto, plan: QuantPlan, ranges: Mapping[str, TensorRange],
                route: QuantRoute, feeds: Feeds, fp32: Feeds | None = None
                ) -> list[ModuleSensitivity]:
    """Each module's SQNR when it alone is quantized, most sensitive first. `fp32`: the fp32
    graph's outputs on `feeds`, when already run."""
    fp32 = fp32 if fp32 is not None else run_graph(model, feeds)
    keys = list(dict.fromkeys(module_key(p) for p in plan.points))
    found = []
    for key in keys:
        only = _only(plan, key)
        _, sqnr = _measure(model, only, ranges, route, feeds, fp32)
        found.append(ModuleSensitivity(key, len(only.points), sqnr))
    return sorted(found, key=lambda s: s.sqnr_db)


def auto_keep(model: onnx.ModelProto, plan: QuantPlan, ranges: Mapping[str, TensorRange],
              route: QuantRoute, feeds: Feeds, *, target_db: float = DEFAULT_TARGET_SQNR_DB,
              ranking: Sequence[ModuleSensitivity] | None = None,
              fp32: Feeds | None = None) -> MixedPrecision:
    """Keep the fewest most-sensitive modules in float until the output SQNR on `feeds`
    reaches `target_db`; every step is measured again, not predicted."""
    fp32 = fp32 if fp32 is not None else run_graph(model, feeds)
    order = list(ranking) if ranking is not None else sensitivity(model, plan, ranges, route,
                                                                  feeds, fp32)
    kept: list[str] = []
    quantized, sqnr = _measure(model, plan, ranges, route, feeds, fp32)
    steps: list[tuple[tuple[str, ...], float]] = [((), sqnr)]
    for entry in order:
        if sqnr >= target_db:
            break
        kept.append(entry.module)
        quantized, sqnr = _measure(model, plan.without(kept), ranges, route, feeds, fp32)
        steps.append((tuple(kept), sqnr))
    return MixedPrecision(tuple(kept), sqnr, target_db, tuple(steps), quantized)
