"""`export-gelu inspect MODEL.onnx`: the file loaded as every command loads it, then what each
target would make of it."""

from __future__ import annotations

from dataclasses import dataclass

from export_gelu.check.inspection import Fit
from export_gelu.options import InspectOptions
from export_gelu.results.request import Request
from export_gelu.run import Run
from export_gelu.steps.inspect import Census, TargetVerdicts, census, dry_run, require_onnx
from export_gelu.steps.inspect import target_verdicts as judge_targets
from export_gelu.steps.load import load


@dataclass(frozen=True)
class Inspection:
    """inspect's findings; `to_json()` is what `inspect --json` prints and `inspect_model`
    returns."""

    model: str
    census: Census
    verdicts: TargetVerdicts
    after_export: dict[str, Fit] | None  # None: no dry run

    def to_json(self) -> dict[str, object]:
        c, v = self.census, self.verdicts
        info: dict[str, object] = {
            "model": self.model, "opset": c.opset, "ir_version": c.ir_version,
            "op_counts": c.op_counts, "gelu_sites": c.gelu_sites, "nodes": c.nodes,
            "compatibility": v.compatibility, "engine_here": v.engine_here}
        if self.after_export is not None:
            info["after_export"] = self.after_export
        return info


def inspect(request: Request[InspectOptions], run: Run) -> Inspection:
    """The file's census, each target's verdict on it as is, and (`--dry-run`) after
    export-gelu fits it."""
    profiles = request.checked.profiles
    with run.step("load"):
        source = load(request, run)
        graph = require_onnx(source, request.model)
    with run.step("census"):
        found = census(graph, request.model, request.options.nodes)
    with run.step("targets"):
        verdicts = judge_targets(graph, profiles)
    after = None
    if request.options.dry_run:
        with run.step("dry_run"):
            run.say("dry run of the ONNX passes per target")
            after = dry_run(graph, profiles)
    return Inspection(str(request.model), found, verdicts, after)
