"""A TensorRT engine of the written graph, built with the installed TensorRT (through
polygraphy)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from export_gelu.check.runners.deployed import deployed_feed
from export_gelu.check.runners.trt_runner import build_engine as build_trt_engine
from export_gelu.check.runners.trt_runner import build_engine_loader, installed_profile
from export_gelu.options import ExportOptions
from export_gelu.results.export import Engine, ExportInputs, SavedGraph
from export_gelu.run import Run
from export_gelu.steps.plan import local_engine_blocker_of

if TYPE_CHECKING:
    pass


def build_engine(saved: SavedGraph, inputs: ExportInputs, options: ExportOptions, run: Run
                 ) -> Engine:
    """The written graph → an engine (`ExportPlan.builds_engine` says when)."""
    profile = saved.profile
    blocker = local_engine_blocker_of(profile)
    builder = installed_profile()
    shapes = {n: tuple(a.shape) for n, a in deployed_feed(inputs.feed, saved.graph).items()}
    run.say("building the TensorRT engine")
    engine_path = Path(options.engine) if options.engine else None
    loader = build_engine_loader(saved.path, options.precision or "fp32", shapes,
                                 list(inputs.dynamic.axes()), engine_path, builder)
    engine = build_trt_engine(loader, saved.path)
    if builder is not None and builder.name != profile.name:
        run.note(f"engine built with the installed TensorRT ({builder.name}); the "
                 f"{profile.name} fit was checked statically", "engine-version")
    if blocker:
        run.note(f"no engine of {profile.name} itself here: {blocker}", "engine-version")
    return Engine(engine, engine_path, builder.trt_version if builder else "?",
                  builder.precision_api if builder else "", blocker is None)
