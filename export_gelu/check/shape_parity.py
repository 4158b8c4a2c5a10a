"""Parity at every size of the `--dynamic` ranges: MIN, OPT, an odd size between, and MAX.

One export serves every shape, so each is checked the same way as the main run: PyTorch (or
the input ONNX file) against the deployed graph in ONNX Runtime, and against the TensorRT
engine when one was built. The inputs at each size are made by role
(exporter/generated_inputs.py: token ids in the vocabulary, padding masks, …). The report gets
one entry per shape (`dynamic.shapes`), saying which inputs were made and how (`generated`);
a failure at any shape fails the run, naming the shape and the generated inputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx

from export_gelu.check.parity import ParityResult, compare_runners, default_tolerances
from export_gelu.exporter.dynamic import DynamicPlan


def _summary(result: ParityResult) -> dict[str, Any]:
    worst = max((o.max_abs for o in result.outputs.values()), default=float("nan"))
    scale = max((o.ref_scale for o in result.outputs.values()), default=float("nan"))
    return {**result.to_json(), "max_abs": worst, "ref_scale": scale}


def parity_at_sizes(plan: DynamicPlan, loaded: Any, reference_module: Any, deployed: Path,
                    model: onnx.ModelProto, built: Any, precision: str, atol: float | None,
                    rtol: float | None, added: float, threads: int, rep: Any) -> None:
    """Check parity at each of `plan.points()`; record them in `rep.dynamic["shapes"]`."""
    from export_gelu.check.deployed import deployed_feed
    from export_gelu.check.ort_runner import ort_runner
    from export_gelu.check.reference import reference_runner
    from export_gelu.exporter.feeds import generated_inputs, resolve_feed

    d_atol, d_rtol = default_tolerances(precision, added)
    atol = d_atol if atol is None else atol
    rtol = d_rtol if rtol is None else rtol
    shapes = []
    failed: list[tuple[str, ParityResult]] = []
    for label, sizes in plan.points():
        feed = resolve_feed(loaded, plan.specs(sizes), None)
        dep_feed = deployed_feed(feed, model, precision)
        made = generated_inputs(feed)
        entry: dict[str, Any] = {"label": label, "sizes": sizes,
                                 "inputs": {n: list(a.shape) for n, a in dep_feed.items()},
                                 "generated": made}
        for name, how in made.items():
            rep.generated_inputs.setdefault(name, how)
        runners = [("onnxruntime", ort_runner(deployed, threads=threads, name="onnxruntime"))]
        if built is not None:
            from export_gelu.check.trt_runner import trt_runner

            runners.append(("tensorrt", trt_runner(built)))
        for key, runner in runners:
            reference = reference_runner(loaded, reference_module, feed, model, threads)
            result = compare_runners(reference, runner, dep_feed, atol, rtol)
            entry[key] = _summary(result)
            if result.status == "failed":
                where = f"{key} at {label} ({_sizes_text(sizes)})"
                if made:
                    where += f", on generated {', '.join(made)}"
                failed.append((where, result))
        shapes.append(entry)
    rep.dynamic = {**(rep.dynamic or {}), "dims": plan.to_json(), "shapes": shapes}
    if failed and rep.parity.status != "failed":
        where, result = failed[0]
        result.reason = f"{where}: {result.reason}"
        rep.parity = result


def _sizes_text(sizes: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())
