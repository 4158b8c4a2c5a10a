"""Stages that read what the user pointed at: the model (any format export takes) and the
inputs it runs on (flags, a `.npz`, the model's own examples, or generated)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from export_gelu.check.input_resolver import InputRequest, resolve_inputs
from export_gelu.errors import BadInputError
from export_gelu.exporter.capture.cast_down import cast_down_on_request
from export_gelu.exporter.feeds.dynamic import plan_dynamic, refuse_oversized_points
from export_gelu.exporter.feeds.hf_dims import declared_plan
from export_gelu.exporter.inputs.call_plan import ordered_feed, plan_for
from export_gelu.exporter.loading.load import load_model
from export_gelu.exporter.loading.model_dtype import feed_precision
from export_gelu.exporter.model_files.detect import refuse_missing
from export_gelu.notes import Note, tagged
from export_gelu.options import ExportOptions, FormsOptions
from export_gelu.pipeline.stage import stage_io
from export_gelu.pipeline.state import AnyState, ExportState, need


@stage_io(reads=("checked", "loaded", "model_path", "options"), writes=("loaded",))
def load(state: AnyState) -> None:
    """options, model_path → loaded (unless a model in memory was handed over, or loaded
    once for several runs); the report learns the format and the loader's notes."""
    o = state.options
    if state.loaded is None:
        refuse_missing(state.model_path)  # said before any "loading" progress line
        state.progress.step(f"loading {state.model_path}")
        state.loaded = load_model(
            state.model_path, allow_pickle=o.allow_pickle, model_factory=o.model_factory,
            imports=o.imports, task=o.task, inputs=list(o.inputs),
            inputs_npz=o.inputs_npz if isinstance(o, (ExportOptions, FormsOptions)) else None,
            static=o.static if isinstance(o, ExportOptions) else False,
            sizes_opset=_export_opset(state), sizes_precision=o.precision or "fp32",
            needs_inputs=isinstance(o, (ExportOptions, FormsOptions)) and not (
                o.inputs or o.inputs_npz or state.checked.dynamic))
    if state.loaded.graphs and not isinstance(o, ExportOptions):
        raise BadInputError(f"{state.model_path}: task {state.loaded.task} exports "
                            f"{len(state.loaded.graphs)} graphs; verify and --compare-forms "
                            "take a one-graph task (pass --task, e.g. feature-extraction)")
    state.report.model_format = state.loaded.format.value
    state.report.notes.extend(tagged("loader", state.loaded.notes))
    state.report.task = state.loaded.task or None


def _export_opset(state: AnyState) -> int:
    """The opset the export will be at (`--opset`, else the target's); 0 when unknown (not an
    export: its options have no opset, and its checked profile none)."""
    o, profile = state.options, state.checked.profile
    opset = o.opset if isinstance(o, ExportOptions) else None
    return int(opset or (profile.opset if profile is not None else 0) or 0)


@stage_io(reads=("call_plan", "checked", "dynamic", "loaded", "options", "reference_module",
                "run_precision"),
          writes=("call_plan", "cast", "dynamic", "feeds", "inputs_label", "loaded",
                  "real_inputs", "reference_module", "run_precision"))
def export_inputs(state: ExportState) -> None:
    """loaded, options → dynamic plan, the feed in forward() order, call plan, a float64
    model's cast, the reference module and the precision parity runs in."""
    o, rep = state.options, state.report
    loaded, precision = need(state.loaded, "loaded"), need(o.precision, "precision")
    state.dynamic, specs = plan_dynamic(loaded, state.checked.dynamic, list(o.inputs),
                                        o.inputs_npz)
    if o.verify and state.dynamic.ranged and not o.inputs_npz:
        refuse_oversized_points(state.dynamic)  # before any work, naming the flag typed
    if loaded.dims and not (state.checked.dynamic or o.inputs or o.inputs_npz):
        state.dynamic = declared_plan(loaded.dims, loaded.input_names,
                                      loaded.example_inputs or ())  # a folder graph's dims
    request = (InputRequest(specs=tuple(specs)) if o.inputs or not specs else
               InputRequest.at_size(specs))  # no --input: made at the --dynamic opt sizes
    given = resolve_inputs(loaded, dataclasses.replace(
        request, inputs_file=Path(o.inputs_npz) if o.inputs_npz else None))
    feed = given.feed
    rep.inputs, rep.generated_inputs = given.source, given.generated  # made up: reported
    state.call_plan = plan_for(loaded, list(feed))
    feed = ordered_feed(state.call_plan, feed)
    cast, cast_notes = cast_down_on_request(loaded, precision, o.cast_down)
    if cast:  # the float32 copy is exported; the float64 original stays the reference
        state.loaded, feed = cast.loaded, cast.fit_feed(feed)
    state.cast = cast
    state.feeds = [feed]
    state.inputs_label, state.real_inputs = given.source, given.real
    state.reference_module = (cast.reference if cast else
                              None if loaded.is_onnx else loaded.reference_module())
    notes = tagged("dynamic-plan", state.dynamic.notes)
    if state.call_plan.uses_keywords:
        notes.append(Note(f"the model is called as model({state.call_plan.describe()})",
                          "keyword-call"))
    notes += tagged("cast-down", [cast.note()] if cast else cast_notes)
    state.run_precision = (cast.precision if cast else
                           feed_precision(state.reference_module, precision))
    if state.run_precision == "fp64":
        notes.append(Note("a float64 model: inputs, graph and parity in float64", "float64-model"))
        rep.precision = "fp64"  # what the graph is in, not the fp32 --precision defaults to
    rep.notes.extend(notes)
