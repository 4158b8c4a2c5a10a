"""Calibration statistics: the range of values each GELU site sees on real inputs.

The model is captured with torch.export, its GELU formulas canonicalized (on a copy, so the
reference model is untouched), and the captured graph run through an fx Interpreter that
records the input of every GELU site. Large |x| is where fp16 and the approximations are
at risk: x³ overflows fp16 once |x| > 40.3 (a Pow-based tanh form), and the share beyond ±6
is what a clamp "fix" would silently change.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from export_gelu.exporter.capture.program_copy import copy_program
from export_gelu.json_value import JsonObject
from export_gelu.passes.gelu_constants import SQRT_2_OVER_PI
from export_gelu.passes.sites import GeluSite

if TYPE_CHECKING:
    import torch
    from torch import fx
    from torch.export import ExportedProgram

    from export_gelu.exporter.inputs.call_plan import CallPlan
    from export_gelu.exporter.loading.loaded import LoadedModel

#: Values kept per site for plots (an even subsample); not part of the JSON.
MAX_VALUE_SAMPLES = 50_000


def gelu_exact(x: np.ndarray) -> np.ndarray:
    from math import erf, sqrt

    verf = np.vectorize(erf, otypes=[np.float64])
    return 0.5 * x * (1.0 + verf(x / sqrt(2.0)))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))


def gelu_sigmoid(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-1.702 * x))


def worst_form_error(lo: float, hi: float, points: int = 4001) -> dict[str, float]:
    """Worst |form − exact GELU| over [lo, hi] on a fine grid, per approximate form."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi < lo:
        return {"tanh": float("nan"), "sigmoid": float("nan")}
    x = np.linspace(lo, hi, points)
    exact = gelu_exact(x)
    return {"tanh": float(np.abs(gelu_tanh(x) - exact).max()),
            "sigmoid": float(np.abs(gelu_sigmoid(x) - exact).max())}


@dataclass
class SiteRange:
    """What one GELU site's input looked like over every calibration feed."""

    name: str
    kind: str
    module: str
    count: int
    min: float
    max: float
    mean: float
    std: float
    share_abs_gt_6: float
    share_abs_gt_40: float
    tanh_max_error: float  # worst |tanh form − exact| over [min, max]
    sigmoid_max_error: float  # worst |x·σ(1.702x) − exact| over [min, max]
    samples: np.ndarray = field(default_factory=lambda: np.empty(0, np.float32), repr=False)

    def to_json(self) -> JsonObject:
        data = asdict(self)
        data.pop("samples")
        return data


@dataclass
class Calibration:
    """Per-site input ranges, and what the inputs were."""

    inputs: str  # e.g. "real data from batch.npz (3 feeds)" or "random (--input specs)"
    sites: list[SiteRange] = field(default_factory=list)
    reason: str = ""  # why there are no sites, when there are none

    def to_json(self) -> JsonObject:
        return {"inputs": self.inputs, "reason": self.reason,
                "sites": [s.to_json() for s in self.sites]}


class _Accumulator:
    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.total_sq = 0.0
        self.lo = math.inf
        self.hi = -math.inf
        self.gt6 = 0
        self.gt40 = 0
        self.samples: list[np.ndarray] = []

    def add(self, value: torch.Tensor) -> None:
        x = value.detach().to("cpu").double().numpy().ravel()
        x = x[np.isfinite(x)]
        if x.size == 0:
            return
        self.count += x.size
        self.total += float(x.sum())
        self.total_sq += float(np.square(x).sum())
        self.lo = min(self.lo, float(x.min()))
        self.hi = max(self.hi, float(x.max()))
        ax = np.abs(x)
        self.gt6 += int(np.count_nonzero(ax > 6))
        self.gt40 += int(np.count_nonzero(ax > 40))
        step = max(1, x.size // MAX_VALUE_SAMPLES)
        self.samples.append(x[::step].astype(np.float32))

    def site(self, site: GeluSite) -> SiteRange:
        n = max(self.count, 1)
        mean = self.total / n
        std = math.sqrt(max(self.total_sq / n - mean * mean, 0.0))
        worst = worst_form_error(self.lo, self.hi)
        samples = np.concatenate(self.samples) if self.samples else np.empty(0, np.float32)
        if samples.size > MAX_VALUE_SAMPLES:
            samples = samples[:: samples.size // MAX_VALUE_SAMPLES]
        return SiteRange(site.name, site.kind, site.module, self.count, self.lo, self.hi, mean,
                         std, self.gt6 / n, self.gt40 / n, worst["tanh"], worst["sigmoid"],
                         samples)


def _site_input(node: fx.Node) -> fx.Node | None:
    """The fx node feeding a GELU site: gelu's argument, or QuickGELU's x in x·σ(1.702x)."""
    import torch
    from torch import fx

    if node.target is torch.ops.aten.gelu.default:
        first = node.args[0]
        return first if isinstance(first, fx.Node) else None
    args = [a for a in node.args if isinstance(a, fx.Node)]
    gates = [a for a in args if a.op == "call_function" and "sigmoid" in str(a.target)]
    rest = [a for a in args if a not in gates]
    return rest[0] if len(gates) == 1 and len(rest) == 1 else None


def _capture(loaded: LoadedModel, args: tuple[torch.Tensor, ...], plan: CallPlan | None = None
             ) -> tuple[ExportedProgram | None, str]:
    from export_gelu.exporter.capture.capture import capture

    if loaded.exported is not None:
        from export_gelu.exporter.onnx_export.to_onnx import quiet_exporter

        with quiet_exporter():
            return copy_program(loaded.exported), ""
    module = loaded.reference_module()
    if module is None:
        return None, "the model has no PyTorch module"
    program, why = capture(loaded, module, args, "fp32", plan)
    return program, why or ""


def gelu_input_ranges(loaded: LoadedModel, feeds: Sequence[Mapping[str, np.ndarray]],
                      inputs_label: str) -> Calibration:
    """Each GELU site's observed input range over `feeds` (forward() order), via fx."""
    import torch
    from torch import fx
    from torch.utils._pytree import tree_leaves

    from export_gelu.exporter.onnx_export.to_onnx import quiet_exporter
    from export_gelu.passes.fx.canonicalize import canonicalize_gelus, scalar_constants

    if loaded.is_onnx:
        return Calibration(inputs_label, reason="the model is an ONNX file (no PyTorch graph)")
    args0 = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in feeds[0].values())
    from export_gelu.exporter.inputs.call_plan import plan_for

    program, why = _capture(loaded, args0, plan_for(loaded, list(feeds[0])))
    if program is None:
        return Calibration(inputs_label, reason=f"torch.export capture failed ({why})")
    sites = canonicalize_gelus(program.graph_module, scalar_constants(program))
    if not sites:
        return Calibration(inputs_label, reason="no GELU sites in the model")
    with quiet_exporter():
        gm = program.module()
    by_name = {n.name: n for n in gm.graph.nodes}
    watch: dict[str, list[GeluSite]] = {}
    for site in sites:
        node = by_name.get(site.name)
        source = _site_input(node) if node is not None else None
        if source is not None:
            watch.setdefault(source.name, []).append(site)
    accs = {site.name: _Accumulator() for site in sites}

    class Recorder(fx.Interpreter):
        def run_node(self, n: fx.Node) -> object:
            result = super().run_node(n)
            for site in watch.get(n.name, ()):
                if isinstance(result, torch.Tensor) and result.is_floating_point():
                    accs[site.name].add(result)
            return result

    with torch.no_grad(), quiet_exporter():  # see check/runners/torch_runner.py
        for feed in feeds:
            args = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in feed.values())
            Recorder(gm).run(*tree_leaves(args))
    found = [accs[s.name].site(s) for s in sites if accs[s.name].count]
    missing = len(sites) - len(found)
    reason = f"{missing} site(s) could not be traced to an input value" if missing else ""
    return Calibration(inputs_label, found, reason)
