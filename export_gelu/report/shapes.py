"""The JSON shape of each record the report holds, where it is more than "every field as it
is" (report/json_shape.py): the records' non-JSON payload left out, keys renamed where the
report's JSON has always named them otherwise, read-only properties written too, and the
values a field takes (its Literal) for the schema. Registered once, on import."""

from __future__ import annotations

from typing import Literal

from export_gelu.check.calibration import Calibration, SiteRange
from export_gelu.check.compare_forms import FormRow, FormsComparison
from export_gelu.check.greedy_decode import DecodeResult
from export_gelu.check.latency import Latency
from export_gelu.check.localize.divergence import Localization
from export_gelu.check.localize.ties import WAY_OUT as TIE_WAY_OUT
from export_gelu.check.localize.ties import TieSite
from export_gelu.check.runners.devices import DeviceChoice
from export_gelu.check.verdict.parity import OutputError, ParityResult
from export_gelu.device.choice import DeviceFormRow, DeviceForms
from export_gelu.onnx_weights import WrittenWeights
from export_gelu.passes.sites import GeluSite
from export_gelu.report.json_shape import Shape, register
from export_gelu.report.sections import (
    ProviderEntry,
    RecordedOptions,
    ShapeEntry,
    ShapeVerdict,
    TieOrder,
    TrtBuilt,
    TrtDevice,
    TrtLoaded,
    TrtNotHere,
    TrtSkipped,
)

#: How an output was judged (tolerances.py: JUDGED_*).
JudgedBy = Literal["atol", "reference scale", "zero reference", "constant reference",
                   "pytorch precision"]

def _tie_order(loc: Localization) -> TieOrder | None:
    return TieOrder(loc.tie_cause, loc.ties, TIE_WAY_OUT) if loc.ties else None


register(ParityResult, Shape(
    skip=frozenset({"error_samples", "run_results"}),
    refine={"status": Literal["passed", "failed", "skipped"]},
    doc={"nondeterministic": "the reference differs from itself on the same inputs "
                             "(docs/verify.md, reading a verdict); null: it does not",
         "pytorch_precision": "fp16/bf16: PyTorch's own error at that precision, and the "
                              "rule it set",
         "islands": "an fp16 graph's overflow sites kept in fp32"}))
register(OutputError, Shape(
    refine={"judged": JudgedBy},
    doc={"judged": "the rule that judged this output (docs/verify.md, reading a verdict)",
         "pytorch_max_abs": "PyTorch's own max abs error at the graph's precision "
                            "(fp16/bf16)"}))
register(Localization, Shape(
    rename={"first": "first_divergence", "modules": "module_errors", "method": "localized_by",
            "reason": "localize_note"},
    skip=frozenset({"ties", "tie_cause"}),
    derived={"tie_order": (TieOrder | None, _tie_order)},
    refine={"method": Literal["modules", "nodes", "none"]},
    doc={"first": "where the deployed graph starts to differ from PyTorch: the first module, "
                  "in graph order, whose output is out of tolerance (null: none is)",
         "modules": "each compared module's output error, in graph order",
         "tie_order": "ops fed exact ties that decide their result (null: none was looked "
                      "for, or none found)"}))
register(TieSite, Shape(skip=frozenset({"order"})))
register(Latency, Shape(skip=frozenset({"samples_ms"}),
                        computed=("spread_ms", "spread_pct", "drifted")))
register(GeluSite, Shape(refine={"kind": Literal["exact", "tanh", "quick"],
                                 "level": Literal["fx", "onnx"]},
                         doc={"called_at": "a GELU called in a forward: that forward and the "
                              "line calling it, e.g. 'Net.forward, model.py:18' (empty when "
                              "not recorded)"}))
register(SiteRange, Shape(skip=frozenset({"samples"})))
register(Calibration, Shape())
register(FormRow, Shape(skip=frozenset({"path"}), rename={"ratio": "ratio_to_fastest"}))
register(FormsComparison, Shape(rename={"reference": "reference_latency"}))
register(DeviceFormRow, Shape(rename={"dropped": "warmups_dropped"},
                               computed=("median_ms", "spread_ms", "spread_pct")))
register(DeviceForms, Shape(refine={"kind": Literal["device"]}, computed=("chosen_form",),
                            rename={"chosen_form": "chosen"}))
register(DecodeResult, Shape(
    rename={"reference": "generate", "deployed": "onnxruntime"},
    refine={"status": Literal["passed", "failed", "differs", "skipped"]}))
register(WrittenWeights, Shape(rounded={"seconds": 3}))
register(DeviceChoice, Shape(refine={"device": Literal["cpu", "cuda"]}))
register(ShapeVerdict, Shape(flatten=frozenset({"parity"})))
register(RecordedOptions, Shape(inline="record"))

_BUNDLE = frozenset({"bundle"})  # the key is there once a bundle was written
for _trt in (TrtSkipped, TrtNotHere, TrtLoaded):
    register(_trt, Shape(omit_none=_BUNDLE))
register(TrtBuilt, Shape(omit_none=_BUNDLE | {"parity"}))
register(TrtDevice, Shape(omit_none=frozenset({"device_tensorrt"})))
register(ShapeEntry, Shape(omit_none=frozenset({"onnxruntime", "tensorrt"})))
register(ProviderEntry, Shape(omit_none=frozenset({"parity"})))
