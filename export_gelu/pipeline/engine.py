"""The TensorRT stage: an engine built with the installed TensorRT (through polygraphy), or
the reason none is built here."""

from __future__ import annotations

from pathlib import Path

from export_gelu.check.deployed import deployed_feed
from export_gelu.check.trt_runner import build_engine, build_engine_loader, installed_profile
from export_gelu.notes import Note
from export_gelu.pipeline.plan import local_engine_blocker_of
from export_gelu.pipeline.stage import stage_io
from export_gelu.pipeline.state import ExportState, need


@stage_io(reads=("dynamic", "feeds", "graph", "options", "output", "profile"), writes=("engine",))
def trt_build(state: ExportState) -> None:
    """output → engine, built with the installed TensorRT (`builds_engine` says when)."""
    rep, profile, o = state.report, need(state.profile, "profile"), state.options
    output = need(state.output, "output")
    blocker = local_engine_blocker_of(profile)
    builder = installed_profile()
    shapes = {n: tuple(a.shape) for n, a in deployed_feed(state.feed, state.graph).items()}
    state.progress.step("building the TensorRT engine")
    loader = build_engine_loader(output, need(o.precision, "precision"), shapes,
                                 list(need(state.dynamic, "dynamic").axes()),
                                 Path(o.engine) if o.engine else None, builder)
    state.engine = build_engine(loader, output)
    rep.trt = {"status": "built", "reason": "", "engine": str(o.engine) if o.engine else None,
               "tensorrt": builder.trt_version if builder else "?",
               "precision_api": builder.precision_api if builder else "",
               "engine_here": blocker is None}
    if builder is not None and builder.name != profile.name:
        rep.notes.append(Note(f"engine built with the installed TensorRT ({builder.name}); the "
                              f"{profile.name} fit was checked statically", "engine-version"))
    if blocker:
        rep.notes.append(Note(f"no engine of {profile.name} itself here: {blocker}",
                              "engine-version"))
