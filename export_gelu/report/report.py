"""The run report: its JSON keys (docs/report.md), declared once as typed fields (the JSON and
docs/report.schema.json are generated from them: report/json_shape.py, report/schema.py),
and the one-screen summary after a run."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from export_gelu.check.calibration import Calibration
from export_gelu.check.compare_forms import FormsComparison
from export_gelu.check.greedy_decode import DecodeResult
from export_gelu.check.latency import Latency
from export_gelu.check.localize.divergence import Localization
from export_gelu.check.runners.devices import DeviceChoice
from export_gelu.check.verdict.parity import OutputError, ParityResult, skipped
from export_gelu.device.choice import DeviceForms
from export_gelu.notes import Note
from export_gelu.onnx_weights import WrittenWeights
from export_gelu.passes.sites import GeluSite
from export_gelu.report import shapes  # noqa: F401 - the records' JSON shapes, registered
from export_gelu.report.json_shape import JSON, Shape, as_json, register
from export_gelu.report.sections import (
    DynamicSection,
    ProviderEntry,
    QuantSection,
    RecordedOptions,
    ShapeVerdict,
    Trt,
    TrtBuilt,
    TrtNotHere,
    TrtSkipped,
    not_tensorrt,
)
from export_gelu.shown import shown, terminal
from export_gelu.version import __version__

#: The report's JSON layout version (docs/report.schema.json); bumped when a key changes
#: meaning or goes away (keys may be added within a version).
SCHEMA_VERSION = 1


def _doc(text: str) -> dict[str, str]:
    return {"doc": text}


@dataclass(kw_only=True)
class Report:
    """What `--report r.json` writes for export, verify and --compare-forms: everything a run
    found, did and measured (docs/report.md)."""

    tool: Literal["export-gelu"] = "export-gelu"
    version: str = __version__  # export-gelu's
    schema_version: Literal[1] = 1  # SCHEMA_VERSION
    model: str
    model_format: str = ""
    target: str
    target_note: str = field(default="", metadata=_doc("how `trt` was resolved"))
    output: str | None = None
    external_data: str | None = field(default=None, metadata=_doc(
        "the output's .data file, if any"))
    opset: int | None = None
    exporter: str | None = None
    precision: str = "fp32"
    gelu_form: str = "keep"
    gelu_sites: list[GeluSite] = field(default_factory=list)
    op_counts: dict[str, int] = field(default_factory=dict)
    compatibility: dict[str, list[str]] = field(default_factory=dict)
    parity: ParityResult = field(default_factory=lambda: skipped("not run"))
    trt: Trt = field(default_factory=lambda: TrtSkipped("not run"))
    latency: dict[str, Latency] = field(default_factory=dict)
    threads: int = 1
    notes: list[Note] = field(default_factory=list)
    command: Literal["export", "verify", "compare-forms"] = "export"
    inputs: str = field(default="", metadata=_doc(
        "where the inputs came from (spec, file, example inputs)"))
    generated_inputs: dict[str, str] = field(default_factory=dict, metadata=_doc(
        "inputs export-gelu made up (by role), name → how; {} for real data"))
    precision_note: str = field(default="", metadata=_doc(
        "how the precision (and so the default tolerances) was decided"))
    calibration: Calibration | None = field(default=None, metadata=_doc(
        "each GELU site's observed input range"))
    forms: FormsComparison | DeviceForms | None = field(default=None, metadata=_doc(
        "the GELU forms table: --compare-forms / --gelu auto (ONNX Runtime here), or verify "
        "of a bundle of forms on the device (`kind`: device)"))
    stage_seconds: dict[str, float] = field(default_factory=dict, metadata=_doc(
        "wall seconds per step that ran"))
    dynamic: DynamicSection | None = None
    device: DeviceChoice | None = field(default=None, metadata=_doc(
        "where the checks ran ({}: nothing was checked)"))
    providers: dict[str, ProviderEntry] = field(default_factory=dict)
    weights: WrittenWeights | None = field(default=None, metadata=_doc(
        "the weights of a big model, streamed into the output"))
    options: RecordedOptions | None = None
    task: str | None = field(default=None, metadata=_doc(
        "a Hugging Face folder's task, as optimum names it (docs/hf-folders.md); null for "
        "other models"))
    graphs: dict[str, Report] | None = field(default=None, metadata=_doc(
        "a multi-graph export (an encoder-decoder): graph file name → that graph's own "
        "report (the same keys); null for one graph"))
    generation: DecodeResult | None = field(default=None, metadata=_doc(
        "greedy decoding on the written with-past graphs in ONNX Runtime against "
        "transformers' generate; null when not a generation export"))
    written: list[str] = field(default_factory=list, metadata=_doc(
        "every file and folder the run wrote (graphs and their data, engine, bundle, "
        "reports)"))
    #: where the graph starts to differ from PyTorch (check/localize/divergence.py), when localized;
    #: written into `parity` as first_divergence, module_errors, localized_by, localize_note
    divergence: Localization | None = None
    quantization: QuantSection | None = field(default=None, metadata=_doc(
        "--precision int8|fp8 (and verify of a Q/DQ graph): the route, calibration, products "
        "quantized, modules kept, and the verdict against PyTorch at the graph's scales; null "
        "for a float graph"))

    @property
    def exit_code(self) -> int:
        decoded = self.generation is not None and self.generation.status == "failed"
        quantized = self.quantization is not None and self.quantization.passed is False
        return 1 if self.parity.status == "failed" or decoded or quantized else 0

    def to_json(self) -> dict[str, JSON]:
        data: dict[str, JSON] = as_json(self)
        return data

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2) + "\n"

    def summary(self) -> str:
        """A one-screen, plain-text summary: names shown by shown.py's rule, and the whole
        text once more through `terminal`, so no control character reaches the terminal."""
        return terminal(self._summary())

    def _summary(self) -> str:
        if self.command == "verify":
            return self._verify_summary()
        if self.command == "compare-forms" and self.forms is not None:
            return "\n".join([self.forms.table(), *self._calibration_lines()])
        target = self.target_note or self.target
        lines = [f"export-gelu  {self.model}  [{self.model_format}]  →  {target}"]
        kinds: dict[str, int] = {}
        for s in self.gelu_sites:
            kinds[s.kind] = kinds.get(s.kind, 0) + 1
        kind_text = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "none"
        lines.append(f"GELU sites: {len(self.gelu_sites)} ({kind_text})")
        for s in self.gelu_sites[:8]:
            where = shown(s.label)
            lines.append(f"  {where:<38} {s.kind:<6} {shown(s.source)}  →  {shown(s.action, 1000)}")
        if len(self.gelu_sites) > 8:
            lines.append(f"  … and {len(self.gelu_sites) - 8} more (see --report)")
        if self.output:
            extra = f" + {Path(self.external_data).name}" if self.external_data else ""
            lines.append(f"Output: {self.output}{extra}  (opset {self.opset}, "
                         f"{self.exporter} exporter, {self.precision})")
        for target, reasons in self.compatibility.items():
            verdict = "parses as is" if not reasons else "; ".join(reasons)
            lines.append(f"Check: {target}: {verdict}")
        lines.append(self._parity_line())
        if self.quantization is not None:
            lines += self.quantization.lines()
        lines += self._divergence_lines()
        lines += self._generated_lines()
        lines += self._output_lines()
        lines += self._graph_lines()
        lines += self._dynamic_lines()
        lines += self._form_error_lines()
        if isinstance(self.trt, TrtBuilt):
            engine = self.trt.engine or "in memory"
            lines.append(f"TensorRT: engine built ({engine}); parity above includes it")
        elif self.trt.reason != not_tensorrt(self.target):  # no TensorRT line for ORT
            device = f"; {self.trt.device}" if isinstance(self.trt, TrtNotHere) else ""
            lines.append(f"TensorRT: engine build and TensorRT parity skipped: "
                         f"{self.trt.reason}{device}")
        lines += self._latency_lines()
        lines += self._calibration_lines()
        if self.forms is not None:
            lines.append(self.forms.table())
        for note in self.notes:
            lines.append(f"Note: {note}")
        return "\n".join(lines)

    def _generated_lines(self) -> list[str]:
        """On a parity failure: which inputs were made up, and how (not real data)."""
        if self.parity.status != "failed" or not self.generated_inputs:
            return []
        made = "; ".join(f"{shown(n)}: {how}" for n, how in self.generated_inputs.items())
        return [f"  inputs generated, not real data ({made}): values a model never sees in use "
                "may differ with no fault in the export; --inputs FILE.npz of real inputs "
                "tells"]

    def _output_lines(self) -> list[str]:
        lines = []
        for name, out in self.parity.outputs.items():
            mark = "ok  " if out.passed else "FAIL"
            lines.append(f"  {mark} {shown(name)}: max abs {out.max_abs:.3g}, max rel "
                         f"{out.max_rel:.3g}, mean abs {out.mean_abs:.3g}, p99.9 abs "
                         f"{out.p999_abs:.3g} (|ref| ≤ {out.ref_scale:.3g})"
                         + (f", {out.nonfinite} non-finite" if out.nonfinite else "")
                         + _judged_text(out, self.parity))
        return lines

    def _graph_lines(self) -> list[str]:
        """A multi-graph export's graphs, and the greedy-decoding check."""
        lines = []
        for name, rep in (self.graphs or {}).items():
            lines.append(f"  graph {name}: {len(rep.gelu_sites)} GELU site(s), parity "
                         f"{rep.parity.status} ({len(rep.parity.outputs)} outputs)")
        gen = self.generation
        if gen:
            verdict = "same tokens" if gen.status == "passed" else gen.reason
            lines.append(f"Generation: {gen.steps} greedy steps in ONNX Runtime vs "
                         f"transformers' generate: {gen.status.upper()} ({verdict}): "
                         f"{gen.deployed}")
        return lines

    def _dynamic_lines(self) -> list[str]:
        if not self.dynamic:
            return []
        dims = ", ".join(f"{shown(d.name)} {d.min}..{d.max} (opt {d.opt})"
                         for d in self.dynamic.dims)
        lines = [f"Dynamic dims: {dims}"]
        for shape in self.dynamic.shapes:
            sizes = ", ".join(f"{k}={v}" for k, v in shape.sizes.items())
            verdicts = "; ".join(f"{name} {_shape_status(v)} (max abs {v.max_abs:.3g})"
                                 for name, v in (("onnxruntime", shape.onnxruntime),
                                                 ("tensorrt", shape.tensorrt)) if v)
            lines.append(f"  at {shape.label:<4} {sizes}: {verdicts}")
        return lines

    def _form_error_lines(self) -> list[str]:
        """The worst-case error a GELU form change adds, next to the deviation measured."""
        changed = [s for s in self.gelu_sites if s.added_max_error > 0]
        if not changed:
            return []
        added = max(s.added_max_error for s in changed)
        measured = [o.max_abs for o in self.parity.outputs.values()]
        seen = (f"measured end to end: max abs {max(measured):.3g}" if measured
                else "not measured (parity skipped)")
        return [f"GELU form --gelu {self.gelu_form}: {len(changed)} site(s) changed the math, "
                f"adding ≤ {added:.3g} abs each (worst case over the real line); {seen}"]

    def _latency_lines(self) -> list[str]:
        if not self.latency:
            return []
        lines = [f"Latency ({self.threads} thread(s), ms):   median    p90      p99    "
                 "(spread: 95% interval of the median, at least ± the noise floor)"]
        for name, lat in self.latency.items():
            lo, hi = lat.spread_ms
            lines.append(f"  {name:<22} {lat.median_ms:9.3f} {lat.p90_ms:8.3f} {lat.p99_ms:8.3f}"
                         f"   ({lo:.3f}–{hi:.3f}, ±{lat.spread_pct:.1f}%; {lat.iterations} runs"
                         f"{'; the load changed during the run' if lat.drifted else ''})")
        if len(self.latency) == 2:
            (a, la), (b, lb) = self.latency.items()
            ratio = la.median_ms / lb.median_ms
            if la.overlaps(lb):
                verdict = f"{a} and {b} are not told apart from noise"
            elif ratio >= 1:
                verdict = f"{b} is {ratio:.2f}× faster than {a}"
            else:
                verdict = f"{b} is {1 / ratio:.2f}× slower than {a}"
            lines.append(f"  {verdict}")
        return lines

    def _calibration_lines(self) -> list[str]:
        cal = self.calibration
        if cal is None:
            return []
        if not cal.sites:
            return [f"GELU input ranges: not recorded ({cal.reason})"]
        lines = [f"GELU input ranges ({cal.inputs}):"]
        for s in cal.sites[:8]:
            where = shown(s.module or s.name)
            lines.append(f"  {where:<38} [{s.min:.3g}, {s.max:.3g}]  |x|>6: {s.share_abs_gt_6:.2%}"
                         f"  |x|>40: {s.share_abs_gt_40:.2%}")
        if len(cal.sites) > 8:
            lines.append(f"  … and {len(cal.sites) - 8} more (see --report)")
        return lines

    def _verify_summary(self) -> str:
        lines = [f"export-gelu verify  {self.model}  [{self.model_format}]  vs  {self.output}  "
                 f"[{self.target}, {self.precision}]"]
        if self.inputs:
            lines.append(f"Inputs: {self.inputs}")
        if self.precision_note:
            lines.append(f"Precision: {self.precision} ({self.precision_note})")
        lines.append(self._parity_line())
        if self.quantization is not None:
            lines += self.quantization.lines()
        lines += self._divergence_lines()
        lines += self._generated_lines()
        lines += self._output_lines()
        lines += self._latency_lines()
        if self.forms is not None:  # a bundle of GELU forms, judged on the device
            lines.append(self.forms.table())
        lines += self._calibration_lines()
        for note in self.notes:
            lines.append(f"Note: {note}")
        return "\n".join(lines)

    def _divergence_lines(self) -> list[str]:
        return [self.divergence.line()] if self.divergence else []

    def _parity_line(self) -> str:
        p = self.parity
        if p.status == "skipped":
            return f"Parity: skipped ({p.reason})"
        runners = " vs ".join(p.runners)
        head = "PASSED" if p.status == "passed" else "FAILED"
        tail = f" — {p.reason}" if p.reason else ""
        return (f"Parity: {head} ({runners}, atol {p.atol:g}, rtol {p.rtol:g}){tail}"
                + _precision_text(p))


def _shape_status(verdict: ShapeVerdict) -> str:
    """A --dynamic size's verdict; `failed, not judged` when it failed only because the
    reference says nothing there and the graph matched it (nothing diverged)."""
    from export_gelu.check.verdict.parity import over_tolerance

    parity = verdict.parity
    failed = [o for o in parity.outputs.values() if not o.passed]
    if (parity.status == "failed" and failed and parity.nondeterministic is None
            and not any(over_tolerance(o, parity.atol) for o in failed)):
        return "failed, not judged"
    return parity.status


# -- verdicts that mean something: how an output was judged (export_gelu/tolerances.py) --

def _judged_text(out: OutputError, parity: ParityResult) -> str:
    """`, judged at …` when an output was not judged by the plain atol."""
    from export_gelu.tolerances import JUDGED_CONSTANT, JUDGED_OWN_SCALE, JUDGED_ZERO

    text = {JUDGED_OWN_SCALE: f", judged at the reference's own scale (atol "
                              f"{out.judged_atol:.3g}: |ref| is within atol {parity.atol:g} "
                              "of zero)",
            JUDGED_ZERO: ", not judged: the reference is 0 in every element",
            JUDGED_CONSTANT: ", not judged: the reference is the same for different inputs",
            }.get(out.judged, "")
    return text


def _precision_text(parity: ParityResult) -> str:
    """fp16/bf16: the graph's worst error beside PyTorch's own at that precision."""
    block = parity.pytorch_precision
    if not block:
        return ""
    if block["status"] != "measured":
        return f"\n  PyTorch at {block['precision']}: not measured ({block['reason']})"
    pairs = [(n, o.max_abs, o.pytorch_max_abs) for n, o in parity.outputs.items()
             if o.pytorch_max_abs is not None]
    if not pairs:
        return ""
    name, graph, torch_err = max(pairs, key=lambda t: t[1])
    share = (f" and {block['scale_share']:.0%} of the output's scale"
             if block.get("scale_share") else "")
    return (f"\n  {block['precision']}: graph max abs {graph:.3g} vs PyTorch "
            f"{block['precision']} max abs {torch_err:.3g} on {name} (passes within "
            f"{block['multiple']:g}× PyTorch's + {block['floor']:.3g}{share}, or the atol)")


register(Report, Shape(merge={"parity": "divergence"}, empty=frozenset({"device"}),
                       sorted_keys=frozenset({"op_counts"}), rounded={"stage_seconds": 4}))
