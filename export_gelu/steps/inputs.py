"""The inputs an export runs on, from the one input resolver (check/inputs/input_resolver.py): the
feed in forward() order, the `--dynamic` plan, how the model is called, a float64 model's cast
and the precision parity runs in."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from export_gelu.check.inputs.input_resolver import InputRequest, resolve_inputs
from export_gelu.exporter.capture.cast_down import cast_down_on_request
from export_gelu.exporter.feeds.dynamic import plan_dynamic, refuse_oversized_points
from export_gelu.exporter.feeds.hf_dims import declared_plan
from export_gelu.exporter.inputs.call_plan import ordered_feed, plan_for
from export_gelu.exporter.loading.model_dtype import feed_precision
from export_gelu.notes import Note, tagged
from export_gelu.options import ExportOptions
from export_gelu.results.export import ExportInputs, HeldModels
from export_gelu.results.request import OneGraphSource, Request
from export_gelu.run import Run


def export_inputs(source: OneGraphSource, request: Request[ExportOptions], run: Run
                  ) -> ExportInputs:
    """The feed (`--inputs`, `--input`, the `--dynamic` OPT sizes, the model's examples, in
    that order), the dynamic plan, the call plan; a float64 model cast down on request (the
    float32 copy is exported, the float64 original stays the reference)."""
    o, loaded = request.options, source.loaded
    precision = o.precision or "fp32"  # (checked: an export always has one)
    dynamic, specs = plan_dynamic(loaded, request.checked.dynamic, list(o.inputs),
                                  o.inputs_npz)
    if o.verify and dynamic.ranged and not o.inputs_npz:
        refuse_oversized_points(dynamic)  # before any work, naming the flag typed
    if loaded.dims and not (request.checked.dynamic or o.inputs or o.inputs_npz):
        dynamic = declared_plan(loaded.dims, loaded.input_names,
                                loaded.example_inputs or ())  # a folder graph's dims
    asked = (InputRequest(specs=tuple(specs)) if o.inputs or not specs else
             InputRequest.at_size(specs))  # no --input: made at the --dynamic opt sizes
    given = resolve_inputs(loaded, dataclasses.replace(
        asked, inputs_file=Path(o.inputs_npz) if o.inputs_npz else None))
    call_plan = plan_for(loaded, list(given.feed))
    feed = ordered_feed(call_plan, given.feed)
    cast, cast_notes = cast_down_on_request(loaded, precision, o.cast_down)
    exported = loaded
    if cast:  # the float32 copy is exported; the float64 original stays the reference
        exported, feed = cast.loaded, cast.fit_feed(feed)
    reference = (cast.reference if cast else
                 None if loaded.is_onnx else loaded.reference_module())
    notes = tagged("dynamic-plan", dynamic.notes)
    if call_plan.uses_keywords:
        notes.append(Note(f"the model is called as model({call_plan.describe()})",
                          "keyword-call"))
    notes += tagged("cast-down", [cast.note()] if cast else cast_notes)
    run_precision = cast.precision if cast else feed_precision(reference, precision)
    if run_precision == "fp64":
        notes.append(Note("a float64 model: inputs, graph and parity in float64", "float64-model"))
    run.add_notes(notes)
    return ExportInputs(exported, (feed,), given.source, given.real, dict(given.generated),
                        dynamic, call_plan, cast, run_precision,
                        HeldModels((exported, loaded), reference, cast))
